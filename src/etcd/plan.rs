//! A restore of members whose data folders are on this machine (`pinfleet
//! etcd restore --member NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]`) as a plan:
//! every check that can refuse comes first and touches no machine's
//! folder; then the phases that do, in order.
//!
//! Where it sits: the command reads its flags into a [`Request`] and calls
//! [`check`]. Only [`check`] makes a [`Checked`] (its fields are private),
//! and only a [`Checked`] can be carried out, so no phase can run before
//! every check passed: the order is the types', not the command's. The
//! command prints [`Checked::phases`] (the plan as data) and runs
//! [`Checked::carry_out`], which runs those same phases. [`choose`] is
//! the part every restore checks, here or through the agents
//! ([`super::order`]).
//!
//! ```text
//! Request ──▶ choose: the backup picked, its cluster, its verdict, the
//!             encryption keys the PKI holds, --until, the deltas, what is lost
//!         ──▶ check: the members' folders, no other restorer, the live store,
//!             etcd's binaries, the snapshot downloaded and its checksum
//!         ──▶ Checked (no machine touched) ──▶ phases(): printed
//!         ──▶ carry_out: static pods out ──▶ folders restored (old data kept)
//!             ──▶ etcd started, members answer ──▶ deltas replayed
//!             ──▶ cut recorded, revision bumped, compacted ──▶ API servers started
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};
use etcd_client::Client;

use super::agent;
use super::conn::EtcdArgs;
use super::manifest::{self, Backup, Delta, Seen};
use super::policy;
use super::restore::{self, Phases, Replayed, Target};
use super::scratch::Binaries;
use crate::state::Store;

/// What every refusal before the first change says.
const UNTOUCHED: &str = "nothing was restored and no machine was touched";

/// The backup `id`, or without one the newest verified (else the newest).
pub fn pick<'a>(list: &'a [Backup], id: Option<&str>, cluster: &str) -> Result<&'a Backup> {
    match id {
        Some(id) => list
            .iter()
            .find(|b| b.manifest.id == id)
            .with_context(|| format!("no backup {id} of {cluster} (`pinfleet etcd backups {cluster}` lists them)")),
        // The newest verified, else the newest the agents wrote: a backup
        // whose manifest is lost is restored only when named (nothing
        // attests its bytes are this cluster's own).
        None => list.iter().rev().find(|b| b.verified()).or(list.iter().rev().find(|b| b.recovered.is_none())).with_context(
            || match list.last() {
                Some(b) => format!(
                    "{cluster} has no etcd backup but {} whose manifest is lost ({}): name one with --backup (and --force)",
                    list.len(),
                    b.manifest.id
                ),
                None => format!("{cluster} has no etcd backup"),
            },
        ),
    }
}

/// A restore as asked for, here or through the agents.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub store: &'a Store,
    pub cluster: &'a str,
    /// The backup (default: the newest verified).
    pub backup: Option<&'a str>,
    /// Replay the deltas only up to this revision.
    pub until: Option<i64>,
    /// Replay no delta.
    pub no_deltas: bool,
    /// Restore from an unverified or failed backup, and over a live store.
    pub force: bool,
}

/// What a restore here adds to a [`Request`]: the members on this machine.
#[derive(Debug)]
pub struct Here<'a> {
    pub members: Vec<Target>,
    /// Where the restored members answer.
    pub etcd: &'a EtcdArgs,
    /// Leave the revision as the backup has it.
    pub no_bump: bool,
    /// How long the restored members have to answer.
    pub start_timeout: Duration,
    /// The agents' delta interval (it sizes the bump).
    pub delta_interval: Duration,
}

/// The backup a restore comes from, and what goes with it, checked: made
/// by [`choose`] only.
#[derive(Debug, Clone)]
pub struct Chosen {
    backup: Backup,
    /// The deltas after it (up to `--until`).
    deltas: Vec<Delta>,
    /// The agents' word with the highest revision (what a bump passes).
    seen: Option<Seen>,
    /// The agents' most recent word (whether the store is up now).
    seen_lately: Option<Seen>,
    /// What the checks let through and the operator should know.
    notes: Vec<String>,
    loss: String,
    at: DateTime<Utc>,
}

