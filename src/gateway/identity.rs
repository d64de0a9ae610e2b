//! Who is calling (effects at the edge: the issuer's JWKS, the host
//! cluster's TokenReview).
//!
//! ```text
//! request ─┬─ client certificate (TLS) ── CN user, O groups
//!          ├─ Bearer JWT from the OIDC issuer ── JWKS: signature, issuer,
//!          │                                     audience, expiry; groups claim
//!          └─ any other Bearer token ── TokenReview on the host cluster
//!                                       (service accounts, for CI systems)
//!     ▼
//! Caller { user, teams, admin, via }   or   Refusal (401, said without leaking)
//! ```
//!
//! Teams are the groups that start with the team prefix (`team:` by
//! default: `team:search` is team `search`); a service account's team is its
//! namespace. The admin group edits quotas and acts for every team.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{decode, decode_header, Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::RwLock;

use super::intake::Caller;

pub use crate::edge::{peer_identity, ConnectionState, Holder, PeerCertificate, CONNECTION_TRUST};

/// Why a caller is refused: what the caller may be told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

#[derive(Debug, Clone)]
pub struct OidcSettings {
    pub issuer: String,
    pub audience: String,
    /// Where the keys are (default: the issuer's discovery document).
    pub jwks_url: Option<String>,
    pub groups_claim: String,
    pub username_claim: String,
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub oidc: Option<OidcSettings>,
    /// Ask the host cluster about tokens that are not the issuer's.
    pub token_review: bool,
    pub team_prefix: String,
    pub admin_group: String,
    /// Without credentials, this caller (loopback, local work only).
    pub anonymous: Option<Caller>,
}

struct Keys {
    set: JwkSet,
    /// The last fetch (succeeded or not) and whether it did.
    tried: Option<(Instant, bool)>,
}

/// How often the issuer's keys may be fetched: an unknown kid, or an
/// issuer that does not answer, is never a request to it per call.
const KEYS_AT_MOST_EVERY: Duration = Duration::from_secs(10);

pub struct Identity {
    settings: Settings,
    keys: RwLock<Keys>,
    /// Held while the keys are fetched: one fetch at a time, the callers
    /// that arrive meanwhile wait for its outcome.
    fetching: tokio::sync::Mutex<()>,
    host: Option<kube::Client>,
    /// TokenReview answers by the token's sha256, for [`REVIEW_KEPT`].
    reviews: std::sync::Mutex<std::collections::HashMap<[u8; 32], (Instant, Result<Caller, Refusal>)>>,
    /// TokenReviews asked of the host at once.
    reviewing: tokio::sync::Semaphore,
}

/// How long a TokenReview's answer is kept (the API server's own webhook
/// authenticator keeps them longer): a token sent again and again is one
/// review, not one a call.
const REVIEW_KEPT: Duration = Duration::from_secs(10);
/// The answers kept at most (past it, the expired go; while it is full of
/// live ones, new answers are not kept).
const REVIEWS_KEPT_MAX: usize = 10_000;
/// TokenReviews in flight to the host at once: a flood of tokens waits
/// here, not in the host's API server.
const REVIEWS_AT_ONCE: usize = 16;

/// Whether `token` can be a service account's token: a JWT (three
/// base64url parts), as every token the API server issues is. Anything
/// else is refused without asking the host.
fn jwt_shaped(token: &str) -> bool {
    let parts: Vec<&str> = token.split('.').collect();
    token.len() <= 16 * 1024
        && parts.len() == 3
        && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
}

#[derive(Deserialize)]
struct Claims {
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

type HttpsClient = hyper_util::client::legacy::Client<
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
    http_body_util::Empty<bytes::Bytes>,
>;

fn https() -> HttpsClient {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let conn = hyper_rustls::HttpsConnectorBuilder::new()
        .with_native_roots()
        .unwrap_or_else(|_| {
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )
        })
        .https_or_http()
        .enable_http1()
        .build();
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(conn)
}

/// A JSON document, whole within 10 s and at most 1 MiB.
async fn get_json(url: &str) -> anyhow::Result<Value> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = url.parse()?;
    let body = tokio::time::timeout(Duration::from_secs(10), async {
        let resp = https().get(uri).await?;
        let status = resp.status();
        let body = http_body_util::Limited::new(resp.into_body(), 1 << 20)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .to_bytes();
        anyhow::ensure!(status.is_success(), "{url}: HTTP {status}");
        anyhow::Ok(body)
    })
    .await??;
    Ok(serde_json::from_slice(&body)?)
}

