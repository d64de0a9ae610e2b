//! Federation across three sims, each running the workload controller:
//! apply splits the app, a member that fails is excluded and its replicas
//! move to the others, and after it recovers they move back only with
//! --rebalance, whichever operator runs the next apply (the failover memory
//! is in the state store, not a home folder).

#[path = "support/kube.rs"]
mod kube_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kube::api::Api;

/// A sim with two Ready nodes, the CRDs and a workload controller.
fn member(dir: &Path, name: &str) -> PathBuf {
    let kc = dir.join("kubeconfigs").join(format!("{name}.yaml"));
    std::fs::create_dir_all(kc.parent().unwrap()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (p, n) = (kc.clone(), name.to_string());
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async move {
            let mut inner = pinfleet::sim::Inner::new();
            for i in 0..2 {
                pinfleet::sim::nodes::declare(
                    &mut inner,
                    &pinfleet::sim::nodes::NodeSpec::simple(&format!("{n}-node-{i}")),
                );
            }
            let sim = pinfleet::sim::Sim::start_with(0, inner, Default::default()).await.unwrap();
            sim.write_kubeconfig(&p).unwrap();
            let crds = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("addons/platform-crds/manifests/crds.yaml"),
            )
            .unwrap();
            let client = pinfleet::kube::client_from_kubeconfig(&p, pinfleet::kube::Retry::Default).await.unwrap();
            for doc in crds.split("\n---\n").filter(|d| d.contains("kind:")) {
                let v: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
                let crds: Api<
                    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
                > = Api::all(client.clone());
                crds.patch(
                    v["metadata"]["name"].as_str().unwrap(),
                    &kube::api::PatchParams::apply("test"),
                    &kube::api::Patch::Apply(&v),
                )
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            let ctx = pinfleet::controller::Ctx::new(client, &n);
            tx.send(()).unwrap();
            pinfleet::controller::run(ctx).await;
        });
    });
    rx.recv().unwrap();
    kc
}

fn kubectl(kc: &Path, args: &[&str]) -> String {
    let out = Command::new("kubectl").args(args).env("KUBECONFIG", kc).output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn set_ready(kc: &Path, name: &str, ready: bool) {
    for i in 0..2 {
        let status = if ready { "True" } else { "False" };
        kubectl(
            kc,
            &[
                "patch",
                &format!("node/{name}-node-{i}"),
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                &format!(r#"{{"status":{{"conditions":[{{"type":"Ready","status":"{status}"}}]}}}}"#),
            ],
        );
    }
}

fn replicas(kc: &Path) -> Option<u32> {
    let out = Command::new("kubectl")
        .args(["get", "pinterestservice", "web", "-n", "shop", "-o", "jsonpath={.spec.replicas}"])
        .env("KUBECONFIG", kc)
        .output()
        .unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
}

#[test]
fn apply_fail_over_and_rebalance_across_three_clusters() {
    if std::env::var("PINFLEET_TEST_KUBECONFIG").is_ok_and(|v| !v.is_empty()) {
        eprintln!("skipped on a real cluster: needs three API servers (three sims)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clusters = dir.path().join("clusters");
    std::fs::create_dir_all(clusters.join("bases")).unwrap();
    std::fs::create_dir_all(clusters.join("federations")).unwrap();
    std::fs::copy(root.join("clusters/bases/aws-standard.yaml"), clusters.join("bases/aws-standard.yaml")).unwrap();
    // One state store (a folder) for every operator: the failover memory is there.
    let store = format!("file://{}", dir.path().join("state").display());
    let src = std::fs::read_to_string(root.join("clusters/dev-local.yaml"))
        .unwrap()
        .replace("s3://pinfleet-state-dev/clusters", &store);
    let mut kcs = Vec::new();
    for (name, region) in [("fed-a", "us-east-1"), ("fed-b", "us-east-1"), ("fed-c", "us-west-2")] {
        let text = src.replace("name: dev-local", &format!("name: {name}"));
        std::fs::write(
            clusters.join(format!("{name}.yaml")),
            format!("{text}  federation:\n    name: shop\n    labels: {{region: {region}}}\n"),
        )
        .unwrap();
        kcs.push(member(dir.path(), name));
    }
    std::fs::write(
        clusters.join("federations/web.yaml"),
        "apiVersion: pinfleet.dev/v1alpha1\nkind: FederatedService\nmetadata: {name: web, namespace: shop}\nspec:\n  federation: shop\n  totalReplicas: 12\n  template:\n    owner: {team: shop, project: web}\n    ports: [{name: http, port: 8080}]\n    template:\n      spec:\n        containers: [{name: app, image: shop/web:2.0, resources: {requests: {cpu: 100m, memory: 64Mi}}}]\n",
    )
    .unwrap();
    // Two operators on two machines: two homes.
    let operator = std::cell::Cell::new("home");
    let pinfleet = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_pinfleet"))
            .args(args)
            .args(["--kubeconfig-dir", dir.path().join("kubeconfigs").to_str().unwrap(), "--timeout", "60s"])
            .env("PINFLEET_CLUSTERS_DIR", &clusters)
            .env("PINFLEET_HOME", dir.path().join(operator.get()))
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "pinfleet {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let split = || kcs.iter().map(|k| replicas(k).unwrap_or(0)).collect::<Vec<_>>();

    let plan = pinfleet(&["federation", "plan", "web"]);
    assert!(plan.contains("fed-a") && plan.contains("weight 1/3"), "{plan}");
    assert_eq!(split(), vec![0, 0, 0], "plan changes nothing");
    pinfleet(&["federation", "apply", "web", "--yes"]);
    assert_eq!(split(), vec![4, 4, 4]);
    let status = pinfleet(&["federation", "status", "web", "-o", "json"]);
    let rows: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert!(rows.as_array().unwrap().iter().all(|r| r["ready"] == 4), "{rows}");

    // fed-c's nodes go NotReady: past the grace period its replicas move.
    set_ready(&kcs[2], "fed-c", false);
    let plan = pinfleet(&["federation", "plan", "web", "--grace", "1h"]);
    assert!(plan.contains("grace"), "within the grace period nothing moves: {plan}");
    pinfleet(&["federation", "apply", "web", "--yes", "--grace", "0s"]);
    assert_eq!(split(), vec![6, 6, 0]);

    // Back again, and another operator on another machine runs the next
    // apply: the failover is remembered in the state store, so replicas
    // stay where they are without --rebalance.
    set_ready(&kcs[2], "fed-c", true);
    operator.set("home-of-another-operator");
    let out = pinfleet(&["federation", "apply", "web", "--yes", "--grace", "0s"]);
    assert!(out.contains("recovered"), "{out}");
    assert_eq!(split(), vec![6, 6, 0]);
    pinfleet(&["federation", "apply", "web", "--yes", "--grace", "0s", "--rebalance"]);
    assert_eq!(split(), vec![4, 4, 4]);
}
