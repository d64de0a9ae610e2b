//! The ReplicaSet controller: as many pods from the template as the spec
//! asks (the unscheduled, then the unready, then the newest removed first),
//! and the counts in status.

use serde_json::{json, Value};

use super::changed::dirty;
use super::{
    controller_uid, i, name, ns, owner_ref, pod_from_template, s, set_status, t, terminating, uid, Changed, Controllers,
};
use crate::sim::store::{is_ready, Inner, Propagation};

impl Controllers {
    pub(super) fn replicasets(&self, inner: &mut Inner, changed: &Changed) {
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
}
