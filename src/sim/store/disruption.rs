//! PodDisruptionBudgets and eviction: each budget's status kept current
//! as the pods it selects change (as the disruption controller does), and
//! pods/eviction refused with 429 where a budget would be violated.

use std::sync::Arc;

use serde_json::{json, Value};

use super::events::EventType;
use super::{is_ready, meta, meta_mut, meta_str, now, ApiError, Inner, Propagation, R};
use crate::sim::objects::ObjKey;
use crate::sim::registry::ResourceType;
use crate::sim::selector::LabelSelector;

impl Inner {
    pub(super) fn after_change(&mut self, t: &ResourceType, ns: &str, obj: &Value) {
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

    /// Recomputes the status of the namespace's PodDisruptionBudgets that
    /// select `pod` (all of them when `pod` is None).
    pub(super) fn refresh_pdbs(&mut self, ns: &str, pod: Option<&Value>) {
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
}
