//! The web console: one page from the fleet down to a workload, served by
//! the gateway beside its API, drawn by the server from the shared view
//! models (`views`), kept live by server-sent events.
//!
//! ```text
//! browser ─GET /, /clusters/C, /teams/T, /workloads/T/ID─► identity (the gateway's:
//!     │                                                    bearer, cookie from /login,
//!     │                                                    client certificate, loopback)
//!     │                                           build (views from the service and
//!     │                                           the observer) ─► views::*::html
//!     └─EventSource /ui/events ◄── changes: submissions watched, the queue,
//!           │                      members' nodes watched (observe)
//!           └─► fetch the page's <main> again (x-pinfleet-fragment)
//! ```
//!
//! `/v1/views/...` serves the same views as JSON, which `pinfleet view`
//! draws as text: one model, every screen. The JSON views are part of the
//! API: a gateway serving without the pages (`--no-console`) serves them.

pub mod build;
pub mod observe;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Form, Json, Router};
use chrono::Utc;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::gateway::identity::PeerCertificate;
use crate::gateway::intake::Caller;
use crate::gateway::service::Service;
use crate::views::html::{self, esc};
use crate::views::Viewer;
use observe::Observer;

/// The cookie `/login` sets: the bearer token a browser cannot send as a header.
pub const TOKEN_COOKIE: &str = crate::gateway::identity::TOKEN_COOKIE;
/// How long a sign-in lasts in the browser (the token's own expiry still holds).
const COOKIE_SECONDS: u64 = 8 * 3600;
/// Changes arriving within this long are one event (a pass of the admission
/// loop writes many records).
const SETTLE: Duration = Duration::from_millis(200);
/// At most one live update a second per page: each one rebuilds the page.
const COALESCE: Duration = Duration::from_secs(1);

/// How often the leader samples each team's use (kept on the host a day).
const SAMPLE_EVERY: Duration = Duration::from_secs(60);

pub struct Console {
    pub svc: Arc<Service>,
    pub observer: Arc<Observer>,
    /// Where the fleet's records are (rollouts, each cluster's revisions).
    fleet: Option<Arc<observe::FleetSource>>,
    sampler: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Served over TLS: cookies are Secure.
    pub secure: bool,
    closing: tokio::sync::watch::Sender<bool>,
    /// This process's secret for the sign-out form's token.
    csrf_secret: [u8; 32],
}

impl Console {
    /// `fleet`: where to read the fleet's rollouts (none: the page shows members alone).
    pub fn new(
        svc: Arc<Service>,
        fleet: Option<observe::FleetSource>,
        refresh: Duration,
        secure: bool,
    ) -> Arc<Console> {
        let fleet = fleet.map(Arc::new);
        let observer = Observer::start(&svc.members, fleet.clone(), refresh);
        let c = Arc::new(Console {
            svc,
            observer,
            fleet,
            sampler: std::sync::Mutex::new(None),
            secure,
            closing: tokio::sync::watch::channel(false).0,
            csrf_secret: rand::random(),
        });
        let task =
            tokio::spawn(Self::sample(Arc::downgrade(&c), SAMPLE_EVERY.min(refresh.max(Duration::from_secs(1)))));
        *c.sampler.lock().expect("the sampler") = Some(task);
        c
    }

    /// The sign-out form's token for `who`: bound to the identity and this
    /// process's secret (a page on another site cannot compute it).
    pub fn csrf_for(&self, who: &Caller) -> String {
        use sha2::Digest as _;
        let mut h = sha2::Sha256::new();
        h.update(self.csrf_secret);
        h.update(who.via.as_bytes());
        h.update([0]);
        h.update(who.user.as_bytes());
        hex::encode(&h.finalize()[..16])
    }

    /// Samples each team's use over time into the host's records, while
    /// this replica's gateway leads (the quota's "used" is the ledger's).
    async fn sample(me: std::sync::Weak<Console>, every: Duration) {
        loop {
            let Some(c) = me.upgrade() else { return };
            if let Err(e) = c.svc.record_usage(Utc::now()).await {
                tracing::warn!("console: recording each team's use: {e:#}");
            }
            drop(c);
            tokio::time::sleep(every).await;
        }
    }

