//! `pinfleet upgrade CLUSTER [--instance-group G…] [--yes]`: replace the
//! machines that are not on their group's current launch-template version
//! (or are annotated `pinfleet.dev/needs-update`, or all with `--force`),
//! under the cluster lock, resumably.

use std::io::{IsTerminal as _, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::output::{print_data, Format};
use crate::rollout::driver::Event;
use crate::rollout::run::{self, GroupStatus, Options};
use crate::state::lock::Lock;
use crate::state::pki::Pki;

#[derive(Debug, Clone, Args)]
pub struct RollArgs {
    /// Only these instance groups (repeatable).
    #[arg(long = "instance-group", short = 'g')]
    pub groups: Vec<String>,
    /// Replace every machine, up to date or not.
    #[arg(long)]
    pub force: bool,
    /// Node groups rolled at once.
    #[arg(long, default_value_t = 1)]
    pub max_parallel_groups: usize,
    /// When a drain times out, delete the remaining pods instead of halting.
    #[arg(long)]
    pub force_drain: bool,
    /// A replacement not Ready within this halts the roll.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub boot_timeout: Duration,
    /// Consecutive passing validations after each replacement.
    #[arg(long, default_value_t = 1)]
    pub validate_count: u32,
    /// Time between those validations.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub validate_interval: Duration,
    /// Roll node groups without replacing (and validating) one machine first.
    #[arg(long)]
    pub no_canary: bool,
    /// Kubeconfig of the cluster (default: the one bootstrap wrote).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
}

impl RollArgs {
    pub fn options(&self) -> Options {
        Options {
            groups: self.groups.clone(),
            force: self.force,
            max_parallel_groups: self.max_parallel_groups,
            force_drain: self.force_drain,
            boot_timeout: self.boot_timeout,
            validate_count: self.validate_count,
            validate_interval: self.validate_interval,
            canary: !self.no_canary,
        }
    }
}

#[derive(Debug, Args)]
pub struct UpgradeArgs {
    pub cluster: String,
    /// Do it (without it: the table and the order, nothing changed).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub roll: RollArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: UpgradeArgs) -> Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let store = s
        .store(false)
        .await?
        .with_context(|| format!("cluster {} has no state store yet: bootstrap it first", s.name()))?;
    let pki = Pki::load(&store).await?.with_context(|| format!("cluster {} has not been bootstrapped", s.name()))?;
    let kubeconfig = args.cloud.target.kubeconfig_or(args.roll.kubeconfig.as_deref(), s.name());
    let client = crate::kube::client_from_kubeconfig(&kubeconfig, crate::kube::Retry::Never).await?;
    let opts = args.roll.options();
    let cluster = s.loaded.cluster.clone();
    if !args.yes {
        let p = crate::apply::prepare::prepare(&s.aws, &cluster, Some(&pki)).await?;
        let nodes = crate::kube::drain::nodes_by_instance(&client).await?;
        let rows = run::status(&cluster, &p, &nodes, &opts);
        show_table(g, &rows)?;
        if !p.plan.is_empty() {
            writeln!(
                anstream::stderr(),
                "{} changes are pending; `--yes` applies them first (see `pinfleet plan {}`)",
                p.plan.changes.len(),
                s.name()
            )?;
        }
        writeln!(anstream::stderr(), "\nNothing changed. Run `pinfleet upgrade {} --yes` to roll.", s.name())?;
        return Ok(ExitCode::SUCCESS);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let reports = Lock::with(&store, &command, roll_locked(g, &s, &store, &pki, client, &opts, "upgrade")).await?;
    let replaced: usize = reports.iter().map(|r| r.replaced).sum();
    writeln!(anstream::stderr(), "{} {replaced} machine(s) replaced in {}", "done:".green().bold(), s.name())?;
    Ok(ExitCode::SUCCESS)
}

fn show_table(g: &GlobalArgs, rows: &[GroupStatus]) -> Result<()> {
    if g.output != Format::Text {
        return print_data(g.output, &rows);
    }
    let mut out = anstream::stdout();
    writeln!(
        out,
        "{:<16} {:<13} {:>8} {:>12} {:>6} {:>14}  NODES",
        "GROUP", "ROLE", "MACHINES", "NEEDS UPDATE", "READY", "MIN/DESIRED/MAX"
    )?;
    for r in rows {
        let role = format!("{:?}", r.role);
        writeln!(
            out,
            "{:<16} {:<13} {:>8} {:>12} {:>6} {:>14}  {}",
            r.group,
            role,
            r.machines,
            r.needs_update,
            r.ready,
            format!("{}/{}/{}", r.min, r.desired, r.max),
            r.nodes.join(",")
        )?;
    }
    let order: Vec<String> = rows
        .iter()
        .filter(|r| r.needs_update > 0)
        .map(|r| {
            format!(
                "{} ({})",
                r.group,
                if r.role == crate::spec::Role::ControlPlane { "one at a time" } else { "surge" }
            )
        })
        .collect();
    if !order.is_empty() {
        writeln!(out, "\norder: control planes first, then node groups: {}", order.join(" → "))?;
    }
    Ok(())
}

/// The body of a roll under the lock: apply what is pending, record
/// progress in the state store, roll with progress bars or JSON events.
pub async fn roll_locked(
    g: &GlobalArgs,
    s: &Session,
    store: &crate::state::Store,
    pki: &Pki,
    client: kube::Client,
    opts: &Options,
    why: &str,
) -> Result<Vec<crate::rollout::driver::GroupReport>> {
    let cluster = &s.loaded.cluster;
    let revision = store.next_revision().await?;
    let (p, applied) = run::apply_pending(&s.aws, cluster, pki, revision).await?;
    if let Some(plan) = applied {
        // Recorded like any apply, so `history` shows it.
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        let record =
            crate::state::HistoryRecord::of_plan(revision, &command, &plan).acting_as(s.aws.caller_identity().await);
        store.record(&record, cluster).await?;
        writeln!(
            anstream::stderr(),
            "applied the pending changes as revision {revision} (new launch-template versions)"
        )?;
    }
    let json = g.output == Format::Json;
    let bars = (!json && std::io::stderr().is_terminal()).then(indicatif::MultiProgress::new);
    let group_bars: std::sync::Mutex<std::collections::BTreeMap<String, indicatif::ProgressBar>> = Default::default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let on = |e: Event| {
        let _ = tx.send(e.clone());
        if json {
            let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(&e).unwrap_or_default());
            return;
        }
        let mut gb = group_bars.lock().expect("bars");
        match (&bars, &e) {
            (Some(mp), Event::Started { group, outdated, .. }) => {
                let b = mp.add(indicatif::ProgressBar::new(*outdated as u64));
                b.set_style(
                    indicatif::ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_prefix(group.clone());
                gb.insert(group.clone(), b);
            }
            (Some(_), Event::Replaced { group, instance, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.inc(1);
                    b.set_message(format!("replaced {instance}"));
                }
            }
            (Some(_), Event::Draining { group, instance, node }) => {
                if let Some(b) = gb.get(group) {
                    b.set_message(format!("draining {} ({instance})", node.as_deref().unwrap_or("-")));
                }
            }
            (Some(_), Event::Finished { group, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.finish();
                }
            }
            _ => {
                let line = match &e {
                    Event::Started { group, outdated, machines } => {
                        format!("{group}: {outdated} of {machines} machine(s) to replace")
                    }
                    Event::Launched { group, ids } => format!("{group}: launched {}", ids.join(", ")),
                    Event::Draining { group, instance, node } => {
                        format!("{group}: draining {} ({instance})", node.as_deref().unwrap_or("no node"))
                    }
                    Event::Replaced { group, instance, done, total } => {
                        format!("{group}: replaced {instance} ({done}/{total})")
                    }
                    Event::Finished { group, replaced, seconds } => {
                        format!("{group}: done, {replaced} replaced in {seconds:.1}s")
                    }
                };
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    };
    // Progress lands in the state store as it happens (rollout.json).
    let writer_store = store.clone();
    let started = chrono::Utc::now();
    let why = why.to_string();
    let writer = tokio::spawn(async move {
        let mut groups: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
        while let Some(e) = rx.recv().await {
            match &e {
                Event::Started { group, outdated, machines } => {
                    groups.insert(group.clone(), serde_json::json!({"outdated": outdated, "machines": machines, "replaced": 0, "status": "rolling"}));
                }
                Event::Replaced { group, done, .. } => {
                    if let Some(g) = groups.get_mut(group) {
                        g["replaced"] = (*done).into();
                    }
                }
                Event::Finished { group, .. } => {
                    if let Some(g) = groups.get_mut(group) {
                        g["status"] = "done".into();
                    }
                }
                _ => continue,
            }
            let doc = serde_json::json!({"why": why, "startedAt": started, "updatedAt": chrono::Utc::now(), "groups": groups});
            if let Err(err) = writer_store.put_json("rollout.json", &doc).await {
                tracing::warn!("recording roll progress: {err:#}");
            }
        }
    });
    let result = run::roll(&s.aws, cluster, &p, client, opts, revision, &on).await;
    drop(tx);
    let _ = writer.await;
    if let Some(mp) = &bars {
        let _ = mp.clear();
    }
    let outcome = match &result {
        Ok(r) => serde_json::json!({"status": "done", "groups": r}),
        Err(e) => serde_json::json!({"status": "halted", "error": format!("{e:#}")}),
    };
    let mut doc = store.get_json::<serde_json::Value>("rollout.json").await?.unwrap_or_else(|| serde_json::json!({}));
    doc["outcome"] = outcome;
    doc["finishedAt"] = serde_json::json!(chrono::Utc::now());
    store.put_json("rollout.json", &doc).await?;
    result
}
