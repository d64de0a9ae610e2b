//! `pinfleet schema`: the JSON Schema of the cluster format.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::GlobalArgs;
use crate::spec::schema;

#[derive(Debug, Args)]
pub struct SchemaArgs {
    /// The partial schema (no required fields), for bases and files that extend one.
    #[arg(long)]
    pub partial: bool,
}

pub fn run(_g: &GlobalArgs, args: SchemaArgs) -> anyhow::Result<ExitCode> {
    let s = if args.partial { schema::partial_schema() } else { schema::cluster_schema() };
    anstream::stdout().write_all(schema::to_pretty(&s).as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
