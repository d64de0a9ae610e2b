//! `pinfleet e2e`'s checks against the API (the sim by default, a real
//! cluster under PINFLEET_TEST_KUBECONFIG, unchanged): a healthy cluster
//! passes the cluster phase and the platform smoke and keeps no smoke
//! namespace; a broken addon, a group short of nodes and a runtime profile
//! that breaks injection each fail the right check, with the reason and the
//! objects involved.

#[path = "support/kube.rs"]
mod kube_support;

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube_support::KubeEnv;
use pinfleet::e2e::{self, Outcome, Phase};

/// dev-local's definition with its groups' sizes replaced: `sizes` (group, desired).
fn cluster(sizes: &[(&str, u32)]) -> pinfleet::spec::Cluster {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml");
    let mut c = pinfleet::spec::load_cluster(&path, &Default::default()).unwrap().cluster;
    for g in &mut c.spec.instance_groups {
        let want = sizes.iter().find(|(n, _)| *n == g.name).map(|(_, d)| *d).unwrap_or(0);
        g.min_size = want;
        g.desired = Some(want);
    }
    c
}

/// The platform CRDs, two Ready nodes of dev-local's `general` group on the
/// sim (a real cluster brings its own), and the workload controller.
async fn platform(k: &KubeEnv) -> tokio::task::JoinHandle<()> {
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"]);
    if !k.real {
        for n in ["e2e-node-a", "e2e-node-b"] {
            k.ok_stdin(
                &["apply", "-f", "-"],
                &format!(
                    "apiVersion: v1\nkind: Node\nmetadata: {{name: {n}, labels: {{pinfleet.dev/instance-group: general}}}}\nstatus:\n  allocatable: {{cpu: \"4\", memory: 16Gi, pods: \"110\"}}\n  nodeInfo: {{kubeletVersion: v1.36.2}}\n"
                ),
            );
            k.ok(&[
                "patch",
                &format!("node/{n}"),
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                r#"{"status":{"conditions":[{"type":"Ready","status":"True"}],"allocatable":{"cpu":"4","memory":"16Gi","pods":"110"}}}"#,
            ]);
        }
    }
    let ctx = pinfleet::controller::Ctx::new(k.client().await, "dev-local");
    tokio::spawn(pinfleet::controller::run(ctx))
}

/// Patches pinfleet-system/runtime-support (`kind`: merge or json).
fn patch_runtime_support(k: &KubeEnv, kind: &str, patch: &str) {
    let ns = pinfleet::controller::SYSTEM_NAMESPACE;
    k.ok_cmd(&["patch", "configmap", "-n", ns, "runtime-support", "--type", kind, "-p", patch]);
}

fn opts(phases: &[Phase]) -> e2e::Options {
    e2e::Options { phases: phases.to_vec(), smoke_timeout: Duration::from_secs(60), ..Default::default() }
}

async fn run(k: &KubeEnv, cluster: pinfleet::spec::Cluster, o: &e2e::Options) -> e2e::Report {
    let t = e2e::Target { cluster, client: k.client().await, addons: None };
    e2e::run(&t, o, &|_, _| {}).await
}

