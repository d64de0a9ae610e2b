//! The three patch formats the API server accepts: JSON merge patch
//! (RFC 7386), JSON patch (RFC 6902), and strategic merge patch with the
//! list merge keys Kubernetes declares for the fields pinfleet and kubectl
//! touch (containers, initContainers, env, ports, volumes, volumeMounts…).

use serde_json::{Map, Value};

pub use crate::kube::fields::{list_kind, ListKind};

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn key_matches(item: &Value, other: &Value, keys: &[&str]) -> bool {
    keys.iter().all(|k| item.get(*k) == other.get(*k))
}

/// Strategic merge patch: like a merge patch, but keyed lists merge by key
/// and `$patch: delete|replace`, `$deleteFromPrimitiveList/…` and
/// `$setElementOrder/…` directives are honoured.
pub fn strategic_merge(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if p.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.as_object_mut().expect("object").remove("$patch");
        *target = replaced;
        return;
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if k == "$patch" || k.starts_with("$setElementOrder/") || k.starts_with("$retainKeys") {
            continue;
        }
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Some(remove)) = (t.get_mut(field), v.as_array()) {
                list.retain(|x| !remove.contains(x));
            }
            continue;
        }
        if v.is_null() || v.get("$patch").and_then(Value::as_str) == Some("delete") {
            t.remove(k);
            continue;
        }
        let order = p.get(&format!("$setElementOrder/{k}")).and_then(Value::as_array).cloned();
        match (t.get_mut(k), v) {
            (Some(Value::Array(existing)), Value::Array(items)) => {
                let sample: Vec<Value> = existing
                    .iter()
                    .chain(items.iter())
                    .filter(|i| !i.get("$patch").is_some_and(|p| p == "delete") || i.is_object())
                    .cloned()
                    .collect();
                let original = existing.clone();
                match list_kind(Some(k), &sample) {
                    ListKind::Map(keys) => {
                        for item in items {
                            let pos = existing.iter().position(|e| key_matches(e, item, &keys));
                            let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                            match (pos, delete) {
                                (Some(i), true) => {
                                    existing.remove(i);
                                }
                                (None, true) => {}
                                (Some(i), false) => strategic_merge(&mut existing[i], item),
                                (None, false) => {
                                    let mut fresh = Value::Object(Map::new());
                                    strategic_merge(&mut fresh, item);
                                    existing.push(fresh);
                                }
                            }
                        }
                        let same = |a: &Value, b: &Value| key_matches(a, b, &keys);
                        let merged = std::mem::take(existing);
                        *existing = normalize_order(merged, order.as_deref().unwrap_or(items), &original, &same);
                    }
                    ListKind::Set => {
                        for item in items {
                            if !existing.contains(item) {
                                existing.push(item.clone());
                            }
                        }
                        let merged = std::mem::take(existing);
                        *existing =
                            normalize_order(merged, order.as_deref().unwrap_or(items), &original, &|a, b| a == b);
                    }
                    ListKind::Atomic => *existing = items.clone(),
                }
            }
            (Some(existing @ Value::Object(_)), Value::Object(_)) => strategic_merge(existing, v),
            _ => {
                let mut fresh = if v.is_object() { Value::Object(Map::new()) } else { Value::Null };
                if v.is_object() {
                    strategic_merge(&mut fresh, v);
                } else {
                    fresh = strip_directives(v);
                }
                t.insert(k.clone(), fresh);
            }
        }
    }
}

/// The order of a merged list, as the API server's strategic merge sets it
/// (apimachinery's `normalizeElementOrder` and `mergeSortedSlice`): the
/// patch's items in the patch's order (or its `$setElementOrder`), the
/// server-only items in the live order, interleaved by the live order where
/// both sides were there before; an item new to the list goes before the
/// server-only item it is compared with. So adding a container `side` to
/// `[web]` gives `[side, web]`, as a real server answers.
fn normalize_order(
    merged: Vec<Value>,
    patch_order: &[Value],
    live: &[Value],
    same: &dyn Fn(&Value, &Value) -> bool,
) -> Vec<Value> {
    let index = |list: &[Value], v: &Value| list.iter().position(|x| same(x, v));
    let (mut patched, mut server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|m| index(patch_order, m).is_some());
    patched.sort_by_key(|m| index(patch_order, m));
    server_only.sort_by_key(|m| index(live, m).unwrap_or(usize::MAX));
    let (mut left, mut right) = (server_only.into_iter().peekable(), patched.into_iter().peekable());
    let mut out = Vec::new();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((index(live, l), index(live, r)), (Some(li), Some(ri)) if li < ri),
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    out
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), strip_directives(v))).collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// An RFC 6902 failure, for a 422 or 409.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct JsonPatchError(pub String);

fn pointer_parts(path: &str) -> Result<Vec<String>, JsonPatchError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(JsonPatchError(format!("invalid JSON pointer {path:?}")));
    };
    Ok(rest.split('/').map(|p| p.replace("~1", "/").replace("~0", "~")).collect())
}

