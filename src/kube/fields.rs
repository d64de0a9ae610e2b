//! Server-side apply's field semantics: field paths over objects (which
//! leaves an object sets, reading one by path), which manager owns which
//! fields (`managedFields`, FieldsV1), conflicts between managers, and
//! removing fields a manager applied before and omits now. The sim applies
//! with it; the workload controller compares what it would apply with what
//! is live by the same paths.

use std::collections::BTreeSet;

/// How a list field merges: by these keys, as a set of scalars, or atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    Map(Vec<&'static str>),
    Set,
    Atomic,
}

/// The merge strategy of a list field, judged by its name and items (the
/// emulator has no OpenAPI schema; these are Kubernetes' declared keys).
pub fn list_kind(field: Option<&str>, items: &[Value]) -> ListKind {
    list_kind_of(field, items.iter())
}

/// [`list_kind`] of items read in place (two lists' together, uncopied).
fn list_kind_of<'a>(field: Option<&str>, items: impl Iterator<Item = &'a Value> + Clone) -> ListKind {
    let mut items = items;
    let all_have = |k: &str| items.clone().next().is_some() && items.clone().all(|i| i.get(k).is_some());
    let keys: Option<Vec<&'static str>> = match field {
        Some("containers" | "initContainers" | "ephemeralContainers" | "volumes" | "env" | "imagePullSecrets") => {
            Some(vec!["name"])
        }
        Some("volumeMounts") => Some(vec!["mountPath"]),
        Some("volumeDevices") => Some(vec!["devicePath"]),
        Some("conditions") => Some(vec!["type"]),
        Some("ownerReferences") => Some(vec!["uid"]),
        Some("hostAliases") => Some(vec!["ip"]),
        Some("ports") if all_have("containerPort") => Some(vec!["containerPort"]),
        Some("ports") if all_have("port") => Some(vec!["port"]),
        Some("finalizers") => return ListKind::Set,
        _ => None,
    };
    match keys {
        Some(k) if items.all(|i| i.is_object()) => ListKind::Map(k),
        _ => ListKind::Atomic,
    }
}

use serde_json::{json, Map, Value};

/// One step of a field path: a field, a keyed list element, or a set member.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    F(String),
    /// Compact JSON of the element's key fields, e.g. `{"name":"app"}`.
    K(String),
    /// A member of a set-like list, as compact JSON.
    V(String),
}

pub type Path = Vec<Seg>;
pub type FieldSet = BTreeSet<Path>;

/// Metadata the server owns; never part of a manager's fields.
fn ignored(path: &[Seg]) -> bool {
    match path {
        [Seg::F(a)] if a == "apiVersion" || a == "kind" => true,
        [Seg::F(m), Seg::F(f), ..] if m == "metadata" => server_metadata(f),
        _ => false,
    }
}

/// The fields of `metadata` the server sets (with all below them).
fn server_metadata(field: &str) -> bool {
    matches!(
        field,
        "name"
            | "namespace"
            | "uid"
            | "resourceVersion"
            | "generation"
            | "creationTimestamp"
            | "managedFields"
            | "deletionTimestamp"
            | "deletionGracePeriodSeconds"
            | "selfLink"
    )
}

pub fn display(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::F(f) => {
                s.push('.');
                s.push_str(f);
            }
            Seg::K(k) => s.push_str(&format!("[{k}]")),
            Seg::V(v) => s.push_str(&format!("[={v}]")),
        }
    }
    s
}

fn key_of(item: &Value, keys: &[&str]) -> String {
    let m: Map<String, Value> =
        keys.iter().map(|k| (k.to_string(), item.get(*k).cloned().unwrap_or(Value::Null))).collect();
    Value::Object(m).to_string()
}

/// Every leaf field path of `v` (keyed list elements count as fields too).
pub fn leaves(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), None, &mut out);
    out.retain(|p| !ignored(p));
    out
}

