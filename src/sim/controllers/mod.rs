//! Simulated controllers, each switchable: scheduler, kubelet, ReplicaSet,
//! Deployment (rolling updates by template hash), DaemonSet, StatefulSet and
//! Job. They run inside the emulator on every change (and on a tick for
//! time-based steps), write through the same store as any client, and fill
//! in the status fields the real controllers write, so `kubectl rollout
//! status`, `kubectl wait` and pinfleet's own readiness checks behave as
//! they would against a real cluster.
//!
//! This file holds the switches, one pass over them all, and what the
//! controllers share (a type's objects, a pod from a template, a status
//! write); each controller has its own file, as in kube-controller-manager
//! and the kubelet: `scheduler`, `kubelet`, `endpoints`, `replicasets`,
//! `deployments`, `daemonsets`, `statefulsets`, `jobs`, `cronjobs`; and
//! `changed` says what a pass looks at.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::registry::ResourceType;
use super::store::{Inner, Sub};

mod changed;
mod cronjobs;
mod daemonsets;
mod deployments;
mod endpoints;
mod jobs;
mod kubelet;
mod replicasets;
mod scheduler;
mod statefulsets;

pub use changed::{watched, Changed};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::objects::quantity;

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
