//! `pinfleet fleet rollout plan --ami ID | --kubernetes-version V`: every
//! cluster's stage and place in a fleet-wide rollout, what it moves from
//! and to, and the earliest each stage and cluster can start.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::GlobalArgs;
use crate::fleet::{self, Member, Target};
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
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Roll this AMI.
    #[arg(long, conflicts_with = "kubernetes_version", required_unless_present = "kubernetes_version")]
    pub ami: Option<String>,
    /// Move to this Kubernetes version.
    #[arg(long)]
    pub kubernetes_version: Option<String>,
}

pub async fn run(g: &GlobalArgs, args: FleetArgs) -> Result<ExitCode> {
    let FleetCommand::Rollout(RolloutArgs { command: RolloutCommand::Plan(a) }) = args.command;
    let opts = crate::spec::LoadOptions { known_addons: super::validate::known_addons(&g.addons_dir) };
    let (loaded, diags) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &opts);
    if !diags.0.is_empty() {
        bail!("{diags}");
    }
    let spec = fleet::FleetSpec::load(&g.clusters_dir.join("fleet.yaml"))?;
    let members: Vec<Member> = loaded
        .iter()
        .map(|l| Member {
            name: l.cluster.metadata.name.clone(),
            labels: l.cluster.metadata.labels.clone(),
            region: l.cluster.spec.cloud.region.clone(),
        })
        .collect();
    let (target, from) = match (&a.ami, &a.kubernetes_version) {
        (Some(ami), _) => (Target::Ami(ami.clone()), Default::default()),
        (None, Some(v)) => (
            Target::KubernetesVersion(v.clone()),
            loaded
                .iter()
                .map(|l| (l.cluster.metadata.name.clone(), l.cluster.spec.kubernetes_version.clone()))
                .collect(),
        ),
        (None, None) => bail!("name what to roll: --ami ID or --kubernetes-version V"),
    };
    let plan = fleet::plan(&spec, &members, &target, &from, chrono::Utc::now());
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::output::fleet_plan(&plan))?,
        other => crate::output::print_data(other, &plan)?,
    }
    writeln!(
        anstream::stderr(),
        "\nNothing changed. Carrying a fleet rollout out (`fleet rollout apply`) is not built yet; roll each cluster with `pinfleet ami rollout` or `pinfleet upgrade` in this order."
    )?;
    Ok(ExitCode::SUCCESS)
}
