//! The gateway's HTTP/JSON API (axum): authentication on every route but
//! the probes, authorization per team and verb, then the service.
//!
//! ```text
//! TLS (client certificate → PeerCertificate) or loopback HTTP
//!     ▼
//! router: /v1/submissions, /v1/queue, /v1/quota, /v1/members, /v1/whoami,
//!         /metrics, /healthz, /readyz
//!     ▼
//! identity::authenticate ─► Service
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{json, Value};

use super::identity::PeerCertificate;
use super::intake::Caller;
use super::quota::{self, tier_name, Amount, TIERS};
use super::records::{Phase, TeamQuota, TeamQuotaSpec};
use super::service::{Service, MANAGER};

type S = Arc<Service>;

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let mut r = (status, Json(json!({"error": message.into()}))).into_response();
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert("www-authenticate", "Bearer".parse().expect("a header value"));
    }
    r
}

fn internal(e: anyhow::Error) -> Response {
    // The cause is logged; the caller learns only that it failed.
    tracing::error!("gateway: {e:#}");
    error(StatusCode::SERVICE_UNAVAILABLE, "the gateway could not complete this request; try again")
}

async fn caller(svc: &Service, headers: &HeaderMap, cert: Option<&PeerCertificate>) -> Result<Caller, Response> {
    let bearer = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|h| h.strip_prefix("Bearer "));
    match svc.identity.authenticate(bearer, cert).await {
        Ok(c) => Ok(c),
        Err(r) => {
            svc.metrics.answered("auth", 401);
            svc.audit_log.write(&super::audit::Entry::new(None, "authenticate", "", 401, &r.0));
            Err(error(StatusCode::UNAUTHORIZED, r.0))
        }
    }
}

type Peer = Option<Extension<Arc<PeerCertificate>>>;

fn peer(p: &Peer) -> Option<&PeerCertificate> {
    p.as_ref().map(|Extension(c)| c.as_ref())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SubmitBody {
    id: String,
    /// A class the admins defined (default: `normal`); a number is never taken.
    #[serde(default)]
    priority_class: Option<String>,
    workload: Value,
}

#[derive(Deserialize, Default)]
struct SubmitQuery {
    #[serde(default, rename = "dryRun")]
    dry_run: Option<String>,
}

async fn submit(
    State(svc): State<S>,
    p: Peer,
    headers: HeaderMap,
    Query(q): Query<SubmitQuery>,
    body: axum::body::Bytes,
) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let body: SubmitBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("the body is not a submission ({{id, priorityClass?, workload}}): {e}"),
            )
        }
    };
    let dry = q.dry_run.as_deref().is_some_and(|d| d == "true" || d == "All" || d.is_empty());
    match svc.submit(&c, &body.id, &body.workload, body.priority_class.as_deref(), dry).await {
        Ok((code, d)) => {
            svc.metrics.answered("submit", code);
            let mut r = (StatusCode::from_u16(code).unwrap_or(StatusCode::OK), Json(d)).into_response();
            if code == 429 {
                // The team's open submissions are at their cap: some
                // finish or are cancelled within a leader's passes.
                r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("30"));
            }
            r
        }
        Err(e) => internal(e),
    }
}

#[derive(Deserialize, Default)]
struct ListQuery {
    team: Option<String>,
    phase: Option<String>,
}

async fn list(State(svc): State<S>, p: Peer, headers: HeaderMap, Query(q): Query<ListQuery>) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Some(t) = &q.team {
        if !c.may_act_for(t) {
            return error(StatusCode::FORBIDDEN, format!("{} may not see team {t}'s workloads", c.user));
        }
    }
    let mut out = Vec::new();
    let mut all = svc.all();
    all.sort_by(|a, b| {
        a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp).then(a.metadata.name.cmp(&b.metadata.name))
    });
    for s in all {
        if !c.may_act_for(&s.spec.team) || q.team.as_ref().is_some_and(|t| *t != s.spec.team) {
            continue;
        }
        let ph = s.status.as_ref().map(|s| s.phase).unwrap_or_default();
        if q.phase.as_ref().is_some_and(|p| !format!("{ph:?}").eq_ignore_ascii_case(p)) {
            continue;
        }
        out.push(svc.view(&s).await);
    }
    Json(json!({"items": out})).into_response()
}

/// The submission, when the caller may see it.
async fn owned(
    svc: &Service,
    c: &Caller,
    verb: &str,
    team: &str,
    id: &str,
) -> Result<super::records::Submission, Response> {
    let object = format!("{team}/{id}");
    if !c.may_act_for(team) {
        let why = format!("{} may not act for team {team}", c.user);
        svc.audit(c, verb, &object, "", 403, &why).await;
        return Err(error(StatusCode::FORBIDDEN, why));
    }
    match svc.find(team, id).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => {
            let why = format!("team {team} has no submission {id:?}");
            svc.audit(c, verb, &object, "", 404, &why).await;
            Err(error(StatusCode::NOT_FOUND, why))
        }
        Err(e) => Err(internal(e)),
    }
}

