//! A cluster that comes up: the sim's nodes behave like kubeadm machines'
//! kubelets (NotReady with kubelet's network message until the pod-network
//! agent runs on them; a kubelet-serving CSR each; pod logs only once it is
//! issued), and the default addon set plus pinfleet's approver bring them
//! up. The sim's kubelets are what is tested, so this runs on the sim only
//! (a real cluster's nodes are already up).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

#[path = "support/files.rs"]
mod files;
use files::copy_dir;

struct Up {
    sim: pinfleet::sim::Sim,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    client: kube::Client,
}

/// A sim with dev-local's machines as booted kubeadm nodes (no network yet),
/// and a copy of the clusters and addons folders; `addons_overrides` is
/// appended to dev-local's spec (e.g. to disable one).
async fn up(addons_overrides: &str) -> Up {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_dir(&root.join("addons"), &dir.path().join("addons"));
    copy_dir(&root.join("clusters"), &dir.path().join("clusters"));
    let file = dir.path().join("clusters/dev-local.yaml");
    let yaml = std::fs::read_to_string(&file).unwrap() + addons_overrides;
    std::fs::write(&file, yaml).unwrap();
    let (loaded, diags) = pinfleet::spec::load_paths(&[file], &Default::default());
    assert!(diags.0.is_empty(), "{diags}");
    let mut inner = pinfleet::sim::Inner::new();
    for n in pinfleet::sim::nodes::declared_for(&loaded[0].cluster) {
        pinfleet::sim::nodes::declare(&mut inner, &n);
    }
    let sim = pinfleet::sim::Sim::start_with(0, inner, Default::default()).await.unwrap();
    let kubeconfig = dir.path().join("kubeconfig.yaml");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let client = pinfleet::kube::client_from_kubeconfig(&kubeconfig, pinfleet::kube::Retry::Never).await.unwrap();
    Up { sim, dir, kubeconfig, client }
}

impl Up {
    fn pinfleet(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_pinfleet"))
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .env("PINFLEET_CLUSTERS_DIR", self.dir.path().join("clusters"))
            .env("PINFLEET_ADDONS_DIR", self.dir.path().join("addons"))
            .env("PINFLEET_HOME", self.dir.path().join("home"))
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    }

    async fn nodes(&self) -> Vec<Node> {
        Api::<Node>::all(self.client.clone()).list(&ListParams::default()).await.unwrap().items
    }

    /// Each node's Ready condition: (status, message).
    async fn readiness(&self) -> Vec<(String, String)> {
        self.nodes()
            .await
            .iter()
            .map(|n| {
                let c = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                    .unwrap();
                (c.status.clone(), c.message.clone().unwrap_or_default())
            })
            .collect()
    }

