//! The store's objects and the indexes kept beside them. [`super::store`]
//! holds every object here, by (group, plural, namespace, name); this
//! module keeps, on each insert and removal, which pods carry a label and
//! which PodDisruptionBudgets select by one, and what each controller
//! owns, so that a pod's write finds the budgets that count it, a budget
//! or a Service its pods, a ReplicaSet its pods, without a scan of the
//! namespace (thousands of each when a fleet of services lands at once).
//! Reads go straight to the map; every change goes through here.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Deref;
use std::sync::Arc;

use serde_json::Value;

/// group, plural, namespace, name
pub type ObjKey = (String, String, String, String);

/// (namespace, label key, label value)
type Pair = (String, String, String);

#[derive(Default)]
pub struct Objects {
    map: BTreeMap<ObjKey, Arc<Value>>,
    /// Pods by each of their labels: the names.
    pods_by_label: HashMap<Pair, BTreeSet<String>>,
    /// PodDisruptionBudgets by the first pair of their `matchLabels`.
    pdbs_by_label: HashMap<Pair, BTreeSet<String>>,
    /// PodDisruptionBudgets without `matchLabels` (expressions only, or
    /// every pod): (namespace, name).
    pdbs_unlabelled: BTreeSet<(String, String)>,
    /// Objects by the uid of their controller (the owner reference with
    /// `controller: true`): a ReplicaSet's pods, a Deployment's ReplicaSets.
    owned: HashMap<String, BTreeSet<ObjKey>>,
    /// Pods not bound to a node: (namespace, name).
    unbound: BTreeSet<(String, String)>,
    /// What the pods bound to each node and not finished ask for.
    usage: HashMap<String, Usage>,
}

/// The requests of the pods on one node, as the scheduler counts them.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Usage {
    /// millicores
    pub cpu: i64,
    /// bytes
    pub memory: i64,
    /// millicores, a pod without requests counted as 100m (kube-scheduler's
    /// scoring default)
    pub score_cpu: i64,
    pub pods: usize,
    /// Devices of each of [`EXTENDED`], requested by its containers.
    pub extended: [i64; 2],
}

/// The extended resources the sim's scheduler counts against a node's
/// allocatable (its device plugins': GPUs and Neuron devices).
pub const EXTENDED: [&str; 2] = [crate::workloads::demand::GPU, crate::workloads::demand::NEURON];

/// A pod's requests of each of [`EXTENDED`]: its containers' requests (a
/// request left out is its limit, as the API server defaults it), or a
/// one-shot init container's if larger (`resourcehelper.PodRequests`).
pub fn pod_extended(pod: &Value) -> [i64; 2] {
    let mut out = [0i64; 2];
    let read = |c: &Value, k: &str| {
        let r = c.pointer("/resources/requests").and_then(|r| r.get(k));
        let l = c.pointer("/resources/limits").and_then(|r| r.get(k));
        quantity(r.or(l), false)
    };
    for (i, k) in EXTENDED.iter().enumerate() {
        let mut sum = 0i64;
        let mut init = 0i64;
        for c in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
            sum = sum.saturating_add(read(c, k));
        }
        for c in pod.pointer("/spec/initContainers").and_then(Value::as_array).into_iter().flatten() {
            if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
                sum = sum.saturating_add(read(c, k));
            } else {
                init = init.max(read(c, k));
            }
        }
        out[i] = sum.max(init);
    }
    out
}

