//! The StatefulSet controller: pods by ordinal (one at a time under
//! OrderedReady, all at once under Parallel), a claim per claim template
//! and pod, and rolling updates from the highest ordinal down.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{
    all, controller_uid, i, name, ns, owner_ref, pod_from_template, s, set_status, t, template_hash, terminating, uid,
    Controllers,
};
use crate::sim::store::{is_ready, Inner, Propagation};

impl Controllers {
    pub(super) fn statefulsets(&self, inner: &mut Inner) {
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
}
