//! `pinfleet destroy CLUSTER --yes`: removes everything tagged for the
//! cluster, in dependency order, and reports what it removed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::apply::cluster;
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct DestroyArgs {
    pub cluster: String,
    /// Really delete (without it, only list what would go).
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: DestroyArgs) -> Result<ExitCode> {
    use super::cloud::Target;
    if let t @ (Target::Sim | Target::Kind) = args.cloud.target {
        let name = super::render::load_one(g, &args.cluster)?.cluster.metadata.name;
        if !args.yes {
            writeln!(anstream::stderr(), "would delete the {t:?} cluster {name}. Run with --yes to do it.")?;
            return Ok(ExitCode::SUCCESS);
        }
        let was = if t == Target::Sim {
            crate::sim::local::down(&name).await?
        } else {
            crate::kube::kind::down(&crate::state::home(), &name)?
        };
        let what = if was { "deleted" } else { "was not running" };
        writeln!(anstream::stderr(), "{} {t:?} cluster {name} {what}", "done:".green().bold())?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let name = s.name().to_string();
    let show = |plan: &crate::plan::Plan| -> Result<()> {
        match g.output {
            Format::Text => write!(anstream::stdout(), "{}", crate::plan::show::text(plan, true))?,
            other => print_data(other, plan)?,
        }
        Ok(())
    };
    if !args.yes {
        show(&cluster::destroy_plan(&s.aws, &s.loaded.cluster).await?)?;
        writeln!(anstream::stderr(), "\nNothing deleted. Run `pinfleet destroy {name} --yes` to delete these.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let store = s.store(true).await?.context("state store")?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let removed = cluster::destroy(&s.aws, &s.loaded.cluster, &store, &command, show).await?;
    writeln!(anstream::stderr(), "{} removed {} resource(s) of {name}", "done:".green().bold(), removed.done.len())?;
    s.report_calls(g);
    Ok(ExitCode::SUCCESS)
}
