//! The HTTP face of the emulator: Kubernetes REST paths over [`Inner`] —
//! discovery, get/list/watch, create, update, the four patch formats,
//! delete and deletecollection, and the status, scale and eviction
//! subresources — answering errors as real `Status` objects.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::registry::ResourceType;
use super::selector::{FieldSelector, LabelSelector};
use super::store::{ApiError, Event, Inner, Propagation, Sub, R};

pub use super::store::Shared;

/// Bookmarks are sent at this interval on watches that ask for them.
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);
/// A watch without timeoutSeconds ends after this long, as the real server
/// randomises between 30 and 60 minutes; clients re-watch.
const WATCH_MAX: Duration = Duration::from_secs(1800);

fn json_response(code: u16, v: &Value) -> Response {
    let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::OK), v.to_string()).into_response();
    r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    r
}

fn err(e: ApiError) -> Response {
    json_response(e.code, &e.status())
}

/// `pods/NAME/log`: the API server asks the pod's kubelet over TLS, which
/// answers only once its serving certificate is issued. The sim runs no
/// containers, so a served log is one line saying so.
fn pod_log(
    inner: &Inner,
    rt: &super::registry::ResourceType,
    ns: &str,
    name: &str,
    container: Option<&str>,
) -> Response {
    let pod = match inner.get(rt, ns, name) {
        Ok(p) => p,
        Err(e) => return err(e),
    };
    let container = container
        .map(str::to_string)
        .or_else(|| pod.pointer("/spec/containers/0/name").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default();
    let node_name = pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or_default();
    let nodes_t = inner.registry.get("", "v1", "nodes").cloned().expect("nodes");
    let Ok(node) = inner.get(&nodes_t, "", node_name) else {
        return err(ApiError::new(400, "BadRequest", format!("pod {name} does not have a host assigned")));
    };
    if !super::nodes::serves_tls(inner, &node) {
        let ip = node
            .pointer("/status/addresses")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
            .and_then(|x| x["address"].as_str())
            .unwrap_or(node_name);
        let msg = format!(
            "Get \"https://{ip}:10250/containerLogs/{ns}/{name}/{container}\": remote error: tls: internal error"
        );
        return err(ApiError::new(500, "InternalError", msg));
    }
    // A container the sim ran as a process ([`super::procs`]): its output.
    let uid = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
    if let Some(dir) = inner.pods_dir.as_ref().filter(|_| super::procs::is_own(&pod, &inner.own_images)) {
        let file = super::procs::log_file(dir, ns, name, uid, &container);
        let text = std::fs::read(&file).unwrap_or_default();
        return Response::builder()
            .status(200)
            .header("content-type", "text/plain")
            .body(axum::body::Body::from(text))
            .expect("a log response");
    }
    let body = match inner.etcd.output(ns, name, &container) {
        Some((_, out)) => out.clone(),
        None => format!("sim: container {container} of {ns}/{name} runs no process and writes no output\n"),
    };
    Response::builder()
        .status(200)
        .header("content-type", "text/plain")
        .body(axum::body::Body::from(body))
        .expect("a log response")
}

fn not_found_path(path: &str) -> Response {
    err(ApiError::new(404, "NotFound", format!("the server could not find the requested resource ({path})")))
}

struct Target {
    group: String,
    version: String,
    namespace: Option<String>,
    resource: String,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_target(inner: &Inner, segs: &[&str]) -> Option<Target> {
    let (group, version, rest) = match segs {
        ["api", v, rest @ ..] => (String::new(), v.to_string(), rest),
        ["apis", g, v, rest @ ..] => (g.to_string(), v.to_string(), rest),
        _ => return None,
    };
    let namespaced_path = rest.len() >= 3
        && rest[0] == "namespaces"
        && inner.registry.get(&group, &version, rest[2]).is_some_and(|t| t.namespaced);
    let (namespace, rest) = if namespaced_path { (Some(rest[1].to_string()), &rest[2..]) } else { (None, rest) };
    match rest {
        [res] => Some(Target { group, version, namespace, resource: res.to_string(), name: None, sub: None }),
        [res, name] => Some(Target {
            group,
            version,
            namespace,
            resource: res.to_string(),
            name: Some(name.to_string()),
            sub: None,
        }),
        [res, name, sub] => Some(Target {
            group,
            version,
            namespace,
            resource: res.to_string(),
            name: Some(name.to_string()),
            sub: Some(sub.to_string()),
        }),
        _ => None,
    }
}

fn discovery(inner: &Inner, segs: &[&str], port: u16) -> Option<Value> {
    Some(match segs {
        ["version"] => {
            // A kubeadm cluster's API servers run what its configuration names.
            // As the cluster's minor: a kubeadm cluster's API servers run
            // what its configuration names; otherwise the sim's own version.
            let v = inner.serving_version();
            let git = format!("v{v}");
            json!({"major": v.major.to_string(), "minor": v.minor.to_string(), "gitVersion": git, "gitCommit": "pinfleet", "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "n/a", "compiler": "rustc", "platform": "linux/amd64"})
        }
        ["api"] => {
            json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": format!("127.0.0.1:{port}")}]})
        }
        ["apis"] => {
            let groups: Vec<Value> = inner
                .registry
                .groups()
                .into_iter()
                .map(|(g, vs)| {
                    let versions: Vec<Value> =
                        vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
                    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        }
        ["apis", g] => {
            let vs = inner.registry.groups().remove(*g)?;
            let versions: Vec<Value> =
                vs.iter().map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v})).collect();
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": g, "versions": versions, "preferredVersion": versions[0]})
        }
        ["openapi", "v3"] => super::openapi::index(&inner.registry),
        ["openapi", "v3", "api", v] => super::openapi::group_version(&inner.registry, "", v)?,
        ["openapi", "v3", "apis", g, v] => super::openapi::group_version(&inner.registry, g, v)?,
        ["api", v] => inner.registry.resource_list("", v)?,
        ["apis", g, v] => inner.registry.resource_list(g, v)?,
        _ => return None,
    })
}

fn parse_body(content_type: &str, body: &Bytes) -> R<Value> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    if content_type.contains("protobuf") {
        return super::protobuf::decode(body).map_err(|e| match e {
            super::protobuf::DecodeError::UnknownKind(_) => ApiError::new(415, "UnsupportedMediaType", e.to_string()),
            _ => ApiError::new(400, "BadRequest", e.to_string()),
        });
    }
    if content_type.contains("cbor") {
        // Clients fall back to JSON on 415, as with a real server that does
        // not speak their preferred encoding.
        return Err(ApiError::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type})")));
    }
    let text = std::str::from_utf8(body).map_err(|_| ApiError::new(400, "BadRequest", "the body is not UTF-8"))?;
    if let Ok(v) = serde_json::from_str(text) {
        return Ok(v);
    }
    if content_type.contains("yaml") {
        let doc = crate::spec::yaml::parse_single(text, std::path::Path::new("request"))
            .map_err(|e| ApiError::new(400, "BadRequest", format!("the body is not valid YAML: {e}")))?;
        return Ok(doc.to_json());
    }
    Err(ApiError::new(400, "BadRequest", "the body is not valid JSON"))
}

fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .map(|q| {
            q.split('&')
                .filter_map(|kv| {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    Some((percent_decode(k), percent_decode(v)))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    // The real server names an unnamed manager after the client's user agent.
    headers
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn selectors(q: &HashMap<String, String>) -> R<(LabelSelector, FieldSelector)> {
    let l = LabelSelector::parse(q.get("labelSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::new(400, "BadRequest", e))?;
    let f = FieldSelector::parse(q.get("fieldSelector").map(String::as_str).unwrap_or(""))
        .map_err(|e| ApiError::new(400, "BadRequest", e))?;
    Ok((l, f))
}

/// Requests for Leases in flight. As a real API server's priority and
/// fairness gives leader election a level of its own, the simulated
/// controllers wait for these before taking the store for a pass: a
/// renewal is never queued behind the controllers' work.
#[derive(Debug, Clone, Default)]
pub struct LeaseRequests(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl LeaseRequests {
    fn enter(&self) -> LeaseRequest {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        LeaseRequest(self.clone())
    }

    /// Whether one is waiting for (or holding) the store.
    pub fn waiting(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::SeqCst) > 0
    }
}

/// One Lease request in flight, until dropped.
struct LeaseRequest(LeaseRequests);

impl Drop for LeaseRequest {
    fn drop(&mut self) {
        self.0 .0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

pub async fn handle(
    State((shared, port, leases)): State<(Shared, u16, LeaseRequests)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().trim_end_matches('/').to_string();
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let _lease = (segs.contains(&"coordination.k8s.io") && segs.contains(&"leases")).then(|| leases.enter());
    let quorum = shared.lock().map(|i| i.etcd.has_quorum() && i.etcd_manager.has_quorum()).expect("store lock");
    if method == Method::GET && matches!(segs.as_slice(), ["healthz"] | ["readyz"] | ["livez"]) {
        return health(segs[0], quorum);
    }
    // Without an etcd quorum every read and write times out in etcd.
    if !quorum && !matches!(segs.as_slice(), ["version"]) {
        return err(ApiError::new(500, "InternalError", "etcdserver: request timed out"));
    }
    let q = query(&uri);
    let content_type =
        headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("application/json").to_string();
    let user = match authenticate(&shared, &headers) {
        Ok(u) => u,
        Err(e) => return err(e),
    };
    let target = {
        let inner = shared.lock().expect("store lock");
        if method == Method::GET && (user.is_none() || super::auth::discovery_path(&segs)) {
            if let Some(r) = discovery_answer(&inner, &segs, &headers, port) {
                return r;
            }
        }
        parse_target(&inner, &segs)
    };
    let Some(t) = target else { return not_found_path(&path) };
    let rt: ResourceType = {
        let inner = shared.lock().expect("store lock");
        match inner.registry.get(&t.group, &t.version, &t.resource) {
            Some(rt) => rt.clone(),
            None => return not_found_path(&path),
        }
    };
    let ns = t.namespace.clone().unwrap_or_default();
    if let Some(user) = &user {
        let inner = shared.lock().expect("store lock");
        if let Err(e) = authorize(&inner, user, &method, &t, &rt, &q) {
            return err(e);
        }
    }
    if q.get("watch").is_some_and(|w| w == "true" || w == "1") && method == Method::GET {
        let as_table = headers.get("accept").and_then(|v| v.to_str().ok()).is_some_and(super::table::wants_table);
        return watch(shared, rt, t.namespace.clone(), t.name.clone(), &q, as_table).await;
    }
    if t.sub.as_deref() == Some("log") && rt.plural == "pods" && method == Method::GET {
        let inner = shared.lock().expect("store lock");
        return pod_log(
            &inner,
            &rt,
            &ns,
            t.name.as_deref().unwrap_or_default(),
            q.get("container").map(String::as_str),
        );
    }
    let body = match request_body(&t, &rt, &content_type, &body) {
        Ok(b) => b,
        Err(e) => return err(e),
    };
    // TokenReview and TokenRequest: the authenticator's, never stored.
    if method == Method::POST && rt.group == "authentication.k8s.io" && rt.plural == "tokenreviews" {
        let inner = shared.lock().expect("store lock");
        return json_response(201, &token_review(&inner, &body));
    }
    if method == Method::POST
        && rt.plural == "serviceaccounts"
        && rt.group.is_empty()
        && t.sub.as_deref() == Some("token")
    {
        let mut inner = shared.lock().expect("store lock");
        return token_request(&mut inner, &rt, &ns, t.name.as_deref().unwrap_or_default(), &body);
    }
    let mgr = manager(&q, &headers);
    let as_table = headers.get("accept").and_then(|v| v.to_str().ok()).is_some_and(super::table::wants_table);
    let dry_run = q.get("dryRun").is_some_and(|d| d == "All");
    let sub = match t.sub.as_deref() {
        None => Sub::Main,
        Some("status") if rt.status => Sub::Status,
        Some("scale") if rt.scale.is_some() => Sub::Scale,
        // The approval subresource writes the conditions of the status.
        Some("approval") if rt.plural == "certificatesigningrequests" && method != Method::POST => Sub::Status,
        Some("eviction") if rt.plural == "pods" && rt.group.is_empty() && method == Method::POST => Sub::Main,
        Some(_) => return not_found_path(&path),
    };
    let asked = std::time::Instant::now();
    let mut inner = shared.lock().expect("store lock");
    let held = std::time::Instant::now();
    // A write answers with the stored object; its event's text is the
    // answer's (serialized once, for the response and every watcher).
    let stored = |inner: &Inner, code: u16, o: std::sync::Arc<Value>| match inner.event_of(&o) {
        Some(ev) => Answer::Text(code, ev.object_json()),
        None => Answer::Shared(code, o),
    };
    let result: R<Answer> = (|| match (&method, t.name.as_deref()) {
        (&Method::GET, None) => list(&inner, &rt, t.namespace.as_deref(), &q, as_table),
        (&Method::GET, Some(name)) => match sub {
            Sub::Scale => Ok(Answer::Value(200, inner.get_scale(&rt, &ns, name)?)),
            _ if as_table => {
                let o = inner.get(&rt, &ns, name)?;
                let rv = o.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default().to_string();
                Ok(Answer::Value(200, super::table::table(&rt, &[o], &rv, None)))
            }
            _ => Ok(Answer::Value(200, inner.get(&rt, &ns, name)?)),
        },
        (&Method::POST, None) => {
            let out = inner.create_shared(&rt, &ns, body, &mgr, dry_run)?;
            Ok(stored(&inner, 201, out))
        }
        (&Method::POST, Some(name)) if t.sub.as_deref() == Some("eviction") => {
            let grace = body.pointer("/deleteOptions/gracePeriodSeconds").and_then(Value::as_i64);
            Ok(Answer::Value(201, inner.evict(&ns, name, grace)?))
        }
        (&Method::PUT, Some(name)) => match sub {
            Sub::Scale => Ok(Answer::Value(200, inner.update_scale(&rt, &ns, name, &body, &mgr)?)),
            s => {
                let out = inner.update_shared(&rt, &ns, name, body, &mgr, s, dry_run)?;
                Ok(stored(&inner, 200, out))
            }
        },
        (&Method::PATCH, Some(name)) => {
            let force = q.get("force").is_some_and(|f| f == "true");
            let exists = inner.contains(&rt, &ns, name);
            let out = inner.patch_shared(&rt, &ns, name, &content_type, body, &mgr, force, sub, dry_run)?;
            Ok(stored(&inner, if exists { 200 } else { 201 }, out))
        }
        (&Method::DELETE, Some(name)) => delete(&mut inner, &rt, &ns, name, &q, &body, dry_run),
        (&Method::DELETE, None) => delete_collection(&mut inner, &rt, t.namespace.as_deref(), &q, dry_run),
        _ => Err(ApiError::new(405, "MethodNotAllowed", format!("{method} is not supported on {path}"))),
    })();
    drop(inner);
    // What a slow answer waited for (`RUST_LOG=pinfleet::sim=debug`).
    if held.elapsed() >= SLOW || held - asked >= SLOW {
        let (waited, held) = ((held - asked).as_millis() as u64, held.elapsed().as_millis() as u64);
        tracing::debug!(%method, path, waited, held, "a slow request (ms)");
    }
    match result {
        Ok(a) => a.response(),
        Err(e) => err(e),
    }
}

/// Authentication: a token the sim minted is its service account's; any
/// other token is refused; no credentials is the sim's administrator (None).
fn authenticate(shared: &Shared, headers: &HeaderMap) -> R<Option<super::auth::User>> {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|h| h.strip_prefix("Bearer "));
    let Some(token) = bearer else { return Ok(None) };
    match shared.lock().expect("store lock").tokens.get(token.trim()) {
        Some((ns, sa)) => Ok(Some(super::auth::User::service_account(ns, sa))),
        None => Err(ApiError::new(401, "Unauthorized", "Unauthorized")),
    }
}

/// `/healthz`, `/readyz`, `/livez`: ok, or etcd's failure as the API
/// server words it.
fn health(check: &str, quorum: bool) -> Response {
    if quorum {
        (StatusCode::OK, "ok").into_response()
    } else {
        let body = format!("[+]ping ok\n[-]etcd failed: reason withheld\n{check} check failed\n");
        (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
    }
}

/// The OpenAPI document (JSON or protobuf, as asked) and API discovery.
fn discovery_answer(inner: &Inner, segs: &[&str], headers: &HeaderMap, port: u16) -> Option<Response> {
    if segs == ["openapi", "v2"] {
        let accept = headers.get("accept").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if accept.contains("protobuf") {
            let mut r = (StatusCode::OK, super::openapi::v2_protobuf(&inner.registry)).into_response();
            r.headers_mut().insert("content-type", super::openapi::V2_PROTOBUF.parse().expect("header"));
            return Some(r);
        }
        return Some(json_response(200, &super::openapi::v2(&inner.registry)));
    }
    discovery(inner, segs, port).map(|d| json_response(200, &d))
}

/// RBAC for a request of an authenticated user (the sim's administrator
/// has no token and may do anything).
fn authorize(
    inner: &Inner,
    user: &super::auth::User,
    method: &Method,
    t: &Target,
    rt: &ResourceType,
    q: &HashMap<String, String>,
) -> R<()> {
    let ns = t.namespace.clone().unwrap_or_default();
    let watching = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    let attrs = super::auth::Attributes {
        verb: super::auth::verb(method.as_str(), t.name.is_some(), watching).to_string(),
        group: rt.group.clone(),
        resource: rt.plural.clone(),
        subresource: t.sub.clone(),
        namespace: if rt.namespaced { ns.clone() } else { String::new() },
        name: t.name.clone(),
    };
    if let Err(msg) = super::auth::authorize(inner, user, &attrs) {
        let details = json!({"name": t.name.clone().unwrap_or_default(), "group": rt.group, "kind": rt.plural});
        return Err(ApiError::new(403, "Forbidden", msg).with_details(details));
    }
    Ok(())
}

/// The request's body, decoded as its content type says; an eviction's
/// and a protobuf TokenRequest's are not decoded (the URL names what they
/// name), a JSON eviction is read for its deleteOptions (the grace period).
fn request_body(t: &Target, rt: &ResourceType, content_type: &str, body: &Bytes) -> R<Value> {
    // An eviction's body names what the URL already names: accept any
    // encoding (kubectl drain sends protobuf) without decoding it.
    // A TokenRequest's likewise (kubectl create token sends protobuf; the
    // sim's tokens ignore its audiences and honour no expiry).
    let is_eviction = t.sub.as_deref() == Some("eviction");
    let opaque = is_eviction
        || (t.sub.as_deref() == Some("token") && rt.plural == "serviceaccounts" && !content_type.contains("json"));
    // A JSON eviction is read for its deleteOptions (the grace period).
    if is_eviction && content_type.contains("json") {
        Ok(parse_body(content_type, body).unwrap_or(Value::Null))
    } else if opaque {
        Ok(Value::Null)
    } else {
        parse_body(content_type, body)
    }
}

/// A TokenRequest: a token the sim's authenticator knows (audiences
/// echoed, expiry not enforced), never stored.
fn token_request(inner: &mut Inner, rt: &ResourceType, ns: &str, name: &str, body: &Value) -> Response {
    if let Err(e) = inner.get(rt, ns, name) {
        return err(e);
    }
    let token = inner.mint_token(ns, name);
    let secs = body.pointer("/spec/expirationSeconds").and_then(Value::as_i64).unwrap_or(3600);
    let expires = (chrono::Utc::now() + chrono::Duration::seconds(secs)).format("%Y-%m-%dT%H:%M:%SZ").to_string();
    return json_response(
        201,
        &json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"audiences": body.pointer("/spec/audiences").cloned().unwrap_or(json!([])), "expirationSeconds": secs},
            "status": {"token": token, "expirationTimestamp": expires}}),
    );
}

/// A LIST: its items by selectors, a page at a time, as a list or a table.
fn list(
    inner: &Inner,
    rt: &ResourceType,
    namespace: Option<&str>,
    q: &HashMap<String, String>,
    as_table: bool,
) -> R<Answer> {
    let (l, f) = selectors(q)?;
    let limit = q.get("limit").and_then(|l| l.parse().ok());
    let ns_filter = namespace.filter(|_| rt.namespaced);
    let r =
        inner.list(rt, ns_filter, &l, &f, limit, q.get("continue").map(String::as_str).filter(|c| !c.is_empty()))?;
    if as_table {
        return Ok(Answer::Value(
            200,
            super::table::table(rt, &r.items, &r.resource_version.to_string(), r.continue_token.as_deref()),
        ));
    }
    let mut metadata = json!({"resourceVersion": r.resource_version.to_string()});
    if let Some(c) = r.continue_token {
        metadata["continue"] = json!(c);
    }
    if let Some(n) = r.remaining {
        metadata["remainingItemCount"] = json!(n);
    }
    Ok(Answer::Value(
        200,
        json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": metadata, "items": r.items}),
    ))
}

/// A DELETE of one object: its propagation and precondition from the
/// query or the body; a pod's grace period.
fn delete(
    inner: &mut Inner,
    rt: &ResourceType,
    ns: &str,
    name: &str,
    q: &HashMap<String, String>,
    body: &Value,
    dry_run: bool,
) -> R<Answer> {
    let policy = q
        .get("propagationPolicy")
        .cloned()
        .or_else(|| body.get("propagationPolicy").and_then(Value::as_str).map(str::to_string));
    let propagation = match policy.as_deref() {
        Some("Foreground") => Propagation::Foreground,
        Some("Orphan") => Propagation::Orphan,
        _ if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) => Propagation::Orphan,
        _ => Propagation::Background,
    };
    let precondition = body.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_string);
    if rt.group.is_empty() && rt.plural == "pods" {
        let grace = q
            .get("gracePeriodSeconds")
            .and_then(|g| g.parse::<i64>().ok())
            .or_else(|| body.get("gracePeriodSeconds").and_then(Value::as_i64));
        return Ok(Answer::Value(
            200,
            inner.delete_pod(ns, name, grace, propagation, precondition.as_deref(), dry_run)?,
        ));
    }
    Ok(Answer::Value(200, inner.delete(rt, ns, name, propagation, precondition.as_deref(), dry_run)?))
}

/// A DELETE of a collection: what the selectors match.
fn delete_collection(
    inner: &mut Inner,
    rt: &ResourceType,
    namespace: Option<&str>,
    q: &HashMap<String, String>,
    dry_run: bool,
) -> R<Answer> {
    let (l, f) = selectors(q)?;
    let ns_filter = namespace.filter(|_| rt.namespaced);
    let items = inner.list(rt, ns_filter, &l, &f, None, None)?.items;
    let mut deleted = Vec::new();
    for it in items {
        let name = it.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let ins = it.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
        deleted.push(inner.delete(rt, &ins, &name, Propagation::Background, None, dry_run)?);
    }
    Ok(Answer::Value(
        200,
        json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(), "metadata": {}, "items": deleted}),
    ))
}

/// A request that waits for or holds the store this long is logged.
const SLOW: Duration = Duration::from_millis(200);

/// A resource request's answer: a value to serialize, or an object's
/// JSON text already made (a write's, by its event).
enum Answer {
    Value(u16, Value),
    /// A stored object no event carries (a write that changed nothing).
    Shared(u16, std::sync::Arc<Value>),
    Text(u16, Bytes),
}

impl Answer {
    fn response(self) -> Response {
        match self {
            Answer::Value(code, v) => json_response(code, &v),
            Answer::Shared(code, v) => json_response(code, &v),
            Answer::Text(code, text) => {
                let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::OK), text).into_response();
                r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
                r
            }
        }
    }
}

