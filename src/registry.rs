//! The registry edge of provenance (effects): an image reference checked
//! against the registries the gateway (or a delivery) may talk to (a look-alike host is
//! refused before any request), its tag resolved to a digest once, the
//! cosign artifacts beside it fetched (`sha256-<hex>.sig`, `.att`: tags, as
//! a registry without a referrers endpoint keeps them), and the verdict of
//! `provenance::verify` (pure) cached by digest and policy, so a
//! resubmission does not verify again.
//!
//! ```text
//! image ref ─▶ host allowed? ─▶ digest (tag resolved) ─▶ cache? ─▶ evidence
//!    (.sig, .att) ─▶ provenance::verify ─▶ Checked { pinned ref, verdict }
//! ```
//!
//! What a registry (a team's own, hostile or not) can make the gateway hold
//! is bounded by construction: a few layers of each kind, each refused by
//! its descriptor's size before it is pulled and read through a capped
//! writer (a descriptor that lies is cut off at the cap), every call under
//! a timeout, a few checks fetching at once, never a layer's foreign
//! `urls`, redirects followed only on the registry's own host (a registry
//! cannot send the gateway's requests elsewhere), a blob's bytes checked
//! against its digest, and a failed read said without echoing what the
//! server sent. Manifests and blobs are read here over HTTP (reqwest, with
//! that redirect policy); `oci-client` only fetches a bearer token when the
//! registry asks for one (the token service is the one the registry's
//! challenge names).
//! A refusal is cached for a minute (an image signed after its first
//! submission is trusted on the next), a verdict of trust for an hour.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use sha2::Digest as _;

use crate::provenance::{self, Evidence, TrustPolicy, Verdict};

/// An image as checked: the reference pinned by digest (what goes to the
/// members) and the verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub pinned: Option<String>,
    pub verdict: Verdict,
}

/// The registries the gateway reads, and the verdicts it has reached.
pub struct Registries {
    /// Bearer tokens, when a registry asks for one.
    client: Client,
    /// Manifests and blobs: redirects only on the registry's own host.
    http: reqwest::Client,
    /// Hosts spoken to without TLS.
    plain_http: Vec<String>,
    /// Per `host/repository`: the bearer token to pull with (None: the
    /// registry asks for none), kept [`TOKEN_TTL`].
    tokens: Mutex<HashMap<String, (Option<String>, Instant)>>,
    /// Registry hosts (`host[:port]`) the gateway may talk to, exactly.
    allowed: Vec<String>,
    cache: Mutex<HashMap<(String, String), (Verdict, Instant)>>,
    /// Checks fetching evidence at once.
    fetching: tokio::sync::Semaphore,
    /// Each team's places among them: a team whose registry is slow
    /// holds only its own, never every place.
    teams: Mutex<HashMap<String, std::sync::Arc<tokio::sync::Semaphore>>>,
    /// How long a refusal is kept (default [`REFUSAL_TTL`]).
    refusal_ttl: Duration,
    /// Requests made to registries (for the cache's figures).
    pub calls: AtomicU64,
}

/// The most verdicts kept; past it the cache starts again.
const CACHE_MAX: usize = 10_000;
/// A refusal is asked again after this (the image may be signed since).
const REFUSAL_TTL: Duration = Duration::from_secs(60);
/// A verdict of trust is kept this long (a digest never changes; a
/// policy's keys do, and a changed policy is another cache key).
const TRUST_TTL: Duration = Duration::from_secs(3600);
/// A cosign signature layer is a simple-signing payload: a few hundred bytes.
pub const SIGNATURE_MAX: u64 = 16 * 1024;
/// An attestation is a DSSE envelope of an in-toto statement: tens of KiB.
pub const ATTESTATION_MAX: u64 = 512 * 1024;
/// Layers of each kind read for one digest.
const LAYERS_MAX: usize = 4;
/// Each request to a registry (connect and whole answer).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a registry's answer on tokens is kept (a registry's bearer
/// tokens live five minutes or more).
const TOKEN_TTL: Duration = Duration::from_secs(60);
/// A manifest (an image's, or the one listing its signatures) is a few KiB.
const MANIFEST_MAX: usize = 256 * 1024;
/// Redirects followed (on the registry's own host) before giving up.
const REDIRECTS_MAX: usize = 5;
/// What a manifest request accepts (an image, an index, Docker's two).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// Checks fetching evidence at once: with the caps above, at most
/// 8 × 4 × (16 KiB + 512 KiB) ≈ 17 MiB held.
const FETCHING_MAX: usize = 8;
/// Of those, one team's at once: four teams' slow registries fill them.
const FETCHING_PER_TEAM: usize = 2;

