//! Writes to the store: create, update (PUT), the patch formats and
//! server-side apply, each through [`Inner::commit`] — server-owned
//! metadata, generation, managed fields, the status subresource's rules,
//! optimistic concurrency, no-op writes that move nothing — and then the
//! bookkeeping that follows (garbage collection, budgets).

use std::sync::Arc;

use serde_json::{json, Value};

use super::events::EventType;
use super::scale::{scale_object, set_path};
use super::{conflict, finalizers, invalid, meta, meta_mut, meta_str, now, ApiError, Inner, Sub, R};
use crate::kube::fields;
use crate::sim::patch;
use crate::sim::registry::ResourceType;

fn uid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

/// Spec-like content (everything but metadata and status), for generation.
/// Whether two objects differ outside metadata and status (what moves
/// `generation`), compared in place: no copy of either.
fn spec_differs(old: &Value, new: &Value) -> bool {
    fn outside(v: &Value) -> Vec<(&String, &Value)> {
        v.as_object()
            .map(|m| m.iter().filter(|(k, _)| *k != "metadata" && *k != "status").collect())
            .unwrap_or_default()
    }
    let (o, n) = (outside(old), outside(new));
    o.len() != n.len() || o.iter().any(|(k, v)| new.get(k.as_str()) != Some(*v))
}

impl Inner {
    fn ensure_namespace(&self, t: &ResourceType, ns: &str) -> R<()> {
        if !t.namespaced {
            return Ok(());
        }
        if ns.is_empty() {
            return Err(ApiError::new(400, "BadRequest", "a namespace is required for a namespaced resource"));
        }
        if !self.objects.contains_key(&(String::new(), "namespaces".into(), String::new(), ns.to_string())) {
            return Err(ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
                .with_details(json!({"name": ns, "kind": "namespaces"})));
        }
        Ok(())
    }

    /// Creates an object. `manager` owns all its fields (operation Update).
    pub fn create(&mut self, t: &ResourceType, ns: &str, obj: Value, manager: &str, dry_run: bool) -> R<Value> {
        self.create_shared(t, ns, obj, manager, dry_run).map(Arc::unwrap_or_clone)
    }

