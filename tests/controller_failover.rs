//! Two `pinfleet controller --leader-elect` processes against the API (sim
//! by default, a real cluster under PINFLEET_TEST_KUBECONFIG): the leader
//! is killed with SIGKILL (no lease released, no goodbye), a change is made
//! while nobody leads, and the standby, its caches warm, takes the Lease
//! within the lease's bound and carries the change out. A binary of its own:
//! no other controller in the process may act for the standby.

#[path = "support/kube.rs"]
mod kube_support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_support::KubeEnv;
use pinfleet::workloads::PinterestService;
use serde_json::json;

/// The replica that holds the `pinfleet-controller` Lease, once one does.
async fn leader_among(leases: &Api<Lease>, replicas: &Replicas) -> String {
    let ids: Vec<String> = replicas.0.iter().map(|(id, _)| id.clone()).collect();
    until("a replica to hold the Lease", || {
        let (leases, ids) = (leases.clone(), ids.clone());
        async move {
            let h = leases.get_opt("pinfleet-controller").await.unwrap()?.spec?.holder_identity?;
            ids.contains(&h).then_some(h)
        }
    })
    .await
}

async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    for _ in 0..600 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

/// The replicas, killed when the test ends however it ends.
struct Replicas(Vec<(String, Child)>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_millis(500);

/// A cluster with the platform's CRDs and the controller's namespace.
fn platform() -> KubeEnv {
    let k = KubeEnv::start();
    k.ok_stdin(
        &["apply", "--server-side", "-f", "-"],
        &std::fs::read_to_string("addons/platform-crds/manifests/crds.yaml").unwrap(),
    );
    k.ok(&["wait", "--for=condition=Established", "crd/pinterestservices.pinfleet.dev", "--timeout=30s"]);
    k.ok_stdin(
        &["apply", "-f", "-"],
        &format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {}}}\n", pinfleet::controller::SYSTEM_NAMESPACE),
    );
    k
}

fn replica(k: &KubeEnv, id: &str) -> Child {
    replica_with(k, id, &["--lease-duration", "3s", "--renew-every", "500ms"])
}

/// A leader-elect controller replica watching the test's namespace; `lease` its Lease flags.
fn replica_with(k: &KubeEnv, id: &str, lease: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pinfleet"))
        .args(["controller", "--kubeconfig", k.kubeconfig.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .args(["--serving-addresses", "off", "--leader-elect", "--identity", id])
        .args(lease)
        .args(["--watch-namespace", &k.namespace])
        // The election's own lines (each round that timed out too), kept
        // to say why when leadership moved.
        .env("RUST_LOG", "warn,pinfleet::controller::leader=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log_of(id)).map(Stdio::from).unwrap_or_else(|_| Stdio::null()))
        .spawn()
        .unwrap()
}

/// Where a replica's log goes.
fn log_of(id: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("pinfleet-replica-{id}.log"))
}

/// Both replicas' logs, for a failure's message.
fn logs(replicas: &Replicas) -> String {
    replicas
        .0
        .iter()
        .map(|(id, _)| format!("--- {id}:\n{}", std::fs::read_to_string(log_of(id)).unwrap_or_default()))
        .collect()
}

fn image_of(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers.iter().find(|c| c.name == "app")?.image.clone()
}

/// The failover test measures the hand-over against the protocol's bound;
/// the busy test spins every core on purpose: they take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_leader_is_replaced_within_the_lease_and_no_change_is_lost() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let k = platform();
    let client = k.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), pinfleet::controller::SYSTEM_NAMESPACE);
    let mut replicas = Replicas(vec![]);
    for id in ["replica-a", "replica-b"] {
        let id = k.unique(id);
        replicas.0.push((id.clone(), replica(&k, &id)));
    }
    // One of the two leads (a lease left by an earlier run expires first).
    let leader = leader_among(&leases, &replicas).await;

    let svcs: Api<PinterestService> = Api::namespaced(client.clone(), &k.namespace);
    let cr: PinterestService = serde_json::from_value(json!({
        "apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": "home"},
        "spec": {"owner": {"team": "feeds", "project": "home"}, "replicas": 2, "ports": [{"name": "http", "port": 8080}],
            "template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9"}]}}}
    }))
    .unwrap();
    svcs.create(&PostParams::default(), &cr).await.unwrap();
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), &k.namespace);
    until("the leader to make the Deployment", || {
        let deploys = deploys.clone();
        async move {
            deploys
                .get_opt("home")
                .await
                .unwrap()
                .filter(|d| image_of(d).as_deref() == Some("registry.k8s.io/pause:3.9"))
        }
    })
    .await;

    // SIGKILL the leader, then change the service while nobody leads.
    let before = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    let i = replicas.0.iter().position(|(id, _)| *id == leader).unwrap();
    replicas.0[i].1.kill().unwrap();
    replicas.0[i].1.wait().unwrap();
    let killed = Instant::now();
    let last_renew = leases.get("pinfleet-controller").await.unwrap().spec.unwrap().renew_time.unwrap().0;
    svcs.patch(
        "home",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}}})),
    )
    .await
    .unwrap();

    until("the standby to carry out the change made after the kill", || {
        let deploys = deploys.clone();
        async move {
            deploys.get("home").await.ok().filter(|d| image_of(d).as_deref() == Some("registry.k8s.io/pause:3.10"))
        }
    })
    .await;
    let took = killed.elapsed();
    let after = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    let standby = replicas.0.iter().map(|(id, _)| id).find(|id| **id != leader).unwrap();
    assert_eq!(after.holder_identity.as_ref(), Some(standby), "the standby holds the Lease");
    assert_eq!(
        after.lease_transitions.unwrap_or(0),
        before.lease_transitions.unwrap_or(0) + 1,
        "one hand-over, no flapping"
    );
    // The protocol's bound, from the Lease's own records: the standby took
    // it no later than one lease duration and one renew period after the
    // dead leader's last renewal (plus a second for the servers' clocks).
    let acquired = after.acquire_time.unwrap().0;
    let waited = Duration::try_from(acquired.duration_since(last_renew)).unwrap_or_default();
    assert!(
        waited <= LEASE + RENEW + Duration::from_secs(1),
        "taken {waited:?} after the last renewal; the bound is {:?}",
        LEASE + RENEW
    );
    eprintln!("failover: the change made after SIGKILL was carried out {:.1} s after the kill (lease {LEASE:?}, renew {RENEW:?}); Lease taken {:.1} s after the last renewal", took.as_secs_f64(), waited.as_secs_f64());
}

