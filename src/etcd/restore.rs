//! Bringing a control plane back from one backup: every member's data
//! folder is restored from the same snapshot with a new cluster token (the
//! old one is moved aside, never deleted), the members start, the deltas
//! after the snapshot are replayed one transaction per revision (so the
//! revisions match the lost store's), the revision is bumped past any a
//! client has seen, and the store is compacted there so that every watch
//! and informer relists instead of trusting its cache. Each phase's time is
//! kept: the RTO.
//!
//! The bump passes every revision the state store recorded of any timeline
//! (backups, deltas, the agents' word, every earlier restore's cut and
//! bump) plus the most writes the store could have taken since the newest
//! ([`policy::bump_to`]). Where the machine's `etcdutl` has `snapshot
//! restore --bump-revision --mark-compacted` (etcd 3.5.8 and later) each
//! member is restored already bumped far past that ([`etcdutl_bump`]),
//! at no cost; otherwise the bump writes a throwaway key until it gets
//! there.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use chrono::{DateTime, Utc};
use etcd_client::{Client, CompactionOptions, GetOptions, Txn, TxnOp};
use futures::TryStreamExt as _;

use super::manifest::{self, Delta, Seen};
use super::policy::{self, Record};
use super::scratch::Binaries;
use crate::state::Store;

/// One member to restore: its name, peer URL and data folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub name: String,
    pub peer_url: String,
    pub data_dir: PathBuf,
    /// The kubelet's static-pod folder on the member's machine, when the
    /// restore stops and starts etcd and the API server through it.
    pub manifests_dir: Option<PathBuf>,
}

impl std::str::FromStr for Target {
    type Err = String;
    /// `NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]`.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut it = s.splitn(4, '=');
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(n), Some(p), Some(d), m) if !n.is_empty() && p.starts_with("http") && !d.is_empty() => Ok(Target {
                name: n.to_string(),
                peer_url: p.to_string(),
                data_dir: PathBuf::from(d),
                manifests_dir: m.filter(|m| !m.is_empty()).map(PathBuf::from),
            }),
            _ => Err(format!(
                "`{s}`: expected NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR] (e.g. cp-a=https://10.0.1.10:2380=/var/lib/etcd)"
            )),
        }
    }
}

/// The phases' times, in order.
#[derive(Debug, Default, Clone)]
pub struct Phases(pub Vec<(String, Duration)>);

impl Phases {
    pub fn time<T>(&mut self, name: &str, t0: Instant, out: T) -> T {
        self.0.push((name.to_string(), t0.elapsed()));
        out
    }
    pub fn total(&self) -> Duration {
        self.0.iter().map(|(_, d)| *d).sum()
    }
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (n, d) in &self.0 {
            s.push_str(&format!("  {:>8.1}s  {n}\n", d.as_secs_f64()));
        }
        s.push_str(&format!("  {:>8.1}s  in all (the RTO)\n", self.total().as_secs_f64()));
        s
    }
}

/// `--initial-cluster` for the targets.
pub fn initial_cluster(targets: &[Target]) -> String {
    targets.iter().map(|t| format!("{}={}", t.name, t.peer_url)).collect::<Vec<_>>().join(",")
}

/// The file in a member's data folder whose lock says one process
/// restores that member at a time (an agent following orders, or
/// `etcd restore --member` run on the machine). In the folder itself, the one the addon
/// mounts from the machine (a lock in the container's own files would
/// hold nothing against another pod); the swap moves only `member` inside it.
pub fn member_lock_path(me: &Target) -> std::path::PathBuf {
    me.data_dir.join(".pinfleet-agent.lock")
}