/// The teams a caller's groups name: only names a team can have (a DNS
/// label); `team:`, `team:../x` or a name with a line break are no team.
fn teams_of(groups: &[String], prefix: &str) -> Vec<String> {
    let mut t: Vec<String> = groups
        .iter()
        .filter_map(|g| g.strip_prefix(prefix))
        .filter(|t| crate::spec::validate::is_dns_label(t))
        .map(str::to_string)
        .collect();
    t.sort();
    t.dedup();
    t
}

impl Identity {
    pub fn new(settings: Settings, host: Option<kube::Client>) -> Arc<Identity> {
        Arc::new(Identity {
            settings,
            keys: RwLock::new(Keys { set: JwkSet { keys: vec![] }, tried: None }),
            fetching: tokio::sync::Mutex::new(()),
            host,
            reviews: std::sync::Mutex::default(),
            reviewing: tokio::sync::Semaphore::new(REVIEWS_AT_ONCE),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The issuer's keys fetched again, at most once every
    /// [`KEYS_AT_MOST_EVERY`] and one fetch at a time: a fetch that failed
    /// is answered as failed until then, without asking again.
    async fn refresh_keys(&self, o: &OidcSettings) -> Result<(), Refusal> {
        let unreadable = || Refusal("the identity provider's keys could not be read; try again".into());
        let recent = |k: &Keys| k.tried.filter(|(at, _)| at.elapsed() < KEYS_AT_MOST_EVERY).map(|(_, ok)| ok);
        match recent(&*self.keys.read().await) {
            Some(true) => return Ok(()),
            Some(false) => return Err(unreadable()),
            None => {}
        }
        let _one = self.fetching.lock().await;
        // Another caller's fetch may have ended while this one waited.
        match recent(&*self.keys.read().await) {
            Some(true) => return Ok(()),
            Some(false) => return Err(unreadable()),
            None => {}
        }
        let fetched = self.fetch_keys(o).await;
        let mut k = self.keys.write().await;
        k.tried = Some((Instant::now(), fetched.is_some()));
        match fetched {
            Some(set) => {
                k.set = set;
                Ok(())
            }
            None => Err(unreadable()),
        }
    }

    /// The issuer's key set (discovery first, unless its URL is given);
    /// none when it could not be read (said in the log).
    async fn fetch_keys(&self, o: &OidcSettings) -> Option<JwkSet> {
        let url = match &o.jwks_url {
            Some(u) => u.clone(),
            None => {
                let disco = format!("{}/.well-known/openid-configuration", o.issuer.trim_end_matches('/'));
                let d = get_json(&disco).await.map_err(|e| tracing::warn!("OIDC discovery {disco}: {e:#}")).ok()?;
                let Some(u) = d.get("jwks_uri").and_then(Value::as_str) else {
                    tracing::warn!("OIDC discovery {disco}: no jwks_uri");
                    return None;
                };
                u.to_string()
            }
        };
        match get_json(&url).await.and_then(|v| Ok(serde_json::from_value(v)?)) {
            Ok(set) => Some(set),
            Err(e) => {
                tracing::warn!("JWKS {url}: {e:#}");
                None
            }
        }
    }

    async fn verify_jwt(&self, o: &OidcSettings, token: &str) -> Result<Caller, Refusal> {
        let header = decode_header(token).map_err(|_| Refusal("the bearer token is not a JWT".into()))?;
        if !matches!(
            header.alg,
            Algorithm::RS256 | Algorithm::ES256 | Algorithm::RS384 | Algorithm::ES384 | Algorithm::PS256
        ) {
            return Err(Refusal(format!("tokens signed with {:?} are not accepted", header.alg)));
        }
        // A critical header this gateway does not understand must not be
        // ignored (RFC 7515 §4.1.11): it understands none.
        if crit_header(token).is_some() {
            return Err(Refusal(
                "the token names critical header parameters (crit) this gateway does not understand".into(),
            ));
        }
        let kid = header.kid.clone().unwrap_or_default();
        let find =
            |set: &JwkSet| set.keys.iter().find(|k| k.common.key_id.as_deref().unwrap_or_default() == kid).cloned();
        let mut jwk = find(&self.keys.read().await.set);
        if jwk.is_none() {
            self.refresh_keys(o).await?;
            jwk = find(&self.keys.read().await.set);
        }
        let jwk = jwk.ok_or_else(|| Refusal("the token's signing key is not the identity provider's".into()))?;
        let key = DecodingKey::from_jwk(&jwk).map_err(|_| Refusal("the token's signing key is not usable".into()))?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[o.issuer.as_str()]);
        v.set_audience(&[o.audience.as_str()]);
        // Clocks drift: 30 s either way, as the API server's OIDC authenticator allows.
        v.leeway = 30;
        // A token not valid yet (`nbf` ahead) is refused, not taken early.
        v.validate_nbf = true;
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        use jsonwebtoken::errors::ErrorKind as K;
        let data = decode::<Claims>(token, &key, &v).map_err(|e| {
            Refusal(
                match e.kind() {
                    K::ExpiredSignature => "the token has expired",
                    K::InvalidAudience => "the token is not for this gateway (audience)",
                    K::InvalidIssuer => "the token is from another issuer",
                    K::InvalidSignature => "the token's signature does not verify",
                    K::ImmatureSignature => "the token is not valid yet",
                    K::MissingRequiredClaim(_) => "the token lacks a required claim (exp, iss, aud, sub)",
                    _ => "the token is not valid",
                }
                .to_string(),
            )
        })?;
        let claims = data.claims.rest;
        check_claims(&claims, v.leeway)?;
        // The user: the configured claim; an `email` counts only when the
        // issuer says it was verified (as the API server's OIDC
        // authenticator requires), else the subject.
        let verified = claims.get("email_verified").and_then(Value::as_bool) == Some(true);
        let named = claims.get(&o.username_claim).filter(|_| o.username_claim != "email" || verified);
        let user = named.or_else(|| claims.get("sub")).and_then(Value::as_str).unwrap_or_default().to_string();
        if user.trim().is_empty() {
            return Err(Refusal("the token names no user (its subject is empty)".into()));
        }
        let groups: Vec<String> = match claims.get(&o.groups_claim) {
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            Some(Value::String(s)) => vec![s.clone()],
            _ => vec![],
        };
        Ok(self.caller(user, &groups, "oidc"))
    }

    fn caller(&self, user: String, groups: &[String], via: &str) -> Caller {
        Caller {
            user,
            teams: teams_of(groups, &self.settings.team_prefix),
            admin: groups.iter().any(|g| *g == self.settings.admin_group),
            via: via.to_string(),
        }
    }

    /// A service account's token, checked by the host's TokenReview: only
    /// a JWT is sent, at most [`REVIEWS_AT_ONCE`] at a time (a caller
    /// waits 2 s for its turn at most), and its answer (not an error
    /// reaching the host) is kept for [`REVIEW_KEPT`].
    async fn token_review(&self, token: &str) -> Result<Caller, Refusal> {
        if self.host.is_none() {
            return Err(Refusal("the bearer token is not from the identity provider".into()));
        }
        if !jwt_shaped(token) {
            return Err(Refusal("the token is not valid".into()));
        }
        use sha2::Digest as _;
        let key: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let kept =
            |reviews: &std::sync::Mutex<std::collections::HashMap<[u8; 32], (Instant, Result<Caller, Refusal>)>>| {
                let r = reviews.lock().ok()?;
                r.get(&key).filter(|(at, _)| at.elapsed() < REVIEW_KEPT).map(|(_, a)| a.clone())
            };
        if let Some(a) = kept(&self.reviews) {
            return a;
        }
        // A turn within 2 s, or "try again": a flood of tokens does not
        // hold an honest caller's review for longer.
        let _turn = match tokio::time::timeout(Duration::from_secs(2), self.reviewing.acquire()).await {
            Ok(Ok(turn)) => turn,
            _ => return Err(Refusal("the token could not be checked; try again".into())),
        };
        // Answered while this one waited its turn.
        if let Some(a) = kept(&self.reviews) {
            return a;
        }
        let answer = self.review_now(token).await;
        let transient = matches!(&answer, Err(r) if r.0.contains("try again"));
        if !transient {
            if let Ok(mut r) = self.reviews.lock() {
                if r.len() >= REVIEWS_KEPT_MAX {
                    r.retain(|_, (at, _)| at.elapsed() < REVIEW_KEPT);
                }
                // Full of live answers (a flood): this one is not kept,
                // and the answers honest callers already have stay.
                if r.len() < REVIEWS_KEPT_MAX {
                    r.insert(key, (Instant::now(), answer.clone()));
                }
            }
        }
        answer
    }

    async fn review_now(&self, token: &str) -> Result<Caller, Refusal> {
        let Some(client) = &self.host else {
            return Err(Refusal("the bearer token is not from the identity provider".into()));
        };
        let req = http::Request::post("/apis/authentication.k8s.io/v1/tokenreviews")
            .header("content-type", "application/json")
            .body(
                serde_json::to_vec(
                    &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}),
                )
                .unwrap_or_default(),
            )
            .expect("a request");
        let v: Value = client.request(req).await.map_err(|e| {
            tracing::warn!("TokenReview: {e}");
            Refusal("the token could not be checked; try again".into())
        })?;
        if v.pointer("/status/authenticated") != Some(&Value::Bool(true)) {
            return Err(Refusal("the token is not valid".into()));
        }
        let user = v.pointer("/status/user/username").and_then(Value::as_str).unwrap_or_default().to_string();
        let groups: Vec<String> = v
            .pointer("/status/user/groups")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        let mut c = self.caller(user.clone(), &groups, "serviceaccount");
        // A service account acts for the team its namespace is named after.
        if let Some(ns) = user.strip_prefix("system:serviceaccount:").and_then(|r| r.split(':').next()) {
            c.teams.push(ns.to_string());
            c.teams.sort();
            c.teams.dedup();
        }
        Ok(c)
    }

