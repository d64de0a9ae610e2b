//! kube-controller-manager's EndpointSlice controller: one slice per
//! Service with a selector, listing the pods it selects with their
//! addresses and readiness.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{json, Value};

use super::{name, ns, owner_ref, s, t, terminating, uid, Changed, Controllers};
use crate::sim::store::{is_ready, Inner, Sub};

impl Controllers {
    /// One EndpointSlice per Service with a selector: its pods with an
    /// IP, each with `ready` from the pod's Ready condition. Like the real
    /// controller, it looks only at what changed: the Services named, and
    /// for a changed Pod the Services that select it now or listed it
    /// before; everything is looked at only after lost events.
    pub(super) fn endpoint_slices(&self, inner: &mut Inner, changed: &Changed) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
