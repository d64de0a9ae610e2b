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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
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
    client: Client,
    /// Registry hosts (`host[:port]`) the gateway may talk to, exactly.
    allowed: Vec<String>,
    cache: Mutex<HashMap<(String, String), Verdict>>,
    /// Requests made to registries (for the cache's figures).
    pub calls: AtomicU64,
}

/// The most verdicts kept; past it the cache starts again.
const CACHE_MAX: usize = 10_000;

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
        let config = ClientConfig { protocol: ClientProtocol::HttpsExcept(plain_http), ..Default::default() };
        Registries { client: Client::new(config), allowed, cache: Mutex::new(HashMap::new()), calls: AtomicU64::new(0) }
    }

    fn call(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Checks `image` against `policy`: pinned by digest and verified, or
    /// refused with the reason (never an error: the caller decides by mode).
    pub async fn check(&self, image: &str, policy: &TrustPolicy) -> Checked {
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
        // The digest: the one named, checked to exist, or the tag's, resolved once.
        self.call();
        let digest = match self.client.fetch_manifest_digest(&reference, &RegistryAuth::Anonymous).await {
            Ok(d) => d,
            Err(e) => return refused("", format!("{image}: no such image in {host} ({})", one_line(&e.to_string()))),
        };
        if let Some(named) = reference.digest() {
            if named != digest {
                return refused(&digest, format!("{image}: the registry serves {digest}, not {named}"));
            }
        }
        let pinned = format!("{host}/{}@{digest}", reference.repository());
        let key = (digest.clone(), fingerprint(policy));
        if let Some(v) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Checked { pinned: Some(pinned), verdict: v };
        }
        let evidence = match self.evidence(&reference, &digest).await {
            Ok(e) => e,
            Err(why) => return refused(&digest, why),
        };
        let verdict = provenance::verify(policy, &evidence);
        if let Ok(mut c) = self.cache.lock() {
            if c.len() >= CACHE_MAX {
                c.clear();
            }
            c.insert(key, verdict.clone());
        }
        Checked { pinned: Some(pinned), verdict }
    }

    /// The signatures and attestations kept beside `digest`.
    async fn evidence(&self, image: &Reference, digest: &str) -> Result<Evidence, String> {
        let mut ev = Evidence { digest: digest.to_string(), ..Default::default() };
        for (tag, media_type) in [
            (provenance::signature_tag(digest), provenance::SIGNATURE_MEDIA_TYPE),
            (provenance::attestation_tag(digest), provenance::DSSE_MEDIA_TYPE),
        ] {
            let at = Reference::with_tag(image.registry().to_string(), image.repository().to_string(), tag);
            self.call();
            let manifest = match self.client.pull_manifest(&at, &RegistryAuth::Anonymous).await {
                Ok((OciManifest::Image(m), _)) => m,
                // Nothing there: no signature (or attestation) for this digest.
                Ok(_) | Err(_) => continue,
            };
            for layer in manifest.layers.iter().filter(|l| l.media_type == media_type).take(16) {
                let mut bytes: Vec<u8> = Vec::new();
                self.call();
                self.client
                    .pull_blob(&at, layer, &mut bytes)
                    .await
                    .map_err(|e| format!("reading {} of {at}: {}", layer.digest, one_line(&e.to_string())))?;
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

/// A policy's identity in the cache: a changed policy verifies again.
fn fingerprint(policy: &TrustPolicy) -> String {
    hex::encode(sha2::Sha256::digest(serde_json::to_vec(policy).unwrap_or_default()))
}

fn one_line(s: &str) -> String {
    crate::sdk_error::one_line(s)
}

#[cfg(test)]
mod tests {
    use super::*;

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
