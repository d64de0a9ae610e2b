//! `pinfleet upgrade CLUSTER [--instance-group G…] [--yes]`: replace the
//! machines that are not on their group's current launch-template version
//! (or are annotated `pinfleet.dev/needs-update`, or all with `--force`),
//! under the cluster lock, resumably.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::output::{print_data, Format};
use crate::rollout::run::{self, Options};
use crate::state::lock::Lock;
use crate::state::pki::Pki;

/// How each machine's replacement is awaited and checked (shared by
/// `upgrade`, `ami rollout` and `fleet rollout`).
#[derive(Debug, Clone, Args)]
pub struct RollTuning {
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
    /// Roll without the end-to-end gates (the cluster phase after each
    /// group, the platform smoke at the end); recorded in history.
    #[arg(long)]
    pub skip_e2e: bool,
    /// Change the control plane without a fresh, verified etcd backup
    /// (`pinfleet etcd backups`); the reason is recorded in history.
    #[arg(long, value_name = "REASON", env = "PINFLEET_SKIP_BACKUP")]
    pub skip_backup: Option<String>,
}

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
    #[command(flatten)]
    pub tuning: RollTuning,
    /// Terminate control-plane machines without removing their etcd members
    /// first (a rehearsal of the quorum loss this prevents; never on a real cluster).
    #[arg(long, hide = true)]
    pub skip_etcd_member_removal: bool,
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
            boot_timeout: self.tuning.boot_timeout,
            validate_count: self.tuning.validate_count,
            validate_interval: self.tuning.validate_interval,
            canary: !self.tuning.no_canary,
            etcd_member_removal: !self.skip_etcd_member_removal,
            e2e: !self.tuning.skip_e2e,
            skip_backup: self.tuning.skip_backup.clone(),
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
    run::refuse_unknown_groups(&s.loaded.cluster, &args.roll.groups)?;
    // The control plane of a cluster taken over from kops (or from kubeadm
    // without its etcd CA, or with files only its machines hold) is not
    // rolled: refused before the first write, and a preview says the way
    // that is.
    let state = crate::state::Store::open_existing(&s.loaded.cluster.spec.state_store, s.name(), Some(&s.aws)).await?;
    let adopted = match &state {
        Some(store) => run::refuse_adopted_control_plane(&s.loaded.cluster, store, &args.roll.groups).await,
        None => Ok(false),
    };
    if let (true, Err(e)) = (args.yes, &adopted) {
        return Err(anyhow::anyhow!("{e}"));
    }
    if let (true, Some(store)) = (args.yes, &state) {
        let s3 = Some(&s.aws as &dyn crate::state::S3Access);
        run::refuse_kops_keys_changed(&s.loaded.cluster, store, s3, &args.roll.groups).await?;
    }
    let kubeconfig = args.cloud.target.kubeconfig_or(args.roll.kubeconfig.as_deref(), s.name());
    let (store, pki, client) = match (s.roll_target(&kubeconfig).await, &adopted) {
        (Ok(target), _) => target,
        // A preview that cannot reach the cluster still says why its
        // control plane would not roll.
        (Err(e), Err(refused)) => {
            anyhow::bail!("{refused}\n(the preview could not read the cluster for the rest: {e:#})")
        }
        (Err(e), Ok(_)) => return Err(e),
    };
    let adopted = match adopted {
        Ok(true) => run::refuse_kubeadm_control_plane(&s.loaded.cluster, &client).await.err(),
        Ok(false) => None,
        Err(e) => Some(e),
    };
    let opts = args.roll.options();
    if !args.yes {
        let preview = run::preview(&s.aws, &s.loaded.cluster, &client, &opts).await?;
        let pending = preview.pending;
        match g.output {
            Format::Text => {
                write!(anstream::stdout(), "{}", crate::views::cluster::tables::roll_status_table(&preview.groups))?;
                write!(anstream::stdout(), "{}", crate::views::cluster::tables::version_steps(&preview))?;
            }
            other => print_data(other, &preview)?,
        }
        let name = s.name();
        if pending > 0 {
            writeln!(
                anstream::stderr(),
                "{pending} changes are pending; `--yes` applies them first (see `pinfleet plan {name}`)"
            )?;
        }
        // The roll's backup gate, read only: what `--yes` would stand on.
        let control_plane_pending =
            preview.groups.iter().any(|g| g.role == crate::spec::Role::ControlPlane && g.needs_update > 0);
        let backups = &s.loaded.cluster.spec.etcd.backups;
        if let (true, Some(why)) = (control_plane_pending && backups.enabled, &opts.skip_backup) {
            writeln!(anstream::stderr(), "The roll skips the control plane's etcd backup (--skip-backup): {why}")?;
        }
        if control_plane_pending && backups.enabled && opts.skip_backup.is_none() && adopted.is_none() {
            let list = crate::etcd::agent::list(&store).await?;
            if let crate::etcd::policy::Fresh::No(stale) =
                crate::etcd::policy::fresh(&list, backups.fresh_for.0, chrono::Utc::now())
            {
                writeln!(
                    anstream::stderr(),
                    "The roll changes the control plane, which needs a verified etcd backup younger than {} first: {stale}. `--yes` asks the agent for one; where none runs, take one on a control-plane machine (`pinfleet etcd backup {name}`) or roll with --skip-backup REASON",
                    backups.fresh_for
                )?;
            }
        }
        match &adopted {
            Some(e) => writeln!(anstream::stderr(), "\nNothing changed. {e}")?,
            None => writeln!(anstream::stderr(), "\nNothing changed. Run `pinfleet upgrade {name} --yes` to roll.")?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let reports = Lock::with(&store, &command, roll_locked(g, &s, &store, &pki, client, &opts, "upgrade")).await?;
    let replaced: usize = reports.iter().map(|r| r.replaced).sum();
    writeln!(anstream::stderr(), "{} {replaced} machine(s) replaced in {}", "done:".green().bold(), s.name())?;
    Ok(ExitCode::SUCCESS)
}

/// A roll under the lock (the caller holds it), shown as the output format asks.
pub async fn roll_locked(
    g: &GlobalArgs,
    s: &Session,
    store: &crate::state::Store,
    pki: &Pki,
    client: kube::Client,
    opts: &Options,
    why: &str,
) -> Result<Vec<crate::rollout::driver::GroupReport>> {
    let view = crate::output::RollView::new(g.output == Format::Json);
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let on = |e: crate::rollout::driver::Event| view.show(&e);
    let result = run::upgrade(&s.aws, &s.loaded.cluster, store, pki, client, opts, why, &command, &on).await;
    view.clear();
    result
}
