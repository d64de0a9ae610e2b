//! Deletion: finalizers that defer it (deletionTimestamp), a pod's grace
//! period, and ownerReference garbage collection under the three
//! propagation policies (background, foreground, orphan), as the API
//! server and its garbage collector carry them out.

use std::sync::Arc;

use serde_json::{json, Value};

use super::events::EventType;
use super::{conflict, finalizers, ignores_sigterm, meta, meta_mut, meta_str, now, ApiError, Inner, Propagation, R};
use crate::sim::objects::ObjKey;
use crate::sim::registry::ResourceType;

impl Inner {
    /// DELETE of a pod: as [`Self::delete`], except that a running pod
    /// whose containers ignore SIGTERM ([`ignores_sigterm`]) is kept,
    /// terminating, until its grace period is over (the request's
    /// `gracePeriodSeconds`, else the pod's own, else 30 s), as a kubelet
    /// keeps it; a later delete with a shorter grace brings the end nearer,
    /// and 0 removes it at once.
    #[allow(clippy::too_many_arguments)]
    pub fn delete_pod(
        &mut self,
        ns: &str,
        name: &str,
        grace: Option<i64>,
        propagation: Propagation,
        precondition_rv: Option<&str>,
        dry_run: bool,
    ) -> R<Value> {
        let pods = self.registry.get("", "v1", "pods").cloned().expect("pods");
        if let (false, Ok(pod)) = (dry_run, self.get(&pods, ns, name)) {
            let bound = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or("Pending");
            let own = pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
            let grace = grace.unwrap_or(own).max(0);
            if bound && ignores_sigterm(&pod) && !matches!(phase, "Succeeded" | "Failed") && grace > 0 {
                let end = chrono::Utc::now() + chrono::Duration::seconds(grace);
                let current = pod
                    .pointer("/metadata/deletionTimestamp")
                    .and_then(Value::as_str)
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|d| d.with_timezone(&chrono::Utc));
                if current.is_some_and(|c| c <= end) {
                    return Ok(pod);
                }
                if let Some(rv) = precondition_rv {
                    if Some(rv) != meta_str(&pod, "resourceVersion") {
                        return Err(conflict(&pods, name));
                    }
                }
                let mut obj = pod;
                self.rv += 1;
                let m = meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(end.format("%Y-%m-%dT%H:%M:%SZ").to_string()));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                m.insert("resourceVersion".into(), json!(self.rv.to_string()));
                self.objects.insert(Self::key(&pods, ns, name), Arc::new(obj.clone()));
                self.emit(EventType::Modified, &pods, ns, obj.clone());
                return Ok(obj);
            }
        }
        self.delete(&pods, ns, name, propagation, precondition_rv, dry_run)
    }

    /// DELETE: finalizers defer it (deletionTimestamp); dependents follow
    /// the propagation policy.
    pub fn delete(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        propagation: Propagation,
        precondition_rv: Option<&str>,
        dry_run: bool,
    ) -> R<Value> {
        let key = Self::key(t, ns, name);
        let Some(mut obj) = self.objects.get(&key).map(|o| Value::clone(o)) else {
            return Err(ApiError::not_found(t, name));
        };
        if let Some(rv) = precondition_rv {
            if Some(rv) != meta_str(&obj, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        if dry_run {
            return Ok(obj);
        }
        let uid = meta_str(&obj, "uid").unwrap_or_default().to_string();
        let has_dependents = self.dependents(&uid).next().is_some();
        if propagation == Propagation::Foreground && has_dependents {
            let mut f = finalizers(&obj);
            if !f.contains(&"foregroundDeletion".to_string()) {
                f.push("foregroundDeletion".into());
            }
            let m = meta_mut(&mut obj);
            m.insert("finalizers".into(), json!(f));
            m.entry("deletionTimestamp").or_insert_with(|| json!(now()));
            self.rv += 1;
            meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
            super::write::as_stored(t, &mut obj);
            self.objects.insert(key, Arc::new(obj.clone()));
            self.emit(EventType::Modified, t, ns, obj.clone());
            for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
                let _ = self.delete(&dt, &dns, &dname, Propagation::Background, None, false);
            }
            self.complete_foreground();
            return Ok(self.objects.get(&Self::key(t, ns, name)).map(|o| Value::clone(o)).unwrap_or(obj));
        }
        if propagation == Propagation::Orphan {
            for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
                let dkey = Self::key(&dt, &dns, &dname);
                if let Some(d) = self.objects.get(&dkey).map(|o| Value::clone(o)) {
                    let mut nd = d.clone();
                    if let Some(refs) = nd.pointer_mut("/metadata/ownerReferences").and_then(Value::as_array_mut) {
                        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid.as_str()));
                    }
                    let _ = self.commit(&dt, &dns, &dname, d, nd, "garbage-collector", false, false);
                }
            }
        }
        if !finalizers(&obj).is_empty() {
            if !meta(&obj).contains_key("deletionTimestamp") {
                meta_mut(&mut obj).insert("deletionTimestamp".into(), json!(now()));
                meta_mut(&mut obj).insert("deletionGracePeriodSeconds".into(), json!(0));
                self.rv += 1;
                meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
                super::write::as_stored(t, &mut obj);
                self.objects.insert(key, Arc::new(obj.clone()));
                self.emit(EventType::Modified, t, ns, obj.clone());
            }
            return Ok(obj);
        }
        self.objects.remove(&key);
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        self.emit(EventType::Deleted, t, ns, obj.clone());
        self.after_delete(t, ns, &obj);
        Ok(obj)
    }

    fn dependents(&self, uid: &str) -> impl Iterator<Item = (ResourceType, String, String)> + '_ {
        let uid = uid.to_string();
        self.objects.iter().filter_map(move |((g, p, ns, name), o)| {
            let owned = o
                .pointer("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r.get("uid").and_then(Value::as_str) == Some(uid.as_str())));
            if !owned || uid.is_empty() {
                return None;
            }
            let t = self.registry.all().find(|t| &t.group == g && &t.plural == p)?.clone();
            Some((t, ns.clone(), name.clone()))
        })
    }

    /// Whether any object still blocks the deletion of the owner `uid`: an
    /// owner reference to it with `blockOwnerDeletion: true`.
    fn has_blocking_dependents(&self, uid: &str) -> bool {
        !uid.is_empty()
            && self.objects.values().any(|o| {
                o.pointer("/metadata/ownerReferences").and_then(Value::as_array).is_some_and(|refs| {
                    refs.iter().any(|r| {
                        r.get("uid").and_then(Value::as_str) == Some(uid)
                            && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
                    })
                })
            })
    }

    /// Owners in foreground deletion are removed once no dependent blocks
    /// them: as the garbage collector does (processDeletingDependentsItem),
    /// only dependents with `blockOwnerDeletion: true` hold the owner back;
    /// the others are deleted too but may outlive it.
    fn complete_foreground(&mut self) {
        loop {
            let ready: Vec<(ObjKey, Value)> = self
                .objects
                .iter()
                .filter(|(_, o)| finalizers(o).iter().any(|f| f == "foregroundDeletion"))
                .filter(|(_, o)| !self.has_blocking_dependents(meta_str(o, "uid").unwrap_or_default()))
                .map(|(k, o)| (k.clone(), Value::clone(o)))
                .collect();
            if ready.is_empty() {
                return;
            }
            for ((g, p, ns, name), o) in ready {
                let Some(t) = self.registry.all().find(|t| t.group == g && t.plural == p).cloned() else { continue };
                let mut n = o.clone();
                let f: Vec<String> = finalizers(&o).into_iter().filter(|f| f != "foregroundDeletion").collect();
                meta_mut(&mut n).insert("finalizers".into(), json!(f));
                let _ = self.commit(&t, &ns, &name, o, n, "garbage-collector", false, false);
            }
        }
    }

    /// The garbage collector's answer to a dependent whose owners are all
    /// gone (attemptToDeleteItem): an object written with owner references
    /// to objects that no longer exist, or exist under another uid (a
    /// controller that read its owner just before it was deleted), is
    /// deleted in the background, as the collector deletes it a moment
    /// after. An owner of a kind the server does not know is not judged.
    pub(super) fn collect_if_orphaned(&mut self, t: &ResourceType, ns: &str, obj: &Value) {
        let Some(refs) = obj.pointer("/metadata/ownerReferences").and_then(Value::as_array) else { return };
        if refs.is_empty() {
            return;
        }
        let all_gone = refs.iter().all(|r| {
            let (Some(api_version), Some(kind), Some(name), Some(uid)) = (
                r.get("apiVersion").and_then(Value::as_str),
                r.get("kind").and_then(Value::as_str),
                r.get("name").and_then(Value::as_str),
                r.get("uid").and_then(Value::as_str),
            ) else {
                return false;
            };
            let group = api_version.split_once('/').map_or("", |(g, _)| g);
            let Some(ot) = self
                .registry
                .by_kind(api_version, kind)
                .or_else(|| self.registry.all().find(|o| o.group == group && o.kind == kind))
                .cloned()
            else {
                return false;
            };
            self.objects.get(&Self::key(&ot, ns, name)).is_none_or(|o| meta_str(o, "uid") != Some(uid))
        });
        let name = meta_str(obj, "name").unwrap_or_default().to_string();
        if all_gone {
            let _ = self.delete(t, ns, &name, Propagation::Background, None, false);
        }
    }

    /// Garbage collection (background) and bookkeeping once an object is gone.
    pub(super) fn after_delete(&mut self, t: &ResourceType, ns: &str, obj: &Value) {
        let uid = meta_str(obj, "uid").unwrap_or_default().to_string();
        for (dt, dns, dname) in self.dependents(&uid).collect::<Vec<_>>() {
            let _ = self.delete(&dt, &dns, &dname, Propagation::Background, None, false);
        }
        if t.plural == "customresourcedefinitions" && t.group == "apiextensions.k8s.io" {
            let group = obj.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default().to_string();
            let plural = obj.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default().to_string();
            self.objects.retain(|(g, p, _, _), _| !(g == &group && p == &plural));
            self.registry.remove_group_plural(&group, &plural);
        }
        if t.plural == "namespaces" && t.group.is_empty() {
            let name = meta_str(obj, "name").unwrap_or_default().to_string();
            self.objects.retain(|(_, _, n, _), _| n != &name);
        }
        if t.plural == "pods" && t.group.is_empty() {
            self.refresh_pdbs(ns, Some(obj));
        }
        self.complete_foreground();
    }
}