    /// Authenticates a request: a client certificate first, then a bearer
    /// token. A success marks the connection it came on as worth keeping
    /// ([`CONNECTION_TRUST`]): the listener evicts strangers first.
    pub async fn authenticate(&self, bearer: Option<&str>, cert: Option<&PeerCertificate>) -> Result<Caller, Refusal> {
        let r = self.authenticate_inner(bearer, cert).await;
        if let Ok(c) = &r {
            let _ = CONNECTION_TRUST.try_with(|t| t.trust(&c.user, c.teams.first().map(String::as_str)));
        }
        r
    }

    async fn authenticate_inner(
        &self,
        bearer: Option<&str>,
        cert: Option<&PeerCertificate>,
    ) -> Result<Caller, Refusal> {
        if let Some(c) = cert {
            return Ok(self.caller(c.common_name.clone(), &c.organizations, "certificate"));
        }
        let Some(token) = bearer.map(str::trim).filter(|t| !t.is_empty()) else {
            return self
                .settings
                .anonymous
                .clone()
                .ok_or_else(|| Refusal("no credentials: send a bearer token or a client certificate".into()));
        };
        if let Some(o) = &self.settings.oidc {
            // A JWT whose issuer is ours is verified here; anything else
            // goes to the host cluster.
            if let Some(iss) = unverified_issuer(token) {
                if iss == o.issuer || !self.settings.token_review {
                    return self.verify_jwt(o, token).await;
                }
            }
        }
        if self.settings.token_review {
            return self.token_review(token).await;
        }
        Err(Refusal("the bearer token is not from the identity provider".into()))
    }
}

