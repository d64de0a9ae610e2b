//! `pinfleet render CLUSTER [--out DIR]`: every template rendered for one
//! cluster, with placeholder secrets (real ones are filled at bootstrap).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use owo_colors::OwoColorize;

use super::GlobalArgs;
use crate::output::{print_data, Format};
use crate::render::{BootstrapParams, Renderer};
use crate::spec;

#[derive(Debug, Args)]
pub struct RenderArgs {
    /// Cluster name (under the clusters folder) or path to a cluster file.
    pub cluster: String,
    /// Write the files into this folder instead of printing them.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Loads one cluster named on the command line, with located errors.
pub fn load_one(g: &GlobalArgs, arg: &str) -> anyhow::Result<spec::Loaded> {
    let path = spec::load::resolve_cluster_file(arg, &g.clusters_dir)?;
    let opts = super::validate::load_options(&g.addons_dir);
    spec::load_cluster(&path, &opts)
        .map_err(|d| anyhow::anyhow!("{d}").context(format!("{} is not valid", path.display())))
}

pub fn run(g: &GlobalArgs, args: RenderArgs) -> anyhow::Result<ExitCode> {
    let loaded = load_one(g, &args.cluster)?;
    let cluster = &loaded.cluster;
    let files = Renderer::new().render_all(cluster, &BootstrapParams::placeholder(cluster))?;
    if let Some(dir) = args.out {
        for (rel, content) in &files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&path, content).with_context(|| format!("writing {}", path.display()))?;
            if g.output == Format::Text {
                writeln!(anstream::stdout(), "wrote {}", path.display())?;
            }
        }
        if g.output != Format::Text {
            print_data(g.output, &files.keys().map(|k| dir.join(k).display().to_string()).collect::<Vec<_>>())?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    match g.output {
        Format::Text => {
            let mut out = anstream::stdout();
            for (rel, content) in &files {
                writeln!(out, "{}", format!("# ==> {rel} <==").bold())?;
                write!(out, "{content}")?;
                if !content.ends_with('\n') {
                    writeln!(out)?;
                }
            }
        }
        other => print_data(other, &files)?,
    }
    Ok(ExitCode::SUCCESS)
}
