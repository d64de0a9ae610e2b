//! The command line: one file per command, each with its argument struct
//! and a `run` that calls library code. No domain logic lives here.

pub mod addons;
pub mod adopt;
pub mod ami;
pub mod apply;
pub mod autoscaler;
pub mod bootstrap;
pub mod capacity;
pub mod cloud;
pub mod completions;
pub mod controller;
pub mod crds;
pub mod delivery;
pub mod destroy;
pub mod diff;
pub mod docs;
pub mod e2e;
pub mod etcd;
pub mod federation;
pub mod fleet;
pub mod gateway;
pub mod get;
pub mod help;
pub mod history;
pub mod import;
pub mod local;
pub mod orphans;
pub mod plan;
pub mod render;
pub mod schema;
pub mod sim;
pub mod state;
pub mod upgrade;
pub mod validate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub use help::{command, parse, GROUPS};

use crate::output::Format;

#[derive(Debug, Parser)]
#[command(name = "pinfleet", version, about = "Bootstrap, upgrade and govern fleets of Kubernetes clusters on AWS")]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Folder holding the cluster definitions.
    #[arg(long, global = true, env = "PINFLEET_CLUSTERS_DIR", default_value = "clusters")]
    pub clusters_dir: PathBuf,
    /// Folder holding the addon packages.
    #[arg(long, global = true, env = "PINFLEET_ADDONS_DIR", default_value = "addons")]
    pub addons_dir: PathBuf,
    /// Output format, where the command has data to show.
    #[arg(short, long, global = true, value_enum, default_value_t = Format::Text)]
    pub output: Format,
    /// More logging (-v info, -vv debug, -vvv trace); RUST_LOG wins when set.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Log as JSON lines (info level unless -v says more), e.g. for the
    /// in-cluster controller.
    #[arg(long, global = true)]
    pub log_json: bool,
    /// The command being run (`plan`, `fleet`…), for the AWS sessions it
    /// opens: their names and tags say it.
    #[arg(skip)]
    pub command: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check cluster files (default: every cluster in the clusters folder).
    Validate(validate::ValidateArgs),
    /// Write the cluster file of a cluster kops runs, from kops's state store (`import kops`).
    Import(import::ImportArgs),
    /// Take over, in place, the running kops cluster an imported file names (tags added, nothing replaced).
    Adopt(adopt::AdoptArgs),
    /// Render every template (user-data, kubeadm, kind, kubeconfig) for one cluster.
    Render(render::RenderArgs),
    /// Print the JSON Schema of the cluster format.
    Schema(schema::SchemaArgs),
    /// Print the platform's workload CRDs as YAML.
    Crds(crds::CrdsArgs),
    /// Run the workload controllers (Pinterest* CRs → native objects).
    Controller(controller::ControllerArgs),
    /// Show what `apply` would change on AWS, and why.
    Plan(plan::PlanArgs),
    /// Create a cluster the first time: state bucket, PKI, kubeconfig, then apply.
    Bootstrap(apply::ApplyArgs),
    /// Make the cluster on AWS match its definition.
    Apply(apply::ApplyArgs),
    /// The cluster's addon set: list, render, diff against the cluster, apply.
    Addons(addons::AddonsArgs),
    /// AMIs: what selectors resolve to, scheduled rollouts, their history.
    Ami(ami::AmiArgs),
    /// Place one app's replicas over the members of a federation.
    Federation(federation::FederationArgs),
    /// Serve cluster-autoscaler's externalgrpc cloud provider over the node groups.
    Autoscaler(autoscaler::AutoscalerArgs),
    /// End-to-end validation of running clusters (pre-flight, cluster, platform smoke).
    E2e(e2e::E2eArgs),
    /// Fleet-wide staged rollouts: the plan across the clusters folder.
    Fleet(fleet::FleetArgs),
    /// A workload's new version across its clusters in waves, judged by metrics, rolled back by itself.
    Delivery(delivery::DeliveryArgs),
    /// What drifted from the definitions (by layer), or how clusters that
    /// should match differ (`diff A B`, `--all-of SELECTOR`).
    Diff(diff::DiffArgs),
    /// Replace machines that are not on their group's current version.
    Upgrade(upgrade::UpgradeArgs),
    /// Delete everything tagged for a cluster.
    Destroy(destroy::DestroyArgs),
    /// List what pinfleet manages.
    Get(get::GetArgs),
    /// Resources whose cluster is gone, and machines nobody owns.
    Orphans(orphans::OrphansArgs),
    /// Applied revisions of a cluster.
    History(history::HistoryArgs),
    /// The control plane's etcd: backups (agent, list, verify, gc) and restore.
    Etcd(etcd::EtcdCmdArgs),
    /// Offerings EC2 refused recently (the fleet-wide ledger) and the groups they hold back.
    Capacity(capacity::CapacityArgs),
    /// Look after the state store (locks).
    State(state::StateArgs),
    /// Run the local Kubernetes API emulator.
    Sim(sim::SimArgs),
    /// The submission gateway: serve it, or install its CRDs on a host cluster.
    Gateway(gateway::GatewayArgs),
    /// Submit a workload through the gateway (`--dry-run`: the decision, nothing recorded).
    Submit(gateway::SubmitArgs),
    /// Your teams' submissions: list, describe, cancel.
    Workloads(gateway::WorkloadsArgs),
    /// What waits for admission: position, expected start and why.
    Queue(gateway::QueueArgs),
    /// Your teams' quota per tier: used, guaranteed, maximum, borrowed.
    Quota(gateway::QueueArgs),
    /// What the console shows, in the terminal: the fleet, a cluster, a team or a workload.
    View(gateway::ViewArgs),
    /// Print shell completions.
    Completions(completions::CompletionsArgs),
    /// Write the book's command reference or the man pages, from this
    /// command line (hidden: a maintainer's tool, run by scripts/test).
    #[command(hide = true)]
    Docs(docs::DocsArgs),
}

