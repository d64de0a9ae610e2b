//! `pinfleet fleet rollout plan --ami …|--kubernetes-version V`: every
//! cluster's stage and place, what it runs and moves to, the earliest starts.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;

use super::{connect, show_plan, PlanArgs};
use crate::cli::GlobalArgs;
use crate::fleet::Folder;

pub async fn plan(g: &GlobalArgs, folder: &Folder, a: PlanArgs) -> Result<ExitCode> {
    let target = a.target.target()?;
    let (_, fleet) = connect(g, folder, &target, &a.cloud, None).await?;
    let to = fleet.targets(&target, Utc::now()).await?;
    show_plan(g, &fleet.plan(folder, &target, &to).await)?;
    writeln!(
        anstream::stderr(),
        "\nNothing changed. `pinfleet fleet rollout apply` with the same target carries it out."
    )?;
    Ok(ExitCode::SUCCESS)
}
