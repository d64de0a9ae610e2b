//! Where a pod may land, as kube-scheduler's filters decide it (pure):
//! its node selector and required node affinity against a node's labels
//! and name (NodeAffinity), and the taints it tolerates
//! (TaintToleration). The one reading both sides share: the sim's
//! scheduler binds pods by it, and the gateway's placement packs a
//! workload's pods only onto the nodes it lets them reach.
//!
//! ```text
//! pod (JSON: spec.nodeSelector, spec.affinity, spec.tolerations)
//!   + node (JSON: metadata.name, metadata.labels, spec.taints)
//!     │ affinity_ok, tolerates
//!     ▼
//! may the pod land there (resources aside: those are counted by the callers)
//! ```

use serde_json::{json, Value};

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or_default()
}

/// Whether `pod` tolerates `taint` (PreferNoSchedule is never a bar).
pub fn tolerates(pod: &Value, taint: &Value) -> bool {
    let effect = s(taint, "/effect");
    if effect == "PreferNoSchedule" {
        return true;
    }
    pod.pointer("/spec/tolerations").and_then(Value::as_array).is_some_and(|ts| {
        ts.iter().any(|t| {
            let key_ok = s(t, "/key").is_empty() && s(t, "/operator") == "Exists" || s(t, "/key") == s(taint, "/key");
            let value_ok = s(t, "/operator") == "Exists" || s(t, "/value") == s(taint, "/value");
            let effect_ok = s(t, "/effect").is_empty() || s(t, "/effect") == effect;
            key_ok && value_ok && effect_ok
        })
    })
}

/// Whether `pod`'s node selector and required node affinity reach `node`:
/// the selector's labels all held, and some term of the affinity (terms
/// ORed, a term's requirements ANDed; a term without any matches no
/// node; `matchFields` reads the node's name).
pub fn affinity_ok(pod: &Value, node: &Value) -> bool {
    let labels = node.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
    if let Some(sel) = pod.pointer("/spec/nodeSelector").and_then(Value::as_object) {
        if !sel.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            return false;
        }
    }
    let Some(terms) = pod
        .pointer("/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array)
    else {
        return true;
    };
    // Terms are ORed, a term's requirements ANDed; a term without any
    // matches no node (nodeaffinity's rule), and `matchFields` reads the
    // node's `metadata.name`.
    let node_name = node.pointer("/metadata/name").and_then(Value::as_str);
    terms.iter().any(|term| {
        let expressions = term.get("matchExpressions").and_then(Value::as_array);
        let fields = term.get("matchFields").and_then(Value::as_array);
        if expressions.is_none_or(Vec::is_empty) && fields.is_none_or(Vec::is_empty) {
            return false;
        }
        let fields_ok = fields.into_iter().flatten().all(|f| {
            let values: Vec<&str> = f
                .get("values")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let have = if s(f, "/key") == "metadata.name" { node_name } else { None };
            match s(f, "/operator") {
                "In" => have.is_some_and(|h| values.contains(&h)),
                "NotIn" => have.is_none_or(|h| !values.contains(&h)),
                _ => false,
            }
        });
        fields_ok
            && expressions.into_iter().flatten().all(|e| {
                let have = labels.get(s(e, "/key")).and_then(Value::as_str);
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match s(e, "/operator") {
                    "In" => have.is_some_and(|h| values.contains(&h)),
                    "NotIn" => have.is_none_or(|h| !values.contains(&h)),
                    "Exists" => have.is_some(),
                    "DoesNotExist" => have.is_none(),
                    _ => false,
                }
            })
    })
}
