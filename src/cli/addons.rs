//! `pinfleet addons list|render|diff|apply CLUSTER`: the cluster's addon
//! set (packages under the addons folder, chosen and configured by
//! `spec.addons`), rendered, compared with the cluster, and installed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::GlobalArgs;

mod apply;
use crate::addons;
use crate::output::{print_data, Format};
pub use apply::{install, ApplyArgs, ClusterArgs};

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

pub async fn run(g: &GlobalArgs, args: AddonsArgs) -> Result<ExitCode> {
    match args.command {
        AddonsCommand::List(a) => list(g, a),
        AddonsCommand::Render(a) => render(g, a),
        AddonsCommand::Diff(a) => apply::diff(g, a).await,
        AddonsCommand::Apply(a) => apply::apply(g, a).await,
    }
}

fn list(g: &GlobalArgs, a: ListArgs) -> Result<ExitCode> {
    let packages = addons::load_all(&g.addons_dir)?;
    let chosen = match &a.cluster {
        Some(c) => Some(super::render::load_one(g, c)?.cluster),
        None => None,
    };
    let rows = addons::catalog(&packages, chosen.as_ref())?;
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::views::cluster::tables::addon_catalog_table(&rows))?,
        other => print_data(other, &rows)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn render(g: &GlobalArgs, a: RenderArgs) -> Result<ExitCode> {
    let loaded = super::render::load_one(g, &a.cluster)?;
    let mut set = addons::rendered(&g.addons_dir, &loaded.cluster)?;
    if let Some(only) = &a.addon {
        set.retain(|x| &x.name == only);
        if set.is_empty() {
            anyhow::bail!("cluster {} has no addon {only} enabled", loaded.cluster.metadata.name);
        }
    }
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::views::cluster::tables::rendered_addons(&set)?)?,
        other => print_data(other, &set)?,
    }
    Ok(ExitCode::SUCCESS)
}
