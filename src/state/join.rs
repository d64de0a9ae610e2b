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
//! one while it has time left.

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
    if store.get(HASH_KEY).await?.is_some_and(|(b, _)| b == pki.ca_cert_hash.as_bytes()) {
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

/// Before launching into a running cluster: a fresh token through the API
/// when it answers, else the stored one while it has time left; otherwise
/// an error that says what to do (nothing launched yet).
pub async fn ensure_fresh(client: Option<&kube::Client>, store: &Store, now: DateTime<Utc>) -> Result<TokenRecord> {
    if let Some(c) = client {
        match mint(c, store, now).await {
            Ok(r) => return Ok(r),
            Err(e) => tracing::warn!("could not mint a bootstrap token through the API: {e:#}"),
        }
    }
    match current(store).await? {
        Some(r) if r.expires - now > MIN_LEFT => Ok(r),
        Some(r) => anyhow::bail!(
            "the stored bootstrap token expires at {} and the API server could not mint a new one; \
             pass --kubeconfig for a reachable API server and run again",
            r.expires
        ),
        None => anyhow::bail!("no bootstrap token has been published for this cluster; run `pinfleet bootstrap` first"),
    }
}