/// A writer that refuses past `cap` bytes: a layer whose descriptor lied
/// about its size is cut off there.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        if self.buf.len().saturating_add(data.len()) > self.cap {
            return Poll::Ready(Err(std::io::Error::other("the layer is larger than its kind may be")));
        }
        self.buf.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The registry host of `reference` as the allowed list names it: as
/// written (`docker.io`), or as the client resolves it (`index.docker.io`
/// for Docker Hub); None when neither is allowed.
pub fn allowed_host(reference: &Reference, allowed: &[String]) -> Option<String> {
    [reference.registry(), reference.resolve_registry()]
        .into_iter()
        .find(|h| allowed.iter().any(|a| a == h))
        .map(str::to_string)
}

impl Registries {
    /// `allowed`: the hosts the gateway may read; `plain_http`: those of
    /// them spoken to without TLS (a registry on loopback).
    pub fn new(allowed: Vec<String>, plain_http: Vec<String>) -> Registries {
        let plain_http_hosts = plain_http.clone();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(plain_http),
            connect_timeout: Some(Duration::from_secs(5)),
            read_timeout: Some(CALL_TIMEOUT),
            max_concurrent_download: 1,
            ..Default::default()
        };
        let http = reqwest::Client::builder()
            .redirect(same_host_only())
            .connect_timeout(Duration::from_secs(5))
            .timeout(CALL_TIMEOUT)
            .build()
            .unwrap_or_default();
        Registries {
            client: Client::new(config),
            http,
            plain_http: plain_http_hosts,
            tokens: Mutex::new(HashMap::new()),
            allowed,
            cache: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Semaphore::new(FETCHING_MAX),
            teams: Mutex::new(HashMap::new()),
            refusal_ttl: REFUSAL_TTL,
            calls: AtomicU64::new(0),
        }
    }

    /// Refusals kept for `d` instead of [`REFUSAL_TTL`].
    pub fn refusals_kept(mut self, d: Duration) -> Registries {
        self.refusal_ttl = d;
        self
    }

    fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Checks `image` against `policy`: pinned by digest and verified, or
    /// refused with the reason (never an error: the caller decides by mode).
    pub async fn check(&self, image: &str, policy: &TrustPolicy) -> Checked {
        self.check_for("", image, policy).await
    }

    /// A team's place among the checks fetching at once.
    fn team_places(&self, team: &str) -> std::sync::Arc<tokio::sync::Semaphore> {
        let mut teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        if teams.len() > 4096 {
            teams.retain(|_, s| s.available_permits() < FETCHING_PER_TEAM);
        }
        teams
            .entry(team.to_string())
            .or_insert_with(|| std::sync::Arc::new(tokio::sync::Semaphore::new(FETCHING_PER_TEAM)))
            .clone()
    }

    /// [`Registries::check`] for `team`: its evidence fetched in one of the
    /// team's own places ([`FETCHING_PER_TEAM`]) before one of all.
    pub async fn check_for(&self, team: &str, image: &str, policy: &TrustPolicy) -> Checked {
        let refused = |digest: &str, why: String| Checked {
            pinned: None,
            verdict: Verdict {
                digest: digest.to_string(),
                checked: Vec::new(),
                key: None,
                statement: None,
                refused: Some(why),
            },
        };
        let reference: Reference = match image.parse() {
            Ok(r) => r,
            Err(e) => return refused("", format!("{image:?} is not an image reference: {e}")),
        };
        let Some(host) = allowed_host(&reference, &self.allowed) else {
            let host = reference.registry();
            return refused(
                "",
                format!("{image}: registry {host:?} is not one the gateway reads ({})", self.allowed.join(", ")),
            );
        };
        // Every request to the team's registry is made in one of the team's
        // own places: its slow registry holds only its own, and however
        // many requests it sends, its checks under way are a few.
        let places = self.team_places(team);
        let Ok(_mine) = places.acquire().await else {
            return refused("", "the gateway is stopping".into());
        };
        // The digest: the one named, checked to exist, or the tag's, resolved once.
        let token = match self.token(&reference).await {
            Ok(t) => t,
            Err(why) => return refused("", format!("{image}: {why}")),
        };
        let named = reference.digest().or(reference.tag()).unwrap_or("latest").to_string();
        let digest =
            match self.get(&reference, "manifests", &named, token.as_deref(), MANIFEST_ACCEPT, MANIFEST_MAX).await {
                Ok(Some((headers, body))) => headers
                    .get("docker-content-digest")
                    .and_then(|v| v.to_str().ok())
                    .filter(|d| provenance_digest_ok(d))
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("sha256:{}", hex::encode(sha2::Sha256::digest(&body)))),
                Ok(None) => return refused("", format!("{image}: no such image in {host}")),
                Err(why) => return refused("", format!("{image}: {why}")),
            };
        if let Some(named) = reference.digest() {
            if named != digest {
                return refused(&digest, format!("{image}: the registry serves {digest}, not {named}"));
            }
        }
        let pinned = format!("{host}/{}@{digest}", reference.repository());
        let key = (digest.clone(), fingerprint(policy));
        let fresh = |(v, at): &(Verdict, Instant)| {
            at.elapsed() < if v.refused.is_some() { self.refusal_ttl } else { TRUST_TTL }
        };
        if let Some((v, _)) = self.cache.lock().ok().and_then(|c| c.get(&key).filter(|e| fresh(e)).cloned()) {
            return Checked { pinned: Some(pinned), verdict: v };
        }
        let Ok(_fetching) = self.fetching.acquire().await else {
            return refused(&digest, "the gateway is stopping".into());
        };
        let evidence = match self.evidence(&reference, &digest, token.as_deref()).await {
            Ok(e) => e,
            Err(why) => return refused(&digest, why),
        };
        let verdict = provenance::verify(policy, &evidence);
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_MAX {
                c.retain(|_, e| fresh(e));
                if c.len() >= CACHE_MAX {
                    c.clear();
                }
            }
            c.insert(key, (verdict.clone(), Instant::now()));
        }
        Checked { pinned: Some(pinned), verdict }
    }

    /// The signatures and attestations kept beside `digest`.
    async fn evidence(&self, image: &Reference, digest: &str, token: Option<&str>) -> Result<Evidence, String> {
        let mut ev = Evidence { digest: digest.to_string(), ..Default::default() };
        for (tag, media_type) in [
            (provenance::signature_tag(digest), provenance::SIGNATURE_MEDIA_TYPE),
            (provenance::attestation_tag(digest), provenance::DSSE_MEDIA_TYPE),
        ] {
            let at = Reference::with_tag(image.registry().to_string(), image.repository().to_string(), tag.clone());
            let manifest: OciImageManifest =
                match self.get(image, "manifests", &tag, token, MANIFEST_ACCEPT, MANIFEST_MAX).await? {
                    Some((_, body)) => match serde_json::from_slice(&body) {
                        Ok(m) => m,
                        // Not an image manifest: no evidence of this kind.
                        Err(_) => continue,
                    },
                    // Nothing there: no signature (or attestation) for this digest.
                    None => continue,
                };
            let cap = if media_type == provenance::SIGNATURE_MEDIA_TYPE { SIGNATURE_MAX } else { ATTESTATION_MAX };
            for layer in manifest.layers.iter().filter(|l| l.media_type == media_type).take(LAYERS_MAX) {
                if u64::try_from(layer.size).map_or(true, |n| n > cap) {
                    return Err(format!(
                        "{} of {at}: {} bytes, more than such a layer may be ({cap})",
                        layer.digest, layer.size
                    ));
                }
                // Never a layer's foreign `urls`: only the registry named is asked.
                let bytes = match self.get(image, "blobs", &layer.digest, token, "*/*", cap as usize).await {
                    Ok(Some((_, b))) => b,
                    Ok(None) => return Err(format!("{} of {at}: the registry does not have it", layer.digest)),
                    Err(why) => return Err(format!("{} of {at}: {why}", layer.digest)),
                };
                if format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes))) != layer.digest {
                    return Err(format!("{} of {at}: the bytes served are not that digest's", layer.digest));
                }
                if media_type == provenance::SIGNATURE_MEDIA_TYPE {
                    let sig = layer
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(provenance::SIGNATURE_ANNOTATION))
                        .cloned()
                        .unwrap_or_default();
                    ev.signatures.push((bytes, sig));
                } else {
                    ev.attestations.push(bytes);
                }
            }
        }
        Ok(ev)
    }
}

