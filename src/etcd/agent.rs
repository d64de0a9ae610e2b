//! The backup agent's effects: a full snapshot streamed from one member
//! into the state store (memory: one upload part), the keys per prefix at
//! its revision, the manifest last; a watch whose changes are flushed as
//! deltas every `deltaInterval` (the RPO); gc by the tiers. Agents on every
//! control-plane machine hold etcd's own lock for the job, so one writes.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::Engine as _;
use chrono::Utc;
use etcd_client::{Client, EventType, LockOptions, WatchOptions};

use super::conn::EtcdArgs;
use super::manifest::{self, Backup, Change, Delta, Manifest, Request, Seen, Trouble, Txn, Verdict};
use super::policy::{self, Fate};
use super::snapshot::{keys_per_prefix, Trailer};
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
/// manifest. Anything short of that leaves no manifest (and no object).
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
    upload.complete().await?;
    let keys = read_again(|| {
        let mut c = client.clone();
        async move { keys_per_prefix(&mut c, before).await }
    })
    .await?;
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
    store.put_json(&manifest::manifest_key(&m.id), &m).await?;
    Ok(m)
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

/// Every complete backup (a manifest), with its verdict, oldest first.
pub async fn list(store: &Store) -> Result<Vec<Backup>> {
    let keys = store.list(manifest::BACKUPS).await?;
    let mut out = Vec::new();
    for k in keys.iter().filter(|k| k.ends_with("/manifest.json")) {
        let Some(id) = manifest::id_of(k) else { continue };
        let Some(m) = store.get_json::<Manifest>(k).await? else { continue };
        if m.id != id {
            bail!("{}: names backup {} but sits under {id}", store.describe(k), m.id);
        }
        let verdict = store.get_json::<Verdict>(&manifest::verdict_key(id)).await?;
        out.push(Backup { manifest: m, verdict });
    }
    out.sort_by(|a, b| a.manifest.taken_at.cmp(&b.manifest.taken_at));
    Ok(out)
}

