//! A restore carried out by the agents, one per control-plane machine: the
//! way `pinfleet etcd restore CLUSTER` brings back members whose data
//! folders are on separate machines, in one command (as etcd-manager's
//! restore command does, through the state store). Nothing live is touched
//! until every member is ready, and the API servers start only once the
//! store is whole, bumped and compacted.
//!
//! ```text
//! pinfleet etcd restore ──▶ etcd/restore/order.json (backup, token, members)
//!   each agent (its member named in the order, not taken up before):
//!     static pods out ──▶ etcd stopped ──▶ snapshot downloaded, checked
//!     ──▶ etcdutl restore beside the data ──▶ …/members/<name>/prepared.json
//! pinfleet etcd restore ──▶ …/decision.json: go (every member prepared)
//!                           or abort (one failed, or none came in time)
//!   each agent: go ──▶ data swapped in, etcd's manifest back ──▶ restored.json
//!               abort (or no decision within 15 min) ──▶ all back as it was
//!   the order's first member, once every member restored:
//!     etcd answers ──▶ deltas replayed ──▶ revision bumped, compacted
//!     ──▶ …/finished.json
//!   each agent: finished ──▶ the API server's manifest back
//! pinfleet etcd restore ◀── every report (each member's phases, the RTO)
//! ```
//!
//! Where a machine's etcdutl can (etcd 3.5.8 and later), its member is
//! restored with the revision already bumped (`--bump-revision`, marked
//! compacted), by an amount every machine reckons alike from the order
//! and the records made before it ([`Order::lost`]); the command goes only
//! if every member was restored alike ([`unlike`]), and the finisher's bump
//! then writes only what that fell short.
//!
//! The command writes only the order and its decision; an agent writes only
//! its own reports (its role may put, never delete). An agent takes an
//! order up once: a marker in its data folder, written (and synced) before
//! anything is touched, says how far it got (taken, swapped, done). An
//! agent restarted part-way goes on from there and its reports
//! ([`resume_at`]); an order older than [`STALE`] is never taken up anew,
//! and one gone stale part-way is undone unless its decision was go.

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::conn::EtcdArgs;
use super::manifest::{self, Peer, Seen};
use super::restore::{self, Phases, Target};
use super::scratch::Binaries;
use crate::state::Store;

/// The current order (one object; the next order replaces it).
pub const ORDER: &str = "etcd/restore/order.json";
/// An order this old is not taken up.
pub const STALE: Duration = Duration::from_secs(3600);
/// How often an agent looks for an order.
pub const POLL: Duration = Duration::from_secs(2);
/// How long a prepared member waits for the decision before it puts
/// everything back as it was (the command may have died).
pub const DECISION_WAIT: Duration = Duration::from_secs(900);
/// How long the kubelet has to stop etcd once its manifest is out (it
/// looks at its static-pod folder every 20 s by default).
pub const STOP_WAIT: Duration = Duration::from_secs(180);

/// A member's report of one step: `prepared` or `restored`.
pub fn report_key(order: &str, member: &str, step: &str) -> String {
    format!("etcd/restore/{order}/members/{member}/{step}.json")
}
pub fn decision_key(order: &str) -> String {
    format!("etcd/restore/{order}/decision.json")
}
pub fn finished_key(order: &str) -> String {
    format!("etcd/restore/{order}/finished.json")
}

/// What the command asks of the agents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    pub id: String,
    pub cluster: String,
    pub backup: String,
    /// The snapshot's sha256 (each agent checks its download against it).
    pub sha256: String,
    /// The revision the snapshot holds (deltas after it are replayed).
    pub revision: i64,
    /// The restored cluster's new token.
    pub token: String,
    /// Every member, in the order's order; the first finishes the restore.
    pub members: Vec<Peer>,
    pub issued_at: DateTime<Utc>,
    pub by: String,
    /// Bump the revision and compact (default yes).
    pub bump: bool,
    /// Replay the deltas up to this revision only (None: all of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
    /// The highest revision an agent saw before the order (the bump goes
    /// past it; read by the command, before the agents write again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seen: Option<Seen>,
    /// The cluster's delta interval, for the bump's margin.
    #[serde(default)]
    pub delta_interval_seconds: u64,
}

impl Order {
    /// The lost store as the command found it when it issued the order:
    /// what the bump is reckoned from (by each machine as it restores its
    /// member, and by the finisher).
    pub fn lost(&self) -> restore::Lost {
        restore::Lost {
            backup: self.backup.clone(),
            snapshot: self.revision,
            seen: self.seen.clone(),
            began: self.issued_at,
            delta_interval: Duration::from_secs(self.delta_interval_seconds.max(1)),
            stopped: None,
        }
    }
    pub fn initial_cluster(&self) -> String {
        self.members.iter().map(|m| format!("{}={}", m.name, m.peer_url)).collect::<Vec<_>>().join(",")
    }
    /// Whether the order names `member`.
    pub fn names(&self, member: &str) -> bool {
        self.members.iter().any(|m| m.name == member)
    }
    pub fn fresh(&self, now: DateTime<Utc>) -> bool {
        (now - self.issued_at).to_std().map_or(true, |age| age < STALE)
    }
    pub fn finisher(&self) -> Option<&str> {
        self.members.first().map(|m| m.name.as_str())
    }
}

