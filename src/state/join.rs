//! Join material: what a machine needs to join the cluster, kept in the
//! state store for the machines to fetch with their instance role, so that
//! user-data says only where to look.
//!
//! - `machine/join/token`, `machine/join/ca-cert-hash`: every machine
//!   (nodes' and control plane's roles may read `machine/join/`);
//! - `machine/pki/*`: the shared CAs and service-account keys, for
//!   control-plane machines only (see `cloud::iam`).
//!
//! Bootstrap tokens expire ([`TOKEN_TTL`]). The first control-plane machine
//! registers the stored one with `kubeadm init`; before pinfleet launches
//! machines into a running cluster it mints a fresh one through the API
//! ([`mint`]), or, when the API server cannot be reached, uses the stored
//! one while it has time left, saying so in one line ([`stored_instead`]).

use anyhow::{Context as _, Result};
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::pki::Pki;
use super::{Condition, Store};

/// How long a bootstrap token is valid.
pub const TOKEN_TTL: Duration = Duration::hours(24);
/// A stored token with less than this left is not handed to a new machine
/// (it may boot slowly).
pub const MIN_LEFT: Duration = Duration::hours(1);

pub const TOKEN_KEY: &str = "machine/join/token";
pub const HASH_KEY: &str = "machine/join/ca-cert-hash";
const RECORD_KEY: &str = "join/token.json";
pub const PKI_PREFIX: &str = "machine/pki/";

/// The token in force and when it expires (kept beside the machines' copy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    pub token: String,
    pub expires: DateTime<Utc>,
}

fn new_token() -> String {
    use rand::Rng as _;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut part =
        |n: usize| -> String { (0..n).map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char).collect() };
    format!("{}.{}", part(6), part(16))
}

async fn write_token(store: &Store, record: &TokenRecord) -> Result<()> {
    store.put(TOKEN_KEY, record.token.clone().into_bytes(), Condition::None).await?;
    store.put_json(RECORD_KEY, record).await?;
    Ok(())
}

/// The token in force, if one was published.
pub async fn current(store: &Store) -> Result<Option<TokenRecord>> {
    store.get_json(RECORD_KEY).await
}

/// Publishes what machines fetch besides the token: the control plane's
/// files, then the CA hash. The hash is written last, so when it is there
/// and names this CA, everything is: an apply reads one object instead of
/// writing nine.
pub async fn publish_files(store: &Store, pki: &Pki) -> Result<()> {
    // Published already, unless the encryption keys changed since (a new
    // PKI field, or `pinfleet etcd rotate-key`).
    let config = pki.encryption_config();
    if store.get(HASH_KEY).await?.is_some_and(|(b, _)| b == pki.ca_cert_hash.as_bytes())
        && store.get(&format!("{PKI_PREFIX}encryption-config.yaml")).await?.is_some_and(|(b, _)| b == config.as_bytes())
    {
        return Ok(());
    }
    for (name, content) in pki.machine_files() {
        store.put(&format!("{PKI_PREFIX}{name}"), content.into_bytes(), Condition::None).await?;
    }
    store.put(HASH_KEY, pki.ca_cert_hash.clone().into_bytes(), Condition::None).await?;
    Ok(())
}

/// Before the first control-plane machine boots: the token `kubeadm init`
/// registers (valid [`TOKEN_TTL`] from `now`), unless the stored one still
/// has [`MIN_LEFT`] (a bootstrap resumed).
pub async fn for_init(store: &Store, now: DateTime<Utc>) -> Result<TokenRecord> {
    match current(store).await? {
        Some(r) if r.expires - now > MIN_LEFT => Ok(r),
        _ => {
            let r = TokenRecord { token: new_token(), expires: now + TOKEN_TTL };
            write_token(store, &r).await?;
            Ok(r)
        }
    }
}

