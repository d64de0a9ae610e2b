//! Federation over local members (`--target sim`) with no AWS environment
//! at all: the failover memory is kept beside the sims, the plan gives the
//! documented shares, and apply places them (each member's own controller,
//! run by its sim, makes the app Ready there). (Its own test binary: three local clusters at
//! once beside another test's would starve a 2-core machine.)

#[path = "support/local.rs"]
mod local;

use local::{pinfleet, text};
use std::path::Path;
use std::process::Output;

#[test]
fn federation_over_local_members_plans_without_aws() {
    if std::env::var("PINFLEET_TEST_KUBECONFIG").is_ok_and(|v| !v.is_empty()) {
        eprintln!("skipped on a real cluster: needs three local sims");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let clusters = dir.path().join("clusters");
    std::fs::create_dir_all(clusters.join("bases")).unwrap();
    std::fs::create_dir_all(clusters.join("federations")).unwrap();
    std::fs::copy(root.join("clusters/bases/aws-standard.yaml"), clusters.join("bases/aws-standard.yaml")).unwrap();
    let src = std::fs::read_to_string(root.join("clusters/dev-local.yaml")).unwrap();
    let names = ["local-a", "local-b", "local-c"];
    for n in names {
        // The default (s3://) state store stays: a local target must not open it.
        let text = src.replace("name: dev-local", &format!("name: {n}"));
        std::fs::write(clusters.join(format!("{n}.yaml")), format!("{text}  federation:\n    name: local\n")).unwrap();
    }
    std::fs::write(
        clusters.join("federations/spread.yaml"),
        "apiVersion: pinfleet.dev/v1alpha1\nkind: FederatedService\nmetadata: {name: spread, namespace: shop}\nspec:\n  federation: local\n  totalReplicas: 9\n  template:\n    owner: {team: shop, project: web}\n    ports: [{name: http, port: 8080}]\n    template:\n      spec:\n        containers: [{name: app, image: shop/web:2.0}]\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--clusters-dir", clusters.to_str().unwrap()]);
        pinfleet(&home, &a)
    };
    struct Down<'a>(&'a dyn Fn(&[&str]) -> Output);
    impl Drop for Down<'_> {
        fn drop(&mut self) {
            for n in ["local-a", "local-b", "local-c"] {
                let _ = (self.0)(&["destroy", n, "--target", "sim", "--yes"]);
            }
        }
    }
    let _down = Down(&run);
    for n in names {
        let out = run(&["bootstrap", n, "--target", "sim", "--yes"]);
        assert!(out.status.success(), "{}", text(&out));
    }
    let out = run(&["federation", "plan", "spread", "--target", "sim", "-o", "json"]);
    assert!(out.status.success(), "no AWS needed: {}", text(&out));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shares: Vec<(String, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["cluster"].as_str().unwrap().to_string(), r["desired"].as_u64().unwrap_or_default()))
        .collect();
    // KubeFed's documented default: equal weights divide the replicas evenly.
    assert_eq!(shares, [("local-a".into(), 3), ("local-b".into(), 3), ("local-c".into(), 3)], "{rows}");
    assert!(!text(&out).contains("s3://"), "{}", text(&out));
    // Each member runs its own controller (three sims side by side on one
    // host's loopback, their controllers' pods on addresses of their own):
    // apply places the app and waits until every member's part is Ready.
    let out = run(&["federation", "apply", "spread", "--target", "sim", "--yes", "--timeout", "120s"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("spread placed"), "{}", text(&out));
}