/// A quantity as the scheduler counts it (millicores or bytes, rounded
/// up): the API's own parser, so `cpu: 8` written as a number counts as 8
/// cores; absent or invalid counts as 0.
pub fn quantity(v: Option<&Value>, milli: bool) -> i64 {
    use crate::kube::quantity::{bytes, cpu_millis};
    let n = v.map(|v| if milli { cpu_millis(v) } else { bytes(v) }).and_then(Result::ok).unwrap_or(0);
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A pod's containers' requests: (millicores, bytes).
pub fn pod_requests(pod: &Value) -> (i64, i64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in pod.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten() {
        let requests = c.pointer("/resources/requests");
        cpu += quantity(requests.and_then(|r| r.get("cpu")), true);
        mem += quantity(requests.and_then(|r| r.get("memory")), false);
    }
    (cpu, mem)
}

impl Deref for Objects {
    type Target = BTreeMap<ObjKey, Arc<Value>>;
    fn deref(&self) -> &Self::Target {
        &self.map
    }
}

fn is_pod(key: &ObjKey) -> bool {
    key.0.is_empty() && key.1 == "pods"
}

fn is_pdb(key: &ObjKey) -> bool {
    key.0 == "policy" && key.1 == "poddisruptionbudgets"
}

fn labels(obj: &Value) -> impl Iterator<Item = (&String, &str)> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

/// The uid of an object's controller.
pub fn controller_uid(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
        .and_then(|r| r.get("uid")?.as_str())
}

/// The first pair of a budget's `matchLabels`, if it has one: every pod it
/// selects carries it.
fn first_match_label(pdb: &Value) -> Option<(&String, &str)> {
    pdb.pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .and_then(|m| m.iter().next())
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

impl Objects {
    pub fn insert(&mut self, key: ObjKey, obj: Arc<Value>) -> Option<Arc<Value>> {
        // The old version's entries out, the new one's in.
        let old = self.map.insert(key.clone(), obj.clone());
        if let Some(o) = &old {
            self.index(&key, o, false);
        }
        self.index(&key, &obj, true);
        old
    }

    pub fn remove(&mut self, key: &ObjKey) -> Option<Arc<Value>> {
        let old = self.map.remove(key);
        if let Some(o) = &old {
            self.index(key, o, false);
        }
        old
    }

    pub fn retain(&mut self, f: impl FnMut(&ObjKey, &mut Arc<Value>) -> bool) {
        self.map.retain(f);
        // Rare (a type or a namespace gone): the indexes are rebuilt.
        self.pods_by_label.clear();
        self.pdbs_by_label.clear();
        self.pdbs_unlabelled.clear();
        self.owned.clear();
        self.unbound.clear();
        self.usage.clear();
        let all: Vec<(ObjKey, Arc<Value>)> = self.map.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in all {
            self.index(&k, &v, true);
        }
    }

    /// Adds (or removes) an object's entries.
    fn index(&mut self, key: &ObjKey, obj: &Value, add: bool) {
        if let Some(owner) = controller_uid(obj) {
            self.own(owner, key, add);
        }
        let (ns, name) = (&key.2, &key.3);
        let entry = |index: &mut HashMap<Pair, BTreeSet<String>>, k: &String, v: &str| {
            let pair = (ns.clone(), k.clone(), v.to_string());
            if add {
                index.entry(pair).or_default().insert(name.clone());
            } else if let Some(set) = index.get_mut(&pair) {
                set.remove(name);
                if set.is_empty() {
                    index.remove(&pair);
                }
            }
        };
        if is_pod(key) {
            for (k, v) in labels(obj) {
                entry(&mut self.pods_by_label, k, v);
            }
            self.schedule_index(key, obj, add);
        } else if is_pdb(key) {
            match first_match_label(obj) {
                Some((k, v)) => entry(&mut self.pdbs_by_label, k, v),
                None if add => {
                    self.pdbs_unlabelled.insert((ns.clone(), name.clone()));
                }
                None => {
                    self.pdbs_unlabelled.remove(&(ns.clone(), name.clone()));
                }
            }
        }
    }

    /// The scheduler's view: unbound pods, and each node's usage.
    fn schedule_index(&mut self, key: &ObjKey, pod: &Value, add: bool) {
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
        let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
        if node.is_empty() {
            let k = (key.2.clone(), key.3.clone());
            if add {
                self.unbound.insert(k);
            } else {
                self.unbound.remove(&k);
            }
        } else if !matches!(phase, "Succeeded" | "Failed") {
            let (cpu, memory) = pod_requests(pod);
            let sign = if add { 1 } else { -1 };
            let u = self.usage.entry(node.to_string()).or_default();
            u.cpu += sign * cpu;
            u.memory += sign * memory;
            u.score_cpu += sign * cpu.max(100);
            for (u, e) in u.extended.iter_mut().zip(pod_extended(pod)) {
                *u += sign * e;
            }
            u.pods = if add { u.pods + 1 } else { u.pods.saturating_sub(1) };
            if u.pods == 0 {
                self.usage.remove(node);
            }
        }
    }

    /// Pods not bound to a node: (namespace, name).
    pub fn unbound(&self) -> &BTreeSet<(String, String)> {
        &self.unbound
    }

    /// What the pods bound to `node` and not finished ask for.
    pub fn usage(&self, node: &str) -> Usage {
        self.usage.get(node).copied().unwrap_or_default()
    }

    fn own(&mut self, owner: &str, key: &ObjKey, add: bool) {
        if add {
            self.owned.entry(owner.to_string()).or_default().insert(key.clone());
        } else if let Some(set) = self.owned.get_mut(owner) {
            set.remove(key);
            if set.is_empty() {
                self.owned.remove(owner);
            }
        }
    }

    /// The pods of `ns` that carry label `k` = `v` (names).
    pub fn pods_labelled(&self, ns: &str, k: &str, v: &str) -> impl Iterator<Item = &String> {
        self.pods_by_label.get(&(ns.to_string(), k.to_string(), v.to_string())).into_iter().flatten()
    }

    /// The objects of one type whose controller is `owner` (a uid).
    pub fn owned_by(&self, owner: &str, group: &str, plural: &str) -> Vec<Arc<Value>> {
        self.owned
            .get(owner)
            .into_iter()
            .flatten()
            .filter(|k| k.0 == group && k.1 == plural)
            .filter_map(|k| self.map.get(k).cloned())
            .collect()
    }

    /// The budgets of `ns` that may select a pod with these labels: those
    /// keyed by one of its labels, and those without `matchLabels` (names).
    pub fn pdbs_for(&self, ns: &str, pod: &Value) -> BTreeSet<String> {
        let mut names: BTreeSet<String> = labels(pod)
            .filter_map(|(k, v)| self.pdbs_by_label.get(&(ns.to_string(), k.clone(), v.to_string())))
            .flatten()
            .cloned()
            .collect();
        names.extend(self.pdbs_unlabelled.iter().filter(|(n, _)| n == ns).map(|(_, name)| name.clone()));
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(plural: &str, group: &str, name: &str) -> ObjKey {
        (group.into(), plural.into(), "default".into(), name.into())
    }

    #[test]
    fn the_indexes_follow_inserts_relabels_and_removals() {
        let mut o = Objects::default();
        let pod = |app: &str| Arc::new(json!({"metadata": {"name": "p", "labels": {"app": app, "tier": "web"}}}));
        o.insert(key("pods", "", "p"), pod("a"));
        assert_eq!(o.pods_labelled("default", "app", "a").collect::<Vec<_>>(), vec!["p"]);
        o.insert(key("pods", "", "p"), pod("b"));
        assert_eq!(o.pods_labelled("default", "app", "a").count(), 0, "the old label is gone");
        assert_eq!(o.pods_labelled("default", "app", "b").count(), 1);
        assert_eq!(o.pods_labelled("default", "tier", "web").count(), 1, "the kept label stays");
        let pdb = Arc::new(json!({"spec": {"selector": {"matchLabels": {"app": "b"}}}}));
        o.insert(key("poddisruptionbudgets", "policy", "budget"), pdb);
        let any = Arc::new(json!({"spec": {"selector": {}}}));
        o.insert(key("poddisruptionbudgets", "policy", "all"), any);
        let names = o.pdbs_for("default", &pod("b"));
        assert_eq!(names.into_iter().collect::<Vec<_>>(), vec!["all", "budget"]);
        assert_eq!(o.pdbs_for("default", &pod("c")).into_iter().collect::<Vec<_>>(), vec!["all"]);
        let owned = |uid: &str| Arc::new(json!({"metadata": {"ownerReferences": [{"uid": uid, "controller": true}]}}));
        o.insert(key("pods", "", "p"), owned("rs-1"));
        assert_eq!(o.owned_by("rs-1", "", "pods").len(), 1);
        assert_eq!(o.owned_by("rs-1", "apps", "replicasets").len(), 0, "one type at a time");
        o.insert(key("pods", "", "p"), owned("rs-2"));
        assert_eq!(o.owned_by("rs-1", "", "pods").len(), 0, "adopted by another");
        assert_eq!(o.owned_by("rs-2", "", "pods").len(), 1);
        o.remove(&key("pods", "", "p"));
        assert_eq!(o.owned_by("rs-2", "", "pods").len(), 0);
        // The scheduler's view follows binding, finishing and removal.
        let bound = |node: &str, phase: &str| {
            Arc::new(
                json!({"spec": {"nodeName": node, "containers": [{"resources": {"requests": {"cpu": "250m", "memory": "1Gi"}}}, {}]},
                "status": {"phase": phase}}),
            )
        };
        o.insert(key("pods", "", "q"), bound("", "Pending"));
        assert_eq!(o.unbound().len(), 1);
        o.insert(key("pods", "", "q"), bound("n1", "Pending"));
        assert!(o.unbound().is_empty());
        assert_eq!(o.usage("n1"), Usage { cpu: 250, memory: 1 << 30, score_cpu: 250, pods: 1, extended: [0; 2] });
        o.insert(key("pods", "", "q"), bound("n1", "Running"));
        assert_eq!(o.usage("n1").pods, 1, "a status write counts the pod once");
        o.insert(key("pods", "", "q"), bound("n1", "Succeeded"));
        assert_eq!(o.usage("n1"), Usage::default(), "a finished pod asks for nothing");
        o.insert(key("pods", "", "q"), bound("n1", "Running"));
        o.remove(&key("pods", "", "q"));
        assert_eq!(o.usage("n1"), Usage::default());
        assert_eq!(o.pods_labelled("default", "tier", "web").count(), 0);
        o.retain(|k, _| k.3 != "all");
        assert_eq!(o.pdbs_for("default", &pod("c")).len(), 0, "rebuilt after a retain");
        assert_eq!(o.pdbs_for("default", &pod("b")).len(), 1);
    }
}