impl Registries {
    /// A bearer token for pulling from `image`'s repository, when its
    /// registry asks for one (its `/v2/` answers 401); None when it does not.
    async fn token(&self, image: &Reference) -> Result<Option<String>, String> {
        let key = format!("{}/{}", image.resolve_registry(), image.repository());
        if let Some((t, _)) =
            self.tokens.lock().ok().and_then(|c| c.get(&key).filter(|(_, at)| at.elapsed() < TOKEN_TTL).cloned())
        {
            return Ok(t);
        }
        let t = self.ask_token(image).await?;
        if let Ok(mut c) = self.tokens.lock() {
            if c.len() >= CACHE_MAX {
                c.clear();
            }
            c.insert(key, (t.clone(), Instant::now()));
        }
        Ok(t)
    }

    async fn ask_token(&self, image: &Reference) -> Result<Option<String>, String> {
        let base = self.base(image);
        self.call();
        let ping = self.http.get(format!("{base}/v2/")).send().await.map_err(|e| {
            tracing::debug!("{base}/v2/: {e}");
            if e.is_timeout() {
                format!("the registry did not answer within {CALL_TIMEOUT:?}")
            } else {
                "the registry could not be reached".to_string()
            }
        })?;
        if ping.status().is_redirection() {
            return Err(off_host());
        }
        if ping.status() != reqwest::StatusCode::UNAUTHORIZED {
            return Ok(None);
        }
        self.call();
        match tokio::time::timeout(
            CALL_TIMEOUT,
            self.client.auth(image, &RegistryAuth::Anonymous, RegistryOperation::Pull),
        )
        .await
        {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(e)) => {
                tracing::debug!("a token for {image}: {e}");
                Err("the registry's token service refused an anonymous pull".into())
            }
            Err(_) => Err(format!("the registry's token service did not answer within {CALL_TIMEOUT:?}")),
        }
    }

    /// `scheme://host` of `image`'s registry, as the client resolves it.
    fn base(&self, image: &Reference) -> String {
        let host = image.resolve_registry();
        let plain = self.plain_http.iter().any(|h| h == host || h == image.registry());
        format!("{}://{host}", if plain { "http" } else { "https" })
    }

    /// GET `/v2/<repository>/<what>/<name>`, its body read to at most `cap`
    /// bytes. Ok(None): 404 (nothing there). A redirect off the registry's
    /// host, a body past the cap, a timeout or another status is Err,
    /// said without echoing what the server sent.
    async fn get(
        &self,
        image: &Reference,
        what: &str,
        name: &str,
        token: Option<&str>,
        accept: &str,
        cap: usize,
    ) -> Result<Option<(reqwest::header::HeaderMap, Vec<u8>)>, String> {
        let url = format!("{}/v2/{}/{what}/{name}", self.base(image), image.repository());
        let mut req = self.http.get(&url).header(reqwest::header::ACCEPT, accept);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        self.call();
        let timed_out = || format!("no answer within {CALL_TIMEOUT:?}");
        let mut resp = req.send().await.map_err(|e| {
            tracing::debug!("{url}: {e}");
            if e.is_timeout() {
                timed_out()
            } else if e.is_redirect() {
                "the registry redirected too many times".to_string()
            } else {
                "reading it failed".to_string()
            }
        })?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if status.is_redirection() {
            return Err(off_host());
        }
        if !status.is_success() {
            return Err(format!("the registry answered {}", status.as_u16()));
        }
        if resp.content_length().is_some_and(|n| n > cap as u64) {
            return Err(format!(
                "more than such a {} may be ({cap})",
                if what == "blobs" { "layer" } else { "manifest" }
            ));
        }
        let headers = resp.headers().clone();
        let mut out = Capped { buf: Vec::new(), cap };
        loop {
            match resp.chunk().await {
                Ok(Some(c)) => {
                    use tokio::io::AsyncWriteExt as _;
                    if out.write_all(&c).await.is_err() {
                        return Err(format!(
                            "more than such a {} may be ({cap})",
                            if what == "blobs" { "layer" } else { "manifest" }
                        ));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!("{url}: {e}");
                    return Err(if e.is_timeout() { timed_out() } else { "reading it failed".to_string() });
                }
            }
        }
        Ok(Some((headers, out.buf)))
    }
}