fn check<'a>(r: &'a e2e::Report, name: &str) -> &'a e2e::Check {
    r.checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no check {name}: {:#?}", r.checks))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_healthy_cluster_passes_and_the_smoke_namespace_goes() {
    let k = KubeEnv::start();
    if k.skip_without_running_pods() {
        return;
    }
    let controller = platform(&k).await;
    let r = run(&k, cluster(&[]), &opts(&[Phase::Cluster, Phase::Smoke])).await;
    let failed: Vec<_> = r.failures();
    assert!(failed.is_empty(), "{failed:#?}");
    for kind in [
        "PinterestService",
        "PinterestJobSet",
        "PinterestCronJob",
        "PinterestDaemon",
        "PinterestTrainingJob",
        "PinterestStatefulSet",
    ] {
        assert_eq!(check(&r, kind).outcome, Outcome::Pass, "{kind}");
    }
    for name in ["service-endpoints", "budget-refuses-eviction", "jobset-shards", "cleanup"] {
        assert_eq!(check(&r, name).outcome, Outcome::Pass, "{name}");
    }
    let left = Api::<Namespace>::all(k.client().await)
        .list(&ListParams::default().labels(e2e::smoke::NAMESPACE_LABEL))
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "smoke namespaces left: {:?}",
        left.items.iter().map(|n| n.metadata.name.clone()).collect::<Vec<_>>()
    );
    let xml = e2e::junit::render(std::slice::from_ref(&r));
    assert!(xml.contains("<testcase classname=\"dev-local.smoke\" name=\"PinterestService\""), "{xml}");
    // Recorded in the cluster, the run is what the controller's /metrics adds.
    let _ = k.kubectl_cmd(&["create", "namespace", pinfleet::controller::SYSTEM_NAMESPACE]).output();
    e2e::record(&k.client().await, &r).await.unwrap();
    let metrics = pinfleet::e2e::recorded_metrics(&k.client().await).await;
    assert!(
        metrics
            .contains("pinfleet_e2e_check_failed{cluster=\"dev-local\",phase=\"smoke\",check=\"PinterestService\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("pinfleet_e2e_checks_failed{cluster=\"dev-local\"} 0"), "{metrics}");
    controller.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_broken_addon_fails_workloads_ready_naming_it() {
    let k = KubeEnv::start();
    // An addon Deployment whose pods can never be placed.
    k.ok_stdin(
        &["apply", "-n", &k.namespace, "-f", "-"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: broken-agent, labels: {pinfleet.dev/addon: e2e-broken}}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: broken-agent}}\n  template:\n    metadata: {labels: {app: broken-agent}}\n    spec:\n      nodeSelector: {pinfleet.dev/no-such-node: \"true\"}\n      containers: [{name: agent, image: registry.k8s.io/pause:3.10}]\n",
    );
    let r = run(&k, cluster(&[]), &opts(&[Phase::Cluster])).await;
    let Outcome::Fail { reason, objects } = &check(&r, "workloads-ready").outcome else { panic!("{:#?}", r.checks) };
    assert!(reason.contains("not ready"), "{reason}");
    assert!(
        objects.iter().any(|o| o.starts_with(&format!("Deployment {}/broken-agent: ", k.namespace))),
        "{objects:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_group_short_of_nodes_fails_group_sizes() {
    let k = KubeEnv::start();
    let _controller = platform(&k).await;
    let r = run(&k, cluster(&[("general", 50)]), &opts(&[Phase::Cluster])).await;
    let Outcome::Fail { objects, .. } = &check(&r, "group-sizes").outcome else { panic!("{:#?}", r.checks) };
    assert_eq!(objects.len(), 1, "{objects:?}");
    assert!(objects[0].starts_with("general: ") && objects[0].ends_with(" of 50 desired nodes Ready"), "{objects:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runtime_profile_that_breaks_injection_fails_the_smoke() {
    let k = KubeEnv::start();
    let controller = platform(&k).await;
    // A profile version whose document does not parse, named for this run:
    // on a shared cluster another run may hold the namespace and the
    // ConfigMap already, and its own broken version.
    let ns = k.kubectl(&["create", "namespace", pinfleet::controller::SYSTEM_NAMESPACE]);
    assert!(
        ns.status.success() || String::from_utf8_lossy(&ns.stderr).contains("AlreadyExists"),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );
    let version = k.unique("e2e-broken");
    let key = format!("profile-{version}.json");
    let cm = k
        .kubectl_cmd(&["get", "configmap", "-n", pinfleet::controller::SYSTEM_NAMESPACE, "runtime-support"])
        .output()
        .unwrap();
    if !cm.status.success() {
        let made = k.kubectl(&["create", "configmap", "-n", pinfleet::controller::SYSTEM_NAMESPACE, "runtime-support"]);
        assert!(made.status.success() || String::from_utf8_lossy(&made.stderr).contains("AlreadyExists"));
    }
    patch_runtime_support(&k, "merge", &serde_json::json!({"data": {&key: "{\"version\": "}}).to_string());
    let mut o = opts(&[Phase::Smoke]);
    o.smoke_profile = Some(version.clone());
    o.smoke_timeout = Duration::from_secs(20);
    let r = run(&k, cluster(&[]), &o).await;
    let Outcome::Fail { reason, .. } = &check(&r, "PinterestService").outcome else { panic!("{:#?}", r.checks) };
    assert!(reason.contains("Reconciled=False") && reason.contains(&key), "{reason}");
    assert_eq!(check(&r, "cleanup").outcome, Outcome::Pass, "the namespace goes after a failed smoke too");
    patch_runtime_support(
        &k,
        "json",
        &serde_json::json!([{"op": "remove", "path": format!("/data/{key}")}]).to_string(),
    );
    controller.abort();
}
