//! Just enough OpenAPI v3 for kubectl: the index of group-versions and, per
//! group-version, each resource's PATCH operation with its GVK and the
//! `fieldValidation` parameter — which tells kubectl the server validates
//! fields itself, so it does not need schemas to validate client-side.
//! Schemas are not served (`kubectl explain` reports it cannot find them).
//!
//! And the same as OpenAPI v2 (`/openapi/v2`, JSON or the protobuf kubectl
//! asks for): kubectl validates the items of a `kind: List` through it, and
//! a definition it does not find is left to the server's own validation.

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

/// Every served resource's GET and PATCH operations (the PATCH with the
/// query parameters kubectl looks for), as (path, GVK, namespaced).
fn operations(reg: &Registry) -> Vec<(String, (String, String, String))> {
    let mut out: Vec<(String, (String, String, String))> = reg
        .all()
        .map(|t| {
            let base = format!("/{}", gv_path(&t.group, &t.version));
            let path = if t.namespaced {
                format!("{base}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
            } else {
                format!("{base}/{}/{{name}}", t.plural)
            };
            (path, (t.group.clone(), t.version.clone(), t.kind.clone()))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

const QUERY_PARAMS: [(&str, &str); 4] =
    [("fieldValidation", "string"), ("fieldManager", "string"), ("force", "boolean"), ("dryRun", "string")];

/// `/openapi/v2` as JSON (Swagger 2.0).
pub fn v2(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let params: Vec<Value> =
        QUERY_PARAMS.iter().map(|(n, t)| json!({"name": n, "in": "query", "type": t, "uniqueItems": true})).collect();
    for (path, (g, v, k)) in operations(reg) {
        let gvk = json!({"group": g, "version": v, "kind": k});
        paths.insert(
            path,
            json!({
                "get": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "get", "responses": {"200": {"description": "OK"}}},
                "patch": {"x-kubernetes-group-version-kind": gvk, "x-kubernetes-action": "patch", "parameters": params, "responses": {"200": {"description": "OK"}}},
            }),
        );
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes (pinfleet sim)", "version": "unversioned"}, "paths": paths, "definitions": {}})
}

/// The media type of `/openapi/v2` in protobuf (kubectl asks with the older
/// `…spec.v2@v1.0+protobuf`, which Go cannot parse back).
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `/openapi/v2` as protobuf: gnostic's `openapi_v2.Document`, the fields
/// this document uses (field numbers from its OpenAPIv2.proto).
pub fn v2_protobuf(reg: &Registry) -> Vec<u8> {
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return;
            }
            out.push(b | 0x80);
        }
    }
    fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
        varint(out, ((field as u64) << 3) | 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    fn boolean(out: &mut Vec<u8>, field: u32) {
        varint(out, (field as u64) << 3);
        out.push(1);
    }
    let named_any = |name: &str, yaml: &str| {
        let mut any = Vec::new();
        bytes(&mut any, 2, yaml.as_bytes());
        let mut n = Vec::new();
        bytes(&mut n, 1, name.as_bytes());
        bytes(&mut n, 2, &any);
        n
    };
    let ok_responses = {
        let mut resp = Vec::new();
        bytes(&mut resp, 1, b"OK");
        let mut value = Vec::new();
        bytes(&mut value, 1, &resp);
        let mut named = Vec::new();
        bytes(&mut named, 1, b"200");
        bytes(&mut named, 2, &value);
        let mut responses = Vec::new();
        bytes(&mut responses, 1, &named);
        responses
    };
    let parameters: Vec<Vec<u8>> = QUERY_PARAMS
        .iter()
        .map(|(name, ty)| {
            let mut q = Vec::new();
            bytes(&mut q, 2, b"query");
            bytes(&mut q, 4, name.as_bytes());
            bytes(&mut q, 6, ty.as_bytes());
            boolean(&mut q, 20);
            let mut non_body = Vec::new();
            bytes(&mut non_body, 3, &q);
            let mut parameter = Vec::new();
            bytes(&mut parameter, 2, &non_body);
            let mut item = Vec::new();
            bytes(&mut item, 1, &parameter);
            item
        })
        .collect();
    let mut paths = Vec::new();
    for (path, (g, v, k)) in operations(reg) {
        let gvk = format!("group: \"{g}\"\nkind: \"{k}\"\nversion: \"{v}\"\n");
        let op = |action: &str, with_params: bool| {
            let mut op = Vec::new();
            if with_params {
                for p in &parameters {
                    bytes(&mut op, 8, p);
                }
            }
            bytes(&mut op, 9, &ok_responses);
            bytes(&mut op, 13, &named_any("x-kubernetes-group-version-kind", &gvk));
            bytes(&mut op, 13, &named_any("x-kubernetes-action", &format!("{action}\n")));
            op
        };
        let mut item = Vec::new();
        bytes(&mut item, 2, &op("get", false));
        bytes(&mut item, 8, &op("patch", true));
        let mut named = Vec::new();
        bytes(&mut named, 1, path.as_bytes());
        bytes(&mut named, 2, &item);
        bytes(&mut paths, 2, &named);
    }
    let mut info = Vec::new();
    bytes(&mut info, 1, b"Kubernetes (pinfleet sim)");
    bytes(&mut info, 2, b"unversioned");
    let mut doc = Vec::new();
    bytes(&mut doc, 1, b"2.0");
    bytes(&mut doc, 2, &info);
    bytes(&mut doc, 8, &paths);
    bytes(&mut doc, 9, &[]);
    doc
}
