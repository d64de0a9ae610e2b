//! Simulated controllers, each switchable: scheduler, kubelet, ReplicaSet,
//! Deployment (rolling updates by template hash), DaemonSet, StatefulSet and
//! Job. They run inside the emulator on every change (and on a tick for
//! time-based steps), write through the same store as any client, and fill
//! in the status fields the real controllers write, so `kubectl rollout
//! status`, `kubectl wait` and pinfleet's own readiness checks behave as
//! they would against a real cluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::nodes::node_ready;
use super::objects::pod_requests;
use super::objects::quantity;
use super::registry::ResourceType;
use super::store::{finalizers, is_ready, now, Inner, Propagation, Sub};

#[derive(Debug, Clone)]
pub struct Controllers {
    pub scheduler: bool,
    pub kubelet: bool,
    pub replicasets: bool,
    pub deployments: bool,
    pub daemonsets: bool,
    pub statefulsets: bool,
    pub jobs: bool,
    pub cronjobs: bool,
    /// kube-controller-manager's EndpointSlice controller.
    pub endpoints: bool,
    /// How long a scheduled pod takes to become Running and Ready.
    pub pod_start: Duration,
    /// How long a Job pod runs before it succeeds.
    pub job_run: Duration,
}

impl Default for Controllers {
    fn default() -> Self {
        Controllers {
            scheduler: true,
            kubelet: true,
            replicasets: true,
            deployments: true,
            daemonsets: true,
            statefulsets: true,
            jobs: true,
            cronjobs: true,
            endpoints: true,
            pod_start: Duration::from_millis(0),
            job_run: Duration::from_millis(200),
        }
    }
}

impl Controllers {
    pub fn none() -> Self {
        Controllers {
            scheduler: false,
            kubelet: false,
            replicasets: false,
            deployments: false,
            daemonsets: false,
            statefulsets: false,
            jobs: false,
            endpoints: false,
            ..Default::default()
        }
    }
}

/// The kinds whose changes can give the controllers work; other events
/// (ConfigMaps, Leases, …) do not wake them.
pub fn watched(key: &(String, String)) -> bool {
    matches!(
        (key.0.as_str(), key.1.as_str()),
        ("", "pods" | "nodes" | "services")
            | ("apps", "deployments" | "replicasets" | "daemonsets" | "statefulsets")
            | ("batch", "jobs" | "cronjobs")
    )
}

/// What changed since the controllers' last pass, for those that work
/// incrementally: the objects named by events (and, for a ReplicaSet or a
/// Pod, the owner its change concerns), or everything (at start, and after
/// events were lost). The Deployment and ReplicaSet controllers look at
/// these only, as kube-controller-manager's work from their queues: a
/// quiet cluster of thousands costs them nothing on a tick.
#[derive(Debug, Default)]
pub struct Changed {
    pub all: bool,
    /// (namespace, name)
    services: BTreeSet<(String, String)>,
    pods: BTreeSet<(String, String)>,
    deployments: BTreeSet<(String, String)>,
    replicasets: BTreeSet<(String, String)>,
    /// A Node was added, changed or removed.
    nodes: bool,
    /// A Pod was removed (room made on its node).
    pods_gone: bool,
}

impl Changed {
    pub fn everything() -> Self {
        Changed { all: true, ..Default::default() }
    }

    pub fn note(&mut self, ev: &super::store::Event) {
        if self.all {
            return;
        }
        let key = (ev.namespace.clone(), name(&ev.object));
        // The owner a change concerns: a ReplicaSet's Deployment, a Pod's ReplicaSet.
        let owner = |kind: &str| {
            ev.object
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true) && s(r, "/kind") == kind)
                .map(|r| (ev.namespace.clone(), s(r, "/name").to_string()))
        };
        match (ev.key.0.as_str(), ev.key.1.as_str()) {
            ("", "services") => {
                self.services.insert(key);
            }
            ("", "pods") => {
                self.pods_gone |= matches!(ev.kind, super::store::EventType::Deleted)
                    || matches!(s(&ev.object, "/status/phase"), "Succeeded" | "Failed");
                self.replicasets.extend(owner("ReplicaSet"));
                self.pods.insert(key);
            }
            ("", "nodes") => self.nodes = true,
            ("apps", "deployments") => {
                self.deployments.insert(key);
            }
            ("apps", "replicasets") => {
                self.deployments.extend(owner("Deployment"));
                self.replicasets.insert(key);
            }
            _ => {}
        }
    }
}

impl Changed {
    /// Whether a pass has nothing named to look at.
    pub fn is_empty(&self) -> bool {
        !self.all
            && !self.nodes
            && !self.pods_gone
            && self.services.is_empty()
            && self.pods.is_empty()
            && self.deployments.is_empty()
            && self.replicasets.is_empty()
    }

    /// Names every object `all` stands for, so that it can be taken a
    /// part at a time.
    pub fn expand(&mut self, inner: &Inner) {
        if !self.all {
            return;
        }
        let names = |group: &str, plural: &str| -> BTreeSet<(String, String)> {
            inner.iter(&t(inner, group, plural), None).map(|o| (ns(o), name(o))).collect()
        };
        *self = Changed {
            all: false,
            services: names("", "services"),
            pods: names("", "pods"),
            deployments: names("apps", "deployments"),
            replicasets: names("apps", "replicasets"),
            nodes: true,
            pods_gone: true,
        };
    }

    /// Up to `limit` objects of each kind for one pass, as
    /// kube-controller-manager's workers take keys from their queues; the
    /// rest stays for the next. A pass stays short however much arrives,
    /// and the requests waiting for the store between passes (a Lease
    /// renewal among them) wait for one short pass at most.
    pub fn take(&mut self, limit: usize) -> Changed {
        fn part(set: &mut BTreeSet<(String, String)>, limit: usize) -> BTreeSet<(String, String)> {
            let rest = match set.iter().nth(limit).cloned() {
                Some(first_left) => set.split_off(&first_left),
                None => BTreeSet::new(),
            };
            std::mem::replace(set, rest)
        }
        Changed {
            all: std::mem::take(&mut self.all),
            services: part(&mut self.services, limit),
            pods: part(&mut self.pods, limit),
            deployments: part(&mut self.deployments, limit),
            replicasets: part(&mut self.replicasets, limit),
            nodes: std::mem::take(&mut self.nodes),
            pods_gone: std::mem::take(&mut self.pods_gone),
        }
    }
}

/// The objects of a type a pass looks at: every one, or those `changed` names.
fn dirty(inner: &Inner, rt: &ResourceType, changed: &Changed, named: &BTreeSet<(String, String)>) -> Vec<Arc<Value>> {
    if changed.all {
        return all(inner, rt);
    }
    named.iter().filter_map(|(n, name)| inner.peek_shared(&rt.group, &rt.plural, n, name).cloned()).collect()
}

/// Pods whose template asks to fail (tests of failure handling).
pub const FAIL_ANNOTATION: &str = "sim.pinfleet.dev/fail";

fn t(inner: &Inner, group: &str, plural: &str) -> ResourceType {
    let version = "v1";
    inner.registry.get(group, version, plural).cloned().expect("built-in type")
}

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn i(v: &Value, ptr: &str, default: i64) -> i64 {
    v.pointer(ptr).and_then(Value::as_i64).unwrap_or(default)
}

fn name(v: &Value) -> String {
    s(v, "/metadata/name").to_string()
}
fn ns(v: &Value) -> String {
    s(v, "/metadata/namespace").to_string()
}
fn uid(v: &Value) -> String {
    s(v, "/metadata/uid").to_string()
}

