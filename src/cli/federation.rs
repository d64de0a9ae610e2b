//! `pinfleet federation plan|apply|status APP`: one app's replicas over the
//! members of its federation (clusters whose `spec.federation.name` names
//! it), from `clusters/federations/APP.yaml`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use chrono::Utc;
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;

use super::cloud::Target;
use super::GlobalArgs;
use crate::federation::fanout::{self, World};
use crate::federation::health;
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct FederationArgs {
    #[command(subcommand)]
    pub command: FederationCommand,
}

#[derive(Debug, Subcommand)]
pub enum FederationCommand {
    /// The split per member, the reason for each number, and what changes.
    Plan(FedArgs),
    /// Apply the split (members gaining first; losing ones after the others are Ready).
    Apply(FedArgs),
    /// Desired vs ready per member.
    Status(FedArgs),
}

#[derive(Debug, Args)]
pub struct FedArgs {
    /// The app: `clusters/federations/APP.yaml`.
    pub app: String,
    /// Folder with a `<cluster>.yaml` kubeconfig per member (default: each
    /// member's kubeconfig for --target).
    #[arg(long)]
    pub kubeconfig_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Target::Aws)]
    pub target: Target,
    /// How long a member may be unreachable or NotReady before its replicas move.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Let replicas move back to members that recovered.
    #[arg(long)]
    pub rebalance: bool,
    /// Do it (apply only).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Where the failover memory is kept, shared by every operator
    /// (default: the first member's state store).
    #[arg(long)]
    pub state_store: Option<String>,
    /// How long members gaining replicas may take to be Ready.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

async fn world(g: &GlobalArgs, a: &FedArgs) -> Result<World> {
    let path = g.clusters_dir.join("federations").join(format!("{}.yaml", a.app));
    let (target, dir) = (a.target, a.kubeconfig_dir.clone());
    let kubeconfig = move |cluster: &str| match &dir {
        Some(d) => d.join(format!("{cluster}.yaml")),
        None => target.kubeconfig(cluster),
    };
    World::observe(&path, &g.clusters_dir, &kubeconfig).await
}

pub async fn run(g: &GlobalArgs, args: FederationArgs) -> Result<ExitCode> {
    let (a, kind) = match &args.command {
        FederationCommand::Plan(a) => (a, "plan"),
        FederationCommand::Apply(a) => (a, "apply"),
        FederationCommand::Status(a) => (a, "status"),
    };
    let w = world(g, a).await?;
    // Local members keep their failover memory beside their sims: no
    // command on a local target needs AWS.
    let local = (!matches!(a.target, Target::Aws | Target::Localstack))
        .then(|| format!("file://{}", crate::state::home().join("federation").display()));
    let store = health::open_store(a.state_store.as_deref().or(local.as_deref()), &w.members).await?;
    let mut mem = health::load(&store, &a.app).await?;
    let policy = health::Policy { grace: a.grace, rebalance: a.rebalance };
    let (shares, health) = health::assess(&w.fs, &w.members, &w.observed, &mut mem, policy, Utc::now())?;
    let rows = health::rows(&shares, &health, &w.observed);
    match g.output {
        Format::Text if kind == "status" => {
            write!(anstream::stdout(), "{}", crate::views::workload::tables::federation_status(&rows))?
        }
        Format::Text => {
            write!(anstream::stdout(), "{}", crate::views::workload::tables::federation_plan(&w.fs, &rows))?
        }
        other => print_data(other, &rows)?,
    }
    if kind == "status" {
        return Ok(ExitCode::SUCCESS);
    }
    if kind == "plan" || !a.yes {
        if kind == "apply" {
            writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to apply.")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let applied = fanout::apply(&w.fs, &shares, &w.clients, &w.observed, a.timeout).await?;
    for x in &applied {
        writeln!(anstream::stderr(), "{}: {} → {} ({})", x.cluster, x.from, x.to, x.action)?;
    }
    health::save(&store, &a.app, &mem).await?;
    writeln!(anstream::stderr(), "{} {} placed", "done:".green().bold(), w.fs.metadata.name)?;
    Ok(ExitCode::SUCCESS)
}
