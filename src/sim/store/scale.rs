//! The scale subresource: an object's replicas and selector read and
//! written as an `autoscaling/v1` Scale, at the paths its type names.

use serde_json::{json, Value};

use super::{meta_str, ApiError, Inner, R};
use crate::sim::registry::{ResourceType, Scale};
use crate::sim::selector::LabelSelector;

impl Inner {
    pub fn get_scale(&self, t: &ResourceType, ns: &str, name: &str) -> R<Value> {
        let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
        Ok(scale_object(t, &self.get(t, ns, name)?, &scale))
    }

    pub fn update_scale(&mut self, t: &ResourceType, ns: &str, name: &str, body: &Value, manager: &str) -> R<Value> {
        let scale = t.scale.clone().ok_or_else(|| ApiError::not_found(t, name))?;
        let key = Self::key(t, ns, name);
        let old = self.objects.get(&key).map(|o| Value::clone(o)).ok_or_else(|| ApiError::not_found(t, name))?;
        let mut new = old.clone();
        set_path(&mut new, &scale.spec_replicas, body.pointer("/spec/replicas").cloned().unwrap_or(json!(0)));
        let out = self.commit(t, ns, name, old, new, manager, false, false)?;
        Ok(scale_object(t, &out, &scale))
    }
}

pub(super) fn set_path(obj: &mut Value, dotted: &str, v: Value) {
    let mut cur = obj;
    let parts: Vec<&str> = dotted.trim_start_matches('.').split('.').collect();
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == parts.len() - 1 {
            cur[*p] = v;
            return;
        }
        cur = cur.as_object_mut().expect("object").entry(p.to_string()).or_insert(json!({}));
    }
}

fn get_path<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    obj.pointer(&dotted.replace('.', "/"))
}

pub(super) fn scale_object(t: &ResourceType, obj: &Value, scale: &Scale) -> Value {
    let selector = scale
        .label_selector
        .as_deref()
        .and_then(|p| get_path(obj, p))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| obj.pointer("/spec/selector").map(|s| LabelSelector::from_label_selector(s).to_string()))
        .unwrap_or_default();
    let _ = t;
    json!({
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {"name": meta_str(obj, "name"), "namespace": meta_str(obj, "namespace"), "uid": meta_str(obj, "uid"), "resourceVersion": meta_str(obj, "resourceVersion"), "creationTimestamp": meta_str(obj, "creationTimestamp")},
        "spec": {"replicas": get_path(obj, &scale.spec_replicas).cloned().unwrap_or(json!(0))},
        "status": {"replicas": get_path(obj, &scale.status_replicas).cloned().unwrap_or(json!(0)), "selector": selector},
    })
}
