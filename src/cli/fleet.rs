//! `pinfleet fleet rollout plan|apply|status|approve|revert|unlock`: a
//! staged rollout of an AMI or a Kubernetes version across the clusters
//! folder (`fleet::run` carries it out; its record lives in the state store).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use chrono::Utc;
use clap::{Args, Subcommand};

use super::cloud::CloudArgs;
use super::upgrade::RollTuning;
use super::GlobalArgs;
use crate::fleet::aws::AwsFleet;
use crate::fleet::run::{self, Book, Clock, Outcome};
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
    #[arg(long, conflicts_with = "kubernetes_version", required_unless_present = "kubernetes_version")]
    pub ami: Option<String>,
    /// Move to this Kubernetes version.
    #[arg(long)]
    pub kubernetes_version: Option<String>,
}

impl TargetArgs {
    fn target(&self) -> Result<Target> {
        match (&self.ami, &self.kubernetes_version) {
            (Some(a), _) => Ok(Target::Ami(a.clone())),
            (None, Some(v)) => Ok(Target::KubernetesVersion(v.clone())),
            (None, None) => bail!("name what to roll: --ami ID|newest|PATTERN or --kubernetes-version V"),
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
    let opts = crate::spec::LoadOptions { known_addons: super::validate::known_addons(&g.addons_dir) };
    let folder = Folder::load(&g.clusters_dir, &opts)?;
    match command {
        RolloutCommand::Plan(a) => plan(g, &folder, a).await,
        RolloutCommand::Apply(a) => apply(g, &folder, a).await,
        RolloutCommand::Status(a) => status(g, &folder, &a.cloud).await,
        RolloutCommand::Approve(a) => approve(&folder, a).await,
        RolloutCommand::Revert(a) => revert(g, &folder, a).await,
        RolloutCommand::Unlock(a) => unlock(&folder, a).await,
    }
}

/// The plan at `now` and the fleet's clusters connected (reads only).
async fn connect(
    g: &GlobalArgs,
    folder: &Folder,
    target: &Target,
    cloud: &CloudArgs,
    roll: Option<&FleetRollArgs>,
) -> Result<(fleet::FleetPlan, AwsFleet)> {
    let aws_target = cloud.target.aws().context("fleet rollouts work on AWS clusters (--target aws or localstack)")?;
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
    let on = Box::new(move |cluster: &str, e: crate::rollout::driver::Event| {
        if let Some(line) = crate::output::fleet_cluster_event(cluster, &e, json) {
            let _ = writeln!(anstream::stderr(), "{line}");
        }
    });
    let roll = roll.options();
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let fleet = AwsFleet::connect(folder, &staged, aws_target, &kubeconfig, roll, command, on).await?;
    Ok((plan, fleet))
}

async fn book(folder: &Folder, staged: &[String], fleet: &AwsFleet) -> Result<Book> {
    let url = folder.state_store(staged)?;
    Book::open(&url, fleet.any_aws()).await.with_context(|| format!("opening the fleet's state store {url}"))
}

async fn plan(g: &GlobalArgs, folder: &Folder, a: PlanArgs) -> Result<ExitCode> {
    let target = a.target.target()?;
    let (_, fleet) = connect(g, folder, &target, &a.cloud, None).await?;
    let to = fleet.targets(&target, Utc::now()).await?;
    show_plan(g, &with_snapshots(folder, &fleet, &target, &to).await)?;
    writeln!(
        anstream::stderr(),
        "\nNothing changed. `pinfleet fleet rollout apply` with the same target carries it out."
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The plan with each cluster's from (what it runs now) and to (the target there).
async fn with_snapshots(
    folder: &Folder,
    fleet: &AwsFleet,
    target: &Target,
    to: &std::collections::BTreeMap<String, fleet::rollout::Snapshot>,
) -> fleet::FleetPlan {
    use crate::fleet::run::Fleet as _;
    let mut from = std::collections::BTreeMap::new();
    for name in folder.staged() {
        let now = match fleet.current(&name).await {
            Ok(s) => s.summary(),
            Err(e) => format!("? ({e:#})"),
        };
        from.insert(name, now);
    }
    let mut p = fleet::plan(&folder.spec, &folder.members, target, &from, Utc::now());
    for c in p.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()) {
        if let Some(t) = to.get(&c.cluster) {
            c.to = t.summary();
        }
    }
    p
}

fn show_plan(g: &GlobalArgs, plan: &fleet::FleetPlan) -> Result<()> {
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::output::fleet_plan(plan))?,
        other => crate::output::print_data(other, plan)?,
    }
    Ok(())
}

fn say(g: &GlobalArgs, n: &run::Note) {
    if g.output == Format::Json {
        let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(n).unwrap_or_default());
    } else {
        let _ = writeln!(anstream::stderr(), "{}", crate::output::fleet_note(n));
    }
}