/// Takes the member's lock (an exclusive `flock`, held while the returned
/// file is open, given back by the kernel when the process ends however it
/// ends). `Ok(None)`: another agent holds it, as when a DaemonSet's rollout
/// briefly runs two agents on one machine; two agents restoring one data
/// folder would swap it twice.
pub fn hold_member(me: &Target) -> Result<Option<std::fs::File>> {
    let path = member_lock_path(me);
    std::fs::create_dir_all(&me.data_dir).with_context(|| format!("creating {}", me.data_dir.display()))?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(f)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// Restores every target's data folder from `snapshot` (a new cluster:
/// `token`, the revision as the snapshot has it): every member
/// [`prepare`]d first (nothing live is touched until all are), then each
/// [`swap_in`]; the old contents kept aside.
pub fn restore_members(bins: &Binaries, snapshot: &Path, targets: &[Target], token: &str) -> Result<Vec<PathBuf>> {
    prepare_members(bins, snapshot, targets, token, None)?.swap_all()
}

/// Every target's member restored beside its data, each member's lock
/// held: nothing live is touched yet. Made by [`prepare_members`];
/// [`Prepared::swap_all`] swaps them in.
pub struct Prepared {
    _held: Vec<std::fs::File>,
    targets: Vec<Target>,
    fresh: Vec<PathBuf>,
}

/// The first half of [`restore_members`]: each member's lock taken and its
/// member [`prepare`]d beside its data, every one with the same
/// `etcdutl_bump` (see [`prepare`]). On an error every prepared folder is
/// removed again and no member's data has been touched.
pub fn prepare_members(
    bins: &Binaries,
    snapshot: &Path,
    targets: &[Target],
    token: &str,
    etcdutl_bump: Option<i64>,
) -> Result<Prepared> {
    if targets.is_empty() {
        bail!("no member to restore");
    }
    // One restorer per member: an agent following an order holds it.
    let mut held = Vec::new();
    for t in targets {
        match hold_member(t)? {
            Some(f) => held.push(f),
            None => bail!(
                "member {}: another process restores it now ({} is locked: an agent following a restore order?); nothing was restored",
                t.name,
                member_lock_path(t).display()
            ),
        }
    }
    let cluster = initial_cluster(targets);
    let tag = stamp();
    let mut fresh = Vec::new();
    for t in targets {
        match prepare(bins, snapshot, t, &cluster, token, &tag, etcdutl_bump) {
            Ok(f) => fresh.push(f),
            Err(e) => {
                for f in &fresh {
                    let _ = std::fs::remove_dir_all(f);
                }
                return Err(e.context(format!("member {}: nothing was restored", t.name)));
            }
        }
    }
    Ok(Prepared { _held: held, targets: targets.to_vec(), fresh })
}

impl Prepared {
    /// The second half of [`restore_members`]: each member [`swap_in`], in
    /// order; the old `member` folders kept aside (returned).
    pub fn swap_all(self) -> Result<Vec<PathBuf>> {
        let mut moved = Vec::new();
        for (t, fresh) in self.targets.iter().zip(&self.fresh) {
            moved.extend(swap_in(t, fresh)?);
            let _ = std::fs::remove_dir_all(fresh);
        }
        Ok(moved)
    }
}

fn stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%S%.3fZ").to_string()
}

/// The first, reversible step: etcdutl restores `snapshot` into a fresh
/// folder beside the data (`<data>/.pinfleet-restore-<tag>`); the live data
/// is untouched. Only the data folder itself is written, so it works where
/// that folder is all a machine's agent may touch (a hostPath). With
/// `etcdutl_bump`, etcdutl adds that much to the revision and marks it
/// compacted ([`etcdutl_bumps`] says whether this etcdutl can); every
/// member of a cluster must be restored with the same.
pub fn prepare(
    bins: &Binaries,
    snapshot: &Path,
    t: &Target,
    initial_cluster: &str,
    token: &str,
    tag: &str,
    etcdutl_bump: Option<i64>,
) -> Result<PathBuf> {
    if !t.data_dir.exists() {
        std::fs::create_dir_all(&t.data_dir).with_context(|| format!("creating {}", t.data_dir.display()))?;
    }
    // etcd refuses a data folder others may read.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&t.data_dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("making {} the owner's only", t.data_dir.display()))?;
    }
    let fresh = prepared_dir(t, tag);
    if fresh.exists() {
        std::fs::remove_dir_all(&fresh).with_context(|| format!("clearing {}", fresh.display()))?;
    }
    match etcdutl_bump {
        None => bins.restore(snapshot, &fresh, &t.name, &t.peer_url, initial_cluster, token)?,
        Some(by) => restore_bumped(bins, snapshot, &fresh, t, initial_cluster, token, by)?,
    }
    Ok(fresh)
}