fn walk(v: &Value, prefix: &mut Path, field: Option<&str>, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(Seg::F(k.clone()));
                walk(child, prefix, Some(k), out);
                prefix.pop();
            }
        }
        Value::Array(items) => match list_kind(field, items) {
            ListKind::Map(keys) => {
                for item in items {
                    prefix.push(Seg::K(key_of(item, &keys)));
                    out.insert(prefix.clone());
                    walk(item, prefix, None, out);
                    prefix.pop();
                }
                if items.is_empty() {
                    out.insert(prefix.clone());
                }
            }
            ListKind::Set => {
                for item in items {
                    prefix.push(Seg::V(item.to_string()));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListKind::Atomic => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

fn element_matches(item: &Value, key: &str) -> bool {
    let Ok(Value::Object(k)) = serde_json::from_str::<Value>(key) else { return false };
    k.iter().all(|(f, v)| item.get(f) == Some(v))
}

/// The value at `path`, if present.
pub fn get<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = match (seg, cur) {
            (Seg::F(f), Value::Object(m)) => m.get(f)?,
            (Seg::K(k), Value::Array(a)) => a.iter().find(|i| element_matches(i, k))?,
            (Seg::V(s), Value::Array(a)) => a.iter().find(|i| i.to_string() == *s)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the field or element at `path` (no-op if absent).
pub fn remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut cur = v;
    for seg in parents {
        let next = match (seg, cur) {
            (Seg::F(f), Value::Object(m)) => m.get_mut(f),
            (Seg::K(k), Value::Array(a)) => a.iter_mut().find(|i| element_matches(i, k)),
            (Seg::V(_), _) => None,
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (last, cur) {
        (Seg::F(f), Value::Object(m)) => {
            m.remove(f);
        }
        (Seg::K(k), Value::Array(a)) => a.retain(|i| !element_matches(i, k)),
        (Seg::V(s), Value::Array(a)) => a.retain(|i| i.to_string() != *s),
        _ => {}
    }
}

/// FieldsV1 JSON for a field set.
pub fn to_fields_v1(set: &FieldSet) -> Value {
    // The set is sorted, so paths under one field are neighbours: each
    // node's key is built once, not once per path through it.
    fn node(paths: &[&[Seg]]) -> Map<String, Value> {
        let mut out = Map::new();
        let mut i = 0;
        while i < paths.len() {
            let first = &paths[i][0];
            let mut j = i;
            while j < paths.len() && &paths[j][0] == first {
                j += 1;
            }
            let rest: Vec<&[Seg]> = paths[i..j].iter().filter(|p| p.len() > 1).map(|p| &p[1..]).collect();
            // A keyed element's "." comes first, where the element itself sorts.
            let mut child = Map::new();
            if matches!(first, Seg::K(_)) && paths[i..j].iter().any(|p| p.len() == 1) {
                child.insert(".".into(), json!({}));
            }
            child.extend(node(&rest));
            let key = match first {
                Seg::F(f) => format!("f:{f}"),
                Seg::K(k) => format!("k:{k}"),
                Seg::V(v) => format!("v:{v}"),
            };
            match out.get_mut(&key) {
                // Not reached for a sorted set; kept so the result never depends on it.
                Some(Value::Object(m)) => m.extend(child),
                _ => {
                    out.insert(key, Value::Object(child));
                }
            }
            i = j;
        }
        out
    }
    let paths: Vec<&[Seg]> = set.iter().filter(|p| !p.is_empty()).map(Vec::as_slice).collect();
    Value::Object(node(&paths))
}

/// FieldsV1 for every leaf of `v`: what `to_fields_v1(&leaves(v))` gives,
/// built in one walk of the object, without the set of paths between (an
/// apply records the applied configuration's fields on every write).
pub fn fields_v1_of(v: &Value) -> Value {
    /// The children of the node at `v` (None: `v` is a leaf).
    fn node(v: &Value, field: Option<&str>, root: bool, under_metadata: bool) -> Option<Map<String, Value>> {
        let mut entries: Vec<(String, Value)> = Vec::new();
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, child) in m {
                    // The root's apiVersion and kind are the server's (when leaves).
                    let typemeta = root && (k == "apiVersion" || k == "kind");
                    if under_metadata && server_metadata(k) {
                        continue;
                    }
                    let entry = match node(child, Some(k), false, root && k == "metadata") {
                        None if typemeta => continue,
                        None => Map::new(),
                        // A field whose every leaf is the server's is not the manager's.
                        Some(c) if c.is_empty() => continue,
                        Some(c) => c,
                    };
                    entries.push((format!("f:{k}"), Value::Object(entry)));
                }
            }
            Value::Array(items) => match list_kind(field, items) {
                ListKind::Map(keys) => {
                    if items.is_empty() {
                        return None;
                    }
                    for item in items {
                        let mut element = Map::new();
                        element.insert(".".into(), Value::Object(Map::new()));
                        if let Some(children) = node(item, None, false, false) {
                            element.extend(children);
                        }
                        entries.push((format!("k:{}", key_of(item, &keys)), Value::Object(element)));
                    }
                }
                ListKind::Set => {
                    for item in items {
                        entries.push((format!("v:{item}"), Value::Object(Map::new())));
                    }
                }
                ListKind::Atomic => return None,
            },
            _ => return None,
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = Map::new();
        for (k, v) in entries {
            match out.get_mut(&k) {
                // Two list elements with one key: their fields are one set.
                Some(existing) => union(existing, v),
                None => {
                    out.insert(k, v);
                }
            }
        }
        Some(out)
    }
    /// The union of two FieldsV1 nodes, keys in order.
    fn union(into: &mut Value, from: Value) {
        let (Value::Object(a), Value::Object(b)) = (into, from) else { return };
        for (k, v) in b {
            match a.get_mut(&k) {
                Some(existing) => union(existing, v),
                None => {
                    a.insert(k, v);
                }
            }
        }
        let mut sorted: Vec<(String, Value)> = std::mem::take(a).into_iter().collect();
        // "." first, where a keyed element itself sorts.
        sorted.sort_by(|x, y| (x.0 != ".", &x.0).cmp(&(y.0 != ".", &y.0)));
        a.extend(sorted);
    }
    Value::Object(node(v, None, true, false).unwrap_or_default())
}

/// The field set a FieldsV1 document describes.
pub fn from_fields_v1(v: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    fn go(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
        let Some(m) = v.as_object() else { return };
        let mut leaf = true;
        for (k, child) in m {
            if k == "." {
                out.insert(prefix.clone());
                continue;
            }
            let seg = if let Some(f) = k.strip_prefix("f:") {
                Seg::F(f.to_string())
            } else if let Some(key) = k.strip_prefix("k:") {
                Seg::K(key.to_string())
            } else if let Some(val) = k.strip_prefix("v:") {
                Seg::V(val.to_string())
            } else {
                continue;
            };
            leaf = false;
            prefix.push(seg);
            go(child, prefix, out);
            prefix.pop();
        }
        if leaf && !prefix.is_empty() {
            out.insert(prefix.clone());
        }
    }
    go(v, &mut Vec::new(), &mut out);
    out
}

/// One manager's entry in `metadata.managedFields`.
#[derive(Debug, Clone)]
pub struct Managed {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub fields: FieldSet,
    /// Its FieldsV1 as read, while `fields` is unchanged: written back as
    /// it was instead of built again from the set (most writes change one
    /// manager's fields, and an object carries several).
    pub raw: Option<Value>,
}

/// Takes `metadata.managedFields` out of an object the caller owns: each
/// manager's FieldsV1 moved into its entry, not copied (a write puts them
/// back with [`write_managed`]).
pub fn take_managed(obj: &mut Value) -> Vec<Managed> {
    let Some(Value::Array(entries)) = obj.pointer_mut("/metadata/managedFields").map(Value::take) else {
        return Vec::new();
    };
    entries.into_iter().map(managed_entry).collect()
}

pub fn read_managed(obj: &Value) -> Vec<Managed> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().cloned().map(managed_entry).collect())
        .unwrap_or_default()
}

/// One `managedFields` entry, its FieldsV1 moved into the result.
fn managed_entry(mut e: Value) -> Managed {
    let text = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    Managed {
        manager: text(&e, "manager").unwrap_or_default(),
        operation: text(&e, "operation").unwrap_or_else(|| "Update".into()),
        api_version: text(&e, "apiVersion").unwrap_or_default(),
        time: text(&e, "time").unwrap_or_default(),
        fields: e.get("fieldsV1").map(from_fields_v1).unwrap_or_default(),
        raw: e.get_mut("fieldsV1").map(Value::take),
    }
}

pub fn write_managed(obj: &mut Value, managed: Vec<Managed>) {
    let entries: Vec<Value> = managed
        .into_iter()
        .filter(|m| match &m.raw {
            Some(raw) => raw.as_object().is_some_and(|o| !o.is_empty()),
            None => !m.fields.is_empty(),
        })
        .map(|m| {
            let fields_v1 = m.raw.unwrap_or_else(|| to_fields_v1(&m.fields));
            let mut e = Map::new();
            e.insert("manager".into(), Value::String(m.manager));
            e.insert("operation".into(), Value::String(m.operation));
            e.insert("apiVersion".into(), Value::String(m.api_version));
            e.insert("time".into(), Value::String(m.time));
            e.insert("fieldsType".into(), Value::String("FieldsV1".into()));
            e.insert("fieldsV1".into(), fields_v1);
            Value::Object(e)
        })
        .collect();
    if !obj.get("metadata").is_some_and(Value::is_object) {
        if entries.is_empty() {
            return;
        }
        obj["metadata"] = json!({});
    }
    let meta = obj["metadata"].as_object_mut().expect("metadata object");
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(entries));
    }
}