impl Chosen {
    pub fn backup(&self) -> &Backup {
        &self.backup
    }
    pub fn seen(&self) -> Option<&Seen> {
        self.seen.as_ref()
    }
    pub fn seen_lately(&self) -> Option<&Seen> {
        self.seen_lately.as_ref()
    }
    /// What the checks let through (`--force`), one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
    /// What the restore will lose, in words.
    pub fn loss(&self) -> &str {
        &self.loss
    }
    /// When it was chosen.
    pub fn at(&self) -> DateTime<Utc> {
        self.at
    }
}

/// The checks every restore makes, here or through the agents, in the
/// state store alone: the backup, its cluster, its verdict (unless
/// `force`), the encryption keys its Secrets need, `--until`, the deltas.
pub async fn choose(req: &Request<'_>) -> Result<Chosen> {
    let list = agent::list(req.store).await?;
    let b = pick(&list, req.backup, req.cluster)?.clone();
    if b.manifest.cluster != req.cluster {
        bail!(
            "backup {} is of cluster {}, not {}: refusing to restore another cluster's data",
            b.manifest.id,
            b.manifest.cluster,
            req.cluster
        );
    }
    let mut notes = Vec::new();
    match &b.verdict {
        _ if b.recovered.is_some() && !req.force => bail!(
            "backup {}'s manifest is lost (its facts were read from the snapshot: nothing attests it is the one taken): refusing without --force",
            b.manifest.id
        ),
        _ if b.recovered.is_some() => {
            notes.push("restoring a backup whose manifest is lost (--force)".to_string())
        }
        Some(v) if v.ok => {}
        Some(v) if !req.force => bail!(
            "backup {} failed its verification ({}): refusing without --force",
            b.manifest.id,
            v.problems.join("; ")
        ),
        None if !req.force => bail!(
            "backup {} is not verified (`pinfleet etcd verify {} --backup {}`): refusing without --force",
            b.manifest.id,
            req.cluster,
            b.manifest.id
        ),
        _ => notes.push("restoring from an unverified backup (--force)".to_string()),
    }
    keys_held(req.store, &b).await?;
    if let Some(u) = req.until.filter(|u| *u < b.restored_revision()) {
        bail!(
            "--until {u} is before backup {} (revision {}): pick an older backup (`pinfleet etcd backups {}`)",
            b.manifest.id,
            b.restored_revision(),
            req.cluster
        );
    }
    let mut deltas = if req.no_deltas {
        Vec::new()
    } else {
        let locked = b.manifest.retain_until.is_some();
        let (deltas, left_out) =
            agent::deltas_to_replay(req.store, &b.manifest.id, b.manifest.revision, locked).await?;
        notes.extend(left_out);
        deltas
    };
    if let Some(u) = req.until {
        deltas.retain(|d| d.from <= u);
    }
    let delta_to = deltas.last().map(|d| req.until.map_or(d.to, |u| d.to.min(u)));
    let all_seen = agent::seen_all(req.store).await?;
    let seen = all_seen.iter().max_by_key(|s| s.revision).cloned();
    let seen_lately = all_seen.iter().max_by_key(|s| s.at).cloned();
    let at = Utc::now();
    let loss = policy::loss(&b, delta_to, seen.as_ref(), at);
    Ok(Chosen { backup: b, deltas, seen, seen_lately, notes, loss, at })
}

/// Every encryption key the backup's Secrets were written under is one
/// the cluster's PKI still holds.
async fn keys_held(store: &Store, b: &Backup) -> Result<()> {
    if b.manifest.encryption_keys.is_empty() {
        return Ok(());
    }
    let have = crate::state::pki::Pki::load_kept(store).await?.map(|p| p.encryption_key_names()).unwrap_or_default();
    for k in &b.manifest.encryption_keys {
        if !have.contains(k) {
            bail!(
                "backup {} was written under encryption key {k}, which the cluster's PKI no longer holds: its Secrets could not be read. Nothing was restored",
                b.manifest.id
            );
        }
    }
    Ok(())
}

