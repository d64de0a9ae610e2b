//! Shared by the gateway's tests and the console's: member clusters as
//! sims with Ready nodes (and the workload controller when asked), and an
//! OIDC issuer on loopback that signs tokens.
#![allow(dead_code)]

use std::path::PathBuf;

use jsonwebtoken::{EncodingKey, Header};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};

/// A member cluster: a sim with Ready nodes of the given size, the
/// platform CRDs, and (when asked) the workload controller.
pub struct Member {
    pub name: String,
    pub kubeconfig: PathBuf,
    stop: Option<std::sync::mpsc::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

pub fn member(name: &str, nodes: u32, cpu: &str, controller: bool) -> Member {
    let defs = (0..nodes)
        .map(|i| {
            let n = format!("{name}-node-{i}");
            (
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n}}),
                json!({"cpu": cpu, "memory": "32Gi", "pods": "110"}),
            )
        })
        .collect();
    member_of(name, defs, controller)
}

/// A member whose `nodes` machines are of an EC2 instance type, registered
/// as pinfleet's instance groups register them: the GPU product label and
/// the device's taint, and the device plugin's allocatable
/// (`pinfleet::accelerated`).
#[allow(dead_code)]
pub fn accelerated_member(name: &str, machine_type: &str, nodes: u32, controller: bool) -> Member {
    let a = pinfleet::accelerated::of_instance_type(machine_type).expect("an accelerated type");
    let (cpus, mem) = pinfleet::sim::nodes::instance_capacity(machine_type);
    let defs = (0..nodes)
        .map(|i| {
            let n = format!("{name}-node-{i}");
            let mut labels = json!({"node.kubernetes.io/instance-type": machine_type});
            if let Some(p) = a.product_label {
                labels[pinfleet::workloads::demand::PRODUCT_LABEL] = json!(p);
            }
            (
                json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": labels},
                    "spec": {"taints": [{"key": a.resource, "value": "present", "effect": "NoSchedule"}]}}),
                json!({"cpu": cpus.to_string(), "memory": format!("{mem}Gi"), "pods": "110", a.resource: a.count.to_string()}),
            )
        })
        .collect();
    member_of(name, defs, controller)
}

/// A member of the given Nodes (each applied, then its status made Ready
/// with the allocatable given).
pub fn member_of(name: &str, nodes: Vec<(Value, Value)>, controller: bool) -> Member {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig.yaml");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let p = path.clone();
    let cluster = name.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let sim = pinfleet::sim::Sim::start(0).await.unwrap();
            sim.write_kubeconfig(&p).unwrap();
            let client = pinfleet::kube::apply::connect(&p).await.unwrap();
            let pp = PatchParams::apply("test").force();
            let crds: Api<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            > = Api::all(client.clone());
            for c in pinfleet::workloads::crds() {
                crds.patch(c.metadata.name.as_deref().unwrap(), &pp, &Patch::Apply(&c)).await.unwrap();
            }
            let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
            for (node, allocatable) in nodes {
                let n = node["metadata"]["name"].as_str().unwrap().to_string();
                api.patch(&n, &pp, &Patch::Apply(node)).await.unwrap();
                api.patch_status(
                    &n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {
                    "conditions": [{"type": "Ready", "status": "True"}],
                    "allocatable": allocatable,
                    "capacity": allocatable}})),
                )
                .await
                .unwrap();
            }
            let running = controller.then(|| {
                let ctx = pinfleet::controller::Ctx::new(client.clone(), &cluster);
                tokio::spawn(pinfleet::controller::run(ctx))
            });
            ready_tx.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || rx.recv()).await;
            if let Some(r) = running {
                r.abort();
            }
            sim.stop().await;
        });
    });
    ready_rx.recv().unwrap();
    Member { name: name.to_string(), kubeconfig: path, stop: Some(tx), _dir: dir }
}

/// feeds/web placed on a member as the gateway places it (its own field
/// manager, server-side apply): a PinterestService of `replicas` running `image`.
pub async fn place_web(m: &Member, image: &str, replicas: u32) {
    let client = pinfleet::kube::apply::connect(&m.kubeconfig).await.unwrap();
    let pp = PatchParams::apply("pinfleet-gateway").force();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "feeds"}});
    ns.patch("feeds", &pp, &Patch::Apply(namespace)).await.unwrap();
    let svc = json!({
        "apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": "web", "namespace": "feeds"},
        "spec": {"owner": {"team": "feeds", "project": "home"}, "replicas": replicas,
                 "ports": [{"name": "http", "port": 8080}],
                 "template": {"spec": {"containers": [{"name": "app", "image": image}]}}}
    });
    pinfleet::delivery::members::workload_api(&client, "PinterestService", "feeds")
        .patch("web", &pp, &Patch::Apply(&svc))
        .await
        .unwrap();
}

/// An OIDC issuer on loopback: discovery, JWKS (one EC P-256 key) and tokens.
pub struct Issuer {
    pub url: String,
    pub key: EncodingKey,
    pub other: EncodingKey,
    /// Requests for its keys (the key set itself) so far.
    pub key_fetches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

fn ec_key() -> (EncodingKey, Value) {
    use base64::Engine as _;
    let kp = rcgen::KeyPair::generate().unwrap();
    let raw = kp.public_key_raw();
    let b = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
    let jwk = json!({"kty": "EC", "crv": "P-256", "x": b(&raw[1..33]), "y": b(&raw[33..65]), "kid": "k1", "alg": "ES256", "use": "sig"});
    (EncodingKey::from_ec_pem(kp.serialize_pem().as_bytes()).unwrap(), jwk)
}

pub async fn issuer() -> Issuer {
    let (key, jwk) = ec_key();
    let (other, _) = ec_key();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let u = url.clone();
    let key_fetches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fetched = key_fetches.clone();
    let app = axum::Router::new()
        .route(
            "/.well-known/openid-configuration",
            axum::routing::get(move || {
                let u = u.clone();
                async move { axum::Json(json!({"issuer": u, "jwks_uri": format!("{u}/keys")})) }
            }),
        )
        .route(
            "/keys",
            axum::routing::get(move || {
                let jwk = jwk.clone();
                fetched.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    // As slow as a remote issuer: callers arriving meanwhile wait for this fetch.
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    axum::Json(json!({"keys": [jwk]}))
                }
            }),
        );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Issuer { url, key, other, key_fetches }
}

impl Issuer {
    pub fn token_with(&self, key: &EncodingKey, user: &str, groups: &[&str], aud: &str, expires_in: i64) -> String {
        let now = chrono::Utc::now().timestamp();
        let claims = json!({"iss": self.url, "sub": user, "email": user, "email_verified": true, "aud": aud, "groups": groups, "iat": now, "exp": now + expires_in});
        let mut h = Header::new(jsonwebtoken::Algorithm::ES256);
        h.kid = Some("k1".into());
        jsonwebtoken::encode(&h, &claims, key).unwrap()
    }

    pub fn token(&self, user: &str, groups: &[&str]) -> String {
        self.token_with(&self.key, user, groups, "pinfleet", 3600)
    }
}
