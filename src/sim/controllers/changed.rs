//! What changed since the controllers' last pass: the events the sim's
//! loop hands them, noted as the objects they name, and taken a bounded
//! part at a time, as kube-controller-manager's workers take keys from
//! their queues.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value;

use super::{all, name, ns, s, t};
use crate::sim::registry::ResourceType;
use crate::sim::store::{Event, EventType, Inner};

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
    pub(super) services: BTreeSet<(String, String)>,
    pub(super) pods: BTreeSet<(String, String)>,
    pub(super) deployments: BTreeSet<(String, String)>,
    pub(super) replicasets: BTreeSet<(String, String)>,
    /// A Node was added, changed or removed.
    pub(super) nodes: bool,
    /// A Pod was removed (room made on its node).
    pub(super) pods_gone: bool,
}

impl Changed {
    pub fn everything() -> Self {
        Changed { all: true, ..Default::default() }
    }

    pub fn note(&mut self, ev: &Event) {
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
                self.pods_gone |= matches!(ev.kind, EventType::Deleted)
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
pub(super) fn dirty(
    inner: &Inner,
    rt: &ResourceType,
    changed: &Changed,
    named: &BTreeSet<(String, String)>,
) -> Vec<Arc<Value>> {
    if changed.all {
        return all(inner, rt);
    }
    named.iter().filter_map(|(n, name)| inner.peek_shared(&rt.group, &rt.plural, n, name).cloned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