fn terminating(v: &Value) -> bool {
    v.pointer("/metadata/deletionTimestamp").is_some()
}

fn controller_uid(v: &Value) -> Option<String> {
    super::objects::controller_uid(v).map(str::to_string)
}

fn owner_ref(owner: &Value, api_version: &str, kind: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "name": name(owner), "uid": uid(owner), "controller": true, "blockOwnerDeletion": true})
}

/// Every object of a type, shared with the store (no copy of one is made:
/// a pass over thousands of objects costs their count, not their size).
fn all(inner: &Inner, rt: &ResourceType) -> Vec<Arc<Value>> {
    inner.iter_shared(rt, None).cloned().collect()
}

/// Objects indexed by each pair of their selector's first pair (Services
/// by `/spec/selector`): the candidates for a pod are those under one of
/// its labels.
fn by_selector_pair<'a>(
    items: impl Iterator<Item = &'a Value>,
    ptr: &str,
) -> HashMap<(String, String), Vec<&'a Value>> {
    let mut index: HashMap<(String, String), Vec<&'a Value>> = HashMap::new();
    for item in items {
        let first = item.pointer(ptr).and_then(Value::as_object).and_then(|sel| sel.iter().next());
        if let Some((k, v)) = first {
            index.entry((k.clone(), v.as_str().unwrap_or_default().to_string())).or_default().push(item);
        }
    }
    index
}

/// The indexed selectors that may select `pod`: those whose first pair is one of its labels.
fn candidates<'a, 'b>(
    index: &'b HashMap<(String, String), Vec<&'a Value>>,
    pod: &'b Value,
) -> impl Iterator<Item = &'a Value> + 'b {
    pod.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(move |(k, v)| index.get(&(k.clone(), v.as_str().unwrap_or_default().to_string())))
        .flatten()
        .copied()
}

/// Stable short hash of a pod template (the pod-template-hash label).
pub fn template_hash(template: &Value) -> String {
    use sha2::Digest;
    let mut t = template.clone();
    if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        labels.remove("pod-template-hash");
        labels.remove("controller-revision-hash");
    }
    let h = hex::encode(sha2::Sha256::digest(t.to_string().as_bytes()));
    h[..10].to_string()
}

fn resolve(v: Option<&Value>, total: i64, round_up: bool, default: &str) -> i64 {
    let raw = v.cloned().unwrap_or_else(|| json!(default));
    match raw {
        Value::String(p) if p.ends_with('%') => {
            let pct: i64 = p.trim_end_matches('%').parse().unwrap_or(0);
            if round_up {
                (total * pct + 99) / 100
            } else {
                total * pct / 100
            }
        }
        other => other.as_i64().unwrap_or(0),
    }
}

fn pod_from_template(
    template: &Value,
    namespace: &str,
    generate_name: Option<&str>,
    pod_name: Option<&str>,
    owner: Value,
    extra_labels: &[(&str, String)],
) -> Value {
    let mut meta = template.get("metadata").cloned().unwrap_or(json!({}));
    if !meta.is_object() {
        meta = json!({});
    }
    let m = meta.as_object_mut().expect("object");
    if let Some(g) = generate_name {
        m.insert("generateName".into(), json!(g));
    }
    if let Some(n) = pod_name {
        m.insert("name".into(), json!(n));
    }
    m.insert("namespace".into(), json!(namespace));
    m.insert("ownerReferences".into(), json!([owner]));
    let labels = m.entry("labels").or_insert(json!({}));
    for (k, v) in extra_labels {
        labels[*k] = json!(v);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template.get("spec").cloned().unwrap_or(json!({})), "status": {"phase": "Pending"}})
}

/// Writes `status` if it differs from what is stored.
fn set_status(inner: &mut Inner, rt: &ResourceType, obj: &Value, status: Value, manager: &str) {
    if obj.get("status") == Some(&status) {
        return;
    }
    let mut n = obj.clone();
    n["status"] = status;
    let _ = inner.update(rt, &ns(obj), &name(obj), n, manager, Sub::Status, false);
}

fn tolerates(pod: &Value, taint: &Value) -> bool {
    let effect = s(taint, "/effect");
    if effect == "PreferNoSchedule" {
        return true;
    }
    pod.pointer("/spec/tolerations").and_then(Value::as_array).is_some_and(|ts| {
        ts.iter().any(|t| {
            let key_ok = s(t, "/key").is_empty() && s(t, "/operator") == "Exists" || s(t, "/key") == s(taint, "/key");
            let value_ok = s(t, "/operator") == "Exists" || s(t, "/value") == s(taint, "/value");
            let effect_ok = s(t, "/effect").is_empty() || s(t, "/effect") == effect;
            key_ok && value_ok && effect_ok
        })
    })
}

fn affinity_ok(pod: &Value, node: &Value) -> bool {
    let labels = node.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
    if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
        if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            return false;
        }
    }
    let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    terms.iter().any(|term| {
        term.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().all(|e| {
            let have = labels.get(s(e, "/key")).and_then(Value::as_str);
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match s(e, "/operator") {
                "In" => have.is_some_and(|h| values.contains(&h)),
                "NotIn" => have.is_none_or(|h| !values.contains(&h)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                _ => false,
            }
        })
    })
}

/// Why `pod` cannot run on `node`, if it cannot.
fn unfit(pod: &Value, node: &Value, used: (i64, i64)) -> Option<&'static str> {
    if !node_ready(node) {
        return Some("node(s) were not ready");
    }
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        return Some("node(s) were unschedulable");
    }
    if !affinity_ok(pod, node) {
        return Some("node(s) didn't match Pod's node affinity/selector");
    }
    for taint in node.pointer("/spec/taints").and_then(Value::as_array).into_iter().flatten() {
        if !tolerates(pod, taint) {
            return Some("node(s) had untolerated taint");
        }
    }
    let (cpu, mem) = pod_requests(pod);
    let alloc_cpu = node.pointer("/status/allocatable/cpu").map_or(i64::MAX, |v| quantity(Some(v), true));
    let alloc_mem = node.pointer("/status/allocatable/memory").map_or(i64::MAX, |v| quantity(Some(v), false));
    if used.0 + cpu > alloc_cpu {
        return Some("Insufficient cpu");
    }
    if used.1 + mem > alloc_mem {
        return Some("Insufficient memory");
    }
    None
}

