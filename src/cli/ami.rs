//! `pinfleet ami resolve|rollout|history CLUSTER`: which AMI each group's
//! selector resolves to now, the scheduled rollout of a newer one (canary
//! group first, a soak, then the rest, inside a maintenance window), and the
//! rollouts recorded in the state store.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::upgrade::{roll_locked, RollArgs};
use super::GlobalArgs;
use crate::ami::window::Window;
use crate::output::{print_data, Format};
use crate::spec::Role;
use crate::state::lock::Lock;
use crate::state::pki::Pki;

#[derive(Debug, Args)]
pub struct AmiArgs {
    #[command(subcommand)]
    pub command: AmiCommand,
}

#[derive(Debug, Subcommand)]
pub enum AmiCommand {
    /// For each group: the AMI its selector resolves to now, and the one its launch template runs.
    Resolve(ResolveArgs),
    /// The scheduled job: roll a newer AMI onto the cluster, canary group first.
    Rollout(RolloutArgs),
    /// Past AMI rollouts of the cluster.
    History(ResolveArgs),
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    pub cluster: String,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    pub cluster: String,
    /// Group rolled (and soaked) first (default: the first node group with a newer image).
    #[arg(long)]
    pub canary_group: Option<String>,
    /// How long the canary group must stay healthy before the rest roll.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub soak: Duration,
    /// Only act inside this window, e.g. "Sat 02:00-06:00 UTC"; outside it, exit 0.
    #[arg(long)]
    pub window: Option<Window>,
    /// Do it (without it: the decision, nothing changed).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub roll: RollArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub use crate::ami::job::{AmiRollout, GroupImage, RolloutStatus};

pub async fn run(g: &GlobalArgs, args: AmiArgs) -> Result<ExitCode> {
    match args.command {
        AmiCommand::Resolve(a) => {
            let s = Session::open(g, &a.cluster, &a.cloud).await?;
            let (images, warnings) = resolve(&s).await?;
            for w in &warnings {
                writeln!(anstream::stderr(), "{} {w}", "warning:".yellow().bold())?;
            }
            show(g, &images)?;
            Ok(ExitCode::SUCCESS)
        }
        AmiCommand::History(a) => history(g, a).await,
        AmiCommand::Rollout(a) => rollout(g, a).await,
    }
}

async fn resolve(s: &Session) -> Result<(Vec<GroupImage>, Vec<String>)> {
    let cluster = &s.loaded.cluster;
    // Only the launch templates are read: no load balancer call.
    let (observed, (resolved, warnings)) = futures::try_join!(
        crate::cloud::aws::observe::observe(&s.aws, s.name(), None),
        crate::cloud::aws::images::resolve(&s.aws, cluster, Utc::now())
    )?;
    let current: BTreeMap<&str, &str> = observed
        .launch_templates
        .iter()
        .filter_map(|t| t.latest.as_ref().map(|d| (t.group.as_str(), d.image_id.as_str())))
        .collect();
    let rows = cluster
        .spec
        .instance_groups
        .iter()
        .map(|grp| {
            let r = &resolved[&grp.name];
            let cur = current.get(grp.name.as_str()).map(|s| s.to_string());
            GroupImage {
                group: grp.name.clone(),
                newer: cur.as_deref().is_some_and(|c| c != r.id),
                current: cur,
                resolved: r.id.clone(),
                resolved_name: r.name.clone(),
                resolved_created: r.created,
            }
        })
        .collect();
    Ok((rows, warnings))
}

fn show(g: &GlobalArgs, rows: &[GroupImage]) -> Result<()> {
    if g.output != Format::Text {
        return print_data(g.output, &rows);
    }
    let mut out = anstream::stdout();
    writeln!(out, "{:<16} {:<22} {:<22} {:<10} NAME (CREATED)", "GROUP", "CURRENT", "RESOLVED", "STATUS")?;
    for r in rows {
        let status = match (&r.current, r.newer) {
            (None, _) => "not applied",
            (Some(_), true) => "newer",
            (Some(_), false) => "up to date",
        };
        let created = r.resolved_created.map(|c| c.format("%Y-%m-%d").to_string()).unwrap_or_default();
        writeln!(
            out,
            "{:<16} {:<22} {:<22} {:<10} {} ({created})",
            r.group,
            r.current.as_deref().unwrap_or("-"),
            r.resolved,
            status,
            r.resolved_name
        )?;
    }
    Ok(())
}

async fn rollout(g: &GlobalArgs, a: RolloutArgs) -> Result<ExitCode> {
    let now = Utc::now();
    if let Some(w) = &a.window {
        if !w.contains(now) {
            writeln!(
                anstream::stderr(),
                "outside the maintenance window ({}); nothing to do",
                now.format("%a %H:%M UTC")
            )?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let s = Session::open(g, &a.cluster, &a.cloud).await?;
    let (images, warnings) = resolve(&s).await?;
    for w in &warnings {
        writeln!(anstream::stderr(), "{} {w}", "warning:".yellow().bold())?;
    }
    let changed: Vec<GroupImage> = images.into_iter().filter(|i| i.newer).collect();
    if changed.is_empty() {
        writeln!(anstream::stderr(), "every group already runs the newest image; nothing to do")?;
        return Ok(ExitCode::SUCCESS);
    }
    let cluster = &s.loaded.cluster;
    let role = |name: &str| cluster.spec.instance_groups.iter().find(|x| x.name == name).map(|x| x.role);
    let canary = match &a.canary_group {
        Some(c) if changed.iter().any(|i| &i.group == c) => c.clone(),
        Some(c) => bail!(
            "canary group {c} has no newer image (groups with one: {})",
            changed.iter().map(|i| i.group.as_str()).collect::<Vec<_>>().join(", ")
        ),
        None => changed.iter().find(|i| role(&i.group) == Some(Role::Node)).unwrap_or(&changed[0]).group.clone(),
    };
    show(g, &changed)?;
    if !a.yes {
        writeln!(
            anstream::stderr(),
            "\nwould roll {canary} first, soak {}, then the rest. Run with --yes to do it.",
            humantime::format_duration(a.soak)
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let store = s.store(false).await?.context("state store (bootstrap the cluster first)")?;
    let pki = Pki::load(&store).await?.context("the cluster has not been bootstrapped")?;
    let kubeconfig = a.cloud.target.kubeconfig_or(a.roll.kubeconfig.as_deref(), s.name());
    let client = crate::kube::client_from_kubeconfig(&kubeconfig, crate::kube::Retry::Never).await?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let (by, host) = crate::state::whoami();
    let record = AmiRollout {
        number: 0,
        decided_at: now,
        by: match s.aws.caller_identity().await {
            Some(arn) => format!("{by}@{host} as {arn}"),
            None => format!("{by}@{host}"),
        },
        canary_group: canary.clone(),
        groups: changed.clone(),
        status: RolloutStatus::RollingCanary,
        finished_at: None,
    };
    // Numbered by a conditional create: a job started at the same moment
    // gets its own record, and the one refused by the lock says so there.
    let mut record = crate::ami::job::create(&store, record).await?;
    let result = Lock::with(&store, &command, async {
        let mut opts = a.roll.options();
        opts.groups = vec![canary.clone()];
        writeln!(
            anstream::stderr(),
            "{} rolling the canary group {canary} (record #{})",
            "ami:".bold(),
            record.number
        )?;
        roll_locked(g, &s, &store, &pki, client.clone(), &opts, "ami rollout (canary)").await?;
        record.status = RolloutStatus::Soaking;
        crate::ami::job::save(&store, &record).await?;
        soak(&client, a.soak).await?;
        let rest: Vec<String> = changed.iter().map(|i| i.group.clone()).filter(|x| x != &canary).collect();
        if !rest.is_empty() {
            record.status = RolloutStatus::Rolling;
            crate::ami::job::save(&store, &record).await?;
            writeln!(anstream::stderr(), "{} the canary held; rolling {}", "ami:".bold(), rest.join(", "))?;
            opts.groups = rest;
            roll_locked(g, &s, &store, &pki, client.clone(), &opts, "ami rollout").await?;
        }
        Ok(())
    })
    .await;
    record.status = match &result {
        Ok(()) => RolloutStatus::Done,
        Err(e) => RolloutStatus::Halted(format!("{e:#}")),
    };
    record.finished_at = Some(Utc::now());
    crate::ami::job::save(&store, &record).await?;
    result?;
    writeln!(anstream::stderr(), "{} {} runs the new image in every group", "done:".green().bold(), s.name())?;
    Ok(ExitCode::SUCCESS)
}

/// The canary must keep validating (all nodes Ready, system and addon
/// workloads ready) for the whole soak.
async fn soak(client: &kube::Client, soak: Duration) -> Result<()> {
    let end = tokio::time::Instant::now() + soak;
    writeln!(anstream::stderr(), "{} soaking for {}", "ami:".bold(), humantime::format_duration(soak))?;
    loop {
        if let Err(why) = crate::kube::drain::validate(client, &Default::default()).await {
            bail!("the cluster failed validation while the canary soaked: {why}");
        }
        if tokio::time::Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(2).min(end - tokio::time::Instant::now())).await;
    }
}

async fn history(g: &GlobalArgs, a: ResolveArgs) -> Result<ExitCode> {
    let s = Session::open(g, &a.cluster, &a.cloud).await?;
    let Some(store) = s.store(false).await? else {
        writeln!(anstream::stderr(), "no state store yet")?;
        return Ok(ExitCode::SUCCESS);
    };
    let rows = crate::ami::job::history(&store).await?;
    if g.output != Format::Text {
        print_data(g.output, &rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = anstream::stdout();
    writeln!(out, "{:<4} {:<20} {:<14} {:<30} STATUS", "#", "DECIDED", "CANARY", "IMAGES")?;
    for r in rows {
        let images: Vec<String> = r.groups.iter().map(|i| format!("{}→{}", i.group, i.resolved)).collect();
        writeln!(
            out,
            "{:<4} {:<20} {:<14} {:<30} {}",
            r.number,
            r.decided_at.format("%Y-%m-%d %H:%M"),
            r.canary_group,
            images.join(","),
            r.status
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