    /// A cluster's view with its records when the fleet's folder is read:
    /// the applied revisions, and each machine's image and launch-template
    /// version as EC2 has them (read now).
    async fn cluster_view(
        &self,
        viewer: Viewer,
        who: &Caller,
        m: &observe::MemberSnapshot,
    ) -> crate::views::cluster::ClusterView {
        let mut v = build::cluster(viewer, m, &self.svc.all(), |t| who.may_act_for(t), Utc::now());
        let Some(f) = &self.fleet else {
            v.revisions_note =
                Some("the gateway reads no fleet folder (--fleet-rollouts): no revisions to show".into());
            return v;
        };
        match f.defined_addons(&m.name) {
            Some(Ok(d)) => build::with_defined_addons(&mut v.addons, &d),
            Some(Err(e)) => v.addons_note = Some(format!("its definition's addons do not resolve: {e:#}")),
            None => {}
        }
        match f.records(&m.name).await {
            None => v.revisions_note = Some(format!("{} is not a cluster of the fleet's folder", m.name)),
            Some(Ok(r)) => {
                v.revisions = r.revisions.iter().map(build::revision).collect();
                v.capacity = r.capacity;
                v.etcd_backup = r.etcd_backup;
                build::with_instances(&mut v.machines, &r.instances);
            }
            Some(Err(e)) => v.revisions_note = Some(format!("reading its records: {e:#}")),
        }
        v
    }

    /// A team's use over time as the host keeps it (a page without it
    /// still shows; the failure is logged).
    async fn history(&self, team: &str) -> Vec<crate::views::team::UsagePoint> {
        match self.svc.usage_history(team, Utc::now()).await {
            Ok(samples) => samples.into_iter().map(build::usage_point).collect(),
            Err(e) => {
                tracing::warn!("console: {e:#}");
                Vec::new()
            }
        }
    }

    /// Ends every live-update stream (open streams would hold a graceful shutdown).
    pub fn close(&self) {
        self.closing.send_replace(true);
        if let Some(t) = self.sampler.lock().ok().and_then(|mut s| s.take()) {
            t.abort();
        }
    }
}

type C = Arc<Console>;
type Peer = Option<Extension<Arc<PeerCertificate>>>;

/// The caller: a bearer header, else the sign-in cookie, else a client
/// certificate, else (loopback, local work) the anonymous caller.
async fn caller(c: &Console, headers: &HeaderMap, peer: &Peer) -> Result<Caller, String> {
    let token = crate::gateway::identity::request_token(headers);
    let cert = peer.as_ref().map(|Extension(p)| p.as_ref());
    c.svc.identity.authenticate(token.as_deref(), cert).await.map_err(|r| r.0)
}

async fn viewer(c: &Console, who: &Caller) -> Viewer {
    let mut teams = who.teams.clone();
    if who.admin {
        if let Ok((world, _)) = c.svc.world().await {
            teams.extend(world.quotas.keys().cloned());
        }
        teams.sort();
        teams.dedup();
    }
    build::viewer(who, teams, c.csrf_for(who))
}

fn secured(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
    );
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn page(headers: &HeaderMap, full: String, body: String) -> Response {
    let fragment = headers.contains_key("x-pinfleet-fragment");
    secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], if fragment { body } else { full }).into_response())
}

fn problem(status: StatusCode, viewer: Option<&Viewer>, title: &str, message: &str) -> Response {
    let body = format!("<h1>{}</h1><p>{}</p><p><a href=\"/\">Back to the fleet</a></p>", esc(title), esc(message));
    let v = viewer.cloned().unwrap_or_default();
    secured(
        (status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html::page(title, "", &v, &body))
            .into_response(),
    )
}

/// Not signed in: pages send the browser to sign in; the JSON views say why.
fn unauthenticated(json_view: bool, why: String) -> Response {
    if json_view {
        let mut r = (StatusCode::UNAUTHORIZED, Json(json!({"error": why}))).into_response();
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    } else {
        secured(Redirect::to("/login").into_response())
    }
}

