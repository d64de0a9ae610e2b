//! Every backup proven by a restore: the snapshot comes down from the
//! store, its sha256 and etcd's own trailer are checked, `etcdutl` restores
//! it into a scratch etcd on loopback, and what the scratch store holds is
//! compared with the live cluster at the same revision (keys per resource
//! prefix; etcd's HashKV of the whole key space where the live store still
//! has that revision). The verdict is written beside the backup; a
//! corrupted snapshot is never marked verified.

use std::time::Instant;

use anyhow::{Context as _, Result};
use chrono::Utc;
use etcd_client::GetOptions;

use super::conn::EtcdArgs;
use super::manifest::{self, Manifest, Verdict};
use super::scratch::{Binaries, Member};
use super::snapshot::{keys_per_prefix, trailer_holds};
use crate::state::Store;

/// Restores `m` into a scratch etcd and judges it; the verdict is stored
/// (and returned). `live`: the cluster's etcd, for the comparison.
pub async fn verify(store: &Store, m: &Manifest, bins: &Binaries, live: Option<&EtcdArgs>) -> Result<Verdict> {
    let t0 = Instant::now();
    let mut checks = Vec::new();
    let mut problems = Vec::new();
    let mut revision = 0;
    let etcd_version = bins.version().unwrap_or_else(|e| format!("unknown ({e:#})"));
    let minor = |v: &str| v.split('.').take(2).collect::<Vec<_>>().join(".");
    if minor(&etcd_version) != minor(&m.etcd_version) {
        problems.push(format!(
            "the scratch etcd is {etcd_version}, the backup's member ran {}: a restore is proven only with the cluster's etcd minor",
            m.etcd_version
        ));
    }
    let dir = tempfile_dir()?;
    let file = dir.join("snapshot.db");
    let judged: Result<()> = async {
        let size = store.download(&manifest::snapshot_key(&m.id), &file).await?;
        let (trailer, sha) = trailer_holds(&file)?;
        if size != m.size {
            problems.push(format!("the stored snapshot is {size} bytes, the manifest says {}", m.size));
        }
        if sha != m.sha256 {
            problems.push(format!("the stored snapshot's sha256 is {sha}, the manifest says {}", m.sha256));
        } else {
            checks.push("sha256 matches the manifest".to_string());
        }
        if !trailer {
            problems.push("etcd's checksum at the end of the snapshot does not hold".to_string());
        } else {
            checks.push("etcd's own checksum holds".to_string());
        }
        if !problems.is_empty() {
            return Ok(());
        }
        let scratch = match Member::scratch(bins, &file).await {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("the scratch restore failed: {e:#}"));
                return Ok(());
            }
        };
        let mut sc = scratch.client().await?;
        let head = sc.get(vec![0], Some(GetOptions::new().with_range(vec![0]).with_count_only())).await?;
        revision = head.header().map(|h| h.revision()).unwrap_or_default();
        let restored = keys_per_prefix(&mut sc, revision).await?;
        let total: u64 = restored.values().sum();
        checks.push(format!("restored: revision {revision}, {total} keys under {} prefixes", restored.len()));
        let scratch_hash = sc.hash_kv(revision).await.map(|h| (h.hash(), h.compact_version()));
        let mut compared = false;
        if let Some(live) = live {
            match live.first_answering().await {
                Ok((endpoint, mut lc)) => {
                    match keys_per_prefix(&mut lc, revision).await {
                        Ok(want) => {
                            compared = true;
                            diff_counts(&want, &restored, &format!("the live store ({endpoint}) at revision {revision}"), &mut checks, &mut problems);
                        }
                        Err(e) => checks.push(format!("the live store no longer has revision {revision} ({e:#}): keys compared with the manifest")),
                    }
                    match (lc.hash_kv(revision).await, &scratch_hash) {
                        (Ok(l), Ok((s, _))) if l.hash() == *s => {
                            checks.push(format!("HashKV at revision {revision} matches the live store ({s:08x})"))
                        }
                        (Ok(l), Ok((_, sc))) if l.compact_version() != *sc => checks.push(format!(
                            "the live store compacted to revision {} since (the backup's history starts at {sc}): HashKV not comparable",
                            l.compact_version()
                        )),
                        (Ok(l), Ok((s, _))) => problems.push(format!(
                            "HashKV at revision {revision}: the live store has {:08x}, the restored {s:08x}",
                            l.hash()
                        )),
                        (Err(e), _) => checks.push(format!("the live store's HashKV at revision {revision} is gone ({e}): not compared")),
                        (_, Err(e)) => problems.push(format!("the restored store's HashKV failed: {e}")),
                    }
                }
                Err(e) => checks.push(format!("the live store did not answer ({e:#}): keys compared with the manifest")),
            }
        }
        if !compared {
            if revision == m.revision {
                diff_counts(&m.keys, &restored, "the manifest", &mut checks, &mut problems);
            } else {
                // The manifest's counts are at the revision before the stream
                // began; with writes in between only a lower bound holds.
                let short: Vec<String> = m
                    .keys
                    .iter()
                    .filter(|(p, n)| restored.get(*p).copied().unwrap_or(0) == 0 && **n > 0)
                    .map(|(p, n)| format!("{p} (manifest {n}, restored 0)"))
                    .collect();
                if short.is_empty() {
                    checks.push(format!("every prefix of the manifest (revision {}) is present", m.revision));
                } else {
                    problems.push(format!("prefixes missing from the restored store: {}", short.join(", ")));
                }
            }
        }
        drop(scratch);
        Ok(())
    }
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = judged {
        problems.push(format!("{e:#}"));
    }
    let v = Verdict {
        verified_at: Utc::now(),
        ok: problems.is_empty(),
        revision,
        checks,
        problems,
        restore_seconds: t0.elapsed().as_secs_f64(),
        etcd_version,
    };
    store.put_json(&manifest::verdict_key(&m.id), &v).await.context("writing the verdict")?;
    Ok(v)
}

fn diff_counts(
    want: &std::collections::BTreeMap<String, u64>,
    have: &std::collections::BTreeMap<String, u64>,
    against: &str,
    checks: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    let mut off = Vec::new();
    for p in want.keys().chain(have.keys()).collect::<std::collections::BTreeSet<_>>() {
        let (w, h) = (want.get(p).copied().unwrap_or(0), have.get(p).copied().unwrap_or(0));
        if w != h {
            off.push(format!("{p}: {against} {w}, restored {h}"));
        }
    }
    if off.is_empty() {
        checks.push(format!("keys per prefix match {against} ({} prefixes)", want.len()));
    } else {
        problems.push(format!("keys per prefix differ: {}", off.join("; ")));
    }
}

fn tempfile_dir() -> Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("pinfleet-verify-{}-{}", std::process::id(), rand::random::<u32>()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}
