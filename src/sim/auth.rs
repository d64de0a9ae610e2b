//! Who is asking and whether they may: the sim's authentication and RBAC
//! authorization, for the processes its kubelet runs (pinfleet's own
//! containers, under their pods' service accounts). Sits in front of the
//! store in [`super::server`]: a request with a bearer token the sim minted
//! is that service account's and is authorized as kube-apiserver's RBAC
//! authorizer does (ClusterRoleBindings, then the namespace's RoleBindings;
//! rules by API group, resource or resource/subresource, verb and resource
//! name); a token it did not mint is 401; a request without credentials is
//! the sim's administrator (what its kubeconfig holds), as before.
//!
//! Pure over the store's objects: [`authorize`] reads roles and bindings,
//! writes nothing. Not mirrored: aggregated ClusterRoles and the bootstrap
//! roles beyond discovery (a missing rule denies: the sim is stricter
//! there, never more permissive).

use serde_json::Value;

use super::store::Inner;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// A service account's user, as the token authenticator names it.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }
}

/// What a request asks to do (the authorizer's attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: Option<String>,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    pub name: Option<String>,
}

/// The verb of an HTTP request, as the request-info resolver derives it.
pub fn verb(method: &str, named: bool, watch: bool) -> &'static str {
    match (method, named, watch) {
        ("GET", _, true) => "watch",
        ("GET", true, _) => "get",
        ("GET", false, _) => "list",
        ("POST", ..) => "create",
        ("PUT", ..) => "update",
        ("PATCH", ..) => "patch",
        ("DELETE", true, _) => "delete",
        ("DELETE", false, _) => "deletecollection",
        _ => "unknown",
    }
}

/// Paths every authenticated user may read (the `system:discovery` and
/// `system:public-info-viewer` bootstrap roles).
pub fn discovery_path(segs: &[&str]) -> bool {
    matches!(segs.first(), Some(&"api" | &"apis" | &"version" | &"openapi" | &"healthz" | &"livez" | &"readyz"))
        && (segs.len() <= 3 || segs.first() == Some(&"openapi"))
}

fn strs(v: Option<&Value>) -> Vec<&str> {
    v.and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default()
}

fn rule_allows(rule: &Value, a: &Attributes) -> bool {
    let verbs = strs(rule.get("verbs"));
    let groups = strs(rule.get("apiGroups"));
    let resources = strs(rule.get("resources"));
    let names = strs(rule.get("resourceNames"));
    let resource = match &a.subresource {
        Some(s) => format!("{}/{s}", a.resource),
        None => a.resource.clone(),
    };
    let resource_ok = resources.iter().any(|r| {
        *r == "*" || *r == resource || (a.subresource.is_some() && r.strip_prefix("*/") == a.subresource.as_deref())
    });
    let name_ok = names.is_empty() || a.name.as_deref().is_some_and(|n| names.contains(&n));
    verbs.iter().any(|v| *v == "*" || *v == a.verb)
        && groups.iter().any(|g| *g == "*" || *g == a.group)
        && resource_ok
        && name_ok
}

fn subject_matches(s: &Value, user: &User, binding_ns: &str) -> bool {
    let kind = s.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "ServiceAccount" => {
            let ns = s.get("namespace").and_then(Value::as_str).unwrap_or(binding_ns);
            user.name == format!("system:serviceaccount:{ns}:{name}")
        }
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        _ => false,
    }
}

/// The rules of the role a binding names (a Role in the binding's
/// namespace, or a ClusterRole).
fn role_rules<'a>(inner: &'a Inner, binding: &Value, ns: &str) -> Vec<&'a Value> {
    let kind = binding.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or_default();
    let name = binding.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default();
    let role = match kind {
        "ClusterRole" => inner.peek("rbac.authorization.k8s.io", "clusterroles", "", name),
        "Role" => inner.peek("rbac.authorization.k8s.io", "roles", ns, name),
        _ => None,
    };
    role.and_then(|r| r.get("rules")).and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default()
}

/// Whether `user` may do `a`: Ok, or the API server's Forbidden message.
pub fn authorize(inner: &Inner, user: &User, a: &Attributes) -> Result<(), String> {
    let grants = |binding: &Value, ns: &str| {
        let subjects = binding.get("subjects").and_then(Value::as_array);
        subjects.is_some_and(|ss| ss.iter().any(|s| subject_matches(s, user, ns)))
            && role_rules(inner, binding, ns).iter().any(|r| rule_allows(r, a))
    };
    let cluster_wide =
        inner.scan("rbac.authorization.k8s.io", "clusterrolebindings", None).into_iter().any(|b| grants(b, ""));
    let in_namespace = !a.namespace.is_empty()
        && inner
            .scan("rbac.authorization.k8s.io", "rolebindings", Some(&a.namespace))
            .into_iter()
            .any(|b| grants(b, &a.namespace));
    if cluster_wide || in_namespace {
        return Ok(());
    }
    let what = match &a.name {
        Some(n) => format!("{} \"{n}\"", a.resource),
        None => a.resource.clone(),
    };
    let resource = match &a.subresource {
        Some(s) => format!("{}/{s}", a.resource),
        None => a.resource.clone(),
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    Err(format!(
        "{what} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\" {scope}",
        user.name, a.verb, a.group
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attrs(verb: &str, resource: &str, ns: &str, name: Option<&str>) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: "".into(),
            resource: resource.into(),
            subresource: None,
            namespace: ns.into(),
            name: name.map(str::to_string),
        }
    }

    #[test]
    fn a_rule_matches_group_resource_verb_and_name() {
        let rule = json!({"apiGroups": [""], "resources": ["configmaps", "pods/log"], "verbs": ["get", "list"], "resourceNames": []});
        assert!(rule_allows(&rule, &attrs("get", "configmaps", "x", Some("a"))));
        assert!(!rule_allows(&rule, &attrs("delete", "configmaps", "x", Some("a"))));
        let mut log = attrs("get", "pods", "x", Some("p"));
        log.subresource = Some("log".into());
        assert!(rule_allows(&rule, &log));
        assert!(!rule_allows(&rule, &attrs("get", "pods", "x", Some("p"))), "pods/log does not grant pods");
        let named =
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["only"]});
        assert!(rule_allows(&named, &attrs("get", "configmaps", "x", Some("only"))));
        assert!(!rule_allows(&named, &attrs("get", "configmaps", "x", Some("other"))));
        assert!(!rule_allows(&named, &attrs("list", "configmaps", "x", None)), "a list has no name to match");
    }

    #[test]
    fn verbs_as_the_request_info_resolver_names_them() {
        assert_eq!(verb("GET", false, true), "watch");
        assert_eq!(verb("GET", true, false), "get");
        assert_eq!(verb("GET", false, false), "list");
        assert_eq!(verb("DELETE", false, false), "deletecollection");
    }
}
