//! `pinfleet fleet rollout unlock --force`: removes the fleet lock a run
//! on another host left behind (one killed on this host is taken over).

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{bail, Result};

use super::UnlockArgs;
use crate::fleet::Folder;

pub async fn unlock(folder: &Folder, a: UnlockArgs) -> Result<ExitCode> {
    if !a.force {
        bail!("this removes the fleet lock whoever holds it; say --force");
    }
    let (book, _) = crate::fleet::aws::open_book(folder, super::aws_target(&a.cloud)?, false).await?;
    match crate::state::lock::force_unlock(&book.store).await? {
        Some(info) => writeln!(
            anstream::stderr(),
            "removed the fleet lock held by {} on {} (pid {})",
            info.holder,
            info.host,
            info.pid
        )?,
        None => writeln!(anstream::stderr(), "the fleet was not locked")?,
    }
    Ok(ExitCode::SUCCESS)
}
