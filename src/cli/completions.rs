//! `pinfleet completions SHELL`: shell completion scripts.

use std::process::ExitCode;

use clap::{Args, CommandFactory};
use clap_complete::Shell;

use super::{Cli, GlobalArgs};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: Shell,
}

pub fn run(_g: &GlobalArgs, args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    clap_complete::generate(args.shell, &mut Cli::command(), "pinfleet", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}
