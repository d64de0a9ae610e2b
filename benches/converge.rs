//! The workload controller at scale, on a sim in a process of its own (so
//! the controller's memory is this process's and the sim's is its own):
//! for each size (5,000 and 20,000 PinterestServices by default;
//! PINFLEET_BENCH_SERVICES="1000" or "1000,4000" overrides) it prints
//!
//! - the floor: the writes the children and statuses need, at the rate the
//!   sim takes exactly those objects with no controller (the sim's own cost);
//! - time to converge against that floor, as a ratio;
//! - reconciles and writes per service, and the children each owns;
//! - the controller's peak memory, and per object it caches; the sim's;
//! - change-to-children latency p50/p99/p99.9: on creation, and under a
//!   steady stream of spec changes on top of every service;
//! - a fresh controller's full resync: time and writes (target 0);
//! - failover: a leader's death (its tasks dropped, no Lease released) to a
//!   change carried out by the warm standby.
//!
//! The sim's pod controllers are off: this measures the workload controller.
//! Measures; asserts nothing about time.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::ResourceExt as _;
use pinfleet::workloads::PinterestService;
use serde_json::{json, Value};

fn sizes() -> Vec<usize> {
    std::env::var("PINFLEET_BENCH_SERVICES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![5_000, 20_000])
}

/// Peak resident memory of a process (VmHWM), in bytes.
fn peak(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Starts this process's peak-memory count afresh.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn quantiles(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "none observed".into();
    }
    v.sort_by(f64::total_cmp);
    let q = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1] * 1000.0;
    format!("p50 {:.0} ms, p99 {:.0} ms, p99.9 {:.0} ms ({} changes)", q(0.5), q(0.99), q(0.999), v.len())
}

struct SimProcess(Child);

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn service(i: usize, image: &str) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": format!("svc-{i:05}"), "namespace": "default"},
        "spec": {"owner": {"team": format!("team-{}", i % 40), "project": "p"}, "replicas": 2, "ports": [{"name": "http", "port": 8080}],
            "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}})
}

/// Service `i` applied with `image`, as its team would.
async fn put(svcs: Api<PinterestService>, i: usize, image: String) {
    svcs.patch(&format!("svc-{i:05}"), &PatchParams::apply("bench"), &Patch::Apply(&service(i, &image))).await.unwrap();
}

fn reconciled(s: &PinterestService) -> bool {
    let generation = s.metadata.generation.unwrap_or(1);
    s.status.as_ref().is_some_and(|st| {
        st.observed_generation == Some(generation)
            && st.conditions.iter().any(|c| c.type_ == "Reconciled" && c.status == "True")
    })
}

/// Which services are reconciled at their generation, kept from a watch:
/// a LIST of every service each half second would cost the sim about as
/// much as the controller's own work, and hide its figures.
type Progress = Arc<std::sync::Mutex<std::collections::HashMap<String, bool>>>;

fn follow(svcs: &Api<PinterestService>) -> (Progress, tokio::task::JoinHandle<()>) {
    use kube::runtime::{watcher, WatchStreamExt as _};
    let progress: Progress = Default::default();
    let p = progress.clone();
    let task = tokio::spawn(
        watcher(svcs.clone(), watcher::Config::default().page_size(500)).default_backoff().applied_objects().for_each(
            move |s| {
                if let Ok(s) = s {
                    p.lock().unwrap().insert(s.name_any(), reconciled(&s));
                }
                futures::future::ready(())
            },
        ),
    );
    (progress, task)
}

