//! `pinfleet ami rollout CLUSTER`: the scheduled job. Inside the window, it
//! rolls a newer AMI onto the cluster: the canary group first, a soak, then
//! the rest, recorded in the state store. A cluster a fleet rollout in
//! progress has not rolled yet is left to the fleet.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use chrono::Utc;
use clap::Args;
use owo_colors::OwoColorize;

use super::super::cloud::{CloudArgs, Session};
use super::super::upgrade::RollArgs;
use super::super::GlobalArgs;
use super::{resolve, show};
use crate::ami::window::Window;
use crate::output::Format;

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

pub async fn rollout(g: &GlobalArgs, a: RolloutArgs) -> Result<ExitCode> {
    use crate::ami::job::Decision;
    let now = Utc::now();
    let s = Session::open(g, &a.cluster, &a.cloud).await?;
    // A fleet rollout in progress rolls this cluster in its stage's turn, not this job.
    let opts = super::super::validate::load_options(&g.addons_dir);
    if let Some(why) = crate::fleet::holds(&g.clusters_dir, &opts, &a.cluster, &s.aws).await? {
        writeln!(anstream::stderr(), "{why}; nothing to do")?;
        return Ok(ExitCode::SUCCESS);
    }
    let images = if a.window.as_ref().is_some_and(|w| !w.contains(now)) { Vec::new() } else { resolve(&s).await? };
    let (canary, changed) =
        match crate::ami::job::decide(&s.loaded.cluster, images, a.window.as_ref(), a.canary_group.as_deref(), now)? {
            Decision::Roll { canary, changed } => (canary, changed),
            other => {
                let why = match other {
                    Decision::OutsideWindow => {
                        format!("outside the maintenance window ({})", now.format("%a %H:%M UTC"))
                    }
                    _ => "every group already runs the newest image".to_string(),
                };
                writeln!(anstream::stderr(), "{why}; nothing to do")?;
                return Ok(ExitCode::SUCCESS);
            }
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
    let job = super::roller(&s, &a.cloud, &a.roll).await?;
    let view = crate::output::RollView::new(g.output == Format::Json);
    let result = crate::imaging::job::rollout(&job, a.soak, now, &canary, &changed, &|e| view.show(&e)).await;
    view.clear();
    result?;
    writeln!(anstream::stderr(), "{} {} runs the new image in every group", "done:".green().bold(), s.name())?;
    Ok(ExitCode::SUCCESS)
}