/// Removes everything machines fetch (with the cluster: its CA keys must
/// not outlive it in the bucket).
pub async fn remove(store: &Store) -> Result<()> {
    for key in [TOKEN_KEY, HASH_KEY, RECORD_KEY] {
        store.delete(key).await?;
    }
    for name in Pki::MACHINE_FILES {
        store.delete(&format!("{PKI_PREFIX}{name}")).await?;
    }
    Ok(())
}

/// Mints a fresh token in the running cluster (a `bootstrap.kubernetes.io/token`
/// Secret, as `kubeadm token create` makes) and publishes it.
pub async fn mint(client: &kube::Client, store: &Store, now: DateTime<Utc>) -> Result<TokenRecord> {
    use k8s_openapi::api::core::v1::Secret;
    let token = new_token();
    let (id, secret) = token.split_once('.').expect("a token has two parts");
    let expires = now + TOKEN_TTL;
    let obj: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "description": "pinfleet: machines launched into the running cluster",
            "token-id": id,
            "token-secret": secret,
            "expiration": expires.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token",
        }
    }))?;
    kube::Api::<Secret>::namespaced(client.clone(), "kube-system")
        .create(&Default::default(), &obj)
        .await
        .context("creating a bootstrap token in kube-system")?;
    let r = TokenRecord { token, expires };
    write_token(store, &r).await?;
    Ok(r)
}

/// Why no fresh token was minted through the cluster's API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotMinted {
    /// Nothing answered: `dns: no such host`, `connection refused`,
    /// `timed out`, `TLS: …`.
    Unreachable(String),
    /// The API server answered and refused: `403 Forbidden: …`.
    Refused(String),
    /// Anything else (writing the token to the state store, …), in one line.
    Failed(String),
}

impl NotMinted {
    /// From the error: the API server's refusal, else its causes
    /// (outermost first) read for why nothing answered.
    pub fn of(e: &anyhow::Error) -> NotMinted {
        for cause in e.chain() {
            if let Some(kube::Error::Api(s)) = cause.downcast_ref::<kube::Error>() {
                return NotMinted::Refused(crate::sdk_error::one_line(&format!(
                    "{} {}: {}",
                    s.code, s.reason, s.message
                )));
            }
        }
        let causes: Vec<String> = e.chain().map(|c| c.to_string()).collect();
        NotMinted::from_causes(&causes)
    }

    /// From an error's causes, outermost first: what a connection's
    /// failure says (hyper's and the resolver's words), else the innermost.
    pub fn from_causes(causes: &[String]) -> NotMinted {
        let all = causes.join(": ").to_ascii_lowercase();
        let innermost = causes.last().map(|c| crate::sdk_error::one_line(c)).unwrap_or_default();
        if all.contains("dns error") || all.contains("failed to lookup address") {
            NotMinted::Unreachable("dns: no such host".into())
        } else if all.contains("connection refused") {
            NotMinted::Unreachable("connection refused".into())
        } else if all.contains("timed out") || all.contains("deadline has elapsed") {
            NotMinted::Unreachable("timed out".into())
        } else if all.contains("certificate") || all.contains("tls") || all.contains("handshake") {
            NotMinted::Unreachable(format!("TLS: {innermost}"))
        } else if all.contains("(connect)") || all.contains("connection reset") || all.contains("unreachable") {
            NotMinted::Unreachable(innermost)
        } else {
            NotMinted::Failed(innermost)
        }
    }
}

impl std::fmt::Display for NotMinted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotMinted::Unreachable(why) => write!(f, "the cluster's API server is not reachable yet ({why})"),
            NotMinted::Refused(why) => write!(f, "the cluster's API server refused a new bootstrap token ({why})"),
            NotMinted::Failed(why) => {
                write!(f, "no new bootstrap token could be minted through the cluster's API ({why})")
            }
        }
    }
}

/// One line for a launch that goes on without a fresh token: what
/// happened and what pinfleet does instead.
pub fn stored_instead(why: &NotMinted, stored: &TokenRecord) -> String {
    format!(
        "{why}; the machines launched now join with the bootstrap token from the state store instead (valid until {})",
        stored.expires.format("%Y-%m-%d %H:%M UTC")
    )
}