impl Controllers {
    /// One pass over everything; true when something was written.
    pub fn reconcile(&self, inner: &mut Inner, changed: &Changed) -> bool {
        let before = inner.resource_version();
        // Each controller's share of the pass, for `RUST_LOG=pinfleet::sim=trace`.
        let mut took: Vec<(&str, u128)> = Vec::new();
        let mut step = |name: &'static str, on: bool, inner: &mut Inner, f: &dyn Fn(&mut Inner)| {
            if on {
                let t = std::time::Instant::now();
                f(inner);
                took.push((name, t.elapsed().as_micros()));
            }
        };
        step("deployments", self.deployments, inner, &|i| self.deployments(i, changed));
        step("replicasets", self.replicasets, inner, &|i| self.replicasets(i, changed));
        step("daemonsets", self.daemonsets, inner, &|i| self.daemonsets(i));
        step("statefulsets", self.statefulsets, inner, &|i| self.statefulsets(i));
        step("cronjobs", self.cronjobs, inner, &|i| self.cronjobs(i, chrono::Utc::now()));
        step("jobs", self.jobs, inner, &|i| self.jobs(i));
        step("scheduler", self.scheduler, inner, &|i| self.schedule(i, changed));
        step("kubelet", self.kubelet, inner, &|i| self.kubelet(i));
        step("endpoints", self.endpoints, inner, &|i| self.endpoint_slices(i, changed));
        tracing::trace!(?took, "controllers' pass (µs)");
        inner.resource_version() != before
    }

    fn schedule(&self, inner: &mut Inner, changed: &Changed) {
        // As kube-scheduler, a pod that did not fit is tried again when
        // the cluster changes (a pod or a node), not on every tick: a
        // thousand pending pods cost nothing while nothing moves.
        if !changed.all && changed.pods.is_empty() && !changed.nodes {
            return;
        }
        let pods_t = t(inner, "", "pods");
        // The pods waiting for a node and each node's usage come from the
        // store's index, not a pass over every pod.
        let pending: Vec<Arc<Value>> = inner
            .objects_unbound()
            .iter()
            .filter_map(|(n, p)| inner.peek_shared("", "pods", n, p).cloned())
            .filter(|p| !terminating(p))
            .collect();
        if pending.is_empty() {
            return;
        }
        let nodes = all(inner, &t(inner, "", "nodes"));
        let usage: Vec<(String, super::objects::Usage)> =
            nodes.iter().map(|n| (name(n), inner.node_usage(&name(n)))).collect();
        let mut used: BTreeMap<String, (i64, i64)> =
            usage.iter().map(|(n, u)| (n.clone(), (u.cpu, u.memory))).collect();
        // For scoring, kube-scheduler counts a pod without requests as 100m
        // CPU; with the pod count as tie-break, pods spread over nodes.
        let mut score: BTreeMap<String, (i64, usize)> =
            usage.iter().map(|(n, u)| (n.clone(), (u.score_cpu, u.pods))).collect();
        // A pod that did not fit waits for a cluster event that can make
        // room (a node changed, a pod gone), as kube-scheduler's
        // unschedulable queue: other pods' arrivals try only themselves.
        let retry_all = changed.all || changed.nodes || changed.pods_gone;
        let candidate = |p: &Value| {
            retry_all
                || changed.pods.contains(&(ns(p), name(p)))
                || p.pointer("/status/conditions/0/reason").and_then(Value::as_str) != Some("Unschedulable")
        };
        for pod in pending.iter().filter(|p| candidate(p)) {
            let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
            let mut best: Option<(&Value, (i64, usize))> = None;
            for node in &nodes {
                let u = used.get(&name(node)).copied().unwrap_or_default();
                match unfit(pod, node, u) {
                    Some(r) => *reasons.entry(r).or_default() += 1,
                    None => {
                        let sc = score.get(&name(node)).copied().unwrap_or_default();
                        if best.is_none_or(|(_, b)| sc < b) {
                            best = Some((node, sc));
                        }
                    }
                }
            }
            match best {
                Some((node, _)) => {
                    let mut n = Value::clone(pod);
                    n["spec"]["nodeName"] = json!(name(node));
                    n["status"]["conditions"] =
                        json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]);
                    let e = used.entry(name(node)).or_default();
                    let (c, m) = pod_requests(pod);
                    e.0 += c;
                    e.1 += m;
                    let sc = score.entry(name(node)).or_default();
                    sc.0 += c.max(100);
                    sc.1 += 1;
                    let _ = inner.update(&pods_t, &ns(pod), &name(pod), n, "default-scheduler", Sub::Main, false);
                }
                None => {
                    let detail: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
                    let msg = format!(
                        "0/{} nodes are available: {}.",
                        nodes.len(),
                        if detail.is_empty() { "no nodes".to_string() } else { detail.join(", ") }
                    );
                    let status = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}]});
                    let mut cmp = pod.get("status").cloned().unwrap_or(json!({}));
                    if let Some(c) = cmp.pointer_mut("/conditions/0/lastTransitionTime") {
                        *c = Value::Null;
                    }
                    if pod.pointer("/status/conditions/0/message") != status.pointer("/conditions/0/message") {
                        set_status(inner, &pods_t, pod, status, "default-scheduler");
                    }
                }
            }
        }
    }

    fn kubelet(&self, inner: &mut Inner) {
        let pods_t = t(inner, "", "pods");
        let now_ts = chrono::Utc::now();
        // One listing of the pods for the node pass and the pod pass (the
        // node pass writes Nodes and CSRs only).
        let pods = all(inner, &pods_t);
        super::nodes::kubelets(inner, &pods);
        // The nodes once per pass, shared (a handful beside thousands of pods).
        let nodes: HashMap<String, Arc<Value>> =
            all(inner, &t(inner, "", "nodes")).into_iter().map(|n| (name(&n), n)).collect();
        for pod in pods {
            let node = s(&pod, "/spec/nodeName").to_string();
            if node.is_empty() {
                continue;
            }
            let Some(n) = nodes.get(&node) else {
                // Pod garbage collection: pods bound to a node that is gone.
                if !terminating(&pod) {
                    let _ = inner.delete(&pods_t, &ns(&pod), &name(&pod), Propagation::Background, None, false);
                }
                continue;
            };
            // pinfleet's own containers run as processes: their runner reports them.
            if !terminating(&pod) && super::procs::is_own(&pod, &inner.own_images) {
                continue;
            }
            if terminating(&pod) {
                // The kubelet stops the containers (one that ignores SIGTERM
                // at the end of its grace); with no finalizers left the pod goes.
                let until = pod
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&chrono::Utc));
                if super::store::ignores_sigterm(&pod) && until.is_some_and(|u| u > now_ts) {
                    continue;
                }
                if finalizers(&pod).is_empty() {
                    let _ = inner.delete(&pods_t, &ns(&pod), &name(&pod), Propagation::Background, None, false);
                }
                continue;
            }
            // A started kubelet without a pod network still runs
            // hostNetwork pods: that is how the network agent arrives.
            let host_network = pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true);
            let network_only = super::nodes::booted(n) && !super::nodes::has_network(n);
            if !node_ready(n) && !(network_only && host_network) {
                if is_ready(&pod) {
                    let mut st = pod["status"].clone();
                    st["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "NodeNotReady"}]);
                    set_status(inner, &pods_t, &pod, st, "kubelet");
                }
                continue;
            }
            let phase = s(&pod, "/status/phase").to_string();
            let restart = s(&pod, "/spec/restartPolicy");
            let batch = restart == "Never" || restart == "OnFailure";
            // A running service pod or a finished one has nothing to do:
            // settled pods cost a pass no parsing and no copies.
            if matches!(phase.as_str(), "Succeeded" | "Failed") || (phase == "Running" && !batch) {
                continue;
            }
            let scheduled_at = pod
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled"))
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|d| d.with_timezone(&chrono::Utc))
                .unwrap_or(now_ts);
            let elapsed = (now_ts - scheduled_at).to_std().unwrap_or_default();
            let fails = s(&pod, &format!("/metadata/annotations/{}", FAIL_ANNOTATION.replace('/', "~1"))) == "true";
            let containers: Vec<String> = pod
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map(|a| a.iter().map(name_of).collect())
                .unwrap_or_default();
            let ip = format!("10.244.{}.{}", (uid(&pod).len() * 7) % 250, rand::random_range(2..250u8));
            match phase.as_str() {
                "" | "Pending" if elapsed >= self.pod_start => {
                    let statuses: Vec<Value> = containers.iter().map(|c| json!({"name": c, "ready": true, "started": true, "restartCount": 0, "image": "", "imageID": "", "state": {"running": {"startedAt": now()}}})).collect();
                    let st = json!({
                        "phase": "Running", "podIP": ip, "hostIP": "10.0.0.1", "startTime": now(),
                        "conditions": [
                            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at.format("%Y-%m-%dT%H:%M:%SZ").to_string()},
                            {"type": "Initialized", "status": "True", "lastTransitionTime": now()},
                            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now()},
                            {"type": "Ready", "status": "True", "lastTransitionTime": now()},
                        ],
                        "containerStatuses": statuses,
                    });
                    set_status(inner, &pods_t, &pod, st, "kubelet");
                }
                "Running" if batch => {
                    let started = pod
                        .pointer("/status/startTime")
                        .and_then(Value::as_str)
                        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                        .map(|d| d.with_timezone(&chrono::Utc))
                        .unwrap_or(now_ts);
                    if (now_ts - started).to_std().unwrap_or_default() >= self.job_run {
                        // Containers that run etcdctl run it against the sim's etcd.
                        let codes: Vec<i32> = pod
                            .pointer("/spec/containers")
                            .and_then(Value::as_array)
                            .map(|cs| {
                                cs.iter()
                                    .map(|c| match super::etcd::etcdctl_args(c) {
                                        Some(args) => {
                                            let result = inner.etcd.run(&node, &args);
                                            let code = result.0;
                                            inner.etcd.record(&ns(&pod), &name(&pod), &name_of(c), result);
                                            code
                                        }
                                        None => i32::from(fails),
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        let failed = codes.iter().any(|c| *c != 0);
                        let phase = if failed { "Failed" } else { "Succeeded" };
                        let statuses: Vec<Value> = containers.iter().zip(codes.iter().chain(std::iter::repeat(&0))).map(|(c, code)| {
                            let reason = if *code == 0 { "Completed" } else { "Error" };
                            json!({"name": c, "ready": false, "restartCount": 0, "image": "", "imageID": "", "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": now()}}})
                        }).collect();
                        let mut st = pod["status"].clone();
                        st["phase"] = json!(phase);
                        st["conditions"] = json!([{"type": "Ready", "status": "False", "reason": "PodCompleted"}]);
                        st["containerStatuses"] = json!(statuses);
                        set_status(inner, &pods_t, &pod, st, "kubelet");
                    }
                }
                _ => {}
            }
        }
    }

    /// One EndpointSlice per Service with a selector: its pods with an
    /// IP, each with `ready` from the pod's Ready condition. Like the real
    /// controller, it looks only at what changed: the Services named, and
    /// for a changed Pod the Services that select it now or listed it
    /// before; everything is looked at only after lost events.
    fn endpoint_slices(&self, inner: &mut Inner, changed: &Changed) {
        let svc_t = t(inner, "", "services");
        let slices_t = t(inner, "discovery.k8s.io", "endpointslices");
        let selects = |svc: &Value, pod: &Value| {
            svc.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty()).is_some_and(|sel| {
                sel.iter().all(|(k, v)| pod.pointer("/metadata/labels").and_then(|l| l.get(k)) == Some(v))
            })
        };
        // The Services to look at, as (namespace, name).
        let mut todo: BTreeSet<(String, String)> = BTreeSet::new();
        if changed.all {
            todo.extend(inner.iter(&svc_t, None).map(|s| (ns(s), name(s))));
        } else {
            todo.extend(changed.services.iter().cloned());
            let mut pods_by_ns: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            for (n, p) in &changed.pods {
                pods_by_ns.entry(n.as_str()).or_default().insert(p.as_str());
            }
            for (n, pods) in pods_by_ns {
                // The Services that select a changed pod now: found through
                // one pair of each selector, not by trying every Service on
                // every pod (thousands of Services in one namespace).
                let services = by_selector_pair(inner.iter(&svc_t, Some(n)), "/spec/selector");
                for pod in pods.iter().filter_map(|p| inner.peek("", "pods", n, p)) {
                    for svc in candidates(&services, pod) {
                        if selects(svc, pod) {
                            todo.insert((n.to_string(), name(svc)));
                        }
                    }
                }
                // … and those whose slice listed one before.
                for slice in inner.iter(&slices_t, Some(n)) {
                    let listed = slice
                        .get("endpoints")
                        .and_then(Value::as_array)
                        .is_some_and(|eps| eps.iter().any(|e| pods.contains(s(e, "/targetRef/name"))));
                    let svc = s(slice, "/metadata/labels/kubernetes.io~1service-name");
                    if listed && name(slice) == format!("{svc}-sim") {
                        todo.insert((n.to_string(), svc.to_string()));
                    }
                }
            }
        }
        let mut writes = Vec::new();
        for (ns_, name_) in todo {
            let Some(svc) = inner.peek("", "services", &ns_, &name_) else { continue };
            let Some(sel) = svc.pointer("/spec/selector").and_then(Value::as_object).filter(|s| !s.is_empty()) else {
                continue;
            };
            // Every selected pod carries the selector's first pair.
            let (k, v) = sel.iter().next().expect("a selector that is not empty");
            let mut endpoints: Vec<Value> = inner
                .pods_labelled(&ns_, k, v.as_str().unwrap_or_default())
                .filter(|p| !terminating(p) && !s(p, "/status/podIP").is_empty() && selects(svc, p))
                .map(|p| {
                    json!({"addresses": [s(p, "/status/podIP")], "conditions": {"ready": is_ready(p), "serving": is_ready(p), "terminating": false},
                        "nodeName": s(p, "/spec/nodeName"), "targetRef": {"kind": "Pod", "namespace": ns_, "name": name(p), "uid": uid(p)}})
                })
                .collect();
            endpoints.sort_by(|a, b| a["targetRef"]["name"].as_str().cmp(&b["targetRef"]["name"].as_str()));
            let ports: Vec<Value> = svc
                .pointer("/spec/ports")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let port = p.get("targetPort").and_then(Value::as_i64).or_else(|| p.get("port").and_then(Value::as_i64));
                            json!({"name": p.get("name").cloned().unwrap_or(json!("")), "port": port, "protocol": p.get("protocol").cloned().unwrap_or(json!("TCP"))})
                        })
                        .collect()
                })
                .unwrap_or_default();
            let slice_name = format!("{name_}-sim");
            let (endpoints, ports) = (json!(endpoints), json!(ports));
            let existing = inner.peek("discovery.k8s.io", "endpointslices", &ns_, &slice_name);
            if existing.is_some_and(|e| e.get("endpoints") == Some(&endpoints) && e.get("ports") == Some(&ports)) {
                continue;
            }
            let owner = owner_ref(svc, "v1", "Service");
            writes.push((ns_, name_, slice_name, existing.is_some(), endpoints, ports, owner));
        }
        for (ns_, name_, slice_name, exists, endpoints, ports, owner) in writes {
            let _ = if exists {
                let Ok(mut e) = inner.get(&slices_t, &ns_, &slice_name) else { continue };
                e["endpoints"] = endpoints;
                e["ports"] = ports;
                inner.update(&slices_t, &ns_, &slice_name, e, "endpointslice-controller", Sub::Main, false)
            } else {
                let obj = json!({
                    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": slice_name, "namespace": ns_,
                        "labels": {"kubernetes.io/service-name": name_, "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"},
                        "ownerReferences": [owner]},
                    "addressType": "IPv4", "endpoints": endpoints, "ports": ports,
                });
                inner.create(&slices_t, &ns_, obj, "endpointslice-controller", false)
            };
        }
    }

    fn replicasets(&self, inner: &mut Inner, changed: &Changed) {
        let rs_t = t(inner, "apps", "replicasets");
        let pods_t = t(inner, "", "pods");
        let replicasets = dirty(inner, &rs_t, changed, &changed.replicasets);
        if replicasets.is_empty() {
            return;
        }
        for rs in replicasets.into_iter().filter(|r| !terminating(r)) {
            let want = i(&rs, "/spec/replicas", 1);
            let rs_uid = uid(&rs);
            let mine = inner.owned_by(&rs_uid, "", "pods");
            // The pods as they are after this pass's writes: these, and the new ones.
            let mut names: Vec<String> = mine.iter().map(|p| name(p)).collect();
            let owned: Vec<&Value> = mine
                .iter()
                .map(|p| &**p)
                .filter(|p| !terminating(p) && !matches!(s(p, "/status/phase"), "Succeeded" | "Failed"))
                .collect();
            let have = owned.len() as i64;
            if have < want {
                let hash = rs.pointer("/metadata/labels/pod-template-hash").and_then(Value::as_str).map(str::to_string);
                for _ in have..want {
                    let mut extra = Vec::new();
                    if let Some(h) = &hash {
                        extra.push(("pod-template-hash", h.clone()));
                    }
                    let pod = pod_from_template(
                        &rs["spec"]["template"],
                        &ns(&rs),
                        Some(&format!("{}-", name(&rs))),
                        None,
                        owner_ref(&rs, "apps/v1", "ReplicaSet"),
                        &extra,
                    );
                    if let Ok(p) = inner.create_shared(&pods_t, &ns(&rs), pod, "replicaset-controller", false) {
                        names.push(name(&p));
                    }
                }
            } else if have > want {
                // Unscheduled, then not ready, then newest go first.
                let mut victims = owned.clone();
                victims.sort_by_key(|p| {
                    (
                        !s(p, "/spec/nodeName").is_empty(),
                        is_ready(p),
                        std::cmp::Reverse(s(p, "/metadata/creationTimestamp").to_string()),
                    )
                });
                for p in victims.into_iter().take((have - want) as usize) {
                    let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                }
            }
            let namespace = ns(&rs);
            let now: Vec<&Value> = names
                .iter()
                .filter_map(|n| inner.peek("", "pods", &namespace, n))
                .filter(|p| controller_uid(p).as_deref() == Some(rs_uid.as_str()) && !terminating(p))
                .collect();
            let ready = now.iter().filter(|p| is_ready(p)).count();
            let status = json!({"replicas": now.len(), "fullyLabeledReplicas": now.len(), "readyReplicas": ready, "availableReplicas": ready, "observedGeneration": i(&rs, "/metadata/generation", 1)});
            set_status(inner, &rs_t, &rs, status, "replicaset-controller");
        }
    }

    fn deployments(&self, inner: &mut Inner, changed: &Changed) {
        let d_t = t(inner, "apps", "deployments");
        let rs_t = t(inner, "apps", "replicasets");
        let deployments = dirty(inner, &d_t, changed, &changed.deployments);
        if deployments.is_empty() {
            return;
        }
        for d in deployments.into_iter().filter(|d| !terminating(d)) {
            let replicas = i(&d, "/spec/replicas", 1);
            let hash = template_hash(&d["spec"]["template"]);
            let namespace = ns(&d);
            let d_uid = uid(&d);
            let mine = inner.owned_by(&d_uid, "apps", "replicasets");
            let rss: Vec<Arc<Value>> = mine.iter().filter(|r| !terminating(r)).cloned().collect();
            let new_name = format!("{}-{}", name(&d), hash);
            let new_rs = rss.iter().find(|r| name(r) == new_name).cloned();
            let old: Vec<&Arc<Value>> = rss.iter().filter(|r| name(r) != new_name).collect();
            let paused = d.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
            let revision = rss
                .iter()
                .filter_map(|r| {
                    r.pointer("/metadata/annotations/deployment.kubernetes.io~1revision")
                        .and_then(Value::as_str)
                        .and_then(|v| v.parse::<i64>().ok())
                })
                .max()
                .unwrap_or(0);
            let recreate = s(&d, "/spec/strategy/type") == "Recreate";
            let max_surge = if recreate {
                0
            } else {
                resolve(d.pointer("/spec/strategy/rollingUpdate/maxSurge"), replicas, true, "25%")
            };
            let mut max_unavailable = if recreate {
                replicas
            } else {
                resolve(d.pointer("/spec/strategy/rollingUpdate/maxUnavailable"), replicas, false, "25%")
            };
            if max_surge == 0 && max_unavailable == 0 {
                max_unavailable = 1;
            }
            let rs_replicas = |r: &Value| i(r, "/spec/replicas", 0);
            let rs_ready = |r: &Value| i(r, "/status/availableReplicas", 0);
            if !paused {
                let new_rs = match new_rs {
                    Some(r) => r,
                    None => {
                        let mut template = d["spec"]["template"].clone();
                        template["metadata"]["labels"]["pod-template-hash"] = json!(hash);
                        let mut selector = d["spec"]["selector"].clone();
                        selector["matchLabels"]["pod-template-hash"] = json!(hash);
                        let initial = if old.is_empty() { replicas } else { 0 };
                        let rs = json!({
                            "apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "metadata": {"name": new_name, "namespace": namespace, "labels": template["metadata"]["labels"].clone(),
                                "annotations": {"deployment.kubernetes.io/revision": (revision + 1).to_string(), "deployment.kubernetes.io/desired-replicas": replicas.to_string()},
                                "ownerReferences": [owner_ref(&d, "apps/v1", "Deployment")]},
                            "spec": {"replicas": initial, "selector": selector, "template": template},
                        });
                        match inner.create_shared(&rs_t, &namespace, rs, "deployment-controller", false) {
                            Ok(r) => r,
                            Err(_) => continue,
                        }
                    }
                };
                let total: i64 = rs_replicas(&new_rs) + old.iter().map(|r| rs_replicas(r)).sum::<i64>();
                // Scale the new ReplicaSet up within maxSurge.
                let mut new_target = rs_replicas(&new_rs);
                if recreate {
                    if old.iter().all(|r| rs_replicas(r) == 0 && i(r, "/status/replicas", 0) == 0) {
                        new_target = replicas;
                    }
                } else if new_target < replicas {
                    let room = replicas + max_surge - total;
                    new_target = (new_target + room.max(0)).min(replicas);
                } else if new_target > replicas {
                    new_target = replicas;
                }
                if new_target != rs_replicas(&new_rs) {
                    let mut n = Value::clone(&new_rs);
                    n["spec"]["replicas"] = json!(new_target);
                    let _ =
                        inner.update(&rs_t, &namespace, &name(&new_rs), n, "deployment-controller", Sub::Main, false);
                }
                // Scale old ReplicaSets down, keeping replicas - maxUnavailable available.
                let available: i64 = rs_ready(&new_rs) + old.iter().map(|r| rs_ready(r)).sum::<i64>();
                let min_available = replicas - max_unavailable;
                let mut can_remove = (available - min_available).max(0);
                for r in &old {
                    let unavailable_here = (rs_replicas(r) - rs_ready(r)).max(0);
                    let cut =
                        if recreate { rs_replicas(r) } else { (unavailable_here + can_remove).min(rs_replicas(r)) };
                    if cut > 0 {
                        can_remove -= (cut - unavailable_here).max(0);
                        let mut n = Value::clone(r);
                        n["spec"]["replicas"] = json!(rs_replicas(r) - cut);
                        let _ = inner.update(&rs_t, &namespace, &name(r), n, "deployment-controller", Sub::Main, false);
                    }
                }
            }
            // Status from the ReplicaSets as they are now.
            let mut names: BTreeSet<String> = mine.iter().map(|r| name(r)).collect();
            names.insert(new_name.clone());
            let rss: Vec<&Value> = names
                .iter()
                .filter_map(|n| inner.peek("apps", "replicasets", &namespace, n))
                .filter(|r| controller_uid(r).as_deref() == Some(d_uid.as_str()))
                .collect();
            let sum = |f: &str| rss.iter().map(|r| i(r, f, 0)).sum::<i64>();
            let updated = rss.iter().find(|r| name(r) == new_name).map(|r| i(r, "/status/replicas", 0)).unwrap_or(0);
            let (total, ready, available) =
                (sum("/status/replicas"), sum("/status/readyReplicas"), sum("/status/availableReplicas"));
            let complete = updated == replicas && total == replicas && available == replicas;
            let status = json!({
                "observedGeneration": i(&d, "/metadata/generation", 1),
                "replicas": total, "updatedReplicas": updated, "readyReplicas": ready, "availableReplicas": available,
                "unavailableReplicas": (total - available).max(0),
                "conditions": [
                    {"type": "Available", "status": if available >= replicas - max_unavailable { "True" } else { "False" }, "reason": if available >= replicas - max_unavailable { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" }, "message": "Deployment availability"},
                    {"type": "Progressing", "status": "True", "reason": if complete { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" }, "message": format!("ReplicaSet \"{new_name}\" {}", if complete { "has successfully progressed." } else { "is progressing." })},
                ],
            });
            set_status(inner, &d_t, &d, status, "deployment-controller");
        }
    }

    fn daemonsets(&self, inner: &mut Inner) {
        let ds_t = t(inner, "apps", "daemonsets");
        let pods_t = t(inner, "", "pods");
        let daemonsets = all(inner, &ds_t);
        if daemonsets.is_empty() {
            return;
        }
        let nodes = all(inner, &t(inner, "", "nodes"));
        for ds in daemonsets.into_iter().filter(|d| !terminating(d)) {
            let hash = template_hash(&ds["spec"]["template"]);
            let pods: Vec<Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&ds).as_str()) && !terminating(p))
                .collect();
            let eligible: Vec<&Value> = nodes
                .iter()
                .map(|n| &**n)
                .filter(|n| {
                    let probe = json!({"spec": ds["spec"]["template"]["spec"].clone()});
                    affinity_ok(&probe, n)
                        && n.pointer("/spec/taints")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .all(|t| s(t, "/effect") == "PreferNoSchedule" || tolerates(&probe, t))
                })
                .collect();
            let mut outdated_ready = 0;
            for node in &eligible {
                let on_node: Vec<&Arc<Value>> = pods.iter().filter(|p| s(p, "/spec/nodeName") == name(node)).collect();
                if on_node.is_empty() {
                    let mut pod = pod_from_template(
                        &ds["spec"]["template"],
                        &ns(&ds),
                        Some(&format!("{}-", name(&ds))),
                        None,
                        owner_ref(&ds, "apps/v1", "DaemonSet"),
                        &[("controller-revision-hash", hash.clone())],
                    );
                    pod["spec"]["nodeName"] = json!(name(node));
                    pod["status"]["conditions"] =
                        json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}]);
                    let _ = inner.create(&pods_t, &ns(&ds), pod, "daemonset-controller", false);
                } else if on_node.iter().all(|p| s(p, "/metadata/labels/controller-revision-hash") != hash)
                    && outdated_ready == 0
                {
                    // RollingUpdate, one node at a time (maxUnavailable 1).
                    outdated_ready += 1;
                    for p in on_node {
                        let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                    }
                }
            }
            for p in pods.iter().filter(|p| !eligible.iter().any(|n| name(n) == s(p, "/spec/nodeName"))) {
                let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
            }
            let pods: Vec<Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&ds).as_str()) && !terminating(p))
                .collect();
            let ready = pods.iter().filter(|p| is_ready(p)).count();
            let updated = pods.iter().filter(|p| s(p, "/metadata/labels/controller-revision-hash") == hash).count();
            let status = json!({"desiredNumberScheduled": eligible.len(), "currentNumberScheduled": pods.len(), "numberReady": ready, "numberAvailable": ready, "numberUnavailable": eligible.len().saturating_sub(ready), "updatedNumberScheduled": updated, "numberMisscheduled": 0, "observedGeneration": i(&ds, "/metadata/generation", 1)});
            set_status(inner, &ds_t, &ds, status, "daemonset-controller");
        }
    }

    fn statefulsets(&self, inner: &mut Inner) {
        let ss_t = t(inner, "apps", "statefulsets");
        let pods_t = t(inner, "", "pods");
        for ss in all(inner, &ss_t).into_iter().filter(|s| !terminating(s)) {
            let replicas = i(&ss, "/spec/replicas", 1);
            let hash = template_hash(&ss["spec"]["template"]);
            let revision = format!("{}-{hash}", name(&ss));
            let parallel = s(&ss, "/spec/podManagementPolicy") == "Parallel";
            let pods: BTreeMap<i64, Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&ss).as_str()))
                .filter_map(|p| name(&p).rsplit_once('-').and_then(|(_, o)| o.parse().ok()).map(|o| (o, p)))
                .collect();
            for ordinal in 0..replicas {
                if pods.contains_key(&ordinal) {
                    continue;
                }
                // OrderedReady: the next ordinal waits for the previous to be Ready.
                if !parallel && ordinal > 0 && !pods.get(&(ordinal - 1)).is_some_and(|p| is_ready(p)) {
                    break;
                }
                let pod_name = format!("{}-{ordinal}", name(&ss));
                let mut pod = pod_from_template(
                    &ss["spec"]["template"],
                    &ns(&ss),
                    None,
                    Some(&pod_name),
                    owner_ref(&ss, "apps/v1", "StatefulSet"),
                    &[
                        ("controller-revision-hash", revision.clone()),
                        ("statefulset.kubernetes.io/pod-name", pod_name.clone()),
                        ("apps.kubernetes.io/pod-index", ordinal.to_string()),
                    ],
                );
                pod["spec"]["hostname"] = json!(pod_name);
                if let Some(svc) = ss.pointer("/spec/serviceName").and_then(Value::as_str) {
                    pod["spec"]["subdomain"] = json!(svc);
                }
                // As the StatefulSet controller does: a claim per claim
                // template and pod (`<claim>-<pod>`, kept when the pod
                // goes), and a volume of that name in the pod, replacing a
                // volume of the template's with the same name.
                let claims =
                    ss.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).cloned().unwrap_or_default();
                if !claims.is_empty() {
                    let pvc_t = t(inner, "", "persistentvolumeclaims");
                    let mut volumes: Vec<Value> =
                        pod.pointer("/spec/volumes").and_then(Value::as_array).cloned().unwrap_or_default();
                    for c in &claims {
                        let claim = s(c, "/metadata/name").to_string();
                        let claim_name = format!("{claim}-{pod_name}");
                        let labels = ss.pointer("/spec/selector/matchLabels").cloned().unwrap_or(json!({}));
                        let pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": claim_name, "namespace": ns(&ss), "labels": labels},
                            "spec": c.get("spec").cloned().unwrap_or(json!({}))});
                        // An existing claim (an earlier pod's) is kept as it is.
                        let _ = inner.create(&pvc_t, &ns(&ss), pvc, "statefulset-controller", false);
                        volumes.retain(|v| v.get("name").and_then(Value::as_str) != Some(claim.as_str()));
                        volumes.push(json!({"name": claim, "persistentVolumeClaim": {"claimName": claim_name}}));
                    }
                    pod["spec"]["volumes"] = Value::Array(volumes);
                }
                let _ = inner.create(&pods_t, &ns(&ss), pod, "statefulset-controller", false);
                if !parallel {
                    break;
                }
            }
            for (ordinal, p) in pods.iter().rev() {
                if *ordinal >= replicas && !terminating(p) {
                    let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                    if !parallel {
                        break;
                    }
                }
            }
            // RollingUpdate: highest ordinal first, one at a time, when all are Ready.
            let live: Vec<&Arc<Value>> = pods.values().filter(|p| !terminating(p)).collect();
            if live.len() as i64 == replicas && live.iter().all(|p| is_ready(p)) {
                if let Some((_, p)) = pods
                    .iter()
                    .rev()
                    .find(|(o, p)| **o < replicas && s(p, "/metadata/labels/controller-revision-hash") != revision)
                {
                    let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                }
            }
            let pods: Vec<Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&ss).as_str()) && !terminating(p))
                .collect();
            let ready = pods.iter().filter(|p| is_ready(p)).count();
            let updated = pods.iter().filter(|p| s(p, "/metadata/labels/controller-revision-hash") == revision).count();
            let status = json!({"observedGeneration": i(&ss, "/metadata/generation", 1), "replicas": pods.len(), "readyReplicas": ready, "currentReplicas": updated, "updatedReplicas": updated, "availableReplicas": ready, "currentRevision": revision, "updateRevision": revision, "collisionCount": 0});
            set_status(inner, &ss_t, &ss, status, "statefulset-controller");
        }
    }

    fn jobs(&self, inner: &mut Inner) {
        let job_t = t(inner, "batch", "jobs");
        let pods_t = t(inner, "", "pods");
        for job in all(inner, &job_t).into_iter().filter(|j| !terminating(j)) {
            let done = job.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|c| {
                c.iter().any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
            });
            let pods: Vec<Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&job).as_str()))
                .collect();
            let indexed = s(&job, "/spec/completionMode") == "Indexed";
            let completions = i(&job, "/spec/completions", if indexed { 1 } else { i(&job, "/spec/parallelism", 1) });
            let parallelism = i(&job, "/spec/parallelism", 1);
            let backoff = i(&job, "/spec/backoffLimit", 6);
            let idx =
                |p: &Value| s(p, "/metadata/annotations/batch.kubernetes.io~1job-completion-index").parse::<i64>().ok();
            let succeeded_idx: std::collections::BTreeSet<i64> =
                pods.iter().filter(|p| s(p, "/status/phase") == "Succeeded").filter_map(|p| idx(p)).collect();
            let succeeded = if indexed {
                succeeded_idx.len() as i64
            } else {
                pods.iter().filter(|p| s(p, "/status/phase") == "Succeeded").count() as i64
            };
            let failed = pods.iter().filter(|p| s(p, "/status/phase") == "Failed").count() as i64;
            let active: Vec<&Value> = pods
                .iter()
                .map(|p| &**p)
                .filter(|p| !matches!(s(p, "/status/phase"), "Succeeded" | "Failed") && !terminating(p))
                .collect();
            let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            let mut conditions = job.pointer("/status/conditions").cloned().unwrap_or(json!([]));
            if !done && !suspended {
                if failed > backoff {
                    conditions = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now()}]);
                    for p in &active {
                        let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                    }
                } else if succeeded >= completions {
                    conditions = json!([
                        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now()},
                        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now()},
                    ]);
                } else {
                    let want_active = parallelism.min(completions - succeeded) - active.len() as i64;
                    let busy: std::collections::BTreeSet<i64> = active.iter().filter_map(|p| idx(p)).collect();
                    let mut next = (0..completions).filter(|n| !succeeded_idx.contains(n) && !busy.contains(n));
                    for _ in 0..want_active.max(0) {
                        let mut pod = pod_from_template(
                            &job["spec"]["template"],
                            &ns(&job),
                            Some(&format!("{}-", name(&job))),
                            None,
                            owner_ref(&job, "batch/v1", "Job"),
                            &[("batch.kubernetes.io/job-name", name(&job)), ("job-name", name(&job))],
                        );
                        if indexed {
                            let Some(n) = next.next() else { break };
                            pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] =
                                json!(n.to_string());
                            pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] =
                                json!(n.to_string());
                            pod["metadata"]["generateName"] = json!(format!("{}-{n}-", name(&job)));
                            for c in
                                pod.pointer_mut("/spec/containers").and_then(Value::as_array_mut).into_iter().flatten()
                            {
                                let env = c.as_object_mut().expect("container").entry("env").or_insert(json!([]));
                                if let Some(e) = env.as_array_mut() {
                                    e.push(json!({"name": "JOB_COMPLETION_INDEX", "value": n.to_string()}));
                                }
                            }
                        }
                        let _ = inner.create(&pods_t, &ns(&job), pod, "job-controller", false);
                    }
                }
            }
            let active_now = all(inner, &pods_t)
                .into_iter()
                .filter(|p| {
                    controller_uid(p).as_deref() == Some(uid(&job).as_str())
                        && !matches!(s(p, "/status/phase"), "Succeeded" | "Failed")
                        && !terminating(p)
                })
                .count();
            let mut status = json!({"active": active_now, "succeeded": succeeded, "failed": failed, "conditions": conditions, "startTime": job.pointer("/status/startTime").cloned().unwrap_or(json!(now()))});
            if indexed {
                status["completedIndexes"] =
                    json!(succeeded_idx.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","));
            }
            if conditions.as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Complete")) {
                status["completionTime"] = job.pointer("/status/completionTime").cloned().unwrap_or(json!(now()));
            }
            let mut cmp_old = job.get("status").cloned().unwrap_or(json!({}));
            let mut cmp_new = status.clone();
            for v in [&mut cmp_old, &mut cmp_new] {
                if let Some(o) = v.as_object_mut() {
                    o.remove("startTime");
                    o.remove("completionTime");
                }
            }
            if cmp_old != cmp_new {
                set_status(inner, &job_t, &job, status, "job-controller");
            }
        }
    }
}

