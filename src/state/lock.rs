//! The cluster lock: one object written with `If-None-Match: *`, so of two
//! runs only one can create it. It records who holds it and until when;
//! a second run is refused with the holder's name. The holder refreshes
//! the expiry while it works (`If-Match` on its own ETag) and deletes the
//! object when done, also on Ctrl-C. A lock whose holder was killed on
//! this same host (its process is gone) is taken over, and the run says
//! so; any other lock stays until `pinfleet state unlock CLUSTER --force`
//! — never broken silently.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::{whoami, Condition, PreconditionFailed, Store};

pub const LOCK_KEY: &str = "lock.json";
/// A lock not refreshed for this long is reported as stale.
const TTL: Duration = Duration::from_secs(15 * 60);
/// Refresh well inside the TTL so a slow call never lets it lapse.
const REFRESH_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub id: String,
    pub holder: String,
    pub host: String,
    pub pid: u32,
    pub command: String,
    pub acquired_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// The folder the fleet's rollout record and lock live in (no cluster
/// name can start with a dot).
pub const FLEET: &str = ".fleet";

fn what(cluster: &str) -> String {
    if cluster == FLEET {
        "the fleet".into()
    } else if let Some((ns, name)) = cluster.strip_prefix(".delivery.").and_then(|w| w.split_once('.')) {
        format!("the deliveries of {ns}/{name}")
    } else if let Some(w) = cluster.strip_prefix(".delivery-") {
        format!("the deliveries of {w}")
    } else {
        format!("cluster {cluster}")
    }
}

fn unlock_command(cluster: &str) -> String {
    if cluster == FLEET {
        "pinfleet fleet rollout unlock --force".into()
    } else {
        format!("pinfleet state unlock {cluster} --force")
    }
}

/// Whether the process that took a lock on this host still runs (a zombie
/// does not). Without /proc, every holder counts as running.
pub fn holder_running(info: &LockInfo) -> bool {
    if !std::path::Path::new("/proc/self").exists() || info.host != whoami().1 {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", info.pid)) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{} is locked by {} on {} (pid {}, `{}`) since {}{}; wait for it to finish, or if that run is gone: {}",
        what(.cluster),
        .info.holder, .info.host, .info.pid, .info.command, .info.acquired_at.format("%Y-%m-%d %H:%M:%S UTC"),
        if .info.expires_at < Utc::now() { format!(" (stale: not refreshed since {})", (.info.expires_at - chrono::Duration::from_std(TTL).unwrap_or_default()).format("%H:%M:%S UTC")) } else { String::new() },
        unlock_command(.cluster)
    )]
    Held { cluster: String, info: LockInfo },
}

/// A held lock. Call [`Lock::release`] when done; a background task keeps
/// it fresh until then.
pub struct Lock {
    store: Store,
    etag: Arc<Mutex<String>>,
    info: LockInfo,
    refresher: tokio::task::JoinHandle<()>,
}

impl Lock {
    pub async fn acquire(store: &Store, command: &str) -> Result<Lock> {
        let (holder, host) = whoami();
        let now = Utc::now();
        let info = LockInfo {
            id: format!("{:016x}", rand::random::<u64>()),
            holder,
            host,
            pid: std::process::id(),
            command: command.to_string(),
            acquired_at: now,
            expires_at: now + chrono::Duration::from_std(TTL)?,
        };
        let body = serde_json::to_vec_pretty(&info)?;
        let etag = match store.put(LOCK_KEY, body.clone(), Condition::IfAbsent).await {
            Ok(etag) => etag,
            Err(e) if e.is::<PreconditionFailed>() => {
                let held = match store.get(LOCK_KEY).await? {
                    Some((bytes, etag)) => Some((serde_json::from_slice::<LockInfo>(&bytes)?, etag)),
                    None => None,
                };
                match held {
                    Some((old, etag)) if !holder_running(&old) => {
                        // Its holder was killed here: take it over, saying so.
                        let taken = store.put(LOCK_KEY, body, Condition::IfMatch(etag)).await.map_err(|e| {
                            if e.is::<PreconditionFailed>() {
                                anyhow::anyhow!(
                                    "{} was taken over by another run while we looked; try again",
                                    what(store.cluster())
                                )
                            } else {
                                e
                            }
                        })?;
                        use std::io::Write as _;
                        let _ = writeln!(
                            anstream::stderr(),
                            "{} was locked by pid {} on this host (`{}`, since {}), which is no longer running; this run takes the lock over and picks up where it stopped",
                            what(store.cluster()),
                            old.pid,
                            old.command,
                            old.acquired_at.format("%H:%M:%S UTC")
                        );
                        taken
                    }
                    Some((info, _)) => {
                        return Err(LockError::Held { cluster: store.cluster().to_string(), info }.into())
                    }
                    None => {
                        return Err(anyhow::anyhow!(
                            "{} was locked and released while we looked; try again",
                            what(store.cluster())
                        ))
                    }
                }
            }
            Err(e) => return Err(e),
        };
        let etag = Arc::new(Mutex::new(etag));
        let refresher = {
            let (store, etag, info) = (store.clone(), etag.clone(), info.clone());
            tokio::spawn(async move {
                let mut info = info;
                loop {
                    tokio::time::sleep(REFRESH_EVERY).await;
                    info.expires_at = Utc::now() + chrono::Duration::from_std(TTL).unwrap_or_default();
                    let mut current = etag.lock().await;
                    let Ok(body) = serde_json::to_vec_pretty(&info) else { break };
                    match store.put(LOCK_KEY, body, Condition::IfMatch(current.clone())).await {
                        Ok(new) => *current = new,
                        Err(e) => {
                            tracing::warn!("could not refresh the lock of {}: {e:#}", what(store.cluster()));
                            break;
                        }
                    }
                }
            })
        };
        tracing::debug!(cluster = store.cluster(), "lock acquired");
        Ok(Lock { store: store.clone(), etag, info, refresher })
    }

    pub fn info(&self) -> &LockInfo {
        &self.info
    }

    /// Deletes the lock if it is still ours.
    pub async fn release(self) -> Result<()> {
        self.refresher.abort();
        let _ = self.etag.lock().await;
        if let Some(current) = self.store.get_json::<LockInfo>(LOCK_KEY).await? {
            if current.id == self.info.id {
                self.store.delete(LOCK_KEY).await?;
            }
        }
        Ok(())
    }

    /// Runs `work` under the lock and releases it afterwards, whether the
    /// work succeeded, failed, or was interrupted with Ctrl-C.
    pub async fn with<T, F>(store: &Store, command: &str, work: F) -> Result<T>
    where
        F: std::future::Future<Output = Result<T>>,
    {
        let lock = Lock::acquire(store, command).await?;
        let result = tokio::select! {
            r = work => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted; the next run picks up where this one stopped")),
        };
        let released = lock.release().await;
        let value = result?;
        released?;
        Ok(value)
    }
}

/// Removes the lock whoever holds it (`pinfleet state unlock --force`).
pub async fn force_unlock(store: &Store) -> Result<Option<LockInfo>> {
    let held = store.get_json::<LockInfo>(LOCK_KEY).await?;
    if held.is_some() {
        store.delete(LOCK_KEY).await?;
    }
    Ok(held)
}
