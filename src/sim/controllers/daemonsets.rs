//! The DaemonSet controller: a pod on every node the template may run on
//! (the scheduler's affinity and taint rules), rolled one node at a time.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{
    all, controller_uid, i, name, ns, owner_ref, pod_from_template, s, set_status, t, template_hash, terminating, uid,
    Controllers,
};
use crate::kube::scheduling::{affinity_ok, tolerates};
use crate::sim::store::{is_ready, now, Inner, Propagation};

impl Controllers {
    pub(super) fn daemonsets(&self, inner: &mut Inner) {
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
}
