//! `pinfleet fleet rollout apply`: starts a rollout (after showing its plan,
//! with --yes), or picks up the one in progress towards the same target,
//! and carries it out until it is done, halted, or must wait.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;

use super::{connect, say, show_plan, ApplyArgs};
use crate::cli::GlobalArgs;
use crate::fleet::run::{self, Clock, Outcome};
use crate::fleet::{self, Folder};

pub async fn apply(g: &GlobalArgs, folder: &Folder, a: ApplyArgs) -> Result<ExitCode> {
    let target = a.target.target()?;
    let (plan, fleet) = connect(g, folder, &target, &a.cloud, Some(&a.roll)).await?;
    let (book, _) = crate::fleet::aws::open_book(folder, super::aws_target(&a.cloud)?, true).await?;
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
            show_plan(g, &fleet.plan(folder, &target, &to).await)?;
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