    async fn wait_for<F: std::future::Future<Output = bool>>(&self, what: &str, f: impl Fn() -> F) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !f().await {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The log of one pod of the workload controller, through the API server.
    async fn a_log(&self) -> Result<String, kube::Error> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), "pinfleet-system");
        let pod = pods.list(&ListParams::default()).await.unwrap().items.into_iter().next().expect("a pod");
        pods.logs(pod.metadata.name.as_deref().unwrap(), &Default::default()).await
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_turn_ready_only_once_the_pod_network_runs_and_logs_need_the_approver() {
    let up = up("").await;
    // Booted, but no pod network: kubelet's own words, and the not-ready taint.
    let before = up.readiness().await;
    assert_eq!(before.len(), 4);
    for (status, message) in &before {
        assert_eq!(status, "False");
        assert_eq!(message, pinfleet::sim::nodes::NETWORK_NOT_READY);
    }
    up.wait_for("the not-ready taint on every node", || async {
        up.nodes().await.iter().all(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
        })
    })
    .await;
    // Every kubelet filed a serving CSR.
    let csrs: Api<CertificateSigningRequest> = Api::all(up.client.clone());
    up.wait_for("a serving CSR per node", || async {
        csrs.list(&ListParams::default()).await.unwrap().items.len() == 4
    })
    .await;
    let filed = csrs.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(filed.len(), 4);
    assert!(filed.iter().all(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving"));

    // The default set: the pod network first, then the rest once nodes are Ready.
    let out = up.pinfleet(&["addons", "apply", "dev-local", "--timeout", "60s", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let events = String::from_utf8_lossy(&out.stdout);
    let first_applied =
        events.lines().find(|l| l.contains("\"applied\"") || l.contains("applying")).unwrap_or_default();
    assert!(first_applied.contains("pod-network"), "the pod network is not installed first: {first_applied}");
    for (status, _) in up.readiness().await {
        assert_eq!(status, "True");
    }
    assert!(up.nodes().await.iter().all(|n| {
        !n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "node.kubernetes.io/not-ready"))
    }));
    // A second apply changes nothing.
    let again = up.pinfleet(&["addons", "diff", "dev-local"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));

    // No approver yet: the API server cannot reach the kubelet over TLS.
    let err = up.a_log().await.unwrap_err().to_string();
    assert!(err.contains("remote error: tls: internal error"), "{err}");
    // pinfleet's approver (addresses from the Nodes, as in the sim) approves
    // every kubelet's request, the signer issues them, and logs are served.
    let approver =
        tokio::spawn(pinfleet::controller::serving::run(up.client.clone(), pinfleet::controller::serving::FromNode));
    up.wait_for("every serving certificate to be issued", || async {
        let all = csrs.list(&ListParams::default()).await.unwrap().items;
        all.iter().all(|c| c.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some())
    })
    .await;
    for c in csrs.list(&ListParams::default()).await.unwrap().items {
        let conds = c.status.unwrap().conditions.unwrap();
        assert_eq!(conds[0].type_, "Approved", "{conds:?}");
    }
    let log = up.a_log().await.unwrap();
    assert!(log.contains("runs no process"), "{log}");
    approver.abort();
    up.sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_pod_network_nodes_stay_not_ready_and_nothing_else_starts() {
    let up = up("  addons:\n    - {name: pod-network, enabled: false}\n").await;
    let out = up.pinfleet(&["addons", "apply", "dev-local", "--timeout", "3s"]);
    assert!(!out.status.success(), "the set came up without a pod network");
    for (status, message) in up.readiness().await {
        assert_eq!((status.as_str(), message.as_str()), ("False", pinfleet::sim::nodes::NETWORK_NOT_READY));
    }
    // Pods that need the network wait for a node that has one (hostNetwork
    // agents, like the cloud controller, do run).
    let pods: Api<Pod> = Api::all(up.client.clone());
    let all = pods.list(&ListParams::default()).await.unwrap().items;
    let host = |p: &Pod| p.spec.as_ref().and_then(|s| s.host_network) == Some(true);
    let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let waiting: Vec<&Pod> = all.iter().filter(|p| !host(p)).collect();
    assert!(!waiting.is_empty(), "no pod needed the network");
    assert!(waiting.iter().all(|p| !running(p)), "a pod runs without a pod network");
    assert!(all.iter().any(|p| host(p) && running(p)), "hostNetwork pods should run");
    up.sim.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_denies_a_node_asking_for_another_machines_address() {
    let up = up("").await;
    // The sim's kubelets file honest requests; this one is forged: node 0
    // asks for an address that is not its machine's.
    let nodes = up.nodes().await;
    let csrs: Api<CertificateSigningRequest> = Api::all(up.client.clone());
    let name = nodes[0].metadata.name.clone().unwrap();
    let pem = pinfleet::sim::nodes::serving_csr_pem(&name, &[("InternalIP", "192.0.2.77")]).unwrap();
    let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "forged"},
        "spec": {
            "request": base64_encode(&pem),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": ["digital signature", "server auth"],
            "username": format!("system:node:{name}"),
            "groups": ["system:nodes", "system:authenticated"],
        }
    }))
    .unwrap();
    let created = csrs.create(&Default::default(), &csr).await.unwrap();
    let decision =
        pinfleet::controller::serving::review(&up.client, &pinfleet::controller::serving::FromNode, &created)
            .await
            .unwrap();
    let want = format!("IP address 192.0.2.77 is not an address of node {name}'s machine");
    assert_eq!(decision, Some(pinfleet::controller::serving::Decision::Deny(want.clone())));
    let after = csrs.get("forged").await.unwrap();
    let cond = &after.status.unwrap().conditions.unwrap()[0];
    assert_eq!((cond.type_.as_str(), cond.message.as_deref()), ("Denied", Some(want.as_str())));
    up.sim.stop().await;
}

