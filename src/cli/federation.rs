//! `pinfleet federation plan|apply|status APP`: one app's replicas over the
//! members of its federation (clusters whose `spec.federation.name` names
//! it), from `clusters/federations/APP.yaml`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;
use serde::Serialize;

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

#[derive(Debug, Serialize)]
struct Row {
    cluster: String,
    health: String,
    current: u32,
    ready: u32,
    desired: u32,
    reason: String,
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

/// The state store holding the failover memory: `--state-store`, else the
/// first member's (by name), so every operator finds the same one.
async fn memory_store(a: &FedArgs, w: &World) -> Result<crate::state::Store> {
    let first = w.members.first().context("the federation has no members")?;
    let url = a.state_store.clone().unwrap_or_else(|| first.spec.state_store.clone());
    let aws = if url.starts_with("s3://") {
        let opts = crate::cloud::aws::AwsOptions::from_env(
            crate::cloud::aws::Target::Aws,
            Some(first.spec.cloud.region.clone()),
        )?;
        Some(crate::cloud::aws::Aws::connect(&opts).await?)
    } else {
        None
    };
    crate::state::Store::open(&url, &first.metadata.name, aws.as_ref())
        .await
        .with_context(|| format!("opening {url} for the federation's failover memory"))
}

pub async fn run(g: &GlobalArgs, args: FederationArgs) -> Result<ExitCode> {
    let (a, kind) = match &args.command {
        FederationCommand::Plan(a) => (a, "plan"),
        FederationCommand::Apply(a) => (a, "apply"),
        FederationCommand::Status(a) => (a, "status"),
    };
    let w = world(g, a).await?;
    let store = memory_store(a, &w).await?;
    let mut mem = health::load(&store, &a.app).await?;
    let policy = health::Policy { grace: a.grace, rebalance: a.rebalance };
    let (shares, health) = health::assess(&w.fs, &w.members, &w.observed, &mut mem, policy, Utc::now())?;
    let rows: Vec<Row> = shares
        .iter()
        .map(|s| {
            let o = &w.observed[&s.cluster];
            Row {
                cluster: s.cluster.clone(),
                health: health[&s.cluster].clone(),
                current: o.desired,
                ready: o.ready,
                desired: s.replicas,
                reason: s.reason.clone(),
            }
        })
        .collect();
    if kind == "status" {
        if g.output != Format::Text {
            print_data(g.output, &rows)?;
        } else {
            let mut out = anstream::stdout();
            writeln!(out, "{:<16} {:>8} {:>6}  HEALTH", "CLUSTER", "DESIRED", "READY")?;
            for r in &rows {
                writeln!(out, "{:<16} {:>8} {:>6}  {}", r.cluster, r.current, r.ready, r.health)?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if g.output != Format::Text {
        print_data(g.output, &rows)?;
    } else {
        let mut out = anstream::stdout();
        writeln!(
            out,
            "{} {} ({} replicas over federation {})",
            "app".bold(),
            w.fs.metadata.name,
            w.fs.spec.total_replicas,
            w.fs.spec.federation
        )?;
        for r in &rows {
            let change = match r.desired.cmp(&r.current) {
                std::cmp::Ordering::Greater => format!("{} → {}", r.current, r.desired).green().to_string(),
                std::cmp::Ordering::Less => format!("{} → {}", r.current, r.desired).red().to_string(),
                std::cmp::Ordering::Equal => format!("{}", r.desired),
            };
            writeln!(out, "  {:<16} {:<10} {}; {}", r.cluster, change, r.reason, r.health)?;
        }
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
