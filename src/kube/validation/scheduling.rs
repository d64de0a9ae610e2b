//! `pkg/apis/scheduling/validation`: PriorityClasses (the reserved
//! `system-` names, the ceiling on a user's value, a value that never changes).

use serde_json::Value;

use super::{forbidden, not_supported, s, FieldError};

/// `ValidatePriorityClass` and its update rule.
pub(super) fn priority_class(obj: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    let name = s(obj, "/metadata/name").unwrap_or_default();
    let value = obj.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global_default = obj.get("globalDefault").and_then(Value::as_bool).unwrap_or(false);
    if name.starts_with("system-") {
        // `IsKnownSystemPriorityClass`: the two built-in classes, each with
        // its own value and never the global default.
        let known = [("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];
        let why = match known.iter().find(|(n, _)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((n, v)) if *v != value => Some(format!("value of {n} PriorityClass must be {v}")),
            Some((n, _)) if global_default => Some(format!("globalDefault of {n} PriorityClass must be false")),
            Some(_) => None,
        };
        if let Some(why) = why {
            let base = "priority class names with 'system-' prefix are reserved for system use only";
            e.push(forbidden("metadata.name", &format!("{base}. error: {why}")));
        }
    } else if value > 1_000_000_000 {
        e.push(forbidden("value", "maximum allowed value of a user defined priority is 1000000000"));
    }
    if let Some(p) = s(obj, "/preemptionPolicy") {
        if !["Never", "PreemptLowerPriority"].contains(&p) {
            e.push(not_supported("preemptionPolicy", p, &["Never", "PreemptLowerPriority"]));
        }
    }
    if let Some(old) = old {
        if old.get("value") != obj.get("value") {
            e.push(forbidden("value", "may not be changed in an update."));
        }
    }
}