/// Keeps every core busy until dropped (the machine as slow as it gets:
/// a renewal must hold however slow the machine is).
struct BusyCores(std::sync::Arc<std::sync::atomic::AtomicBool>, Vec<std::thread::JoinHandle<()>>);

impl BusyCores {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                    }
                })
            })
            .collect();
        BusyCores(stop, threads)
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// Item 9's loop, small: two replicas while hundreds of services arrive by
/// `kubectl apply --server-side` in chunks, every core busy. The leader
/// holds the Lease throughout (no hand-over while busy: a lost renewal
/// would start the other replica's full pass, which starved the next
/// renewal, and leadership flapped), every service converges, and a leader
/// told to stop (SIGTERM) releases the Lease before it exits.
#[tokio::test(flavor = "multi_thread")]
async fn leadership_holds_while_busy_and_a_stopping_leader_releases_the_lease() {
    let _turn = ONE_AT_A_TIME.lock().await;
    const SERVICES: usize = 240;
    const CHUNK: usize = 60;
    let k = platform();
    let client = k.client().await;
    // The lease (7 s, renewed every 2 s), in the test's own
    // namespace: no other test's replicas contend for it.
    let leases: Api<Lease> = Api::namespaced(client.clone(), &k.namespace);
    let mut replicas = Replicas(vec![]);
    for id in ["busy-a", "busy-b"] {
        let id = k.unique(id);
        let child = replica_with(
            &k,
            &id,
            &["--lease-duration", "7s", "--renew-every", "2s", "--lease-namespace", &k.namespace],
        );
        replicas.0.push((id.clone(), child));
    }
    let leader = leader_among(&leases, &replicas).await;
    let before = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();

    let busy = BusyCores::start();
    let doc = |i: usize| {
        format!(
            "---\napiVersion: pinfleet.dev/v1alpha1\nkind: PinterestService\nmetadata: {{name: busy-{i:04}, namespace: {ns}}}\nspec:\n  owner: {{team: team-{t}, project: p}}\n  replicas: 2\n  ports: [{{name: http, port: 8080}}]\n  template: {{spec: {{containers: [{{name: app, image: registry.k8s.io/pause:3.9}}]}}}}\n",
            ns = k.namespace,
            t = i % 7
        )
    };
    for start in (0..SERVICES).step_by(CHUNK) {
        let chunk: String = (start..(start + CHUNK).min(SERVICES)).map(doc).collect();
        k.ok_stdin(&["apply", "--server-side", "-f", "-"], &chunk);
    }
    // Every service reconciled at its generation, followed while it moves.
    let svcs: Api<PinterestService> = Api::namespaced(client.clone(), &k.namespace);
    let mut last = (0, Instant::now());
    loop {
        let done = svcs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|s| {
                s.status.as_ref().is_some_and(|st| {
                    st.observed_generation == s.metadata.generation
                        && st.conditions.iter().any(|c| c.type_ == "Reconciled" && c.status == "True")
                })
            })
            .count();
        if done == SERVICES {
            break;
        }
        if done > last.0 {
            last = (done, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(120),
            "no progress for 2 minutes at {done}/{SERVICES} reconciled"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    drop(busy);
    assert_eq!(
        after.holder_identity.as_ref(),
        Some(&leader),
        "the leader held the Lease while busy; the replicas said:\n{}",
        logs(&replicas)
    );
    assert_eq!(
        after.lease_transitions.unwrap_or(0),
        before.lease_transitions.unwrap_or(0),
        "no hand-over while busy (lease 7 s, renew 2 s); the replicas said:\n{}",
        logs(&replicas)
    );

    // SIGTERM: the leader stops its controllers and releases the Lease
    // before it exits. Read the moment it has gone, the Lease names no
    // one or the standby already; an unreleased one would still name the
    // dead leader for a whole lease duration.
    let i = replicas.0.iter().position(|(id, _)| *id == leader).unwrap();
    unsafe { libc::kill(replicas.0[i].1.id() as i32, libc::SIGTERM) };
    let status = replicas.0[i].1.wait().unwrap();
    assert!(status.success(), "the leader ended cleanly on SIGTERM: {status:?}");
    let released = leases.get("pinfleet-controller").await.unwrap().spec.unwrap();
    let standby = replicas.0.iter().map(|(id, _)| id).find(|id| **id != leader).unwrap().clone();
    let holder = released.holder_identity.clone().unwrap_or_default();
    assert!(holder.is_empty() || holder == standby, "the Lease was released on SIGTERM: {released:?}");
    until("the standby to take the released Lease", || {
        let (leases, standby) = (leases.clone(), standby.clone());
        async move {
            let h = leases.get("pinfleet-controller").await.unwrap().spec?.holder_identity?;
            (h == standby).then_some(())
        }
    })
    .await;
}
