//! Renders 100,000 workload CRs (a mix of the six kinds) into native
//! objects with runtime support injected, on one thread, and prints the
//! rate. Target: at least 20,000 CRs per second per core (release build).
//! Measures; asserts nothing about time.

use std::collections::BTreeMap;
use std::time::Instant;

use pinfleet::workloads::render::{self, Context, RuntimeProfile};
use pinfleet::workloads::*;
use serde_json::json;

const CRS: usize = 100_000;

fn cr<T: serde::de::DeserializeOwned>(kind: &str, i: usize, spec: serde_json::Value) -> T {
    let mut spec = spec;
    spec["owner"] = json!({"team": format!("team-{}", i % 50), "project": format!("p-{}", i % 7)});
    spec["template"] = json!({"spec": {"containers": [{"name": "app", "image": format!("app:{i}"), "ports": [{"containerPort": 8080}]}]}});
    spec["configTemplates"] = json!([{"name": "app.yaml", "mountPath": "/etc/app", "template": "x: 1"}]);
    serde_json::from_value(json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": kind, "metadata": {"name": format!("w-{i}"), "namespace": "apps", "uid": format!("uid-{i}")}, "spec": spec})).unwrap()
}

fn main() {
    let ctx = Context {
        cluster: "prod-use1".into(),
        profile: RuntimeProfile::default_profile("2026.11.1"),
        namespace_labels: BTreeMap::from([(render::INFRASTRUCTURE_LABEL.to_string(), "true".to_string())]),
    };
    // Build the CRs first: the benchmark times the translation only.
    let services: Vec<PinterestService> = (0..CRS / 2)
        .map(|i| cr("PinterestService", i, json!({"replicas": 3, "ports": [{"name": "http", "port": 8080}]})))
        .collect();
    let jobsets: Vec<PinterestJobSet> =
        (0..CRS / 5).map(|i| cr("PinterestJobSet", i, json!({"shards": 32, "parallelism": 8}))).collect();
    let crons: Vec<PinterestCronJob> =
        (0..CRS / 10).map(|i| cr("PinterestCronJob", i, json!({"schedule": "*/5 * * * *"}))).collect();
    let daemons: Vec<PinterestDaemon> = (0..CRS / 20).map(|i| cr("PinterestDaemon", i, json!({}))).collect();
    let trainings: Vec<PinterestTrainingJob> = (0..CRS / 20)
        .map(|i| {
            cr("PinterestTrainingJob", i, json!({"framework": "PyTorch", "roles": [{"name": "worker", "replicas": 4}]}))
        })
        .collect();
    let stateful: Vec<PinterestStatefulSet> =
        (0..CRS / 10).map(|i| cr("PinterestStatefulSet", i, json!({"replicas": 3}))).collect();
    let total = services.len() + jobsets.len() + crons.len() + daemons.len() + trainings.len() + stateful.len();

    let start = Instant::now();
    let mut objects = 0usize;
    for c in &services {
        objects += render::service(c, &ctx).unwrap().len();
    }
    for c in &jobsets {
        objects += render::jobset(c, &ctx).unwrap().len();
    }
    for c in &crons {
        objects += render::cronjob(c, &ctx).unwrap().len();
    }
    for c in &daemons {
        objects += render::daemon(c, &ctx).unwrap().len();
    }
    for c in &trainings {
        objects += render::training(c, &ctx).unwrap().len();
    }
    for c in &stateful {
        objects += render::statefulset(c, &ctx).unwrap().len();
    }
    let secs = start.elapsed().as_secs_f64();
    let rate = total as f64 / secs;
    println!("render: {total} workload CRs (50% services, 20% job sets, 10% cron jobs, 5% daemons, 5% training jobs, 10% stateful sets)");
    println!("  {objects} native objects in {secs:.2} s on one thread");
    println!("  {rate:.0} CRs/s  (target 20000 CRs/s per core -> {:.1}x)", rate / 20_000.0);
}