/// The cookie the console's `/login` sets: the bearer token a browser
/// cannot send as a header.
pub const TOKEN_COOKIE: &str = "pinfleet_token";

/// The token a request carries: its bearer header, else the sign-in cookie.
pub fn request_token(headers: &http::HeaderMap) -> Option<String> {
    let header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_string);
    header.or_else(|| {
        headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == TOKEN_COOKIE)
            .map(|(_, v)| v.to_string())
    })
}

/// A JWT header's `crit`, if it has one (whatever its form).
fn crit_header(token: &str) -> Option<Value> {
    use base64::Engine as _;
    let head = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(head.trim_end_matches('=')).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("crit").cloned()
}

/// The longest a token may still live: an issuer's sessions are hours.
const MAX_TOKEN_LIFETIME_SECONDS: i64 = 24 * 3600;

/// The time claims a verified token carries are numbers (RFC 7519 §2:
/// NumericDate), and it was not issued in the future.
fn check_claims(claims: &serde_json::Map<String, Value>, leeway: u64) -> Result<(), Refusal> {
    for c in ["nbf", "iat", "exp"] {
        if let Some(v) = claims.get(c).filter(|v| !v.is_number()) {
            return Err(Refusal(format!("the token's {c} is not a time (a number of seconds): {}", short(v))));
        }
    }
    // A time is whole seconds (a NumericDate an issuer writes), and a
    // token lives at most a day: one that expires in the year 3000 is a
    // key's misuse, not a session.
    for c in ["nbf", "iat", "exp"] {
        if let Some(v) = claims.get(c).filter(|v| v.as_i64().is_none()) {
            return Err(Refusal(format!("the token's {c} is not a whole number of seconds ({})", short(v))));
        }
    }
    if let Some(exp) = claims.get("exp").and_then(Value::as_i64) {
        let now = chrono::Utc::now().timestamp();
        if exp > now.saturating_add(MAX_TOKEN_LIFETIME_SECONDS) {
            return Err(Refusal(
                "the token expires more than a day from now: the gateway takes tokens that live at most 24 hours"
                    .into(),
            ));
        }
    }
    // Issued in the future: a clock or an issuer gone wrong; refused.
    if let Some(iat) = claims.get("iat").and_then(Value::as_f64) {
        let now = chrono::Utc::now().timestamp() as f64;
        if iat > now + leeway as f64 {
            return Err(Refusal("the token was issued in the future (iat); check the issuer's clock".into()));
        }
    }
    Ok(())
}

