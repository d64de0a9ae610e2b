//! `pkg/apis/policy/validation`: a PodDisruptionBudget's spec (one of
//! minAvailable or maxUnavailable, each a count or a percentage; its selector's labels).

use serde_json::{json, Value};

use super::meta::labels;
use super::{invalid, since, FieldError};

/// `ValidatePodDisruptionBudgetSpec`.
pub(super) fn pdb(spec: &Value, e: &mut Vec<FieldError>) {
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        // From 1.36 the bad value is the internal Go struct, which has no
        // JSON tags: its field names, in its order, with nil as null.
        let shown = if since(36) {
            json!({
                "MinAvailable": min,
                "Selector": spec.get("selector").filter(|v| !v.is_null()),
                "MaxUnavailable": max,
                "UnhealthyPodEvictionPolicy": spec.get("unhealthyPodEvictionPolicy").filter(|v| !v.is_null()),
            })
        } else {
            spec.clone()
        };
        e.push(invalid("spec", shown, "minAvailable and maxUnavailable cannot be both set"));
    }
    for (field, v) in [("minAvailable", min), ("maxUnavailable", max)] {
        match v {
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => {
                e.push(invalid(format!("spec.{field}"), n.as_i64().unwrap_or(0), "must be greater than or equal to 0"))
            }
            Some(Value::String(p)) => match p.strip_suffix('%').and_then(|n| n.parse::<u32>().ok()) {
                None => e.push(invalid(
                    format!("spec.{field}"),
                    p.as_str(),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
                Some(n) if n > 100 => {
                    e.push(invalid(format!("spec.{field}"), p.as_str(), "must not be greater than 100%"))
                }
                _ => {}
            },
            _ => {}
        }
    }
    if let Some(sel) = spec.get("selector") {
        labels(sel.get("matchLabels"), "spec.selector.matchLabels", e);
    }
}
