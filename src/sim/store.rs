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

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use tokio::sync::broadcast;

use super::patch;
use super::registry::{Registry, ResourceType, Scale};
use super::selector::{FieldSelector, LabelSelector};
use crate::kube::fields;

/// Events kept for watches that resume from a resourceVersion; older
/// starting points get 410 Gone (and clients re-list), as with etcd compaction.
/// The store as the server, the controllers and the node agents share it.
pub type Shared = std::sync::Arc<std::sync::Mutex<Inner>>;

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    /// (group, plural)
    pub key: (String, String),
    pub namespace: String,
    pub object: Arc<Value>,
    /// The event as a watch sends it, serialized once for every watcher.
    pub line: std::sync::OnceLock<bytes::Bytes>,
}

impl Event {
    pub fn new(
        rv: u64,
        kind: EventType,
        key: (String, String),
        namespace: String,
        object: impl Into<Arc<Value>>,
    ) -> Self {
        Event { rv, kind, key, namespace, object: object.into(), line: Default::default() }
    }

    /// `{"type": …, "object": …}` and a newline, as a watch streams it.
    pub fn line(&self) -> bytes::Bytes {
        self.line
            .get_or_init(|| {
                let mut line = Vec::with_capacity(1024);
                line.extend_from_slice(self.prefix().as_bytes());
                serde_json::to_writer(&mut line, &*self.object).expect("a JSON value serializes");
                line.extend_from_slice(b"}\n");
                bytes::Bytes::from(line)
            })
            .clone()
    }

    fn prefix(&self) -> &'static str {
        match self.kind {
            EventType::Added => "{\"type\":\"ADDED\",\"object\":",
            EventType::Modified => "{\"type\":\"MODIFIED\",\"object\":",
            EventType::Deleted => "{\"type\":\"DELETED\",\"object\":",
        }
    }

    /// The object alone as JSON: a part of [`Event::line`], not a second
    /// serialization (the write's response is the same text its watchers get).
    pub fn object_json(&self) -> bytes::Bytes {
        let line = self.line();
        line.slice(self.prefix().len()..line.len() - 2)
    }
}

use super::objects::{ObjKey, Objects};

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

fn uid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
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

