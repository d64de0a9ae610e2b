//! The addon installer against an API server (the sim; a real cluster under
//! PINFLEET_TEST_KUBECONFIG skips what needs the platform's own images):
//! install the set and reach readiness, a second apply changes nothing,
//! upgrade one addon, remove one (pruned), a broken manifest stops before
//! anything is applied, and kubectl sees the CRDs and the platform category.

#[path = "support/kube.rs"]
mod kube_support;

#[path = "support/files.rs"]
mod files;
use files::copy_dir;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kube_support::KubeEnv;
use serde_json::Value;

struct Setup {
    k: KubeEnv,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let k = KubeEnv::start();
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        copy_dir(&root.join("addons"), &dir.path().join("addons"));
        copy_dir(&root.join("clusters"), &dir.path().join("clusters"));
        if !k.real {
            for n in 0..3 {
                // Labelled as kubelet and kubeadm label them: node-0 runs the control plane.
                let role = if n == 0 { ", node-role.kubernetes.io/control-plane: ''" } else { "" };
                k.ok_stdin(
                    &["apply", "-f", "-"],
                    &format!(
                        "apiVersion: v1\nkind: Node\nmetadata: {{name: node-{n}, labels: {{kubernetes.io/os: linux, kubernetes.io/hostname: node-{n}{role}}}}}\n"
                    ),
                );
                k.ok(&[
                    "patch",
                    &format!("node/node-{n}"),
                    "--subresource=status",
                    "--type",
                    "merge",
                    "-p",
                    r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"allocatable":{"cpu":"8","memory":"32Gi","pods":"110"}}}"#,
                ]);
            }
        }
        Setup { k, dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn pinfleet(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_pinfleet"))
            .args(args)
            .args(["--kubeconfig"])
            .arg(&self.k.kubeconfig)
            .env("PINFLEET_CLUSTERS_DIR", self.path("clusters"))
            .env("PINFLEET_ADDONS_DIR", self.path("addons"))
            .env("PINFLEET_HOME", self.path("home"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }

    /// `addons apply dev-local -o json`: the events, asserting success.
    fn apply(&self) -> Vec<Value> {
        let out = self.pinfleet(&["addons", "apply", "dev-local", "--target", "sim", "--timeout", "60s", "-o", "json"]);
        assert!(out.status.success(), "addons apply failed:\n{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// resourceVersion of every object an addon owns.
    fn versions(&self) -> BTreeMap<String, String> {
        let kinds = "crd,clusterrole,clusterrolebinding,priorityclass,serviceaccount,configmap,service,deployment,daemonset,role,rolebinding,pdb";
        let out = self.k.ok(&["get", kinds, "-A", "-l", "pinfleet.dev/addon", "-o", "json"]);
        let list: Value = serde_json::from_str(&out).unwrap();
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                (
                    format!(
                        "{}/{}/{}",
                        o["kind"].as_str().unwrap(),
                        m["namespace"].as_str().unwrap_or(""),
                        m["name"].as_str().unwrap()
                    ),
                    m["resourceVersion"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn edit(&self, rel: &str, from: &str, to: &str) {
        let p = self.path(rel);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.contains(from), "{rel} has no {from:?}");
        std::fs::write(&p, text.replacen(from, to, 1)).unwrap();
    }
}

fn ready_events(events: &[Value]) -> BTreeMap<String, Value> {
    events
        .iter()
        .filter(|e| e["event"] == "ready")
        .map(|e| (e["name"].as_str().unwrap().to_string(), e.clone()))
        .collect()
}

#[test]
fn install_upgrade_prune_and_refuse_broken_manifests() {
    let s = Setup::new();
    if s.k.skip_on_real("the platform's own images (controller, service registrar) are not published to pull") {
        return;
    }
    // Install: every addon ready, in dependency order.
    let events = s.apply();
    let ready = ready_events(&events);
    assert_eq!(ready.len(), 13, "{events:?}");
    assert!(ready.values().all(|r| r["from"].is_null() && r["changed"].as_u64().unwrap() > 0));
    let order: Vec<&str> =
        events.iter().filter(|e| e["event"] == "ready").map(|e| e["name"].as_str().unwrap()).collect();
    let at = |n: &str| order.iter().position(|x| *x == n).unwrap();
    assert!(at("platform-crds") < at("workload-controller") && at("runtime-support") < at("workload-controller"));
    assert!(at("workload-controller") < at("e2e"), "the e2e job comes after the controller that serves its metrics");
    // The pod network before everything else.
    assert_eq!(order[0], "pod-network");
    let deploy = s.k.ok(&[
        "get",
        "deploy",
        "-n",
        "pinfleet-system",
        "pinfleet-controller",
        "-o",
        "jsonpath={.status.availableReplicas}",
    ]);
    assert_eq!(deploy, "2");
    let ds = s.k.ok(&["get", "ds", "-n", "pinfleet-system", "log-agent", "-o", "jsonpath={.status.numberReady}"]);
    assert_eq!(ds, "3");

    // kubectl sees the CRDs and the platform category.
    let crds = s.k.ok(&["get", "crds", "-o", "name"]);
    for k in [
        "pinterestservices",
        "pinterestjobsets",
        "pinterestcronjobs",
        "pinterestdaemons",
        "pinteresttrainingjobs",
        "pintereststatefulsets",
    ] {
        assert!(crds.contains(&format!("{k}.pinfleet.dev")), "{crds}");
    }
    // Categories come from kubectl's discovery cache, which predates the
    // CRDs here; `api-resources` refreshes it, as a user would.
    s.k.ok(&["api-resources"]);
    let out = s.k.kubectl(&["get", "platform", "-A"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // A second apply changes nothing: no resourceVersion moves.
    let before = s.versions();
    assert!(before.len() >= 40, "{before:?}");
    let events = s.apply();
    assert!(ready_events(&events).values().all(|r| r["changed"] == 0), "{events:?}");
    assert_eq!(s.versions(), before);
    let diff = s.pinfleet(&["addons", "diff", "dev-local", "--target", "sim"]);
    assert_eq!(diff.status.code(), Some(0), "{}", String::from_utf8_lossy(&diff.stdout));

    // A values change shows in the diff (exit 2) before it is applied.
    s.edit(
        "clusters/dev-local.yaml",
        "  instanceGroups:",
        "  addons:\n    - {name: monitoring, values: {retention: 30d}}\n  instanceGroups:",
    );
    let diff = s.pinfleet(&["addons", "diff", "dev-local", "--target", "sim"]);
    assert_eq!(diff.status.code(), Some(2));
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(
        text.contains("-        - --storage.tsdb.retention.time=15d\n+        - --storage.tsdb.retention.time=30d"),
        "{text}"
    );

    // Upgrade one addon's version.
    s.edit("addons/log-agent/addon.yaml", "version: 3.2.4", "version: 3.2.5");
    s.edit("addons/log-agent/addon.yaml", "fluent-bit:3.2.4", "fluent-bit:3.2.5");
    let ready = ready_events(&s.apply());
    assert_eq!(ready["log-agent"]["from"], "3.2.4");
    assert_eq!(ready["log-agent"]["version"], "3.2.5");
    assert!(ready["log-agent"]["changed"].as_u64().unwrap() >= 1);
    let image = s.k.ok(&[
        "get",
        "ds",
        "-n",
        "pinfleet-system",
        "log-agent",
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert_eq!(image, "cr.fluentbit.io/fluent/fluent-bit:3.2.5");

    // Remove an addon: its objects are pruned (not its namespace).
    s.edit("clusters/dev-local.yaml", "  addons:\n", "  addons:\n    - {name: service-registrar, enabled: false}\n");
    let events = s.apply();
    let pruned: Vec<String> = events
        .iter()
        .filter(|e| e["event"] == "pruned")
        .map(|e| format!("{}/{}", e["kind"].as_str().unwrap(), e["name"].as_str().unwrap()))
        .collect();
    for o in
        ["DaemonSet/service-registrar", "ClusterRole/pinfleet-service-registrar", "ServiceAccount/service-registrar"]
    {
        assert!(pruned.contains(&o.to_string()), "{pruned:?}");
    }
    assert!(!s.k.kubectl(&["get", "ds", "-n", "pinfleet-system", "service-registrar"]).status.success());
    assert!(s.k.kubectl(&["get", "namespace", "pinfleet-system"]).status.success());

    // A broken manifest: located error, and nothing applied (the log-agent
    // bump in the same run does not land either).
    let before = s.versions();
    s.edit("addons/log-agent/addon.yaml", "fluent-bit:3.2.5", "fluent-bit:3.2.6");
    std::fs::write(
        s.path("addons/monitoring/manifests/zz-extra.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\ndata:\n  a: [1, 2\n",
    )
    .unwrap();
    let out = s.pinfleet(&["addons", "apply", "dev-local", "--target", "sim"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("addon monitoring: ") && err.contains("monitoring/manifests/zz-extra.yaml:"), "{err}");
    assert_eq!(s.versions(), before);
}

#[test]
fn an_unreachable_cluster_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig.yaml");
    std::fs::write(&kc, pinfleet::sim::kubeconfig_for("http://127.0.0.1:9")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pinfleet"))
        .args(["addons", "apply", "dev-local", "--kubeconfig"])
        .arg(&kc)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PINFLEET_HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reaching the API server"), "{err}");
}
