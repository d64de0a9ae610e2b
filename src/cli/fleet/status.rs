//! `pinfleet fleet rollout status`: the latest rollout, who holds the fleet
//! lock, each stage and cluster with why it is not moving, and a rolling
//! cluster's groups.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use chrono::Utc;

use crate::cli::cloud::CloudArgs;
use crate::cli::GlobalArgs;
use crate::fleet::Folder;
use crate::output::Format;

pub async fn status(g: &GlobalArgs, folder: &Folder, cloud: &CloudArgs) -> Result<ExitCode> {
    let (book, aws) = crate::fleet::aws::open_book(folder, super::aws_target(cloud)?, false).await?;
    let r = book.latest().await?.context("no fleet rollout has been started (`pinfleet fleet rollout apply`)")?;
    let approved = book.approvals(r.number).await?;
    let lock = book.store.get_json::<crate::state::lock::LockInfo>(crate::state::lock::LOCK_KEY).await?;
    let windows = (&folder.spec, &folder.members[..]);
    let groups = crate::fleet::aws::rolling_progress(folder, &r, &aws)
        .await?
        .into_iter()
        .filter_map(|(name, progress)| {
            let l = folder.loaded.iter().find(|l| l.cluster.metadata.name == name)?;
            Some((name, crate::output::fleet_group_rows(&l.cluster, progress.as_ref())))
        })
        .collect();
    let locks = crate::fleet::aws::pending_locks(folder, &r, &aws).await?;
    let view = crate::output::FleetStatusView::new(&r, &windows, &approved, lock.as_ref(), groups, &locks, Utc::now());
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::output::fleet_status(&view))?,
        other => crate::output::print_data(other, &view)?,
    }
    Ok(ExitCode::SUCCESS)
}