/// Whether this machine's `etcdutl` can bump the revision as it restores
/// (`snapshot restore --bump-revision --mark-compacted`: etcd 3.5.8 and
/// later), as its own help says.
pub fn etcdutl_bumps(bins: &Binaries) -> bool {
    let help = std::process::Command::new(bins.bin("etcdutl")).args(["snapshot", "restore", "--help"]).output();
    help.is_ok_and(|o| {
        let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        text.contains("--bump-revision") && text.contains("--mark-compacted")
    })
}

/// [`Binaries::restore`] with the revision bumped `by` and marked
/// compacted: etcd, once started, compacts there, so a watch from any
/// revision before it is told it was compacted.
fn restore_bumped(
    bins: &Binaries,
    snapshot: &Path,
    data_dir: &Path,
    t: &Target,
    initial_cluster: &str,
    token: &str,
    by: i64,
) -> Result<()> {
    let out = std::process::Command::new(bins.bin("etcdutl"))
        .arg("snapshot")
        .arg("restore")
        .arg(snapshot)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--name", &t.name, "--initial-advertise-peer-urls", &t.peer_url])
        .args(["--initial-cluster", initial_cluster, "--initial-cluster-token", token])
        .args(["--bump-revision", &by.to_string(), "--mark-compacted"])
        .output()
        .context("running etcdutl snapshot restore")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
        bail!("etcdutl snapshot restore --bump-revision {by} of {} failed: {last}", snapshot.display());
    }
    Ok(())
}

/// Where [`prepare`] restores beside the data.
pub fn prepared_dir(t: &Target, tag: &str) -> PathBuf {
    t.data_dir.join(format!(".pinfleet-restore-{tag}"))
}

/// How [`swap_in`] names an old `member` folder it keeps (then its time).
const KEPT: &str = "member.before-restore-";

/// Every old `member` folder [`swap_in`] kept in `data_dir`, oldest first.
pub fn kept_in(data_dir: &Path) -> Vec<PathBuf> {
    let mut kept: Vec<PathBuf> = std::fs::read_dir(data_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(KEPT))
        .map(|e| e.path())
        .collect();
    kept.sort();
    kept
}

/// The most recent old `member` folder [`swap_in`] kept, if any.
pub fn kept_before(t: &Target) -> Option<PathBuf> {
    kept_in(&t.data_dir).pop()
}

/// The second step: the old `member` folder is moved to
/// `<data>/member.before-restore-<time>` (never deleted) and the prepared
/// one takes its place. If the second rename fails, the first is undone.
/// The emptied prepared folder is left for the caller to remove (its
/// presence without `member` says the swap happened).
pub fn swap_in(t: &Target, fresh: &Path) -> Result<Option<PathBuf>> {
    let member = t.data_dir.join("member");
    let aside = t.data_dir.join(format!("{KEPT}{}", stamp()));
    let kept = if member.exists() {
        std::fs::rename(&member, &aside)
            .with_context(|| format!("moving {} aside to {}", member.display(), aside.display()))?;
        Some(aside)
    } else {
        None
    };
    super::failpoint("restore:between-renames");
    if let Err(e) = std::fs::rename(fresh.join("member"), &member) {
        if let Some(k) = &kept {
            let _ = std::fs::rename(k, &member);
        }
        return Err(anyhow::Error::new(e).context(format!("moving the restored data into {}", member.display())));
    }
    Ok(kept)
}

