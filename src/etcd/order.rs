//! A restore carried out by the agents, one per control-plane machine: the
//! way `pinfleet etcd restore CLUSTER` brings back members whose data
//! folders are on separate machines, in one command (as etcd-manager's
//! restore command does, through the state store).
//!
//! ```text
//! pinfleet etcd restore ──▶ etcd/restore/order.json (backup, token, members)
//!   each agent (its member named in the order, not reported yet):
//!     static pods out ──▶ snapshot downloaded, checked ──▶ data restored in
//!     place ──▶ static pods back ──▶ etcd/restore/<order>/members/<name>.json
//!   the order's first member, once every member reported:
//!     etcd answers ──▶ deltas replayed ──▶ revision bumped, compacted
//!     ──▶ etcd/restore/<order>/finished.json
//! pinfleet etcd restore ◀── reports (each member's phases, the RTO)
//! ```
//!
//! The command writes only the order; an agent writes only its own report
//! (its role may put, never delete). An order older than [`STALE`] is
//! never acted on, so an agent that starts days later does not restore.

use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::conn::EtcdArgs;
use super::manifest::{self, Peer};
use super::restore::{self, Phases, Target};
use super::scratch::Binaries;
use crate::state::Store;

/// The current order (one object; the next order replaces it).
pub const ORDER: &str = "etcd/restore/order.json";
/// An order this old is not carried out.
pub const STALE: Duration = Duration::from_secs(3600);
/// How often an agent looks for an order.
pub const POLL: Duration = Duration::from_secs(2);

pub fn report_key(order: &str, member: &str) -> String {
    format!("etcd/restore/{order}/members/{member}.json")
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
}