async fn wait_reconciled(progress: &Progress, n: usize, start: Instant) -> f64 {
    let mut last_report = Instant::now();
    loop {
        let done = progress.lock().unwrap().values().filter(|r| **r).count();
        if done >= n {
            return start.elapsed().as_secs_f64();
        }
        if last_report.elapsed() >= Duration::from_secs(2) {
            eprintln!("  {done}/{n} reconciled after {:.0} s", start.elapsed().as_secs_f64());
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn budgeted(client: kube::Client) -> kube::Client {
    // The command's defaults (`pinfleet controller --api-qps …`).
    pinfleet::kube::budget::wrap(
        client,
        pinfleet::kube::budget::Budget { in_flight: 64, qps: Some(5000.0), burst: 5000 },
    )
}

async fn run(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc.yaml");
    let sim = SimProcess(
        Command::new(env!("CARGO_BIN_EXE_pinfleet"))
            .args(["sim", "--no-processes", "--kubeconfig", kc.to_str().unwrap()])
            .args(["--disable", "scheduler,kubelet,replicasets,deployments,daemonsets,statefulsets,jobs,cronjobs"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    for _ in 0..600 {
        if kc.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Default).await.unwrap();
    for _ in 0..100 {
        if client.apiserver_version().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    for crd in pinfleet::workloads::crds() {
        crds.patch(crd.metadata.name.as_deref().unwrap(), &PatchParams::apply("bench").force(), &Patch::Apply(&crd))
            .await
            .unwrap();
    }
    // What a real cluster has: the namespaces, and the runtime-support
    // profiles the addon installs.
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    for ns in ["default", "floor", pinfleet::controller::SYSTEM_NAMESPACE] {
        nss.patch(
            ns,
            &PatchParams::apply("bench"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
        )
        .await
        .unwrap();
    }
    let profile = pinfleet::workloads::render::RuntimeProfile::default_profile("1.5.0");
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), pinfleet::controller::SYSTEM_NAMESPACE);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": pinfleet::controller::PROFILE_CONFIGMAP}, "data": {"default": "1.5.0", "profile-1.5.0.json": serde_json::to_string(&profile).unwrap()}});
    cms.patch(pinfleet::controller::PROFILE_CONFIGMAP, &PatchParams::apply("bench"), &Patch::Apply(cm)).await.unwrap();

    // The floor: exactly a service's children and its status, written by
    // server-side apply with no controller, as fast as the sim takes them.
    let rctx = pinfleet::workloads::render::Context {
        cluster: "bench".into(),
        profile: profile.clone(),
        namespace_labels: Default::default(),
    };
    let sample: PinterestService = serde_json::from_value(service(0, "app:0")).unwrap();
    let children = pinfleet::workloads::render::service(&sample, &rctx).unwrap().len();
    // Enough writes to be a rate (1,000 services' children), after a
    // warm-up that opens the connections and grows the sim's heap.
    let probe = 1_000.min(n);
    let mut docs = Vec::new();
    for i in 0..probe {
        let mut cr: PinterestService = serde_json::from_value(service(i, &format!("app:{i}"))).unwrap();
        cr.metadata.namespace = Some("floor".into());
        for mut c in pinfleet::workloads::render::service(&cr, &rctx).unwrap() {
            if let Some(m) = c["metadata"].as_object_mut() {
                m.remove("ownerReferences");
            }
            docs.push(c);
        }
    }
    let warm_up: Vec<Value> = docs.drain(..docs.len() / 10).collect();
    let writes_probe = docs.len();
    let mut started = Instant::now();
    for (round, docs) in [warm_up, docs].into_iter().enumerate() {
        if round == 1 {
            started = Instant::now();
        }
        futures::stream::iter(docs)
            .map(|c| {
                let client = client.clone();
                async move {
                    let av = c["apiVersion"].as_str().unwrap();
                    let (g, v) = av.split_once('/').unwrap_or(("", av));
                    let kind = c["kind"].as_str().unwrap();
                    let plural = match kind {
                        "Ingress" => "ingresses".to_string(),
                        "PodDisruptionBudget" => "poddisruptionbudgets".to_string(),
                        k => format!("{}s", k.to_lowercase()),
                    };
                    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(g, v, kind), &plural);
                    let api: Api<DynamicObject> = Api::namespaced_with(client, "floor", &ar);
                    let name = c["metadata"]["name"].as_str().unwrap().to_string();
                    api.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&c)).await.unwrap();
                }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
    }
    let rate = writes_probe as f64 / started.elapsed().as_secs_f64();
    let needed = n * (children + 1);
    let floor = needed as f64 / rate;

    // The controller, within the command's default budget.
    reset_peak();
    let ctx = pinfleet::controller::Ctx::new(budgeted(client.clone()), "bench");
    let controller = tokio::spawn(pinfleet::controller::run(ctx.clone()));
    let svcs: Api<PinterestService> = Api::namespaced(client.clone(), "default");
    let (progress, following) = follow(&svcs);
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| put(svcs.clone(), i, format!("app:{i}")))
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await;
    let created = start.elapsed().as_secs_f64();
    let converged = wait_reconciled(&progress, n, start).await;
    let writes = ctx.writes.load(Ordering::Relaxed);
    let reconciles = ctx.reconciles.load(Ordering::Relaxed);
    let errors = ctx.errors.load(Ordering::Relaxed);
    let controller_peak = peak(std::process::id());
    let sim_peak = peak(sim.0.id());
    let on_create = ctx.children_latency.take();

    // A steady stream of changes on top: 50 spec changes a second for 10 s.
    let rate_changes = 50;
    let stream_start = Instant::now();
    let changed = (rate_changes * 10).min(n);
    for step in 0..10 {
        for j in 0..rate_changes {
            let i = (step * rate_changes + j) * 7919 % n;
            tokio::spawn(put(svcs.clone(), i, format!("app:{i}-v2")));
        }
        tokio::time::sleep_until((stream_start + Duration::from_secs(step as u64 + 1)).into()).await;
    }
    let _ = wait_reconciled(&progress, n, Instant::now()).await;
    let under_changes = ctx.children_latency.take();
    controller.abort();
    following.abort();

    // A fresh controller: every object reconciled again, nothing changed.
    let fresh = pinfleet::controller::Ctx::new(budgeted(client.clone()), "bench");
    let again = tokio::spawn(pinfleet::controller::run(fresh.clone()));
    let start = Instant::now();
    while fresh.reconciles.load(Ordering::Relaxed) < n as u64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resync = start.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resync_writes = fresh.writes.load(Ordering::Relaxed);
    again.abort();

    // Failover: two replicas on one Lease; the leader's tasks are dropped
    // (no Lease released), a change is made, the standby carries it out.
    let lease = |id: &str| pinfleet::controller::leader::LeaseLock {
        api: Api::namespaced(client.clone(), pinfleet::controller::SYSTEM_NAMESPACE),
        name: "pinfleet-controller".into(),
        identity: id.into(),
        lease_duration: Duration::from_secs(7),
        renew_every: Duration::from_secs(2),
    };
    let mut replicas = Vec::new();
    for id in ["a", "b"] {
        let c = pinfleet::controller::Ctx::new(budgeted(client.clone()), "bench").standby();
        let leading = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cc = c.clone();
        // Never told to stop: the benchmark kills the leader's tasks.
        let never = tokio::sync::watch::channel(false).1;
        let elected = tokio::spawn(pinfleet::controller::leader::run_elected(
            lease(id),
            leading.clone(),
            move || {
                let c = cc.clone();
                async move {
                    let _l = c.lead();
                    futures::future::pending::<()>().await
                }
            },
            never,
        ));
        let running = tokio::spawn(pinfleet::controller::run(c.clone()));
        replicas.push((leading, elected, running));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    while !replicas.iter().any(|r| r.0.load(Ordering::SeqCst)) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Both caches warm before the kill: as long as a fresh controller took
    // to fill its caches and reconcile everything, and a margin (a fixed
    // pause left a standby of 20,000 services still listing when the
    // leader died).
    tokio::time::sleep(Duration::from_secs_f64(resync) + Duration::from_secs(3)).await;
    // The leader at this moment: on a loaded machine leadership may be
    // between replicas (a renewal past its deadline steps down, the other
    // takes the Lease once it runs out); wait for one to lead.
    let waited = Instant::now();
    let i = loop {
        if let Some(i) = replicas.iter().position(|r| r.0.load(Ordering::SeqCst)) {
            break i;
        }
        assert!(waited.elapsed() < Duration::from_secs(60), "no replica led for a minute");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let dead = replicas.remove(i);
    dead.1.abort();
    dead.2.abort();
    let killed = Instant::now();
    put(svcs.clone(), 1, "app:1-v3".into()).await;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    loop {
        let d = deploys.get("svc-00001").await.unwrap();
        let image = d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.into_iter().find(|c| c.name == "app")?.image);
        if image.as_deref() == Some("app:1-v3") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let failover = killed.elapsed().as_secs_f64();
    for r in replicas {
        r.1.abort();
        r.2.abort();
    }

    let objects = n * (children + 1);
    let build = if cfg!(debug_assertions) { "debug" } else { "release" };
    println!("converge: {n} PinterestServices on the sim (workload controller only; {build} build)");
    println!(
        "  floor: {needed} writes ({children} children + status per service) at the sim's {rate:.0} writes/s = {floor:.1} s"
    );
    println!("  created in {created:.1} s; all Reconciled after {converged:.1} s = {:.2} x floor", converged / floor);
    println!(
        "  per service: {:.2} reconciles, {:.2} writes ({children} children it owns + its status); {errors} reconciles failed (retried)",
        reconciles as f64 / n as f64,
        writes as f64 / n as f64
    );
    println!(
        "  controller peak memory {:.0} MiB, {:.1} KiB per object cached ({objects} objects); the sim's own: {:.0} MiB",
        mib(controller_peak),
        controller_peak as f64 / 1024.0 / objects as f64,
        mib(sim_peak)
    );
    println!("  change to children written, on creation: {}", quantiles(on_create));
    println!(
        "  change to children written, {rate_changes} changes/s for 10 s on top of {n}: {} ({changed} services changed)",
        quantiles(under_changes)
    );
    println!("  full resync by a fresh controller: {resync:.1} s, {resync_writes} writes (target 0)");
    println!(
        "  failover: leader dropped to a change carried out by the warm standby: {failover:.1} s (lease 7 s, renew 2 s; target 10 s)"
    );
    drop(sim);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        for n in sizes() {
            run(n).await;
        }
    });
}
