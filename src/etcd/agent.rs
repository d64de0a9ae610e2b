//! The backup agent's effects: a full snapshot streamed from one member
//! into the state store (memory: one upload part), the keys per prefix at
//! its revision, the manifest last; a watch whose changes are flushed as
//! deltas every `deltaInterval` (the RPO), and whenever the watch ends (a
//! stop, a failure, the next full backup) what it read is flushed first;
//! gc by the tiers. Agents on every control-plane machine hold etcd's own
//! lock for the job, so one writes. Under Object Lock everything a restore
//! reads is locked with the snapshot: its manifest, its verdict, the deltas
//! after it, the PKI version holding its encryption keys; and a snapshot
//! whose manifest is gone anyway is still listed, its facts read from it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use etcd_client::{Client, EventType, GetOptions, LockOptions, WatchOptions, WatchResponse, WatchStream};

use super::conn::EtcdArgs;
use super::manifest::{self, Backup, Change, Delta, Manifest, Request, Seen, Trouble, Txn, Verdict};
use super::policy::{self, Fate};
use super::snapshot::{keys_per_prefix, read_facts, trailer_holds, Trailer};
use crate::spec::types::BackupSpec;
use crate::state::blob::Retention;
use crate::state::Store;

/// Who took a backup and of what.
#[derive(Debug, Clone)]
pub struct Taking {
    pub kubernetes_version: String,
    pub taken_by: String,
    pub retention: Option<Retention>,
    pub encryption_keys: Vec<String>,
}

impl Taking {
    /// This taking for a backup taken `now` by an agent started `since`
    /// (when its lock's date was reckoned): the lock as long again from
    /// `now`. `objectLock.days` holds each backup that long from when it is
    /// taken, as S3's default retention counts from each write; a date
    /// fixed when the agent started would lock nothing after `days`.
    pub fn locked_from(&self, since: DateTime<Utc>, now: DateTime<Utc>) -> Taking {
        let mut t = self.clone();
        if let Some(r) = &mut t.retention {
            let period = r.until - since;
            if period > chrono::Duration::zero() {
                r.until = now + period;
            }
        }
        t
    }
}

/// The key names in an API server's EncryptionConfiguration (what a
/// backup's Secrets need to be read), in its order.
pub fn encryption_key_names(config: &str) -> Vec<String> {
    let v: serde_json::Value = serde_saphyr::from_str(config).unwrap_or_default();
    let mut names = Vec::new();
    for r in v["resources"].as_array().into_iter().flatten() {
        for p in r["providers"].as_array().into_iter().flatten() {
            for (kind, body) in p.as_object().into_iter().flatten() {
                if kind == "identity" {
                    continue;
                }
                for k in body["keys"].as_array().into_iter().flatten() {
                    if let Some(n) = k["name"].as_str() {
                        if !names.iter().any(|x| x == n) {
                            names.push(n.to_string());
                        }
                    }
                }
            }
        }
    }
    names
}

/// Takes one full backup from the member at `endpoint`: streams the
/// snapshot into the store, checks etcd's checksum, then writes the
/// manifest. A failure before the upload completes leaves no object; one
/// after (the manifest refused, the agent killed) leaves a snapshot that a
/// listing finds without its manifest ([`list`]).
pub async fn take(store: &Store, etcd: &EtcdArgs, endpoint: &str, taking: &Taking) -> Result<Manifest> {
    let mut client = etcd.connect_to(endpoint).await?;
    let status = client.status().await.with_context(|| format!("etcd status at {endpoint}"))?;
    let member_id = status.header().map(|h| h.member_id()).unwrap_or_default();
    let members = read_again(|| {
        let mut c = client.clone();
        async move { c.member_list().await.context("etcd member list") }
    })
    .await?;
    let member = members
        .members()
        .iter()
        .find(|m| m.id() == member_id)
        .map(|m| m.name().to_string())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("{member_id:x}"));
    let peers: Vec<manifest::Peer> = members
        .members()
        .iter()
        .filter(|m| !m.name().is_empty())
        .filter_map(|m| {
            m.peer_urls().first().map(|u| manifest::Peer { name: m.name().to_string(), peer_url: u.clone() })
        })
        .collect();
    let etcd_version = status.version().to_string();
    let before = status.header().map(|h| h.revision()).unwrap_or_default();

    let taken_at = Utc::now();
    let mut stream = client.snapshot().await.with_context(|| format!("starting a snapshot from {endpoint}"))?;
    let mut trailer = Trailer::new();
    // Named by the revision before the stream began (the snapshot holds at
    // least that; the verifier reads the exact one from the restored data).
    // S3 cannot rename: the object goes up under its final key, and only
    // the manifest, written last, makes it a backup.
    let id_guess = manifest::backup_id(taken_at, before);
    let mut upload = store.upload(&manifest::snapshot_key(&id_guess), taking.retention.as_ref()).await?;
    let streamed: Result<()> = async {
        while let Some(msg) =
            stream.message().await.with_context(|| format!("streaming the snapshot from {endpoint}"))?
        {
            trailer.feed(msg.blob());
            upload.write(msg.blob()).await?;
        }
        Ok(())
    }
    .await;
    if let Err(e) = streamed {
        upload.abort().await;
        return Err(e);
    }
    let size = upload.written();
    let (held, sha256) = trailer.finish();
    if !held {
        upload.abort().await;
        bail!("the snapshot from {endpoint} failed etcd's own checksum ({size} bytes): nothing was stored");
    }
    // Counted before the upload completes: the snapshot appears under its
    // key only when its manifest follows at once (a listing that finds it
    // alone reads the whole snapshot to rebuild one).
    let keys = match read_again(|| {
        let mut c = client.clone();
        async move { keys_per_prefix(&mut c, before).await }
    })
    .await
    {
        Ok(k) => k,
        Err(e) => {
            upload.abort().await;
            return Err(e);
        }
    };
    upload.complete().await?;
    let m = Manifest {
        id: id_guess.clone(),
        cluster: store.cluster().to_string(),
        taken_at,
        revision: before,
        member,
        etcd_version,
        kubernetes_version: taking.kubernetes_version.clone(),
        size,
        sha256,
        keys,
        retain_until: taking.retention.as_ref().map(|r| r.until),
        encryption_keys: taking.encryption_keys.clone(),
        taken_by: taking.taken_by.clone(),
        members: peers,
    };
    // Locked as the snapshot is: a lock on the data alone leaves a backup
    // that vanishes from every listing once its manifest's versions go.
    store.put_json_locked(&manifest::manifest_key(&m.id), &m, taking.retention.as_ref()).await?;
    if let (Some(r), false) = (&taking.retention, m.encryption_keys.is_empty()) {
        lock_keys(store, r).await;
    }
    Ok(m)
}

