//! `pinfleet plan CLUSTER`: what apply would change, and why.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::apply::prepare::prepare;
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct PlanArgs {
    pub cluster: String,
    /// Exit 0 when there are no changes, 2 when there are, 1 on errors.
    #[arg(long)]
    pub detailed_exitcode: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: PlanArgs) -> anyhow::Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let prepared = prepare(&s.aws, &s.loaded.cluster).await?;
    for w in &prepared.warnings {
        tracing::warn!("{w}");
    }
    match g.output {
        Format::Text => {
            write!(anstream::stdout(), "{}", crate::plan::show::text(&prepared.plan, true))?;
            for line in super::capacity::held_lines(&s).await {
                writeln!(anstream::stdout(), "{line}")?;
            }
        }
        other => print_data(other, &prepared.plan)?,
    }
    s.report_calls(g);
    Ok(if args.detailed_exitcode && !prepared.plan.is_empty() { ExitCode::from(2) } else { ExitCode::SUCCESS })
}