fn fleet_view(c: &Console, viewer: Viewer) -> crate::views::fleet::FleetView {
    let mut v = build::fleet(viewer, &c.observer.snapshot(), &c.svc.all(), Utc::now());
    (v.rollout, v.rollout_error) = c.observer.rollout();
    v
}

#[derive(Deserialize, Default)]
struct PageQuery {
    page: Option<usize>,
}

/// A view the caller may see.
enum Shown {
    Fleet(crate::views::fleet::FleetView),
    Cluster(crate::views::cluster::ClusterView),
    Team(crate::views::team::TeamView),
    Workload(crate::views::workload::WorkloadView),
}

/// Why a view is not shown: the status, a title for the page, the reason.
type Refused = (StatusCode, &'static str, String);

/// The view at `path` (`fleet`, `clusters/C`, `teams/T`, `workloads/T/ID`)
/// as `who` may see it: the pages and the JSON views both go through here.
async fn resolve(c: &Console, who: &Caller, viewer: Viewer, path: &[&str]) -> Result<Shown, Refused> {
    let unavailable = |what: &str| {
        (StatusCode::SERVICE_UNAVAILABLE, "Not available", format!("the gateway could not read {what}; try again"))
    };
    let now = Utc::now();
    match path {
        ["fleet"] => Ok(Shown::Fleet(fleet_view(c, viewer))),
        ["clusters", name] => match c.observer.member(name) {
            Some(m) => Ok(Shown::Cluster(c.cluster_view(viewer, who, &m).await)),
            None => Err((StatusCode::NOT_FOUND, "No such cluster", format!("{name} is not a member of this fleet"))),
        },
        ["teams", team] if !who.may_act_for(team) => {
            Err((StatusCode::FORBIDDEN, "Not your team", format!("{} may not see team {team}", who.user)))
        }
        ["teams", team] => match build::team(&c.svc, viewer, team, c.history(team).await, now).await {
            Ok(v) => Ok(Shown::Team(v)),
            Err(e) => {
                tracing::error!("console: team {team}: {e:#}");
                Err(unavailable("the quota ledger"))
            }
        },
        ["workloads", team, _] if !who.may_act_for(team) => {
            Err((StatusCode::FORBIDDEN, "Not your team", format!("{} may not see team {team}'s workloads", who.user)))
        }
        ["workloads", team, id] => match c.svc.find(team, id).await {
            Ok(Some(s)) => Ok(Shown::Workload(build::workload(&c.svc, &c.observer.snapshot(), viewer, &s, now).await)),
            Ok(None) => {
                Err((StatusCode::NOT_FOUND, "No such submission", format!("team {team} has no submission {id:?}")))
            }
            Err(e) => {
                tracing::error!("console: {team}/{id}: {e:#}");
                Err(unavailable("its records"))
            }
        },
        _ => Err((
            StatusCode::NOT_FOUND,
            "No such page",
            format!("no view {:?}: fleet, clusters/C, teams/T, workloads/T/ID", path.join("/")),
        )),
    }
}

/// A page: the view drawn as HTML (its `<main>` alone for a live update).
async fn show(c: &Console, p: &Peer, headers: &HeaderMap, path: &[&str], page_no: Option<usize>) -> Response {
    let who = match caller(c, headers, p).await {
        Ok(w) => w,
        Err(e) => return unauthenticated(false, e),
    };
    let viewer = viewer(c, &who).await;
    let n = page_no.unwrap_or(1);
    match resolve(c, &who, viewer.clone(), path).await {
        Ok(Shown::Fleet(v)) => page(headers, v.html(n), v.html_body(n)),
        Ok(Shown::Cluster(v)) => page(headers, v.html(), v.html_body()),
        Ok(Shown::Team(v)) => page(headers, v.html(n), v.html_body(n)),
        Ok(Shown::Workload(v)) => page(headers, v.html(), v.html_body()),
        Err((status, title, message)) => problem(status, Some(&viewer), title, &message),
    }
}

async fn fleet_page(State(c): State<C>, p: Peer, headers: HeaderMap, Query(q): Query<PageQuery>) -> Response {
    show(&c, &p, &headers, &["fleet"], q.page).await
}

async fn cluster_page(State(c): State<C>, p: Peer, headers: HeaderMap, UrlPath(name): UrlPath<String>) -> Response {
    show(&c, &p, &headers, &["clusters", &name], None).await
}

async fn team_page(
    State(c): State<C>,
    p: Peer,
    headers: HeaderMap,
    UrlPath(team): UrlPath<String>,
    Query(q): Query<PageQuery>,
) -> Response {
    show(&c, &p, &headers, &["teams", &team], q.page).await
}

async fn workload_page(
    State(c): State<C>,
    p: Peer,
    headers: HeaderMap,
    UrlPath((team, id)): UrlPath<(String, String)>,
) -> Response {
    show(&c, &p, &headers, &["workloads", &team, &id], None).await
}

/// The same views as JSON (what `pinfleet view` draws as text).
async fn view_json(State(c): State<C>, p: Peer, headers: HeaderMap, UrlPath(path): UrlPath<String>) -> Response {
    let who = match caller(&c, &headers, &p).await {
        Ok(w) => w,
        Err(e) => return unauthenticated(true, e),
    };
    let viewer = viewer(&c, &who).await;
    let parts: Vec<&str> = path.split('/').collect();
    let body = match resolve(&c, &who, viewer, &parts).await {
        Ok(Shown::Fleet(v)) => serde_json::to_value(v),
        Ok(Shown::Cluster(v)) => serde_json::to_value(v),
        Ok(Shown::Team(v)) => serde_json::to_value(v),
        Ok(Shown::Workload(v)) => serde_json::to_value(v),
        Err((status, _, message)) => return (status, Json(json!({"error": message}))).into_response(),
    };
    match body {
        Ok(v) => Json(v).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, Json(json!({"error": e.to_string()}))).into_response(),
    }
}