/// Before launching into a running cluster: a fresh token through the API
/// when it answers, else the stored one while it has time left; otherwise
/// an error that says what to do (nothing launched yet).
pub async fn ensure_fresh(client: Option<&kube::Client>, store: &Store, now: DateTime<Utc>) -> Result<TokenRecord> {
    let mut not_minted = None;
    if let Some(c) = client {
        match mint(c, store, now).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                // The whole chain for whoever debugs it; one line for everyone.
                tracing::debug!("minting a bootstrap token through the API: {e:#}");
                not_minted = Some(NotMinted::of(&e));
            }
        }
    }
    match current(store).await? {
        Some(r) if r.expires - now > MIN_LEFT => {
            if let Some(why) = &not_minted {
                tracing::warn!("{}", stored_instead(why, &r));
            }
            Ok(r)
        }
        Some(r) => {
            let why = not_minted.map(|w| format!(": {w}")).unwrap_or_default();
            anyhow::bail!(
                "the stored bootstrap token expires at {} and the API server could not mint a new one{why}; \
                 pass --kubeconfig for a reachable API server and run again",
                r.expires.format("%Y-%m-%d %H:%M UTC")
            )
        }
        None => anyhow::bail!("no bootstrap token has been published for this cluster; run `pinfleet bootstrap` first"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn a_launch_without_a_fresh_token_says_why_and_what_it_does_instead_in_one_line() {
        let stored = TokenRecord {
            token: "abcdef.0123456789abcdef".into(),
            expires: Utc.with_ymd_and_hms(2026, 11, 28, 6, 0, 0).unwrap(),
        };
        let chain = |causes: &[&str]| NotMinted::from_causes(&causes.iter().map(|c| c.to_string()).collect::<Vec<_>>());
        // What an apply met before the cluster's DNS name resolved.
        let dns = chain(&[
            "creating a bootstrap token in kube-system",
            "ServiceError: client error (Connect)",
            "client error (Connect)",
            "dns error: failed to lookup address information: Name or service not known",
        ]);
        let said = stored_instead(&dns, &stored);
        assert_eq!(
            said,
            "the cluster's API server is not reachable yet (dns: no such host); the machines launched now join \
             with the bootstrap token from the state store instead (valid until 2026-11-28 06:00 UTC)"
        );
        assert!(!said.contains('\n') && !said.contains("ServiceError"));
        assert_eq!(
            chain(&["x", "tcp connect error: Connection refused (os error 111)"]),
            NotMinted::Unreachable("connection refused".into())
        );
        assert_eq!(chain(&["x", "operation timed out"]), NotMinted::Unreachable("timed out".into()));
        assert!(
            matches!(chain(&["x", "invalid peer certificate: UnknownIssuer"]), NotMinted::Unreachable(w) if w == "TLS: invalid peer certificate: UnknownIssuer")
        );
        assert_eq!(
            chain(&["writing machine/join/token", "AccessDenied: no"]),
            NotMinted::Failed("AccessDenied: no".into())
        );
        // The API server answered and refused: its status, not the chain.
        let e = anyhow::Error::new(kube::Error::Api(Box::new(kube::core::Status {
            code: 403,
            reason: "Forbidden".into(),
            message: "secrets is forbidden: User \"ci\" cannot create resource \"secrets\"".into(),
            ..Default::default()
        })))
        .context("creating a bootstrap token in kube-system");
        assert_eq!(
            stored_instead(&NotMinted::of(&e), &stored),
            "the cluster's API server refused a new bootstrap token (403 Forbidden: secrets is forbidden: User \"ci\" \
             cannot create resource \"secrets\"); the machines launched now join with the bootstrap token from the \
             state store instead (valid until 2026-11-28 06:00 UTC)"
        );
    }
}