    /// [`Inner::create`], answering with the stored object itself (shared,
    /// not copied: the server answers from its event's text).
    pub fn create_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        mut obj: Value,
        manager: &str,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "the body must be an object"));
        }
        let m = meta_mut(&mut obj);
        if m.get("name").and_then(Value::as_str).is_none_or(str::is_empty) {
            match m.get("generateName").and_then(Value::as_str) {
                Some(prefix) => {
                    let suffix: String =
                        (0..5).map(|_| b"bcdfghjklmnpqrstvwxz2456789"[rand::random_range(0..27)] as char).collect();
                    m.insert("name".into(), json!(format!("{prefix}{suffix}")));
                }
                None => {
                    return Err(invalid(t, "", "metadata.name", "Required value: name or generateName is required"))
                }
            }
        }
        let name = meta_str(&obj, "name").unwrap_or_default().to_string();
        if t.namespaced {
            let body_ns = meta_str(&obj, "namespace").map(str::to_string);
            if let Some(b) = body_ns.filter(|b| !b.is_empty() && b != ns) {
                return Err(ApiError::new(400, "BadRequest", format!("the namespace of the provided object ({b}) does not match the namespace sent on the request ({ns})")));
            }
            self.ensure_namespace(t, ns)?;
        }
        let key = Self::key(t, ns, &name);
        if self.objects.contains_key(&key) {
            let what = if t.group.is_empty() { t.plural.clone() } else { format!("{}.{}", t.plural, t.group) };
            return Err(ApiError::new(409, "AlreadyExists", format!("{what} \"{name}\" already exists"))
                .with_details(json!({"name": name, "group": t.group, "kind": t.plural})));
        }
        if t.status
            && t.plural != "customresourcedefinitions"
            && t.plural != "pods"
            && t.plural != "nodes"
            && t.plural != "namespaces"
        {
            // Status is written through the status subresource only.
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        let now = now();
        {
            let m = meta_mut(&mut obj);
            if t.namespaced {
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), json!(uid()));
            m.insert("creationTimestamp".into(), json!(now));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("resourceVersion");
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.kind);
        if t.plural == "namespaces" {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        if t.plural == "customresourcedefinitions" {
            self.register_crd(&mut obj)?;
        }
        obj = Self::enforce_schema(self.serving_version().minor, t, &name, obj, None)?;
        Self::default_builtin(t, &mut obj);
        Self::enforce_builtin(self.serving_version().minor, t, &name, &obj, None)?;
        self.enforce_pod_security(t, ns, &name, &obj)?;
        Self::merge_string_data(t, &mut obj);
        if obj.pointer("/metadata/managedFields").is_none_or(|m| m.as_array().is_none_or(|a| a.is_empty())) {
            fields::record_update(None, &mut obj, manager, &t.api_version(), &now);
        }
        if dry_run {
            as_stored(t, &mut obj);
            return Ok(Arc::new(obj));
        }
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        as_stored(t, &mut obj);
        let obj = Arc::new(obj);
        self.objects.insert(key, obj.clone());
        self.emit(EventType::Added, t, ns, obj.clone());
        self.after_change(t, ns, &obj);
        self.collect_if_orphaned(t, ns, &obj);
        Ok(obj)
    }

    /// Replaces an object (PUT), or its status, honouring resourceVersion.
    #[allow(clippy::too_many_arguments)]
    pub fn update(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        manager: &str,
        sub: Sub,
        dry_run: bool,
    ) -> R<Value> {
        self.update_shared(t, ns, name, obj, manager, sub, dry_run).map(Arc::unwrap_or_clone)
    }

    /// [`Inner::update`], answering with the stored object itself.
    #[allow(clippy::too_many_arguments)]
    pub fn update_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        obj: Value,
        manager: &str,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        let key = Self::key(t, ns, name);
        let Some(old) = self.objects.get(&key).map(|o| Value::clone(o)) else {
            return Err(ApiError::not_found(t, name));
        };
        if let Some(rv) = meta_str(&obj, "resourceVersion").filter(|r| !r.is_empty()) {
            if Some(rv) != meta_str(&old, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        if meta_str(&obj, "name").is_some_and(|n| n != name) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    meta_str(&obj, "name").unwrap_or_default()
                ),
            ));
        }
        let obj = with_status_rules(t, &old, obj, sub);
        self.commit(t, ns, name, old, obj, manager, dry_run, false)
    }

    /// Finishes a write: server-owned metadata, generation, managed fields,
    /// finalizer-completed deletion, events.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn commit(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        old: impl Into<Arc<Value>>,
        mut obj: Value,
        manager: &str,
        dry_run: bool,
        applied: bool,
    ) -> R<Arc<Value>> {
        let old: Arc<Value> = old.into();
        {
            let old_meta = meta(&old);
            let m = meta_mut(&mut obj);
            for f in
                ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace", "name"]
            {
                match old_meta.get(f) {
                    Some(v) => {
                        m.insert(f.into(), v.clone());
                    }
                    None => {
                        m.remove(f);
                    }
                }
            }
            let gen = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
            m.insert("generation".into(), json!(gen));
        }
        obj = Self::enforce_schema(self.serving_version().minor, t, name, obj, Some(&old))?;
        Self::default_builtin(t, &mut obj);
        Self::enforce_builtin(self.serving_version().minor, t, name, &obj, Some(&old))?;
        Self::merge_string_data(t, &mut obj);
        if spec_differs(&old, &obj) {
            let gen = meta(&old).get("generation").and_then(Value::as_i64).unwrap_or(1);
            meta_mut(&mut obj).insert("generation".into(), json!(gen + 1));
        }
        obj["apiVersion"] = json!(t.api_version());
        obj["kind"] = json!(t.kind);
        if !applied {
            fields::record_update(Some(&old), &mut obj, manager, &t.api_version(), &now());
        }
        if t.plural == "customresourcedefinitions" {
            self.register_crd(&mut obj)?;
        }
        if unchanged(&old, &obj) {
            // A no-op write does not move the resourceVersion.
            return Ok(old);
        }
        if dry_run {
            as_stored(t, &mut obj);
            return Ok(Arc::new(obj));
        }
        self.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
        as_stored(t, &mut obj);
        let key = Self::key(t, ns, name);
        if meta(&obj).contains_key("deletionTimestamp") && finalizers(&obj).is_empty() {
            self.objects.remove(&key);
            let obj = Arc::new(obj);
            self.emit(EventType::Deleted, t, ns, obj.clone());
            self.after_delete(t, ns, &obj);
            return Ok(obj);
        }
        let obj = Arc::new(obj);
        self.objects.insert(key, obj.clone());
        self.emit(EventType::Modified, t, ns, obj.clone());
        self.after_change(t, ns, &obj);
        Ok(obj)
    }

    /// PATCH in any of the four formats, on the object or a subresource.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        content_type: &str,
        body: &Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Value> {
        self.patch_shared(t, ns, name, content_type, body.clone(), manager, force, sub, dry_run)
            .map(Arc::unwrap_or_clone)
    }

    /// [`Inner::patch`], answering with the stored object itself.
    #[allow(clippy::too_many_arguments)]
    pub fn patch_shared(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        content_type: &str,
        body: Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        let key = Self::key(t, ns, name);
        let existing = self.objects.get(&key).cloned();
        if content_type.starts_with("application/apply-patch") {
            return self.apply(t, ns, name, existing, body, manager, force, sub, dry_run);
        }
        let Some(old) = existing else { return Err(ApiError::not_found(t, name)) };
        if sub == Sub::Scale {
            let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
            let mut s = scale_object(t, &old, &scale);
            apply_patch(content_type, &mut s, &body)?;
            let mut new = Value::clone(&old);
            if let Some(r) = s.pointer("/spec/replicas") {
                set_path(&mut new, &scale.spec_replicas, r.clone());
            }
            let out = self.commit(t, ns, name, old, new, manager, dry_run, false)?;
            return Ok(Arc::new(scale_object(t, &out, &scale)));
        }
        let mut new = Value::clone(&old);
        apply_patch(content_type, &mut new, &body)?;
        if let Some(rv) = meta_str(&new, "resourceVersion") {
            if Some(rv) != meta_str(&old, "resourceVersion") {
                return Err(conflict(t, name));
            }
        }
        let new = with_status_rules(t, &old, new, sub);
        self.commit(t, ns, name, old, new, manager, dry_run, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        t: &ResourceType,
        ns: &str,
        name: &str,
        existing: Option<Arc<Value>>,
        body: Value,
        manager: &str,
        force: bool,
        sub: Sub,
        dry_run: bool,
    ) -> R<Arc<Value>> {
        if manager.is_empty() {
            return Err(ApiError::new(400, "BadRequest", "PATCH with apply-patch requires a fieldManager"));
        }
        if meta_str(&body, "name").is_some_and(|n| n != name) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                "the name in the applied configuration does not match the URL",
            ));
        }
        let mut applied = body;
        if let Some(m) = applied.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
            m.remove("resourceVersion");
        }
        if sub == Sub::Main && t.status && t.plural != "pods" && t.plural != "nodes" {
            if let Some(o) = applied.as_object_mut() {
                o.remove("status");
            }
        }
        let result = fields::apply_owned(existing.as_deref(), applied, manager, &t.api_version(), force, &now());
        let obj = match result {
            Ok(o) => o,
            Err(conflicts) => {
                let lines: Vec<String> =
                    conflicts.iter().map(|c| format!("conflict with \"{}\": {}", c.manager, c.path)).collect();
                let causes: Vec<Value> = conflicts.iter().map(|c| json!({"reason": "FieldManagerConflict", "message": format!("conflict with \"{}\"", c.manager), "field": c.path})).collect();
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Apply failed with {} conflict{}: {}",
                        conflicts.len(),
                        if conflicts.len() == 1 { "" } else { "s" },
                        lines.join("; ")
                    ),
                )
                .with_details(json!({"name": name, "group": t.group, "kind": t.plural, "causes": causes})));
            }
        };
        match existing {
            None => {
                let mut obj = obj;
                meta_mut(&mut obj).insert("name".into(), json!(name));
                self.create_shared(t, ns, obj, manager, dry_run)
            }
            Some(old) => self.commit(t, ns, name, old, obj, manager, dry_run, true),
        }
    }
}

