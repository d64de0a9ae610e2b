//! `pinfleet destroy CLUSTER --yes`: removes everything tagged for the
//! cluster, in dependency order, and reports what it removed.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{home, CloudArgs, Session};
use super::GlobalArgs;
use crate::apply::{self, prepare};
use crate::cloud::aws::observe::observe;
use crate::cloud::model;
use crate::output::{print_data, Format};
use crate::state::lock::Lock;
use crate::state::HistoryRecord;

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
        let was = if t == Target::Sim { super::local::sim_down(&name).await? } else { super::local::kind_down(&name)? };
        let what = if was { "deleted" } else { "was not running" };
        writeln!(anstream::stderr(), "{} {t:?} cluster {name} {what}", "done:".green().bold())?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let name = s.name().to_string();
    let lb_name = model::load_balancer_name(&name);
    let show = |plan: &crate::plan::Plan| -> Result<()> {
        match g.output {
            Format::Text => write!(anstream::stdout(), "{}", crate::plan::show::text(plan, true))?,
            other => print_data(other, plan)?,
        }
        Ok(())
    };
    if !args.yes {
        let observed = observe(&s.aws, &name, Some(&lb_name)).await?;
        show(&crate::plan::destroy(&name, &observed))?;
        writeln!(anstream::stderr(), "\nNothing deleted. Run `pinfleet destroy {name} --yes` to delete these.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let store = s.store(true).await?.context("state store")?;
    let full_command = std::env::args().collect::<Vec<_>>().join(" ");
    let removed = Lock::with(&store, &full_command, async {
        let observed = observe(&s.aws, &name, Some(&lb_name)).await?;
        let plan = crate::plan::destroy(&name, &observed);
        show(&plan)?;
        let desired = model::Desired::skeleton(&s.loaded.cluster);
        let revision = store.next_revision().await?;
        let ctx = prepare::context(&s.aws, &s.loaded.cluster, desired, &observed, None, revision);
        let report = apply::execute(&plan, ctx, &apply::Options::default()).await?;
        if !plan.is_empty() {
            let record =
                HistoryRecord::of_plan(revision, &full_command, &plan).acting_as(s.aws.caller_identity().await);
            store.put_json(&format!("{}{:08}.json", crate::state::HISTORY_PREFIX, revision), &record).await?;
        }
        // The cluster no longer exists: its spec and PKI go, its history stays.
        store.delete(crate::state::SPEC_KEY).await?;
        store.delete(crate::state::pki::PKI_KEY).await?;
        let _ = std::fs::remove_file(home().join("kubeconfig").join(format!("{name}.yaml")));
        Ok(report)
    })
    .await?;
    writeln!(anstream::stderr(), "{} removed {} resource(s) of {name}", "done:".green().bold(), removed.done.len())?;
    s.report_calls(g);
    Ok(ExitCode::SUCCESS)
}
