//! Converges 5,000 PinterestServices on the sim with the workload
//! controller: prints the time until every one is reconciled and the API
//! writes it took, then starts a fresh controller (a full resync of
//! unchanged objects) and prints its writes, which should be 0. The sim's
//! own pod controllers are off: this measures the workload controller.
//! Measures; asserts nothing about time.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use pinfleet::workloads::PinterestService;
use serde_json::json;

/// 5,000 by default; PINFLEET_BENCH_SERVICES overrides.
fn services() -> usize {
    std::env::var("PINFLEET_BENCH_SERVICES").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000)
}

#[allow(non_snake_case)]
fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let SERVICES = services();
    rt.block_on(async {
        let sim = pinfleet::sim::Sim::start_with(0, pinfleet::sim::Inner::new(), pinfleet::sim::Controllers::none()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kc.yaml");
        sim.write_kubeconfig(&kc).unwrap();
        let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Default).await.unwrap();
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> = Api::all(client.clone());
        for crd in pinfleet::workloads::crds() {
            crds.patch(crd.metadata.name.as_deref().unwrap(), &PatchParams::apply("bench").force(), &Patch::Apply(&crd)).await.unwrap();
        }
        // What a real cluster has: the namespaces, and the runtime-support
        // profiles the addon installs.
        let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        for ns in ["default", pinfleet::controller::SYSTEM_NAMESPACE] {
            nss.patch(ns, &PatchParams::apply("bench"), &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))).await.unwrap();
        }
        let profile = serde_json::to_string(&pinfleet::workloads::render::RuntimeProfile::default_profile("1.5.0")).unwrap();
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), pinfleet::controller::SYSTEM_NAMESPACE);
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": pinfleet::controller::PROFILE_CONFIGMAP}, "data": {"default": "1.5.0", "profile-1.5.0.json": profile}});
        cms.patch(pinfleet::controller::PROFILE_CONFIGMAP, &PatchParams::apply("bench"), &Patch::Apply(cm)).await.unwrap();
        let svcs: Api<PinterestService> = Api::namespaced(client.clone(), "default");
        let ctx = pinfleet::controller::Ctx::new(client.clone(), "bench");
        let controller = tokio::spawn(pinfleet::controller::run(ctx.clone()));
        let start = Instant::now();
        futures::stream::iter(0..SERVICES)
            .map(|i| {
                let svcs = svcs.clone();
                async move {
                    let cr = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": format!("svc-{i:05}")},
                        "spec": {"owner": {"team": format!("team-{}", i % 40), "project": "p"}, "replicas": 2, "ports": [{"name": "http", "port": 8080}],
                            "template": {"spec": {"containers": [{"name": "app", "image": format!("app:{i}")}]}}}});
                    svcs.patch(&format!("svc-{i:05}"), &PatchParams::apply("bench"), &Patch::Apply(&cr)).await.unwrap();
                }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
        let created = start.elapsed().as_secs_f64();
        loop {
            let all = svcs.list(&ListParams::default()).await.unwrap();
            let done = all.items.iter().filter(|s| s.status.as_ref().is_some_and(|st| st.conditions.iter().any(|c| c.type_ == "Reconciled" && c.status == "True"))).count();
            if done == SERVICES {
                break;
            }
            eprintln!("  {done}/{SERVICES} reconciled after {:.0} s", start.elapsed().as_secs_f64());
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let converged = start.elapsed().as_secs_f64();
        let writes = ctx.writes.load(Ordering::Relaxed);
        let reconciles = ctx.reconciles.load(Ordering::Relaxed);
        controller.abort();

        // A fresh controller: every object reconciled again, nothing changed.
        let fresh = pinfleet::controller::Ctx::new(client.clone(), "bench");
        let again = tokio::spawn(pinfleet::controller::run(fresh.clone()));
        let start = Instant::now();
        while fresh.reconciles.load(Ordering::Relaxed) < SERVICES as u64 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let resync = start.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let resync_writes = fresh.writes.load(Ordering::Relaxed);
        again.abort();

        println!("converge: {SERVICES} PinterestServices on the sim (workload controller only)");
        println!("  created in {created:.1} s; all Reconciled after {converged:.1} s");
        println!("  controller API writes: {writes} ({:.1} per service; {reconciles} reconciles)", writes as f64 / SERVICES as f64);
        println!("  full resync by a fresh controller: {resync:.1} s, {resync_writes} writes (target 0)");
        sim.stop().await;
    });
}