/// etcd's and the API server's static-pod manifests: moved out of the
/// kubelet's folder, the kubelet stops them; moved back, it starts them.
pub const ETCD_POD: &str = "etcd.yaml";
pub const API_SERVER_POD: &str = "kube-apiserver.yaml";
const STATIC_PODS: [&str; 2] = [ETCD_POD, API_SERVER_POD];

/// Moves etcd's and the API server's static-pod manifests out of the
/// kubelet's sight into `<dir>/.pinfleet-restore/<member>` (the kubelet
/// reads neither hidden entries nor subfolders; the folder stays inside
/// `dir`, so an agent with only that folder mounted can do it).
pub fn stop_static_pods(dir: &Path, member: &str) -> Result<()> {
    let aside = set_aside(dir, member);
    std::fs::create_dir_all(&aside)?;
    for f in STATIC_PODS {
        let from = dir.join(f);
        if from.exists() {
            std::fs::rename(&from, aside.join(f)).with_context(|| format!("moving {} aside", from.display()))?;
        }
    }
    Ok(())
}

/// Where [`stop_static_pods`] sets a member's manifests aside.
pub fn set_aside(dir: &Path, member: &str) -> PathBuf {
    dir.join(".pinfleet-restore").join(member)
}

/// Moves both manifests [`stop_static_pods`] set aside back.
pub fn start_static_pods(dir: &Path, member: &str) -> Result<()> {
    for f in STATIC_PODS {
        start_static_pod(dir, member, f)?;
    }
    Ok(())
}

/// Moves one manifest [`stop_static_pods`] set aside back (etcd first; the
/// API server only once the store is whole, bumped and compacted, so that
/// it never serves, nor writes into, a store still being restored).
pub fn start_static_pod(dir: &Path, member: &str, file: &str) -> Result<()> {
    let from = set_aside(dir, member).join(file);
    if from.exists() {
        std::fs::rename(&from, dir.join(file)).with_context(|| format!("moving {} back", dir.join(file).display()))?;
    }
    Ok(())
}

/// The store's current revision.
pub async fn revision(client: &mut Client) -> Result<i64> {
    let r = client.get(vec![0], Some(GetOptions::new().with_range(vec![0]).with_count_only())).await?;
    Ok(r.header().map(|h| h.revision()).unwrap_or_default())
}

/// Replays the deltas' transactions after revision `after` (the
/// snapshot's: what it already holds), one transaction per revision, up to
/// revision `until` if given (a point in time before a mistake the deltas
/// also holds). The old timeline's agents' locks are left for
/// [`release_old_locks`], once the store is whole (bumped, compacted): the
/// agents' first backup of the restored store is then of all of it.
pub async fn replay(client: &mut Client, deltas: &[Delta], after: i64, until: Option<i64>) -> Result<Replayed> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut rev = revision(client).await?;
    let mut applied = 0usize;
    let mut reached = after;
    'replay: for d in deltas {
        for t in &d.txns {
            if t.rev <= after {
                continue;
            }
            if until.is_some_and(|u| t.rev > u) {
                break 'replay;
            }
            let mut ops = Vec::with_capacity(t.ops.len());
            for c in &t.ops {
                let k = b64.decode(&c.k).context("a delta's key is not base64")?;
                ops.push(match &c.v {
                    Some(v) => TxnOp::put(k, b64.decode(v).context("a delta's value is not base64")?, None),
                    None => TxnOp::delete(k, None),
                });
            }
            let resp =
                client.txn(Txn::new().and_then(ops)).await.with_context(|| format!("replaying revision {}", t.rev))?;
            rev = resp.header().map(|h| h.revision()).unwrap_or(rev);
            applied = applied.saturating_add(1);
            reached = t.rev;
        }
    }
    Ok(Replayed { revision: rev, applied, reached })
}

/// What a replay did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    /// The restored store's revision after it.
    pub revision: i64,
    /// Transactions applied.
    pub applied: usize,
    /// The lost store's revision it brought the store back to (the last
    /// transaction replayed, or the snapshot's): where a cut begins, even
    /// when a replay was run twice or other writes came between.
    pub reached: i64,
}

