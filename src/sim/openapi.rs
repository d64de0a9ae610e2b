//! Just enough OpenAPI v3 for kubectl: the index of group-versions and, per
//! group-version, each resource's PATCH operation with its GVK and the
//! `fieldValidation` parameter — which tells kubectl the server validates
//! fields itself, so it does not need schemas to validate client-side.
//! Schemas are not served (`kubectl explain` reports it cannot find them).

use serde_json::{json, Map, Value};

use super::registry::Registry;

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The document for one group-version, if it is served.
pub fn group_version(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let mut paths = Map::new();
    let params = json!([
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
    ]);
    for t in reg.all().filter(|t| t.group == group && t.version == version) {
        let base = format!("/{}", gv_path(group, version));
        let path = if t.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{base}/{}/{{name}}", t.plural)
        };
        let gvk = json!({"group": t.group, "version": t.version, "kind": t.kind});
        paths.insert(
            path,
            json!({
                "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {"200": {"description": "OK"}}},
                "patch": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch", "parameters": params, "responses": {"200": {"description": "OK"}}},
            }),
        );
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (pinfleet sim)", "version": "unversioned"}, "paths": paths, "components": {"schemas": {}}}),
    )
}

/// `/openapi/v3`: every served group-version, with a hash that changes
/// when its document does (kubectl caches by it).
pub fn index(reg: &Registry) -> Value {
    use sha2::Digest;
    let mut gvs: Vec<(String, String)> = reg.all().map(|t| (t.group.clone(), t.version.clone())).collect();
    gvs.sort();
    gvs.dedup();
    let mut paths = Map::new();
    for (g, v) in gvs {
        let doc = group_version(reg, &g, &v).unwrap_or_default();
        let hash = hex::encode(sha2::Sha512::digest(doc.to_string().as_bytes())).to_uppercase();
        let p = gv_path(&g, &v);
        paths.insert(p.clone(), json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}")}));
    }
    json!({"paths": paths})
}
