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
    let opts = LoadOptions { known_addons: Some(["monitoring".to_string(), "platform-crds".to_string()].into()) };
    let err = spec::load_source(path, &src, &opts).unwrap_err();
    assert_eq!(
        err.to_string(),
        "tests/fixtures/valid/minimal.yaml:24:7: spec.addons[0].name: no addon package `monitorin` under addons/ (did you mean `monitoring`?)\n\
         tests/fixtures/valid/minimal.yaml:25:7: spec.addons[1].name: no addon package `nothing-like-it` under addons/ (available: monitoring, platform-crds)"
    );
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
