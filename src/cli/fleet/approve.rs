//! `pinfleet fleet rollout approve STAGE`: lets a stage that needs approval
//! start (its own object in the store; the next `apply` sees it).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use chrono::Utc;

use super::ApproveArgs;
use crate::fleet::Folder;

pub async fn approve(folder: &Folder, a: ApproveArgs) -> Result<ExitCode> {
    let (book, _) = crate::fleet::aws::open_book(folder, super::aws_target(&a.cloud)?, false).await?;
    let r = book.latest().await?.context("no fleet rollout has been started (`pinfleet fleet rollout apply`)")?;
    r.approvable(&a.stage).map_err(anyhow::Error::msg)?;
    let (who, host) = crate::state::whoami();
    book.approve(r.number, &a.stage, &format!("{who}@{host}"), Utc::now()).await?;
    writeln!(
        anstream::stderr(),
        "approved stage {} of fleet rollout #{}; the next `apply` starts it",
        a.stage,
        r.number
    )?;
    Ok(ExitCode::SUCCESS)
}