/// Removes the agents' lock keys of the old timeline: those the snapshot
/// held (created at or before `after`) and those the deltas replayed
/// (without a lease). Their holders are gone; left, they would hold every
/// agent off until the old lease ran out, or for ever. A key a live agent
/// took in the restored store (created later, with its lease) stays.
pub async fn release_old_locks(client: &mut Client, after: i64) -> Result<()> {
    let prefix = format!("{}/", super::manifest::AGENTS_LOCK);
    let held = client
        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
        .await
        .context("reading the agents' lock keys")?;
    for kv in held.kvs().iter().filter(|kv| kv.create_revision() <= after || kv.lease() == 0) {
        client.delete(kv.key(), None).await.context("removing the old timeline's agents' lock")?;
    }
    Ok(())
}

/// Records that the old timeline's revisions after `restored_to` (the
/// revision the restore replayed to) and before `bumped_to` are abandoned:
/// no later restore replays them (the mistake a `--until` stopped short of
/// stays undone).
pub async fn record_cut(store: &Store, backup: &str, restored_to: i64, bumped_to: i64) -> Result<()> {
    let now = Utc::now();
    let cut = manifest::Cut { after: restored_to, before: bumped_to, at: now, backup: backup.to_string() };
    let name = format!("{}-r{restored_to}", now.format("%Y%m%dT%H%M%S%.3fZ"));
    // Locked as the backup is: deleting a cut would let a later restore
    // replay the mistake it skipped.
    let lock = store.retention_of(&manifest::snapshot_key(backup)).await.ok().flatten().filter(|r| r.until > now);
    store.put_json_locked(&manifest::cut_key(&name), &cut, lock.as_ref()).await
}

/// Writes a throwaway key until the revision reaches `to` (64 writes in
/// flight; once at least, so that the store is past any revision etcdutl
/// marked compacted), removes it, and compacts there: watches from older
/// revisions are told "required revision has been compacted" and relist.
/// The revision it compacted at.
pub async fn bump_and_compact(client: &Client, to: i64) -> Result<i64> {
    const KEY: &str = "/pinfleet/restore/bump";
    let mut c = client.clone();
    let now = revision(&mut c).await?;
    let writes = to.saturating_sub(now).max(1);
    // Not collected: a bump of millions of writes holds none of them. Each
    // write keeps its old value until a compaction: compacted every
    // COMPACT_EVERY writes, a long bump never fills the store's quota
    // (its space is reused; the last compaction defragments).
    const COMPACT_EVERY: i64 = 100_000;
    let mut done = 0;
    while done < writes {
        let batch = (writes - done).min(COMPACT_EVERY);
        futures::stream::iter((done..done + batch).map(Ok::<i64, anyhow::Error>))
            .try_for_each_concurrent(64, |i| {
                let mut c = client.clone();
                async move {
                    c.put(KEY, i.to_string(), None).await.context("bumping the revision")?;
                    Ok::<(), anyhow::Error>(())
                }
            })
            .await?;
        done += batch;
        if done < writes {
            let rev = revision(&mut c).await?;
            c.compact(rev, None).await.context("compacting during the bump")?;
        }
    }
    c.delete(KEY, None).await.context("removing the bump's key")?;
    let rev = revision(&mut c).await?;
    c.compact(rev, Some(CompactionOptions::new().with_physical())).await.context("compacting the restored store")?;
    Ok(rev)
}

/// The lost store as a restore found it when it began: what its bump is
/// reckoned from, besides the records the state store holds.
#[derive(Debug, Clone)]
pub struct Lost {
    /// The backup restored.
    pub backup: String,
    /// The revision its snapshot holds.
    pub snapshot: i64,
    /// The agents' word with the highest revision, read when the restore
    /// began (the agents may write over it once the restored store runs).
    pub seen: Option<Seen>,
    /// When the restore began (a record made later may be the restored
    /// store's own).
    pub began: DateTime<Utc>,
    /// The agents' delta interval.
    pub delta_interval: Duration,
    /// When this restore saw every member of the lost store stopped (its
    /// peer port refusing connections): the lost store took no write
    /// after, so the writes it may have taken unrecorded are reckoned up
    /// to then, not to the bump's own moment. `None`: not seen (reckoned
    /// to the bump).
    pub stopped: Option<DateTime<Utc>>,
}

