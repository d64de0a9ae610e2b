//! Adopting clusters other tools run: what their own records say, as a
//! pinfleet cluster file, with everything the file cannot carry named.
//!
//! ```text
//! kops's state store (s3:// or file://, through state::Store)
//!     │ read_kops: the cluster's folder, its spec, completed spec and groups
//!     ▼
//! kops::import (pure): mapped file, unmapped findings, or a refusal
//!     ▼
//! `pinfleet import kops` writes the file (cli::import)
//! ```
//!
//! The reading is the only IO here; the mapping ([`kops`]) is pure, so it
//! is tested on the objects themselves.

/// Where an adopt's claims are recorded, in the cluster's own state: a
/// cluster with this record was taken over (the roll reads it).
pub const CLAIMS_KEY: &str = "adopt/claims.json";

pub mod aws;
pub mod claim;
pub mod ec2;
pub mod etcd_manager;
pub mod keyset;
pub mod kops;

use anyhow::{Context as _, Result};

use crate::state::Store;

/// Reads one kops cluster's folder (`store` is opened on kops's state
/// store with the cluster's name): its keys, `config`,
/// `cluster-completed.spec` and every `instancegroup/*`. A folder that
/// holds no kops cluster, or one half deleted, is refused before anything
/// else is read.
pub async fn read_kops(store: &Store) -> Result<kops::StateStore> {
    let url = store.describe("").trim_end_matches('/').to_string();
    let name = store.cluster().to_string();
    let keys = store.list("").await.with_context(|| format!("listing {url}"))?;
    kops::check_layout(&url, &name, &keys)?;
    let config = read(store, kops::CONFIG).await?;
    let completed = read(store, kops::COMPLETED).await?;
    let mut instance_groups = Vec::new();
    for key in kops::instance_group_keys(&keys) {
        // Listed a moment ago; gone now means kops is deleting the group.
        let group =
            read(store, key).await?.with_context(|| format!("{} vanished while it was read", store.describe(key)))?;
        instance_groups.push(group);
    }
    Ok(kops::StateStore { url, name, keys, config, completed, instance_groups })
}

/// One object, parsed, or None when absent.
async fn read(store: &Store, key: &str) -> Result<Option<kops::KopsObject>> {
    let Some((bytes, _)) = store.get(key).await? else { return Ok(None) };
    let at = store.describe(key);
    let text = String::from_utf8(bytes)
        .map_err(|_| kops::Refusal::Unreadable { at: at.clone(), message: "not UTF-8 text".into() })?;
    Ok(Some(kops::KopsObject::parse(key, &at, &text)?))
}

/// The primary keys of the keysets a take-over reads ([`keyset::KEYSETS`],
/// in that order) from kops's cluster folder. A missing or broken one is
/// named with where it is.
pub async fn read_keysets(store: &Store) -> Result<Vec<keyset::Primary>> {
    let mut out = Vec::new();
    for (name, what) in keyset::KEYSETS {
        let key = keyset::keyset_key(name);
        let at = store.describe(&key);
        let Some((bytes, _)) = store.get(&key).await? else {
            anyhow::bail!("{at}: missing: kops keeps {what} there, and the cluster cannot be taken over without it");
        };
        let text = String::from_utf8(bytes).map_err(|_| anyhow::anyhow!("{at}: not UTF-8 text"))?;
        out.push(keyset::primary(&at, &text)?);
    }
    Ok(out)
}
