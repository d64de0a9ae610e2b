//! `pinfleet addons list|render|diff|apply CLUSTER`: the cluster's addon
//! set (packages under the addons folder, chosen and configured by
//! `spec.addons`), rendered, compared with the cluster, and installed.

use std::io::{IsTerminal as _, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::addons::install::{Options, Report};
use crate::addons::{self, Installer, RenderedAddon};
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct AddonsArgs {
    #[command(subcommand)]
    pub command: AddonsCommand,
}

#[derive(Debug, Subcommand)]
pub enum AddonsCommand {
    /// The packages, and which of them a cluster runs with which values.
    List(ListArgs),
    /// Print the objects the cluster's addons render to (YAML).
    Render(RenderArgs),
    /// Unified diff of live vs desired for the fields pinfleet manages;
    /// exits 2 when they differ.
    Diff(ClusterArgs),
    /// Install or upgrade the set: apply in dependency order, wait until
    /// ready, prune what is no longer rendered, record the inventory.
    Apply(ApplyArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    pub cluster: Option<String>,
}

#[derive(Debug, Args)]
pub struct RenderArgs {
    pub cluster: String,
    /// Only this addon.
    #[arg(long)]
    pub addon: Option<String>,
}

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

pub async fn run(g: &GlobalArgs, args: AddonsArgs) -> Result<ExitCode> {
    match args.command {
        AddonsCommand::List(a) => list(g, a),
        AddonsCommand::Render(a) => render(g, a),
        AddonsCommand::Diff(a) => diff(g, a).await,
        AddonsCommand::Apply(a) => {
            let loaded = super::render::load_one(g, &a.cluster.cluster)?;
            let kubeconfig =
                a.cluster.cloud.target.kubeconfig_or(a.cluster.kubeconfig.as_deref(), &loaded.cluster.metadata.name);
            let opts = Options {
                timeout: a.timeout,
                prune_crds: a.cluster.prune_crds,
                progress: std::io::stderr().is_terminal(),
            };
            let set = rendered(g, &loaded.cluster)?;
            let report = install(g, &set, &kubeconfig, &opts).await?;
            if a.cluster.cloud.target.aws().is_some() {
                let s = Session::open(g, &a.cluster.cluster, &a.cluster.cloud).await?;
                record(&s, &report).await?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The cluster's addons, rendered (errors located: addon, file, line).
pub fn rendered(g: &GlobalArgs, cluster: &crate::spec::Cluster) -> Result<Vec<RenderedAddon>> {
    addons::rendered(&g.addons_dir, cluster)
}

fn list(g: &GlobalArgs, a: ListArgs) -> Result<ExitCode> {
    let packages = addons::load_all(&g.addons_dir)?;
    let chosen = match &a.cluster {
        Some(c) => Some(super::render::load_one(g, c)?.cluster),
        None => None,
    };
    let rows = addons::catalog(&packages, chosen.as_ref())?;
    if g.output != Format::Text {
        print_data(g.output, &rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let enabled = match r.enabled {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            };
            vec![r.name.clone(), r.version.clone(), enabled.into(), r.namespace.clone(), r.depends_on.join(",")]
        })
        .collect();
    let table = crate::output::table(&["NAME", "VERSION", "ENABLED", "NAMESPACE", "DEPENDS ON"], &cells);
    write!(anstream::stdout(), "{table}")?;
    Ok(ExitCode::SUCCESS)
}

fn render(g: &GlobalArgs, a: RenderArgs) -> Result<ExitCode> {
    let loaded = super::render::load_one(g, &a.cluster)?;
    let mut set = rendered(g, &loaded.cluster)?;
    if let Some(only) = &a.addon {
        set.retain(|x| &x.name == only);
        if set.is_empty() {
            anyhow::bail!("cluster {} has no addon {only} enabled", loaded.cluster.metadata.name);
        }
    }
    if g.output != Format::Text {
        print_data(g.output, &set)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = anstream::stdout();
    for a in &set {
        for o in &a.objects {
            writeln!(out, "---\n# addon {} {}: {}", a.name, a.version, o.key)?;
            write!(out, "{}", serde_saphyr::to_string(&o.value)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn diff(g: &GlobalArgs, a: ClusterArgs) -> Result<ExitCode> {
    let loaded = super::render::load_one(g, &a.cluster)?;
    let set = rendered(g, &loaded.cluster)?;
    let kubeconfig = a.cloud.target.kubeconfig_or(a.kubeconfig.as_deref(), &loaded.cluster.metadata.name);
    let client = addons::install::connect(&kubeconfig).await?;
    let diffs = Installer::new(client).diff(&set, a.prune_crds).await?;
    if g.output != Format::Text {
        print_data(g.output, &diffs)?;
    } else {
        for d in &diffs {
            write!(anstream::stdout(), "{}", crate::output::colored_diff(&d.unified()))?;
        }
        if diffs.is_empty() {
            writeln!(anstream::stderr(), "addons of {} match the cluster", loaded.cluster.metadata.name)?;
        } else {
            writeln!(anstream::stderr(), "{} object(s) differ", diffs.len())?;
        }
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

/// Records the installed versions in the cluster's state store.
pub async fn record(s: &Session, report: &Report) -> Result<()> {
    match s.store(false).await? {
        Some(store) => addons::record(&store, report).await,
        None => Ok(()),
    }
}
