//! etcd-manager's backups (a kops control plane's), read as etcd-manager
//! writes them into kops's state store, and imported as the cluster's own
//! backups: then verified and restored as any other.
//!
//! ```text
//! kops's state store: backups/etcd/main/<RFC 3339>-<sequence>/
//!     etcd.backup.gz      the snapshot, gzipped
//!     _etcd_backup.meta   JSON, at least {"etcdVersion": …}
//!   │ downloaded, unzipped, etcd's own checksum checked, facts read
//!   ▼
//! pinfleet's backups: snapshot + manifest (taken by "etcd-manager (kops)"),
//! named by when etcd-manager took it and the revision it holds
//! ```
//!
//! An import writes under the same name every time, so a second import of
//! one backup finds the first and writes nothing. The snapshot is stored
//! (and locked) before its manifest, as the agent stores its own.

use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};

use super::agent::Taking;
use super::manifest::{self, Manifest};
use super::snapshot;
use crate::state::Store;

/// Where etcd-manager keeps the main cluster's backups (the events
/// cluster's, under `backups/etcd/events/`, hold only events).
pub const MAIN: &str = "backups/etcd/main/";
/// The snapshot, gzipped, in each backup's folder.
pub const DATA: &str = "etcd.backup.gz";
/// The backup's facts as etcd-manager wrote them.
pub const META: &str = "_etcd_backup.meta";

/// When etcd-manager took a backup, from its folder's name
/// (`2026-11-29T10:00:00Z-000001`: RFC 3339, a dash, a sequence).
pub fn taken_at(name: &str) -> Option<DateTime<Utc>> {
    let (when, _sequence) = name.rsplit_once('-')?;
    DateTime::parse_from_rfc3339(when).ok().map(|t| t.with_timezone(&Utc))
}

/// etcd-manager's backups of the main cluster in `kops` (kops's cluster
/// folder), oldest first: the folders holding a snapshot, named as
/// etcd-manager names them.
pub async fn list(kops: &Store) -> Result<Vec<String>> {
    let keys = kops.list(MAIN).await?;
    let mut names: Vec<String> = keys
        .iter()
        .filter_map(|k| k.strip_prefix(MAIN)?.strip_suffix(&format!("/{DATA}")))
        .filter(|n| !n.contains('/') && taken_at(n).is_some())
        .map(str::to_string)
        .collect();
    names.sort_by_key(|n| (taken_at(n), n.clone()));
    Ok(names)
}

/// What an import did.
#[derive(Debug, Clone)]
pub struct Imported {
    pub manifest: Manifest,
    /// An earlier import had written it: nothing was written now.
    pub already: bool,
}

/// Imports etcd-manager's backup `name` from `kops` into `store` (see the
/// module doc). `work`: a folder for the download (removed after).
pub async fn import(store: &Store, kops: &Store, name: &str, taking: &Taking, work: &Path) -> Result<Imported> {
    let at = kops.describe(&format!("{MAIN}{name}/"));
    let taken = taken_at(name)
        .with_context(|| format!("{at}: not a backup etcd-manager named (RFC 3339, a dash, a sequence)"))?;
    let gz = work.join("etcd.backup.gz");
    let snap = work.join("snapshot.db");
    kops.download(&format!("{MAIN}{name}/{DATA}"), &gz).await.with_context(|| format!("downloading {at}{DATA}"))?;
    gunzip(&gz, &snap).with_context(|| format!("{at}{DATA}: not a gzipped etcd snapshot"))?;
    let _ = std::fs::remove_file(&gz);
    let (held, sha256) = snapshot::trailer_holds(&snap)?;
    if !held {
        bail!("{at}{DATA}: the snapshot fails etcd's own checksum: nothing was imported");
    }
    let facts = snapshot::read_facts(&snap).with_context(|| format!("{at}{DATA}"))?;
    let meta = match kops.get(&format!("{MAIN}{name}/{META}")).await? {
        Some((bytes, _)) => {
            serde_json::from_slice::<serde_json::Value>(&bytes).with_context(|| format!("{at}{META}: not JSON"))?
        }
        None => bail!("{at}{META}: missing (etcd-manager writes it beside every backup)"),
    };
    let etcd_version = meta["etcdVersion"]
        .as_str()
        .or(facts.cluster_version.as_deref())
        .with_context(|| format!("{at}{META}: no etcdVersion"))?
        .to_string();
    let id = manifest::backup_id(taken, facts.revision);
    if let Some(m) = store.get_json_kept::<Manifest>(&manifest::manifest_key(&id)).await? {
        let _ = std::fs::remove_file(&snap);
        return Ok(Imported { manifest: m, already: true });
    }
    let mut upload = store.upload(&manifest::snapshot_key(&id), taking.retention.as_ref()).await?;
    let sent: Result<u64> = async {
        use tokio::io::AsyncReadExt as _;
        let mut f = tokio::fs::File::open(&snap).await?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            upload.write(&buf[..n]).await?;
        }
        Ok(upload.written())
    }
    .await;
    let size = match sent {
        Ok(n) => n,
        Err(e) => {
            upload.abort().await;
            return Err(e);
        }
    };
    upload.complete().await?;
    let _ = std::fs::remove_file(&snap);
    let m = Manifest {
        id,
        cluster: store.cluster().to_string(),
        taken_at: taken,
        revision: facts.revision,
        member: "etcd-manager".into(),
        etcd_version,
        kubernetes_version: taking.kubernetes_version.clone(),
        size,
        sha256,
        keys: facts.keys,
        retain_until: taking.retention.as_ref().map(|r| r.until),
        encryption_keys: facts.encryption_keys,
        taken_by: format!("etcd-manager (kops), imported from {at} by {}", taking.taken_by),
        members: facts.members,
    };
    store.put_json_locked(&manifest::manifest_key(&m.id), &m, taking.retention.as_ref()).await?;
    Ok(Imported { manifest: m, already: false })
}

/// `gz` unzipped into `out`.
fn gunzip(gz: &Path, out: &Path) -> Result<()> {
    let mut r = flate2::read::GzDecoder::new(std::io::BufReader::new(std::fs::File::open(gz)?));
    let mut w = std::io::BufWriter::new(std::fs::File::create(out)?);
    std::io::copy(&mut r, &mut w)?;
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_is_named_by_when_etcd_manager_took_it() {
        let t = taken_at("2026-11-29T10:00:00Z-000001").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-29T10:00:00+00:00");
        assert!(taken_at("2026-11-29-000001").is_none());
        assert!(taken_at("control").is_none());
    }
}