/// Every revision the state store recorded of any timeline: `seen` (the
/// agents' word as read when the restore began), each backup, the newest
/// deltas (read from the highest down to the first flushed before
/// `began`), and every earlier restore's cut and bump.
pub async fn records(store: &Store, seen: Option<&Seen>, began: DateTime<Utc>) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    if let Some(s) = seen {
        out.push(Record { revision: s.revision, at: s.at, what: format!("the agent on {}", s.member) });
    }
    // The manifest's revision, not the verdict's: a verdict written while
    // the members read the records would make them reckon apart.
    for b in super::agent::list(store).await? {
        let what = format!("backup {}", b.manifest.id);
        out.push(Record { revision: b.manifest.revision, at: b.manifest.taken_at, what });
    }
    // A delta's key says how far it reaches; when it was flushed is inside.
    let mut deltas: Vec<(i64, String)> = store
        .list_kept(manifest::DELTAS)
        .await?
        .into_iter()
        .filter_map(|k| manifest::delta_span(&k).map(|(_, to)| (to, k)))
        .collect();
    deltas.sort_by(|a, b| b.0.cmp(&a.0));
    for (_, k) in deltas {
        let Some(d) = store.get_json_kept::<Delta>(&k).await? else { continue };
        out.push(Record { revision: d.to, at: d.flushed_at, what: "a delta".to_string() });
        if d.flushed_at < began {
            break;
        }
    }
    for k in store.list_kept(manifest::CUTS).await? {
        if let Some(c) = store.get_json_kept::<manifest::Cut>(&k).await? {
            let what = format!("the cut of the restore from {}", c.backup);
            out.push(Record { revision: c.before, at: c.at, what });
        }
    }
    for k in store.list_kept(manifest::BUMPS).await? {
        if let Some(b) = store.get_json_kept::<manifest::Bumped>(&k).await? {
            let what = format!("the bump of the restore from {}", b.backup);
            out.push(Record { revision: b.revision, at: b.at, what });
        }
    }
    Ok(out)
}

/// What etcdutl's `--bump-revision` adds as it restores each member
/// ([`policy::etcdutl_bump`], reckoned as of `lost.began`, so that every
/// machine restoring a member of the same restore reckons the same), or
/// None where this machine's etcdutl cannot ([`etcdutl_bumps`]).
pub async fn etcdutl_bump(store: &Store, bins: &Binaries, lost: &Lost) -> Result<Option<policy::EtcdutlBump>> {
    if !etcdutl_bumps(bins) {
        return Ok(None);
    }
    let records = records(store, lost.seen.as_ref(), lost.began).await?;
    let ceiling = policy::write_ceiling(lost.seen.as_ref());
    Ok(Some(policy::etcdutl_bump(lost.snapshot, &records, lost.began, ceiling, lost.began)))
}