fn parent_mut<'a>(doc: &'a mut Value, parts: &[String]) -> Result<&'a mut Value, JsonPatchError> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => {
                m.get_mut(p).ok_or_else(|| JsonPatchError(format!("path segment {p:?} does not exist")))?
            }
            Value::Array(a) => {
                let i: usize = p.parse().map_err(|_| JsonPatchError(format!("{p:?} is not an array index")))?;
                a.get_mut(i).ok_or_else(|| JsonPatchError(format!("index {i} is out of range")))?
            }
            _ => return Err(JsonPatchError(format!("cannot descend into a scalar at {p:?}"))),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), JsonPatchError> {
    let parts = pointer_parts(path)?;
    let Some((last, parents)) = parts.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last.parse().map_err(|_| JsonPatchError(format!("{last:?} is not an array index")))?;
                if i > a.len() {
                    return Err(JsonPatchError(format!("index {i} is out of range")));
                }
                a.insert(i, value);
            }
        }
        _ => return Err(JsonPatchError(format!("cannot add to a scalar at {path}"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, JsonPatchError> {
    let parts = pointer_parts(path)?;
    let Some((last, parents)) = parts.split_last() else {
        return Err(JsonPatchError("cannot remove the whole document".into()));
    };
    match parent_mut(doc, parents)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| JsonPatchError(format!("{path} does not exist"))),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| JsonPatchError(format!("{last:?} is not an array index")))?;
            if i >= a.len() {
                return Err(JsonPatchError(format!("index {i} is out of range")));
            }
            Ok(a.remove(i))
        }
        _ => Err(JsonPatchError(format!("cannot remove from a scalar at {path}"))),
    }
}

/// Applies an RFC 6902 patch document.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), JsonPatchError> {
    let ops = ops.as_array().ok_or_else(|| JsonPatchError("a JSON patch is a list of operations".into()))?;
    for op in ops {
        let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
        let path =
            op.get("path").and_then(Value::as_str).ok_or_else(|| JsonPatchError("operation without a path".into()))?;
        match kind {
            "add" => add(doc, path, op.get("value").cloned().unwrap_or(Value::Null))?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, op.get("value").cloned().unwrap_or(Value::Null))?;
            }
            "move" | "copy" => {
                let from = op
                    .get("from")
                    .and_then(Value::as_str)
                    .ok_or_else(|| JsonPatchError(format!("{kind} without from")))?;
                let v = if kind == "move" {
                    remove(doc, from)?
                } else {
                    doc.pointer(from).cloned().ok_or_else(|| JsonPatchError(format!("{from} does not exist")))?
                };
                add(doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != op.get("value") {
                    return Err(JsonPatchError(format!("test failed at {path}")));
                }
            }
            other => return Err(JsonPatchError(format!("unknown operation {other:?}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
    }

    #[test]
    fn strategic_merge_merges_containers_by_name() {
        let mut doc = json!({"spec": {"containers": [{"name": "app", "image": "a:1", "env": [{"name": "X", "value": "1"}]}, {"name": "side", "image": "s:1"}]}});
        strategic_merge(
            &mut doc,
            &json!({"spec": {"containers": [{"name": "app", "image": "a:2", "env": [{"name": "Y", "value": "2"}]}, {"name": "side", "$patch": "delete"}]}}),
        );
        assert_eq!(
            doc,
            // The new env var goes first, as the API server orders a merged list.
            json!({"spec": {"containers": [{"name": "app", "image": "a:2", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}]}]}})
        );
    }

    #[test]
    fn strategic_merge_replaces_atomic_lists_and_unions_finalizers() {
        let mut doc = json!({"metadata": {"finalizers": ["a"]}, "spec": {"args": ["x", "y"]}});
        strategic_merge(&mut doc, &json!({"metadata": {"finalizers": ["b"]}, "spec": {"args": ["z"]}}));
        // A new item goes before the live one, as apimachinery's mergeSortedSlice orders it.
        assert_eq!(doc, json!({"metadata": {"finalizers": ["b", "a"]}, "spec": {"args": ["z"]}}));
        strategic_merge(&mut doc, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}));
        assert_eq!(doc["metadata"]["finalizers"], json!(["b"]));
    }

    #[test]
    fn strategic_merge_orders_lists_as_the_api_server_does() {
        let web = json!({"name": "web", "image": "w"});
        let side = json!({"name": "side", "image": "s"});
        // A container added by a patch goes first (a real v1.36 server: [side, web]).
        let mut doc = json!({"containers": [web]});
        strategic_merge(&mut doc, &json!({"containers": [side]}));
        assert_eq!(names(&doc), ["side", "web"]);
        // A patch naming both keeps its own order.
        let mut doc = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        strategic_merge(&mut doc, &json!({"containers": [{"name": "b", "image": "x"}, {"name": "a", "image": "y"}]}));
        assert_eq!(names(&doc), ["b", "a"]);
        // Untouched items keep their places among those the patch changes.
        let mut doc = json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]});
        strategic_merge(&mut doc, &json!({"containers": [{"name": "c", "image": "x"}]}));
        assert_eq!(names(&doc), ["a", "b", "c"]);
        // $setElementOrder decides the patch's order (what kubectl apply sends).
        let mut doc = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        strategic_merge(
            &mut doc,
            &json!({"$setElementOrder/containers": [{"name": "b"}, {"name": "n"}, {"name": "a"}], "containers": [{"name": "n"}]}),
        );
        assert_eq!(names(&doc), ["b", "n", "a"]);
    }

    fn names(doc: &Value) -> Vec<&str> {
        doc["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect()
    }

    #[test]
    fn json_patch_ops() {
        let mut doc = json!({"a": [1, 2], "b": {"c": 1}});
        json_patch(
            &mut doc,
            &json!([
                {"op": "add", "path": "/a/-", "value": 3},
                {"op": "replace", "path": "/b/c", "value": 2},
                {"op": "move", "from": "/b/c", "path": "/d"},
                {"op": "test", "path": "/d", "value": 2},
                {"op": "remove", "path": "/a/0"}
            ]),
        )
        .unwrap();
        assert_eq!(doc, json!({"a": [2, 3], "b": {}, "d": 2}));
        assert!(json_patch(&mut doc, &json!([{"op": "test", "path": "/d", "value": 9}])).is_err());
        assert!(json_patch(&mut doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }
}