/// Locks the PKI's version stored now as long as a backup that names
/// encryption keys: that version holds every key the backup needs (keys
/// are never removed from it), and stays when later writes add versions.
/// A role without the right (`s3:PutObjectRetention` on the PKI's object)
/// leaves the backup standing, and the agent says so.
async fn lock_keys(store: &Store, r: &Retention) {
    match store.lock(crate::state::pki::PKI_KEY, r).await {
        Ok(true) => tracing::debug!(until = %r.until, "the PKI's encryption keys are locked with the backup"),
        Ok(false) => tracing::debug!("no PKI in this store to lock (or a store without locks)"),
        Err(e) => tracing::warn!("the backup's encryption keys are not locked with it: {e:#}"),
    }
}

/// Verifies `m` ([`super::verify::verify`]) and locks the verdict it
/// writes as long as the backup (`lock`: the backup's retention): a
/// restore reads the verdict to go without `--force`.
pub async fn verify_locked(
    store: &Store,
    m: &Manifest,
    bins: &super::scratch::Binaries,
    live: Option<&EtcdArgs>,
    lock: Option<&Retention>,
) -> Result<Verdict> {
    let v = super::verify::verify(store, m, bins, live).await?;
    if let Some(r) = lock {
        store.lock(&manifest::verdict_key(&m.id), r).await.context("locking the verdict with its backup")?;
    }
    Ok(v)
}