impl Controllers {
    /// One CronJob pass at `now_ts` (a parameter, so tests choose the time).
    pub fn cronjobs(&self, inner: &mut Inner, now_ts: chrono::DateTime<chrono::Utc>) {
        let cj_t = t(inner, "batch", "cronjobs");
        let job_t = t(inner, "batch", "jobs");
        let parse_time = |v: &str| chrono::DateTime::parse_from_rfc3339(v).ok().map(|d| d.with_timezone(&chrono::Utc));
        for cj in all(inner, &cj_t).into_iter().filter(|c| !terminating(c)) {
            let jobs: Vec<Arc<Value>> = all(inner, &job_t)
                .into_iter()
                .filter(|j| controller_uid(j).as_deref() == Some(uid(&cj).as_str()))
                .collect();
            let finished = |j: &Value| {
                j.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|c| {
                        c.iter().find(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
                    })
                    .map(|c| c["type"] == "Complete")
            };
            let active: Vec<&Value> =
                jobs.iter().map(|j| &**j).filter(|j| finished(j).is_none() && !terminating(j)).collect();
            let mut last = cj.pointer("/status/lastScheduleTime").and_then(Value::as_str).and_then(parse_time);
            let suspended = cj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            if let (false, Ok(schedule)) = (suspended, crate::kube::cron::Schedule::parse(s(&cj, "/spec/schedule"))) {
                let after = last.or_else(|| parse_time(s(&cj, "/metadata/creationTimestamp"))).unwrap_or(now_ts);
                if let Some(slot) = schedule.last_between(after, now_ts) {
                    let policy = s(&cj, "/spec/concurrencyPolicy");
                    let skip = policy == "Forbid" && !active.is_empty();
                    if policy == "Replace" {
                        for j in &active {
                            let _ = inner.delete(&job_t, &ns(j), &name(j), Propagation::Background, None, false);
                        }
                    }
                    if !skip {
                        let template = cj.pointer("/spec/jobTemplate").cloned().unwrap_or(json!({}));
                        let mut meta = template.get("metadata").cloned().unwrap_or(json!({}));
                        if !meta.is_object() {
                            meta = json!({});
                        }
                        meta["name"] = json!(format!("{}-{}", name(&cj), slot.timestamp() / 60));
                        meta["ownerReferences"] = json!([owner_ref(&cj, "batch/v1", "CronJob")]);
                        meta["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] =
                            json!(slot.to_rfc3339());
                        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template.get("spec").cloned().unwrap_or(json!({}))});
                        let _ = inner.create(&job_t, &ns(&cj), job, "cronjob-controller", false);
                    }
                    last = Some(slot);
                }
            }
            // Keep the history the spec asks for.
            let keep_ok = i(&cj, "/spec/successfulJobsHistoryLimit", 3) as usize;
            let keep_failed = i(&cj, "/spec/failedJobsHistoryLimit", 1) as usize;
            for (want, limit) in [(true, keep_ok), (false, keep_failed)] {
                let mut done: Vec<&Value> = jobs.iter().map(|j| &**j).filter(|j| finished(j) == Some(want)).collect();
                done.sort_by_key(|j| s(j, "/metadata/creationTimestamp").to_string());
                let excess = done.len().saturating_sub(limit);
                for j in done.into_iter().take(excess) {
                    let _ = inner.delete(&job_t, &ns(j), &name(j), Propagation::Background, None, false);
                }
            }
            let jobs: Vec<Arc<Value>> = all(inner, &job_t)
                .into_iter()
                .filter(|j| controller_uid(j).as_deref() == Some(uid(&cj).as_str()))
                .collect();
            let active_refs: Vec<Value> = jobs.iter().filter(|j| finished(j).is_none()).map(|j| json!({"apiVersion": "batch/v1", "kind": "Job", "name": name(j), "namespace": ns(j), "uid": uid(j)})).collect();
            let mut status = json!({"active": active_refs});
            if let Some(l) = last {
                status["lastScheduleTime"] = json!(l.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            }
            if let Some(t) = jobs
                .iter()
                .filter(|j| finished(j) == Some(true))
                .filter_map(|j| j.pointer("/status/completionTime").cloned())
                .max_by_key(|t| t.as_str().unwrap_or_default().to_string())
            {
                status["lastSuccessfulTime"] = t;
            }
            set_status(inner, &cj_t, &cj, status, "cronjob-controller");
        }
    }
}

