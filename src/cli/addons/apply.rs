//! `pinfleet addons diff|apply CLUSTER`: the addon set compared with the
//! cluster, and installed into it (shared with `bootstrap` and `apply`).

use std::io::{IsTerminal as _, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;

use super::super::cloud::{CloudArgs, Session};
use super::super::GlobalArgs;
use crate::addons::install::{Options, Report};
use crate::addons::{self, Installer, RenderedAddon};
use crate::output::{print_data, Format};

#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    pub cluster: String,
    /// Kubeconfig of the cluster (default: the one bootstrap wrote for the target).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Also prune Namespaces and CRDs that no addon renders any more.
    #[arg(long)]
    pub prune_crds: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// How long each addon may take to become ready.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

pub async fn apply(g: &GlobalArgs, a: ApplyArgs) -> Result<ExitCode> {
    let loaded = super::super::render::load_one(g, &a.cluster.cluster)?;
    let kubeconfig =
        a.cluster.cloud.target.kubeconfig_or(a.cluster.kubeconfig.as_deref(), &loaded.cluster.metadata.name);
    let opts =
        Options { timeout: a.timeout, prune_crds: a.cluster.prune_crds, progress: std::io::stderr().is_terminal() };
    let cluster = a.cluster.cloud.target.cluster_as_run(loaded.cluster);
    let set = addons::rendered(&g.addons_dir, &cluster)?;
    let report = install(g, &set, &kubeconfig, &opts).await?;
    if a.cluster.cloud.target.aws().is_some() {
        Session::open(g, &a.cluster.cluster, &a.cluster.cloud).await?.record_addons(&report).await?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn diff(g: &GlobalArgs, a: ClusterArgs) -> Result<ExitCode> {
    let loaded = super::super::render::load_one(g, &a.cluster)?;
    let cluster = a.cloud.target.cluster_as_run(loaded.cluster.clone());
    let set = addons::rendered(&g.addons_dir, &cluster)?;
    let kubeconfig = a.cloud.target.kubeconfig_or(a.kubeconfig.as_deref(), &loaded.cluster.metadata.name);
    let client = addons::install::connect(&kubeconfig).await?;
    let diffs = Installer::new(client).diff(&set, a.prune_crds).await?;
    match g.output {
        Format::Text => {
            let (diff, summary) = crate::views::cluster::tables::addon_diffs(&loaded.cluster.metadata.name, &diffs);
            write!(anstream::stdout(), "{diff}")?;
            writeln!(anstream::stderr(), "{summary}")?;
        }
        other => print_data(other, &diffs)?,
    }
    Ok(if diffs.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Installs the cluster's addon set into the cluster behind `kubeconfig`,
/// shown as the output format asks ([`crate::output::AddonView`]).
pub async fn install(
    g: &GlobalArgs,
    set: &[RenderedAddon],
    kubeconfig: &std::path::Path,
    opts: &Options,
) -> Result<Report> {
    let client = addons::install::connect(kubeconfig).await?;
    let view = crate::output::AddonView::new(g.output == Format::Json, opts.progress, set.len());
    let result = Installer::new(client).install(set, opts, &mut |e| view.show(&e)).await;
    view.finish(result.as_ref().ok());
    result
}