/// "Something changed": the page asks for a fresh copy of itself.
/// Live updates: an event when something this viewer may see changed —
/// their teams' submissions and queue positions (every team's for an
/// admin), the fleet's members and rollouts — at most one a second.
async fn events(State(c): State<C>, p: Peer, headers: HeaderMap) -> Response {
    let who = match caller(&c, &headers, &p).await {
        Ok(who) => who,
        Err(e) => return unauthenticated(true, e),
    };
    let teams: Option<Vec<String>> = (!who.admin).then(|| who.teams.clone());
    let visible = move |m: &std::collections::BTreeMap<String, u64>| -> u64 {
        match &teams {
            None => m.values().sum(),
            Some(ts) => ts.iter().filter_map(|t| m.get(t)).sum(),
        }
    };
    let mut mine = c.svc.subscribe_teams();
    let seen = visible(&mine.borrow_and_update());
    let state = (mine, c.observer.subscribe(), c.closing.subscribe(), seen, None::<tokio::time::Instant>);
    let stream = futures::stream::unfold(state, move |(mut a, mut b, mut closing, mut seen, last)| {
        let visible = visible.clone();
        async move {
            loop {
                if *closing.borrow() {
                    return None;
                }
                tokio::select! {
                    r = a.changed() => {
                        r.ok()?;
                        if visible(&a.borrow_and_update()) == seen {
                            continue;
                        }
                    }
                    r = b.changed() => { r.ok()?; b.borrow_and_update(); }
                    _ = closing.changed() => return None,
                }
                // Coalesced: what arrives within a second of the last
                // event is told once, at the second's end.
                let due = last
                    .map(|l| l + COALESCE)
                    .unwrap_or_else(tokio::time::Instant::now)
                    .max(tokio::time::Instant::now() + SETTLE);
                tokio::time::sleep_until(due).await;
                seen = visible(&a.borrow_and_update());
                b.borrow_and_update();
                let n = seen + *b.borrow();
                let ev = Event::default().event("change").data(n.to_string());
                return Some((Ok::<_, Infallible>(ev), (a, b, closing, seen, Some(tokio::time::Instant::now()))));
            }
        }
    });
    secured(Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))).into_response())
}

async fn css() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], html::CSS)
        .into_response()
}

async fn js() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")], html::JS)
        .into_response()
}