/// Resolves on SIGTERM (how a pod is told to end) or Ctrl-C.
pub(crate) async fn shutdown_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// The subcommand's name as typed (`Command::AmiPipeline(..)` → `ami-pipeline`).
fn command_name(c: &Command) -> String {
    let debug = format!("{c:?}");
    let variant = debug.split(['(', ' ', '{']).next().unwrap_or_default();
    let mut out = String::new();
    for (i, ch) in variant.chars().enumerate() {
        if ch.is_ascii_uppercase() && i > 0 {
            out.push('-');
        }
        out.push(ch.to_ascii_lowercase());
    }
    out
}

pub fn run(mut cli: Cli) -> anyhow::Result<ExitCode> {
    cli.global.command = command_name(&cli.command);
    let g = &cli.global;
    let rt = || tokio::runtime::Builder::new_multi_thread().enable_all().build();
    match cli.command {
        Command::Validate(a) => validate::run(g, a),
        Command::Import(a) => rt()?.block_on(import::run(g, a)),
        Command::Adopt(a) => rt()?.block_on(adopt::run(g, a)),
        Command::Render(a) => render::run(g, a),
        Command::Schema(a) => schema::run(g, a),
        Command::Crds(a) => crds::run(g, a),
        Command::Controller(a) => rt()?.block_on(controller::run(g, a)),
        Command::Completions(a) => completions::run(g, a),
        Command::Docs(a) => docs::run(g, a),
        Command::Plan(a) => rt()?.block_on(plan::run(g, a)),
        Command::Bootstrap(a) => rt()?.block_on(bootstrap::run(g, a)),
        // Local targets (the sim, kind) are applied by `local`, which
        // builds on `apply`'s arguments and addon install: the arrow runs
        // local → apply only.
        Command::Apply(a) if a.cloud.target.aws().is_none() => rt()?.block_on(local::run(g, a, false)),
        Command::Apply(a) => rt()?.block_on(apply::run(g, a)),
        Command::Addons(a) => rt()?.block_on(addons::run(g, a)),
        Command::Ami(a) => rt()?.block_on(ami::run(g, a)),
        Command::Federation(a) => rt()?.block_on(federation::run(g, a)),
        Command::Upgrade(a) => rt()?.block_on(upgrade::run(g, a)),
        Command::Autoscaler(a) => rt()?.block_on(autoscaler::run(g, a)),
        Command::E2e(a) => rt()?.block_on(e2e::run(g, a)),
        Command::Fleet(a) => rt()?.block_on(fleet::run(g, a)),
        Command::Delivery(a) => rt()?.block_on(delivery::run(g, a)),
        Command::Destroy(a) => rt()?.block_on(destroy::run(g, a)),
        Command::Diff(a) => rt()?.block_on(diff::run(g, a)),
        Command::Get(a) => rt()?.block_on(get::run(g, a)),
        Command::Orphans(a) => rt()?.block_on(orphans::run(g, a)),
        Command::History(a) => rt()?.block_on(history::run(g, a)),
        Command::Etcd(a) => rt()?.block_on(etcd::run(g, a)),
        Command::Capacity(a) => rt()?.block_on(capacity::run(g, a)),
        Command::State(a) => rt()?.block_on(state::run(g, a)),
        Command::Sim(a) => rt()?.block_on(sim::run(g, a)),
        Command::Gateway(a) => rt()?.block_on(gateway::run(g, a)),
        Command::Submit(a) => rt()?.block_on(gateway::submit(g, a)),
        Command::Workloads(a) => rt()?.block_on(gateway::workloads(g, a)),
        Command::Queue(a) => rt()?.block_on(gateway::queue(g, a)),
        Command::Quota(a) => rt()?.block_on(gateway::quota(g, a)),
        Command::View(a) => rt()?.block_on(gateway::view(g, a)),
    }
}

pub use crate::output::{init_tracing, report_error};
