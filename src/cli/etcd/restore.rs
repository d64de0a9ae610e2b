//! `pinfleet etcd restore CLUSTER`: the flags read into a
//! [`crate::etcd::plan::Request`]. Members here (their data folders on this
//! machine): [`crate::etcd::plan::check`] makes every check first, this
//! file prints the plan, then runs it and prints each phase's time.
//! Members through their agents: the same backup checks
//! ([`crate::etcd::plan::choose`]), then the order written and the agents'
//! reports printed ([`crate::etcd::order`]).

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;

use super::{open, StoreArgs};
use crate::cli::GlobalArgs;
use crate::etcd::conn::EtcdArgs;
use crate::etcd::manifest::Peer;
use crate::etcd::order::{self, Heard, Order};
use crate::etcd::plan::{self, Chosen, Here, Progress, Request};
use crate::etcd::restore::Target as Member;
use crate::spec::types::BackupSpec;
use crate::state::Store;

#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The backup (default: the newest verified).
    #[arg(long)]
    pub backup: Option<String>,
    /// Each member to restore. Without this flag the agents restore their
    /// own machines' members (those the backup recorded; each agent runs
    /// with `--restore-as`), the order going through the state store.
    /// NAME=PEER_URL (through the agents, instead of the backup's list), or
    /// NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR] (here, where the data folders
    /// are): the folder is restored (the old data kept aside); with a
    /// static-pod folder, etcd's and the API server's manifests are moved
    /// out while the folder is restored and back after.
    #[arg(long = "member")]
    pub members: Vec<String>,
    /// Replay the deltas after the backup only up to this revision (a point
    /// in time before a mistake: the deltas hold the mistake too).
    #[arg(long, conflicts_with = "no_deltas")]
    pub until: Option<i64>,
    /// Replay no delta: the store comes back as the backup has it.
    #[arg(long)]
    pub no_deltas: bool,
    /// Where the restored members answer (to replay, bump and compact).
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Restore even though the live store answers healthy, or from an
    /// unverified or failed backup.
    #[arg(long)]
    pub force: bool,
    /// Leave the revision as the backup has it (not recommended: clients'
    /// caches keep what the restore undid).
    #[arg(long)]
    pub no_bump: bool,
    /// How long the restored members have to answer.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub start_timeout: Duration,
}

/// How `--member` flags read: members restored here (their data folders),
/// or named for the agents.
enum Members {
    Here(Vec<Member>),
    ThroughAgents(Vec<Peer>),
}

fn members_of(flags: &[String]) -> Result<Members> {
    let here = flags.iter().filter(|f| f.matches('=').count() >= 2).count();
    if here > 0 && here < flags.len() {
        bail!("--member: give every member a data folder (NAME=PEER_URL=DATA_DIR, restored here) or none (NAME=PEER_URL, restored by the agents), not a mix");
    }
    if here > 0 {
        let m = flags.iter().map(|m| m.parse::<Member>()).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
        return Ok(Members::Here(m));
    }
    let peers = flags
        .iter()
        .map(|f| match f.split_once('=') {
            Some((n, u)) if !n.is_empty() && u.starts_with("http") => {
                Ok(Peer { name: n.to_string(), peer_url: u.to_string() })
            }
            _ => bail!("--member `{f}`: expected NAME=PEER_URL (e.g. cp-a=https://10.0.1.10:2380) or NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]"),
        })
        .collect::<Result<_>>()?;
    Ok(Members::ThroughAgents(peers))
}

pub async fn run(g: &GlobalArgs, a: RestoreArgs) -> Result<ExitCode> {
    let members = members_of(&a.members)?;
    let (store, spec) = open(g, &a.store).await?;
    let req = Request {
        store: &store,
        cluster: &a.store.cluster,
        backup: a.backup.as_deref(),
        until: a.until,
        no_deltas: a.no_deltas,
        force: a.force,
    };
    let members = match members {
        Members::Here(m) => m,
        Members::ThroughAgents(given) => {
            let chosen = plan::choose(&req).await?;
            tell(&chosen)?;
            let peers = order::members_for(&chosen.backup().manifest, &given)?;
            return through_agents(&a, &store, &chosen, peers, &spec).await;
        }
    };
    let here = Here {
        members,
        etcd: &a.etcd,
        no_bump: a.no_bump,
        start_timeout: a.start_timeout,
        delta_interval: spec.delta_interval.0,
    };
    // Every check, before any machine is touched.
    let checked = plan::check(&req, here).await?;
    tell(checked.chosen())?;
    let mut out = anstream::stdout();
    writeln!(out, "every check passed, no machine touched yet; the restore, in order:")?;
    for (i, phase) in checked.phases().iter().enumerate() {
        writeln!(out, "  {}. {phase}", i + 1)?;
    }
    let done = checked
        .carry_out(&mut |p| {
            let mut out = anstream::stdout();
            let _ = match p {
                Progress::Kept(dir) => writeln!(out, "the old data folder was kept at {}", dir.display()),
                Progress::Awaiting(endpoints) => {
                    writeln!(out, "waiting for the restored members at {}", endpoints.join(","))
                }
                Progress::Done(phase, took) => {
                    tracing::info!("{phase} ({:.1}s)", took.as_secs_f64());
                    Ok(())
                }
            };
        })
        .await?;
    writeln!(out, "restored {} from backup {}; each phase's time:", a.store.cluster, done.backup)?;
    write!(out, "{}", done.phases.render())?;
    Ok(ExitCode::SUCCESS)
}