impl Order {
    pub fn initial_cluster(&self) -> String {
        self.members.iter().map(|m| format!("{}={}", m.name, m.peer_url)).collect::<Vec<_>>().join(",")
    }
    /// Whether `member` should act on this order at `now`.
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

/// One member's account of its part.
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

/// How long the kubelet has to stop etcd once its manifest is out (it
/// looks at its static-pod folder every 20 s by default).
pub const STOP_WAIT: Duration = Duration::from_secs(180);

/// Waits until nothing listens at the member's peer URL any more: its
/// etcd stopped (the kubelet acts on a moved manifest in its own time; the
/// data must not be swapped under a running member).
async fn stopped(peer_url: &str, within: Duration) -> Result<()> {
    let url = url::Url::parse(peer_url).with_context(|| format!("peer URL `{peer_url}`"))?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_string();
    let port = url.port_or_known_default().unwrap_or(2380);
    let deadline = std::time::Instant::now() + within;
    loop {
        let probe =
            tokio::time::timeout(Duration::from_millis(500), tokio::net::TcpStream::connect((host.as_str(), port)));
        match probe.await {
            Ok(Err(_)) => return Ok(()),
            Ok(Ok(_)) | Err(_) if std::time::Instant::now() > deadline => bail!(
                "etcd on this machine still listens at {peer_url} {} after its static pod was moved out (is the kubelet running?): nothing was restored",
                humantime::format_duration(within)
            ),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn phases_of(p: &Phases) -> Vec<(String, f64)> {
    p.0.iter().map(|(n, d)| (n.clone(), d.as_secs_f64())).collect()
}

/// The agent's side: looks for an order naming `me` every [`POLL`] for as
/// long as the agent runs, and carries out each at most once (its report
/// says it was). Runs beside the backups, whatever state etcd is in.
pub async fn follow_orders(
    store: &Store,
    me: &Target,
    bins: Option<&Binaries>,
    etcd: &EtcdArgs,
    delta_interval: Duration,
) {
    loop {
        match store.get_json::<Order>(ORDER).await {
            Ok(Some(o)) if o.names(&me.name) && o.fresh(Utc::now()) => {
                let done = store.get_json::<Report>(&report_key(&o.id, &me.name)).await;
                if matches!(done, Ok(None)) {
                    tracing::warn!(order = %o.id, backup = %o.backup, "restoring this member as ordered");
                    let report = carry_out(store, me, bins, &o).await;
                    if let Err(e) = store.put_json(&report_key(&o.id, &me.name), &report).await {
                        tracing::warn!("reporting the restore: {e:#}");
                    }
                    if report.ok && o.finisher() == Some(me.name.as_str()) {
                        let f = finish(store, etcd, &o, delta_interval).await;
                        if let Err(e) = store.put_json(&finished_key(&o.id), &f).await {
                            tracing::warn!("reporting the restore's end: {e:#}");
                        }
                    }
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!("reading the restore order: {e:#}"),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// One member's part: its static pods out, the snapshot fetched and
/// checked, its folder restored in place, its static pods back.
pub async fn carry_out(store: &Store, me: &Target, bins: Option<&Binaries>, o: &Order) -> Report {
    let mut phases = Phases::default();
    let mut kept = None;
    let r: Result<()> = async {
        let bins = bins.context("this machine has no etcd binaries (etcdutl) to restore with")?;
        let t = std::time::Instant::now();
        if let Some(dir) = &me.manifests_dir {
            restore::stop_static_pods(dir, &me.name)?;
        }
        if let Err(e) = stopped(&me.peer_url, STOP_WAIT).await {
            if let Some(dir) = &me.manifests_dir {
                restore::start_static_pods(dir, &me.name)?;
            }
            return Err(e);
        }
        phases.time("static pods out, etcd stopped", t, ());
        let t = std::time::Instant::now();
        let file = std::env::temp_dir().join(format!("pinfleet-restore-{}-{}.db", o.id, me.name));
        let fetched: Result<()> = async {
            store.download(&manifest::snapshot_key(&o.backup), &file).await?;
            let (held, sha) = super::snapshot::trailer_holds(&file)?;
            if !held || sha != o.sha256 {
                bail!("the stored snapshot of {} does not match its checksum: this member was not restored", o.backup);
            }
            Ok(())
        }
        .await;
        if let Err(e) = fetched {
            let _ = std::fs::remove_file(&file);
            // Nothing was touched: the member starts as it was.
            if let Some(dir) = &me.manifests_dir {
                restore::start_static_pods(dir, &me.name)?;
            }
            return Err(e);
        }
        phases.time("snapshot downloaded and checked", t, ());
        let t = std::time::Instant::now();
        let restored = restore::restore_in_place(bins, &file, me, &o.initial_cluster(), &o.token);
        let _ = std::fs::remove_file(&file);
        kept = restored?.map(|p| p.display().to_string());
        phases.time("data folder restored", t, ());
        let t = std::time::Instant::now();
        if let Some(dir) = &me.manifests_dir {
            restore::start_static_pods(dir, &me.name)?;
        }
        phases.time("static pods back", t, ());
        Ok(())
    }
    .await;
    Report {
        member: me.name.clone(),
        at: Utc::now(),
        ok: r.is_ok(),
        error: r.err().map(|e| format!("{e:#}")),
        phases: phases_of(&phases),
        kept,
    }
}

/// The finisher's part, once every member reported: etcd answering, the
/// deltas after the snapshot replayed, the revision bumped and compacted.
pub async fn finish(store: &Store, etcd: &EtcdArgs, o: &Order, delta_interval: Duration) -> Finished {
    let mut phases = Phases::default();
    let mut revision = 0;
    let r: Result<()> = async {
        let t = std::time::Instant::now();
        let deadline = std::time::Instant::now() + Duration::from_secs(600);
        loop {
            let mut missing = Vec::new();
            for m in &o.members {
                match store.get_json::<Report>(&report_key(&o.id, &m.name)).await? {
                    Some(r) if r.ok => {}
                    Some(r) => bail!("member {} could not be restored: {}", m.name, r.error.unwrap_or_default()),
                    None => missing.push(m.name.clone()),
                }
            }
            if missing.is_empty() {
                break;
            }
            if std::time::Instant::now() > deadline {
                bail!("members {} did not report within 10 minutes", missing.join(", "));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        phases.time("every member restored", t, ());
        let t = std::time::Instant::now();
        let mut client = loop {
            if let Ok((_, mut c)) = etcd.first_answering().await {
                if restore::revision(&mut c).await.is_ok() {
                    break c;
                }
            }
            if std::time::Instant::now() > deadline {
                bail!("the restored members did not answer within 10 minutes");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        phases.time("members started and answering", t, ());
        let t = std::time::Instant::now();
        let deltas = super::agent::deltas_after(store, o.revision).await?;
        let (rev, applied) = restore::replay(&mut client, &deltas, o.until).await?;
        revision = rev;
        phases.time(&format!("{applied} transaction(s) of deltas replayed (revision {rev})"), t, ());
        if o.bump {
            let t = std::time::Instant::now();
            let seen = super::agent::seen(store).await?;
            let to = super::policy::bump_to(rev, seen.as_ref(), delta_interval, Utc::now());
            revision = restore::bump_and_compact(&client, to).await?;
            phases.time(&format!("revision bumped to {revision} and compacted there (watches relist)"), t, ());
        }
        Ok(())
    }
    .await;
    Finished {
        at: Utc::now(),
        ok: r.is_ok(),
        error: r.err().map(|e| format!("{e:#}")),
        phases: phases_of(&phases),
        revision,
    }
}

/// The command's side after writing the order: every member's report and
/// the finisher's, as they come (`on` is told of each once), until
/// finished or `timeout`.
pub async fn wait(
    store: &Store,
    o: &Order,
    timeout: Duration,
    on: &mut dyn FnMut(&str, &[(String, f64)], Option<&str>),
) -> Result<Finished> {
    let deadline = std::time::Instant::now() + timeout;
    let mut told = std::collections::BTreeSet::new();
    loop {
        for m in &o.members {
            if told.contains(&m.name) {
                continue;
            }
            if let Some(r) = store.get_json::<Report>(&report_key(&o.id, &m.name)).await? {
                on(&m.name, &r.phases, r.error.as_deref());
                told.insert(m.name.clone());
                if !r.ok {
                    bail!(
                        "member {} could not be restored: {} (the other members go on; run the restore again once this is mended)",
                        m.name,
                        r.error.unwrap_or_default()
                    );
                }
            }
        }
        if let Some(f) = store.get_json::<Finished>(&finished_key(&o.id)).await? {
            return Ok(f);
        }
        if std::time::Instant::now() > deadline {
            let missing: Vec<&str> = o.members.iter().map(|m| m.name.as_str()).filter(|n| !told.contains(*n)).collect();
            bail!(
                "the restore did not finish within {}: {} (is `pinfleet etcd agent` running there with --restore-as?)",
                humantime::format_duration(timeout),
                if missing.is_empty() {
                    "every member reported; the finisher did not".to_string()
                } else {
                    format!("no report from {}", missing.join(", "))
                }
            );
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
    fn an_order_names_its_members_finishes_on_the_first_and_goes_stale() {
        let now = Utc::now();
        let o = Order {
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
        };
        assert_eq!(o.initial_cluster(), "a=https://a:2380,b=https://b:2380");
        assert!(o.names("b") && !o.names("c"));
        assert_eq!(o.finisher(), Some("a"));
        assert!(o.fresh(now + chrono::Duration::minutes(59)));
        assert!(!o.fresh(now + chrono::Duration::minutes(61)));
    }
}
