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
        self.index(&key, &obj, true);
        let old = self.map.insert(key.clone(), obj);
        if let Some(o) = &old {
            self.unindex_replaced(&key, o);
        }
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

    /// After a replacement: the old version's entries the new one does not have.
    fn unindex_replaced(&mut self, key: &ObjKey, old: &Value) {
        let new = self.map.get(key).cloned().expect("just inserted");
        if let Some(was) = controller_uid(old).filter(|was| controller_uid(&new) != Some(*was)) {
            self.own(was, key, false);
        }
        if is_pod(key) {
            let now: BTreeSet<(&String, &str)> = labels(&new).collect();
            let gone: Vec<(String, String)> =
                labels(old).filter(|p| !now.contains(p)).map(|(k, v)| (k.clone(), v.to_string())).collect();
            for (k, v) in gone {
                let pair = (key.2.clone(), k, v);
                if let Some(set) = self.pods_by_label.get_mut(&pair) {
                    set.remove(&key.3);
                    if set.is_empty() {
                        self.pods_by_label.remove(&pair);
                    }
                }
            }
        } else if is_pdb(key) && first_match_label(old) != first_match_label(&new) {
            self.index(key, old, false);
            self.index(key, &new, true);
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
        assert_eq!(o.pods_labelled("default", "tier", "web").count(), 0);
        o.retain(|k, _| k.3 != "all");
        assert_eq!(o.pdbs_for("default", &pod("c")).len(), 0, "rebuilt after a retain");
        assert_eq!(o.pdbs_for("default", &pod("b")).len(), 1);
    }
}