/// Spec-like content (everything but metadata and status), for generation.
/// Whether two objects differ outside metadata and status (what moves
/// `generation`), compared in place: no copy of either.
fn spec_differs(old: &Value, new: &Value) -> bool {
    fn outside(v: &Value) -> Vec<(&String, &Value)> {
        v.as_object()
            .map(|m| m.iter().filter(|(k, _)| *k != "metadata" && *k != "status").collect())
            .unwrap_or_default()
    }
    let (o, n) = (outside(old), outside(new));
    o.len() != n.len() || o.iter().any(|(k, v)| new.get(k.as_str()) != Some(*v))
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

pub struct ListResult {
    pub items: Vec<Value>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
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

    /// Defaults, prunes and validates a custom resource against its CRD
    /// version's schema (a no-op for types without one).
    fn enforce_schema(minor: u32, t: &ResourceType, name: &str, obj: Value, old: Option<&Value>) -> R<Value> {
        let Some(schema) = &t.schema else { return Ok(obj) };
        let _minor = crate::kube::validation::answering::set(minor);
        crate::kube::schema::validate_owned(&schema.json, obj)
            .and_then(|out| crate::kube::schema::validate_cel(schema, &out, old).map(|()| out))
            .map_err(|errors| invalid_all(&t.kind, &t.group, name, &errors))
    }

    /// A bearer token for a service account (what a projected token volume
    /// gives a pod), known to the sim's authenticator until it stops.
    pub fn mint_token(&mut self, namespace: &str, service_account: &str) -> String {
        let b: [u8; 24] = rand::random();
        let token = format!("sim.{}", hex::encode(b));
        self.tokens.insert(token.clone(), (namespace.to_string(), service_account.to_string()));
        token
    }

    /// The version the API server answers as: a kubeadm cluster's
    /// configured one, else the sim's own.
    pub fn serving_version(&self) -> crate::spec::versions::Version {
        super::kubeadm::configured_version(self).unwrap_or(self.kubernetes)
    }

    /// Validates a built-in object the way kube-apiserver does (custom
    /// resources are checked against their schema instead): a body that does
    /// not decode is a 400, every refused field is in one 422.
    fn enforce_builtin(minor: u32, t: &ResourceType, name: &str, obj: &Value, old: Option<&Value>) -> R<()> {
        use crate::kube::validation;
        if t.schema.is_some() || t.plural == "customresourcedefinitions" {
            return Ok(());
        }
        if let Some(msg) = validation::decode_error(obj) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                format!("{kind} in version {v:?} cannot be handled as a {kind}: {msg}", kind = t.kind, v = t.version),
            ));
        }
        let errors = validation::validate_as(minor, &t.group, &t.kind, obj, old);
        if errors.is_empty() {
            return Ok(());
        }
        Err(ApiError::new(422, "Invalid", validation::invalid_message(&t.kind, &t.group, name, &errors))
            .with_details(validation::invalid_details(&t.kind, &t.group, name, &errors)))
    }

    /// Pod Security admission on a pod's creation, as kube-apiserver's
    /// built-in plugin enforces its namespace's
    /// `pod-security.kubernetes.io/enforce` level (dry runs included;
    /// workload objects are not refused, their pods are): a 403 naming every
    /// failed check, in the plugin's words.
    fn enforce_pod_security(&self, t: &ResourceType, ns: &str, name: &str, obj: &Value) -> R<()> {
        use crate::kube::podsecurity::{self, Level};
        if t.plural != "pods" || !t.group.is_empty() {
            return Ok(());
        }
        let key = (String::new(), "namespaces".to_string(), String::new(), ns.to_string());
        let level = self
            .objects
            .get(&key)
            .and_then(|n| n.pointer("/metadata/labels/pod-security.kubernetes.io~1enforce"))
            .and_then(Value::as_str)
            .and_then(|l| Level::parse(l).ok());
        let Some(level) = level.filter(|l| *l != Level::Privileged) else { return Ok(()) };
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let found = podsecurity::check(obj.get("metadata").unwrap_or(&Value::Null), spec, level);
        if found.is_empty() {
            return Ok(());
        }
        let what: Vec<String> = found.iter().map(|v| format!("{} ({})", v.check, v.detail)).collect();
        Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "pods \"{name}\" is forbidden: violates PodSecurity \"{}:latest\": {}",
                level.as_str(),
                what.join(", ")
            ),
        ))
    }

    /// The server's defaulting that validation depends on (`SetDefaults_Job`):
    /// a Job with neither completions nor parallelism runs once, one pod at a
    /// time; parallelism alone defaults to 1.
    fn default_builtin(t: &ResourceType, obj: &mut Value) {
        if t.plural != "jobs" || t.group != "batch" {
            return;
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        let completions = spec.get("completions").is_some_and(|v| !v.is_null());
        let parallelism = spec.get("parallelism").is_some_and(|v| !v.is_null());
        if !completions && !parallelism {
            spec.insert("completions".into(), json!(1));
        }
        if !parallelism {
            spec.insert("parallelism".into(), json!(1));
        }
    }

    /// A Secret's `stringData` is write-only: the API server merges it into
    /// `data` (base64), `stringData` winning, and never returns it.
    fn merge_string_data(t: &ResourceType, obj: &mut Value) {
        if t.plural != "secrets" || !t.group.is_empty() {
            return;
        }
        let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else { return };
        use base64::Engine as _;
        let data = obj.as_object_mut().expect("an object").entry("data").or_insert_with(|| json!({}));
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let text = v.as_str().unwrap_or_default();
                d.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(text)));
            }
        }
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

    fn emit(&mut self, kind: EventType, t: &ResourceType, ns: &str, object: impl Into<Arc<Value>>) {
        let ev = Arc::new(Event::new(self.rv, kind, t.key(), ns.to_string(), object));
        self.last_event = Some(ev.clone());
        self.log.push_back(ev.clone());
        while self.log.len() > self.log_capacity {
            if let Some(old) = self.log.pop_front() {
                self.compacted = old.rv;
            }
        }
        let _ = self.events.send(ev);
    }

    /// Events after `rv` still in the log, or None when `rv` is too old.
    pub fn events_since(&self, rv: u64) -> Option<Vec<Arc<Event>>> {
        if rv < self.compacted {
            return None;
        }
        Some(self.log.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    fn key(t: &ResourceType, ns: &str, name: &str) -> ObjKey {
        (t.group.clone(), t.plural.clone(), if t.namespaced { ns.to_string() } else { String::new() }, name.to_string())
    }

    /// The object as served for `t` (apiVersion of the requested version).
    fn present(t: &ResourceType, obj: &Value) -> Value {
        let mut o = obj.clone();
        o["apiVersion"] = json!(t.api_version());
        o["kind"] = json!(t.kind);
        o
    }

    /// The stored objects of a type, in one namespace or all, by reference.
    pub fn iter<'a>(&'a self, t: &ResourceType, ns: Option<&'a str>) -> impl Iterator<Item = &'a Value> + 'a {
        self.iter_shared(t, ns).map(|o| &**o)
    }

    /// The stored objects of a type, shared: a controller keeps them past
    /// its own writes without copying one.
    pub fn iter_shared<'a>(
        &'a self,
        t: &ResourceType,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<Value>> + 'a {
        let (group, plural) = (t.group.clone(), t.plural.clone());
        let start = (group.clone(), plural.clone(), ns.unwrap_or_default().to_string(), String::new());
        self.objects
            .range(start..)
            .take_while(move |((g, p, n, _), _)| *g == group && *p == plural && ns.is_none_or(|ns| ns == n))
            .map(|(_, o)| o)
    }

    /// Whether the object is stored (no copy of it made).
    pub fn contains(&self, t: &ResourceType, ns: &str, name: &str) -> bool {
        self.objects.contains_key(&Self::key(t, ns, name))
    }

    /// The newest event, when it carries exactly `object` (the same
    /// allocation): the write that returned it answers with its text.
    pub fn event_of(&self, object: &Arc<Value>) -> Option<Arc<Event>> {
        self.last_event.as_ref().filter(|e| Arc::ptr_eq(&e.object, object)).cloned()
    }

    pub fn get(&self, t: &ResourceType, ns: &str, name: &str) -> R<Value> {
        self.objects
            .get(&Self::key(t, ns, name))
            .map(|o| Self::present(t, o))
            .ok_or_else(|| ApiError::not_found(t, name))
    }

    fn ensure_namespace(&self, t: &ResourceType, ns: &str) -> R<()> {
        if !t.namespaced {
            return Ok(());
        }
        if ns.is_empty() {
            return Err(ApiError::new(400, "BadRequest", "a namespace is required for a namespaced resource"));
        }
        if !self.objects.contains_key(&(String::new(), "namespaces".into(), String::new(), ns.to_string())) {
            return Err(ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
                .with_details(json!({"name": ns, "kind": "namespaces"})));
        }
        Ok(())
    }

    pub fn list(
        &self,
        t: &ResourceType,
        ns: Option<&str>,
        labels: &LabelSelector,
        fieldsel: &FieldSelector,
        limit: Option<usize>,
        cont: Option<&str>,
    ) -> R<ListResult> {
        let (start_after, rv) = match cont {
            Some(c) => {
                let (rv, key) =
                    decode_continue(c).ok_or_else(|| ApiError::new(400, "BadRequest", "invalid continue token"))?;
                (Some(key), rv)
            }
            None => (None, self.rv),
        };
        let prefix = (t.group.clone(), t.plural.clone());
        // A namespaced list reads its namespace's range only.
        let from = match (ns, &start_after) {
            (_, Some((n, name))) => (prefix.0.clone(), prefix.1.clone(), n.clone(), name.clone()),
            (Some(ns), None) => (prefix.0.clone(), prefix.1.clone(), ns.to_string(), String::new()),
            (None, None) => (prefix.0.clone(), prefix.1.clone(), String::new(), String::new()),
        };
        let mut matching = self
            .objects
            .range(from..)
            .take_while(|((g, p, n, _), _)| *g == prefix.0 && *p == prefix.1 && ns.is_none_or(|ns| ns == n))
            .filter(|((_, _, n, name), _)| {
                start_after.as_ref().is_none_or(|s| (n.as_str(), name.as_str()) > (s.0.as_str(), s.1.as_str()))
            })
            .filter(|(_, o)| labels.matches(o) && fieldsel.matches(o));
        let mut items = Vec::new();
        let mut last = None;
        let limit = limit.filter(|l| *l > 0);
        for ((_, _, n, name), o) in matching.by_ref() {
            items.push(Self::present(t, o));
            last = Some((n.clone(), name.clone()));
            if limit.is_some_and(|l| items.len() >= l) {
                break;
            }
        }
        let remaining = matching.count();
        let continue_token = (remaining > 0).then(|| encode_continue(rv, last.as_ref().expect("an item")));
        Ok(ListResult { items, resource_version: rv, continue_token, remaining: (remaining > 0).then_some(remaining) })
    }

    /// Creates an object. `manager` owns all its fields (operation Update).
    pub fn create(&mut self, t: &ResourceType, ns: &str, obj: Value, manager: &str, dry_run: bool) -> R<Value> {
        self.create_shared(t, ns, obj, manager, dry_run).map(Arc::unwrap_or_clone)
    }

    /// [`Inner::create`], answering with the stored object itself (shared,
    /// not copied: the server answers from its event's text).
    pub fn create_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        mut obj: Value,
        manager: &str,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "the body must be an object"));
        }
        let m = meta_mut(&mut obj);
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) => {
                    let suffix: String =
                        (0..5).map(|_| b"bcdfghjklmnpqrstvwxz2456789"[rand::random_range(0..27)] as char).collect();
                    m.insert("name".into(), json!(format!("{prefix}{suffix}")));
                }
                None => {
                    return Err(invalid(t, "", "metadata.name", "Required value: name or generateName is required"))
                }
            }
        }
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if t.namespaced {
            let body_ns = meta_str(&obj, "namespace").map(str::to_string);
            if let Some(b) = body_ns.filter(|b| !b.is_empty() && b != ns) {
                return Err(ApiError::new(400, "BadRequest", format!("the namespace of the provided object ({b}) does not match the namespace sent on the request ({ns})")));
            }
            self.ensure_namespace(t, ns)?;
        }
        let key = Self::key(t, ns, &name);
        if self.objects.contains_key(&key) {
            let what = if t.group.is_empty() { t.plural.clone() } else { format!("{}.{}", t.plural, t.group) };
            return Err(ApiError::new(409, "AlreadyExists", format!("{what} \"{name}\" already exists"))
                .with_details(json!({"name": name, "group": t.group, "kind": t.plural})));
        }
        if t.status
            && t.plural != "customresourcedefinitions"
            && t.plural != "pods"
            && t.plural != "nodes"
            && t.plural != "namespaces"
        {
            // Status is written through the status subresource only.
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        let now = now();
        {
            let m = meta_mut(&mut obj);
            if t.namespaced {
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), json!(uid()));
            m.insert("creationTimestamp".into(), json!(now));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("resourceVersion");
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.kind);
        if t.plural == "namespaces" {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        if t.plural == "customresourcedefinitions" {
            self.register_crd(&mut obj)?;
        }
        obj = Self::enforce_schema(self.serving_version().minor, t, &name, obj, None)?;
        Self::default_builtin(t, &mut obj);
        Self::enforce_builtin(self.serving_version().minor, t, &name, &obj, None)?;
        self.enforce_pod_security(t, ns, &name, &obj)?;
        Self::merge_string_data(t, &mut obj);
        if obj.pointer("/metadata/managedFields").is_none_or(|m| m.as_array().is_none_or(|a| a.is_empty())) {
            fields::record_update(None, &mut obj, manager, &t.api_version(), &now);
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let obj = Arc::new(obj);
        self.objects.insert(key, obj.clone());
        self.emit(EventType::Added, t, ns, obj.clone());
        self.after_change(t, ns, &obj);
        Ok(obj)
    }

    /// Replaces an object (PUT), or its status, honouring resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        manager: &str,
        sub: Sub,
        dry_run: bool,
    ) -> R<Value> {
        self.update_shared(t, ns, name, obj, manager, sub, dry_run).map(Arc::unwrap_or_clone)
    }

    /// [`Inner::update`], answering with the stored object itself.
    #[allow(clippy::too_many_arguments)]
    pub fn update_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        manager: &str,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        let key = Self::key(t, ns, name);
        let Some(old) = self.objects.get(&key).map(|o| Value::clone(o)) else {
            return Err(ApiError::not_found(t, name));
        };
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|r| !r.is_empty()) {
            if Some(rv) != meta_str(&old, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        if meta_str(&obj, "name").is_some_and(|n| n != name) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&obj, "name").unwrap_or_default()
                ),
            ));
        }
        let obj = with_status_rules(t, &old, obj, sub);
        self.commit(t, ns, name, old, obj, manager, dry_run, false)
    }

    /// Finishes a write: server-owned metadata, generation, managed fields,
    /// finalizer-completed deletion, events.
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        old: impl Into<Arc<Value>>,
        mut obj: Value,
        manager: &str,
        dry_run: bool,
        applied: bool,
    ) -> R<Arc<Value>> {
        let old: Arc<Value> = old.into();
        {
            let old_meta = meta(&old);
            let m = meta_mut(&mut obj);
            for f in
                ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name"]
            {
                match old_meta.get(f) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
            let gen = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
            m.insert("generation".into(), json!(gen));
        }
        obj = Self::enforce_schema(self.serving_version().minor, t, name, obj, Some(&old))?;
        Self::default_builtin(t, &mut obj);
        Self::enforce_builtin(self.serving_version().minor, t, name, &obj, Some(&old))?;
        Self::merge_string_data(t, &mut obj);
        if spec_differs(&old, &obj) {
            let gen = meta(&old).get("generation").and_then(Value::as_i64).unwrap_or(1);
            meta_mut(&mut obj).insert("generation".into(), json!(gen + 1));
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.kind);
        if !applied {
            fields::record_update(Some(&old), &mut obj, manager, &t.api_version(), &now());
        }
        if t.plural == "customresourcedefinitions" {
            self.register_crd(&mut obj)?;
        }
        if unchanged(&old, &obj) {
            // A no-op write does not move the resourceVersion.
            return Ok(old);
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        let key = Self::key(t, ns, name);
        if meta(&obj).contains_key("deletionTimestamp") && finalizers(&obj).is_empty() {
            self.objects.remove(&key);
            let obj = Arc::new(obj);
            self.emit(EventType::Deleted, t, ns, obj.clone());
            self.after_delete(t, ns, &obj);
            return Ok(obj);
        }
        let obj = Arc::new(obj);
        self.objects.insert(key, obj.clone());
        self.emit(EventType::Modified, t, ns, obj.clone());
        self.after_change(t, ns, &obj);
        Ok(obj)
    }

    /// PATCH in any of the four formats, on the object or a subresource.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Value> {
        self.patch_shared(t, ns, name, content_type, body.clone(), manager, force, sub, dry_run)
            .map(Arc::unwrap_or_clone)
    }

    /// [`Inner::patch`], answering with the stored object itself.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        content_type: &str,
        body: Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        let key = Self::key(t, ns, name);
        let existing = self.objects.get(&key).cloned();
        if content_type.starts_with("application/apply-patch") {
            return self.apply(t, ns, name, existing, body, manager, force, sub, dry_run);
        }
        let Some(old) = existing else { return Err(ApiError::not_found(t, name)) };
        if sub == Sub::Scale {
            let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
            let mut s = scale_object(t, &old, &scale);
            apply_patch(content_type, &mut s, &body)?;
            let mut new = Value::clone(&old);
            if let Some(r) = s.pointer("/spec/replicas") {
                set_path(&mut new, &scale.spec_replicas, r.clone());
            }
            let out = self.commit(t, ns, name, old, new, manager, dry_run, false)?;
            return Ok(Arc::new(scale_object(t, &out, &scale)));
        }
        let mut new = Value::clone(&old);
        apply_patch(content_type, &mut new, &body)?;
        if let Some(rv) = meta_str(&new, "resourceVersion") {
            if Some(rv) != meta_str(&old, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        let new = with_status_rules(t, &old, new, sub);
        self.commit(t, ns, name, old, new, manager, dry_run, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        existing: Option<Arc<Value>>,
        body: Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        if manager.is_empty() {
            return Err(ApiError::new(400, "BadRequest", "PATCH with apply-patch requires a fieldManager"));
        }
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "the name in the applied configuration does not match the URL",
            ));
        }
        let mut applied = body;
        if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        if sub == Sub::Main && t.status && t.plural != "pods" && t.plural != "nodes" {
            if let Some(o) = applied.as_object_mut() {
                o.remove("status");
            }
        }
        let result = fields::apply_owned(existing.as_deref(), applied, manager, &t.api_version(), force, &now());
        let obj = match result {
            Ok(o) => o,
            Err(conflicts) => {
                let lines: Vec<String> =
                    conflicts.iter().map(|c| format!("conflict with \"{}\": {}", c.manager, c.path)).collect();
                let causes: Vec<Value> = conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\"", c.manager), "field": c.path})).collect();
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with {} conflict{}: {}",
                        conflicts.len(),
                        if conflicts.len() == 1 { "" } else { "s" },
                        lines.join("; ")
                    ),
                )
                .with_details(json!({"name": name, "group": t.group, "kind": t.plural, "causes": causes})));
            }
        };
        match existing {
            None => {
                let mut obj = obj;
                meta_mut(&mut obj).insert("name".into(), json!(name));
                self.create_shared(t, ns, obj, manager, dry_run)
            }
            Some(old) => self.commit(t, ns, name, old, obj, manager, dry_run, true),
        }
    }

    /// DELETE of a pod: as [`Self::delete`], except that a running pod
    /// whose containers ignore SIGTERM ([`ignores_sigterm`]) is kept,
    /// terminating, until its grace period is over (the request's
    /// `gracePeriodSeconds`, else the pod's own, else 30 s), as a kubelet
    /// keeps it; a later delete with a shorter grace brings the end nearer,
    /// and 0 removes it at once.
    #[allow(clippy::too_many_arguments)]
    pub fn delete_pod(
        &mut self,
        ns: &str,
        name: &str,
        grace: Option<i64>,
        propagation: Propagation,
        precondition_rv: Option<&str>,
        dry_run: bool,
    ) -> R<Value> {
        let pods = self.registry.get("", "v1", "pods").cloned().expect("pods");
        if let (false, Ok(pod)) = (dry_run, self.get(&pods, ns, name)) {
            let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
            let own = pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
            let grace = grace.unwrap_or(own).max(0);
            if bound && ignores_sigterm(&pod) && !matches!(phase, "Succeeded" | "Failed") && grace > 0 {
                let end = chrono::Utc::now() + chrono::Duration::seconds(grace);
                let current = pod
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&chrono::Utc));
                if current.is_some_and(|c| c <= end) {
                    return Ok(pod);
                }
                if let Some(rv) = precondition_rv {
                    if Some(rv) != meta_str(&pod, "resourceVersion") {
                        return Err(conflict(&pods, name));
                    }
                }
                let mut obj = pod;
                self.rv += 1;
                let m = meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(end.format("%Y-%m-%dT%H:%M:%SZ").to_string()));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                m.insert("resourceVersion".into(), json!(self.rv.to_string()));
                self.objects.insert(Self::key(&pods, ns, name), Arc::new(obj.clone()));
                self.emit(EventType::Modified, &pods, ns, obj.clone());
                return Ok(obj);
            }
        }
        self.delete(&pods, ns, name, propagation, precondition_rv, dry_run)
    }

    /// DELETE: finalizers defer it (deletionTimestamp); dependents follow
    /// the propagation policy.
    pub fn delete(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        propagation: Propagation,
        precondition_rv: Option<&str>,
        dry_run: bool,
    ) -> R<Value> {
        let key = Self::key(t, ns, name);
        let Some(mut obj) = self.objects.get(&key).map(|o| Value::clone(o)) else {
            return Err(ApiError::not_found(t, name));
        };
        if let Some(rv) = precondition_rv {
            if Some(rv) != meta_str(&obj, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        if dry_run {
            return Ok(obj);
        }
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        let has_dependents = self.dependents(&uid).next().is_some();
        if propagation == Propagation::Foreground && has_dependents {
            let mut f = finalizers(&obj);
            if !f.contains(&"foregroundDeletion".to_string()) {
                f.push("foregroundDeletion".into());
            }
            let m = meta_mut(&mut obj);
            m.insert("finalizers".into(), json!(f));
            m.entry("deletionTimestamp").or_insert_with(|| json!(now()));
            self.rv += 1;
            meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
            self.objects.insert(key, Arc::new(obj.clone()));
            self.emit(EventType::Modified, t, ns, obj.clone());
            for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
                let _ = self.delete(&dt, &dns, &dname, Propagation::Background, None, false);
            }
            self.complete_foreground();
            return Ok(self.objects.get(&Self::key(t, ns, name)).map(|o| Value::clone(o)).unwrap_or(obj));
        }
        if propagation == Propagation::Orphan {
            for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
                let dkey = Self::key(&dt, &dns, &dname);
                if let Some(d) = self.objects.get(&dkey).map(|o| Value::clone(o)) {
                    let mut nd = d.clone();
                    if let Some(refs) = nd.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                    let _ = self.commit(&dt, &dns, &dname, d, nd, "garbage-collector", false, false);
                }
            }
        }
        if !finalizers(&obj).is_empty() {
            if !meta(&obj).contains_key("deletionTimestamp") {
                meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(now()));
                meta_mut(&mut obj).insert("deletionGracePeriodSeconds".into(), json!(0));
                self.rv += 1;
                meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
                self.objects.insert(key, Arc::new(obj.clone()));
                self.emit(EventType::Modified, t, ns, obj.clone());
            }
            return Ok(obj);
        }
        self.objects.remove(&key);
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.emit(EventType::Deleted, t, ns, obj.clone());
        self.after_delete(t, ns, &obj);
        Ok(obj)
    }

    fn dependents(&self, uid: &str) -> impl Iterator<Item = (ResourceType, String, String)> + '_ {
        let uid = uid.to_string();
        self.objects.iter().filter_map(move |((g, p, ns, name), o)| {
            let owned = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid.as_str())));
            if !owned || uid.is_empty() {
                return None;
            }
            let t = self.registry.all().find(|t| &t.group == g && &t.plural == p)?.clone();
            Some((t, ns.clone(), name.clone()))
        })
    }

    /// Whether any object still blocks the deletion of the owner `uid`: an
    /// owner reference to it with `blockOwnerDeletion: true`.
    fn has_blocking_dependents(&self, uid: &str) -> bool {
        !uid.is_empty()
            && self.objects.values().any(|o| {
                o.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
                    refs.iter().any(|r| {
                        r.get("uid").and_then(Value::as_str) == Some(uid)
                            && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                    })
                })
            })
    }

    /// Owners in foreground deletion are removed once no dependent blocks
    /// them: as the garbage collector does (processDeletingDependentsItem),
    /// only dependents with `blockOwnerDeletion: true` hold the owner back;
    /// the others are deleted too but may outlive it.
    fn complete_foreground(&mut self) {
        loop {
            let ready: Vec<(ObjKey, Value)> = self
                .objects
                .iter()
                .filter(|(_, o)| finalizers(o).iter().any(|f| f == "foregroundDeletion"))
                .filter(|(_, o)| !self.has_blocking_dependents(meta_str(o, "uid").unwrap_or_default()))
                .map(|(k, o)| (k.clone(), Value::clone(o)))
                .collect();
            if ready.is_empty() {
                return;
            }
            for ((g, p, ns, name), o) in ready {
                let Some(t) = self.registry.all().find(|t| t.group == g && t.plural == p).cloned() else { continue };
                let mut n = o.clone();
                let f: Vec<String> = finalizers(&o).into_iter().filter(|f| f != "foregroundDeletion").collect();
                meta_mut(&mut n).insert("finalizers".into(), json!(f));
                let _ = self.commit(&t, &ns, &name, o, n, "garbage-collector", false, false);
            }
        }
    }

    /// Garbage collection (background) and bookkeeping once an object is gone.
    fn after_delete(&mut self, t: &ResourceType, ns: &str, obj: &Value) {
        let uid = meta_str(obj, "uid").unwrap_or_default().to_string();
        for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
            let _ = self.delete(&dt, &dns, &dname, Propagation::Background, None, false);
        }
        if t.plural == "customresourcedefinitions" && t.group == "apiextensions.k8s.io" {
            let group = obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default().to_string();
            let plural = obj.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default().to_string();
            self.objects.retain(|(g, p, _, _), _| !(g == &group && p == &plural));
            self.registry.remove_group_plural(&group, &plural);
        }
        if t.plural == "namespaces" && t.group.is_empty() {
            let name = meta_str(obj, "name").unwrap_or_default().to_string();
            self.objects.retain(|(_, _, n, _), _| n != &name);
        }
        if t.plural == "pods" && t.group.is_empty() {
            self.refresh_pdbs(ns, Some(obj));
        }
        self.complete_foreground();
    }

    fn after_change(&mut self, t: &ResourceType, ns: &str, obj: &Value) {
        if t.plural == "pods" && t.group.is_empty() {
            self.refresh_pdbs(ns, Some(obj));
        } else if t.plural == "poddisruptionbudgets" {
            // Only this budget's status can have changed.
            let key = Self::key(t, ns, meta_str(obj, "name").unwrap_or_default());
            if let Some(pdb) = self.objects.get(&key).map(|o| Value::clone(o)) {
                self.refresh_pdb(t, ns, key, pdb);
            }
        }
    }

    fn register_crd(&mut self, crd: &mut Value) -> R<()> {
        let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
        let group = spec.get("group").and_then(Value::as_str).unwrap_or_default().to_string();
        let names = spec.get("names").cloned().unwrap_or(Value::Null);
        let plural = names.get("plural").and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let expected = format!("{plural}.{group}");
        if group.is_empty() || plural.is_empty() || kind.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "CustomResourceDefinition needs spec.group, spec.names.plural and spec.names.kind",
            ));
        }
        if meta_str(crd, "name") != Some(expected.as_str()) {
            return Err(ApiError::new(422, "Invalid", format!("CustomResourceDefinition.apiextensions.k8s.io \"{}\" is invalid: metadata.name: Invalid value: must be spec.names.plural+\".\"+spec.group ({expected})", meta_str(crd, "name").unwrap_or_default())));
        }
        // A v1 CRD's every schema must be structural, or the CRD is refused.
        // The server names the schema as its internal version holds it: one
        // `spec.validation` when every version has the same, else per version.
        let mut errs = Vec::new();
        let all: Vec<Option<&Value>> = spec
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.pointer("/schema/openAPIV3Schema"))
            .collect();
        match all.first() {
            Some(Some(one)) if all.iter().all(|s| s == &Some(*one)) => {
                errs.extend(crate::kube::schema::structural(one, "spec.validation.openAPIV3Schema"));
            }
            _ => {
                for (i, schema) in all.iter().enumerate() {
                    if let Some(schema) = schema {
                        errs.extend(crate::kube::schema::structural(
                            schema,
                            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        ));
                    }
                }
            }
        }
        if !errs.is_empty() {
            let name = meta_str(crd, "name").unwrap_or_default();
            return Err(invalid_all("CustomResourceDefinition", "apiextensions.k8s.io", name, &errs));
        }
        let strs = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        self.registry.remove_group_plural(&group, &plural);
        let versions = spec.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut stored = Vec::new();
        for v in versions.iter().filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true)) {
            let version = v.get("name").and_then(Value::as_str).unwrap_or("v1").to_string();
            if v.get("storage").and_then(Value::as_bool) == Some(true) {
                stored.push(version.clone());
            }
            let sub = v.get("subresources");
            let scale = sub.and_then(|s| s.get("scale")).map(|s| Scale {
                spec_replicas: s.get("specReplicasPath").and_then(Value::as_str).unwrap_or(".spec.replicas").into(),
                status_replicas: s
                    .get("statusReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".status.replicas")
                    .into(),
                label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
            });
            self.registry.add(ResourceType {
                group: group.clone(),
                version,
                kind: kind.clone(),
                plural: plural.clone(),
                singular: names
                    .get("singular")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| kind.to_lowercase()),
                namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
                short_names: strs(names.get("shortNames")),
                categories: strs(names.get("categories")),
                status: sub.and_then(|s| s.get("status")).is_some(),
                scale,
                columns: v.get("additionalPrinterColumns").and_then(Value::as_array).cloned().unwrap_or_default(),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .map(|s| std::sync::Arc::new(crate::kube::schema::CrdSchema::new(s.clone()))),
            });
        }
        // Conditions keep their transition time while they hold (a re-apply
        // of the same CRD must be a no-op).
        let now = crd
            .pointer("/status/conditions/1/lastTransitionTime")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(now);
        crd["status"] = json!({
            "acceptedNames": names,
            "storedVersions": stored,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ]
        });
        Ok(())
    }

    /// One stored object by group, plural, namespace and name (no copy).
    pub fn peek(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<&Value> {
        self.peek_shared(group, plural, ns, name).map(|o| &**o)
    }

    /// [`Inner::peek`], shared: kept past the caller's writes without a copy.
    pub fn peek_shared(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects.get(&(group.to_string(), plural.to_string(), ns.to_string(), name.to_string()))
    }

    /// The objects of a type whose controller has uid `owner` (shared).
    pub fn owned_by(&self, owner: &str, group: &str, plural: &str) -> Vec<Arc<Value>> {
        self.objects.owned_by(owner, group, plural)
    }

    /// Pods not bound to a node: (namespace, name).
    pub fn objects_unbound(&self) -> &std::collections::BTreeSet<(String, String)> {
        self.objects.unbound()
    }

    /// What the pods bound to `node` and not finished ask for.
    pub fn node_usage(&self, node: &str) -> super::objects::Usage {
        self.objects.usage(node)
    }

    /// The pods of `ns` labelled `k` = `v`.
    pub fn pods_labelled<'a>(&'a self, ns: &'a str, k: &str, v: &str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.pods_labelled(ns, k, v).filter_map(move |name| self.peek("", "pods", ns, name))
    }

    /// The stored objects of a resource, in one namespace or all (no copies).
    pub fn scan(&self, group: &str, plural: &str, ns: Option<&str>) -> Vec<&Value> {
        match ns {
            Some(ns) => self.in_namespace(group, plural, ns).map(|(_, v)| v).collect(),
            None => {
                let (g, p) = (group.to_string(), plural.to_string());
                self.objects
                    .range((g.clone(), p.clone(), String::new(), String::new())..)
                    .take_while(|((kg, kp, _, _), _)| *kg == g && *kp == p)
                    .map(|(_, v)| &**v)
                    .collect()
            }
        }
    }

    fn in_namespace<'a>(
        &'a self,
        group: &str,
        plural: &str,
        ns: &str,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let (g, p, n) = (group.to_string(), plural.to_string(), ns.to_string());
        self.objects
            .range((g.clone(), p.clone(), n.clone(), String::new())..)
            .take_while(move |((kg, kp, kn, _), _)| *kg == g && *kp == p && *kn == n)
            .map(|(k, v)| (k, &**v))
    }

    /// Recomputes the status of the namespace's PodDisruptionBudgets that
    /// select `pod` (all of them when `pod` is None).
    fn refresh_pdbs(&mut self, ns: &str, pod: Option<&Value>) {
        let Some(t) = self.registry.get("policy", "v1", "poddisruptionbudgets").cloned() else { return };
        let selects = |pdb: &Value, p: &Value| {
            LabelSelector::from_label_selector(&pdb.pointer("/spec/selector").cloned().unwrap_or(json!({}))).matches(p)
        };
        let pdbs: Vec<(ObjKey, Value)> = match pod {
            // The budgets that may count this pod, by the objects' index.
            Some(p) => self
                .objects
                .pdbs_for(ns, p)
                .into_iter()
                .map(|name| Self::key(&t, ns, &name))
                .filter_map(|k| self.objects.get(&k).filter(|pdb| selects(pdb, p)).map(|v| (k, Value::clone(v))))
                .collect(),
            None => {
                self.in_namespace("policy", "poddisruptionbudgets", ns).map(|(k, v)| (k.clone(), v.clone())).collect()
            }
        };
        for (key, pdb) in pdbs {
            self.refresh_pdb(&t, ns, key, pdb);
        }
    }

    fn refresh_pdb(&mut self, t: &ResourceType, ns: &str, key: ObjKey, pdb: Value) {
        let status = self.pdb_status(ns, &pdb);
        if pdb.get("status") != Some(&status) {
            let mut n = pdb.clone();
            n["status"] = status;
            self.rv += 1;
            meta_mut(&mut n).insert("resourceVersion".into(), json!(self.rv.to_string()));
            let n = Arc::new(n);
            self.objects.insert(key, n.clone());
            self.emit(EventType::Modified, t, ns, n);
        }
    }

    fn matching_pods(&self, ns: &str, selector: &Value) -> Vec<&Value> {
        let sel = LabelSelector::from_label_selector(selector);
        let live = |p: &&Value| sel.matches(p) && !meta(p).contains_key("deletionTimestamp");
        // Every pod a selector with `matchLabels` selects carries its first pair.
        let first = selector.get("matchLabels").and_then(Value::as_object).and_then(|m| m.iter().next());
        match first {
            Some((k, v)) => self
                .objects
                .pods_labelled(ns, k, v.as_str().unwrap_or_default())
                .filter_map(|name| self.objects.get(&(String::new(), "pods".into(), ns.to_string(), name.clone())))
                .map(|p| &**p)
                .filter(live)
                .collect(),
            None => self.in_namespace("", "pods", ns).map(|(_, v)| v).filter(live).collect(),
        }
    }

    fn pdb_status(&self, ns: &str, pdb: &Value) -> Value {
        let selector = pdb.pointer("/spec/selector").cloned().unwrap_or(json!({}));
        let pods = self.matching_pods(ns, &selector);
        let expected = pods.len() as i64;
        let healthy = pods.iter().filter(|p| is_ready(p)).count() as i64;
        let resolve = |v: &Value, round_up: bool| -> i64 {
            match v {
                Value::String(s) if s.ends_with('%') => {
                    let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(0);
                    if round_up {
                        (expected * pct + 99) / 100
                    } else {
                        expected * pct / 100
                    }
                }
                other => other.as_i64().unwrap_or(0),
            }
        };
        let desired = if let Some(min) = pdb.pointer("/spec/minAvailable") {
            resolve(min, true)
        } else if let Some(max) = pdb.pointer("/spec/maxUnavailable") {
            (expected - resolve(max, true)).max(0)
        } else {
            0
        };
        let allowed = (healthy - desired).max(0);
        json!({
            "observedGeneration": pdb.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "disruptionsAllowed": allowed,
            "expectedPods": expected,
            "conditions": [{"type": "DisruptionAllowed", "status": if allowed > 0 { "True" } else { "False" }, "reason": if allowed > 0 { "SufficientPods" } else { "InsufficientPods" }, "lastTransitionTime": now(), "message": ""}],
        })
    }

    /// POST pods/NAME/eviction: delete unless a PodDisruptionBudget would
    /// be violated (429, as the real API server answers). As the eviction
    /// REST handler does: a pod that is terminating, Pending, Succeeded or
    /// Failed ignores budgets (canIgnorePDB); a pod that is not Ready is
    /// evicted under the default `unhealthyPodEvictionPolicy`
    /// (IfHealthyBudget) only while its budget is met (currentHealthy ≥
    /// desiredHealthy > 0), always under `AlwaysAllow`; a Ready pod needs a
    /// disruption the budget allows.
    pub fn evict(&mut self, ns: &str, name: &str, grace: Option<i64>) -> R<Value> {
        let pods = self.registry.get("", "v1", "pods").cloned().expect("pods");
        let pod = self.get(&pods, ns, name)?;
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
        let ignores_budgets =
            meta(&pod).contains_key("deletionTimestamp") || matches!(phase, "Pending" | "Succeeded" | "Failed");
        if !ignores_budgets {
            let pdbs: Vec<Value> = self
                .in_namespace("policy", "poddisruptionbudgets", ns)
                .map(|(_, v)| v.clone())
                .filter(|pdb| {
                    LabelSelector::from_label_selector(&pdb.pointer("/spec/selector").cloned().unwrap_or(json!({})))
                        .matches(&pod)
                })
                .collect();
            if pdbs.len() > 1 {
                return Err(ApiError::new(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(pdb) = pdbs.first() {
                let status = self.pdb_status(ns, pdb);
                let get = |k: &str| status[k].as_i64().unwrap_or(0);
                let unhealthy_may_go = !is_ready(&pod)
                    && (pdb.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow")
                        || (get("currentHealthy") >= get("desiredHealthy") && get("desiredHealthy") > 0));
                if !unhealthy_may_go && get("disruptionsAllowed") < 1 {
                    let pdb_name = meta_str(pdb, "name").unwrap_or_default();
                    return Err(ApiError::new(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.").with_details(json!({
                        "causes": [{"reason": "DisruptionBudget", "message": format!("The disruption budget {pdb_name} needs {} healthy pods and has {} currently", status["desiredHealthy"], status["currentHealthy"])}]
                    })));
                }
            }
        }
        self.delete_pod(ns, name, grace, Propagation::Background, None, false)?;
        Ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}))
    }

    pub fn get_scale(&self, t: &ResourceType, ns: &str, name: &str) -> R<Value> {
        let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
        Ok(scale_object(t, &self.get(t, ns, name)?, &scale))
    }

    pub fn update_scale(&mut self, t: &ResourceType, ns: &str, name: &str, body: &Value, manager: &str) -> R<Value> {
        let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
        let key = Self::key(t, ns, name);
        let old = self.objects.get(&key).map(|o| Value::clone(o)).ok_or_else(|| ApiError::not_found(t, name))?;
        let mut new = old.clone();
        set_path(&mut new, &scale.spec_replicas, body.pointer("/spec/replicas").cloned().unwrap_or(json!(0)));
        let out = self.commit(t, ns, name, old, new, manager, false, false)?;
        Ok(scale_object(t, &out, &scale))
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

/// The status subresource's rules: a status write changes only status; a
/// write to the object itself keeps the stored status (pods, nodes and
/// namespaces excepted, as in the real API).
fn with_status_rules(t: &ResourceType, old: &Value, new: Value, sub: Sub) -> Value {
    match sub {
        Sub::Status => {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            merged
        }
        _ if t.status && !matches!(t.plural.as_str(), "pods" | "nodes" | "namespaces") => {
            let mut n = new;
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            n
        }
        _ => new,
    }
}

/// What a no-op check compares of managedFields: entries without their
/// times, in a fixed order (the order of entries carries no meaning).
/// Whether a write leaves the object as it was but for what a no-op write
/// may move: its resourceVersion and the times (and order) of its
/// managed-field entries. Compared in place; only the managed fields are
/// copied, to set their times aside.
fn unchanged(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return old == new };
    if o.len() != n.len() {
        return false;
    }
    o.iter().all(|(k, ov)| match (k.as_str(), n.get(k)) {
        (_, None) => false,
        ("metadata", Some(nv)) => same_metadata(ov, nv),
        (_, Some(nv)) => ov == nv,
    })
}

