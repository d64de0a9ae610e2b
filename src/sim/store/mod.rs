//! The emulator's object store: every object as JSON, one global
//! resourceVersion counter, and an event log for watches. Implements the
//! API semantics clients depend on — uid/generation/creationTimestamp,
//! optimistic concurrency, the status and scale subresources, server-side
//! apply, finalizers and deletionTimestamp, ownerReference garbage
//! collection (background, foreground, orphan), pods/eviction honouring
//! PodDisruptionBudgets, and CRDs that extend the registry.
//!
//! A stored object is shared (`Arc`) with the watch events that carry it,
//! and a write's answer is the text of its event's object: one copy and one
//! serialization per write, however many watch it.
//!
//! This file holds the store itself and what its parts share (errors,
//! metadata helpers); each concern has its own file: `read` (gets and
//! lists), `write` (create, update, patch, apply, the commit every write
//! ends in), `admission` (defaulting and validation before a write),
//! `delete` (finalizers, grace, garbage collection), `disruption`
//! (PodDisruptionBudgets and eviction), `scale` (the scale subresource),
//! `crd` (CRDs that extend the registry) and `events` (the watch log).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use super::objects::Objects;
use super::registry::{Registry, ResourceType};

mod admission;
mod crd;
mod delete;
mod disruption;
mod events;
mod read;
mod scale;
mod write;

pub use events::{Event, EventType};
pub use read::ListResult;

/// The store as the server, the controllers and the node agents share it.
pub type Shared = std::sync::Arc<std::sync::Mutex<Inner>>;

/// Events kept for watches that resume from a resourceVersion; older
/// starting points get 410 Gone (and clients re-list), as with etcd compaction.
pub const EVENT_LOG: usize = 50_000;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }
    pub fn not_found(t: &ResourceType, name: &str) -> Self {
        let what = if t.group.is_empty() { t.plural.clone() } else { format!("{}.{}", t.plural, t.group) };
        ApiError::new(404, "NotFound", format!("{what} \"{name}\" not found"))
            .with_details(json!({"name": name, "group": t.group, "kind": t.plural}))
    }
    pub fn with_details(mut self, d: Value) -> Self {
        self.details = Some(d);
        self
    }
    pub fn status(&self) -> Value {
        let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

pub type R<T> = Result<T, ApiError>;

pub struct Inner {
    pub registry: Registry,
    /// Shared with the events that carry them: a write copies nothing.
    objects: Objects,
    rv: u64,
    log: VecDeque<Arc<Event>>,
    /// The resourceVersion before the oldest logged event.
    compacted: u64,
    log_capacity: usize,
    pub events: broadcast::Sender<Arc<Event>>,
    /// The newest event: a write's response is served from its text.
    last_event: Option<Arc<Event>>,
    /// The control plane's stacked etcd (kubeadm machines only).
    pub etcd: super::etcd::Etcd,
    /// kops's etcd-manager on the EC2-backed control plane, as of the last pass.
    pub etcd_manager: super::etcd_manager::View,
    /// The Kubernetes version the sim answers as (`/version`, the rules and
    /// messages of validation, its kubelets), unless a kubeadm cluster's
    /// configuration names another (then its API servers run that).
    pub kubernetes: crate::spec::versions::Version,
    /// Service-account tokens the sim minted for the processes its kubelet
    /// runs: token → (namespace, service account).
    pub tokens: BTreeMap<String, (String, String)>,
    /// Image repositories whose pods run as local processes
    /// ([`super::procs`]); empty: every container is simulated.
    pub own_images: Vec<String>,
    /// Where those processes keep their files (logs served by `pods/log`).
    pub pods_dir: Option<std::path::PathBuf>,
}

/// A pod whose containers ignore SIGTERM: its kubelet ends it only when
/// its grace period is over (a pause container exits at once).
pub const IGNORES_SIGTERM: &str = "sim.pinfleet.dev/ignores-sigterm";

/// Whether a pod's containers ignore SIGTERM ([`IGNORES_SIGTERM`] is `"true"`).
pub fn ignores_sigterm(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations").and_then(|a| a.get(IGNORES_SIGTERM)).and_then(Value::as_str) == Some("true")
}

pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn meta(obj: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    obj.get("metadata").and_then(Value::as_object).unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj).get(field).and_then(Value::as_str)
}

fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    obj["metadata"].as_object_mut().expect("metadata object")
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .get("finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// Where a write is aimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
    Scale,
}

