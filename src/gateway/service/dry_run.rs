//! A submission's server-side dry run on the members: the workload and
//! every child the controller would render from it, on one reachable
//! member of each Kubernetes minor, each refusal put back at the
//! workload's field.

use std::collections::BTreeMap;

use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use serde_json::{json, Value};

use super::members::workload_api;
use super::{MemberCluster, MemberView, Service, MANAGER};
use crate::gateway::intake::Problem;

impl Service {
    /// A server-side dry run of the workload and of every child the
    /// controller would create from it, on one reachable member of each
    /// Kubernetes minor among them; each refusal at the workload's field.
    pub(super) async fn dry_run(&self, workload: &Value, views: &[MemberView]) -> Vec<Problem> {
        let mut by_minor: BTreeMap<Option<u32>, &MemberCluster> = BTreeMap::new();
        for v in views.iter().filter(|v| v.reachable) {
            if let Some(m) = self.members.iter().find(|m| m.name == v.name) {
                by_minor.entry(v.minor).or_insert(m);
            }
        }
        let kind = workload.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut problems: Vec<Problem> = Vec::new();
        for (minor, m) in by_minor {
            let at = match minor {
                Some(n) => format!("cluster {} (1.{n})", m.name),
                None => format!("cluster {}", m.name),
            };
            // Validation does not depend on the namespace: `default` always exists.
            let mut obj = workload.clone();
            obj["metadata"]["namespace"] = json!("default");
            let pp = PostParams { dry_run: true, field_manager: Some(MANAGER.into()) };
            let mut objects = vec![(workload_api(&m.client, &kind, "default"), obj.clone(), None)];
            let data = views.iter().find(|v| v.name == m.name).and_then(|v| v.profiles.clone()).unwrap_or_default();
            let pinned = obj.pointer("/spec/runtime/version").and_then(Value::as_str);
            if let Ok(profile) = crate::controller::profile_from(data, pinned) {
                let ctx = crate::workloads::render::Context {
                    cluster: m.name.clone(),
                    profile,
                    namespace_labels: Default::default(),
                };
                if let Ok(children) = crate::workloads::demand::children(&kind, &obj, &ctx) {
                    for mut c in children {
                        // Owned by a workload that does not exist yet: the
                        // reference would be refused for its empty uid.
                        if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
                            meta.remove("ownerReferences");
                        }
                        let api = child_api(&m.client, &c);
                        objects.push((api, c.clone(), Some(c)));
                    }
                }
            }
            for (api, body, child) in objects {
                let Ok(dynobj) = serde_json::from_value::<DynamicObject>(body) else { continue };
                match api.create(&pp, &dynobj).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                        for (field, message) in refusal_causes(&e.message) {
                            let field = match &child {
                                Some(c) if !field.is_empty() => crate::workloads::demand::field_of(workload, c, &field),
                                _ => field,
                            };
                            // The gateway's own check of the same rule said it already.
                            if !field.is_empty() && problems.iter().any(|p| p.field == field) {
                                continue;
                            }
                            problems.push(Problem::new("dry-run", field, format!("{at}: {message}")));
                        }
                    }
                    // 409: a child of that name exists in `default`: not a problem of this workload.
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!("dry run on {}: {e}", m.name),
                }
            }
        }
        problems
    }
}

/// The API resource of a child the controller renders.
fn child_api(client: &kube::Client, child: &Value) -> Api<DynamicObject> {
    let av = child["apiVersion"].as_str().unwrap_or_default();
    let kind = child["kind"].as_str().unwrap_or_default();
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') { format!("{lower}es") } else { format!("{lower}s") };
    let ar = ApiResource::from_gvk_with_plural(&kube::core::GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), "default", &ar)
}

/// `Deployment.apps "web" is invalid: [spec.a: Invalid value: …, spec.b: Required value]`
/// → each cause's field and message (the whole message when it has no list).
fn refusal_causes(message: &str) -> Vec<(String, String)> {
    let Some((_, list)) = message.split_once(" is invalid: ") else {
        return vec![(String::new(), message.to_string())];
    };
    let list = list.strip_prefix('[').and_then(|l| l.strip_suffix(']')).unwrap_or(list);
    let mut out: Vec<(String, String)> = Vec::new();
    for part in list.split(", ") {
        let field_like = |f: &str| {
            !f.is_empty()
                && !f.contains(' ')
                && f.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && f.contains('.')
                || f == "metadata"
                || f == "spec"
        };
        match part.split_once(": ") {
            Some((f, m)) if field_like(f) => out.push((f.to_string(), m.to_string())),
            _ => match out.last_mut() {
                Some(last) => {
                    last.1.push_str(", ");
                    last.1.push_str(part);
                }
                None => out.push((String::new(), part.to_string())),
            },
        }
    }
    out
}