/// The status subresource's rules: a status write changes only status; a
/// write to the object itself keeps the stored status (pods, nodes and
/// namespaces excepted, as in the real API).
fn with_status_rules(t: &ResourceType, old: &Value, new: Value, sub: Sub) -> Value {
    match sub {
        Sub::Status => {
            let mut merged = old.clone();
            merged["status"] = new.get("status").cloned().unwrap_or(Value::Null);
            merged
        }
        _ if t.status && !matches!(t.plural.as_str(), "pods" | "nodes" | "namespaces") => {
            let mut n = new;
            match old.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    if let Some(o) = n.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            n
        }
        _ => new,
    }
}

/// What a no-op check compares of managedFields: entries without their
/// times, in a fixed order (the order of entries carries no meaning).
/// Whether a write leaves the object as it was but for what a no-op write
/// may move: its resourceVersion and the times (and order) of its
/// managed-field entries. Compared in place; only the managed fields are
/// copied, to set their times aside.
fn unchanged(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return old == new };
    if o.len() != n.len() {
        return false;
    }
    o.iter().all(|(k, ov)| match (k.as_str(), n.get(k)) {
        (_, None) => false,
        ("metadata", Some(nv)) => same_metadata(ov, nv),
        (_, Some(nv)) => ov == nv,
    })
}

