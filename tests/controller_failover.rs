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

fn replica(k: &KubeEnv, id: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pinfleet"))
        .args(["controller", "--kubeconfig", k.kubeconfig.to_str().unwrap(), "--metrics-addr", "127.0.0.1:0"])
        .args(["--serving-addresses", "off", "--leader-elect", "--identity", id])
        .args(["--lease-duration", "3s", "--renew-every", "500ms"])
        .args(["--watch-namespace", &k.namespace])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn image_of(d: &Deployment) -> Option<String> {
    d.spec.as_ref()?.template.spec.as_ref()?.containers.iter().find(|c| c.name == "app")?.image.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_leader_is_replaced_within_the_lease_and_no_change_is_lost() {
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
    let client = k.client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), pinfleet::controller::SYSTEM_NAMESPACE);
    let mut replicas = Replicas(vec![]);
    for id in ["replica-a", "replica-b"] {
        let id = k.unique(id);
        replicas.0.push((id.clone(), replica(&k, &id)));
    }
    let ids: Vec<String> = replicas.0.iter().map(|(id, _)| id.clone()).collect();
    // One of the two leads (a lease left by an earlier run expires first).
    let leader = until("a replica to hold the Lease", || {
        let (leases, ids) = (leases.clone(), ids.clone());
        async move {
            let h = leases.get_opt("pinfleet-controller").await.unwrap()?.spec?.holder_identity?;
            ids.contains(&h).then_some(h)
        }
    })
    .await;

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
    let standby = ids.iter().find(|id| **id != leader).unwrap();
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