/// One member's account of one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub member: String,
    pub at: DateTime<Utc>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Each phase and its seconds.
    pub phases: Vec<(String, f64)>,
    /// Where the member's old data was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
    /// Prepared: what etcdutl's `--bump-revision` added to the member's
    /// revision as it restored it (None: not bumped there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcdutl_bump: Option<i64>,
}

/// The command's word once every member reported `prepared`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub go: bool,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// The finisher's account: deltas, bump, compaction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Finished {
    pub at: DateTime<Utc>,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub phases: Vec<(String, f64)>,
    pub revision: i64,
    /// Why the revision bumped to passes every one a client can have
    /// seen, in a sentence ([`super::policy::bump_to`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bump_why: Option<String>,
}

/// The order's members: `--member NAME=PEER_URL` flags if given, else the
/// members the backup recorded.
pub fn members_for(backup: &manifest::Manifest, given: &[Peer]) -> Result<Vec<Peer>> {
    let members = if given.is_empty() { backup.members.clone() } else { given.to_vec() };
    if members.is_empty() {
        bail!(
            "backup {} does not record its members (taken by an older agent): name them, --member NAME=PEER_URL for each",
            backup.id
        );
    }
    let mut names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        bail!("a member is named twice: {}", names.join(", "));
    }
    Ok(members)
}