async fn describe(
    State(svc): State<S>,
    p: Peer,
    headers: HeaderMap,
    UrlPath((team, id)): UrlPath<(String, String)>,
) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match owned(&svc, &c, "get", &team, &id).await {
        Ok(s) => {
            let mut v = serde_json::to_value(svc.view(&s).await).unwrap_or_default();
            // The one place the API shows the workload itself: read from its body.
            v["submitted"] = match svc.body(&s).await {
                Ok(w) => w.unwrap_or_default(),
                Err(why) => json!({"refused": why}),
            };
            Json(v).into_response()
        }
        Err(r) => r,
    }
}

async fn cancel(
    State(svc): State<S>,
    p: Peer,
    headers: HeaderMap,
    UrlPath((team, id)): UrlPath<(String, String)>,
) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let s = match owned(&svc, &c, "cancel", &team, &id).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let name = s.metadata.name.clone().unwrap_or_default();
    let ph = s.status.as_ref().map(|s| s.phase).unwrap_or_default();
    if ph.done() {
        return (StatusCode::OK, Json(json!({"name": name, "phase": ph, "message": "already ended"}))).into_response();
    }
    match svc.cancel(&name).await {
        Ok(()) => {
            svc.audit(&c, "cancel", &name, &s.spec.artifact, 202, "cancelled").await;
            (StatusCode::ACCEPTED, Json(json!({"name": name, "phase": ph, "message": "cancelling: removed from its clusters; its quota is released once they say it and its pods are gone"}))).into_response()
        }
        Err(e) => internal(e),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PriorityBody {
    priority_class: String,
}

async fn reprioritize(
    State(svc): State<S>,
    p: Peer,
    headers: HeaderMap,
    UrlPath((team, id)): UrlPath<(String, String)>,
    Json(b): Json<PriorityBody>,
) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let s = match owned(&svc, &c, "priority", &team, &id).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let name = s.metadata.name.clone().unwrap_or_default();
    if s.status.as_ref().map(|s| s.phase).unwrap_or_default() != Phase::Queued {
        return error(StatusCode::CONFLICT, "only a queued submission's priority can change");
    }
    let class = match svc.config.policy.class(Some(&b.priority_class), &s.spec.team, s.spec.tier, &c) {
        Ok(class) => class,
        Err(p) => {
            svc.audit(&c, "priority", &name, &s.spec.artifact, 422, &p.message).await;
            return (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"error": p.message, "problems": [p]})))
                .into_response();
        }
    };
    match svc.set_priority(&name, &class).await {
        Ok(()) => {
            svc.audit(
                &c,
                "priority",
                &name,
                &s.spec.artifact,
                200,
                &format!("set to {} ({})", class.name, class.value),
            )
            .await;
            Json(json!({"name": name, "priorityClass": class.name, "priority": class.value})).into_response()
        }
        Err(e) => internal(e),
    }
}

#[derive(Deserialize, Default)]
struct TeamQuery {
    team: Option<String>,
}

async fn queue(State(svc): State<S>, p: Peer, headers: HeaderMap, Query(q): Query<TeamQuery>) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if let Some(t) = &q.team {
        if !c.may_act_for(t) {
            return error(StatusCode::FORBIDDEN, format!("{} may not see team {t}'s queue", c.user));
        }
    }
    let waiting = svc.waiting().await;
    let all = svc.all();
    let mut items: Vec<Value> = Vec::new();
    for s in all {
        let name = s.metadata.name.clone().unwrap_or_default();
        let Some(w) = waiting.get(&name) else { continue };
        if !c.may_act_for(&s.spec.team) || q.team.as_ref().is_some_and(|t| *t != s.spec.team) {
            continue;
        }
        items.push(json!({"id": s.spec.id, "name": name, "team": s.spec.team, "tier": tier_name(s.spec.tier), "priority": s.spec.priority,
            "demand": s.spec.demand.show(), "position": w.position, "aheadInFleet": w.ahead_in_fleet, "estimate": w.estimate, "why": w.why}));
    }
    items.sort_by_key(|i| i["aheadInFleet"].as_u64().unwrap_or(0));
    Json(json!({"items": items, "leader": svc.leading.load(Ordering::Relaxed)})).into_response()
}