fn base64_encode(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machines_launched_into_a_running_cluster_get_a_token_minted_through_the_api() {
    use k8s_openapi::api::core::v1::Secret;
    let up = up("").await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let store = pinfleet::state::Store::open(&url, "dev-local", None).await.unwrap();
    let now = chrono::Utc::now();
    // Nothing published and no API server: a clear error, nothing launched.
    let err = pinfleet::state::join::ensure_fresh(None, &store, now).await.unwrap_err().to_string();
    assert!(err.contains("no bootstrap token"), "{err}");
    let r = pinfleet::state::join::ensure_fresh(Some(&up.client), &store, now).await.unwrap();
    let (id, secret) = r.token.split_once('.').unwrap();
    assert_eq!(r.expires, now + pinfleet::state::join::TOKEN_TTL);
    // The Secret kubeadm's bootstrap authenticator reads.
    let s = Api::<Secret>::namespaced(up.client.clone(), "kube-system")
        .get(&format!("bootstrap-token-{id}"))
        .await
        .unwrap();
    assert_eq!(s.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
    let data = s.data.unwrap();
    assert_eq!(data["token-secret"].0, secret.as_bytes());
    assert_eq!(data["usage-bootstrap-authentication"].0, b"true");
    // And what machines fetch is that token.
    let stored = store.get(pinfleet::state::join::TOKEN_KEY).await.unwrap().unwrap().0;
    assert_eq!(String::from_utf8(stored).unwrap(), r.token);
    // Later, with the API server gone, the stored token serves while it has time left.
    let later = pinfleet::state::join::ensure_fresh(None, &store, now + chrono::Duration::hours(2)).await.unwrap();
    assert_eq!(later.token, r.token);
    let err = pinfleet::state::join::ensure_fresh(
        None,
        &store,
        now + chrono::Duration::hours(23) + chrono::Duration::minutes(30),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("could not mint a new one"), "{err}");
    up.sim.stop().await;
}

/// A control-plane machine that joins long after `kubeadm init` (here three
/// hours; kubeadm deletes the `kubeadm-certs` Secret of `init
/// --upload-certs` after two) gets everything it needs: nothing is uploaded
/// to the cluster to expire, the shared certificates kubeadm copies to a
/// joining control plane are in the state store for its role, its bootstrap
/// fetches each of them, and a token valid at that hour is minted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_machine_joins_three_hours_after_init() {
    use pinfleet::render::{BootstrapMode, BootstrapParams, Renderer};
    use pinfleet::state::join;
    let up = up("").await;
    let dir = tempfile::tempdir().unwrap();
    let store =
        pinfleet::state::Store::open(&format!("file://{}", dir.path().display()), "dev-local", None).await.unwrap();
    let init_at = chrono::Utc::now();
    let pki = pinfleet::state::pki::Pki::generate("dev-local").unwrap();
    join::publish_files(&store, &pki).await.unwrap();
    join::for_init(&store, init_at).await.unwrap();

    let file = up.dir.path().join("clusters/dev-local.yaml");
    let (loaded, _) = pinfleet::spec::load_paths(&[file], &Default::default());
    let cluster = &loaded[0].cluster;
    let cp = cluster.spec.instance_groups.iter().find(|g| g.name == "control-plane").unwrap();
    let (r, params) = (Renderer::new(), BootstrapParams::for_cluster(cluster));
    let init = r.kubeadm_config(cluster, cp, BootstrapMode::Init, &params).unwrap();
    let joining = r.kubeadm_config(cluster, cp, BootstrapMode::JoinControlPlane, &params).unwrap();
    let script = r.bootstrap_script(cluster, cp, BootstrapMode::JoinControlPlane, &params).unwrap();
    for text in [&init, &joining, &script] {
        assert!(!text.contains("certificateKey") && !text.contains("upload-certs"), "{text}");
    }
    assert!(joining.contains("controlPlane: {}"), "{joining}");

    // kubeadm's list of certificates shared with a joining control plane,
    // and the name each has in the state store.
    let shared = [
        ("ca.crt", "ca.crt"),
        ("ca.key", "ca.key"),
        ("sa.key", "sa.key"),
        ("sa.pub", "sa.pub"),
        ("front-proxy-ca.crt", "front-proxy-ca.crt"),
        ("front-proxy-ca.key", "front-proxy-ca.key"),
        ("etcd/ca.crt", "etcd-ca.crt"),
        ("etcd/ca.key", "etcd-ca.key"),
    ];
    let files: std::collections::BTreeMap<&str, String> = pki.machine_files().into_iter().collect();
    for (kubeadm_name, stored) in shared {
        let (bytes, _) = store.get(&format!("{}{stored}", join::PKI_PREFIX)).await.unwrap().expect(stored);
        assert_eq!(String::from_utf8(bytes).unwrap(), files[stored], "{kubeadm_name}");
        assert!(script.contains(stored), "the bootstrap fetches {stored} ({kubeadm_name})");
    }
    assert!(script.contains("/etc/kubernetes/pki/etcd/ca.key"), "{script}");

    let three_hours_later = init_at + chrono::Duration::hours(3);
    let token = join::ensure_fresh(Some(&up.client), &store, three_hours_later).await.unwrap();
    assert!(token.expires - three_hours_later >= join::TOKEN_TTL - chrono::Duration::seconds(1), "minted at that hour");
    up.sim.stop().await;
}