fn same_metadata(old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else { return old == new };
    let skip = |k: &str| k == "resourceVersion" || k == "managedFields";
    if o.keys().filter(|k| !skip(k)).count() != n.keys().filter(|k| !skip(k)).count() {
        return false;
    }
    if !o.iter().filter(|(k, _)| !skip(k)).all(|(k, v)| n.get(k) == Some(v)) {
        return false;
    }
    let timeless = |v: &Value| -> Vec<Value> {
        let mut entries: Vec<Value> = v
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let mut e = e.clone();
                if let Some(m) = e.as_object_mut() {
                    m.remove("time");
                }
                e
            })
            .collect();
        entries.sort_by_key(|e| format!("{}|{}|{}", e["manager"], e["operation"], e["subresource"]));
        entries
    };
    match (o.get("managedFields"), n.get("managedFields")) {
        (None, None) => true,
        (Some(a), Some(b)) => a == b || timeless(a) == timeless(b),
        _ => false,
    }
}

fn apply_patch(content_type: &str, doc: &mut Value, body: &Value) -> R<()> {
    if content_type.starts_with("application/json-patch+json") {
        patch::json_patch(doc, body)
            .map_err(|e| ApiError::new(422, "Invalid", format!("the JSON patch could not be applied: {e}")))
    } else if content_type.starts_with("application/merge-patch+json") {
        patch::merge_patch(doc, body);
        Ok(())
    } else if content_type.starts_with("application/strategic-merge-patch+json") {
        patch::strategic_merge(doc, body);
        Ok(())
    } else {
        Err(ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})")))
    }
}