/// The bump, once the deltas are replayed: every record read back, the
/// revision decided ([`policy::bump_to`]; `etcdutl` is what etcdutl's
/// `--bump-revision` added as it restored the members, 0 if nothing), the
/// cut recorded (first: a restore that dies in the bump has recorded it),
/// the throwaway key written up to it, the store compacted there, and the
/// bump recorded ([`manifest::Bumped`], returned: its size, time and why).
pub async fn bump_past_records(
    store: &Store,
    client: &Client,
    lost: &Lost,
    replayed: Replayed,
    etcdutl: i64,
) -> Result<manifest::Bumped> {
    let t = Instant::now();
    let records = records(store, lost.seen.as_ref(), lost.began).await?;
    let now = Utc::now();
    let until = lost.stopped.map_or(now, |s| s.min(now));
    let mut bump = policy::bump_to(
        &policy::Bumping {
            current: replayed.revision,
            etcdutl,
            records: &records,
            seen: lost.seen.as_ref(),
            delta_interval: lost.delta_interval,
            began: lost.began,
            ceiling: policy::write_ceiling(lost.seen.as_ref()),
        },
        until,
    );
    if until < now {
        bump.why.push_str(&format!(
            " (reckoned to {}, when this restore saw every member of the lost store stopped: it took no write after)",
            until.format("%H:%M:%S%.3fZ")
        ));
    }
    record_cut(store, &lost.backup, replayed.reached, bump.to).await?;
    let from = revision(&mut client.clone()).await?;
    let compacted = bump_and_compact(client, bump.to).await?;
    let at = Utc::now();
    let bumped = manifest::Bumped {
        backup: lost.backup.clone(),
        at,
        revision: compacted,
        from,
        etcdutl,
        writes: bump.to.saturating_sub(from).max(1),
        seconds: t.elapsed().as_secs_f64(),
        why: bump.why,
    };
    let name = format!("{}-r{compacted}", at.format("%Y%m%dT%H%M%S%.3fZ"));
    store.put_json(&manifest::bump_key(&name), &bumped).await?;
    Ok(bumped)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    /// A stand-in `etcdutl` in `dir`: prints `help` when asked for help;
    /// otherwise writes its arguments, one a line, to `dir/args` and makes
    /// the member folder it was asked to restore into.
    fn fake_etcdutl(dir: &Path, help: &str) -> Binaries {
        use std::os::unix::fs::PermissionsExt as _;
        let script = format!(
            "#!/bin/sh\n\
             for a in \"$@\"; do [ \"$a\" = --help ] && {{ printf '%s\\n' '{help}'; exit 0; }}; done\n\
             printf '%s\\n' \"$@\" > '{args}'\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --data-dir ] && mkdir -p \"$2/member\"; shift; done\n\
             exit 0\n",
            args = dir.join("args").display()
        );
        let bin = dir.join("etcdutl");
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        Binaries { dir: Some(dir.to_path_buf()) }
    }

    #[test]
    fn etcdutl_bumps_where_its_help_says_so_and_marks_the_bump_compacted() {
        let (old_dir, new_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // etcd 3.5.1's etcdutl, and 3.5.8's.
        let old = fake_etcdutl(old_dir.path(), "      --data-dir string   Path to the data directory");
        let new = fake_etcdutl(
            new_dir.path(),
            "      --bump-revision uint   How much to increase the latest revision after restore\n      --mark-compacted       Mark the latest revision after restore as the point of scheduled compaction",
        );
        assert!(!etcdutl_bumps(&old));
        assert!(etcdutl_bumps(&new));
        assert!(!etcdutl_bumps(&Binaries { dir: Some(old_dir.path().join("nowhere")) }), "no etcdutl, no bump");

        let t = Target {
            name: "cp-a".into(),
            peer_url: "http://127.0.0.1:2380".into(),
            data_dir: new_dir.path().join("data"),
            manifests_dir: None,
        };
        let cluster = "cp-a=http://127.0.0.1:2380";
        let fresh = prepare(&new, Path::new("snap.db"), &t, cluster, "tok", "x", Some(1_000_000_007)).unwrap();
        assert!(fresh.join("member").is_dir());
        let args = std::fs::read_to_string(new_dir.path().join("args")).unwrap();
        assert!(args.contains("--bump-revision\n1000000007\n--mark-compacted\n"), "{args}");
        assert!(args.contains("--name\ncp-a\n") && args.contains("--initial-cluster-token\ntok\n"), "{args}");
        // Without a bump, as the snapshot has it.
        prepare(&new, Path::new("snap.db"), &t, cluster, "tok", "y", None).unwrap();
        let args = std::fs::read_to_string(new_dir.path().join("args")).unwrap();
        assert!(args.contains("--initial-cluster-token\ntok\n") && !args.contains("--bump-revision"), "{args}");
    }
}