/// Waits until nothing listens at the member's peer URL any more: its
/// etcd stopped (the kubelet acts on a moved manifest in its own time; the
/// data must not be swapped under a running member).
async fn stopped(peer_url: &str, within: Duration) -> Result<()> {
    let url = url::Url::parse(peer_url).with_context(|| format!("peer URL `{peer_url}`"))?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_string();
    let port = url.port_or_known_default().unwrap_or(2380);
    let deadline = Instant::now() + within;
    loop {
        let probe =
            tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect((host.as_str(), port)));
        match probe.await {
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(()),
            _ if Instant::now() > deadline => bail!(
                "etcd on this machine still listens at {peer_url} {} after its static pod was moved out (is the kubelet running?)",
                humantime::format_duration(within)
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn phases_of(p: &Phases) -> Vec<(String, f64)> {
    p.0.iter().map(|(n, d)| (n.clone(), d.as_secs_f64())).collect()
}

fn report(me: &Target, phases: &Phases, r: &Result<()>, kept: Option<String>) -> Report {
    Report {
        member: me.name.clone(),
        at: Utc::now(),
        ok: r.is_ok(),
        error: r.as_ref().err().map(|e| format!("{e:#}")),
        phases: phases_of(phases),
        kept,
        etcdutl_bump: None,
    }
}

/// The marker an agent writes into its data folder before it touches
/// anything for an order: an order is taken up once, and an agent restarted
/// part-way takes it up again where it left it (see [`resume_at`]).
fn marker(me: &Target, order: &str) -> std::path::PathBuf {
    me.data_dir.join(format!(".pinfleet-restore-order-{order}"))
}

/// How far this machine got with an order, as its marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Taken up: nothing swapped yet.
    Taken,
    /// The restored data is in place (the old kept beside it).
    Swapped,
    /// Over (restored and started, or everything put back): not again.
    Done,
}

fn read_mark(me: &Target, order: &str) -> Option<Mark> {
    let text = std::fs::read_to_string(marker(me, order)).ok()?;
    Some(match text.lines().next().unwrap_or_default() {
        "swapped" => Mark::Swapped,
        "done" => Mark::Done,
        _ => Mark::Taken,
    })
}

/// Writes the marker and syncs it (and its folder) to disk: a machine
/// that loses power must not forget how far it got.
fn write_mark(me: &Target, o: &Order, mark: Mark) -> Result<()> {
    use std::io::Write as _;
    let word = match mark {
        Mark::Taken => "taken",
        Mark::Swapped => "swapped",
        Mark::Done => "done",
    };
    let path = marker(me, &o.id);
    let mut f = std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
    writeln!(f, "{word}\n{}", o.issued_at.to_rfc3339()).with_context(|| format!("writing {}", path.display()))?;
    f.sync_all().with_context(|| format!("syncing {}", path.display()))?;
    if let Ok(dir) = std::fs::File::open(&me.data_dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Where an agent stands in an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// Stop etcd, download and check the snapshot, restore it beside the data.
    Prepare,
    /// Await the decision; on go, swap the data in and start etcd.
    Decide,
    /// The finisher's part, then the API server back once finished.
    Finish,
    /// A step failed or the restore was called off: everything back as it was.
    Done,
}

/// The step an agent restarted part-way resumes at, from its own reports
/// in the store, whether the command decided and whether the order is
/// still fresh: no report (it died while preparing) prepares again, unless
/// the restore was decided without it (then called off) or the order went
/// stale (the command is long gone); prepared awaits the decision (the
/// swap is done once, whether or not it had begun), unless stale and
/// undecided; restored goes on to the finish. A failed report means
/// everything goes back as it was.
pub fn resume_at(prepared: Option<&Report>, restored: Option<&Report>, decided: bool, fresh: bool) -> Step {
    match (prepared, restored) {
        (_, Some(r)) if r.ok => Step::Finish,
        (_, Some(_)) => Step::Done,
        (Some(p), None) if p.ok && (decided || fresh) => Step::Decide,
        (Some(_), None) => Step::Done,
        (None, None) if decided || !fresh => Step::Done,
        (None, None) => Step::Prepare,
    }
}

/// The agent's side: looks for an order naming `me` every [`POLL`] for as
/// long as the agent runs, and takes each up at most once (again after a
/// restart, where it left it). Runs beside the backups, whatever state
/// etcd is in. Only the agent holding the member's lock ([`restore::hold_member`])
/// follows orders; another waits for it, saying so once.
pub async fn follow_orders(store: &Store, me: &Target, bins: Option<&Binaries>, etcd: &EtcdArgs) {
    let mut said = false;
    let _held = loop {
        match restore::hold_member(me) {
            Ok(Some(f)) => break f,
            Ok(None) if !said => {
                tracing::warn!(
                    lock = %restore::member_lock_path(me).display(),
                    "another agent follows this member's restore orders; this one waits for it to end"
                );
                said = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("the member's lock: {e:#}; trying again"),
        }
        tokio::time::sleep(POLL).await;
    };
    if said {
        tracing::info!("the other agent ended: this one follows the member's restore orders");
    }
    let mut taken = std::collections::BTreeSet::new();
    loop {
        match store.get_json::<Order>(ORDER).await {
            Ok(Some(o))
                if o.names(&me.name)
                    && !taken.contains(&o.id)
                    && read_mark(me, &o.id) != Some(Mark::Done)
                    && (o.fresh(Utc::now()) || marker(me, &o.id).exists()) =>
            {
                // Taken once it went through; a store not answering yet
                // (a machine just rebooted) is tried again at the next look.
                match carry_out(store, me, bins, etcd, &o).await {
                    Ok(()) => {
                        taken.insert(o.id.clone());
                    }
                    Err(e) => tracing::warn!(order = %o.id, "the restore order: {e:#}; trying again"),
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("reading the restore order: {e:#}"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One member's part, every step reported; an error here is one the
/// reports could not carry (the store refusing them). Taken up again after
/// a restart (the marker is there), it resumes at [`resume_at`]'s step; an
/// order already decided when first seen (a machine that joined after it
/// went out) is left alone.
pub async fn carry_out(store: &Store, me: &Target, bins: Option<&Binaries>, etcd: &EtcdArgs, o: &Order) -> Result<()> {
    let decided = store.get_json::<Decision>(&decision_key(&o.id)).await?.is_some();
    let from = if marker(me, &o.id).exists() {
        let prepared = store.get_json::<Report>(&report_key(&o.id, &me.name, "prepared")).await?;
        let restored = store.get_json::<Report>(&report_key(&o.id, &me.name, "restored")).await?;
        let step = resume_at(prepared.as_ref(), restored.as_ref(), decided, o.fresh(Utc::now()));
        tracing::warn!(order = %o.id, ?step, "taking the restore order up again where this agent left it");
        step
    } else if decided {
        tracing::warn!(order = %o.id, "the restore order was decided before this agent saw it: left alone");
        return Ok(());
    } else {
        tracing::warn!(order = %o.id, backup = %o.backup, "restoring this member as ordered");
        std::fs::create_dir_all(&me.data_dir).with_context(|| format!("creating {}", me.data_dir.display()))?;
        write_mark(me, o, Mark::Taken).context("marking the order as taken up")?;
        Step::Prepare
    };
    let r = carry_out_from(store, me, bins, etcd, o, from).await;
    if r.is_ok() {
        write_mark(me, o, Mark::Done)?;
    }
    r
}

/// [`carry_out`] from step `from` on.
async fn carry_out_from(
    store: &Store,
    me: &Target,
    bins: Option<&Binaries>,
    etcd: &EtcdArgs,
    o: &Order,
    from: Step,
) -> Result<()> {
    let fresh_dir = restore::prepared_dir(me, &o.id);
    let undo = || {
        if fresh_dir.exists() {
            let _ = std::fs::remove_dir_all(&fresh_dir);
        }
        match &me.manifests_dir {
            Some(dir) => restore::start_static_pods(dir, &me.name),
            None => Ok(()),
        }
    };
    if from == Step::Done {
        return undo();
    }
    if from == Step::Prepare && !prepare_here(store, me, bins, o, &undo).await? {
        return Ok(());
    }
    if from <= Step::Decide {
        if !decide_and_swap(store, me, o, &fresh_dir, &undo).await? {
            return Ok(());
        }
    } else if let Some(dir) = &me.manifests_dir {
        // Restored before a restart: etcd's manifest back if it was not yet.
        restore::start_static_pod(dir, &me.name, restore::ETCD_POD)?;
    }
    finish_here(store, me, etcd, o).await
}

/// How long a member that has checked the snapshot waits for every other
/// member to have checked it before it stops anything.
pub const CHECK_WAIT: Duration = Duration::from_secs(120);

/// Step 1, prepared: the snapshot downloaded and checked, then — only once
/// every member of the order has checked it too (an agent on each, each
/// copy whole) — stopped, restored beside the data, and reported; whether
/// it was (if not, all is back as it was). A member with no agent, or a
/// snapshot that does not hold, stops no member: every check that can
/// refuse comes before the first change to any machine.
async fn prepare_here(
    store: &Store,
    me: &Target,
    bins: Option<&Binaries>,
    o: &Order,
    undo: &dyn Fn() -> Result<()>,
) -> Result<bool> {
    let mut phases = Phases::default();
    let mut bumped = None;
    let mut touched = false;
    let file = std::env::temp_dir().join(format!("pinfleet-restore-{}-{}.db", o.id, me.name));
    let prepared: Result<()> = async {
        let bins = bins.context("this machine has no etcd binaries (etcdutl) to restore with")?;
        let t = Instant::now();
        let fetched: Result<()> = async {
            store.download(&manifest::snapshot_key(&o.backup), &file).await?;
            let (held, sha) = super::snapshot::trailer_holds(&file)?;
            if !held || sha != o.sha256 {
                bail!("the stored snapshot of {} does not match its checksum", o.backup);
            }
            Ok(())
        }
        .await;
        let checked = report(me, &phases, &fetched, None);
        store.put_json(&report_key(&o.id, &me.name, "checked"), &checked).await?;
        fetched?;
        phases.time("snapshot downloaded and checked", t, ());
        let t = Instant::now();
        every_member_checked(store, o).await?;
        phases.time("every member checked the snapshot", t, ());
        let t = Instant::now();
        touched = true;
        if let Some(dir) = &me.manifests_dir {
            restore::stop_static_pods(dir, &me.name)?;
        }
        stopped(&me.peer_url, STOP_WAIT).await?;
        phases.time("static pods out, etcd stopped", t, ());
        let t = Instant::now();
        let by = etcdutl_bump_here(store, bins, o).await?;
        restore::prepare(bins, &file, me, &o.initial_cluster(), &o.token, &o.id, by)?;
        bumped = by;
        let done = match bumped {
            Some(by) => format!("restored beside the data (etcdutl; the revision bumped by {by}, marked compacted)"),
            None => "restored beside the data (etcdutl)".to_string(),
        };
        phases.time(&done, t, ());
        Ok(())
    }
    .await;
    let _ = std::fs::remove_file(&file);
    if prepared.is_err() && touched {
        undo()?;
    }
    let mut said = report(me, &phases, &prepared, None);
    said.etcdutl_bump = bumped;
    store.put_json(&report_key(&o.id, &me.name, "prepared"), &said).await?;
    Ok(prepared.is_ok())
}

/// Waits until every member of the order has reported its snapshot
/// checked; an error (nothing stopped here) when one could not check it,
/// none came within [`CHECK_WAIT`], or the restore was called off.
async fn every_member_checked(store: &Store, o: &Order) -> Result<()> {
    let deadline = Instant::now() + CHECK_WAIT;
    loop {
        if let Some(d) = store.get_json::<Decision>(&decision_key(&o.id)).await? {
            if !d.go {
                bail!("the restore was called off ({}) before any member stopped", d.reason);
            }
        }
        let mut missing = Vec::new();
        for m in &o.members {
            match store.get_json::<Report>(&report_key(&o.id, &m.name, "checked")).await? {
                Some(r) if r.ok => {}
                Some(r) => bail!(
                    "member {} could not check the snapshot ({}): no member was stopped",
                    m.name,
                    r.error.unwrap_or_default()
                ),
                None => missing.push(m.name.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "no word from member(s) {} within {} (is an agent running there with --restore-as?): no member was stopped",
                missing.join(", "),
                humantime::format_duration(CHECK_WAIT)
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// What etcdutl's `--bump-revision` adds as this machine restores its
/// member: None where the order asks for no bump or this machine's
/// etcdutl cannot; otherwise the amount every machine reckons alike, as of
/// the order's issue, from the order and the records made before it.
async fn etcdutl_bump_here(store: &Store, bins: &Binaries, o: &Order) -> Result<Option<i64>> {
    if !o.bump {
        return Ok(None);
    }
    Ok(restore::etcdutl_bump(store, bins, &o.lost()).await?.map(|e| e.amount))
}

/// Whether the members were prepared alike (each member and what its
/// etcdutl added to the revision): one bumped and one not, or by another
/// amount, would make a cluster whose members disagree on every revision.
/// Why not, if not.
pub fn unlike(bumps: &[(String, Option<i64>)]) -> Option<String> {
    let (_, first) = bumps.first()?;
    if bumps.iter().all(|(_, b)| b == first) {
        return None;
    }
    let each: Vec<String> = bumps
        .iter()
        .map(|(m, b)| match b {
            Some(by) => format!("{m}'s etcdutl bumped the revision by {by}"),
            None => format!("{m}'s did not bump it"),
        })
        .collect();
    Some(format!(
        "the members were not restored alike ({}): their machines' etcd builds differ (etcdutl's --bump-revision is etcd 3.5.8's and later's); give every control-plane machine the same etcd build",
        each.join(", ")
    ))
}

/// Step 2, the decision: go, or everything back as it was; on go the data
/// swapped in (once: a restarted agent that had swapped finds the prepared
/// folder gone and the restored data in place), etcd started, and
/// reported; whether it was restored.
async fn decide_and_swap(
    store: &Store,
    me: &Target,
    o: &Order,
    fresh_dir: &std::path::Path,
    undo: &dyn Fn() -> Result<()>,
) -> Result<bool> {
    let t = Instant::now();
    let decision = loop {
        if let Some(d) = store.get_json::<Decision>(&decision_key(&o.id)).await.ok().flatten() {
            break Some(d);
        }
        if t.elapsed() > DECISION_WAIT {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let mut phases = Phases::default();
    let go = match decision {
        Some(d) if d.go => Ok(()),
        Some(d) => Err(anyhow::anyhow!("the restore was called off: {}; this member starts as it was", d.reason)),
        None => Err(anyhow::anyhow!(
            "no decision came within {}; this member starts as it was",
            humantime::format_duration(DECISION_WAIT)
        )),
    };
    if let Err(e) = go {
        undo()?;
        let r: Result<()> = Err(e);
        store.put_json(&report_key(&o.id, &me.name, "restored"), &report(me, &phases, &r, None)).await?;
        return Ok(false);
    }

    let t = Instant::now();
    // Swapped once: the marker says so, or (a restart before it could) the
    // prepared folder is there without its `member`, which only the swap's
    // second rename moves; it is removed only once the marker says so.
    let swapped =
        if read_mark(me, &o.id) == Some(Mark::Swapped) || (fresh_dir.exists() && !fresh_dir.join("member").exists()) {
            write_mark(me, o, Mark::Swapped).map(|()| restore::kept_before(me))
        } else if fresh_dir.join("member").exists() {
            // Again after a restart between its two renames, the old data
            // already aside: where it went is the newest folder kept.
            let had_member = me.data_dir.join("member").exists();
            restore::swap_in(me, fresh_dir)
                .map(|kept| if had_member { kept } else { restore::kept_before(me) })
                .and_then(|kept| write_mark(me, o, Mark::Swapped).map(|()| kept))
        } else {
            Err(anyhow::anyhow!(
                "the prepared data is gone from {} and no swap is recorded: nothing swapped",
                fresh_dir.display()
            ))
        };
    if swapped.is_ok() {
        let _ = std::fs::remove_dir_all(fresh_dir);
    }
    let (r, kept) = match swapped {
        Ok(kept) => {
            let started = match &me.manifests_dir {
                Some(dir) => restore::start_static_pod(dir, &me.name, restore::ETCD_POD),
                None => Ok(()),
            };
            (started, kept.map(|k| k.display().to_string()))
        }
        Err(e) => {
            undo()?;
            (Err(e.context("the old data is back in place")), None)
        }
    };
    phases.time("data swapped in, etcd started", t, ());
    let ok = r.is_ok();
    store.put_json(&report_key(&o.id, &me.name, "restored"), &report(me, &phases, &r, kept)).await?;
    Ok(ok)
}

/// Step 3: the finisher's part (again if it died before it said how it
/// finished: replaying the same deltas again leaves the same keys); then
/// the API server back once finished.
async fn finish_here(store: &Store, me: &Target, etcd: &EtcdArgs, o: &Order) -> Result<()> {
    if o.finisher() == Some(me.name.as_str()) && store.get_json::<Finished>(&finished_key(&o.id)).await?.is_none() {
        let f = finish(store, etcd, o).await;
        super::failpoint("restore:before-finished");
        store.put_json(&finished_key(&o.id), &f).await?;
    }
    let t = Instant::now();
    loop {
        match store.get_json::<Finished>(&finished_key(&o.id)).await.ok().flatten() {
            Some(f) if f.ok => break,
            Some(f) => {
                tracing::warn!(
                    "the restore's last steps failed ({}): the API server stays stopped here until the next restore",
                    f.error.unwrap_or_default()
                );
                return Ok(());
            }
            None if t.elapsed() > DECISION_WAIT => {
                tracing::warn!("the restore never finished: the API server stays stopped here until the next restore");
                return Ok(());
            }
            None => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    if let Some(dir) = &me.manifests_dir {
        restore::start_static_pod(dir, &me.name, restore::API_SERVER_POD)?;
    }
    Ok(())
}

/// The finisher's part, once every member reported: etcd answering, the
/// deltas after the snapshot replayed, the revision bumped and compacted.
pub async fn finish(store: &Store, etcd: &EtcdArgs, o: &Order) -> Finished {
    let mut phases = Phases::default();
    let mut revision = 0;
    let mut bump_why = None;
    let r: Result<()> = async {
        let t = Instant::now();
        let deadline = Instant::now() + DECISION_WAIT;
        loop {
            let mut missing = Vec::new();
            for m in &o.members {
                match store.get_json::<Report>(&report_key(&o.id, &m.name, "restored")).await? {
                    Some(r) if r.ok => {}
                    Some(r) => bail!("member {} could not be restored: {}", m.name, r.error.unwrap_or_default()),
                    None => missing.push(m.name.clone()),
                }
            }
            if missing.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "members {} did not report within {}",
                    missing.join(", "),
                    humantime::format_duration(DECISION_WAIT)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        phases.time("every member restored", t, ());
        let t = Instant::now();
        let mut client = loop {
            if let Ok((_, mut c)) = etcd.first_answering().await {
                if restore::revision(&mut c).await.is_ok() {
                    break c;
                }
            }
            if Instant::now() > deadline {
                bail!("the restored members did not answer within {}", humantime::format_duration(DECISION_WAIT));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        phases.time("members started and answering", t, ());
        let t = Instant::now();
        let locked = store.retention_of(&manifest::snapshot_key(&o.backup)).await?.is_some();
        let (deltas, left_out) = super::agent::deltas_to_replay(store, &o.backup, o.revision, locked).await?;
        if let Some(why) = left_out {
            tracing::warn!("{why}");
        }
        let r = restore::replay(&mut client, &deltas, o.revision, o.until).await?;
        revision = r.revision;
        phases.time(&format!("{} transaction(s) of deltas replayed (revision {})", r.applied, r.reached), t, ());
        if o.bump {
            let t = Instant::now();
            let etcdutl = etcdutl_bumped(store, o).await?;
            // Records the cut before it bumps: a finisher that dies in the bump has recorded it.
            // Every member reported prepared only once its etcd had stopped:
            // the lost store took no write after the last of those reports.
            let mut lost = o.lost();
            for m in &o.members {
                let p = store.get_json::<Report>(&report_key(&o.id, &m.name, "prepared")).await?;
                match p.filter(|p| p.ok) {
                    Some(p) => lost.stopped = Some(lost.stopped.map_or(p.at, |s| s.max(p.at))),
                    None => {
                        lost.stopped = None;
                        break;
                    }
                }
            }
            let b = restore::bump_past_records(store, &client, &lost, r, etcdutl).await?;
            revision = b.revision;
            bump_why = Some(b.why.clone());
            let done = format!("revision bumped to {revision} ({}) and compacted there (watches relist)", b.size());
            phases.time(&done, t, ());
        }
        // The store whole: the agents may back it up at once.
        restore::release_old_locks(&mut client, o.revision).await?;
        Ok(())
    }
    .await;
    Finished {
        at: Utc::now(),
        ok: r.is_ok(),
        error: r.err().map(|e| format!("{e:#}")),
        phases: phases_of(&phases),
        revision,
        bump_why,
    }
}

/// What etcdutl added to the revision as the members were restored (0:
/// nothing), as their prepared reports say; an error if they differ (an
/// order the command let go without asking, [`unlike`]).
async fn etcdutl_bumped(store: &Store, o: &Order) -> Result<i64> {
    let mut bumps = Vec::new();
    for m in &o.members {
        let p = store.get_json::<Report>(&report_key(&o.id, &m.name, "prepared")).await?;
        bumps.push((m.name.clone(), p.and_then(|p| p.etcdutl_bump)));
    }
    if let Some(why) = unlike(&bumps) {
        bail!("{why}: the store is not bumped, its API servers stay stopped");
    }
    Ok(bumps.first().and_then(|(_, b)| *b).unwrap_or(0))
}

/// What the command is told as the reports come.
pub enum Heard<'a> {
    Prepared(&'a str, &'a Report),
    Decided(&'a Decision),
    Restored(&'a str, &'a Report),
}

/// Every member's report of `step`, told once each, until all are in, one
/// failed, or `deadline`: the members not heard from.
async fn gather(
    store: &Store,
    o: &Order,
    step: &str,
    deadline: Instant,
    on: &mut dyn FnMut(&str, &Report),
) -> Result<(Vec<String>, Option<String>)> {
    let mut told = std::collections::BTreeSet::new();
    loop {
        for m in &o.members {
            if told.contains(&m.name) {
                continue;
            }
            if let Some(r) = store.get_json::<Report>(&report_key(&o.id, &m.name, step)).await? {
                on(&m.name, &r);
                told.insert(m.name.clone());
                if !r.ok {
                    let why = format!("member {} failed: {}", m.name, r.error.unwrap_or_default());
                    return Ok((Vec::new(), Some(why)));
                }
            }
        }
        let missing: Vec<String> = o.members.iter().map(|m| m.name.clone()).filter(|n| !told.contains(n)).collect();
        if missing.is_empty() || Instant::now() > deadline {
            return Ok((missing, None));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The command's side after writing the order: every member prepared, then
/// the decision (go, or abort so that every member starts as it was), then
/// every member restored and the finisher's end, each step within `step`.
pub async fn conduct(store: &Store, o: &Order, step: Duration, on: &mut dyn FnMut(Heard)) -> Result<Finished> {
    let mut bumps = Vec::new();
    let (missing, failed) = gather(store, o, "prepared", Instant::now() + step, &mut |m, r| {
        bumps.push((m.to_string(), r.etcdutl_bump));
        on(Heard::Prepared(m, r))
    })
    .await?;
    // Members that checked the snapshot are there, waiting for the others:
    // the ones to name are those that did not even check it.
    let mut silent = Vec::new();
    for m in &missing {
        if store.get_json::<Report>(&report_key(&o.id, m, "checked")).await?.is_none() {
            silent.push(m.clone());
        }
    }
    let silent = if silent.is_empty() { missing.clone() } else { silent };
    let abort = match (failed, missing.is_empty()) {
        (Some(why), _) => Some(why),
        (None, false) => Some(format!(
            "no word from {} within {} (is `pinfleet etcd agent` running there with --restore-as?)",
            silent.join(", "),
            humantime::format_duration(step)
        )),
        (None, true) => unlike(&bumps),
    };
    let d = Decision {
        go: abort.is_none(),
        reason: abort.clone().unwrap_or_else(|| "every member prepared".into()),
        at: Utc::now(),
    };
    store.put_json(&decision_key(&o.id), &d).await?;
    on(Heard::Decided(&d));
    if let Some(why) = abort {
        bail!("{why}: the restore was called off before any member's data was touched; every member starts as it was");
    }
    let deadline = Instant::now() + step.max(DECISION_WAIT);
    let (missing, failed) = gather(store, o, "restored", deadline, &mut |m, r| on(Heard::Restored(m, r))).await?;
    if let Some(why) = failed {
        bail!("{why}; the members restored so far run the restored data, their API servers stopped: mend it and run the restore again");
    }
    if !missing.is_empty() {
        bail!("no word from {} after the go", missing.join(", "));
    }
    loop {
        if let Some(f) = store.get_json::<Finished>(&finished_key(&o.id)).await? {
            return Ok(f);
        }
        if Instant::now() > deadline {
            bail!("every member restored, but the finisher ({}) never said it finished", o.finisher().unwrap_or("?"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(members: Vec<Peer>) -> manifest::Manifest {
        manifest::Manifest {
            id: "b1".into(),
            cluster: "c".into(),
            taken_at: Utc::now(),
            revision: 7,
            member: "a".into(),
            etcd_version: "3.5.1".into(),
            kubernetes_version: "1.36.2".into(),
            size: 1,
            sha256: String::new(),
            keys: Default::default(),
            retain_until: None,
            encryption_keys: vec![],
            taken_by: "t".into(),
            members,
        }
    }

    fn peer(n: &str) -> Peer {
        Peer { name: n.into(), peer_url: format!("https://{n}:2380") }
    }

    #[test]
    fn the_members_come_from_the_flags_else_the_backup_and_none_twice() {
        let b = backup(vec![peer("a"), peer("b")]);
        assert_eq!(members_for(&b, &[]).unwrap(), vec![peer("a"), peer("b")]);
        assert_eq!(members_for(&b, &[peer("x")]).unwrap(), vec![peer("x")]);
        let e = members_for(&backup(vec![]), &[]).unwrap_err().to_string();
        assert!(e.contains("does not record its members") && e.contains("--member NAME=PEER_URL"), "{e}");
        let e = members_for(&b, &[peer("x"), peer("x")]).unwrap_err().to_string();
        assert!(e.contains("named twice"), "{e}");
    }

    #[test]
    fn an_agent_restarted_part_way_resumes_where_its_reports_left_it() {
        let said = |ok: bool| Report {
            member: "a".into(),
            at: Utc::now(),
            ok,
            error: None,
            phases: vec![],
            kept: None,
            etcdutl_bump: None,
        };
        let (ok, failed) = (said(true), said(false));
        // Died while preparing: again, unless decided without it or stale.
        assert_eq!(resume_at(None, None, false, true), Step::Prepare);
        assert_eq!(resume_at(None, None, true, true), Step::Done);
        assert_eq!(resume_at(None, None, false, false), Step::Done);
        // Prepared: the decision (whether or not the swap had begun), unless
        // stale with no decision (the command is long gone).
        assert_eq!(resume_at(Some(&ok), None, false, true), Step::Decide);
        assert_eq!(resume_at(Some(&ok), None, true, true), Step::Decide);
        assert_eq!(resume_at(Some(&ok), None, true, false), Step::Decide);
        assert_eq!(resume_at(Some(&ok), None, false, false), Step::Done);
        assert_eq!(resume_at(Some(&failed), None, true, true), Step::Done);
        // Restored: the finish; a failed or called-off one, all back.
        assert_eq!(resume_at(Some(&ok), Some(&ok), true, false), Step::Finish);
        assert_eq!(resume_at(Some(&ok), Some(&failed), true, true), Step::Done);
    }

    /// Member `a` with its data in `data_dir`.
    fn member_a(data_dir: std::path::PathBuf) -> Target {
        Target { name: "a".into(), peer_url: "https://a:2380".into(), data_dir, manifests_dir: None }
    }

    #[test]
    fn the_marker_says_how_far_a_machine_got() {
        let dir = tempfile::tempdir().unwrap();
        let me = member_a(dir.path().to_path_buf());
        let o = order(Utc::now());
        assert_eq!(read_mark(&me, &o.id), None);
        for m in [Mark::Taken, Mark::Swapped, Mark::Done] {
            write_mark(&me, &o, m).unwrap();
            assert_eq!(read_mark(&me, &o.id), Some(m));
        }
        // A marker an older agent wrote (the order's time alone) is taken.
        std::fs::write(marker(&me, &o.id), o.issued_at.to_rfc3339()).unwrap();
        assert_eq!(read_mark(&me, &o.id), Some(Mark::Taken));
    }

    #[test]
    fn one_agent_at_a_time_holds_a_members_lock_in_its_data_folder() {
        let dir = tempfile::tempdir().unwrap();
        let me = member_a(dir.path().join("etcd"));
        // In the folder the addon mounts from the machine.
        assert_eq!(restore::member_lock_path(&me), dir.path().join("etcd/.pinfleet-agent.lock"));
        let first = restore::hold_member(&me).unwrap().expect("the first agent holds it");
        assert!(restore::hold_member(&me).unwrap().is_none(), "a second agent waits");
        // A swap moves the member folder inside: the lock stays held.
        let fresh = dir.path().join("fresh");
        std::fs::create_dir_all(fresh.join("member")).unwrap();
        std::fs::create_dir_all(me.data_dir.join("member")).unwrap();
        restore::swap_in(&me, &fresh).unwrap();
        assert!(restore::hold_member(&me).unwrap().is_none(), "still held across a swap");
        drop(first);
        assert!(restore::hold_member(&me).unwrap().is_some(), "given back when the first one ends");
        // `etcd restore --member` on the machine refuses a member an agent holds.
        let _agent = restore::hold_member(&me).unwrap().expect("held");
        let e = restore::restore_members(
            &super::super::scratch::Binaries { dir: None },
            std::path::Path::new("/nonexistent.db"),
            std::slice::from_ref(&me),
            "t",
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("another process restores it now"), "{e:#}");
        // A folder it cannot create is an error that names it.
        let blocked = Target { data_dir: dir.path().join("file/etcd"), ..me };
        std::fs::write(dir.path().join("file"), "").unwrap();
        let e = format!("{:#}", restore::hold_member(&blocked).unwrap_err());
        assert!(e.contains("file"), "{e}");
    }

    #[test]
    fn the_command_goes_only_if_every_member_was_restored_alike() {
        let each = |bumps: &[(&str, Option<i64>)]| -> Vec<(String, Option<i64>)> {
            bumps.iter().map(|(m, b)| (m.to_string(), *b)).collect()
        };
        let by = Some(1_000_510_940);
        for (bumps, alike) in [
            (each(&[]), true),
            (each(&[("a", None), ("b", None), ("c", None)]), true),
            (each(&[("a", by), ("b", by), ("c", by)]), true),
            // One machine's etcd build older than the others'.
            (each(&[("a", by), ("b", None), ("c", by)]), false),
            // Reckoned apart (records read differently).
            (each(&[("a", by), ("b", Some(1_000_000_000))]), false),
        ] {
            let said = unlike(&bumps);
            assert_eq!(said.is_none(), alike, "{bumps:?}: {said:?}");
            if let Some(why) = said {
                assert!(
                    why.contains("a's etcdutl bumped the revision by 1000510940") && why.contains("etcd build"),
                    "{why}"
                );
            }
        }
        // Every machine reckons the amount from the order alone, as of its issue.
        let o = order(Utc::now());
        let lost = o.lost();
        assert_eq!((lost.began, lost.snapshot, lost.delta_interval), (o.issued_at, 7, Duration::from_secs(30)));
    }

    #[test]
    fn a_cut_drops_only_the_abandoned_timelines_revisions() {
        let c = manifest::Cut { after: 235, before: 3141, at: Utc::now(), backup: "b1".into() };
        assert!(!c.drops(235) && c.drops(236) && c.drops(3140) && !c.drops(3141) && !c.drops(5000));
    }

    fn order(now: DateTime<Utc>) -> Order {
        Order {
            id: "o".into(),
            cluster: "c".into(),
            backup: "b1".into(),
            sha256: String::new(),
            revision: 7,
            token: "t".into(),
            members: vec![peer("a"), peer("b")],
            issued_at: now,
            by: "me".into(),
            bump: true,
            until: None,
            seen: None,
            delta_interval_seconds: 30,
        }
    }

    #[test]
    fn an_order_names_its_members_finishes_on_the_first_and_goes_stale() {
        let now = Utc::now();
        let o = order(now);
        assert_eq!(o.initial_cluster(), "a=https://a:2380,b=https://b:2380");
        assert!(o.names("b") && !o.names("c"));
        assert_eq!(o.finisher(), Some("a"));
        assert!(o.fresh(now + chrono::Duration::minutes(59)));
        assert!(!o.fresh(now + chrono::Duration::minutes(61)));
    }
}