fn name_of(c: &Value) -> String {
    s(c, "/name").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        let q = |v: Value, milli| quantity(Some(&v), milli);
        assert_eq!(q(json!("500m"), true), 500);
        assert_eq!(q(json!("2"), true), 2000);
        assert_eq!(q(json!(8), true), 8000, "a number is a quantity too");
        assert_eq!(q(json!("512Mi"), false), 512 * 1024 * 1024);
        assert_eq!(q(json!("1G"), false), 1_000_000_000);
        assert_eq!(q(json!("lots"), true), 0, "what does not parse asks for nothing");
    }

    #[test]
    fn cronjobs_create_a_job_per_due_slot_and_honour_forbid() {
        let mut inner = Inner::new();
        let cj_t = t(&inner, "batch", "cronjobs");
        let job_t = t(&inner, "batch", "jobs");
        let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"}, "spec": {
            "schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "t:1"}]}}}}}});
        inner.create(&cj_t, "default", cj, "test", false).unwrap();
        let c = Controllers::default();
        let jobs = |inner: &Inner| all(inner, &job_t).iter().map(|j| name(j)).collect::<Vec<_>>();
        let now = chrono::Utc::now();
        c.cronjobs(&mut inner, now);
        assert!(jobs(&inner).is_empty(), "nothing is due before the first slot after creation");
        c.cronjobs(&mut inner, now + chrono::Duration::minutes(6));
        assert_eq!(jobs(&inner).len(), 1);
        let status = inner.get(&cj_t, "default", "tick").unwrap()["status"].clone();
        assert_eq!(status["active"].as_array().unwrap().len(), 1);
        // The next slot comes while the first Job still runs: Forbid skips it.
        c.cronjobs(&mut inner, now + chrono::Duration::minutes(11));
        assert_eq!(jobs(&inner).len(), 1);
    }

    #[test]
    fn a_pass_takes_a_bounded_part_of_what_changed_and_the_next_the_rest() {
        let mut inner = Inner::new();
        let svc_t = t(&inner, "", "services");
        for i in 0..250 {
            let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i:03}")},
                "spec": {"selector": {"app": format!("s{i:03}")}, "ports": [{"port": 80}]}});
            inner.create(&svc_t, "default", svc, "test", false).unwrap();
        }
        let mut pending = Changed::everything();
        pending.expand(&inner);
        assert!(!pending.all, "everything is named, to be taken in parts");
        let mut seen = BTreeSet::new();
        let mut sizes = Vec::new();
        let mut nodes = Vec::new();
        while !pending.is_empty() {
            let part = pending.take(100);
            sizes.push(part.services.len());
            nodes.push(part.nodes);
            seen.extend(part.services);
        }
        assert_eq!(sizes, vec![100, 100, 50]);
        assert_eq!(nodes, vec![true, false, false], "a cluster-wide event goes with the first part only");
        assert_eq!(seen.len(), 250, "every Service is looked at once");
    }

    #[test]
    fn endpoint_slices_follow_the_whole_selector_among_many_services() {
        let mut inner = Inner::new();
        let (svc_t, pods_t) = (t(&inner, "", "services"), t(&inner, "", "pods"));
        // Services that share their first selector pair and differ in the second.
        for i in 0..50 {
            let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{i}")},
                "spec": {"selector": {"app": "shop", "tier": format!("t{i}")}, "ports": [{"port": 80}]}});
            inner.create(&svc_t, "default", svc, "test", false).unwrap();
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"app": "shop", "tier": "t7"}},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "i:1"}]}, "status": {"phase": "Running", "podIP": "10.0.0.9"}});
        inner.create(&pods_t, "default", pod, "test", false).unwrap();
        let c = Controllers::default();
        let mut changed = Changed::default();
        changed.pods.insert(("default".into(), "p".into()));
        c.endpoint_slices(&mut inner, &changed);
        let listed = |inner: &Inner| -> Vec<String> {
            inner
                .iter(&t(inner, "discovery.k8s.io", "endpointslices"), Some("default"))
                .filter(|sl| sl["endpoints"].as_array().is_some_and(|e| !e.is_empty()))
                .map(name)
                .collect()
        };
        assert_eq!(listed(&inner), vec!["s7-sim"], "only the Service whose whole selector matches lists the pod");
        // The pod moves to another tier: the slice that listed it lets it go.
        let mut moved = inner.get(&pods_t, "default", "p").unwrap();
        moved["metadata"]["labels"]["tier"] = json!("t9");
        inner.update(&pods_t, "default", "p", moved, "test", Sub::Main, false).unwrap();
        c.endpoint_slices(&mut inner, &changed);
        assert_eq!(listed(&inner), vec!["s9-sim"]);
    }

    #[test]
    fn template_hash_ignores_its_own_label() {
        let a = json!({"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}});
        let mut b = a.clone();
        b["metadata"]["labels"]["pod-template-hash"] = json!("zzz");
        assert_eq!(template_hash(&a), template_hash(&b));
        let mut c = a.clone();
        c["spec"]["containers"][0]["image"] = json!("i:2");
        assert_ne!(template_hash(&a), template_hash(&c));
    }
}
