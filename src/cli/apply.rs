//! `pinfleet apply CLUSTER [--yes]` (and the shared body of `bootstrap`):
//! plan under the cluster lock, then walk the plan.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::apply::{self, cluster, prepare};
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct ApplyArgs {
    pub cluster: String,
    /// Make the changes (without it, only show the plan).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Changes to run at once.
    #[arg(long, default_value_t = apply::DEFAULT_PARALLELISM)]
    pub parallelism: usize,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// Leave the addon set alone (install it later with `pinfleet addons apply`).
    #[arg(long, env = "PINFLEET_SKIP_ADDONS")]
    pub skip_addons: bool,
    /// Install the addons through this kubeconfig (default: the target's,
    /// e.g. the one this command writes for an AWS cluster).
    #[arg(long)]
    pub addons_kubeconfig: Option<std::path::PathBuf>,
    /// How long to wait for each addon to be ready.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub addons_timeout: std::time::Duration,
    /// How long to wait for a new cluster's API server to answer before the
    /// addons (machines boot, kubeadm init runs: minutes on real AWS).
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    pub api_timeout: std::time::Duration,
}

pub async fn run(g: &GlobalArgs, args: ApplyArgs) -> Result<ExitCode> {
    if args.cloud.target.aws().is_none() {
        anyhow::bail!("apply --target {:?} is run through `local`", args.cloud.target);
    }
    run_apply(g, args, false).await
}

fn show(g: &GlobalArgs, plan: &crate::plan::Plan) -> Result<()> {
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::plan::show::text(plan, true))?,
        other => print_data(other, plan)?,
    }
    Ok(())
}

/// Apply (or bootstrap) on an AWS target; local targets are `local`'s
/// (the command's entry chooses).
pub async fn run_apply(g: &GlobalArgs, args: ApplyArgs, bootstrap: bool) -> Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    // Rendered before anything changes: a broken manifest stops the run here.
    let addon_set =
        if args.skip_addons { Vec::new() } else { crate::addons::rendered(&g.addons_dir, &s.loaded.cluster)? };
    let command = if bootstrap { "bootstrap" } else { "apply" };
    if !args.yes {
        // A preview: no bucket, no PKI, no lock, no changes.
        let store = s.store(false).await?;
        let plan = cluster::preview(&s.aws, &s.loaded.cluster, store.as_ref(), bootstrap).await?;
        show(g, &plan)?;
        if !plan.is_empty() {
            let name = s.name();
            writeln!(
                anstream::stderr(),
                "\nNothing changed. Run `pinfleet {command} {name} --yes` to make these changes."
            )?;
        }
        s.report_calls(g);
        return Ok(ExitCode::SUCCESS);
    }
    // Everything the cluster needs from the endpoint is there, before the
    // first write (the state bucket, the PKI).
    prepare::preflight(&s.aws, &s.loaded.cluster).await?;
    let store = s.store(true).await?.context("state store")?;
    let opts = cluster::Options {
        bootstrap,
        parallelism: args.parallelism,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let outcome = cluster::apply(&s.aws, &s.loaded.cluster, &store, &opts, |p| show(g, p)).await?;
    if let Some(k) = &outcome.kubeconfig {
        writeln!(anstream::stderr(), "kubeconfig: {}", k.display())?;
    }
    let done = "done:".green().bold().to_string();
    match outcome.report {
        Some(r) => writeln!(anstream::stderr(), "{done} {} change(s) applied to {}", r.done.len(), s.name())?,
        None => writeln!(anstream::stderr(), "{done} {} already matches its definition", s.name())?,
    }
    s.report_calls(g);
    if !args.skip_addons {
        let kubeconfig = args.cloud.target.kubeconfig_or(args.addons_kubeconfig.as_deref(), s.name());
        crate::kube::wait::api_server(&kubeconfig, args.api_timeout, s.name())
            .await
            .context("the machines are applied, but the addons are not")?;
        let report = install_addons(g, &s.loaded.cluster, &addon_set, &kubeconfig, &args).await?;
        s.record_addons(&report).await?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn install_addons(
    g: &GlobalArgs,
    cluster: &crate::spec::Cluster,
    set: &[crate::addons::RenderedAddon],
    kubeconfig: &std::path::Path,
    args: &ApplyArgs,
) -> Result<crate::addons::install::Report> {
    use std::io::IsTerminal as _;
    let opts = crate::addons::install::Options {
        timeout: args.addons_timeout,
        prune_crds: false,
        progress: std::io::stderr().is_terminal(),
    };
    super::addons::install(g, set, kubeconfig, &opts).await.with_context(|| {
        format!("installing the addons (re-run, or `pinfleet addons apply {}`, to resume)", cluster.metadata.name)
    })
}
