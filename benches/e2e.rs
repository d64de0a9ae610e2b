//! The end-to-end pipeline (pre-flight, cluster, platform smoke) over N
//! sims at once (default 10, `PINFLEET_BENCH_CLUSTERS`), each with
//! dev-local's machines, the platform CRDs and a workload controller:
//! prints each cluster's time, the total, and both against one cluster
//! alone, and how busy the CPUs were meanwhile (the sims run in this
//! process). Measures; asserts nothing about time (but fails if a check
//! fails: a pipeline that fails is not a figure).

use std::path::Path;
use std::time::Instant;

use pinfleet::e2e;

/// A sim on its own thread and runtime (as a remote API server would be:
/// its controller passes never hold up the runner), with dev-local's
/// machines; stopped when the returned sender is dropped.
fn start_sim(kc: std::path::PathBuf) -> std::sync::mpsc::Sender<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let cluster = pinfleet::spec::load_cluster(&root.join("clusters/dev-local.yaml"), &Default::default())
                .unwrap()
                .cluster;
            let mut inner = pinfleet::sim::Inner::new();
            for mut n in pinfleet::sim::nodes::declared_for(&cluster) {
                n.needs_cni = false;
                pinfleet::sim::nodes::declare(&mut inner, &n);
            }
            let sim = pinfleet::sim::Sim::start_with(0, inner, Default::default()).await.unwrap();
            sim.write_kubeconfig(&kc).unwrap();
            ready_tx.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || stop_rx.recv()).await;
            sim.stop().await;
        });
    });
    ready_rx.recv().unwrap();
    stop_tx
}

async fn sim_cluster(dir: &Path, i: usize) -> (std::sync::mpsc::Sender<()>, e2e::Target) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cluster =
        pinfleet::spec::load_cluster(&root.join("clusters/dev-local.yaml"), &Default::default()).unwrap().cluster;
    let kc = dir.join(format!("kc-{i}.yaml"));
    let stop = start_sim(kc.clone());
    let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Never).await.unwrap();
    let crds = std::fs::read_to_string(root.join("addons/platform-crds/manifests/crds.yaml")).unwrap();
    let mut applier = pinfleet::kube::apply::Applier::new(client.clone(), "bench");
    for doc in crds.split("\n---").filter(|d| d.contains("kind:")) {
        let v: serde_json::Value = serde_saphyr::from_str(doc).unwrap();
        let name = v["metadata"]["name"].as_str().unwrap().to_string();
        applier.apply("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", &name, &v).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    tokio::spawn(pinfleet::controller::run(pinfleet::controller::Ctx::new(client.clone(), "dev-local")));
    (stop, e2e::Target { cluster, client, addons: None })
}

/// CPU seconds this process has used (user + system), from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start after ')'.
    let rest: Vec<&str> = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| rest.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn main() {
    let n: usize = std::env::var("PINFLEET_BENCH_CLUSTERS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let opts = e2e::Options::default();
        let quiet = |_: &str, _: &e2e::Check| {};
        // One cluster alone.
        let (one_sim, one) = sim_cluster(dir.path(), 0).await;
        let start = Instant::now();
        let alone = e2e::run(&one, &opts, &quiet).await;
        let single = start.elapsed().as_secs_f64();
        assert!(!alone.failed(), "{:#?}", alone.failures());
        drop(one_sim);
        // N at once.
        let mut sims = Vec::new();
        let mut targets = Vec::new();
        for i in 1..=n {
            let (s, t) = sim_cluster(dir.path(), i).await;
            sims.push(s);
            targets.push(t);
        }
        let (start, cpu0) = (Instant::now(), cpu_seconds());
        let reports = e2e::run_many(targets, &opts, n, std::sync::Arc::new(quiet)).await;
        let total = start.elapsed().as_secs_f64();
        let cpu = cpu_seconds() - cpu0;
        println!("e2e pipeline (pre-flight, cluster, smoke) on the sim, {} checks per cluster", alone.checks.len());
        println!("  one cluster alone: {single:.2}s");
        for r in &reports {
            assert!(!r.failed(), "{}: {:#?}", r.cluster, r.failures());
        }
        let per: Vec<f64> = reports.iter().map(|r| r.seconds).collect();
        let (min, max) = per.iter().fold((f64::MAX, 0.0f64), |(a, b), x| (a.min(*x), b.max(*x)));
        let mean = per.iter().sum::<f64>() / per.len() as f64;
        println!(
            "  {n} clusters at once: total {total:.2}s; per cluster min {min:.2}s, mean {mean:.2}s, max {max:.2}s"
        );
        println!("  total / one alone: {:.2}x (1.0 = perfectly parallel; {n}.0 = one after another)", total / single);
        println!(
            "  process CPU meanwhile: {cpu:.1}s over {total:.1}s = {:.2} cores busy of {} (the {n} emulated API servers, each on its own thread, their controllers and {n} workload controllers share this process)",
            cpu / total,
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        );
        drop(sims);
    });
}
