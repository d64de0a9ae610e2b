//! Bringing a control plane back from one backup: every member's data
//! folder is restored from the same snapshot with a new cluster token (the
//! old one is moved aside, never deleted), the members start, the deltas
//! after the snapshot are replayed one transaction per revision (so the
//! revisions match the lost store's), the revision is bumped past any a
//! client has seen, and the store is compacted there so that every watch
//! and informer relists instead of trusting its cache. Each phase's time is
//! kept: the RTO.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use base64::Engine as _;
use etcd_client::{Client, CompactionOptions, GetOptions, Txn, TxnOp};
use futures::StreamExt as _;

use super::manifest::Delta;
use super::scratch::Binaries;

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
/// `token`): every member [`prepare`]d first (nothing live is touched
/// until all are), then each [`swap_in`]; the old contents kept aside.
pub fn restore_members(bins: &Binaries, snapshot: &Path, targets: &[Target], token: &str) -> Result<Vec<PathBuf>> {
    prepare_members(bins, snapshot, targets, token)?.swap_all()
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
/// member [`prepare`]d beside its data. On an error every prepared folder
/// is removed again and no member's data has been touched.
pub fn prepare_members(bins: &Binaries, snapshot: &Path, targets: &[Target], token: &str) -> Result<Prepared> {
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
        match prepare(bins, snapshot, t, &cluster, token, &tag) {
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
/// that folder is all a machine's agent may touch (a hostPath).
pub fn prepare(
    bins: &Binaries,
    snapshot: &Path,
    t: &Target,
    initial_cluster: &str,
    token: &str,
    tag: &str,
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
    bins.restore(snapshot, &fresh, &t.name, &t.peer_url, initial_cluster, token)?;
    Ok(fresh)
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
/// also holds), then the old timeline's agents' locks removed.
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
    // After the replay, so that its revisions are the lost store's.
    drop_old_locks(client, after).await?;
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
async fn drop_old_locks(client: &mut Client, after: i64) -> Result<()> {
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
pub async fn record_cut(store: &crate::state::Store, backup: &str, restored_to: i64, bumped_to: i64) -> Result<()> {
    let now = chrono::Utc::now();
    let cut = super::manifest::Cut { after: restored_to, before: bumped_to, at: now, backup: backup.to_string() };
    let name = format!("{}-r{restored_to}", now.format("%Y%m%dT%H%M%S%.3fZ"));
    store.put_json(&super::manifest::cut_key(&name), &cut).await.map(|_| ())
}

/// Writes a throwaway key until the revision reaches `to` (64 writes in
/// flight), removes it, and compacts there: watches from older revisions
/// are told "required revision has been compacted" and relist.
pub async fn bump_and_compact(client: &Client, to: i64) -> Result<i64> {
    const KEY: &str = "/pinfleet/restore/bump";
    let mut c = client.clone();
    let now = revision(&mut c).await?;
    let writes = to.saturating_sub(now).max(0);
    futures::stream::iter(0..writes)
        .map(|i| {
            let mut c = client.clone();
            async move { c.put(KEY, i.to_string(), None).await }
        })
        .buffer_unordered(64)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<std::result::Result<Vec<_>, _>>()
        .context("bumping the revision")?;
    c.delete(KEY, None).await.context("removing the bump's key")?;
    let rev = revision(&mut c).await?;
    c.compact(rev, Some(CompactionOptions::new().with_physical())).await.context("compacting the restored store")?;
    Ok(rev)
}
