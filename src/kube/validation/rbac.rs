//! `pkg/apis/rbac/validation`: the rules of Roles and ClusterRoles and
//! the bindings to them (a roleRef that names a role and never changes, subjects of known kinds).

use serde_json::Value;

use super::{invalid, items, not_supported, required, s, FieldError};

/// `ValidatePolicyRule` for each rule of a Role or ClusterRole.
pub(super) fn rbac_rules(kind: &str, obj: &Value, e: &mut Vec<FieldError>) {
    for (i, r) in items(obj.get("rules")).iter().enumerate() {
        let p = format!("rules[{i}]");
        if items(r.get("verbs")).is_empty() {
            e.push(required(format!("{p}.verbs"), "verbs must contain at least one value"));
        }
        let urls = !items(r.get("nonResourceURLs")).is_empty();
        if urls {
            if kind == "Role" {
                e.push(invalid(
                    format!("{p}.nonResourceURLs"),
                    r["nonResourceURLs"].clone(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !items(r.get("apiGroups")).is_empty() || !items(r.get("resources")).is_empty() {
                e.push(invalid(
                    format!("{p}.nonResourceURLs"),
                    r["nonResourceURLs"].clone(),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if items(r.get("apiGroups")).is_empty() {
            e.push(required(format!("{p}.apiGroups"), "resource rules must supply at least one api group"));
        }
        if items(r.get("resources")).is_empty() {
            e.push(required(format!("{p}.resources"), "resource rules must supply at least one resource"));
        }
    }
}

/// `ValidateRoleBinding` and its update rule (roleRef is immutable).
pub(super) fn role_binding(kind: &str, obj: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    let rr = obj.get("roleRef").unwrap_or(&Value::Null);
    let allowed: &[&str] = if kind == "RoleBinding" { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    let rk = s(rr, "/kind").unwrap_or_default();
    if !allowed.contains(&rk) {
        e.push(not_supported("roleRef.kind", rk, allowed));
    }
    let ag = s(rr, "/apiGroup").unwrap_or_default();
    if ag != "rbac.authorization.k8s.io" {
        e.push(not_supported("roleRef.apiGroup", ag, &["rbac.authorization.k8s.io"]));
    }
    if s(rr, "/name").unwrap_or_default().is_empty() {
        e.push(required("roleRef.name", ""));
    }
    for (i, sub) in items(obj.get("subjects")).iter().enumerate() {
        let p = format!("subjects[{i}]");
        if s(sub, "/name").unwrap_or_default().is_empty() {
            e.push(required(format!("{p}.name"), ""));
        }
        let k = s(sub, "/kind").unwrap_or_default();
        if !["ServiceAccount", "User", "Group"].contains(&k) {
            e.push(not_supported(format!("{p}.kind"), k, &["ServiceAccount", "User", "Group"]));
        }
    }
    if let Some(old) = old {
        if old.get("roleRef") != obj.get("roleRef") {
            e.push(invalid("roleRef", rr.clone(), "cannot change roleRef"));
        }
    }
}
