//! `pinfleet ami resolve|rollout|history CLUSTER`: which AMI each group's
//! selector resolves to now, the scheduled rollout of a newer one (canary
//! group first, a soak, then the rest, inside a maintenance window), and the
//! rollouts recorded in the state store.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::upgrade::RollArgs;
use super::GlobalArgs;
use crate::ami::window::Window;
use crate::output::{print_data, Format};
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
    crate::ami::job::resolve(&s.aws, &s.loaded.cluster, Utc::now()).await
}

fn show(g: &GlobalArgs, rows: &[GroupImage]) -> Result<()> {
    match g.output {
        Format::Text => Ok(write!(anstream::stdout(), "{}", crate::output::images_table(rows))?),
        other => print_data(other, &rows),
    }
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
    let canary = crate::ami::job::canary(&s.loaded.cluster, &changed, a.canary_group.as_deref())?;
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
    let job = crate::ami::job::Job {
        aws: &s.aws,
        cluster: &s.loaded.cluster,
        store: &store,
        pki: &pki,
        client,
        roll: a.roll.options(),
        soak: a.soak,
        command,
    };
    let view = crate::output::RollView::new(g.output == Format::Json);
    let result = crate::ami::job::rollout(&job, now, &canary, &changed, &|e| view.show(&e)).await;
    view.clear();
    result?;
    writeln!(anstream::stderr(), "{} {} runs the new image in every group", "done:".green().bold(), s.name())?;
    Ok(ExitCode::SUCCESS)
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
    write!(anstream::stdout(), "{}", crate::output::ami_history_table(&rows))?;
    Ok(ExitCode::SUCCESS)
}