/// A field two managers disagree on.
#[derive(Debug, Clone)]
pub struct Conflict {
    pub manager: String,
    pub path: String,
}

/// Merges an applied configuration into `live` (keyed lists by key); what
/// is applied is moved in, not copied.
pub fn merge_applied(live: &mut Value, applied: Value, field: Option<&str>) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, v) in a {
                match l.get_mut(&k) {
                    Some(existing) => merge_applied(existing, v, Some(&k)),
                    None => {
                        l.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) => {
            match list_kind_of(field, l.iter().chain(a.iter())) {
                ListKind::Map(keys) => {
                    for item in a {
                        // Same key: every key field equal (absent reads as null).
                        let same = |i: &Value| {
                            keys.iter()
                                .all(|k| i.get(*k).unwrap_or(&Value::Null) == item.get(*k).unwrap_or(&Value::Null))
                        };
                        match l.iter_mut().find(|i| same(i)) {
                            Some(existing) => merge_applied(existing, item, None),
                            None => l.push(item),
                        }
                    }
                }
                ListKind::Set => {
                    for item in a {
                        if !l.contains(&item) {
                            l.push(item);
                        }
                    }
                }
                ListKind::Atomic => *l = a,
            }
        }
        (l, a) => *l = a,
    }
}

/// Server-side apply of `applied` by `manager` onto `live` (None: create).
/// Returns the new object, or the conflicts when not forced.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    api_version: &str,
    force: bool,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    apply_owned(live, applied.clone(), manager, api_version, force, now)
}