fn login_form(message: Option<&str>) -> String {
    let note = message.map(|m| format!("<p class=\"stale-note\" role=\"alert\">{}</p>", esc(m))).unwrap_or_default();
    format!(
        "<h1>Sign in</h1>{note}<p>Paste a token the gateway accepts: an OIDC ID token from your issuer, or a \
Kubernetes service-account token. A browser holding a client certificate the gateway trusts is signed in already.</p>\
<form method=\"post\" action=\"/login\"><label for=\"token\">Bearer token</label>\
<textarea id=\"token\" name=\"token\" autocomplete=\"off\" spellcheck=\"false\" required></textarea>\
<p><button type=\"submit\">Sign in</button></p></form>"
    )
}

async fn login_page() -> Response {
    let v = Viewer::default();
    secured(
        ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html::page("Sign in", "/login", &v, &login_form(None)))
            .into_response(),
    )
}

#[derive(Deserialize, Serialize)]
struct LoginForm {
    token: String,
}

async fn login(State(c): State<C>, Form(f): Form<LoginForm>) -> Response {
    let token = f.token.trim();
    let refuse = |m: &str| {
        secured(
            (
                StatusCode::UNAUTHORIZED,
                [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                html::page("Sign in", "/login", &Viewer::default(), &login_form(Some(m))),
            )
                .into_response(),
        )
    };
    // A token goes into a cookie as it is: only the characters of a JWT.
    if token.is_empty() || !token.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '.' | '-' | '_')) {
        return refuse("that is not a token (a JWT: letters, digits, '.', '-' and '_')");
    }
    match c.svc.identity.authenticate(Some(token), None).await {
        Ok(who) => {
            let secure = if c.secure { "; Secure" } else { "" };
            let cookie =
                format!("{TOKEN_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict; Max-Age={COOKIE_SECONDS}{secure}");
            // A sign-in is a decision like any other: in the audit log, with who.
            c.svc.audit_log.write(&crate::gateway::audit::Entry::new(
                Some(&who),
                "console-login",
                "/login",
                303,
                "signed in",
            ));
            let mut r = Redirect::to("/").into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            secured(r)
        }
        Err(e) => refuse(&format!("the gateway refused that token: {}", e.0)),
    }
}

#[derive(Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// Signs out: a POST from the page's form, its token the viewer's.
async fn logout(State(c): State<C>, headers: HeaderMap, peer: Peer, Form(form): Form<LogoutForm>) -> Response {
    let who = match caller(&c, &headers, &peer).await {
        Ok(w) => w,
        // Not signed in: nothing to end.
        Err(_) => return secured(Redirect::to("/login").into_response()),
    };
    if form.csrf.is_empty() || form.csrf != c.csrf_for(&who) {
        return secured(
            (StatusCode::FORBIDDEN, "signing out takes the console's own form (its token did not match)\n")
                .into_response(),
        );
    }
    let mut r = Redirect::to("/login").into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_str(&format!("{TOKEN_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"))
            .expect("a header value"),
    );
    secured(r)
}

/// The views as JSON: part of the API (`pinfleet view`, `workloads
/// describe`, `queue` and `quota` read them), served with or without the pages.
pub fn views(c: C) -> Router {
    Router::new().route("/v1/views/{*path}", get(view_json)).with_state(c)
}

/// The web pages: the views as HTML, their live updates, sign-in and sign-out.
pub fn pages(c: C) -> Router {
    Router::new()
        .route("/", get(fleet_page))
        .route("/clusters/{name}", get(cluster_page))
        .route("/teams/{team}", get(team_page))
        .route("/workloads/{team}/{id}", get(workload_page))
        .route("/ui/events", get(events))
        .route("/ui/console.css", get(css))
        .route("/ui/console.js", get(js))
        .route("/login", get(login_page).post(login))
        .route("/logout", axum::routing::post(logout))
        .with_state(c)
}

/// The gateway's API with its views, and the console's pages, on one router.
pub fn app(c: C) -> Router {
    api(c.clone()).merge(pages(c))
}

/// The gateway's API with its views, without the pages (`--no-console`).
pub fn api(c: C) -> Router {
    crate::gateway::http::router(c.svc.clone()).merge(views(c))
}
