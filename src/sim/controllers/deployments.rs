//! The Deployment controller: a ReplicaSet per template hash, rolled from
//! the old to the new within maxSurge and maxUnavailable (or all at once
//! under Recreate), and the status `kubectl rollout status` reads.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{json, Value};

use super::changed::dirty;
use super::{
    controller_uid, i, name, ns, owner_ref, s, set_status, t, template_hash, terminating, uid, Changed, Controllers,
};
use crate::sim::store::{Inner, Sub};

impl Controllers {
    pub(super) fn deployments(&self, inner: &mut Inner, changed: &Changed) {
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