/// Follows a redirect only to the same scheme, host and port, at most
/// [`REDIRECTS_MAX`] times; another is not followed (its 3xx comes back,
/// and is refused as [`off_host`] says).
/// Redirects on the registry's own host only ([`crate::outbound::same_host_only`]).
fn same_host_only() -> reqwest::redirect::Policy {
    crate::outbound::same_host_only(REDIRECTS_MAX)
}

fn off_host() -> String {
    "the registry redirected to another host, which the gateway does not follow".to_string()
}

/// A digest as a registry may name one: `sha256:` and 64 hex digits.
fn provenance_digest_ok(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `TEAM=FILE`: the team's trust policy, read and checked when the
/// gateway starts (a policy that does not parse stops it, located).
pub fn parse_trust_policy(s: &str) -> Result<(String, crate::provenance::TrustPolicy), String> {
    let (team, file) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected TEAM=FILE"))?;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let policy: crate::provenance::TrustPolicy =
        serde_saphyr::from_str(&text).map_err(|e| format!("{file}: not a trust policy: {e}"))?;
    if policy.keys.is_empty() {
        return Err(format!("{file}: a trust policy names at least one key"));
    }
    Ok((team.to_string(), policy))
}

/// A policy's identity in the cache: a changed policy verifies again.
fn fingerprint(policy: &TrustPolicy) -> String {
    hex::encode(sha2::Sha256::digest(serde_json::to_vec(policy).unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_layer_is_cut_off_at_its_kinds_cap_whatever_its_descriptor_said() {
        use tokio::io::AsyncWriteExt as _;
        let mut out = Capped { buf: Vec::new(), cap: 8 };
        out.write_all(b"12345678").await.unwrap();
        assert!(out.write_all(b"9").await.is_err());
        assert_eq!(out.buf.len(), 8);
    }

    #[test]
    fn docker_hub_is_allowed_by_the_name_written_and_look_alikes_are_not() {
        let allowed = vec!["docker.io".to_string(), "127.0.0.1:5000".to_string()];
        let r = |s: &str| s.parse::<Reference>().unwrap();
        assert_eq!(allowed_host(&r("nginx:1.25"), &allowed).as_deref(), Some("docker.io"));
        assert_eq!(allowed_host(&r("docker.io/library/nginx:1.25"), &allowed).as_deref(), Some("docker.io"));
        assert_eq!(allowed_host(&r("127.0.0.1:5000/team/web:v1"), &allowed).as_deref(), Some("127.0.0.1:5000"));
        assert_eq!(allowed_host(&r("docker.io.evil.example/library/nginx:1"), &allowed), None);
        assert_eq!(allowed_host(&r("127.0.0.1:5001/team/web:v1"), &allowed), None);
    }
}
