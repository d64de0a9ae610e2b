//! `pinfleet fleet rollout revert [--yes]`: every cluster the latest
//! rollout touched, back to what it ran before.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use super::{connect, say, RevertArgs};
use crate::cli::GlobalArgs;
use crate::fleet::run::{self, Clock};
use crate::fleet::Folder;

pub async fn revert(g: &GlobalArgs, folder: &Folder, a: RevertArgs) -> Result<ExitCode> {
    let (book, _) = crate::fleet::aws::open_book(folder, super::aws_target(&a.cloud)?, false).await?;
    let r = book.latest().await?.context("no fleet rollout has been started (`pinfleet fleet rollout apply`)")?;
    let Some(preview) = crate::fleet::text::fleet_revert_preview(&r) else {
        writeln!(anstream::stderr(), "fleet rollout #{} touched no cluster: nothing to revert", r.number)?;
        return Ok(ExitCode::SUCCESS);
    };
    write!(anstream::stderr(), "{preview}")?;
    if !a.yes {
        writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to roll them back.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let (_, fleet) = connect(g, folder, &r.target, &a.cloud, Some(&a.roll)).await?;
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let r = run::revert(&fleet, &book, r, Clock::wall(), &command, &|n| say(g, &n)).await?;
    writeln!(anstream::stderr(), "fleet rollout #{} is reverted", r.number)?;
    Ok(ExitCode::SUCCESS)
}