fn event_json(ev: &Event, table: Option<&ResourceType>) -> Bytes {
    let Some(rt) = table else { return ev.line() };
    let object = super::table::table(rt, std::slice::from_ref(&ev.object), "", None);
    let mut line = json!({"type": ev.kind.as_str(), "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

async fn watch(
    shared: Shared,
    rt: ResourceType,
    ns: Option<String>,
    name: Option<String>,
    q: &HashMap<String, String>,
    as_table: bool,
) -> Response {
    let (labels, fieldsel) = match selectors(q) {
        Ok(s) => s,
        Err(e) => return err(e),
    };
    let rv: Option<u64> = q.get("resourceVersion").filter(|r| !r.is_empty() && *r != "0").and_then(|r| r.parse().ok());
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|b| b == "true");
    let timeout = q.get("timeoutSeconds").and_then(|t| t.parse().ok()).map(Duration::from_secs).unwrap_or(WATCH_MAX);
    let key = rt.key();
    let table_rt = as_table.then(|| rt.clone());
    let ns_filter = ns.filter(|_| rt.namespaced);
    let matches = move |ev: &Event| -> bool {
        ev.key == key
            && ns_filter.as_ref().is_none_or(|n| *n == ev.namespace)
            && name
                .as_ref()
                .is_none_or(|n| ev.object.pointer("/metadata/name").and_then(Value::as_str) == Some(n.as_str()))
            && labels.matches(&ev.object)
            && fieldsel.matches(&ev.object)
    };
    let (mut rx, initial, start_rv, expired) = {
        let inner = shared.lock().expect("store lock");
        let rx = inner.events.subscribe();
        let current = inner.resource_version();
        let mut expired = false;
        let initial: Vec<Bytes> = match rv {
            Some(rv) => match inner.events_since(rv) {
                Some(evs) => evs.iter().filter(|e| matches(e)).map(|e| event_json(e, table_rt.as_ref())).collect(),
                None => {
                    expired = true;
                    let gone = ApiError::new(410, "Expired", format!("too old resource version: {rv} ({current})"));
                    let line = format!("{}\n", json!({"type": "ERROR", "object": gone.status()}));
                    vec![Bytes::from(line)]
                }
            },
            None => {
                // No resourceVersion: the current state as ADDED events first.
                let all = inner
                    .list(&rt, None, &LabelSelector::default(), &FieldSelector::default(), None, None)
                    .map(|r| r.items)
                    .unwrap_or_default();
                all.into_iter()
                    .map(|o| {
                        let ns =
                            o.pointer("/metadata/namespace").and_then(Value::as_str).unwrap_or_default().to_string();
                        Event::new(current, super::store::EventType::Added, rt.key(), ns, o)
                    })
                    .filter(|e| matches(e))
                    .map(|e| event_json(&e, table_rt.as_ref()))
                    .collect()
            }
        };
        (rx, initial, current, expired)
    };
    let (tx, mut out_rx) = tokio::sync::mpsc::channel::<Bytes>(1024);
    let api_version = rt.api_version();
    let kind = rt.kind.clone();
    tokio::spawn(async move {
        for b in initial {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        if expired {
            return;
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut last_rv = start_rv;
        let mut tick = tokio::time::interval(BOOKMARK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                _ = tick.tick(), if bookmarks => {
                    let b = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last_rv.to_string()}}});
                    if tx.send(Bytes::from(format!("{b}\n"))).await.is_err() { return; }
                }
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        // Already sent from the log or as the initial state.
                        if ev.rv <= start_rv { continue; }
                        last_rv = last_rv.max(ev.rv);
                        if matches(&ev) && tx.send(event_json(&ev, table_rt.as_ref())).await.is_err() { return; }
                    }
                    // Too slow to keep up: end the watch; the client re-lists.
                    Err(_) => return,
                },
                _ = tx.closed() => return,
            }
        }
    });
    let stream = futures::stream::poll_fn(move |cx| out_rx.poll_recv(cx).map(|o| o.map(Ok::<Bytes, Infallible>)));
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert("content-type", "application/json".parse().expect("header"));
    r.headers_mut().insert("transfer-encoding", "chunked".parse().expect("header"));
    r
}

/// A TokenReview's answer: a token the sim minted is its service
/// account's, with the groups kube-apiserver gives one; anything else is
/// not authenticated (and says so without saying more).
fn token_review(inner: &Inner, body: &Value) -> Value {
    let token = body.pointer("/spec/token").and_then(Value::as_str).unwrap_or_default();
    let status = match inner.tokens.get(token.trim()) {
        Some((ns, sa)) => json!({
            "authenticated": true,
            "user": {
                "username": format!("system:serviceaccount:{ns}:{sa}"),
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
            },
            "audiences": body.pointer("/spec/audiences").cloned().unwrap_or(json!([])),
        }),
        None => json!({"authenticated": false, "error": "invalid bearer token"}),
    };
    json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null},
        "spec": body.get("spec").cloned().unwrap_or(json!({})), "status": status})
}
