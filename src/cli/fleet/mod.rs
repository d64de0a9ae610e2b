//! `pinfleet fleet rollout plan|apply|status|approve|revert|unlock`: a
//! staged rollout of an AMI or a Kubernetes version across the clusters
//! folder (`fleet::run` carries it out; its record lives in the state
//! store). One file per command; this one holds their arguments and what
//! they share.

mod apply;
mod approve;
mod plan;
mod revert;
mod status;
mod unlock;

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};

use super::cloud::CloudArgs;
use super::upgrade::RollTuning;
use super::GlobalArgs;
use crate::fleet::aws::AwsFleet;
use crate::fleet::run;
use crate::fleet::{self, Folder, Target};
use crate::output::Format;

#[derive(Debug, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub command: FleetCommand,
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Staged rollouts across the clusters folder.
    Rollout(RolloutArgs),
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    pub command: RolloutCommand,
}

#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// The stages, each cluster's place, from → to, and the earliest starts.
    Plan(PlanArgs),
    /// Start the rollout, or pick up the one in progress.
    Apply(ApplyArgs),
    /// Where the rollout stands, and why each cluster is not moving.
    Status(StatusArgs),
    /// Let a stage that needs approval start.
    Approve(ApproveArgs),
    /// Roll every cluster the rollout touched back to what it ran before.
    Revert(RevertArgs),
    /// Remove the fleet lock a run left behind (`--force`).
    Unlock(UnlockArgs),
}

#[derive(Debug, Clone, Args)]
pub struct TargetArgs {
    /// Roll this AMI: an id, `newest` (each group's own selector), or a name pattern.
    #[arg(long, conflicts_with_all = ["kubernetes_version", "channel"], required_unless_present_any = ["kubernetes_version", "channel"])]
    pub ami: Option<String>,
    /// Move to this Kubernetes version.
    #[arg(long, conflicts_with = "channel")]
    pub kubernetes_version: Option<String>,
    /// Roll what an image channel holds (RECIPE/CHANNEL, e.g. node/stable)
    /// to the groups that follow it, each region its own image.
    #[arg(long, value_name = "RECIPE/CHANNEL")]
    pub channel: Option<String>,
    /// Roll in waves by share of the fleet instead of fleet.yaml's stages
    /// (standard: 1%, 5%, 10%, 25%, all, soaking 3 h, 20 h, 2 d, 3 d
    /// between; urgent: 10%, then the rest an hour later). A failure in a
    /// wave halts the rest.
    #[arg(long, value_enum, value_name = "PROFILE")]
    pub waves: Option<crate::ami::waves::Profile>,
}

