//! The scheduler, as kube-scheduler places a pod: the nodes it may run on
//! (ready, schedulable, its node selector and affinity, taints it
//! tolerates, room for its requests), the least loaded of them, and an
//! Unschedulable condition naming why not when none fits.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{all, name, ns, set_status, t, terminating, Changed, Controllers};
use crate::kube::scheduling::{affinity_ok, tolerates};
use crate::sim::nodes::node_ready;
use crate::sim::objects::{pod_extended, pod_requests, quantity, EXTENDED};
use crate::sim::store::{now, Inner, Sub};

impl Controllers {
    pub(super) fn schedule(&self, inner: &mut Inner, changed: &Changed) {
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
        let usage: Vec<(String, crate::sim::objects::Usage)> =
            nodes.iter().map(|n| (name(n), inner.node_usage(&name(n)))).collect();
        let mut used: BTreeMap<String, (i64, i64, [i64; 2])> =
            usage.iter().map(|(n, u)| (n.clone(), (u.cpu, u.memory, u.extended))).collect();
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
                    for (u, x) in e.2.iter_mut().zip(pod_extended(pod)) {
                        *u += x;
                    }
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
}

/// Why `pod` cannot run on `node`, if it cannot.
fn unfit(pod: &Value, node: &Value, used: (i64, i64, [i64; 2])) -> Option<&'static str> {
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
    // Extended resources fit only where the node's device plugin
    // advertises them (NodeResourcesFit: a node without one has none).
    for ((k, want), have) in EXTENDED.iter().zip(pod_extended(pod)).zip(used.2) {
        if want > 0 {
            let alloc =
                node.pointer("/status/allocatable").and_then(|a| a.get(*k)).map_or(0, |v| quantity(Some(v), false));
            if have.saturating_add(want) > alloc {
                return Some(match *k {
                    "nvidia.com/gpu" => "Insufficient nvidia.com/gpu",
                    _ => "Insufficient aws.amazon.com/neuron",
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(gpus: Option<u32>, tainted: bool) -> Value {
        let mut allocatable = json!({"cpu": "96", "memory": "384Gi", "pods": "110"});
        if let Some(g) = gpus {
            allocatable["nvidia.com/gpu"] = json!(g.to_string());
        }
        let taints = if tainted {
            json!([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}])
        } else {
            json!([])
        };
        json!({"metadata": {"name": "n", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": allocatable}})
    }

    fn pod(gpus: u32, tolerates: bool) -> Value {
        let mut p = json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}});
        if tolerates {
            p["spec"]["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]);
        }
        p
    }

    /// NodeAffinity as kube-scheduler applies it: terms ORed (so one that
    /// names no product reaches every product's nodes), a term without
    /// requirements matching none, `matchFields` on the node's name.
    #[test]
    fn node_affinity_terms_are_ored_and_an_empty_term_matches_nothing() {
        let a100 = node(Some(8), false);
        let mut h100 = node(Some(8), false);
        h100["metadata"] = json!({"name": "h", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "kubernetes.io/hostname": "h"}});
        let with_terms = |terms: Value| json!({"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}});
        let spans = with_terms(json!([
            {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A100-SXM4-40GB"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "Exists"}]}
        ]));
        assert!(affinity_ok(&spans, &a100) && affinity_ok(&spans, &h100), "the second term reaches the H100 node");
        let empty = with_terms(json!([{}]));
        assert!(!affinity_ok(&empty, &a100));
        let by_name =
            with_terms(json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h"]}]}]));
        assert!(affinity_ok(&by_name, &h100) && !affinity_ok(&by_name, &a100));
    }

    /// NodeResourcesFit and TaintToleration as kube-scheduler applies them
    /// to extended resources: a GPU pod fits only where the device plugin
    /// advertises enough devices; a tainted GPU node takes only pods that
    /// tolerate its taint.
    #[test]
    fn gpus_fit_only_where_advertised_and_tolerated() {
        let free = (0, 0, [0, 0]);
        assert_eq!(unfit(&pod(8, true), &node(Some(8), true), free), None);
        assert_eq!(unfit(&pod(8, true), &node(Some(8), true), (0, 0, [1, 0])), Some("Insufficient nvidia.com/gpu"));
        assert_eq!(unfit(&pod(1, true), &node(None, false), free), Some("Insufficient nvidia.com/gpu"));
        assert_eq!(unfit(&pod(1, false), &node(Some(8), true), free), Some("node(s) had untolerated taint"));
        // A pod asking for none still fits a GPU node it tolerates.
        assert_eq!(
            unfit(
                &json!({"spec": {"containers": [{"name": "c"}], "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}}),
                &node(Some(8), true),
                free
            ),
            None
        );
        // A one-shot init container's devices count if larger (PodRequests).
        let mut p = pod(2, true);
        p["spec"]["initContainers"] = json!([{"name": "i", "resources": {"limits": {"nvidia.com/gpu": 8}}}]);
        assert_eq!(crate::sim::objects::pod_extended(&p), [8, 0]);
    }
}