impl Inner {
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(65_536);
        let mut s = Inner {
            registry: Registry::new(),
            objects: Objects::default(),
            rv: 0,
            log: VecDeque::new(),
            compacted: 0,
            log_capacity: EVENT_LOG,
            events,
            last_event: None,
            etcd: Default::default(),
            etcd_manager: Default::default(),
            kubernetes: crate::spec::versions::Version::parse(crate::spec::versions::DEFAULT)
                .expect("the default version parses"),
            tokens: BTreeMap::new(),
            own_images: Vec::new(),
            pods_dir: None,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let t = s.registry.get("", "v1", "namespaces").cloned().expect("namespaces");
            let _ = s.create(
                &t,
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                "pinfleet-sim",
                false,
            );
        }
        s
    }

    /// A bearer token for a service account (what a projected token volume
    /// gives a pod), known to the sim's authenticator until it stops.
    /// A service account's token, shaped as the API server's are (a JWT:
    /// header, claims, signature), known to the sim's authenticator.
    pub fn mint_token(&mut self, namespace: &str, service_account: &str) -> String {
        use base64::Engine as _;
        let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
        let id: [u8; 16] = rand::random();
        let signature: [u8; 32] = rand::random();
        let claims = serde_json::json!({
            "iss": "https://kubernetes.default.svc.cluster.local",
            "sub": format!("system:serviceaccount:{namespace}:{service_account}"),
            "jti": hex::encode(id),
        });
        let token = format!(
            "{}.{}.{}",
            b64(br#"{"alg":"RS256","kid":"sim"}"#),
            b64(claims.to_string().as_bytes()),
            b64(&signature)
        );
        self.tokens.insert(token.clone(), (namespace.to_string(), service_account.to_string()));
        token
    }

    /// The version the API server answers as: a kubeadm cluster's
    /// configured one, else the sim's own.
    pub fn serving_version(&self) -> crate::spec::versions::Version {
        super::kubeadm::configured_version(self).unwrap_or(self.kubernetes)
    }

    /// A store that keeps only `n` events for resuming watches (tests of 410 Gone).
    pub fn with_event_log(n: usize) -> Self {
        let mut s = Inner::new();
        s.log_capacity = n;
        s
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }
}

impl Inner {
    /// Every object, oldest first (CRDs before their resources).
    pub fn export(&self) -> Vec<Value> {
        let mut all: Vec<Value> = self.objects.values().map(|o| Value::clone(o)).collect();
        all.sort_by_key(|o| meta_str(o, "resourceVersion").and_then(|r| r.parse::<u64>().ok()).unwrap_or(0));
        all
    }

    /// Restores exported objects as they were (uids, timestamps, versions).
    pub fn import(&mut self, objects: Vec<Value>) {
        for mut obj in objects {
            let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
            let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
            let Some(t) = self.registry.by_kind(&api_version, &kind).cloned() else { continue };
            if t.plural == "customresourcedefinitions" {
                let _ = self.register_crd(&mut obj);
            }
            let rv: u64 = meta_str(&obj, "resourceVersion").and_then(|r| r.parse().ok()).unwrap_or(0);
            self.rv = self.rv.max(rv);
            let ns = meta_str(&obj, "namespace").unwrap_or_default().to_string();
            let name = meta_str(&obj, "name").unwrap_or_default().to_string();
            self.objects.insert(Self::key(&t, &ns, &name), Arc::new(obj));
        }
        self.compacted = self.rv;
    }
}

impl Default for Inner {
    fn default() -> Self {
        Self::new()
    }
}

pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

/// Every violation of one object in one 422, as the API server aggregates
/// them (`path: reason` each; several in brackets).
fn invalid_all(kind: &str, group: &str, name: &str, errors: &[String]) -> ApiError {
    let msg = if errors.len() == 1 { errors[0].clone() } else { format!("[{}]", errors.join(", ")) };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let (field, rest) = e.split_once(": ").unwrap_or(("", e));
            json!({"reason": "FieldValueInvalid", "message": rest, "field": field})
        })
        .collect();
    ApiError::new(422, "Invalid", format!("{kind}.{group} \"{name}\" is invalid: {msg}"))
        .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
}

fn invalid(t: &ResourceType, name: &str, field: &str, msg: &str) -> ApiError {
    ApiError::new(422, "Invalid", format!("{} \"{name}\" is invalid: {field}: {msg}", t.kind))
        .with_details(json!({"name": name, "group": t.group, "kind": t.kind, "causes": [{"reason": "FieldValueRequired", "message": msg, "field": field}]}))
}

fn conflict(t: &ResourceType, name: &str) -> ApiError {
    let what = if t.group.is_empty() { t.plural.clone() } else { format!("{}.{}", t.plural, t.group) };
    ApiError::new(409, "Conflict", format!("Operation cannot be fulfilled on {what} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"))
        .with_details(json!({"name": name, "group": t.group, "kind": t.plural}))
}