impl TargetArgs {
    fn target(&self) -> Result<Target> {
        match (&self.ami, &self.kubernetes_version, &self.channel) {
            (Some(a), _, _) => Ok(Target::Ami(a.clone())),
            (None, Some(v), _) => Ok(Target::KubernetesVersion(v.clone())),
            (None, None, Some(c)) => match c.split_once('/') {
                Some((r, ch)) if !r.is_empty() && !ch.is_empty() && !ch.contains('/') => Ok(Target::Channel(c.clone())),
                _ => bail!("--channel {c}: name a recipe and a channel as RECIPE/CHANNEL (e.g. node/stable)"),
            },
            (None, None, None) => {
                bail!("name what to roll: --ami ID|newest|PATTERN, --kubernetes-version V or --channel RECIPE/CHANNEL")
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

/// How each cluster is rolled (as `upgrade` rolls one).
#[derive(Debug, Clone, Args)]
pub struct FleetRollArgs {
    /// Where each cluster's kubeconfig is: DIR/CLUSTER.yaml (default: where bootstrap wrote it).
    #[arg(long)]
    pub kubeconfig_dir: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub tuning: RollTuning,
}

impl FleetRollArgs {
    fn options(&self) -> crate::rollout::run::Options {
        let t = &self.tuning;
        crate::rollout::run::Options {
            groups: vec![],
            force: false,
            max_parallel_groups: 1,
            force_drain: false,
            boot_timeout: t.boot_timeout,
            validate_count: t.validate_count,
            validate_interval: t.validate_interval,
            canary: !t.no_canary,
            etcd_member_removal: true,
            e2e: !t.skip_e2e,
            skip_backup: t.skip_backup.clone(),
        }
    }

    /// The flags' defaults (for commands that read and never roll).
    fn defaults() -> FleetRollArgs {
        use clap::{FromArgMatches as _, Parser};
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            roll: FleetRollArgs,
        }
        let m = <Only as clap::CommandFactory>::command().get_matches_from(["fleet"]);
        Only::from_arg_matches(&m).expect("the defaults parse").roll
    }
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// Do it (without it: the plan, nothing changed).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Stop at the first wait (a soak, a closed window) instead of sleeping
    /// through it; the next run picks up (for a scheduled job).
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub roll: FleetRollArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    pub stage: String,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct RevertArgs {
    /// Do it (without it: what would be rolled back, nothing changed).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub roll: FleetRollArgs,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct UnlockArgs {
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: FleetArgs) -> Result<ExitCode> {
    let FleetCommand::Rollout(RolloutArgs { command }) = args.command;
    let opts = super::validate::load_options(&g.addons_dir);
    let mut folder = Folder::load(&g.clusters_dir, &opts)?;
    // Waves replace the file's stages for a new rollout (a rollout in
    // progress keeps the stages its record copied).
    let waves = match &command {
        RolloutCommand::Plan(a) => a.target.waves,
        RolloutCommand::Apply(a) => a.target.waves,
        _ => None,
    };
    if let Some(p) = waves {
        folder.spec = folder.spec.in_waves(p, &folder.staged());
    }
    match command {
        RolloutCommand::Plan(a) => plan::plan(g, &folder, a).await,
        RolloutCommand::Apply(a) => apply::apply(g, &folder, a).await,
        RolloutCommand::Status(a) => status::status(g, &folder, &a.cloud).await,
        RolloutCommand::Approve(a) => approve::approve(&folder, a).await,
        RolloutCommand::Revert(a) => revert::revert(g, &folder, a).await,
        RolloutCommand::Unlock(a) => unlock::unlock(&folder, a).await,
    }
}

fn aws_target(cloud: &CloudArgs) -> Result<crate::cloud::aws::Target> {
    cloud.target.aws().context("fleet rollouts work on AWS clusters (--target aws or localstack)")
}

/// The plan at `now` and the fleet's clusters connected (reads only).
pub(super) async fn connect(
    g: &GlobalArgs,
    folder: &Folder,
    target: &Target,
    cloud: &CloudArgs,
    roll: Option<&FleetRollArgs>,
) -> Result<(fleet::FleetPlan, AwsFleet)> {
    let aws_target = aws_target(cloud)?;
    let plan = fleet::plan(&folder.spec, &folder.members, target, &Default::default(), Utc::now());
    let staged = plan.staged();
    let roll = roll.cloned().unwrap_or_else(FleetRollArgs::defaults);
    let dir = roll.kubeconfig_dir.clone();
    let kube_target = cloud.target;
    let kubeconfig = move |c: &str| match &dir {
        Some(d) => d.join(format!("{c}.yaml")),
        None => kube_target.kubeconfig(c),
    };
    let json = g.output == Format::Json;
    // Under -o json a cluster's roll events join the run's stream on stdout.
    let on = Box::new(move |cluster: &str, e: crate::rollout::driver::Event| {
        if let Some(line) = crate::fleet::text::fleet_cluster_event(cluster, &e, json) {
            if json {
                let _ = writeln!(anstream::stdout(), "{line}");
            } else {
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    });
    let roll = roll.options();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let fleet = AwsFleet::connect(folder, &staged, aws_target, &kubeconfig, roll, command, on).await?;
    Ok((plan, fleet))
}

pub(super) fn show_plan(g: &GlobalArgs, plan: &fleet::FleetPlan) -> Result<()> {
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::fleet::text::fleet_plan(plan))?,
        other => crate::output::print_data(other, plan)?,
    }
    Ok(())
}

pub(super) fn say(g: &GlobalArgs, n: &run::Note) {
    if g.output == Format::Json {
        let mut v = serde_json::to_value(n).unwrap_or_default();
        v["type"] = serde_json::json!("note");
        let _ = writeln!(anstream::stdout(), "{v}");
    } else {
        let _ = writeln!(anstream::stderr(), "{}", crate::fleet::text::fleet_note(n));
    }
}