/// A custom resource as the API server keeps and answers it: unstructured
/// JSON, whose maps Go encodes with their keys sorted (metadata too).
/// Built-in objects are left as written (their Go structs' field order is
/// not emulated).
pub(super) fn as_stored(t: &ResourceType, obj: &mut Value) {
    if t.custom {
        sort_keys(obj);
    }
}

fn sort_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, mut v) in entries {
                sort_keys(&mut v);
                m.insert(k, v);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::store::Propagation;

    /// A write answers with the object its watchers are sent: the same
    /// allocation, and the answer's text is the object's part of the
    /// event's line (serialized once for both).
    #[test]
    fn a_write_answers_with_its_events_object() {
        let mut s = Inner::new();
        let t = s.registry.get("", "v1", "configmaps").cloned().expect("configmaps");
        let apply = |s: &mut Inner, body: Value| {
            s.patch_shared(&t, "default", "c", "application/apply-patch+yaml", body, "m", false, Sub::Main, false)
                .unwrap()
        };
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let out = apply(&mut s, applied.clone());
        let ev = s.event_of(&out).expect("the create's event");
        assert_eq!(ev.kind, EventType::Added);
        let text: Value = serde_json::from_slice(&ev.object_json()).unwrap();
        assert_eq!(text, *out);
        assert_eq!(ev.line(), format!("{{\"type\":\"ADDED\",\"object\":{}}}\n", out).as_bytes());
        // A no-op apply writes nothing: it answers with the stored object itself.
        let rv = s.resource_version();
        let again = apply(&mut s, applied);
        assert!(Arc::ptr_eq(&again, &out));
        assert_eq!(s.resource_version(), rv);
        // An update's event carries the stored object.
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}});
        let out = apply(&mut s, changed);
        let ev = s.event_of(&out).expect("the update's event");
        assert_eq!(ev.kind, EventType::Modified);
        assert_eq!(serde_json::from_slice::<Value>(&ev.object_json()).unwrap(), *out);
        assert_eq!(s.get(&t, "default", "c").unwrap(), *out);
    }

    /// A dependent written after its owner was deleted (a controller that
    /// read the owner a moment before) is collected, as the garbage
    /// collector collects it; one whose owner lives, or whose owner's kind
    /// the server does not know, stays.
    #[test]
    fn a_dependent_created_after_its_owner_is_gone_is_collected() {
        let mut s = Inner::new();
        let cms = s.registry.get("", "v1", "configmaps").cloned().expect("configmaps");
        let owner = s.create(&cms, "default", json!({"metadata": {"name": "owner"}}), "m", false).unwrap();
        let uid = owner["metadata"]["uid"].as_str().unwrap().to_string();
        let dependent = |name: &str, kind: &str, owner_uid: &str| {
            json!({"metadata": {"name": name, "ownerReferences": [
                {"apiVersion": "v1", "kind": kind, "name": "owner", "uid": owner_uid}]}})
        };
        s.create(&cms, "default", dependent("lives", "ConfigMap", &uid), "m", false).unwrap();
        assert!(s.get(&cms, "default", "lives").is_ok(), "its owner is there");
        s.create(&cms, "default", dependent("stale", "ConfigMap", "another-uid"), "m", false).unwrap();
        assert!(s.get(&cms, "default", "stale").is_err(), "an owner under another uid is a gone owner");
        s.delete(&cms, "default", "owner", Propagation::Background, None, false).unwrap();
        assert!(s.get(&cms, "default", "lives").is_err(), "collected with its owner");
        s.create(&cms, "default", dependent("late", "ConfigMap", &uid), "m", false).unwrap();
        assert!(s.get(&cms, "default", "late").is_err(), "written after its owner went: collected");
        s.create(&cms, "default", dependent("unknown", "Gizmo", &uid), "m", false).unwrap();
        assert!(s.get(&cms, "default", "unknown").is_ok(), "an owner of a kind not known is not judged");
    }
}