/// Deltas stored after `revision`, in order, without the transactions of
/// a timeline an earlier restore abandoned ([`manifest::Cut`]).
pub async fn deltas_after(store: &Store, revision: i64) -> Result<Vec<Delta>> {
    let mut cuts = Vec::new();
    for k in store.list(manifest::CUTS).await? {
        if let Some(c) = store.get_json::<manifest::Cut>(&k).await? {
            cuts.push(c);
        }
    }
    let mut out = Vec::new();
    for k in store.list(manifest::DELTAS).await? {
        let Some((_, to)) = manifest::delta_span(&k) else { continue };
        if to <= revision {
            continue;
        }
        if let Some(mut d) = store.get_json::<Delta>(&k).await? {
            d.txns.retain(|t| !cuts.iter().any(|c| c.drops(t.rev)));
            if !d.txns.is_empty() {
                out.push(d);
            }
        }
    }
    out.sort_by_key(|d| d.from);
    Ok(out)
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
/// than crash-looped. Returns only when `run` does (never, unless `once`).
pub async fn serve(
    store: &Store,
    etcd: &EtcdArgs,
    spec: &BackupSpec,
    taking: &Taking,
    verify_with: Option<&super::scratch::Binaries>,
    figures: Option<super::metrics::Shared>,
) -> Result<()> {
    let host = crate::state::whoami().1;
    let mut failures = 0u32;
    loop {
        let started = Instant::now();
        let err = match run(store, etcd, spec, taking, verify_with, false, figures.clone()).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
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
        tokio::time::sleep(wait).await;
    }
}

/// Collects what the tiers no longer keep (its snapshot, verdict and
/// manifest, the manifest last) and the deltas no kept backup needs; a
/// locked backup waits. Returns what was collected and what waits.
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
                let mut failed = None;
                for key in [manifest::snapshot_key(&id), manifest::verdict_key(&id), manifest::manifest_key(&id)] {
                    if let Err(e) = store.delete_all_versions(&key).await {
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
    // Deltas older than the oldest kept backup serve no restore.
    let oldest_kept = list(store).await?.first().map(|b| b.manifest.revision);
    if let Some(oldest) = oldest_kept {
        for k in store.list(manifest::DELTAS).await? {
            if manifest::delta_span(&k).is_some_and(|(_, to)| to <= oldest) {
                store.delete(&k).await?;
            }
        }
    }
    Ok((collected, waiting))
}

/// Watches every key from `from` and flushes what changed every `every`
/// (and the agent's word on the live revision with it) until `stop`
/// resolves or the watch fails. Returns the last revision flushed.
pub async fn follow(
    store: &Store,
    client: &mut Client,
    member: &str,
    from: i64,
    every: Duration,
    stop: impl std::future::Future<Output = ()>,
    figures: Option<&super::metrics::Shared>,
) -> Result<i64> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let opts = WatchOptions::new().with_range(vec![0]).with_start_revision(from).with_progress_notify();
    let mut stream = client.watch(vec![0], Some(opts)).await.context("watching etcd for deltas")?;
    let mut pending: Vec<Txn> = Vec::new();
    let mut flushed = from.saturating_sub(1);
    let mut last_seen = flushed;
    let mut last_flush = Instant::now();
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                let rev = if let Some(t) = pending.last() { t.rev } else { last_seen.max(flushed) };
                if !pending.is_empty() {
                    let d = Delta { from: flushed.saturating_add(1), to: rev, flushed_at: Utc::now(), txns: std::mem::take(&mut pending) };
                    store.put_json(&manifest::delta_key(d.from, d.to), &d).await?;
                }
                let secs = last_flush.elapsed().as_secs_f64().max(0.001);
                let rate = (rev.saturating_sub(flushed)) as f64 / secs;
                flushed = rev;
                last_flush = Instant::now();
                store.put_json(&manifest::seen_key(member), &Seen { member: member.to_string(), revision: last_seen.max(rev), at: Utc::now(), rate }).await?;
                if let Some(f) = figures {
                    if let Ok(mut g) = f.lock() {
                        g.last_delta_flush = Utc::now().timestamp() as f64;
                    }
                }
            }
            msg = stream.message() => {
                let Some(resp) = msg.context("the delta watch")? else { bail!("the delta watch ended") };
                if resp.compact_revision() > 0 {
                    bail!("the delta watch started at revision {from}, which etcd has compacted (to {}): a full backup is needed first", resp.compact_revision());
                }
                if let Some(h) = resp.header() {
                    last_seen = last_seen.max(h.revision());
                }
                for ev in resp.events() {
                    let Some(kv) = ev.kv() else { continue };
                    let rev = kv.mod_revision();
                    let change = Change {
                        k: b64.encode(kv.key()),
                        v: (ev.event_type() == EventType::Put).then(|| b64.encode(kv.value())),
                    };
                    match pending.last_mut() {
                        Some(t) if t.rev == rev => t.ops.push(change),
                        _ => pending.push(Txn { rev, ops: vec![change] }),
                    }
                }
            }
        }
    }
    Ok(flushed)
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
    let (endpoint, mut client) = etcd.first_answering().await?;
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
    let result = async {
        client
            .lock(manifest::AGENTS_LOCK, Some(LockOptions::new().with_lease(lease)))
            .await
            .context("waiting for the agents' lock")?;
        loop {
            let m = match take(store, etcd, &endpoint, taking).await {
                Ok(m) => m,
                Err(e) => {
                    note(&|g| g.failures = g.failures.saturating_add(1));
                    return Err(e);
                }
            };
            let now = || Utc::now().timestamp() as f64;
            note(&|g| {
                g.last_backup = now();
                g.last_backup_bytes = m.size;
            });
            tracing::info!(id = %m.id, revision = m.revision, size = m.size, "etcd backup taken");
            if let Some(bins) = verify_with {
                let v = super::verify::verify(store, &m, bins, Some(etcd)).await?;
                note(&|g| {
                    g.last_verification_ok = Some(v.ok);
                    if v.ok {
                        g.last_verified = now();
                    }
                });
                tracing::info!(id = %m.id, ok = v.ok, "etcd backup verified");
            }
            // The agent's role may not delete backups (the control plane's
            // IAM policy denies it): what it cannot collect waits for the
            // operator's `pinfleet etcd gc`, and the agent goes on.
            match gc(store, spec).await {
                Ok((collected, waiting)) if !collected.is_empty() || !waiting.is_empty() => {
                    tracing::info!(?collected, ?waiting, "etcd backups collected");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("collecting old etcd backups: {e:#}"),
            }
            if once {
                return Ok(());
            }
            let member = m.member.clone();
            // The next full backup: at the interval, or as soon as a change
            // to the control plane asks for one.
            let next = async {
                tokio::select! {
                    _ = tokio::time::sleep(spec.interval.0) => {}
                    r = asked_after(store, m.taken_at, REQUEST_POLL) => {
                        tracing::info!(by = %r.by, reason = %r.reason, "an etcd backup was asked for");
                    }
                }
            };
            follow(
                store,
                &mut client,
                &member,
                m.revision.saturating_add(1),
                spec.delta_interval.0,
                next,
                figures.as_ref(),
            )
            .await?;
        }
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
    fn key_names_come_from_the_encryption_configuration() {
        let pki = crate::state::pki::Pki {
            encryption_keys: vec![
                crate::state::pki::EncryptionKey { name: "key-b".into(), secret: "Yg==".into() },
                crate::state::pki::EncryptionKey { name: "key-a".into(), secret: "YQ==".into() },
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