async fn quota_view(State(svc): State<S>, p: Peer, headers: HeaderMap, Query(q): Query<TeamQuery>) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let (world, broken) = match svc.world().await {
        Ok(w) => w,
        Err(e) => return internal(e),
    };
    let teams: Vec<String> = match &q.team {
        Some(t) if !c.may_act_for(t) => {
            return error(StatusCode::FORBIDDEN, format!("{} may not see team {t}'s quota", c.user))
        }
        Some(t) => vec![t.clone()],
        None => world.quotas.keys().filter(|t| c.may_act_for(t)).cloned().collect(),
    };
    let mut out = Vec::new();
    for team in teams {
        let usage = match svc.usage(&team).await {
            Ok(u) => u,
            Err(e) => return internal(e),
        };
        let Some(qt) = world.quotas.get(&team) else {
            out.push(json!({"team": team, "error": broken.get(&team).map(|e| e.join("; ")).unwrap_or_else(|| "no quota".into())}));
            continue;
        };
        let mut tiers = BTreeMap::new();
        let drift = svc.drift(&team).await;
        for t in TIERS {
            let Some(l) = qt.limits(t) else { continue };
            let u = usage.get(tier_name(t)).copied().unwrap_or_default();
            let borrowed = u.minus(l.guaranteed);
            let row = |a: Amount| amount_json(&a);
            tiers.insert(
                tier_name(t),
                json!({"guaranteed": row(l.guaranteed), "max": row(l.max), "used": row(u), "borrowed": row(borrowed)}),
            );
        }
        let workloads = svc
            .all()
            .iter()
            .filter(|s| s.spec.team == team && s.status.as_ref().is_some_and(|st| st.phase.holds()))
            .count();
        // What the members run beyond the ledger: counted against the team.
        let drift = amount_json(&drift);
        out.push(json!({"team": team, "cohort": qt.cohort, "tiers": tiers, "workloads": workloads, "maxWorkloads": qt.max_workloads, "podsPerMinute": qt.pods_per_minute, "drift": drift}));
    }
    let fleet = world.fleet;
    Json(json!({"items": out, "fleet": amount_json(&fleet)})).into_response()
}

/// An amount as the API shows it: cpu and memory as people write them,
/// pods, and each accelerator flavor held (`gpu-a100: 8`).
fn amount_json(a: &Amount) -> Value {
    let mut v = json!({"cpu": quota::Resource::Cpu.show(a.cpu), "memory": quota::Resource::Memory.show(a.memory), "pods": a.pods});
    for (r, n) in a.accelerators() {
        v[r.name()] = json!(n);
    }
    v
}

async fn put_quota(
    State(svc): State<S>,
    p: Peer,
    headers: HeaderMap,
    UrlPath(team): UrlPath<String>,
    Json(spec): Json<TeamQuotaSpec>,
) -> Response {
    let c = match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if !c.admin {
        svc.audit(&c, "edit-quota", &team, "", 403, "not an admin").await;
        return error(StatusCode::FORBIDDEN, format!("only the admin group edits quotas; {} is not in it", c.user));
    }
    if !super::intake::team_name(&team) {
        let why = format!("{team:?} is not a team name (a DNS label: 1–63 lowercase letters, digits and '-')");
        svc.audit(&c, "edit-quota", &team, "", 422, &why).await;
        return (StatusCode::UNPROCESSABLE_ENTITY, Json(json!({"error": why}))).into_response();
    }
    let fleet = svc.fleet().await;
    if let Err(errs) =
        quota::resolve(&team, spec.cohort.as_deref(), &spec.tiers, spec.max_workloads, spec.pods_per_minute, &fleet)
    {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            Json(json!({"error": "the quota does not resolve", "problems": errs})),
        )
            .into_response();
    }
    let mut obj = TeamQuota::new(&team, spec);
    obj.metadata.namespace = Some(svc.config.namespace.clone());
    let api: Api<TeamQuota> = Api::namespaced(svc.host.clone(), &svc.config.namespace);
    match api.patch(&team, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj)).await {
        Ok(_) => {
            svc.audit(&c, "edit-quota", &team, "", 200, "written").await;
            Json(json!({"team": team, "written": true})).into_response()
        }
        Err(e) => internal(e.into()),
    }
}

async fn members(State(svc): State<S>, p: Peer, headers: HeaderMap) -> Response {
    if let Err(r) = caller(&svc, &headers, peer(&p)).await {
        return r;
    }
    Json(json!({"items": svc.member_views().await})).into_response()
}

async fn whoami(State(svc): State<S>, p: Peer, headers: HeaderMap) -> Response {
    match caller(&svc, &headers, peer(&p)).await {
        Ok(c) => Json(c).into_response(),
        Err(r) => r,
    }
}

