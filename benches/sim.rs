//! The API emulator under load, over real HTTP with kube-rs: create 10,000
//! ConfigMaps (64 in flight) with a watch open, list them (whole and in
//! pages of 500), then register 5,000 Nodes. Prints operations per second
//! and the process's peak memory (emulator and client share the process).
//! Measures; asserts nothing about time.

use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

const CONFIGMAPS: usize = 10_000;
const NODES: usize = 5_000;
const IN_FLIGHT: usize = 64;

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let base_rss = peak_rss_mib();
        let sim = pinfleet::sim::Sim::start(0).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kc = dir.path().join("kc.yaml");
        sim.write_kubeconfig(&kc).unwrap();
        let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Never).await.unwrap();
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

        // A watch open for the whole run, counting what it sees.
        let rv = cms.list(&ListParams::default().limit(1)).await.unwrap().metadata.resource_version.unwrap();
        let mut stream = cms.watch(&WatchParams::default().timeout(600), &rv).await.unwrap().boxed();
        let watcher = tokio::spawn(async move {
            let mut added = 0usize;
            while let Ok(Some(ev)) = stream.try_next().await {
                if matches!(ev, WatchEvent::Added(_)) {
                    added += 1;
                    if added == CONFIGMAPS {
                        break;
                    }
                }
            }
            added
        });

        let start = Instant::now();
        futures::stream::iter(0..CONFIGMAPS)
            .map(|i| {
                let cms = cms.clone();
                async move {
                    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("cm-{i:05}"), "labels": {"shard": (i % 10).to_string()}},
                        "data": {"payload": "x".repeat(256)}
                    }))
                    .unwrap();
                    cms.create(&PostParams::default(), &cm).await.unwrap();
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        let create = start.elapsed().as_secs_f64();
        let seen = tokio::time::timeout(std::time::Duration::from_secs(120), watcher).await.unwrap().unwrap();

        let start = Instant::now();
        let all = cms.list(&ListParams::default()).await.unwrap();
        let list_all = start.elapsed().as_secs_f64();
        assert_eq!(all.items.len(), CONFIGMAPS);

        let start = Instant::now();
        let mut pages = 0;
        let mut items = 0;
        let mut token: Option<String> = None;
        loop {
            let mut lp = ListParams::default().limit(500);
            if let Some(t) = &token {
                lp = lp.continue_token(t);
            }
            let page = cms.list(&lp).await.unwrap();
            pages += 1;
            items += page.items.len();
            token = page.metadata.continue_.filter(|c| !c.is_empty());
            if token.is_none() {
                break;
            }
        }
        let list_paged = start.elapsed().as_secs_f64();
        assert_eq!(items, CONFIGMAPS);

        let start = Instant::now();
        let selected = cms.list(&ListParams::default().labels("shard=3")).await.unwrap().items.len();
        let list_selected = start.elapsed().as_secs_f64();

        let nodes: Api<Node> = Api::all(client);
        let start = Instant::now();
        futures::stream::iter(0..NODES)
            .map(|i| {
                let nodes = nodes.clone();
                async move {
                    let n: Node = serde_json::from_value(serde_json::json!({
                        "metadata": {"name": format!("ip-10-0-{}-{}.ec2.internal", i / 250, i % 250), "labels": {"pinfleet.dev/instance-group": "general", "topology.kubernetes.io/zone": format!("us-east-1{}", ["a", "b", "c"][i % 3])}},
                        "spec": {"providerID": format!("aws:///us-east-1a/i-{i:017x}")},
                    }))
                    .unwrap();
                    nodes.create(&PostParams::default(), &n).await.unwrap();
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        let register = start.elapsed().as_secs_f64();

        // The node simulator's own path: 5,000 EC2 machines become Nodes.
        let cluster = pinfleet::spec::load_cluster(std::path::Path::new("clusters/dev-local.yaml"), &Default::default()).unwrap().cluster;
        let cfg = pinfleet::sim::nodes::Ec2Nodes { cluster, needs_cni: false, boot_delay: std::time::Duration::from_secs(0), fail_fraction: 0.0, poll: std::time::Duration::from_secs(1), image_facts: Default::default() };
        let instances: Vec<pinfleet::cloud::observed::ObservedInstance> = (0..NODES)
            .map(|i| pinfleet::cloud::observed::ObservedInstance {
                id: format!("i-{:017x}", 0x100000 + i),
                cluster: Some("dev-local".into()),
                group: Some("general".into()),
                owner: Some("cloud-platform".into()),
                state: "running".into(),
                image_id: "ami-1".into(),
                instance_type: "m6i.xlarge".into(),
                subnet_id: None,
                zone: Some("us-east-1a".into()),
                vpc_id: None,
                private_ip: None,
                launch_template_version: Some(1),
                revision: Some(1),
                launch_time: Some(0),
                kubernetes_version: None,
                spot: false,
                etcd_manager: false,
            })
            .collect();
        let mut inner = pinfleet::sim::Inner::new();
        let start = Instant::now();
        pinfleet::sim::nodes::sync(&mut inner, &cfg, &instances, 10);
        let node_sim = start.elapsed().as_secs_f64();
        let start = Instant::now();
        pinfleet::sim::nodes::sync(&mut inner, &cfg, &instances, 11);
        let node_resync = start.elapsed().as_secs_f64();

        println!("sim: {CONFIGMAPS} ConfigMaps over HTTP with kube-rs ({IN_FLIGHT} in flight), a watch open");
        println!("  create       {:>8.0} ops/s  ({create:.2} s)", CONFIGMAPS as f64 / create);
        println!("  watch saw    {seen} ADDED events of {CONFIGMAPS}");
        println!("  list all     {list_all:.3} s for {CONFIGMAPS} objects");
        println!("  list paged   {list_paged:.3} s ({pages} pages of 500)");
        println!("  list by label {list_selected:.3} s ({selected} matched shard=3)");
        println!("  register {NODES} Nodes over HTTP: {register:.2} s ({:.0} nodes/s)", NODES as f64 / register);
        println!("  node simulator: {NODES} EC2 machines -> Ready Nodes in {node_sim:.2} s; a no-change resync {node_resync:.3} s");
        println!("  peak RSS of the process (emulator + client): {:.0} MiB (before the emulator: {base_rss:.0} MiB)", peak_rss_mib());
        sim.stop().await;
    });
}