/// Every check of a restore here, in order, touching no machine's folder:
/// [`choose`]'s, then the members' folders, that no other process
/// restores them, the live store (unless `force`), etcd's binaries, and
/// the snapshot downloaded (into a temporary file) and its checksum.
pub async fn check(req: &Request<'_>, here: Here<'_>) -> Result<Checked> {
    let t = Instant::now();
    let mut chosen = choose(req).await?;
    if let Ok((endpoint, _)) = here.etcd.first_answering().await {
        if !req.force {
            bail!("etcd answers healthy at {endpoint}: refusing to restore over a live store without --force");
        }
        chosen.notes.push(format!("etcd answers at {endpoint}; restoring anyway (--force)"));
    }
    members_usable(&here.members)?;
    let bins = Binaries::find().context("restoring needs etcd's binaries (etcdutl) in PINFLEET_ETCD_DIR or on PATH")?;
    // What the lost timeline may have reached, read before anything moves:
    // the bump passes it (by etcdutl's own bump where it has one).
    let lost = restore::Lost {
        backup: chosen.backup.manifest.id.clone(),
        snapshot: chosen.backup.restored_revision(),
        seen: chosen.seen.clone(),
        began: chosen.at,
        delta_interval: here.delta_interval,
        // Every member without a static-pod folder was just found stopped;
        // the others are seen stopping below ([`Phase::StopStaticPods`]).
        stopped: here.members.iter().all(|m| m.manifests_dir.is_none()).then(Utc::now),
    };
    let etcdutl = if here.no_bump { None } else { restore::etcdutl_bump(req.store, &bins, &lost).await? };
    if let Some(e) = &etcdutl {
        chosen.notes.push(format!("etcdutl bumps each member's revision by {} as it restores: {}", e.amount, e.why));
    }
    let mut times = Phases::default();
    times.time("checks", t, ());
    let t = Instant::now();
    let snapshot = download_checked(req.store, &chosen.backup).await?;
    times.time("snapshot downloaded and checked", t, ());
    Ok(Checked {
        store: req.store.clone(),
        token: format!("{}-restore-{}", req.cluster, chosen.at.format("%Y%m%d%H%M%S")),
        chosen,
        members: here.members,
        etcd: here.etcd.clone(),
        bins,
        snapshot,
        until: req.until,
        no_bump: here.no_bump,
        start_timeout: here.start_timeout,
        lost,
        etcdutl,
        times,
    })
}

/// Each member named once, with a folder of its own that can be restored
/// into, and a static-pod folder (when given) that runs its etcd.
fn members_usable(members: &[Target]) -> Result<()> {
    if members.is_empty() {
        bail!("no member to restore");
    }
    let mut names = BTreeSet::new();
    let mut dirs = BTreeSet::new();
    for m in members {
        if !names.insert(m.name.as_str()) {
            bail!("member {} is named twice: {UNTOUCHED}", m.name);
        }
        if !dirs.insert(m.data_dir.as_path()) {
            bail!("two members share the data folder {}: {UNTOUCHED}", m.data_dir.display());
        }
        folders_usable(m)?;
        not_held(m)?;
        // A member the restore cannot stop (no static-pod folder) must be
        // stopped already: its data is never swapped under a running etcd.
        if m.manifests_dir.is_none() && peer_listening(&m.peer_url) {
            bail!(
                "member {}: an etcd still listens at {}: stop it first, or give its static-pod folder (NAME=PEER_URL=DATA_DIR=MANIFESTS_DIR) so the restore stops it: {UNTOUCHED}",
                m.name,
                m.peer_url
            );
        }
    }
    Ok(())
}

/// Whether something listens at a member's peer URL (its etcd still runs).
fn peer_listening(peer_url: &str) -> bool {
    let Ok(u) = url::Url::parse(peer_url) else { return false };
    let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) else { return false };
    let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) else { return false };
    addrs.any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok())
}

/// The data folder is a folder, or its parent is (the restore makes it);
/// the static-pod folder holds etcd's manifest (or holds it set aside by
/// an earlier restore that stopped part-way).
fn folders_usable(m: &Target) -> Result<()> {
    let d = &m.data_dir;
    if d.exists() && !d.is_dir() {
        bail!("member {}: {} is not a folder: {UNTOUCHED}", m.name, d.display());
    }
    if !d.exists() {
        let parent = d.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        if !parent.is_dir() {
            bail!("member {}: {} does not exist (is DATA_DIR right?): {UNTOUCHED}", m.name, parent.display());
        }
    }
    let Some(dir) = &m.manifests_dir else { return Ok(()) };
    if !dir.is_dir() {
        bail!("member {}: the static-pod folder {} does not exist: {UNTOUCHED}", m.name, dir.display());
    }
    let set_aside = restore::set_aside(dir, &m.name).join(restore::ETCD_POD);
    if !dir.join(restore::ETCD_POD).is_file() && !set_aside.is_file() {
        bail!(
            "member {}: {} holds no {} (is MANIFESTS_DIR the kubelet's static-pod folder?): {UNTOUCHED}",
            m.name,
            dir.display(),
            restore::ETCD_POD
        );
    }
    Ok(())
}