/// [`apply`] of a configuration the caller gives up: merged in by moving
/// its values, and the managers' FieldsV1 moved from the live object's copy
/// to the new one, nothing copied twice.
pub fn apply_owned(
    live: Option<&Value>,
    applied: Value,
    manager: &str,
    api_version: &str,
    force: bool,
    now: &str,
) -> Result<Value, Vec<Conflict>> {
    // The applied configuration's FieldsV1, made from it directly; its set
    // of paths is needed only where there are fields already (a create has none).
    let raw = fields_v1_of(&applied);
    let applied_fields = if live.is_some() { leaves(&applied) } else { FieldSet::new() };
    let mut obj = live.cloned().unwrap_or_else(|| json!({}));
    let mut managed = take_managed(&mut obj);
    let mut conflicts = Vec::new();
    for m in managed.iter_mut().filter(|m| !(m.manager == manager && m.operation == "Apply")) {
        let contested: Vec<Path> = m
            .fields
            .iter()
            .filter(|p| applied_fields.contains(*p))
            .filter(|p| !matches!(p.last(), Some(Seg::K(_) | Seg::V(_))))
            .filter(|p| get(&obj, p) != get(&applied, p))
            .cloned()
            .collect();
        if force {
            for p in &contested {
                m.fields.remove(p);
            }
            if !contested.is_empty() {
                m.raw = None;
            }
        } else {
            conflicts.extend(contested.iter().map(|p| Conflict { manager: m.manager.clone(), path: display(p) }));
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    // Fields this manager applied before and omits now go, unless someone else owns them.
    let mine = |m: &&Managed| m.manager == manager && m.operation == "Apply";
    let previous: BTreeSet<&Path> = managed.iter().filter(mine).flat_map(|m| m.fields.iter()).collect();
    let others: BTreeSet<&Path> = managed.iter().filter(|m| !mine(m)).flat_map(|m| m.fields.iter()).collect();
    let mut dropped: Vec<&Path> =
        previous.iter().copied().filter(|p| !applied_fields.contains(*p) && !others.contains(p)).collect();
    // Shallowest first; a removed element or field takes its children with
    // it (removing children first would strip a list element's key).
    dropped.sort_by_key(|p| p.len());
    let mut removed: Vec<&Path> = Vec::new();
    for p in dropped {
        if removed.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        remove(&mut obj, p);
        removed.push(p);
    }
    merge_applied(&mut obj, applied, None);
    managed.retain(|m| !(m.manager == manager && m.operation == "Apply"));
    managed.push(Managed {
        manager: manager.into(),
        operation: "Apply".into(),
        api_version: api_version.into(),
        time: now.into(),
        fields: applied_fields,
        raw: Some(raw),
    });
    write_managed(&mut obj, managed);
    Ok(obj)
}

/// After a non-apply write by `manager`: the fields it changed become its
/// own (operation Update) and leave other managers.
pub fn record_update(old: Option<&Value>, new: &mut Value, manager: &str, api_version: &str, now: &str) {
    let mut managed = old.map(read_managed).unwrap_or_default();
    let new_leaves = leaves(new);
    let changed: FieldSet =
        new_leaves.iter().filter(|p| old.is_none_or(|o| get(o, p) != get(new, p))).cloned().collect();
    for m in &mut managed {
        let before = m.fields.len();
        m.fields.retain(|p| new_leaves.contains(p));
        if m.manager != manager {
            for p in &changed {
                m.fields.remove(p);
            }
        }
        if m.fields.len() != before {
            m.raw = None;
        }
    }
    if !changed.is_empty() {
        match managed.iter_mut().find(|m| m.manager == manager && m.operation == "Update") {
            Some(m) => {
                m.fields.extend(changed);
                m.time = now.into();
                m.raw = None;
            }
            None => managed.push(Managed {
                manager: manager.into(),
                operation: "Update".into(),
                api_version: api_version.into(),
                time: now.into(),
                fields: changed,
                raw: None,
            }),
        }
    }
    write_managed(new, managed);
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn apply_creates_then_removes_omitted_fields() {
        let a1 = json!({"metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let o1 = apply(None, &a1, "m", "v1", false, NOW).unwrap();
        assert_eq!(o1["data"], json!({"a": "1", "b": "2"}));
        let a2 = json!({"metadata": {"name": "x"}, "data": {"a": "1"}});
        let o2 = apply(Some(&o1), &a2, "m", "v1", false, NOW).unwrap();
        assert_eq!(o2["data"], json!({"a": "1"}));
        assert_eq!(o2["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:data": {"f:a": {}}}));
    }

    #[test]
    fn other_managers_conflict_unless_forced_or_equal() {
        let o1 = apply(None, &json!({"data": {"a": "1"}}), "one", "v1", false, NOW).unwrap();
        // Same value: shared ownership, no conflict.
        let o2 = apply(Some(&o1), &json!({"data": {"a": "1"}}), "two", "v1", false, NOW).unwrap();
        let err = apply(Some(&o2), &json!({"data": {"a": "9"}}), "three", "v1", false, NOW).unwrap_err();
        let mut who: Vec<String> = err.iter().map(|c| c.manager.clone()).collect();
        who.sort();
        assert_eq!(who, ["one", "two"]);
        assert_eq!(err[0].path, ".data.a");
        let forced = apply(Some(&o2), &json!({"data": {"a": "9"}}), "three", "v1", true, NOW).unwrap();
        assert_eq!(forced["data"]["a"], "9");
        assert_eq!(read_managed(&forced).len(), 1, "the others lost the field");
    }

    #[test]
    fn keyed_lists_are_owned_per_element() {
        let a = json!({"spec": {"containers": [{"name": "app", "image": "a"}, {"name": "side", "image": "s"}]}});
        let o = apply(None, &a, "m", "v1", false, NOW).unwrap();
        let o2 =
            apply(Some(&o), &json!({"spec": {"containers": [{"name": "app", "image": "a"}]}}), "m", "v1", false, NOW)
                .unwrap();
        assert_eq!(o2["spec"]["containers"], json!([{"name": "app", "image": "a"}]));
        let set = from_fields_v1(&to_fields_v1(&leaves(&a)));
        assert_eq!(set, leaves(&a));
    }

    /// Built node by node, FieldsV1 reads exactly as when built path by
    /// path (the order of its keys included).
    #[test]
    fn fields_v1_is_built_once_per_node_and_reads_as_path_by_path() {
        fn path_by_path(set: &FieldSet) -> Value {
            let mut root = Value::Object(Map::new());
            for path in set {
                let mut cur = &mut root;
                for seg in path {
                    let key = match seg {
                        Seg::F(f) => format!("f:{f}"),
                        Seg::K(k) => format!("k:{k}"),
                        Seg::V(v) => format!("v:{v}"),
                    };
                    cur = cur.as_object_mut().unwrap().entry(key).or_insert_with(|| Value::Object(Map::new()));
                }
                if matches!(path.last(), Some(Seg::K(_))) {
                    cur.as_object_mut().unwrap().entry(".").or_insert_with(|| json!({}));
                }
            }
            root
        }
        let d = json!({"metadata": {"labels": {"a": "1", "b": "2"}, "finalizers": ["x", "y"],
            "ownerReferences": [{"uid": "u1", "kind": "K", "name": "n"}]},
            "spec": {"replicas": 2, "template": {"spec": {
                "containers": [{"name": "app", "image": "a", "ports": [{"containerPort": 80, "name": "http"}],
                    "env": [{"name": "E", "value": "1"}], "volumeMounts": [{"mountPath": "/m", "name": "v"}]},
                    {"name": "side", "image": "s"}],
                "volumes": [{"name": "v", "emptyDir": {}}]}}}});
        let set = leaves(&d);
        assert_eq!(to_fields_v1(&set).to_string(), path_by_path(&set).to_string());
        assert_eq!(from_fields_v1(&to_fields_v1(&set)), set);
    }

    /// FieldsV1 made in one walk of an object is what its set of leaf
    /// paths gives, for any object: keyed lists (with repeated keys), sets,
    /// atomic lists, empty objects and the server's own metadata.
    #[test]
    fn fields_v1_of_an_object_is_its_leaves_fields_v1() {
        use proptest::prelude::*;
        fn value() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                (0i64..5).prop_map(Value::from),
                "[a-c]{0,2}".prop_map(Value::from),
            ];
            let names = prop_oneof![
                Just("name"),
                Just("image"),
                Just("containers"),
                Just("ports"),
                Just("port"),
                Just("containerPort"),
                Just("finalizers"),
                Just("env"),
                Just("conditions"),
                Just("type"),
                Just("volumeMounts"),
                Just("mountPath"),
                Just("labels"),
                Just("spec"),
                Just("x")
            ];
            leaf.prop_recursive(4, 48, 5, move |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    prop::collection::vec((names.clone(), inner), 0..5)
                        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
                ]
            })
        }
        let top = prop::collection::vec(
            (
                prop_oneof![
                    Just("apiVersion"),
                    Just("kind"),
                    Just("metadata"),
                    Just("spec"),
                    Just("status"),
                    Just("data")
                ],
                value(),
            ),
            0..5,
        )
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()));
        let meta = prop::collection::vec(
            (
                prop_oneof![
                    Just("name"),
                    Just("namespace"),
                    Just("uid"),
                    Just("labels"),
                    Just("finalizers"),
                    Just("ownerReferences"),
                    Just("managedFields"),
                    Just("annotations")
                ],
                value(),
            ),
            0..4,
        );
        let mut runner = proptest::test_runner::TestRunner::new(proptest::test_runner::Config::with_cases(2000));
        runner
            .run(&(top, meta), |(mut v, meta)| {
                v["metadata"] = Value::Object(meta.into_iter().map(|(k, v)| (k.to_string(), v)).collect());
                prop_assert_eq!(fields_v1_of(&v).to_string(), to_fields_v1(&leaves(&v)).to_string(), "{}", v);
                Ok(())
            })
            .unwrap();
        // A Deployment as the workload controller applies one.
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "w", "namespace": "n", "labels": {"a": "1"}, "finalizers": [],
                "ownerReferences": [{"uid": "u", "kind": "K", "name": "n", "controller": true}]},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "1"}}, "template": {"metadata": {}, "spec": {
                "containers": [{"name": "app", "image": "a", "ports": [{"containerPort": 80}], "env": [],
                    "args": ["x", "y"]}, {"name": "app", "resources": {}}]}}}});
        assert_eq!(fields_v1_of(&d), to_fields_v1(&leaves(&d)));
    }

    #[test]
    fn updates_take_ownership_of_what_they_change() {
        let o = apply(None, &json!({"data": {"a": "1", "b": "2"}}), "applier", "v1", false, NOW).unwrap();
        let mut edited = o.clone();
        edited["data"]["a"] = json!("edited");
        record_update(Some(&o), &mut edited, "kubectl-edit", "v1", NOW);
        let m = read_managed(&edited);
        let editor = m.iter().find(|m| m.manager == "kubectl-edit").unwrap();
        assert!(editor.fields.contains(&vec![Seg::F("data".into()), Seg::F("a".into())]));
        // The applier now conflicts on `a` if it applies a different value.
        assert!(apply(Some(&edited), &json!({"data": {"a": "1", "b": "2"}}), "applier", "v1", false, NOW).is_err());
    }
}