async fn apply(g: &GlobalArgs, folder: &Folder, a: ApplyArgs) -> Result<ExitCode> {
    let target = a.target.target()?;
    let (plan, fleet) = connect(g, folder, &target, &a.cloud, Some(&a.roll)).await?;
    let book = book(folder, &plan.staged(), &fleet).await?;
    let record = match book.in_progress(&target).await? {
        Some(r) => {
            let since = r.created_at.format("%Y-%m-%d %H:%M UTC");
            writeln!(
                anstream::stderr(),
                "picking up fleet rollout #{} ({}), started {since} by {}",
                r.number,
                r.target,
                r.by
            )?;
            r
        }
        None => {
            // Every cluster read before the first write: a cluster that cannot be read stops the run here.
            let to = fleet.targets(&target, Utc::now()).await?;
            show_plan(g, &with_snapshots(folder, &fleet, &target, &to).await)?;
            if !a.yes {
                writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to start the rollout.")?;
                return Ok(ExitCode::SUCCESS);
            }
            let number = book.retire_latest().await?;
            let (who, host) = crate::state::whoami();
            fleet::rollout::FleetRollout::new(number, &plan, &folder.spec, &to, &format!("{who}@{host}"), Utc::now())
        }
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let windows = (&folder.spec, &folder.members[..]);
    let opts = run::Options { wait: !a.no_wait, ..Default::default() };
    let (r, outcome) =
        run::apply(&fleet, &book, record, &windows, Clock::wall(), opts, &command, &|n| say(g, &n)).await?;
    match outcome {
        Outcome::Finished => {
            writeln!(
                anstream::stderr(),
                "fleet rollout #{} is done: every staged cluster is on its target ({})",
                r.number,
                r.target
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Waiting { until, .. } => {
            let when = until.map_or("an approval".to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
            writeln!(
                anstream::stderr(),
                "fleet rollout #{} waits (until {when}); run apply again to go on, `status` says why",
                r.number
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Outcome::Halted(reason) => {
            writeln!(anstream::stderr(), "fleet rollout #{} halted: {reason}\n`pinfleet fleet rollout revert --yes` rolls the touched clusters back", r.number)?;
            Ok(ExitCode::from(1))
        }
    }
}

/// The latest rollout and its book (without connecting to the clusters' APIs).
async fn latest(
    folder: &Folder,
    cloud: &CloudArgs,
) -> Result<(Book, fleet::rollout::FleetRollout, crate::cloud::aws::Aws)> {
    let aws_target = cloud.target.aws().context("fleet rollouts work on AWS clusters (--target aws or localstack)")?;
    let staged = folder.staged();
    let url = folder.state_store(&staged)?;
    let region = folder
        .loaded
        .iter()
        .find(|l| staged.contains(&l.cluster.metadata.name))
        .map(|l| l.cluster.spec.cloud.region.clone());
    let aws = crate::cloud::aws::Aws::connect(&crate::cloud::aws::AwsOptions::from_env(aws_target, region)?).await?;
    let book = Book::open(&url, Some(&aws)).await?;
    let r = book.latest().await?.context("no fleet rollout has been started (`pinfleet fleet rollout apply`)")?;
    Ok((book, r, aws))
}

async fn status(g: &GlobalArgs, folder: &Folder, cloud: &CloudArgs) -> Result<ExitCode> {
    let (book, r, aws) = latest(folder, cloud).await?;
    let approved = book.approvals(r.number).await?;
    let lock = book.store.get_json::<crate::state::lock::LockInfo>(crate::state::lock::LOCK_KEY).await?;
    let windows = (&folder.spec, &folder.members[..]);
    // Each rolling cluster's groups, from its own roll progress record.
    let mut groups = std::collections::BTreeMap::new();
    for (_, c) in r.clusters().filter(|(_, c)| c.state == fleet::rollout::ClusterState::Rolling) {
        let Some(l) = folder.loaded.iter().find(|l| l.cluster.metadata.name == c.name) else { continue };
        let store = crate::state::Store::open(&l.cluster.spec.state_store, &c.name, Some(&aws)).await?;
        let progress = store.get_json::<crate::state::progress::RollProgress>(crate::state::progress::KEY).await?;
        let progress =
            progress.filter(|p| c.started_at.is_some_and(|t| p.started_at >= t - chrono::Duration::seconds(5)));
        groups.insert(c.name.clone(), crate::output::fleet_group_rows(&l.cluster, progress.as_ref()));
    }
    let view = crate::output::FleetStatusView::new(&r, &windows, &approved, lock.as_ref(), groups, Utc::now());
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::output::fleet_status(&view))?,
        other => crate::output::print_data(other, &view)?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn approve(folder: &Folder, a: ApproveArgs) -> Result<ExitCode> {
    let (book, r, _) = latest(folder, &a.cloud).await?;
    if r.is_finished() {
        bail!("fleet rollout #{} is {}: nothing to approve", r.number, r.state);
    }
    let Some(stage) = r.stages.iter().find(|s| s.name == a.stage) else {
        bail!(
            "fleet rollout #{} has no stage {} (its stages: {})",
            r.number,
            a.stage,
            r.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    };
    if !stage.approval {
        bail!("stage {} does not need an approval (fleet.yaml: approval: false)", a.stage);
    }
    let (who, host) = crate::state::whoami();
    book.approve(r.number, &a.stage, &format!("{who}@{host}"), Utc::now()).await?;
    writeln!(
        anstream::stderr(),
        "approved stage {} of fleet rollout #{}; the next `apply` starts it",
        a.stage,
        r.number
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn revert(g: &GlobalArgs, folder: &Folder, a: RevertArgs) -> Result<ExitCode> {
    let (_, r, _) = latest(folder, &a.cloud).await?;
    let (_, fleet) = connect(g, folder, &r.target, &a.cloud, Some(&a.roll)).await?;
    let book = book(
        folder,
        &r.stages.iter().flat_map(|s| s.clusters.iter().map(|c| c.name.clone())).collect::<Vec<_>>(),
        &fleet,
    )
    .await?;
    let back: Vec<String> = r
        .clusters()
        .filter(|(_, c)| c.touched())
        .map(|(_, c)| format!("{}: {} → {}", c.name, c.to.summary(), c.from.summary()))
        .collect();
    if back.is_empty() {
        writeln!(anstream::stderr(), "fleet rollout #{} touched no cluster: nothing to revert", r.number)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        anstream::stderr(),
        "fleet rollout #{} ({}): back to what each cluster ran before\n  {}",
        r.number,
        r.target,
        back.join("\n  ")
    )?;
    if !a.yes {
        writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to roll them back.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let r = run::revert(&fleet, &book, r, Clock::wall(), &command, &|n| say(g, &n)).await?;
    writeln!(anstream::stderr(), "fleet rollout #{} is reverted", r.number)?;
    Ok(ExitCode::SUCCESS)
}

async fn unlock(folder: &Folder, a: UnlockArgs) -> Result<ExitCode> {
    if !a.force {
        bail!("this removes the fleet lock whoever holds it; say --force");
    }
    let (book, _, _) = latest(folder, &a.cloud).await?;
    match crate::state::lock::force_unlock(&book.store).await? {
        Some(info) => writeln!(
            anstream::stderr(),
            "removed the fleet lock held by {} on {} (pid {})",
            info.holder,
            info.host,
            info.pid
        )?,
        None => writeln!(anstream::stderr(), "the fleet was not locked")?,
    }
    Ok(ExitCode::SUCCESS)
}
