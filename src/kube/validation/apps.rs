//! `pkg/apis/apps/validation`: Deployments, ReplicaSets, DaemonSets and
//! StatefulSets (a selector that matches the pod template, restartPolicy
//! Always, and what an update may not change). Pod templates go on to `pod`.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::meta::labels;
use super::pod::pod_template;
use super::{entries, forbidden, invalid, items, non_negative, required, s, FieldError};

/// A label selector as a predicate over labels (`LabelSelectorAsSelector`).
fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_label = entries(sel.get("matchLabels")).into_iter().all(|(k, v)| get(k) == v.as_str());
    let by_expr = items(sel.get("matchExpressions")).iter().all(|x| {
        let key = s(x, "/key").unwrap_or_default();
        let values: Vec<&str> = items(x.get("values")).iter().filter_map(Value::as_str).collect();
        match s(x, "/operator").unwrap_or_default() {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        }
    });
    by_label && by_expr
}

/// Deployment, ReplicaSet, DaemonSet, StatefulSet: a selector that matches
/// the template, restartPolicy Always, and what may not change.
pub(super) fn replicated(kind: &str, spec: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    non_negative(spec, "replicas", "spec", e);
    non_negative(spec, "minReadySeconds", "spec", e);
    let template = spec.get("template");
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => {
            e.push(required("spec.selector", ""));
            // A missing selector selects nothing, so the template's labels
            // do not match it either (the API server reports both).
            if template.is_some() {
                let tl = template.and_then(|t| t.pointer("/metadata/labels")).cloned().unwrap_or(Value::Null);
                e.push(invalid("spec.template.metadata.labels", tl, "`selector` does not match template `labels`"));
            }
        }
        Some(sel) => {
            labels(sel.get("matchLabels"), "spec.selector.matchLabels", e);
            let empty = entries(sel.get("matchLabels")).is_empty() && items(sel.get("matchExpressions")).is_empty();
            if empty {
                let what = kind.to_ascii_lowercase();
                e.push(invalid("spec.selector", sel.clone(), format!("empty selector is invalid for {what}")));
            } else if let Some(t) = template {
                let tl = t.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
                if !selector_matches(sel, &tl) {
                    e.push(invalid("spec.template.metadata.labels", tl, "`selector` does not match template `labels`"));
                }
            }
        }
    }
    // A StatefulSet's pods get a volume per claim template (the API server
    // validates the template with those names among its volumes).
    let claims: BTreeSet<String> = if kind == "StatefulSet" {
        items(spec.get("volumeClaimTemplates"))
            .iter()
            .filter_map(|c| s(c, "/metadata/name"))
            .map(str::to_string)
            .collect()
    } else {
        BTreeSet::new()
    };
    pod_template(template, "spec.template", &["Always"], &claims, e);
    let Some(old) = old else { return };
    if kind == "StatefulSet" {
        // ValidateStatefulSetUpdate: only these spec fields may change.
        let allowed = [
            "replicas",
            "template",
            "updateStrategy",
            "minReadySeconds",
            "ordinals",
            "revisionHistoryLimit",
            "persistentVolumeClaimRetentionPolicy",
        ];
        let rest = |v: &Value| -> Value {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| !allowed.contains(&k.as_str()));
            }
            v
        };
        if rest(spec) != rest(old) {
            e.push(forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"));
        }
    } else if let (Some(new), Some(was)) = (spec.get("selector"), old.get("selector")) {
        if new != was {
            e.push(invalid("spec.selector", new.clone(), "field is immutable"));
        }
    }
}
