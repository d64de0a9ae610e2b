//! `pinfleet import kops`, the real binary against a kops state store laid
//! out as kops writes it (tests/fixtures/kops: `NAME/config`,
//! `cluster-completed.spec`, `instancegroup/*`, `pki/`, `secrets/`,
//! `backups/etcd/…`): the file it writes is one pinfleet's own validation
//! loads, mapped field by field; what it does not carry is named by path
//! (stderr, the file's header, `-o json`); a folder that is not kops's, a
//! half-deleted cluster and a setting pinfleet cannot honour are refused
//! with nothing written. The same store in S3 (moto) imports the same way.
//! The book's mapping table is the import's own.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pinfleet::spec::{self, LoadOptions, Role, SubnetType};

const KOPS_NAME: &str = "prod.k8s.example.com";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture store (the folder holding `prod.k8s.example.com/`).
fn fixture() -> PathBuf {
    root().join("tests/fixtures/kops")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

/// A copy of the fixture store, to change.
fn store_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), dir.path());
    dir
}

fn state_url(store: &Path) -> String {
    format!("file://{}/{KOPS_NAME}", store.display())
}

/// The real binary, from the repository's root (its addons/ are the
/// packages validation knows).
fn pinfleet(args: &[&str]) -> Output {
    let bin = std::env::var("PINFLEET_TEST_BIN")
        .ok()
        .filter(|b| !b.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_pinfleet").to_string());
    Command::new(bin)
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("PINFLEET_ADDONS_DIR", root().join("addons"))
        .env("PINFLEET_IMAGES_DIR", root().join("images"))
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn ok(args: &[&str]) -> Output {
    let out = pinfleet(args);
    assert!(
        out.status.success(),
        "pinfleet {args:?} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Loads `file` as `pinfleet validate` does (with the addon packages).
fn load(file: &Path) -> spec::Loaded {
    let opts = LoadOptions {
        known_addons: pinfleet::cli::validate::known_addons(&root().join("addons")),
        ..Default::default()
    };
    spec::load_cluster(file, &opts).unwrap_or_else(|d| {
        panic!("{} does not validate:\n{d}\n--- the file\n{}", file.display(), std::fs::read_to_string(file).unwrap())
    })
}

/// The cluster in the fixture, as the file must map it.
fn assert_mapped(c: &spec::Cluster) {
    assert_eq!(c.metadata.name, "prod");
    assert_eq!(c.metadata.annotations.get("pinfleet.dev/kops-name").map(String::as_str), Some(KOPS_NAME));
    assert_eq!(c.spec.cloud.region, "us-east-1");
    assert_eq!(c.spec.cloud.zones, ["us-east-1a", "us-east-1b", "us-east-1c"]);
    assert_eq!(c.spec.kubernetes_version, "1.33.4");
    let net = &c.spec.network;
    assert_eq!(net.vpc_cidr.to_string(), "172.20.0.0/16");
    assert_eq!(
        (net.pod_cidr.to_string(), net.service_cidr.to_string()),
        ("100.96.0.0/11".into(), "100.64.0.0/13".into())
    );
    let subnets: Vec<(&str, &str, String, SubnetType)> =
        net.subnets.iter().map(|s| (s.name.as_str(), s.zone.as_str(), s.cidr.to_string(), s.kind)).collect();
    assert_eq!(subnets.len(), 6);
    assert_eq!(subnets[0], ("us-east-1a", "us-east-1a", "172.20.32.0/19".into(), SubnetType::Private));
    assert_eq!(subnets[3], ("utility-us-east-1a", "us-east-1a", "172.20.0.0/22".into(), SubnetType::Public));
    // kops's API endpoint: its port, a public network load balancer, its name.
    let api = &c.spec.api;
    assert_eq!(api.port, 443);
    assert_eq!(api.load_balancer.kind, spec::ApiEndpointKind::Network);
    assert_eq!(api.load_balancer.scheme, spec::LoadBalancerScheme::InternetFacing);
    assert_eq!(api.allowed_cidrs.iter().map(ToString::to_string).collect::<Vec<_>>(), ["0.0.0.0/0"]);
    assert_eq!(api.dns_name.as_deref(), Some("api.prod.k8s.example.com"));
    // etcd-manager kept 90 days of backups.
    assert_eq!(c.spec.etcd.backups.keep_daily.0, std::time::Duration::from_secs(90 * 24 * 3600));

    let groups: Vec<(&str, Role, u32, u32)> =
        c.spec.instance_groups.iter().map(|g| (g.name.as_str(), g.role, g.min_size, g.max_size)).collect();
    assert_eq!(
        groups,
        [
            ("control-plane-us-east-1a", Role::ControlPlane, 1, 1),
            ("control-plane-us-east-1b", Role::ControlPlane, 1, 1),
            ("control-plane-us-east-1c", Role::ControlPlane, 1, 1),
            ("batch", Role::Node, 0, 20),
            ("nodes", Role::Node, 3, 12),
        ]
    );
    let group = |name: &str| c.spec.instance_groups.iter().find(|g| g.name == name).unwrap();
    let cp = group("control-plane-us-east-1b");
    assert_eq!(cp.machine_type, "m6i.large");
    assert_eq!(cp.subnets, ["us-east-1b"]);
    let selector = cp.image.selector.as_ref().expect("kops's OWNER/NAME is a selector");
    assert_eq!(selector.owners, ["099720109477"]);
    assert_eq!(selector.name, "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610");
    assert_eq!(selector.architecture, spec::Architecture::X86_64);
    assert_eq!(cp.root_volume.size_gib, 64, "kops's default for a control plane");
    assert_eq!((cp.rollout.max_surge.to_string(), cp.rollout.max_unavailable.to_string()), ("0".into(), "1".into()));
    assert_eq!(cp.cloud_labels.get("team").map(String::as_str), Some("cloud-platform"));

    let nodes = group("nodes");
    assert_eq!(nodes.machine_type, "m6i.xlarge");
    assert_eq!(nodes.subnets, ["us-east-1a", "us-east-1b", "us-east-1c"]);
    assert_eq!(nodes.labels.get("example.com/pool").map(String::as_str), Some("general"));
    assert_eq!(nodes.labels.get("kops.k8s.io/instancegroup").map(String::as_str), Some("nodes"));
    assert_eq!(nodes.root_volume.size_gib, 100);
    assert_eq!(nodes.rollout.max_surge.to_string(), "25%");

    let batch = group("batch");
    assert_eq!(batch.taints.len(), 1);
    assert_eq!(batch.taints[0].to_string(), "example.com/batch=true:NoSchedule");
    assert_eq!(batch.root_volume.size_gib, 128, "kops's default for nodes");
    assert_eq!(batch.cloud_labels.get("cost-center").map(String::as_str), Some("batch"), "the group's own tag wins");
    let capacity = batch.capacity.as_ref().expect("the mixed instances policy");
    assert_eq!(capacity.market, spec::MarketSpec::Spot);
    assert_eq!(capacity.types, ["c6a.2xlarge", "c5.2xlarge", "c5a.2xlarge", "c7i.2xlarge"]);
}

#[test]
fn a_kops_cluster_imports_to_a_file_pinfleet_validates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("clusters/prod.yaml");
    let run = ok(&[
        "import",
        "kops",
        "--state",
        &state_url(&fixture()),
        "--owner",
        "cloud-platform",
        "--out",
        out.to_str().unwrap(),
    ]);
    let loaded = load(&out);
    assert_mapped(&loaded.cluster);
    assert_eq!(loaded.cluster.spec.owner, "cloud-platform");
    assert_eq!(loaded.cluster.spec.state_store, format!("file://{}/pinfleet", fixture().display()));

    // Every setting not carried is named, located, on stderr and in the file.
    let stderr = text(&run.stderr);
    let file = std::fs::read_to_string(&out).unwrap();
    let config = format!("{}/config", state_url(&fixture()));
    // (line, path): a field is found at its key, a list's item where it starts.
    for (line, path) in [
        (54, "spec.kubeProxy"),
        (36, "spec.etcdClusters[1]"),
        (60, "spec.kubernetesApiAccess[1]"),
        (66, "spec.networking.cilium.enableNodePort"),
    ] {
        let at = format!("warning: {config}:{line}:");
        assert!(
            stderr.lines().any(|l| l.starts_with(&at) && l.contains(&format!(": {path}: "))),
            "stderr lacks `{at}…: {path}: …`:\n{stderr}"
        );
        assert!(file.contains(&format!("config {path}: ")), "the file's header lacks {path}:\n{file}");
    }
    assert!(stderr.contains(&format!("warning: {config}:54:3: spec.kubeProxy: pinfleet runs")), "{stderr}");
    for folder in ["pki/", "secrets/", "backups/etcd/main/", "backups/etcd/events/"] {
        let line = format!("warning: {}/{folder}: ", state_url(&fixture()));
        assert!(stderr.contains(&line), "stderr lacks `{line}`:\n{stderr}");
    }
    assert!(stderr.contains(&format!("wrote {}", out.display())), "{stderr}");
    // kops's bookkeeping and what it renders from the spec are not news.
    for quiet in [
        ": metadata.creationTimestamp: ",
        ": spec.configBase: ",
        ": spec.nodeLabels: ",
        "/addons/: ",
        "/kops-version.txt: ",
    ] {
        assert!(!stderr.contains(quiet), "`{quiet}` is warned:\n{stderr}");
    }
}

#[test]
fn json_names_every_setting_not_carried_by_its_kops_path() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prod.yaml");
    let run = ok(&["import", "kops", "--state", &state_url(&fixture()), "--out", out.to_str().unwrap(), "-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&run.stdout).expect("one JSON object");
    assert_eq!(v["cluster"].as_str(), Some(std::fs::read_to_string(&out).unwrap().as_str()));
    let unmapped = v["unmapped"].as_array().expect("unmapped");
    for u in unmapped {
        assert!(u["path"].as_str().is_some_and(|p| !p.is_empty()), "{u}");
        assert!(u["why"].as_str().is_some_and(|w| w.len() > 10), "{u}");
    }
    let named = |object: &str, path: &str| unmapped.iter().any(|u| u["object"] == object && u["path"] == path);
    for (object, path) in [
        ("config", "spec.channel"),
        ("config", "spec.dnsZone"),
        ("config", "spec.sshAccess"),
        ("config", "spec.topology.dns"),
        ("config", "spec.kubeProxy"),
        ("config", "spec.etcdClusters[0].cpuRequest"),
        ("config", "spec.etcdClusters[0].etcdMembers[2].encryptedVolume"),
        ("config", "spec.etcdClusters[1]"),
        ("instancegroup/control-plane-us-east-1a", "spec.instanceMetadata"),
        ("instancegroup/batch", "spec.mixedInstancesPolicy.spotAllocationStrategy"),
        ("state store", "pki/"),
        ("state store", "backups/etcd/main/"),
    ] {
        assert!(named(object, path), "{object} {path} is not named: {unmapped:#?}");
    }
    // Named once each, and nothing kops only keeps for itself.
    let mut keys: Vec<String> = unmapped.iter().map(|u| format!("{} {}", u["object"], u["path"])).collect();
    let all = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), all, "a setting named twice: {keys:#?}");
    assert!(!named("config", "metadata.creationTimestamp") && !named("state store", "addons/"));
    // Without --owner, the owner is a placeholder the notes say.
    let notes = v["notes"].as_array().unwrap();
    assert!(notes.iter().any(|n| n.as_str().is_some_and(|n| n.starts_with("spec.owner: "))), "{notes:?}");
    assert_eq!(load(&out).cluster.spec.owner, "unassigned");
}

#[test]
fn without_out_the_file_is_printed() {
    let run = ok(&["import", "kops", "--state", &state_url(&fixture()), "--name", "prod-use1"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("printed.yaml");
    std::fs::write(&file, &run.stdout).unwrap();
    assert_eq!(load(&file).cluster.metadata.name, "prod-use1");
}

/// Each case: how the fixture store is changed, and what the refusal says.
#[test]
fn what_pinfleet_cannot_honour_is_refused_and_nothing_is_written() {
    let edit = |store: &Path, from: &str, to: &str| {
        let path = store.join(KOPS_NAME).join("config");
        let config = std::fs::read_to_string(&path).unwrap();
        assert!(config.contains(from), "the fixture has `{from}`");
        std::fs::write(&path, config.replace(from, to)).unwrap();
    };
    type Change = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Change, Vec<&str>)> = vec![
        (
            "a folder that is not kops's",
            Box::new(|store: &Path| {
                std::fs::remove_dir_all(store.join(KOPS_NAME)).unwrap();
                std::fs::create_dir_all(store.join(KOPS_NAME).join("history")).unwrap();
                std::fs::write(store.join(KOPS_NAME).join("spec.json"), "{}").unwrap();
            }) as Change,
            vec!["is not a kops cluster", "no `config` nor `cluster-completed.spec`"],
        ),
        (
            "a half-deleted cluster",
            Box::new(|store: &Path| std::fs::remove_dir_all(store.join(KOPS_NAME).join("instancegroup")).unwrap())
                as Change,
            vec!["no instance groups", "half deleted"],
        ),
        (
            "another pod network",
            Box::new(move |store: &Path| edit(store, "    cilium:\n      enableNodePort: true\n", "    calico: {}\n"))
                as Change,
            vec!["/config:65:5: spec.networking.calico: ", "Cilium", "nothing was written"],
        ),
        (
            "another cloud",
            Box::new(move |store: &Path| edit(store, "cloudProvider: aws", "cloudProvider: gce")) as Change,
            vec!["/config:17:3: spec.cloudProvider: ", "AWS only"],
        ),
        (
            "IAM roles for service accounts",
            Box::new(move |store: &Path| {
                edit(store, "  iam:\n", "  iam:\n    useServiceAccountExternalPermissions: true\n")
            }) as Change,
            vec!["spec.iam.useServiceAccountExternalPermissions: "],
        ),
        (
            "scripts on the machines",
            Box::new(|store: &Path| {
                let path = store.join(KOPS_NAME).join("instancegroup/nodes");
                let mut ig = std::fs::read_to_string(&path).unwrap();
                ig.push_str("  additionalUserData:\n  - name: hello.sh\n    type: text/x-shellscript\n    content: echo hello\n");
                std::fs::write(&path, ig).unwrap();
            }) as Change,
            vec!["/instancegroup/nodes:24:3: spec.additionalUserData: "],
        ),
    ];
    for (what, change, says) in cases {
        let store = store_copy();
        change(store.path());
        let out = store.path().join("clusters/prod.yaml");
        let run = pinfleet(&["import", "kops", "--state", &state_url(store.path()), "--out", out.to_str().unwrap()]);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{what}: not refused:\n{stderr}");
        for s in says {
            assert!(stderr.contains(s), "{what}: the refusal lacks `{s}`:\n{stderr}");
        }
        assert!(!out.exists(), "{what}: {} was written", out.display());
        assert!(!out.parent().unwrap().exists(), "{what}: the import made its folder");
        assert!(text(&run.stdout).is_empty(), "{what}: printed {}", text(&run.stdout));
    }
}

#[test]
fn an_existing_file_is_kept_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("prod.yaml");
    std::fs::write(&out, "# mine\n").unwrap();
    let state = state_url(&fixture());
    let run = pinfleet(&["import", "kops", "--state", &state, "--out", out.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1));
    assert!(text(&run.stderr).contains("--force"), "{}", text(&run.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "# mine\n");
    ok(&["import", "kops", "--state", &state, "--out", out.to_str().unwrap(), "--force"]);
    load(&out);
}

#[test]
fn the_books_mapping_table_is_the_imports_own() {
    let page = std::fs::read_to_string(root().join("docs/src/coming-from-kops.md")).unwrap();
    let (start, end) = ("<!-- mapping:start -->\n", "<!-- mapping:end -->");
    let from = page.find(start).expect("the page has <!-- mapping:start -->") + start.len();
    let to = page[from..].find(end).expect("the page has <!-- mapping:end -->") + from;
    let table = pinfleet::adopt::kops::mapping_markdown();
    assert!(
        page[from..to] == table,
        "docs/src/coming-from-kops.md's table is not the import's: replace what is between its markers with \
         the output of `pinfleet import kops --mapping`"
    );
    assert_eq!(text(&ok(&["import", "kops", "--mapping"]).stdout), table);
}

/// The same store in S3 (moto), read through the state store's S3 client.
#[tokio::test(flavor = "multi_thread")]
async fn a_kops_state_store_in_s3_imports_the_same() {
    let w = support::World::new("kops-import", 1);
    let aws = w.aws().await;
    let bucket = format!("kops-state-{}", w.account);
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let mut files = Vec::new();
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    walk(&fixture(), &mut files);
    for f in &files {
        let key = f.strip_prefix(fixture()).unwrap().to_string_lossy().replace('\\', "/");
        let body = aws_sdk_s3::primitives::ByteStream::from(std::fs::read(f).unwrap());
        aws.s3.put_object().bucket(&bucket).key(&key).body(body).send().await.unwrap();
    }
    let out = w.dir.path().join("imported/prod.yaml");
    let state = format!("s3://{bucket}/{KOPS_NAME}");
    let run = w.run(&["import", "kops", "--state", &state, "--out", out.to_str().unwrap()]);
    assert!(run.status.success(), "import from S3 failed:\n{}", support::stderr(&run));
    let loaded = load(&out);
    assert_mapped(&loaded.cluster);
    assert_eq!(loaded.cluster.spec.state_store, format!("s3://{bucket}/pinfleet"));
    let stderr = support::stderr(&run);
    assert!(stderr.contains(&format!("warning: {state}/config:54:3: spec.kubeProxy: ")), "{stderr}");
    assert!(stderr.contains(&format!("warning: {state}/pki/: ")), "{stderr}");

    // A bucket without the cluster: not kops's, nothing written.
    let other = w.dir.path().join("imported/other.yaml");
    let run = w.run(&[
        "import",
        "kops",
        "--state",
        &format!("s3://{bucket}/other.example.com"),
        "--out",
        other.to_str().unwrap(),
    ]);
    assert_eq!(run.status.code(), Some(1));
    assert!(support::stderr(&run).contains("is not a kops cluster"), "{}", support::stderr(&run));
    assert!(!other.exists());
}