fn same_metadata(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return old == new };
    let skip = |k: &str| k == "resourceVersion" || k == "managedFields";
    if o.keys().filter(|k| !skip(k)).count() != n.keys().filter(|k| !skip(k)).count() {
        return false;
    }
    if !o.iter().filter(|(k, _)| !skip(k)).all(|(k, v)| n.get(k) == Some(v)) {
        return false;
    }
    let timeless = |v: &Value| -> Vec<Value> {
        let mut entries: Vec<Value> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let mut e = e.clone();
                if let Some(m) = e.as_object_mut() {
                    m.remove("time");
                }
                e
            })
            .collect();
        entries.sort_by_key(|e| format!("{}|{}|{}", e["manager"], e["operation"], e["subresource"]));
        entries
    };
    match (o.get("managedFields"), n.get("managedFields")) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || timeless(a) == timeless(b),
        _ => false,
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

fn apply_patch(content_type: &str, doc: &mut Value, body: &Value) -> R<()> {
    if content_type.starts_with("application/json-patch+json") {
        patch::json_patch(doc, body)
            .map_err(|e| ApiError::new(422, "Invalid", format!("the JSON patch could not be applied: {e}")))
    } else if content_type.starts_with("application/merge-patch+json") {
        patch::merge_patch(doc, body);
        Ok(())
    } else if content_type.starts_with("application/strategic-merge-patch+json") {
        patch::strategic_merge(doc, body);
        Ok(())
    } else {
        Err(ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})")))
    }
}