/// A read etcd may refuse for a moment (one needing the leader while the
/// leadership moves: "etcdserver: leader changed"), asked again up to
/// three times, half a second apart.
async fn read_again<T, F, Fut>(mut read: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries = 0;
    loop {
        match read().await {
            Ok(v) => return Ok(v),
            Err(e) if tries < 3 => {
                tries += 1;
                tracing::debug!("{e:#}; asking again");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Every backup, with its verdict, oldest first: each manifest, and each
/// snapshot whose manifest is gone, its facts read from the snapshot
/// itself ([`manifest::MANIFEST_LOST`]): a snapshot is only ever stored
/// once etcd's checksum held, so it is a backup whatever happened to the
/// files beside it.
pub async fn list(store: &Store) -> Result<Vec<Backup>> {
    let keys = store.list_kept(manifest::BACKUPS).await?;
    let with_manifest: BTreeSet<&str> =
        keys.iter().filter(|k| k.ends_with("/manifest.json")).filter_map(|k| manifest::id_of(k)).collect();
    let mut out = Vec::new();
    for k in keys.iter().filter(|k| k.ends_with("/manifest.json")) {
        let Some(id) = manifest::id_of(k) else { continue };
        let Some(m) = store.get_json_kept::<Manifest>(k).await? else { continue };
        if m.id != id {
            bail!("{}: names backup {} but sits under {id}", store.describe(k), m.id);
        }
        let verdict = store.get_json_kept::<Verdict>(&manifest::verdict_key(id)).await?;
        out.push(Backup { manifest: m, verdict, recovered: None });
    }
    for k in keys.iter().filter(|k| k.ends_with("/snapshot.db")) {
        let Some(id) = manifest::id_of(k) else { continue };
        let Some((taken_at, revision)) = manifest::parse_backup_id(id) else { continue };
        if with_manifest.contains(id) {
            continue;
        }
        let verdict = store.get_json_kept::<Verdict>(&manifest::verdict_key(id)).await?;
        // A backup being taken: its manifest written since the listing.
        if let Some(m) = store.get_json_kept::<Manifest>(&manifest::manifest_key(id)).await? {
            if m.id == id {
                out.push(Backup { manifest: m, verdict, recovered: None });
            }
            continue;
        }
        let (m, said) = recover(store, id, taken_at, revision).await;
        out.push(Backup { manifest: m, verdict, recovered: Some(said) });
    }
    out.sort_by(|a, b| a.manifest.taken_at.cmp(&b.manifest.taken_at));
    Ok(out)
}

/// The manifest of backup `id`, whose own is lost, rebuilt from what is
/// left: when and at which revision from its name, its lock from the
/// snapshot object, its size, sha256, revision, members, keys per prefix
/// and encryption keys from the snapshot itself (downloaded: a restore
/// downloads it anyway). Who took it, from which member and under which
/// Kubernetes are not known. With what the listing says of it: a part
/// that could not be read is said, not fatal (the backup is still listed;
/// a restore's own checks refuse a snapshot that does not hold). Read
/// once per process: a backup's snapshot is never rewritten.
async fn recover(store: &Store, id: &str, taken_at: DateTime<Utc>, revision: i64) -> (Manifest, String) {
    static READ: OnceLock<Mutex<HashMap<String, (Manifest, String)>>> = OnceLock::new();
    let key = manifest::snapshot_key(id);
    let memo = READ.get_or_init(Default::default);
    let at = store.describe(&key);
    if let Some(hit) = memo.lock().ok().and_then(|m| m.get(&at).cloned()) {
        return hit;
    }
    let unknown = || "unknown".to_string();
    let mut m = Manifest {
        id: id.to_string(),
        cluster: store.cluster().to_string(),
        taken_at,
        revision,
        member: unknown(),
        etcd_version: unknown(),
        kubernetes_version: unknown(),
        size: 0,
        sha256: String::new(),
        keys: Default::default(),
        retain_until: None,
        encryption_keys: Vec::new(),
        taken_by: format!("unknown ({})", manifest::MANIFEST_LOST),
        members: Vec::new(),
    };
    let mut said = manifest::MANIFEST_LOST.to_string();
    let mut whole = true;
    match store.retention_of(&key).await {
        Ok(r) => m.retain_until = r.map(|r| r.until),
        Err(e) => {
            whole = false;
            said.push_str(&format!("; its lock could not be read ({e:#})"));
        }
    }
    match read_snapshot(store, &key).await {
        Ok((size, held, sha256, facts)) => {
            m.size = size;
            m.sha256 = sha256;
            if !held {
                said.push_str("; etcd's checksum at its end does not hold");
            }
            match facts {
                Ok(f) => {
                    m.revision = f.revision.max(revision);
                    m.keys = f.keys;
                    m.members = f.members;
                    m.encryption_keys = f.encryption_keys;
                    if let Some(v) = f.cluster_version {
                        m.etcd_version = v;
                    }
                }
                Err(e) => said.push_str(&format!("; its database could not be read ({e:#})")),
            }
        }
        Err(e) => {
            whole = false;
            said.push_str(&format!("; the snapshot could not be read ({e:#})"));
        }
    }
    // A store that failed to answer is asked again at the next listing.
    if whole {
        if let Ok(mut memo) = memo.lock() {
            memo.insert(at, (m.clone(), said.clone()));
        }
    }
    (m, said)
}

/// Downloads the snapshot under `key` and reads it: (size, etcd's checksum
/// held, sha256 of the whole, its facts).
async fn read_snapshot(store: &Store, key: &str) -> Result<(u64, bool, String, Result<super::snapshot::Facts>)> {
    let file =
        std::env::temp_dir().join(format!("pinfleet-recover-{}-{}.db", std::process::id(), rand::random::<u32>()));
    let read: Result<(u64, bool, String, Result<super::snapshot::Facts>)> = async {
        let size = store.download(key, &file).await?;
        let f = file.clone();
        let (trailer, facts) = tokio::task::spawn_blocking(move || (trailer_holds(&f), read_facts(&f)))
            .await
            .context("reading the downloaded snapshot")?;
        let (held, sha256) = trailer?;
        Ok((size, held, sha256, facts))
    }
    .await;
    let _ = std::fs::remove_file(&file);
    read
}

/// Deltas stored after `revision`, in order, without the transactions of
/// a timeline an earlier restore abandoned ([`manifest::Cut`]).
pub async fn deltas_after(store: &Store, revision: i64) -> Result<Vec<Delta>> {
    // Every version of every cut: one put over a cut adds, never removes.
    let mut cuts = Vec::new();
    for k in store.list_kept(manifest::CUTS).await? {
        cuts.extend(store.get_json_versions::<manifest::Cut>(&k).await?);
    }
    let mut out = Vec::new();
    for k in store.list_kept(manifest::DELTAS).await? {
        let Some((_, to)) = manifest::delta_span(&k) else { continue };
        if to <= revision {
            continue;
        }
        if let Some(mut d) = store.get_json_kept::<Delta>(&k).await? {
            d.txns.retain(|t| !cuts.iter().any(|c| c.drops(t.rev)));
            if !d.txns.is_empty() {
                out.push(d);
            }
        }
    }
    out.sort_by_key(|d| d.from);
    Ok(out)
}

/// The deltas a restore of `backup` replays: [`deltas_after`] its
/// revision, and, when the backup is locked, only up to the first delta
/// that is not (the agents lock every delta while the backup's lock
/// applies, so an unlocked one was written by someone else: it is not
/// replayed, nor anything after it). With what was left out, in words.
pub async fn deltas_to_replay(
    store: &Store,
    backup: &str,
    revision: i64,
    locked: bool,
) -> Result<(Vec<Delta>, Option<String>)> {
    let mut deltas = deltas_after(store, revision).await?;
    if !locked {
        return Ok((deltas, None));
    }
    for (i, d) in deltas.iter().enumerate() {
        let key = manifest::delta_key(d.from, d.to);
        if store.retention_of(&key).await?.is_none() {
            let left = deltas.len() - i;
            let why = format!(
                "{} is not locked as backup {backup} and its deltas are (the agents lock each one they write): it and the {} after it are not replayed (revision {} and on); --until chooses a point before it",
                store.describe(&key),
                left - 1,
                d.from
            );
            deltas.truncate(i);
            return Ok((deltas, Some(why)));
        }
    }
    Ok((deltas, None))
}

/// The agents' word on the live store with the highest revision (what a
/// restore must bump past).
pub async fn seen(store: &Store) -> Result<Option<Seen>> {
    Ok(seen_all(store).await?.into_iter().max_by_key(|s| s.revision))
}

/// Every agent's word on the live store (one per member): the highest
/// revision is what a restore bumps past, the most recent whether the
/// store is up now.
pub async fn seen_all(store: &Store) -> Result<Vec<Seen>> {
    let mut all = Vec::new();
    for k in store.list(manifest::SEEN).await? {
        if let Some(s) = store.get_json::<Seen>(&k).await? {
            all.push(s);
        }
    }
    Ok(all)
}

/// The agents' failures newer than `since` (the newest backup: the
/// agent's role may not delete, so a failure is past once a backup follows
/// it), newest first.
pub async fn troubles(store: &Store, since: Option<chrono::DateTime<Utc>>) -> Result<Vec<Trouble>> {
    let mut out = Vec::new();
    for k in store.list(manifest::TROUBLE).await? {
        if let Some(t) = store.get_json::<Trouble>(&k).await? {
            if since.is_none_or(|s| t.at > s) {
                out.push(t);
            }
        }
    }
    out.sort_by(|a, b| b.at.cmp(&a.at));
    Ok(out)
}

/// How long the agent waits after its n-th failure in a row: 5 s,
/// doubling, at most 5 minutes (a kubelet's crash back-off, without the
/// crash: the agent stays up and says why).
pub fn retry_after(failures: u32) -> Duration {
    let first = Duration::from_secs(5);
    let doublings = failures.saturating_sub(1).min(16);
    first.saturating_mul(1u32 << doublings).min(Duration::from_secs(300))
}

/// The agent as a machine runs it: [`run`] again after each failure, with
/// [`retry_after`]'s back-off, each failure written to the state store
/// (`etcd/trouble/<host>.json`; one older than the newest backup is past) so
/// that a change to the control plane and `pinfleet etcd backups` say why
/// no backup comes. A machine whose etcd is not up yet (a control plane
/// still joining), or a store refusing for a while, is waited out rather
/// than crash-looped. Returns when `stop` resolves (SIGTERM: a DaemonSet's
/// rolling update), after storing what changed since the last flush (what
/// the watch had read, and what etcd had committed that it had not), and
/// after giving the agents' lock up (the next agent takes it at once);
/// or when `run` returns (never, unless `once`). The caller must not drop
/// this future on the signal itself: the flush happens inside.
pub async fn serve(
    store: &Store,
    etcd: &EtcdArgs,
    spec: &BackupSpec,
    taking: &Taking,
    verify_with: Option<&super::scratch::Binaries>,
    figures: Option<super::metrics::Shared>,
    stop: impl std::future::Future<Output = ()>,
) -> Result<()> {
    let (tell, told) = tokio::sync::watch::channel(false);
    let signal = async move {
        stop.await;
        let _ = tell.send(true);
        // The sender stays: the word stays said.
        std::future::pending::<()>().await
    };
    tokio::select! {
        r = serve_until(store, etcd, spec, taking, verify_with, figures, Stop(told)) => r,
        () = signal => Ok(()),
    }
}

/// The agent's stop, seen from everywhere it waits.
#[derive(Debug, Clone)]
struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// A stop that never comes ([`run`], which returns on its own).
    fn never() -> Stop {
        Stop(tokio::sync::watch::channel(false).1)
    }

    fn asked(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the stop is asked (at once if it was).
    async fn wait(&self) {
        let mut rx = self.0.clone();
        let closed = rx.wait_for(|s| *s).await.is_err();
        if closed {
            std::future::pending::<()>().await;
        }
    }
}

async fn serve_until(
    store: &Store,
    etcd: &EtcdArgs,
    spec: &BackupSpec,
    taking: &Taking,
    verify_with: Option<&super::scratch::Binaries>,
    figures: Option<super::metrics::Shared>,
    stop: Stop,
) -> Result<()> {
    let host = crate::state::whoami().1;
    // When `taking`'s lock date was reckoned (its caller, just now).
    let since = Utc::now();
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let err = match run_until(store, etcd, spec, taking, verify_with, false, figures.clone(), since, &stop).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if stop.asked() {
            return Err(err.context("the etcd backup agent was stopping"));
        }
        // A run that lasted longer than its back-off had succeeded in between.
        if started.elapsed() > retry_after(failures).saturating_mul(2) {
            failures = 0;
        }
        failures = failures.saturating_add(1);
        let wait = retry_after(failures);
        let error = format!("{err:#}");
        tracing::warn!(failures, "the etcd backup agent failed: {error}; trying again in {wait:?}");
        let t = Trouble { host: host.clone(), at: Utc::now(), failures, error };
        if let Err(e) = store.put_json(&manifest::trouble_key(&host), &t).await {
            tracing::warn!("recording the agent's failure: {e:#}");
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.wait() => return Ok(()),
        }
    }
}

/// Collects what the tiers no longer keep (its snapshot, verdict and
/// manifest, the manifest last) and the deltas no kept backup needs. What
/// is locked waits for its lock, and says so: a backup whose manifest
/// says so, and before anything is deleted, any version of any of its
/// objects (a lock the manifest does not know of: a backup whose manifest
/// was rebuilt, or rewritten) and, where locks are in use, of each delta.
/// Returns what was collected and what waits.
pub async fn gc(store: &Store, spec: &BackupSpec) -> Result<(Vec<String>, Vec<String>)> {
    let backups = list(store).await?;
    let now = Utc::now();
    let mut collected = Vec::new();
    let mut waiting = Vec::new();
    for (id, fate) in policy::fates(&backups, spec, now) {
        match fate {
            Fate::Keep(_) => {}
            Fate::Locked(until) => waiting.push(format!("{id} (locked until {until})")),
            Fate::Collect => {
                let keys = [manifest::snapshot_key(&id), manifest::verdict_key(&id), manifest::manifest_key(&id)];
                match locked_until(store, &keys, now).await {
                    Ok(Some(until)) => {
                        waiting.push(format!("{id} (locked until {until})"));
                        continue;
                    }
                    Err(e) => {
                        waiting.push(format!("{id} (its lock could not be read, so it is kept: {e:#})"));
                        continue;
                    }
                    Ok(None) => {}
                }
                let mut failed = None;
                for key in &keys {
                    if let Err(e) = store.delete_all_versions(key).await {
                        failed = Some(e);
                        break;
                    }
                }
                match failed {
                    None => collected.push(id),
                    Some(e) => waiting.push(format!("{id} ({e:#})")),
                }
            }
        }
    }
    // Uploads a killed writer left behind (never a backup: no manifest).
    let stale = store.abort_stale_uploads(manifest::BACKUPS, Duration::from_secs(3600)).await?;
    if stale > 0 {
        waiting.push(format!("{stale} upload(s) cut off more than an hour ago were given up"));
    }
    // Deltas older than the oldest kept backup serve no restore. A delta
    // is locked with the backup it follows; a plain delete of a locked
    // object would only hide it behind a delete marker, so where locks are
    // in use each one's lock is read first.
    let locks_in_use = spec.object_lock.is_some() || backups.iter().any(|b| b.manifest.retain_until.is_some());
    let oldest_kept = list(store).await?.first().map(|b| b.manifest.revision);
    if let Some(oldest) = oldest_kept {
        let (mut held, mut held_until) = (0usize, None::<DateTime<Utc>>);
        let mut unread: Option<(usize, String)> = None;
        for k in store.list_kept(manifest::DELTAS).await? {
            if !manifest::delta_span(&k).is_some_and(|(_, to)| to <= oldest) {
                continue;
            }
            if locks_in_use {
                match store.locked_until(&k, now).await {
                    Ok(None) => {}
                    Ok(Some(until)) => {
                        held += 1;
                        held_until = Some(held_until.map_or(until, |h| h.max(until)));
                        continue;
                    }
                    Err(e) => {
                        unread.get_or_insert_with(|| (0, format!("{e:#}"))).0 += 1;
                        continue;
                    }
                }
            }
            store.delete_all_versions(&k).await?;
        }
        if let Some(until) = held_until {
            waiting.push(format!("{held} delta(s) no backup needs (locked until {until})"));
        }
        if let Some((n, e)) = unread {
            waiting.push(format!("{n} delta(s) no backup needs, kept: their lock could not be read ({e})"));
        }
    }
    Ok((collected, waiting))
}

/// The latest date any version of any of `keys` is locked until, past `now`.
async fn locked_until(store: &Store, keys: &[String], now: DateTime<Utc>) -> Result<Option<DateTime<Utc>>> {
    let mut latest: Option<DateTime<Utc>> = None;
    for k in keys {
        if let Some(until) = store.locked_until(k, now).await? {
            latest = Some(latest.map_or(until, |l| l.max(until)));
        }
    }
    Ok(latest)
}

/// The watch's start revision is compacted away: watching again from it
/// cannot help, only a full backup does.
#[derive(Debug, thiserror::Error)]
#[error(
    "the delta watch started at revision {from}, which etcd has compacted (to {to}): a full backup is needed first"
)]
pub struct Compacted {
    pub from: i64,
    pub to: i64,
}

/// How long a stopping watch reads on for what etcd committed before the
/// stop: a kubelet gives a pod 30 s after SIGTERM by default; this leaves
/// most of it to the flush.
const DRAIN: Duration = Duration::from_secs(5);

/// What a watch has read and not yet stored.
struct Following {
    from: i64,
    pending: Vec<Txn>,
    /// The deltas stored hold every change up to here.
    flushed: i64,
    /// The newest revision a response's header named.
    last_seen: i64,
    /// The newest revision a progress notice said the watch had caught up
    /// to (etcd sends one only to a watch with nothing left to deliver).
    synced_to: i64,
    last_flush: Instant,
}

impl Following {
    fn new(from: i64) -> Following {
        let flushed = from.saturating_sub(1);
        Following {
            from,
            pending: Vec::new(),
            flushed,
            last_seen: flushed,
            synced_to: flushed,
            last_flush: Instant::now(),
        }
    }

    fn take_in(&mut self, resp: &WatchResponse) -> Result<()> {
        if resp.compact_revision() > 0 {
            return Err(Compacted { from: self.from, to: resp.compact_revision() }.into());
        }
        if resp.canceled() {
            bail!("etcd canceled the delta watch: {}", resp.cancel_reason());
        }
        let header = resp.header().map(|h| h.revision()).unwrap_or_default();
        self.last_seen = self.last_seen.max(header);
        if resp.events().is_empty() && !resp.created() {
            self.synced_to = self.synced_to.max(header);
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            let rev = kv.mod_revision();
            let change = Change {
                k: b64.encode(kv.key()),
                v: (ev.event_type() == EventType::Put).then(|| b64.encode(kv.value())),
            };
            match self.pending.last_mut() {
                Some(t) if t.rev == rev => t.ops.push(change),
                _ => self.pending.push(Txn { rev, ops: vec![change] }),
            }
        }
        Ok(())
    }

    /// The newest revision whose changes were read (stored or pending).
    fn read_to(&self) -> i64 {
        self.pending.last().map_or(self.flushed, |t| t.rev)
    }

    /// Stores what was read as one delta (locked as the backup it follows),
    /// and the agent's word on the live revision. What fails to be stored
    /// stays pending.
    async fn flush(
        &mut self,
        store: &Store,
        member: &str,
        lock: Option<&Retention>,
        figures: Option<&super::metrics::Shared>,
    ) -> Result<()> {
        // With nothing pending, only as far as a progress notice vouches
        // for: a header's revision may run ahead of events still coming (a
        // watch catching up gets them in batches), and a watch started
        // again goes on from here.
        let rev = if let Some(t) = self.pending.last() { t.rev } else { self.synced_to.max(self.flushed) };
        if !self.pending.is_empty() {
            let d = Delta {
                from: self.flushed.saturating_add(1),
                to: rev,
                flushed_at: Utc::now(),
                txns: std::mem::take(&mut self.pending),
            };
            if let Err(e) = store.put_json_locked(&manifest::delta_key(d.from, d.to), &d, lock).await {
                self.pending = d.txns;
                return Err(e);
            }
        }
        let secs = self.last_flush.elapsed().as_secs_f64().max(0.001);
        let rate = (rev.saturating_sub(self.flushed)) as f64 / secs;
        self.flushed = rev;
        self.last_flush = Instant::now();
        let seen = Seen { member: member.to_string(), revision: self.last_seen.max(rev), at: Utc::now(), rate };
        store.put_json(&manifest::seen_key(member), &seen).await?;
        if let Some(f) = figures {
            if let Ok(mut g) = f.lock() {
                g.last_delta_flush = Utc::now().timestamp() as f64;
            }
        }
        Ok(())
    }

    /// Reads on until the watch has delivered every change etcd had
    /// committed when asked (a progress notice says when it has).
    async fn catch_up(&mut self, client: &mut Client, stream: &mut WatchStream) -> Result<()> {
        let now = client
            .get(vec![0], Some(GetOptions::new().with_count_only()))
            .await
            .context("reading etcd's revision to catch up to")?;
        let target = now.header().map(|h| h.revision()).unwrap_or_default();
        stream.request_progress().await.context("asking the delta watch for its progress")?;
        while self.read_to().max(self.synced_to) < target {
            match stream.message().await.context("the delta watch")? {
                Some(resp) => self.take_in(&resp)?,
                None => break,
            }
        }
        Ok(())
    }
}

/// Watches every key from `from` and flushes what changed every `every`
/// (and the agent's word on the live revision with it) until `stop`
/// resolves or the watch fails, the deltas locked with `lock` (the
/// backup's). Whatever ends it, what the watch read is flushed first; on
/// `stop`, what etcd had committed but the watch not yet delivered is read
/// first too (for [`DRAIN`] at most). Returns the last revision flushed
/// (the stored deltas hold every change up to it: a new watch goes on from
/// the next) and why the watch ended (`Ok`: `stop`).
#[allow(clippy::too_many_arguments)]
pub async fn follow(
    store: &Store,
    client: &mut Client,
    member: &str,
    from: i64,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
    figures: Option<&super::metrics::Shared>,
    lock: Option<&Retention>,
) -> (i64, Result<()>) {
    let mut st = Following::new(from);
    let opts = WatchOptions::new().with_range(vec![0]).with_start_revision(from).with_progress_notify();
    let mut stream = match client.watch(vec![0], Some(opts)).await.context("watching etcd for deltas") {
        Ok(s) => s,
        Err(e) => return (st.flushed, Err(e)),
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    tokio::pin!(stop);
    let ended: Result<()> = loop {
        tokio::select! {
            _ = &mut stop => break Ok(()),
            _ = tick.tick() => {
                if let Err(e) = st.flush(store, member, lock, figures).await {
                    break Err(e);
                }
            }
            msg = stream.message() => {
                match msg.context("the delta watch") {
                    Ok(Some(resp)) => {
                        if let Err(e) = st.take_in(&resp) {
                            break Err(e);
                        }
                    }
                    Ok(None) => break Err(anyhow!("the delta watch ended")),
                    Err(e) => break Err(e),
                }
            }
        }
    };
    if ended.is_ok() {
        match tokio::time::timeout(DRAIN, st.catch_up(client, &mut stream)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("catching up with etcd before stopping: {e:#}"),
            Err(_) => tracing::warn!("catching up with etcd before stopping took more than {DRAIN:?}"),
        }
    }
    let stored = st.flush(store, member, lock, figures).await;
    let ended = match (ended, stored) {
        (Ok(()), r) => r,
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(f)) => Err(e.context(format!("storing what the watch had read failed too: {f:#}"))),
    };
    (st.flushed, ended)
}

/// How often the agent holding the lock looks for a change's request.
pub const REQUEST_POLL: Duration = Duration::from_secs(2);

/// Resolves with the first request for a backup made after `after` (read
/// every `every`; a store that cannot be read is asked again).
pub async fn asked_after(store: &Store, after: chrono::DateTime<Utc>, every: Duration) -> Request {
    loop {
        tokio::time::sleep(every).await;
        match store.get_json::<Request>(manifest::REQUEST).await {
            Ok(Some(r)) if r.at > after => return r,
            Ok(_) => {}
            Err(e) => tracing::warn!("reading the request for an etcd backup: {e:#}"),
        }
    }
}

/// Asks the agents for a backup now and waits, up to `wait`, for a
/// verified one taken after the request. `Ok(None)` when none came in time
/// (the caller says why); every `progress` is told what is awaited.
pub async fn ask_and_wait(
    store: &Store,
    by: &str,
    reason: &str,
    wait: Duration,
    progress: &dyn Fn(&str),
) -> Result<Option<Backup>> {
    let asked = Utc::now();
    store
        .put_json(manifest::REQUEST, &Request { at: asked, by: by.to_string(), reason: reason.to_string() })
        .await
        .context("asking the etcd backup agents for a backup")?;
    progress(&format!(
        "asked the etcd backup agent for a backup ({reason}); waiting up to {} for it to be taken and verified",
        humantime::format_duration(wait)
    ));
    let until = Instant::now() + wait;
    let mut taken_unverified = None;
    loop {
        let list = list(store).await?;
        if let Some(b) = list.iter().filter(|b| b.manifest.taken_at >= asked).max_by_key(|b| b.manifest.taken_at) {
            if b.verified() {
                return Ok(Some(b.clone()));
            }
            if taken_unverified.as_deref() != Some(b.manifest.id.as_str()) {
                progress(&format!("backup {} taken; waiting for its verification", b.manifest.id));
                taken_unverified = Some(b.manifest.id.clone());
            }
        }
        if Instant::now() >= until {
            return Ok(None);
        }
        tokio::time::sleep(REQUEST_POLL).await;
    }
}

/// How often in a row a watch that failed is started again from the last
/// flush before the agent gives up and takes a full backup (after
/// [`retry_after`]'s back-off); a second apart.
const REWATCHES: u32 = 3;

/// One agent's loop: hold etcd's lock for the job (one writer across the
/// members), take a full backup every `interval` (verify it when etcd's
/// binaries are here), follow the deltas in between, gc after each.
pub async fn run(
    store: &Store,
    etcd: &EtcdArgs,
    spec: &BackupSpec,
    taking: &Taking,
    verify_with: Option<&super::scratch::Binaries>,
    once: bool,
    figures: Option<super::metrics::Shared>,
) -> Result<()> {
    run_until(store, etcd, spec, taking, verify_with, once, figures, Utc::now(), &Stop::never()).await
}

/// [`run`], until `stop`: then what changed after the stored backups and
/// deltas end is flushed (the watch following the newest backup, or one
/// started for the purpose when the stop came before it: while a backup
/// was taken, verified or collected), and the agents' lock is given up.
/// Each backup's lock is `taking`'s, counted from when it is taken
/// ([`Taking::locked_from`], `since`: when `taking`'s date was reckoned).
#[allow(clippy::too_many_arguments)]
/// The agent's own gc. Its role may not delete backups (the control
/// plane's IAM policy denies it): what it cannot collect waits for the
/// operator's `pinfleet etcd gc`, and the agent goes on (said, never an error).
async fn collect_old(store: &Store, spec: &BackupSpec) {
    match gc(store, spec).await {
        Ok((collected, waiting)) if !collected.is_empty() || !waiting.is_empty() => {
            tracing::info!(?collected, ?waiting, "etcd backups collected");
        }
        Ok(_) => {}
        Err(e) => tracing::warn!("collecting old etcd backups: {e:#}"),
    }
}

async fn run_until(
    store: &Store,
    etcd: &EtcdArgs,
    spec: &BackupSpec,
    taking: &Taking,
    verify_with: Option<&super::scratch::Binaries>,
    once: bool,
    figures: Option<super::metrics::Shared>,
    since: DateTime<Utc>,
    stop: &Stop,
) -> Result<()> {
    let note = |f: &dyn Fn(&mut super::metrics::Figures)| {
        if let Some(m) = &figures {
            if let Ok(mut g) = m.lock() {
                f(&mut g);
            }
        }
    };
    note(&|g| {
        g.cluster = store.cluster().to_string();
        g.interval_seconds = spec.interval.0.as_secs_f64();
    });
    let (endpoint, mut client) = tokio::select! {
        r = etcd.first_answering() => r?,
        _ = stop.wait() => return Ok(()),
    };
    let lease = client.lease_grant(15, None).await.context("etcd lease for the agent's lock")?.id();
    let (mut keeper, _) = client.lease_keep_alive(lease).await.context("keeping the agent's lease")?;
    let keep = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if keeper.keep_alive().await.is_err() {
                break;
            }
        }
    });
    let result: Result<()> = async {
        tokio::select! {
            r = client.lock(manifest::AGENTS_LOCK, Some(LockOptions::new().with_lease(lease))) => {
                r.context("waiting for the agents' lock")?;
            }
            // A standby agent: nothing of its own to flush.
            _ = stop.wait() => return Ok(()),
        }
        // Where the stored backups and deltas end: the member followed, the
        // revision, the lock the deltas after it take.
        let mut covered: Option<(String, i64, Option<Retention>)> = None;
        loop {
            let taking = taking.locked_from(since, Utc::now());
            let m = tokio::select! {
                r = take(store, etcd, &endpoint, &taking) => match r {
                    Ok(m) => m,
                    Err(e) => {
                        note(&|g| g.failures = g.failures.saturating_add(1));
                        return Err(e);
                    }
                },
                _ = stop.wait() => break,
            };
            covered = Some((m.member.clone(), m.revision, taking.retention.clone()));
            let now = || Utc::now().timestamp() as f64;
            note(&|g| {
                g.last_backup = now();
                g.last_backup_bytes = m.size;
            });
            tracing::info!(id = %m.id, revision = m.revision, size = m.size, "etcd backup taken");
            if let Some(bins) = verify_with {
                let v = tokio::select! {
                    r = verify_locked(store, &m, bins, Some(etcd), taking.retention.as_ref()) => r?,
                    _ = stop.wait() => break,
                };
                note(&|g| {
                    g.last_verification_ok = Some(v.ok);
                    if v.ok {
                        g.last_verified = now();
                    }
                });
                tracing::info!(id = %m.id, ok = v.ok, "etcd backup verified");
            }
            tokio::select! {
                () = collect_old(store, spec) => {}
                _ = stop.wait() => break,
            }
            if once {
                return Ok(());
            }
            // The next full backup: at the interval, or as soon as a change
            // to the control plane asks for one; the deltas until then, the
            // watch started again from the last flush if it fails (etcd's
            // history still holds what it had not delivered).
            let due = tokio::time::Instant::now() + spec.interval.0;
            let mut from = m.revision.saturating_add(1);
            let mut rewatches = 0u32;
            loop {
                let next = async {
                    tokio::select! {
                        _ = tokio::time::sleep_until(due) => {}
                        r = asked_after(store, m.taken_at, REQUEST_POLL) => {
                            tracing::info!(by = %r.by, reason = %r.reason, "an etcd backup was asked for");
                        }
                        _ = stop.wait() => {}
                    }
                };
                let lock = taking.retention.as_ref();
                let (flushed, ended) =
                    follow(store, &mut client, &m.member, from, spec.delta_interval.0, next, figures.as_ref(), lock)
                        .await;
                covered = Some((m.member.clone(), flushed, taking.retention.clone()));
                match ended {
                    Ok(()) => break,
                    Err(e) if rewatches < REWATCHES && !e.is::<Compacted>() && !stop.asked() => {
                        rewatches += 1;
                        from = flushed.saturating_add(1);
                        tracing::warn!("{e:#}; watching again from revision {from}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            if stop.asked() {
                return Ok(());
            }
        }
        // Stopped before the watch followed the newest backup: what changed
        // after the stored backups and deltas end is read and flushed.
        if let Some((member, rev, lock)) = covered {
            let (_, ended) = follow(
                store,
                &mut client,
                &member,
                rev.saturating_add(1),
                spec.delta_interval.0,
                std::future::ready(()),
                figures.as_ref(),
                lock.as_ref(),
            )
            .await;
            ended?;
        }
        Ok(())
    }
    .await;
    keep.abort();
    let _ = client.lease_revoke(lease).await;
    result.map_err(|e: anyhow::Error| anyhow!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_backup_is_locked_as_long_from_when_it_is_taken() {
        let at = |h: i64| {
            DateTime::parse_from_rfc3339("2026-11-27T12:00:00Z").unwrap().with_timezone(&Utc)
                + chrono::Duration::hours(h)
        };
        let taking = Taking {
            kubernetes_version: "1.33.4".into(),
            taken_by: "test".into(),
            retention: Some(Retention { mode: "COMPLIANCE".into(), until: at(24) }),
            encryption_keys: vec![],
        };
        // An agent started at 0 with a day's lock: a backup 30 hours later
        // is locked a day from then, not from the agent's start.
        let later = taking.locked_from(at(0), at(30));
        assert_eq!(later.retention, Some(Retention { mode: "COMPLIANCE".into(), until: at(54) }));
        let unlocked = Taking { retention: None, ..taking };
        assert_eq!(unlocked.locked_from(at(0), at(30)).retention, None);
    }

    #[test]
    fn key_names_come_from_the_encryption_configuration() {
        let pki = crate::state::pki::Pki {
            encryption_keys: vec![
                crate::state::pki::EncryptionKey { name: "key-b".into(), secret: "Yg==".into(), provider: Default::default() },
                crate::state::pki::EncryptionKey { name: "key-a".into(), secret: "YQ==".into(), provider: Default::default() },
            ],
            ..serde_json::from_value(serde_json::json!({
                "ca_cert": "", "ca_key": "", "front_proxy_ca_cert": "", "front_proxy_ca_key": "", "sa_key": "", "sa_pub": "",
                "admin_cert": "", "admin_key": "", "join_token": "", "certificate_key": "", "ca_cert_hash": ""
            }))
            .unwrap()
        };
        let config = pki.encryption_config();
        assert!(config.contains("secretbox") && config.trim_end().ends_with("- identity: {}"), "{config}");
        assert_eq!(encryption_key_names(&config), ["key-b", "key-a"]);
        assert!(encryption_key_names("not: [yaml").is_empty());
    }
}