/// Behind the same authentication as every other route: any caller the
/// gateway identifies may scrape it (a Prometheus service-account token).
async fn metrics(State(svc): State<S>, p: Peer, headers: HeaderMap) -> Response {
    if let Err(r) = caller(&svc, &headers, peer(&p)).await {
        return r;
    }
    let body = svc.metrics.render(svc.leading.load(Ordering::Relaxed), svc.queued_count().await);
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

pub fn router(svc: S) -> Router {
    Router::new()
        .route("/v1/submissions", post(submit).get(list))
        .route("/v1/submissions/{team}/{id}", get(describe).delete(cancel).patch(reprioritize))
        .route("/v1/queue", get(queue))
        .route("/v1/quota", get(quota_view))
        .route("/v1/quota/{team}", axum::routing::put(put_quota))
        .route("/v1/members", get(members))
        .route("/v1/whoami", get(whoami))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(svc): State<Arc<Service>>| async move {
                match svc.unready.lock().map(|u| u.clone()).unwrap_or(None) {
                    None => (StatusCode::OK, "ok".to_string()),
                    Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
                }
            }),
        )
        .with_state(svc)
}

/// TLS with this certificate and key; client certificates checked against
/// `client_ca` when given (and optional: a caller may use a token instead).
pub struct Tls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub client_ca: Option<&'a Path>,
}

fn tls_config(t: &Tls) -> Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(t.cert)
        .with_context(|| format!("reading {}", t.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| format!("{}: not a PEM certificate chain", t.cert.display()))?;
    let key =
        PrivateKeyDer::from_pem_file(t.key).with_context(|| format!("{}: not a PEM private key", t.key.display()))?;
    let builder = rustls::ServerConfig::builder();
    let builder = match t.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_file_iter(ca).with_context(|| format!("reading {}", ca.display()))? {
                roots.add(c.with_context(|| format!("{}: not a PEM certificate", ca.display()))?)?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).allow_unauthenticated().build()?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    Ok(builder.with_single_cert(certs, key).context("the certificate and key do not match")?)
}

/// The edge asks the identity who a request is from before reading its
/// body (`listen`): a stranger's body is never buffered whole.
impl crate::edge::Gate for super::identity::Identity {
    fn principal<'a>(&'a self, parts: &'a http::request::Parts) -> futures::future::BoxFuture<'a, Option<String>> {
        Box::pin(async move {
            let token = super::identity::request_token(&parts.headers);
            let cert = parts.extensions.get::<Arc<PeerCertificate>>().map(|c| c.as_ref());
            self.authenticate(token.as_deref(), cert).await.ok().map(|c| c.user)
        })
    }
}

/// Serves the API until `shutdown` resolves. Plain HTTP only on a loopback address.
pub async fn serve(
    svc: S,
    listener: tokio::net::TcpListener,
    tls: Option<Tls<'_>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let audit = svc.audit_log.clone();
    let gate: Arc<dyn super::listen::Gate> = svc.identity.clone();
    serve_with(router(svc), listener, tls, super::listen::Limits::default(), Some(audit), Some(gate), shutdown).await
}

/// Serves `app` (the API, with the console when it is mounted) until
/// `shutdown` resolves, under the listener's limits ([`super::listen`]).
/// Plain HTTP only on a loopback address.
pub async fn serve_app(
    app: Router,
    listener: tokio::net::TcpListener,
    tls: Option<Tls<'_>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    serve_with(app, listener, tls, super::listen::Limits::default(), None, None, shutdown).await
}

/// [`serve_app`] with chosen limits; `gate` says who a request is from
/// before its body is read (without one, every body is read within the
/// budgets as a caller's).
pub async fn serve_with(
    app: Router,
    listener: tokio::net::TcpListener,
    tls: Option<Tls<'_>>,
    limits: super::listen::Limits,
    audit: Option<Arc<super::audit::AuditLog>>,
    gate: Option<Arc<dyn super::listen::Gate>>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr: SocketAddr = listener.local_addr()?;
    let acceptor = match tls {
        Some(tls) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(&tls)?))),
        None => {
            anyhow::ensure!(
                addr.ip().is_loopback(),
                "{addr}: without --tls-cert the gateway serves on a loopback address only"
            );
            None
        }
    };
    let guard = super::guard::Guard { local: addr, plain: acceptor.is_none(), audit: audit.clone() };
    let app = app.layer(axum::middleware::from_fn_with_state(guard, super::guard::check));
    // Outermost: every refusal that wrote no audit line of its own gets one.
    let app = match audit.clone() {
        Some(log) => app.layer(axum::middleware::from_fn_with_state(log, super::audit::refusals)),
        None => app,
    };
    let app = app.layer(axum::extract::DefaultBodyLimit::max(super::guard::BODY_LIMIT));
    let audit = audit.map(|a| a as Arc<dyn crate::edge::Audit>);
    super::listen::serve(app, listener, acceptor, limits, gate, audit, shutdown).await
}