/// No other process holds the member's lock (an agent following restore
/// orders holds it while it runs). Only looked at: a lock file not there
/// yet is not made here (the restore takes the lock when it restores).
fn not_held(m: &Target) -> Result<()> {
    let path = restore::member_lock_path(m);
    let Ok(f) = std::fs::File::open(&path) else { return Ok(()) };
    match f.try_lock() {
        // Given back as `f` is closed.
        Ok(()) => Ok(()),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "member {}: another process restores it now ({} is locked: an agent following a restore order?); {UNTOUCHED}",
            m.name,
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).with_context(|| format!("locking {}", path.display())),
    }
}

/// A downloaded snapshot: a temporary file, removed when dropped.
#[derive(Debug)]
struct Downloaded(PathBuf);

impl Drop for Downloaded {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The backup's snapshot in a temporary file, its checksum checked (etcd's
/// trailer, and the sha256 the manifest recorded).
async fn download_checked(store: &Store, b: &Backup) -> Result<Downloaded> {
    let name = format!("pinfleet-restore-{}-{}.db", std::process::id(), rand::random::<u32>());
    let file = Downloaded(std::env::temp_dir().join(name));
    store.download(&manifest::snapshot_key(&b.manifest.id), &file.0).await?;
    let (held, sha) = super::snapshot::trailer_holds(&file.0)?;
    if !held || sha != b.manifest.sha256 {
        bail!("the stored snapshot of {} does not match its checksum: {UNTOUCHED}", b.manifest.id);
    }
    Ok(file)
}

/// One phase of a restore here, in the order [`Checked::phases`] gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// etcd's and the API server's static pods moved out of the kubelet's
    /// folder, on these members.
    StopStaticPods(Vec<String>),
    /// Every member's data folder restored from the snapshot, a new
    /// cluster (`token`); the old data kept beside it.
    RestoreFolders { members: Vec<String>, token: String },
    /// etcd's static pod moved back (on the members that have one), then
    /// the members awaited at `endpoints`.
    StartEtcd { static_pods: Vec<String>, endpoints: Vec<String>, within: Duration },
    /// The deltas after revision `after` replayed, one transaction per
    /// revision (up to `until`).
    ReplayDeltas { txns: usize, after: i64, until: Option<i64> },
    /// The abandoned revisions recorded, the revision bumped past any a
    /// client has seen, and the store compacted there.
    BumpAndCompact,
    /// The API server's static pod moved back, on these members.
    StartApiServers(Vec<String>),
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Phase::StopStaticPods(on) => write!(
                f,
                "stop etcd and the API server on {} (their static pods moved out of the kubelet's folder)",
                on.join(", ")
            ),
            Phase::RestoreFolders { members, token } => write!(
                f,
                "restore the data folder of {} from the snapshot (cluster token {token}); the old data kept beside it",
                members.join(", ")
            ),
            Phase::StartEtcd { static_pods, endpoints, within } => {
                if static_pods.is_empty() {
                    f.write_str("start the members (no static-pod folder was given), and ")?;
                } else {
                    write!(f, "start etcd on {} (its static pod moved back), and ", static_pods.join(", "))?;
                }
                let within = humantime::format_duration(*within);
                write!(f, "wait up to {within} for the members to answer at {}", endpoints.join(","))
            }
            Phase::ReplayDeltas { txns, after, until } => {
                write!(f, "replay {txns} transaction(s) of deltas after revision {after}")?;
                match until {
                    Some(u) => write!(f, ", up to revision {u} (--until)"),
                    None => Ok(()),
                }
            }
            Phase::BumpAndCompact => f.write_str(
                "record the abandoned revisions, bump the revision past any a client has seen and compact there (watches relist)",
            ),
            Phase::StartApiServers(on) => {
                write!(f, "start the API server on {} (its static pod moved back)", on.join(", "))
            }
        }
    }
}

