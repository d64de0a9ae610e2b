//! `pinfleet crds`: the platform's workload CRDs as YAML (what
//! addons/platform-crds/manifests/crds.yaml holds; a test keeps it current).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::GlobalArgs;

#[derive(Debug, Args)]
pub struct CrdsArgs {}

pub fn run(_g: &GlobalArgs, _args: CrdsArgs) -> anyhow::Result<ExitCode> {
    anstream::stdout().write_all(crate::workloads::crds_yaml()?.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
