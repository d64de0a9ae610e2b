//! `pkg/apis/coordination/validation`: a Lease's spec (the leader
//! elections of controllers and kubelets write them).

use serde_json::Value;

use super::{invalid, FieldError};

/// `ValidateLeaseSpec`.
pub(super) fn lease(spec: &Value, e: &mut Vec<FieldError>) {
    if let Some(n) = spec.get("leaseDurationSeconds").and_then(Value::as_i64).filter(|n| *n <= 0) {
        e.push(invalid("spec.leaseDurationSeconds", n, "must be greater than 0"));
    }
    if let Some(n) = spec.get("leaseTransitions").and_then(Value::as_i64).filter(|n| *n < 0) {
        e.push(invalid("spec.leaseTransitions", n, "must be greater than or equal to 0"));
    }
}
