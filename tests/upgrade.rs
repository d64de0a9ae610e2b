//! Machine lifecycle on moto with the sim's node simulator (one Node per
//! EC2 machine, Ready after a boot delay):
//! - rolls: a 20-node roll with surge 2 watched pod by pod (no
//!   PodDisruptionBudget violated, capacity never below min); a replacement
//!   that never turns Ready halts; a budget that never allows eviction halts
//!   naming it; kill -9 mid-roll, and a re-run finishes the job;
//! - the control plane: the API address follows a roll; etcd keeps its
//!   quorum through two rolls of three machines (and loses it without
//!   member removal);
//! - Kubernetes upgrades 1.32 → 1.33 and 1.31 → 1.33 as plans;
//! - the machine-health loop: a stopped machine and a NotReady node
//!   replaced, a storm short-circuited.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::watcher;
use support::{stderr, World};

/// A process this test started; killed (and reaped) on drop.
struct Spawned(Child);

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The node simulator for the world's cluster; killed on drop.
struct NodeSim {
    _child: Spawned,
    kubeconfig: PathBuf,
}

fn node_sim(w: &World, boot_delay: &str) -> NodeSim {
    let kubeconfig = w.dir.path().join("sim-kubeconfig.yaml");
    let child = w
        .command(&[
            "sim",
            "--cluster",
            &w.cluster,
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--boot-delay",
            boot_delay,
            // No addons are installed here: machines come with a pod network.
            "--network",
            "preinstalled",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..1200 {
        if kubeconfig.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    NodeSim { _child: Spawned(child), kubeconfig }
}

fn kubectl(sim: &NodeSim, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", &sim.kubeconfig)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ready_nodes(sim: &NodeSim) -> usize {
    let out = kubectl(sim, &["get", "nodes", "-o", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| {
            n["status"]["conditions"].as_array().unwrap().iter().any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .count()
}

fn wait_ready_nodes(sim: &NodeSim, n: usize) {
    for _ in 0..600 {
        if ready_nodes(sim) >= n {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{n} nodes never became Ready");
}

/// A cluster with `nodes` machines in `general` (min `min`) and the given
/// rollout settings, bootstrapped, with its node simulator.
fn cluster(name: &str, nodes: u32, min: u32, rollout: &str, boot_delay: &str) -> (World, NodeSim) {
    let w = World::new(name, nodes);
    let yaml = w
        .cluster_yaml(nodes, "t3.large")
        .replace("      minSize: 0\n", &format!("      minSize: {min}\n"))
        .replace("      rollout:\n        maxSurge: 1\n", &format!("      rollout:\n{rollout}"));
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", name, "--yes"]);
    let sim = node_sim(&w, boot_delay);
    wait_ready_nodes(&sim, nodes as usize + 1);
    (w, sim)
}

fn change_machine_type(w: &World) {
    let yaml =
        std::fs::read_to_string(w.cluster_file()).unwrap().replace("machineType: t3.large", "machineType: t3.xlarge");
    w.write_cluster(&yaml);
}

fn upgrade_args<'a>(w: &'a World, sim: &'a NodeSim, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "upgrade",
        w.cluster.as_str(),
        "--yes",
        "--kubeconfig",
        sim.kubeconfig.to_str().unwrap(),
        "--validate-interval",
        "200ms",
    ];
    a.extend_from_slice(extra);
    a
}

fn on_version(w: &World, group: &str) -> BTreeMap<String, usize> {
    let mut by = BTreeMap::new();
    for i in w.instances_in(group) {
        *by.entry(i["launch_template_version"].as_str().unwrap_or("-").to_string()).or_default() += 1;
    }
    by
}

/// Watches the app's pods and the group's nodes from another thread and
/// keeps the lowest counts of ready pods and of Ready, schedulable nodes.
/// Counting starts only once both watches hold their whole initial list
/// (`synced`): a count taken while the first list is still arriving, one
/// object at a time, is a partial view, not a broken budget (on a busy
/// machine the list took longer than any fixed sleep, and the test read
/// "saw 1" off its own half-filled map).
struct Watch {
    armed: Arc<AtomicBool>,
    synced: Arc<AtomicBool>,
    min_pods: Arc<AtomicI64>,
    min_nodes: Arc<AtomicI64>,
    stop: Arc<AtomicBool>,
}

impl Watch {
    /// Waits until both watches hold their initial lists, then starts counting.
    fn arm(&self) {
        for _ in 0..1200 {
            if self.synced.load(Ordering::SeqCst) {
                self.armed.store(true, Ordering::SeqCst);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the watches never listed the pods and nodes (60s)");
    }
}

/// A view kept from a watcher's events: the initial list (and every
/// re-list) is gathered apart and swapped in whole at InitDone.
#[derive(Default)]
struct View {
    current: BTreeMap<String, bool>,
    listing: Option<BTreeMap<String, bool>>,
    listed: bool,
}

impl View {
    fn apply<K: kube::Resource>(&mut self, e: watcher::Event<K>, ok: impl Fn(&K) -> bool) {
        let name = |o: &K| o.meta().name.clone().unwrap_or_default();
        match e {
            watcher::Event::Init => self.listing = Some(BTreeMap::new()),
            watcher::Event::InitApply(o) => {
                self.listing.get_or_insert_with(BTreeMap::new).insert(name(&o), ok(&o));
            }
            watcher::Event::InitDone => {
                self.current = self.listing.take().unwrap_or_default();
                self.listed = true;
            }
            watcher::Event::Apply(o) => {
                self.current.insert(name(&o), ok(&o));
            }
            watcher::Event::Delete(o) => {
                self.current.remove(&name(&o));
            }
        }
    }

    fn count(&self) -> i64 {
        self.current.values().filter(|r| **r).count() as i64
    }
}

fn watch(sim: &NodeSim, app: &str, group: &str) -> Watch {
    let w = Watch {
        armed: Arc::new(AtomicBool::new(false)),
        synced: Arc::new(AtomicBool::new(false)),
        min_pods: Arc::new(AtomicI64::new(i64::MAX)),
        min_nodes: Arc::new(AtomicI64::new(i64::MAX)),
        stop: Arc::new(AtomicBool::new(false)),
    };
    let (armed, synced, min_pods, min_nodes, stop) =
        (w.armed.clone(), w.synced.clone(), w.min_pods.clone(), w.min_nodes.clone(), w.stop.clone());
    let (kc, app, group) = (sim.kubeconfig.clone(), app.to_string(), group.to_string());
    std::thread::spawn(move || {
        tokio::runtime::Runtime::new().unwrap().block_on(async move {
            let client = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Default).await.unwrap();
            let pods = kube::Api::<Pod>::default_namespaced(client.clone());
            let nodes = kube::Api::<Node>::all(client);
            let mut ps = std::pin::pin!(watcher(pods, watcher::Config::default().labels(&format!("app={app}"))));
            let mut ns = std::pin::pin!(watcher(
                nodes,
                watcher::Config::default().labels(&format!("pinfleet.dev/instance-group={group}"))
            ));
            let (mut pod_view, mut node_view) = (View::default(), View::default());
            let cond = |cs: Option<&Vec<serde_json::Value>>, t: &str| {
                cs.is_some_and(|cs| cs.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            let pod_ok = |p: &Pod| {
                let v = serde_json::to_value(p).unwrap();
                v["metadata"]["deletionTimestamp"].is_null() && cond(v["status"]["conditions"].as_array(), "Ready")
            };
            let node_ok = |n: &Node| {
                let v = serde_json::to_value(n).unwrap();
                v["spec"]["unschedulable"] != true && cond(v["status"]["conditions"].as_array(), "Ready")
            };
            while !stop.load(Ordering::SeqCst) {
                tokio::select! {
                    Some(Ok(e)) = ps.next() => pod_view.apply(e, pod_ok),
                    Some(Ok(e)) = ns.next() => node_view.apply(e, node_ok),
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                if pod_view.listed && node_view.listed {
                    synced.store(true, Ordering::SeqCst);
                }
                // Between a re-list's Init and InitDone the current view is
                // the last whole one: still a true count.
                if armed.load(Ordering::SeqCst) {
                    min_pods.fetch_min(pod_view.count(), Ordering::SeqCst);
                    min_nodes.fetch_min(node_view.count(), Ordering::SeqCst);
                }
            }
        })
    });
    w
}

/// Busy loops on every core until dropped: the safety properties under test
/// must hold on a machine with no time to spare (CI ran at load 7-9).
struct Busy {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Busy {
    fn every_core() -> Busy {
        let stop = Arc::new(AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..cores)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        Busy { stop, threads }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

const WEB: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 10\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx:1.27}]\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec:\n  minAvailable: 8\n  selector: {matchLabels: {app: web}}\n";

#[test]
fn twenty_nodes_roll_with_surge_two_without_breaking_a_budget() {
    let (w, sim) = cluster("roll20", 20, 18, "        maxSurge: 2\n", "1s");
    kubectl(&sim, &["apply", "-f", "-"], Some(WEB));
    kubectl(&sim, &["rollout", "status", "deployment/web", "--timeout=60s"], None);
    let watch = watch(&sim, "web", "general");
    watch.arm();
    // Every core busy for the whole roll: the budget must hold on a slow machine.
    let busy = Busy::every_core();

    change_machine_type(&w);
    // Without --yes: the table, nothing changed.
    let table = w.ok(&["upgrade", "roll20", "--kubeconfig", sim.kubeconfig.to_str().unwrap()]);
    assert!(table.contains("general"), "{table}");
    assert_eq!(on_version(&w, "general").len(), 1);

    let out = w.run(&upgrade_args(&w, &sim, &["-o", "json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    watch.stop.store(true, Ordering::SeqCst);
    drop(busy);
    let versions = on_version(&w, "general");
    assert_eq!(versions.len(), 1, "every machine on one version: {versions:?}");
    assert_eq!(versions.values().sum::<usize>(), 20);
    assert!(w.instances_in("general").iter().all(|i| i["instance_type"] == "t3.xlarge"));
    let replaced = events.iter().filter(|e| e["event"] == "replaced" && e["group"] == "general").count();
    assert_eq!(replaced, 20);
    // The canary went alone: the first launch is one machine.
    let first = events.iter().find(|e| e["event"] == "launched" && e["group"] == "general").unwrap();
    assert_eq!(first["ids"].as_array().unwrap().len(), 1);
    assert!(events.iter().filter(|e| e["event"] == "launched").all(|e| e["ids"].as_array().unwrap().len() <= 2));
    let (pods, nodes) = (watch.min_pods.load(Ordering::SeqCst), watch.min_nodes.load(Ordering::SeqCst));
    // The watch must have seen the roll (a silent watch would pass below).
    assert!(pods <= 10 && nodes <= 22, "the watch saw nothing: pods {pods}, nodes {nodes}");
    assert!(pods >= 8, "the budget says 8 ready pods at least; saw {pods}");
    assert!(nodes >= 18, "the group's min is 18 Ready, schedulable nodes; saw {nodes}");
    // The new launch-template version the upgrade applied is in the history.
    let history = w.json(&["history", "roll20"]);
    let revisions = history.as_array().expect("history is a list");
    assert_eq!(revisions.len(), 3, "bootstrap, the skipped etcd backup and the upgrade's apply: {history}");
    assert!(
        revisions[1]["changes"][0]
            .as_str()
            .unwrap()
            .contains("etcd backup skipped for this roll (--skip-backup): rehearsal on the sim"),
        "the control plane was in the roll: why it had no backup is history: {history}"
    );
    assert!(revisions[2]["command"].as_str().unwrap().contains("upgrade"), "{history}");
    // The control plane needed nothing; a second upgrade has nothing to do.
    let again = w.run(&upgrade_args(&w, &sim, &["-o", "json"]));
    assert!(again.status.success());
    assert!(!String::from_utf8_lossy(&again.stdout).contains("\"launched\""));
}

#[test]
fn a_roll_of_the_control_plane_without_a_fresh_verified_etcd_backup_stops_before_its_first_write() {
    let (w, sim) = cluster("nobackup", 1, 1, "        maxSurge: 1\n", "1s");
    change_machine_type(&w);
    let before = w.json(&["history", "nobackup"]);
    let out = w.command(&upgrade_args(&w, &sim, &[])).env_remove("PINFLEET_SKIP_BACKUP").output().unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("there is no etcd backup"), "{err}");
    assert!(err.contains("no etcd backup agent has reported for this cluster"), "no agent to ask: {err}");
    assert!(err.contains("Nothing was changed") && err.contains("--skip-backup REASON"), "{err}");
    assert_eq!(w.json(&["history", "nobackup"]), before, "nothing recorded");
    assert!(w.instances_in("general").iter().all(|i| i["instance_type"] == "t3.large"), "nothing launched");
    // A reason must be a reason.
    let out = w
        .command(&upgrade_args(&w, &sim, &["--skip-backup", " "]))
        .env_remove("PINFLEET_SKIP_BACKUP")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("--skip-backup needs a reason"), "{}", stderr(&out));
    // Workers alone do not touch the control plane: no backup needed.
    let out =
        w.command(&upgrade_args(&w, &sim, &["-g", "general"])).env_remove("PINFLEET_SKIP_BACKUP").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn an_encryption_key_is_rotated_into_the_pki_and_every_secret_rewritten_with_it() {
    let (w, sim) = cluster("rotate", 1, 1, "        maxSurge: 1\n", "1s");
    let kc = sim.kubeconfig.to_str().unwrap();
    let dry = w.ok(&["etcd", "rotate-key", "rotate"]);
    assert!(dry.contains("would add encryption key key-") && dry.contains("Nothing changed"), "{dry}");
    let before = w.json(&["history", "rotate"]).as_array().unwrap().len();
    let out = w.ok(&["etcd", "rotate-key", "rotate", "--yes"]);
    assert!(out.contains("added encryption key") && out.contains("--rewrite-secrets"), "{out}");
    let history = w.json(&["history", "rotate"]);
    assert_eq!(history.as_array().unwrap().len(), before + 1, "{history}");
    assert!(history.to_string().contains("encryption key key-"), "{history}");
    kubectl(&sim, &["create", "secret", "generic", "db", "--from-literal=password=s3cr3t"], None);
    let rv = |k: &str| kubectl(&sim, &["get", "secret", k, "-o", "jsonpath={.metadata.resourceVersion}"], None);
    let was = rv("db");
    let out = w.ok(&["etcd", "rotate-key", "rotate", "--rewrite-secrets", "--kubeconfig", kc]);
    assert!(out.contains("rewrote") && !out.contains("rewrote 0 "), "{out}");
    assert_ne!(rv("db"), was, "the Secret was written again");
    let marked = kubectl(
        &sim,
        &["get", "secret", "db", "-o", "jsonpath={.metadata.annotations.pinfleet\\.dev/encryption-key}"],
        None,
    );
    assert!(marked.starts_with("key-"), "marked with the key: {marked}");
    // A second run (or one resumed after a cut) writes nothing again.
    let again = w.ok(&["etcd", "rotate-key", "rotate", "--rewrite-secrets", "--kubeconfig", kc]);
    assert!(again.contains("rewrote 0 Secret(s)"), "{again}");
    let value = kubectl(&sim, &["get", "secret", "db", "-o", "jsonpath={.data.password}"], None);
    assert_eq!(value, "czNjcjN0", "and reads back the same");
}

#[test]
fn a_replacement_that_never_becomes_ready_halts_the_roll() {
    let (w, sim) = cluster("noboot", 3, 3, "        maxSurge: 1\n", "6s");
    let before = on_version(&w, "general");
    change_machine_type(&w);
    let out = w.run(&upgrade_args(&w, &sim, &["--boot-timeout", "2s"]));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("did not become a Ready node within 2s") && err.contains("the roll is halted (0 of 3 replaced)"),
        "{err}"
    );
    // Nothing old was removed: capacity is intact.
    let old = before.keys().next().unwrap();
    let after = on_version(&w, "general");
    assert_eq!(after.get(old), Some(&3), "before {before:?}, after {after:?}");
}

#[test]
fn a_budget_that_never_allows_eviction_halts_the_drain_and_is_named() {
    let (w, sim) = cluster("pdb", 3, 3, "        maxSurge: 1\n        drainTimeout: 3s\n", "1s");
    kubectl(
        &sim,
        &["apply", "-f", "-"],
        Some(&WEB.replace("replicas: 10", "replicas: 3").replace("minAvailable: 8", "minAvailable: 3")),
    );
    kubectl(&sim, &["rollout", "status", "deployment/web", "--timeout=60s"], None);
    change_machine_type(&w);
    let out = w.run(&upgrade_args(&w, &sim, &["--no-canary"]));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("timed out after 3s") && err.contains("PodDisruptionBudget default/web"), "{err}");
    assert!(err.contains("default/web-"), "names the blocking pods: {err}");
    // The cordoned machine is still there (halted, not torn down).
    assert_eq!(w.instances_in("general").len(), 4);
}

#[test]
fn kill_9_mid_roll_then_a_rerun_finishes_without_double_work() {
    let (w, sim) = cluster("killroll", 6, 6, "        maxSurge: 2\n", "2s");
    change_machine_type(&w);
    let mut child = w
        .command(&upgrade_args(&w, &sim, &["-o", "json"]))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill it once replacements are launched and a drain started.
    use std::io::BufRead;
    let reader = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut launched = 0;
    for line in reader.lines() {
        let e: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap_or_default();
        if e["event"] == "launched" {
            launched += e["ids"].as_array().unwrap().len();
        }
        if e["event"] == "draining" && launched >= 2 {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The killed run's lock is taken over (its process is gone from this host), and the run says so.
    let out = w.run(&upgrade_args(&w, &sim, &["-o", "json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cluster killroll was locked by pid")
            && stderr(&out).contains("which is no longer running"),
        "{}",
        stderr(&out)
    );
    let versions = on_version(&w, "general");
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert_eq!(versions.values().sum::<usize>(), 6);
    assert!(w.instances_in("general").iter().all(|i| i["instance_type"] == "t3.xlarge"));
    // No double work: 6 replacements launched in all, across both runs.
    let relaunched: usize = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "launched")
        .map(|e| e["ids"].as_array().unwrap().len())
        .sum();
    assert_eq!(launched + relaunched, 6, "first run launched {launched}, the re-run {relaunched}");
}

/// An Elastic IP endpoint (`spec.api.loadBalancer.type: elastic-ip`): the
/// address sits on the control-plane machine, and a control-plane roll moves
/// it to the replacement. No load balancer is made.
#[test]
fn a_control_plane_roll_moves_the_api_address() {
    let w = World::new("eiproll", 2);
    let yaml = w
        .cluster_yaml(2, "t3.large")
        .replace(
            "  api:\n    allowedCidrs: [0.0.0.0/0]\n",
            "  api:\n    allowedCidrs: [0.0.0.0/0]\n    loadBalancer: {type: elastic-ip}\n",
        )
        .replacen("      subnets: [private-a]\n", "      subnets: [public-a]\n", 1);
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", "eiproll", "--yes"]);
    let address = || -> (String, Option<String>) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let aws = w.aws().await;
            let observed = pinfleet::cloud::aws::observe::observe(&aws, "eiproll", None).await.unwrap();
            assert!(observed.load_balancer.is_none());
            let a = observed.api_address().expect("the API address exists").clone();
            (a.public_ip.expect("a public IP"), a.instance)
        })
    };
    let (ip, on) = address();
    let cp = w.instances_in("control-plane");
    assert_eq!(on.as_deref(), cp[0]["id"].as_str(), "the address is on the control-plane machine");
    let kc = std::fs::read_to_string(w.dir.path().join("home/kubeconfig/eiproll.yaml")).unwrap();
    assert!(
        kc.contains(&format!("server: \"https://{ip}:6443\"")) || kc.contains(&format!("server: https://{ip}:6443")),
        "{kc}"
    );

    let sim = node_sim(&w, "1s");
    let _approver = support::approver(&sim.kubeconfig);
    wait_ready_nodes(&sim, 3);
    let yaml =
        std::fs::read_to_string(w.cluster_file()).unwrap().replace("machineType: t3.medium", "machineType: t3.large");
    w.write_cluster(&yaml);
    let out = w.run(&upgrade_args(&w, &sim, &["--instance-group", "control-plane"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let cp = w.instances_in("control-plane");
    assert_eq!(cp.len(), 1);
    assert_eq!(cp[0]["instance_type"], "t3.large");
    let (ip_after, on_after) = address();
    assert_eq!(ip_after, ip, "the endpoint every node joined with does not change");
    assert_eq!(on_after.as_deref(), cp[0]["id"].as_str(), "the address moved to the replacement");
}

/// A cluster with three control-plane machines (etcd members) and one
/// node, its node simulator, and pinfleet's serving-certificate approver
/// (etcd is read from an etcdctl pod's log, which needs the kubelet's
/// serving certificate).
fn three_control_planes(name: &str) -> (World, NodeSim, std::thread::JoinHandle<()>) {
    let w = World::new(name, 1);
    let yaml = w
        .cluster_yaml(1, "t3.large")
        .replace("      minSize: 1\n      maxSize: 1\n", "      minSize: 3\n      maxSize: 3\n")
        .replace("      subnets: [private-a]\n", "      subnets: [private-a, private-b]\n");
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", name, "--yes"]);
    let sim = node_sim(&w, "1s");
    let approver = support::approver(&sim.kubeconfig);
    wait_ready_nodes(&sim, 4);
    (w, sim, approver)
}

/// etcd's members as the roll reads them (an etcdctl pod's log).
fn etcd_members(sim: &NodeSim) -> Vec<pinfleet::kube::etcd::Member> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client =
            pinfleet::kube::client_from_kubeconfig(&sim.kubeconfig, pinfleet::kube::Retry::Never).await.unwrap();
        for _ in 0..100 {
            if let Ok(m) = pinfleet::kube::etcd::members(&client).await {
                return m;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        pinfleet::kube::etcd::members(&client).await.unwrap()
    })
}

fn set_control_plane_type(w: &World, machine_type: &str) {
    let yaml = std::fs::read_to_string(w.cluster_file()).unwrap();
    let at = yaml.find("- name: control-plane").unwrap();
    let line_start = at + yaml[at..].find("machineType: ").unwrap();
    let line_end = line_start + yaml[line_start..].find('\n').unwrap();
    let yaml = format!("{}machineType: {machine_type}{}", &yaml[..line_start], &yaml[line_end..]);
    w.write_cluster(&yaml);
}

/// A 3-machine control plane rolled twice in a row: each machine's etcd
/// member is removed before it is terminated, so etcd always keeps a
/// quorum and ends with exactly the three current machines as members.
#[test]
fn a_control_plane_rolled_twice_keeps_its_etcd_quorum() {
    let (w, sim, _approver) = three_control_planes("etcdroll");
    let before = etcd_members(&sim);
    assert_eq!(before.len(), 3, "{before:?}");
    for machine_type in ["t3.large", "t3.xlarge"] {
        set_control_plane_type(&w, machine_type);
        let out = w.run(&upgrade_args(&w, &sim, &["--instance-group", "control-plane"]));
        assert!(out.status.success(), "{}", stderr(&out));
        let machines: std::collections::BTreeSet<String> =
            w.instances_in("control-plane").iter().map(|i| i["id"].as_str().unwrap().to_string()).collect();
        let members = etcd_members(&sim);
        let names: std::collections::BTreeSet<String> = members.iter().map(|m| m.name.clone()).collect();
        assert_eq!(names, machines, "members are exactly the current machines after the {machine_type} roll");
        assert!(members.iter().all(|m| m.healthy), "{members:?}");
    }
}

/// The same roll without removing members: the second terminated machine
/// leaves 2 healthy of 4 members, etcd has no quorum, the API server fails
/// every request and the roll halts with etcd's error.
#[test]
fn a_control_plane_roll_without_member_removal_loses_the_quorum() {
    let (w, sim, _approver) = three_control_planes("etcdloss");
    set_control_plane_type(&w, "t3.large");
    let out = w.run(&upgrade_args(&w, &sim, &["--instance-group", "control-plane", "--skip-etcd-member-removal"]));
    assert!(!out.status.success(), "the roll cannot finish without a quorum");
    assert!(stderr(&out).contains("etcdserver: request timed out"), "{}", stderr(&out));
    let server = std::fs::read_to_string(&sim.kubeconfig).unwrap();
    let url = server.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().trim_matches('"').to_string();
    let readyz = Command::new("curl").args(["-s", &format!("{url}/readyz")]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&readyz.stdout).contains("[-]etcd failed"),
        "{}",
        String::from_utf8_lossy(&readyz.stdout)
    );
}

/// A copy of dev-local at `from` (one control-plane machine, two nodes),
/// its node simulator and the approver; then `spec.kubernetesVersion: to`.
fn versioned_cluster(name: &str, from: &str, to: &str) -> (World, NodeSim, std::thread::JoinHandle<()>) {
    let w = World::new(name, 2);
    let yaml = w.cluster_yaml(2, "t3.large") + &format!("  kubernetesVersion: \"{from}\"\n");
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", name, "--yes"]);
    let sim = node_sim(&w, "1s");
    let approver = support::approver(&sim.kubeconfig);
    wait_ready_nodes(&sim, 3);
    let yaml = std::fs::read_to_string(w.cluster_file())
        .unwrap()
        .replace(&format!("  kubernetesVersion: \"{from}\"\n"), &format!("  kubernetesVersion: \"{to}\"\n"));
    w.write_cluster(&yaml);
    (w, sim, approver)
}

/// Every node's kubelet version, the cluster configuration's, kube-proxy's and CoreDNS's images.
fn versions(sim: &NodeSim) -> (Vec<String>, String, String, String) {
    let nodes: serde_json::Value = serde_json::from_str(&kubectl(sim, &["get", "nodes", "-o", "json"], None)).unwrap();
    let mut kubelets: Vec<String> = nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["status"]["nodeInfo"]["kubeletVersion"].as_str().unwrap().to_string())
        .collect();
    kubelets.sort();
    let config = kubectl(
        sim,
        &["get", "configmap", "-n", "kube-system", "kubeadm-config", "-o", "jsonpath={.data.ClusterConfiguration}"],
        None,
    );
    let version = config.lines().find_map(|l| l.strip_prefix("kubernetesVersion: ")).unwrap_or_default().to_string();
    let image = |kind: &str, name: &str| {
        kubectl(
            sim,
            &["get", kind, "-n", "kube-system", name, "-o", "jsonpath={.spec.template.spec.containers[0].image}"],
            None,
        )
    };
    (kubelets, version, image("daemonset", "kube-proxy"), image("deployment", "coredns"))
}

/// 1.32 → 1.33: `apply` refuses the minor change and names `upgrade`;
/// `upgrade` prints the steps (configuration, control plane, kube-proxy
/// and CoreDNS, nodes) and runs them.
#[test]
fn kubernetes_1_32_to_1_33_is_an_upgrade_plan() {
    let (w, sim, _approver) = versioned_cluster("k8s132", "1.32.6", "1.33.4");
    assert_eq!(versions(&sim).1, "v1.32.6", "kubeadm init wrote the cluster's version");
    let out = w.run(&["apply", "k8s132", "--yes"]);
    assert!(!out.status.success(), "apply must not change the minor version");
    assert!(
        stderr(&out).contains("a change of minor version is an upgrade: `pinfleet upgrade k8s132`"),
        "{}",
        stderr(&out)
    );

    let kc = sim.kubeconfig.to_str().unwrap();
    let preview = w.ok(&["upgrade", "k8s132", "--kubeconfig", kc]);
    let steps: Vec<&str> =
        preview.lines().filter(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())).collect();
    assert_eq!(
        steps,
        [
            "   1. cluster configuration to v1.33.4 (kubeadm-config: what joining control-plane machines run)",
            "   2. control-plane machines to v1.33.4",
            "   3. kube-proxy and CoreDNS to v1.33.4's",
            "   4. node groups general to v1.33.4",
        ],
        "{preview}"
    );
    let out = w.run(&upgrade_args(&w, &sim, &[]));
    assert!(out.status.success(), "{}", stderr(&out));
    let (kubelets, config, proxy, dns) = versions(&sim);
    assert_eq!(kubelets, ["v1.33.4"; 3]);
    assert_eq!(config, "v1.33.4");
    assert_eq!(proxy, "registry.k8s.io/kube-proxy:v1.33.4");
    assert_eq!(dns, "registry.k8s.io/coredns/coredns:v1.12.0");
    assert!(w.ok(&["upgrade", "k8s132", "--kubeconfig", kc]).lines().all(|l| !l.contains("Kubernetes upgrade")));
}

/// 1.31 → 1.33 goes through 1.32 on the control plane; the nodes, two
/// minors behind at most, roll once, straight to 1.33.
#[test]
fn kubernetes_1_31_to_1_33_passes_through_1_32() {
    let (w, sim, _approver) = versioned_cluster("k8s131", "1.31.10", "1.33.4");
    let out = w.run(&upgrade_args(&w, &sim, &[]));
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let steps: Vec<&str> = err.lines().filter_map(|l| l.strip_prefix("step: ")).collect();
    assert_eq!(
        steps,
        [
            "cluster configuration to v1.32.6 (kubeadm-config: what joining control-plane machines run)",
            "control-plane machines to v1.32.6",
            "kube-proxy and CoreDNS to v1.32.6's",
            "cluster configuration to v1.33.4 (kubeadm-config: what joining control-plane machines run)",
            "control-plane machines to v1.33.4",
            "kube-proxy and CoreDNS to v1.33.4's",
            "node groups general to v1.33.4",
        ]
    );
    let (kubelets, config, _, dns) = versions(&sim);
    assert_eq!(kubelets, ["v1.33.4"; 3]);
    assert_eq!(config, "v1.33.4");
    assert_eq!(dns, "registry.k8s.io/coredns/coredns:v1.12.0");
    // Two control-plane machines replaced (1.32, then 1.33), each node once.
    let general = w.instances_in("general");
    assert_eq!(general.len(), 2);
}

// ---- Machines that heal: `pinfleet controller --machines CLUSTER` ----

/// The machine-health loop for the world's cluster, its stderr in a file; killed on drop.
struct Healer {
    _child: Spawned,
    log: PathBuf,
}

impl Healer {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The log once it holds every one of `lines`. A pass says what it did
    /// after it has done and recorded it, so a change seen in EC2 comes
    /// before the line that tells of it: wait for the line, never read at once.
    fn said(&self, lines: &[String]) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let log = self.log();
            if lines.iter().all(|l| log.contains(l)) {
                return log;
            }
            let missing: Vec<&String> = lines.iter().filter(|l| !log.contains(*l)).collect();
            assert!(std::time::Instant::now() < deadline, "never said {missing:?}:\n{log}");
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

fn healer(w: &World, sim: &NodeSim, extra: &[&str]) -> Healer {
    healer_as(w, sim, extra, "healer.log", true)
}

/// The loop as [`healer`] starts it, its log in `log`; with `skip`, the
/// world's `PINFLEET_SKIP_BACKUP` stays set (the sim runs no etcd).
fn healer_as(w: &World, sim: &NodeSim, extra: &[&str], log: &str, skip: bool) -> Healer {
    let log = w.dir.path().join(log);
    let mut args = vec![
        "controller",
        "--machines",
        w.cluster.as_str(),
        "--kubeconfig",
        sim.kubeconfig.to_str().unwrap(),
        "--machines-interval",
        "300ms",
        "--metrics-addr",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut cmd = w.command(&args);
    if !skip {
        cmd.env_remove("PINFLEET_SKIP_BACKUP");
    }
    let child =
        cmd.env("RUST_LOG", "warn").stdout(Stdio::null()).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    Healer { _child: Spawned(child), log }
}

fn stop_instances(w: &World, ids: &[String]) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let aws = w.aws().await;
        aws.ec2.stop_instances().set_instance_ids(Some(ids.to_vec())).send().await.unwrap();
    });
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn ids(instances: &[serde_json::Value]) -> std::collections::BTreeSet<String> {
    instances.iter().map(|i| i["id"].as_str().unwrap().to_string()).collect()
}

/// A machine whose instance stopped is terminated and replaced, and the
/// decision is in history with its reason.
#[test]
fn a_stopped_machine_is_replaced() {
    let (w, sim) = cluster("healstop", 3, 0, "        maxSurge: 1\n", "1s");
    let before = ids(&w.instances_in("general"));
    let victim = before.iter().next().unwrap().clone();
    stop_instances(&w, std::slice::from_ref(&victim));
    let h = healer(&w, &sim, &[]);
    wait_for("the stopped machine to be replaced", 60, || {
        let now = ids(&w.instances_in("general"));
        now.len() == 3 && !now.contains(&victim)
    });
    wait_ready_nodes(&sim, 4);
    h.said(&[format!("machine-health: replaced {victim} (general): instance stopped")]);
    let history = w.ok(&["history", "healstop"]);
    let record = w.json(&["history", "healstop"]);
    assert!(
        record.to_string().contains(&format!("machine-health: replaced {victim} (general): instance stopped")),
        "{history}"
    );
}

/// A Node whose kubelet stopped posting (Ready=Unknown) is replaced once
/// the unhealthy timeout has passed.
#[test]
fn a_node_not_ready_past_the_timeout_is_replaced() {
    let (w, sim) = cluster("healready", 3, 0, "        maxSurge: 1\n", "1s");
    let victim = ids(&w.instances_in("general")).into_iter().next().unwrap();
    kubectl(&sim, &["annotate", "node", &victim, "sim.pinfleet.dev/kubelet=stopped"], None);
    let h = healer(&w, &sim, &["--unhealthy-timeout", "2s"]);
    wait_for("the NotReady machine to be replaced", 60, || !ids(&w.instances_in("general")).contains(&victim));
    wait_for("a replacement", 30, || w.instances_in("general").len() == 3);
    h.said(&[format!("machine-health: replaced {victim} (general): Node {victim} Ready=Unknown for")]);
}

/// Three of five machines stopped at once is more than maxUnhealthy (40%):
/// nothing is replaced, and the loop says why.
#[test]
fn a_storm_of_failures_stops_at_the_short_circuit() {
    let (w, sim) = cluster("healstorm", 5, 0, "        maxSurge: 1\n", "1s");
    let victims: Vec<String> = ids(&w.instances_in("general")).into_iter().take(3).collect();
    stop_instances(&w, &victims);
    let h = healer(&w, &sim, &[]);
    wait_for("the short-circuit", 30, || h.log().contains("remediation short-circuited"));
    std::thread::sleep(Duration::from_secs(2));
    let log = h.log();
    assert!(log.contains("machine-health: general: 3 of 5 machines unhealthy, more than maxUnhealthy 40% (2): remediation short-circuited"), "{log}");
    assert!(!log.contains("replaced"), "{log}");
    assert_eq!(log.matches("short-circuited").count(), 1, "said once, not every pass: {log}");
    let stopped = w.instances_in("general").iter().filter(|i| i["state"] == "stopped").count();
    assert_eq!(stopped, 3, "the stopped machines are left alone");
    let history = w.json(&["history", "healstorm"]).to_string();
    assert!(history.contains("remediation short-circuited"), "the decision is in history: {history}");
}

/// A control-plane machine is replaced only on a fresh, verified etcd
/// backup, as a roll of the control plane is: with no backup and no agent
/// to ask, the stopped machine is held, the loop says why (once) and it is
/// history; with `--skip-backup REASON` it is replaced and the reason is
/// history.
#[test]
fn a_control_plane_machine_is_replaced_only_on_a_backup_or_a_stated_reason() {
    // Three members: one stopped leaves etcd its quorum (with one, the API
    // server itself stops answering, as a real one does).
    let w = World::new("healcp", 2);
    let yaml = w
        .cluster_yaml(2, "t3.large")
        .replace("      minSize: 1\n      maxSize: 1\n", "      minSize: 3\n      maxSize: 3\n");
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", "healcp", "--yes"]);
    let sim = node_sim(&w, "1s");
    wait_ready_nodes(&sim, 5);
    let victim = ids(&w.instances_in("control-plane")).into_iter().next().unwrap();
    stop_instances(&w, std::slice::from_ref(&victim));
    let h = healer_as(&w, &sim, &[], "held.log", false);
    let held = format!("machine-health: held {victim} (control-plane): instance stopped; held: ");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !h.log().contains(&held) {
        assert!(std::time::Instant::now() < deadline, "the control plane was not held: {}", h.log());
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(2));
    let log = h.log();
    assert!(log.contains("no etcd backup agent has reported for this cluster"), "{log}");
    assert!(log.contains("--skip-backup REASON"), "what to do is said: {log}");
    assert_eq!(log.matches(&held).count(), 1, "said once, not every pass: {log}");
    assert!(!log.contains("replaced"), "{log}");
    assert!(ids(&w.instances_in("control-plane")).contains(&victim), "the machine is left as it was");
    assert!(w.json(&["history", "healcp"]).to_string().contains(&held), "the hold is history");
    drop(h);
    let h = healer_as(&w, &sim, &["--skip-backup", "the control plane is down in a drill"], "skip.log", false);
    wait_for("the control-plane machine to be replaced", 90, || {
        !ids(&w.instances_in("control-plane")).contains(&victim) && w.instances_in("control-plane").len() == 3
    });
    wait_for("the history record", 30, || {
        w.json(&["history", "healcp"])
            .to_string()
            .contains(&format!("machine-health: replaced {victim} (control-plane)"))
    });
    let history = w.json(&["history", "healcp"]).to_string();
    assert!(
        history.contains(
            "machine-health: etcd backup skipped for this roll (--skip-backup): the control plane is down in a drill"
        ),
        "why it went without a backup is history: {history} {}",
        h.log()
    );
}

// ---- Machines that scale: cluster-autoscaler's externalgrpc protocol ----

/// `pinfleet autoscaler serve` for the world's cluster; killed on drop.
struct Autoscaler {
    _child: Spawned,
    url: String,
}

fn autoscaler(w: &World, sim: &NodeSim) -> Autoscaler {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let child = w
        .command(&[
            "autoscaler",
            "serve",
            &w.cluster,
            "--listen",
            &listen,
            "--kubeconfig",
            sim.kubeconfig.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the provider to listen", 30, || std::net::TcpStream::connect(&listen).is_ok());
    Autoscaler { _child: Spawned(child), url: format!("http://{listen}") }
}

/// The standard protocol, driven by a gRPC client as cluster-autoscaler
/// drives it: node groups (the node group only, desired as its floor),
/// scale up (machines launched, Nodes registered, listed with their
/// provider IDs), a scale-up past maxSize refused, `plan` not fighting the
/// new size, scale down by deleting a named node, the floor kept, and each
/// change in history.
#[test]
fn the_autoscaler_protocol_scales_a_group_up_and_down() {
    use pinfleet::autoscale::proto;
    use proto::cloud_provider_client::CloudProviderClient;
    let (w, sim) = cluster("autoscale", 2, 0, "        maxSurge: 1\n", "1s");
    let server = autoscaler(&w, &sim);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = rt.block_on(CloudProviderClient::connect(server.url.clone())).unwrap();
    let groups = rt.block_on(c.node_groups(proto::NodeGroupsRequest {})).unwrap().into_inner().node_groups;
    assert_eq!(
        groups.iter().map(|g| (g.id.as_str(), g.min_size, g.max_size)).collect::<Vec<_>>(),
        [("general", 2, 40)]
    );
    let target = |c: &mut CloudProviderClient<_>| {
        rt.block_on(c.node_group_target_size(proto::NodeGroupTargetSizeRequest { id: "general".into() }))
            .unwrap()
            .into_inner()
            .target_size
    };
    assert_eq!(target(&mut c), 2);

    // Scale up by three.
    rt.block_on(c.node_group_increase_size(proto::NodeGroupIncreaseSizeRequest { delta: 3, id: "general".into() }))
        .unwrap();
    assert_eq!(target(&mut c), 5);
    assert_eq!(w.instances_in("general").len(), 5);
    wait_ready_nodes(&sim, 6);
    let listed = rt
        .block_on(c.node_group_nodes(proto::NodeGroupNodesRequest { id: "general".into() }))
        .unwrap()
        .into_inner()
        .instances;
    assert_eq!(listed.len(), 5);
    let nodes: serde_json::Value = serde_json::from_str(&kubectl(&sim, &["get", "nodes", "-o", "json"], None)).unwrap();
    let node = |group: &str| {
        nodes["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["metadata"]["labels"]["pinfleet.dev/instance-group"] == group)
            .map(|n| proto::ExternalGrpcNode {
                provider_id: n["spec"]["providerID"].as_str().unwrap().into(),
                name: n["metadata"]["name"].as_str().unwrap().into(),
                ..Default::default()
            })
            .unwrap()
    };
    let worker = node("general");
    assert!(listed.iter().any(|i| i.id == worker.provider_id), "instances are named by their Nodes' provider IDs");
    let for_node = |c: &mut CloudProviderClient<_>, n: proto::ExternalGrpcNode| {
        rt.block_on(c.node_group_for_node(proto::NodeGroupForNodeRequest { node: Some(n) }))
            .unwrap()
            .into_inner()
            .node_group
            .unwrap()
            .id
    };
    assert_eq!(for_node(&mut c, worker.clone()), "general");
    assert_eq!(for_node(&mut c, node("control-plane")), "", "the control plane is not the autoscaler's");

    // Past maxSize: refused, nothing launched.
    let err = rt
        .block_on(c.node_group_increase_size(proto::NodeGroupIncreaseSizeRequest { delta: 40, id: "general".into() }))
        .unwrap_err();
    assert_eq!(err.message(), "size increase too large - desired:45 max:40");
    // `plan` keeps the autoscaler's size (desired 2 is only the floor).
    let plan = w.json(&["plan", "autoscale"]);
    assert_eq!(plan["changes"].as_array().map(Vec::len), Some(0), "{plan}");

    // Scale down by deleting a named node.
    rt.block_on(c.node_group_delete_nodes(proto::NodeGroupDeleteNodesRequest {
        nodes: vec![worker.clone()],
        id: "general".into(),
    }))
    .unwrap();
    assert_eq!(target(&mut c), 4);
    let left: Vec<String> = w.instances_in("general").iter().map(|i| i["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(left.len(), 4);
    assert!(!left.contains(&worker.name));
    let err = rt
        .block_on(c.node_group_delete_nodes(proto::NodeGroupDeleteNodesRequest {
            nodes: vec![node("control-plane")],
            id: "general".into(),
        }))
        .unwrap_err();
    assert!(err.message().contains("does not belong to node group general"), "{}", err.message());
    // Lowering the target below what exists would delete machines: refused.
    let err = rt
        .block_on(c.node_group_decrease_target_size(proto::NodeGroupDecreaseTargetSizeRequest {
            delta: -1,
            id: "general".into(),
        }))
        .unwrap_err();
    assert_eq!(err.message(), "attempt to delete existing nodes targetSize:4 delta:-1 existingNodes: 4");
    let history = w.json(&["history", "autoscale"]).to_string();
    assert!(history.contains("autoscaler: general 2 → 5: launched"), "{history}");
    assert!(history.contains(&format!("autoscaler: general 5 → 4: terminated {}", worker.name)), "{history}");
}

/// The end-to-end gate after each group: a cordoned node elsewhere fails
/// the cluster phase after the control-plane group and halts the roll,
/// naming the check and the node; `--skip-e2e` rolls anyway and says so in
/// history.
#[test]
fn the_e2e_gate_halts_a_roll_and_skip_e2e_is_recorded() {
    let (w, sim) = cluster("e2egate", 2, 0, "        maxSurge: 1\n", "1s");
    // The gate waits as long as the group's validation may take for the
    // cluster to settle: keep that short here.
    let yaml = std::fs::read_to_string(w.cluster_file()).unwrap().replacen(
        "      minSize: 1\n      maxSize: 1\n",
        "      minSize: 1\n      maxSize: 1\n      rollout: {validationTimeout: 4s}\n",
        1,
    );
    w.write_cluster(&yaml);
    let _approver = support::approver(&sim.kubeconfig);
    let worker = ids(&w.instances_in("general")).into_iter().next().unwrap();
    kubectl(&sim, &["cordon", &worker], None);
    set_control_plane_type(&w, "t3.large");
    let out = w.run(&upgrade_args(&w, &sim, &["--instance-group", "control-plane"]));
    assert!(!out.status.success(), "the gate must halt the roll");
    let err = stderr(&out);
    assert!(
        err.contains("the e2e gate after group control-plane failed (still after 4s): cluster/nodes-ready")
            && err.contains(&format!("{worker} (cordoned)")),
        "{err}"
    );
    let out = w.run(&upgrade_args(&w, &sim, &["--instance-group", "control-plane", "--skip-e2e"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let history = w.json(&["history", "e2egate"]).to_string();
    assert!(history.contains("e2e gates skipped for this roll (--skip-e2e)"), "{history}");
}

/// A fleet rollout of a Kubernetes version: the cluster moves 1.32 → 1.33
/// through upgrade's steps (its file still says 1.32); revert refuses, as
/// kubeadm does not downgrade.
#[test]
fn a_fleet_rollout_moves_a_cluster_to_a_kubernetes_version() {
    let (w, sim, _approver) = versioned_cluster("fleetk8s", "1.32.6", "1.32.6");
    std::fs::write(w.clusters_dir().join("fleet.yaml"), "stages:\n  - {name: dev, selector: env=dev, soak: 0s}\n")
        .unwrap();
    let dir = w.dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(&sim.kubeconfig, dir.join("fleetk8s.yaml")).unwrap();
    let d = dir.to_str().unwrap();
    let bad = w.run(&["fleet", "rollout", "apply", "--kubernetes-version", "1.33", "--yes", "--kubeconfig-dir", d]);
    assert!(stderr(&bad).contains("--kubernetes-version 1.33 is not a version like 1.33.4"), "{}", stderr(&bad));
    let out = w.run(&[
        "fleet",
        "rollout",
        "apply",
        "--kubernetes-version",
        "1.33.4",
        "--yes",
        "--kubeconfig-dir",
        d,
        "--validate-interval",
        "200ms",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (kubelets, config, proxy, _) = versions(&sim);
    assert_eq!(kubelets, ["v1.33.4"; 3]);
    assert_eq!(config, "v1.33.4");
    assert_eq!(proxy, "registry.k8s.io/kube-proxy:v1.33.4");
    let status = w.json(&["fleet", "rollout", "status"]);
    assert_eq!(status["state"], "done", "{status}");
    assert!(status["stages"][0]["clusters"][0]["from"].as_str().unwrap().ends_with("1.32.6"), "{status}");
    let revert = w.run(&["fleet", "rollout", "revert", "--yes", "--kubeconfig-dir", d]);
    assert!(!revert.status.success());
    assert!(stderr(&revert).contains("kubeadm does not downgrade a control plane"), "{}", stderr(&revert));
}

/// A Spot interruption warning, sent through EventBridge as EC2 sends it
/// (100 s into its two minutes), reaches the loop through the queue and
/// rules `bootstrap` made: the Node is cordoned, the offering marked out in
/// the capacity ledger, a replacement launched on another offering, the
/// pod (600 s of grace of its own) drained within the 5 s left, and the
/// machine ended — each step in the log and history.
#[test]
fn a_spot_interruption_warning_cordons_drains_within_its_time_and_replaces_elsewhere() {
    let spot = "        maxSurge: 1\n      capacity:\n        types: [t3a.large, m5.large, m5a.large, m6i.large]\n        market: Spot\n        fallback: [zone, type]\n";
    let (w, sim) = cluster("spotwarn", 2, 0, spot, "1s");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The queue and its four rules exist, and the plan has nothing more to make.
    rt.block_on(async {
        let aws = w.aws().await;
        aws.sqs.get_queue_url().queue_name("pinfleet-spotwarn-interruptions").send().await.unwrap();
        let rules = aws.events.list_rules().name_prefix("pinfleet-spotwarn-").send().await.unwrap();
        let mut names: Vec<&str> = rules.rules().iter().filter_map(|r| r.name()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "pinfleet-spotwarn-rebalance",
                "pinfleet-spotwarn-scheduled-change",
                "pinfleet-spotwarn-spot-interruption",
                "pinfleet-spotwarn-state-change"
            ]
        );
    });
    let plan = w.ok(&["plan", "spotwarn"]);
    assert!(!plan.contains("events/"), "{plan}");

    let general = w.instances_in("general");
    let victim = general[0]["id"].as_str().unwrap().to_string();
    let offering = |i: &serde_json::Value| (i["instance_type"].to_string(), i["zone"].to_string());
    let victim_offering = offering(&general[0]);
    kubectl(
        &sim,
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: slow-to-stop, namespace: default, annotations: {{sim.pinfleet.dev/ignores-sigterm: \"true\"}}}}\nspec:\n  nodeName: {victim}\n  terminationGracePeriodSeconds: 600\n  containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]\n"
        )),
    );
    let h = healer(&w, &sim, &[]);
    let sent = std::time::Instant::now();
    send_ec2_event(
        &w,
        "EC2 Spot Instance Interruption Warning",
        serde_json::json!({"instance-id": victim, "instance-action": "terminate"}),
        90,
    );
    wait_for("the warned Node to be cordoned (or gone)", 60, || {
        let v: serde_json::Value = serde_json::from_str(&kubectl(&sim, &["get", "nodes", "-o", "json"], None)).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["metadata"]["name"] == victim.as_str())
            .is_none_or(|n| n["spec"]["unschedulable"] == true)
    });
    println!("cordoned {:.1}s after the warning was sent", sent.elapsed().as_secs_f64());
    // The pod (it ignores SIGTERM) stays terminating for the grace it was
    // given: what is left of the two minutes, not its own 600 s.
    let mut given = None;
    wait_for("the slow pod to go", 60, || {
        let out = kubectl(&sim, &["get", "pods", "-n", "default", "-o", "json"], None);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let pod = v["items"].as_array().unwrap().iter().find(|p| p["metadata"]["name"] == "slow-to-stop").cloned();
        if let Some(g) = pod.as_ref().and_then(|p| p["metadata"]["deletionGracePeriodSeconds"].as_i64()) {
            given = Some(g);
        }
        pod.is_none()
    });
    let given = given.expect("the pod was seen terminating with a grace period");
    // Sent 90 s old: 30 s left, less the 15 s margin, less however long
    // the healer took to hear it (never the pod's own 600 s).
    assert!((1..=15).contains(&given), "grace given {given}");
    wait_for("the warned machine to be ended and replaced", 120, || {
        let now = ids(&w.instances_in("general"));
        now.len() == 2 && !now.contains(&victim)
    });
    let log = h.said(&[
        format!("interruption: cordoned {victim}"),
        "marked out in the capacity ledger".to_string(),
        format!("to replace {victim}"),
        format!("interruption: ended {victim}"),
    ]);
    // The pods' grace was capped to what was left of the two minutes (the pod asked for 600 s).
    let cap: u64 = log
        .split("each pod's grace at most ")
        .nth(1)
        .and_then(|r| r.split('s').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no drain line:\n{log}"));
    assert!(cap <= 15, "{log}");
    // The replacement is on another offering than the one EC2 took back.
    let after = w.instances_in("general");
    let replacement = after.iter().find(|i| !general.iter().any(|g| g["id"] == i["id"])).unwrap();
    assert_ne!(offering(replacement), victim_offering, "{replacement}");
    let pods = kubectl(&sim, &["get", "pods", "-n", "default", "-o", "name"], None);
    assert!(!pods.contains("slow-to-stop"), "{pods}");
    let ledger = w.ok(&["capacity", "spotwarn"]);
    assert!(ledger.contains("SpotInterruption"), "{ledger}");
    // And in the loop's metrics, by group and code.
    let addr = log
        .split("capacity metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address:\n{log}"))
        .to_string();
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    use std::io::{Read as _, Write as _};
    write!(conn, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut body = String::new();
    conn.read_to_string(&mut body).unwrap();
    assert!(
        body.contains("pinfleet_capacity_offerings_out{region=\"us-east-1\",group=\"spotwarn/general\",code=\"SpotInterruption\"} 1"),
        "{body}"
    );
    // The record is written once every step is done, after the lines.
    wait_for("the interruption in history", 30, || {
        w.json(&["history", "spotwarn"]).to_string().contains(&format!("interruption: ended {victim}"))
    });
}

/// An EC2 event about this world's machines, put on EventBridge `ago`
/// seconds after it happened (EventBridge routes it to the rules' queue).
fn send_ec2_event(w: &World, detail_type: &str, detail: serde_json::Value, ago: i64) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let aws = w.aws().await;
        let id = detail["instance-id"].as_str().unwrap_or_default().to_string();
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .source("aws.ec2")
            .detail_type(detail_type)
            .detail(detail.to_string())
            .resources(format!("arn:aws:ec2:us-east-1:{}:instance/{id}", w.account))
            .time(aws_sdk_eventbridge::primitives::DateTime::from_secs(chrono::Utc::now().timestamp() - ago))
            .build();
        let out = aws.events.put_events().entries(entry).send().await.unwrap();
        assert_eq!(out.failed_entry_count(), 0);
    });
}

/// A rebalance recommendation launches the replacement at once and drains
/// nothing while it boots; once it is Ready the old machine is drained and
/// ended, and the group is back to its size. A message that is not an
/// event is dropped with a line, and the loop goes on.
#[test]
fn a_rebalance_recommendation_replaces_first_and_drains_once_the_replacement_is_ready() {
    let spot = "        maxSurge: 1\n      capacity:\n        types: [t3a.large, m5.large, m5a.large, m6i.large]\n        market: Spot\n        fallback: [zone, type]\n";
    let (w, sim) = cluster("spotrebal", 2, 0, spot, "10s");
    let before = ids(&w.instances_in("general"));
    let victim = before.iter().next().unwrap().clone();
    let h = healer(&w, &sim, &[]);
    // Hostile first: a body that is not an event.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let aws = w.aws().await;
        let url = aws.sqs.get_queue_url().queue_name("pinfleet-spotrebal-interruptions").send().await.unwrap();
        aws.sqs
            .send_message()
            .queue_url(url.queue_url().unwrap())
            .message_body(r#"{"detail-type": "\u001b[2J", "time": "2026-11-26T10:00:00Z"}"#)
            .send()
            .await
            .unwrap();
    });
    send_ec2_event(&w, "EC2 Instance Rebalance Recommendation", serde_json::json!({"instance-id": victim}), 0);
    wait_for("the replacement to be launched", 60, || w.instances_in("general").len() == 3);
    // While it boots (10 s), the old machine is neither cordoned nor drained.
    let node = kubectl(&sim, &["get", "node", &victim, "-o", "jsonpath={.spec.unschedulable}"], None);
    assert_ne!(node.trim(), "true", "cordoned before the replacement was Ready");
    wait_for("the old machine to be ended", 90, || {
        let now = ids(&w.instances_in("general"));
        now.len() == 2 && !now.contains(&victim)
    });
    h.said(&[
        "is dropped: detail-type".to_string(),
        format!("rebalance: {victim} (general) is at risk"),
        "is Ready; drained and ended".to_string(),
    ]);
}
