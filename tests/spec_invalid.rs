//! Every file under tests/fixtures/invalid/ is a broken cluster definition
//! whose trailing `# expect:` lines give the exact located diagnostics
//! pinfleet must report for it — all of them, in order, and nothing else.

use std::path::{Path, PathBuf};

use pinfleet::spec::{self, LoadOptions};

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new("tests/fixtures/invalid");
    spec::load::cluster_files(dir).expect("fixtures folder")
}

fn expected(path: &Path) -> Vec<String> {
    let src = std::fs::read_to_string(path).unwrap();
    let dir = path.parent().unwrap().display().to_string();
    src.lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(|l| l.replace("{file}", &path.display().to_string()).replace("{dir}", &dir))
        .collect()
}

#[test]
fn at_least_25_invalid_fixtures() {
    assert!(fixtures().len() >= 25, "only {} fixtures", fixtures().len());
}

#[test]
fn each_invalid_file_reports_its_exact_located_messages() {
    let mut failures = Vec::new();
    for path in fixtures() {
        let want = expected(&path);
        assert!(!want.is_empty(), "{} has no `# expect:` lines", path.display());
        let got: Vec<String> = match spec::load_cluster(&path, &LoadOptions::default()) {
            Ok(_) => vec!["<loaded without errors>".to_string()],
            Err(d) => d.0.iter().map(ToString::to_string).collect(),
        };
        if got != want {
            failures.push(format!("{}:\n  want: {want:#?}\n  got:  {got:#?}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{} fixture(s) differ:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn unknown_addon_names_are_reported_when_packages_exist() {
    let path = Path::new("tests/fixtures/valid/minimal.yaml");
    let src = std::fs::read_to_string(path).unwrap().replace(
        "  instanceGroups:\n",
        "  addons:\n    - name: monitorin\n    - name: nothing-like-it\n  instanceGroups:\n",
    );
    let opts = LoadOptions {
        known_addons: Some(["monitoring".to_string(), "platform-crds".to_string()].into()),
        ..Default::default()
    };
    let err = spec::load_source(path, &src, &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tests/fixtures/valid/minimal.yaml:24:7: spec.addons[0].name: no addon package `monitorin` under addons/ (did you mean `monitoring`?)\n\
         tests/fixtures/valid/minimal.yaml:25:7: spec.addons[1].name: no addon package `nothing-like-it` under addons/ (available: monitoring, platform-crds)"
    );
}

/// A role's partition is one AWS has (a closed list), and the region's:
/// refused at the role's ARN, where `pinfleet validate` points, rather than
/// by STS at run time.
#[test]
fn a_role_in_a_partition_aws_lacks_or_another_than_the_regions_is_refused_at_its_arn() {
    let path = Path::new("tests/fixtures/valid/minimal.yaml");
    let with_role = |arn: &str| {
        std::fs::read_to_string(path).unwrap().replace(
            "    zones: [us-east-1a, us-east-1b]\n",
            &format!(
                "    zones: [us-east-1a, us-east-1b]\n    account:\n      id: \"222222222222\"\n      roleArn: {arn}\n"
            ),
        )
    };
    let at = "tests/fixtures/valid/minimal.yaml:12:7: spec.cloud.account.roleArn:";
    let all = "aws, aws-cn, aws-us-gov, aws-iso, aws-iso-b, aws-iso-e, aws-iso-f, aws-eusc";
    let cases: Vec<(&str, Option<String>)> = vec![
        ("arn:aws:iam::222222222222:role/pinfleet", None),
        ("arn:aws:iam::222222222222:role/ops/pinfleet", None),
        (
            "arn:aws-mars:iam::222222222222:role/x",
            Some(format!("{at} the role `arn:aws-mars:iam::222222222222:role/x` is in partition `aws-mars`, which AWS does not have (the partitions: {all})")),
        ),
        (
            "arn:awsx:iam::222222222222:role/x",
            Some(format!("{at} the role `arn:awsx:iam::222222222222:role/x` is in partition `awsx`, which AWS does not have (the partitions: {all})")),
        ),
        (
            "arn:aws-cn:iam::222222222222:role/x",
            Some(format!("{at} the role `arn:aws-cn:iam::222222222222:role/x` is in partition aws-cn but region us-east-1 is in partition aws (STS assumes a role only in its own partition)")),
        ),
        (
            "arn:aws-us-gov:iam::222222222222:role/x",
            Some(format!("{at} the role `arn:aws-us-gov:iam::222222222222:role/x` is in partition aws-us-gov but region us-east-1 is in partition aws (STS assumes a role only in its own partition)")),
        ),
    ];
    for (arn, want) in cases {
        let src = with_role(arn);
        assert!(src.contains(&format!("roleArn: {arn}\n")), "{src}");
        let got = spec::load_source(path, &src, &LoadOptions::default()).err().map(|e| e.to_string());
        assert_eq!(got, want, "{arn}");
    }
}

#[test]
fn the_minimal_fixture_is_valid_and_fully_defaulted() {
    let loaded = spec::load_cluster(Path::new("tests/fixtures/valid/minimal.yaml"), &LoadOptions::default()).unwrap();
    let c = &loaded.cluster;
    let cp = &c.spec.instance_groups[0];
    assert_eq!(cp.desired_count(), 1);
    assert_eq!(cp.rollout.max_surge, spec::IntOrPercent::Int(1));
    assert_eq!(cp.rollout.drain_timeout.0, std::time::Duration::from_secs(900));
    assert_eq!(cp.root_volume.size_gib, 64);
    assert!(cp.root_volume.encrypted);
    let nodes = &c.spec.instance_groups[1];
    assert_eq!(nodes.rollout.max_surge, spec::IntOrPercent::Percent(25));
    assert_eq!(nodes.rollout.max_surge.resolve_up(nodes.desired_count()), 1);
    assert_eq!(c.spec.network.pod_cidr.to_string(), "100.96.0.0/11");
    assert_eq!(c.spec.api.port, 6443);
}

#[test]
fn two_files_defining_one_cluster_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string("tests/fixtures/valid/minimal.yaml").unwrap();
    std::fs::write(dir.path().join("a.yaml"), &src).unwrap();
    std::fs::write(dir.path().join("b.yaml"), &src).unwrap();
    let (loaded, problems) = spec::load_paths(&[dir.path().to_path_buf()], &LoadOptions::default());
    assert_eq!(loaded.len(), 2);
    assert_eq!(problems.0.len(), 1);
    let msg = problems.0[0].to_string();
    assert!(
        msg.ends_with(&format!(
            "metadata.name: cluster `minimal` is also defined in {}",
            dir.path().join("a.yaml").display()
        )),
        "{msg}"
    );
    assert!(msg.starts_with(&format!("{}:4:3:", dir.path().join("b.yaml").display())), "{msg}");
}

/// A group of GPU machines following a recipe's channel needs that recipe
/// accelerated, with the stack its machines need; the recipes are read from
/// images/ (here given), so the refusal is located at the group's recipe.
#[test]
fn a_gpu_group_on_a_plain_or_wrong_recipe_is_refused_at_its_recipe() {
    use pinfleet::accelerated::Kind;
    let path = Path::new("tests/fixtures/valid/minimal.yaml");
    let with_recipe = |machine: &str, recipe: &str| {
        std::fs::read_to_string(path).unwrap().replace(
            "      machineType: m6i.large\n      minSize: 2\n      maxSize: 5\n      desired: 3\n      image:\n        selector:\n          owners: [\"099720109477\"]\n          name: \"ubuntu/images/*\"\n",
            &format!("      machineType: {machine}\n      minSize: 2\n      maxSize: 5\n      desired: 3\n      image:\n        recipe: {recipe}\n        channel: stable\n"),
        )
    };
    let opts = LoadOptions {
        recipes: Some(
            [
                ("node".to_string(), None),
                ("gpu".to_string(), Some(Kind::Nvidia)),
                ("inf".to_string(), Some(Kind::Neuron)),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let src = with_recipe("g5.2xlarge", "gpu");
    assert!(src.contains("recipe: gpu"), "{src}");
    spec::load_source(path, &src, &opts).expect("an NVIDIA recipe serves g5");
    spec::load_source(path, &with_recipe("inf2.xlarge", "inf"), &opts).expect("a Neuron recipe serves inf2");
    spec::load_source(path, &with_recipe("m6i.large", "node"), &opts).expect("a plain group needs no accelerator");
    let err = |machine: &str, recipe: &str| {
        spec::load_source(path, &with_recipe(machine, recipe), &opts).unwrap_err().to_string()
    };
    assert_eq!(
        err("g5.2xlarge", "node"),
        "tests/fixtures/valid/minimal.yaml:39:9: spec.instanceGroups[1].image.recipe: recipe `node` is not accelerated: `g5.2xlarge` machines need an image with the NVIDIA driver and nvidia-container-toolkit (nvidia); give the recipe `accelerator: {kind: nvidia, driverVersion: …, runtimeVersion: …}`"
    );
    assert_eq!(
        err("trn1.2xlarge", "gpu"),
        "tests/fixtures/valid/minimal.yaml:39:9: spec.instanceGroups[1].image.recipe: recipe `gpu` bakes the nvidia stack: `trn1.2xlarge` machines need an image with the Neuron driver and runtime (neuron)"
    );
    assert!(err("p5.48xlarge", "missing").contains("image.recipe: no recipe `missing` under images/"));
    // Without the recipes (no images/ folder), nothing is judged.
    spec::load_source(path, &with_recipe("g5.2xlarge", "node"), &LoadOptions::default()).unwrap();
}