/// What the checks let through, and what the restore will lose.
fn tell(chosen: &Chosen) -> Result<()> {
    let mut out = anstream::stdout();
    for note in chosen.notes() {
        writeln!(out, "{note}")?;
    }
    writeln!(out, "what will be lost: {}", chosen.loss())?;
    Ok(())
}

/// The restore carried out by the agents ([`crate::etcd::order`]): the
/// order written, each member's reports printed as they come, the RTO.
async fn through_agents(
    a: &RestoreArgs,
    store: &Store,
    chosen: &Chosen,
    peers: Vec<Peer>,
    spec: &BackupSpec,
) -> Result<ExitCode> {
    let mut out = anstream::stdout();
    let b = chosen.backup();
    let now = chrono::Utc::now();
    // The agents' own word on the live store: one that read it lately says
    // it is up (the operator's machine often cannot reach etcd itself).
    let lately = spec.delta_interval.0.saturating_mul(2).max(Duration::from_secs(60));
    if let Some(s) = chosen.seen_lately().filter(|s| (now - s.at).to_std().is_ok_and(|age| age < lately)) {
        let age = humantime::format_duration(Duration::from_secs((now - s.at).num_seconds().max(0) as u64));
        if !a.force {
            bail!(
                "etcd answered the agent on {} {age} ago (revision {}): refusing to restore over a live store without --force",
                s.member,
                s.revision
            );
        }
        writeln!(out, "etcd answered the agent on {} {age} ago; restoring anyway (--force)", s.member)?;
    }
    let o = Order {
        id: format!("{}-{}", now.format("%Y%m%dT%H%M%S%.3fZ"), b.manifest.id),
        cluster: a.store.cluster.clone(),
        backup: b.manifest.id.clone(),
        sha256: b.manifest.sha256.clone(),
        revision: b.restored_revision(),
        token: format!("{}-restore-{}", a.store.cluster, now.format("%Y%m%d%H%M%S")),
        members: peers,
        issued_at: now,
        by: crate::state::whoami().0,
        bump: !a.no_bump,
        until: if a.no_deltas { Some(b.restored_revision()) } else { a.until },
        seen: chosen.seen().cloned(),
        delta_interval_seconds: spec.delta_interval.0.as_secs(),
    };
    let t0 = Instant::now();
    store.put_json(order::ORDER, &o).await?;
    writeln!(
        out,
        "restore order {} written: {} member(s) ({}) restore from backup {} through their agents",
        o.id,
        o.members.len(),
        o.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", "),
        o.backup
    )?;
    let render =
        |phases: &[(String, f64)]| -> String { phases.iter().map(|(n, s)| format!("  {s:>8.1}s  {n}\n")).collect() };
    let f = order::conduct(store, &o, a.start_timeout, &mut |heard| {
        let said = match heard {
            Heard::Prepared(m, r) if r.ok => {
                format!("member {m} prepared (its data not touched yet):\n{}", render(&r.phases))
            }
            Heard::Prepared(m, r) => format!("member {m} could not prepare: {}\n", r.error.clone().unwrap_or_default()),
            Heard::Decided(d) if d.go => "every member prepared: go\n".to_string(),
            Heard::Decided(d) => format!("called off: {}\n", d.reason),
            Heard::Restored(m, r) if r.ok => format!("member {m} restored:\n{}", render(&r.phases)),
            Heard::Restored(m, r) => format!("member {m} FAILED: {}\n", r.error.clone().unwrap_or_default()),
        };
        let _ = write!(anstream::stdout(), "{said}");
    })
    .await?;
    write!(out, "{}", render(&f.phases))?;
    if !f.ok {
        bail!(
            "the restore's last steps failed: {}; the API servers stay stopped: mend it and run the restore again",
            f.error.unwrap_or_default()
        );
    }
    writeln!(out, "restored {} from backup {} at revision {}; API servers started", o.cluster, o.backup, f.revision)?;
    if let Some(why) = &f.bump_why {
        writeln!(out, "the revision's bump: {why}")?;
    }
    writeln!(out, "  {:>8.1}s  in all, from the order to the store answering (the RTO)", t0.elapsed().as_secs_f64())?;
    Ok(ExitCode::SUCCESS)
}
