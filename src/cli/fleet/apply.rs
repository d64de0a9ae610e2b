//! `pinfleet fleet rollout apply`: starts a rollout (after showing its plan,
//! with --yes), or picks up the one in progress towards the same target,
//! and carries it out until it is done, halted, or must wait. Under
//! `-o json`, stdout is one JSON object per line, each with a `type`:
//! `plan`, `note` (the rollout's progress), `cluster` (a cluster's roll),
//! `outcome`.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;

use super::{connect, say, show_plan, ApplyArgs};
use crate::cli::GlobalArgs;
use crate::fleet::run::{self, Clock, Outcome};
use crate::fleet::{self, Folder};
use crate::output::Format;
use crate::state::lock::Lock;

pub async fn apply(g: &GlobalArgs, folder: &Folder, a: ApplyArgs) -> Result<ExitCode> {
    let target = a.target.target()?;
    let (plan, fleet) = connect(g, folder, &target, &a.cloud, Some(&a.roll)).await?;
    let (book, _) = crate::fleet::aws::open_book(folder, super::aws_target(&a.cloud)?, true).await?;
    // Only a look at the plan: nothing to lock.
    if !a.yes && book.in_progress(&target).await?.is_none() {
        let to = fleet.targets(&target, Utc::now()).await?;
        show(g, &fleet.plan(folder, &target, &to).await)?;
        writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to start the rollout.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // The lock first: a run refused by another says only that.
    let (r, outcome) = Lock::with(&book.store, &command, async {
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
                show(g, &fleet.plan(folder, &target, &to).await)?;
                let number = book.retire_latest().await?;
                let (who, host) = crate::state::whoami();
                fleet::rollout::FleetRollout::new(
                    number,
                    &plan,
                    &folder.spec,
                    &to,
                    &format!("{who}@{host}"),
                    Utc::now(),
                )
            }
        };
        let windows = (&folder.spec, &folder.members[..]);
        let opts = run::Options { wait: !a.no_wait, ..Default::default() };
        run::apply_held(&fleet, &book, record, &windows, Clock::wall(), opts, &|n| say(g, &n)).await
    })
    .await?;
    let (line, state, code) = crate::fleet::text::fleet_outcome(r.number, &r.target.to_string(), &outcome);
    if g.output == Format::Json {
        let until = match &outcome {
            Outcome::Waiting { until, .. } => *until,
            _ => None,
        };
        let v = serde_json::json!({"type": "outcome", "number": r.number, "outcome": state, "until": until, "message": line});
        writeln!(anstream::stdout(), "{v}")?;
    }
    writeln!(anstream::stderr(), "{line}")?;
    Ok(ExitCode::from(code))
}

/// The plan: as text, or under `-o json` one line of the run's stream
/// (`{"type": "plan", "plan": …}`), like every other line it prints.
fn show(g: &GlobalArgs, plan: &fleet::FleetPlan) -> Result<()> {
    if g.output == Format::Json {
        let v = serde_json::json!({"type": "plan", "plan": plan});
        writeln!(anstream::stdout(), "{v}")?;
        Ok(())
    } else {
        show_plan(g, plan)
    }
}
