//! Kubernetes versions, as a user meets them: `pinfleet validate` warns on
//! a minor out of upstream support and refuses one pinfleet cannot run or
//! an addon does not support; the sim answers as the minor it is started
//! for (its `/version`, its kubelets, its rules).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn pinfleet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pinfleet")).args(args).output().unwrap()
}

/// A clusters folder with the repository's bases and dev-local at `version`.
fn clusters_at(dir: &Path, version: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(dir.join("bases")).unwrap();
    for e in std::fs::read_dir(root.join("clusters/bases")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("bases").join(e.file_name())).unwrap();
    }
    let dev = std::fs::read_to_string(root.join("clusters/dev-local.yaml")).unwrap();
    let dev = dev.replace(
        "spec:\n  owner: cloud-platform\n",
        &format!("spec:\n  owner: cloud-platform\n  kubernetesVersion: \"{version}\"\n"),
    );
    std::fs::write(dir.join("dev-local.yaml"), dev).unwrap();
}

fn validate(clusters: &Path, addons: &Path) -> (Option<i32>, String) {
    let out =
        pinfleet(&["validate", "--clusters-dir", clusters.to_str().unwrap(), "--addons-dir", addons.to_str().unwrap()]);
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn addons() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("addons")
}

#[test]
fn validate_warns_on_a_minor_out_of_support_and_refuses_one_it_cannot_run() {
    let d = tempfile::tempdir().unwrap();
    clusters_at(d.path(), "1.33.4");
    let (code, err) = validate(d.path(), &addons());
    assert_eq!(code, Some(0), "valid, with a warning: {err}");
    assert!(
        err.contains("warning: ")
            && err.contains("spec.kubernetesVersion: Kubernetes 1.33 left upstream support on 2026-06-28 (judged on "),
        "{err}"
    );
    assert!(err.contains("the newest minor is 1.37: `pinfleet upgrade` climbs one minor at a time"), "{err}");

    let d = tempfile::tempdir().unwrap();
    clusters_at(d.path(), "1.29.9");
    let (code, err) = validate(d.path(), &addons());
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("spec.kubernetesVersion: Kubernetes 1.29.9 is not a version pinfleet can run (it runs 1.30 to 1.37; new clusters get 1.36.2)"),
        "{err}"
    );

    // In support: nothing to say.
    let d = tempfile::tempdir().unwrap();
    clusters_at(d.path(), pinfleet::spec::versions::DEFAULT);
    let (code, err) = validate(d.path(), &addons());
    assert_eq!(code, Some(0), "{err}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn validate_refuses_a_minor_an_addon_does_not_support() {
    let d = tempfile::tempdir().unwrap();
    let clusters = d.path().join("clusters");
    clusters_at(&clusters, "1.36.2");
    // The repository's addons, one of which declares it stops at 1.35.
    let addons_dir = d.path().join("addons");
    let copy = Command::new("cp").args(["-r"]).arg(addons()).arg(&addons_dir).status().unwrap();
    assert!(copy.success());
    let meta = addons_dir.join("metrics-server/addon.yaml");
    let text = std::fs::read_to_string(&meta)
        .unwrap()
        .replace("kubernetes: {min: \"1.19\"}", "kubernetes: {min: \"1.19\", max: \"1.35\"}");
    std::fs::write(&meta, text).unwrap();
    let (code, err) = validate(&clusters, &addons_dir);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "spec.kubernetesVersion: addon metrics-server: supports Kubernetes 1.19 to 1.35; the cluster runs 1.36.2"
        ),
        "{err}"
    );
}

/// `pinfleet sim` on a free port; killed on drop.
struct SimProcess {
    child: std::process::Child,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sim(extra: &[&str]) -> SimProcess {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    let child = Command::new(env!("CARGO_BIN_EXE_pinfleet"))
        .args(["sim", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..400 {
        if kubeconfig.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(kubeconfig.exists(), "the sim wrote no kubeconfig");
    SimProcess { child, kubeconfig, _dir: dir }
}

fn kubectl(s: &SimProcess, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &s.kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl is installed");
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_sim_answers_as_the_minor_it_is_started_for() {
    const SERVICE: &str = "apiVersion: v1\nkind: Service\nmetadata: {name: 1web}\nspec: {ports: [{port: 80}]}\n";
    for (version, digit_names) in [("1.36.2", true), ("1.35.4", false)] {
        let s = sim(&["--kubernetes-version", version, "--nodes", "1"]);
        let out = kubectl(&s, &["version", "-o", "json"], None);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["serverVersion"]["gitVersion"], format!("v{version}"), "{v}");
        assert_eq!(v["serverVersion"]["minor"], version.split('.').nth(1).unwrap());
        let nodes = kubectl(&s, &["get", "nodes", "-o", "jsonpath={.items[*].status.nodeInfo.kubeletVersion}"], None);
        assert_eq!(String::from_utf8_lossy(&nodes.stdout), format!("v{version}"));
        // 1.36 accepts a Service name that starts with a digit; 1.35 refuses it with its own message.
        let out = kubectl(&s, &["create", "--dry-run=server", "-f", "-"], Some(SERVICE));
        assert_eq!(out.status.success(), digit_names, "{version}: {}", String::from_utf8_lossy(&out.stderr));
        if !digit_names {
            assert!(String::from_utf8_lossy(&out.stderr).contains("a DNS-1035 label must consist"));
        }
    }
    // A version the sim cannot answer as is refused at the start.
    let out = pinfleet(&["sim", "--kubernetes-version", "1.36"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("--kubernetes-version 1.36 is not a version like 1.36.2 (the newest patch of 1.36 is 1.36.2)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_cloud_controller_and_autoscaler_follow_the_clusters_minor() {
    let d = tempfile::tempdir().unwrap();
    clusters_at(d.path(), "1.35.4");
    let out = pinfleet(&[
        "addons",
        "render",
        "dev-local",
        "--addon",
        "cloud-controller",
        "--clusters-dir",
        d.path().to_str().unwrap(),
        "--addons-dir",
        addons().to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("image: registry.k8s.io/provider-aws/cloud-controller-manager:v1.35.0"), "{text}");
}

/// The book's versions table (its "Kubernetes versions" chapter, once the
/// README's) is the code's (issue 47: the two had drifted). Between its
/// markers it is exactly `spec::versions::markdown_table()`.
#[test]
fn the_books_versions_table_is_the_codes() {
    let chapter = "docs/src/kubernetes-versions.md";
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(chapter)).unwrap();
    let (begin, end) =
        ("<!-- versions table: generated from src/spec/versions.rs -->\n", "<!-- end of versions table -->");
    let start = text.find(begin).expect("the chapter marks its versions table") + begin.len();
    let stop = start + text[start..].find(end).expect("the chapter ends its versions table");
    let want = pinfleet::spec::versions::markdown_table();
    assert_eq!(
        &text[start..stop],
        want,
        "{chapter}'s versions table differs from the code's; put this between its markers:\n{want}"
    );
}