fn set_path(obj: &mut Value, dotted: &str, v: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = dotted.trim_start_matches('.').split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*p] = v;
            return;
        }
        cur = cur.as_object_mut().expect("object").entry(p.to_string()).or_insert(json!({}));
    }
}

fn get_path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    obj.pointer(&dotted.replace('.', "/"))
}

fn scale_object(t: &ResourceType, obj: &Value, scale: &Scale) -> Value {
    let selector = scale
        .label_selector
        .as_deref()
        .and_then(|p| get_path(obj, p))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| obj.pointer("/spec/selector").map(|s| LabelSelector::from_label_selector(s).to_string()))
        .unwrap_or_default();
    let _ = t;
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta_str(obj, "name"), "namespace": meta_str(obj, "namespace"), "uid": meta_str(obj, "uid"), "resourceVersion": meta_str(obj, "resourceVersion"), "creationTimestamp": meta_str(obj, "creationTimestamp")},
        "spec": {"replicas": get_path(obj, &scale.spec_replicas).cloned().unwrap_or(json!(0))},
        "status": {"replicas": get_path(obj, &scale.status_replicas).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}

fn encode_continue(rv: u64, last: &(String, String)) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"rv": rv, "ns": last.0, "name": last.1}).to_string())
}

fn decode_continue(token: &str) -> Option<(u64, (String, String))> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(token).ok()?;
    let v: Value = serde_json::from_slice(&raw).ok()?;
    Some((v["rv"].as_u64()?, (v["ns"].as_str()?.to_string(), v["name"].as_str()?.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A write answers with the object its watchers are sent: the same
    /// allocation, and the answer's text is the object's part of the
    /// event's line (serialized once for both).
    #[test]
    fn a_write_answers_with_its_events_object() {
        let mut s = Inner::new();
        let t = s.registry.get("", "v1", "configmaps").cloned().expect("configmaps");
        let apply = |s: &mut Inner, body: Value| {
            s.patch_shared(&t, "default", "c", "application/apply-patch+yaml", body, "m", false, Sub::Main, false)
                .unwrap()
        };
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let out = apply(&mut s, applied.clone());
        let ev = s.event_of(&out).expect("the create's event");
        assert_eq!(ev.kind, EventType::Added);
        let text: Value = serde_json::from_slice(&ev.object_json()).unwrap();
        assert_eq!(text, *out);
        assert_eq!(ev.line(), format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", out).as_bytes());
        // A no-op apply writes nothing: it answers with the stored object itself.
        let rv = s.resource_version();
        let again = apply(&mut s, applied);
        assert!(Arc::ptr_eq(&again, &out));
        assert_eq!(s.resource_version(), rv);
        // An update's event carries the stored object.
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}});
        let out = apply(&mut s, changed);
        let ev = s.event_of(&out).expect("the update's event");
        assert_eq!(ev.kind, EventType::Modified);
        assert_eq!(serde_json::from_slice::<Value>(&ev.object_json()).unwrap(), *out);
        assert_eq!(s.get(&t, "default", "c").unwrap(), *out);
    }
}
