//! `pinfleet fleet rollout status`: the latest rollout, who holds the fleet
//! lock, each stage and cluster with why it is not moving, and a rolling
//! cluster's groups.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

use crate::cli::cloud::CloudArgs;
use crate::cli::GlobalArgs;
use crate::fleet::Folder;
use crate::output::Format;

pub async fn status(g: &GlobalArgs, folder: &Folder, cloud: &CloudArgs) -> Result<ExitCode> {
    let view = crate::fleet::status::read(folder, super::aws_target(cloud)?)
        .await?
        .context("no fleet rollout has been started (`pinfleet fleet rollout apply`)")?;
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", view.text())?,
        other => crate::output::print_data(other, &view)?,
    }
    Ok(ExitCode::SUCCESS)
}