/// A claim's value as shown in a refusal: its kind only, nothing echoed.
fn short(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "a string",
        Value::Bool(_) => "a boolean",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
        Value::Null => "null",
        Value::Number(_) => "a number",
    }
}

/// The `iss` of a JWT, unverified (only to route it).
fn unverified_issuer(token: &str) -> Option<String> {
    use base64::Engine as _;
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v.get("iss").and_then(Value::as_str).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_claims_are_numbers_and_crit_is_seen() {
        let m = |v: Value| v.as_object().unwrap().clone();
        assert!(check_claims(&m(serde_json::json!({"nbf": 1, "iat": 1})), 30).is_ok());
        for bad in [serde_json::json!({"nbf": "1"}), serde_json::json!({"iat": true}), serde_json::json!({"iat": [1]})]
        {
            let e = check_claims(&m(bad.clone()), 30).unwrap_err();
            assert!(e.0.contains("is not a time"), "{bad}: {}", e.0);
        }
        assert!(check_claims(&m(serde_json::json!({"iat": 4_000_000_000u64})), 30).is_err());
        use base64::Engine as _;
        let head = |h: Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(h.to_string());
        let with = format!("{}.e30.sig", head(serde_json::json!({"alg": "RS256", "crit": ["exp-ext"], "exp-ext": 1})));
        assert!(crit_header(&with).is_some());
        assert!(crit_header(&format!("{}.e30.sig", head(serde_json::json!({"alg": "RS256"})))).is_none());
    }

    #[test]
    fn only_a_jwt_is_sent_for_review() {
        assert!(jwt_shaped("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln-_"));
        for not in
            ["not-a-token", "a.b", "a.b.c.d", "a..c", "a.b.c d", "a.b.c\n", &format!("a.b.{}", "c".repeat(17_000))]
        {
            assert!(!jwt_shaped(not), "{not:?}");
        }
    }

    #[test]
    fn teams_are_the_groups_with_the_prefix() {
        let g = vec!["team:search".to_string(), "staff".into(), "team:ads".into(), "team:search".into()];
        assert_eq!(teams_of(&g, "team:"), ["ads", "search"]);
        // Only names a team can have.
        let odd: Vec<String> = ["team:", "team:../beta", "team:alpha\nbeta", "team:Alpha", "team:-x", "team:ok-1"]
            .map(String::from)
            .into();
        assert_eq!(teams_of(&odd, "team:"), ["ok-1"]);
    }
}