/// Said while a restore is carried out.
#[derive(Debug)]
pub enum Progress<'a> {
    /// A phase is done: what it did, and its time.
    Done(&'a str, Duration),
    /// A member's old data folder, kept aside.
    Kept(&'a Path),
    /// etcd is started (where a static-pod folder was given): the members
    /// are awaited at these endpoints.
    Awaiting(&'a [String]),
}

/// What a restore did.
#[derive(Debug)]
pub struct Outcome {
    /// The backup it came from.
    pub backup: String,
    /// Each phase's time, the checks' first: the RTO.
    pub phases: Phases,
}

/// A restore here whose every check passed, the snapshot downloaded and
/// checked: no machine touched yet. Made by [`check`] only.
#[derive(Debug)]
pub struct Checked {
    store: Store,
    chosen: Chosen,
    members: Vec<Target>,
    etcd: EtcdArgs,
    bins: Binaries,
    snapshot: Downloaded,
    token: String,
    until: Option<i64>,
    no_bump: bool,
    start_timeout: Duration,
    /// What the lost timeline may have reached (the bump passes it).
    lost: restore::Lost,
    /// etcdutl's own bump, where the cluster's etcdutl has one.
    etcdutl: Option<policy::EtcdutlBump>,
    /// The checks' times.
    times: Phases,
}

/// How far a restore got, for the phases after.
#[derive(Default)]
struct Underway {
    /// Some member's data swapped in (no way back to the old data by
    /// putting the manifests back).
    swapping: bool,
    client: Option<Client>,
    replayed: Option<Replayed>,
    /// When no member's etcd listened any more.
    stopped: Option<DateTime<Utc>>,
}

impl Checked {
    pub fn chosen(&self) -> &Chosen {
        &self.chosen
    }

    /// The plan: the phases [`Checked::carry_out`] runs, in order.
    pub fn phases(&self) -> Vec<Phase> {
        let pods: Vec<String> = self.with_pods().map(|(m, _)| m.name.clone()).collect();
        let mut plan = Vec::new();
        if !pods.is_empty() {
            plan.push(Phase::StopStaticPods(pods.clone()));
        }
        let members = self.members.iter().map(|m| m.name.clone()).collect();
        plan.push(Phase::RestoreFolders { members, token: self.token.clone() });
        let endpoints = self.etcd.endpoints.clone();
        plan.push(Phase::StartEtcd { static_pods: pods.clone(), endpoints, within: self.start_timeout });
        let after = self.chosen.backup.restored_revision();
        let txns = self
            .chosen
            .deltas
            .iter()
            .flat_map(|d| &d.txns)
            .filter(|t| t.rev > after && self.until.is_none_or(|u| t.rev <= u))
            .count();
        plan.push(Phase::ReplayDeltas { txns, after, until: self.until });
        if !self.no_bump {
            plan.push(Phase::BumpAndCompact);
        }
        if !pods.is_empty() {
            plan.push(Phase::StartApiServers(pods));
        }
        plan
    }

    /// Runs [`Checked::phases`] in order, each reported through `on`. A
    /// phase that fails says what state the machines are left in.
    pub async fn carry_out(self, on: &mut dyn FnMut(Progress<'_>)) -> Result<Outcome> {
        let mut phases = self.times.clone();
        let mut u = Underway::default();
        for phase in self.phases() {
            let t = Instant::now();
            let done = match self.step(&phase, &mut u, on).await {
                Ok(done) => done,
                Err(e) => return Err(e.context(self.failed(&phase, &u))),
            };
            on(Progress::Done(&done, t.elapsed()));
            phases.time(&done, t, ());
        }
        Ok(Outcome { backup: self.chosen.backup.manifest.id.clone(), phases })
    }

    /// Runs one phase; what it did, in words.
    async fn step(&self, phase: &Phase, u: &mut Underway, on: &mut dyn FnMut(Progress<'_>)) -> Result<String> {
        match phase {
            Phase::StopStaticPods(_) => {
                for (m, dir) in self.with_pods() {
                    restore::stop_static_pods(dir, &m.name)?;
                }
                // The kubelet stops a static pod in its own time (it reads
                // the folder every 20 s, then gives the pod its grace):
                // nothing is swapped until no member's etcd listens.
                let deadline = Instant::now() + self.start_timeout;
                while let Some(m) = self.members.iter().find(|m| peer_listening(&m.peer_url)) {
                    if Instant::now() > deadline {
                        bail!(
                            "member {}'s etcd still listens at {} {} after its static pod was moved out",
                            m.name,
                            m.peer_url,
                            humantime::format_duration(self.start_timeout)
                        );
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                u.stopped = Some(Utc::now());
                Ok("control plane stopped (static pods moved out, no member's etcd listening)".to_string())
            }
            Phase::RestoreFolders { members, token } => {
                let bump = self.etcdutl.as_ref().map(|e| e.amount);
                let prepared = restore::prepare_members(&self.bins, &self.snapshot.0, &self.members, token, bump)?;
                u.swapping = true;
                for kept in prepared.swap_all()? {
                    on(Progress::Kept(&kept));
                }
                Ok(format!("{} member folder(s) restored (cluster token {token})", members.len()))
            }
            Phase::StartEtcd { endpoints, within, .. } => {
                // etcd first; the API servers once the store is whole again.
                for (m, dir) in self.with_pods() {
                    restore::start_static_pod(dir, &m.name, restore::ETCD_POD)?;
                }
                on(Progress::Awaiting(endpoints));
                u.client = Some(self.answering(*within).await?);
                Ok("members started and answering".to_string())
            }
            Phase::ReplayDeltas { after, until, .. } => {
                let client = u.client.as_mut().context("the restored members were not awaited")?;
                let r = restore::replay(client, &self.chosen.deltas, *after, *until).await?;
                if self.no_bump {
                    // The store whole: the agents may back it up at once.
                    restore::release_old_locks(client, *after).await?;
                }
                u.replayed = Some(r);
                Ok(format!("{} transaction(s) of deltas replayed (revision {})", r.applied, r.reached))
            }
            Phase::BumpAndCompact => {
                let client = u.client.as_mut().context("the restored members were not awaited")?;
                let r = u.replayed.context("the deltas were not replayed")?;
                let etcdutl = self.etcdutl.as_ref().map_or(0, |e| e.amount);
                let lost = restore::Lost { stopped: u.stopped.or(self.lost.stopped), ..self.lost.clone() };
                let b = restore::bump_past_records(&self.store, client, &lost, r, etcdutl).await?;
                // The store whole: the agents may back it up at once.
                restore::release_old_locks(client, self.lost.snapshot).await?;
                Ok(format!(
                    "revision bumped to {} ({}) and compacted there (watches relist): {}",
                    b.revision,
                    b.size(),
                    b.why
                ))
            }
            Phase::StartApiServers(_) => {
                for (m, dir) in self.with_pods() {
                    restore::start_static_pod(dir, &m.name, restore::API_SERVER_POD)?;
                }
                Ok("API servers started".to_string())
            }
        }
    }

    /// A client of the restored members once one answers, within `within`.
    async fn answering(&self, within: Duration) -> Result<Client> {
        let deadline = Instant::now() + within;
        // The restored store answers at the snapshot's revision (past it by
        // etcdutl's bump): a store further on is not the restored one.
        let restored = self.lost.snapshot.saturating_add(self.etcdutl.as_ref().map_or(0, |e| e.amount));
        loop {
            if let Ok((endpoint, mut c)) = self.etcd.first_answering().await {
                if let Ok(rev) = restore::revision(&mut c).await {
                    if rev > restored {
                        bail!(
                            "the store answering at {endpoint} is at revision {rev}, past the restored {restored}: an etcd that was not restored still answers there"
                        );
                    }
                    return Ok(c);
                }
            }
            if Instant::now() > deadline {
                bail!("the restored members did not answer within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The members with a static-pod folder, and the folder.
    fn with_pods(&self) -> impl Iterator<Item = (&Target, &Path)> + '_ {
        self.members.iter().filter_map(|m| m.manifests_dir.as_deref().map(|d| (m, d)))
    }

    /// After `phase` failed: the static pods put back where no member's
    /// data was touched yet, and the state the machines are left in, in words.
    fn failed(&self, phase: &Phase, u: &Underway) -> String {
        let aside: Vec<String> =
            self.with_pods().map(|(m, dir)| restore::set_aside(dir, &m.name).display().to_string()).collect();
        let parked = |what: &str| {
            if aside.is_empty() {
                String::new()
            } else {
                format!("; {what} (their manifests are in {})", aside.join(", "))
            }
        };
        let old = "(each member's old data kept beside it, member.before-restore-…)";
        match phase {
            Phase::StopStaticPods(_) | Phase::RestoreFolders { .. } if !u.swapping => match self.put_back() {
                Ok(()) => format!(
                    "the restore stopped before any member's data was touched: nothing was restored{}",
                    if aside.is_empty() { "" } else { ", and the static pods were put back (the members start as they were)" }
                ),
                Err(e) => format!(
                    "the restore stopped before any member's data was touched, but putting the static pods back failed ({e:#}): move the manifests in {} back to start the members as they were",
                    aside.join(", ")
                ),
            },
            Phase::StopStaticPods(_) | Phase::RestoreFolders { .. } => format!(
                "the restore stopped while swapping the restored data in: a member already swapped has the backup's data {old}{}: mend it and run the restore again",
                parked("the members are stopped")
            ),
            Phase::StartEtcd { .. } => format!(
                "the member folders are restored {old} but the members did not all answer within --start-timeout{}: stop any member that did start, then run the restore again (a member without a static-pod folder is yours to start on its restored folder when the restore says it waits; give it a longer --start-timeout)",
                parked("the API servers stay stopped")
            ),
            Phase::ReplayDeltas { .. } => format!(
                "the members run on the backup's data, but the deltas were not all replayed{}: run the restore again with --force",
                parked("the API servers stay stopped")
            ),
            Phase::BumpAndCompact => format!(
                "the members run on the restored data, but its revision was not bumped past the clients' (their caches would be trusted){}: run the restore again with --force",
                parked("the API servers stay stopped")
            ),
            Phase::StartApiServers(_) => format!(
                "the store is restored, bumped and compacted, but not every API server's manifest went back: move what is left in {} back into its folder",
                aside.join(", ")
            ),
        }
    }

    /// Both static pods back on every member (a manifest not set aside is left).
    fn put_back(&self) -> Result<()> {
        for (m, dir) in self.with_pods() {
            restore::start_static_pods(dir, &m.name)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, data_dir: PathBuf, manifests_dir: Option<PathBuf>) -> Target {
        Target { name: name.into(), peer_url: "http://127.0.0.1:2380".into(), data_dir, manifests_dir }
    }

    #[test]
    fn members_that_cannot_be_restored_are_refused_and_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let pods = dir.path().join("manifests");
        std::fs::create_dir_all(&pods).unwrap();
        std::fs::write(pods.join(restore::API_SERVER_POD), "kind: Pod\n").unwrap();
        let data = dir.path().join("etcd");
        let cases: Vec<(Vec<Target>, &str)> = vec![
            (vec![], "no member to restore"),
            (vec![member("a", data.clone(), None), member("a", dir.path().join("other"), None)], "named twice"),
            (vec![member("a", data.clone(), None), member("b", data.clone(), None)], "share the data folder"),
            (vec![member("a", dir.path().join("missing/etcd"), None)], "does not exist (is DATA_DIR right?)"),
            (vec![member("a", data.clone(), Some(dir.path().join("nowhere")))], "the static-pod folder"),
            (vec![member("a", data.clone(), Some(pods.clone()))], "holds no etcd.yaml"),
        ];
        for (members, why) in cases {
            let e = format!("{:#}", members_usable(&members).unwrap_err());
            assert!(e.contains(why), "{why}: {e}");
        }
        // etcd's manifest set aside by an earlier restore that stopped
        // part-way counts: a restore run again takes it from there.
        let aside = restore::set_aside(&pods, "a");
        std::fs::create_dir_all(&aside).unwrap();
        std::fs::write(aside.join(restore::ETCD_POD), "kind: Pod\n").unwrap();
        members_usable(&[member("a", data.clone(), Some(pods.clone()))]).unwrap();
        assert!(!data.exists(), "checking makes no data folder (nor a lock in it)");
        assert!(pods.join(restore::API_SERVER_POD).is_file() && aside.join(restore::ETCD_POD).is_file());
    }

    #[test]
    fn a_member_another_process_restores_is_refused_before_anything_is_touched() {
        let dir = tempfile::tempdir().unwrap();
        let me = member("a", dir.path().join("etcd"), None);
        let held = restore::hold_member(&me).unwrap().expect("nobody holds it yet");
        let e = format!("{:#}", members_usable(std::slice::from_ref(&me)).unwrap_err());
        assert!(e.contains("another process restores it now") && e.contains(UNTOUCHED), "{e}");
        drop(held);
        members_usable(std::slice::from_ref(&me)).unwrap();
    }
}
