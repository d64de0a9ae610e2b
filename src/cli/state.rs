//! `pinfleet state …`: looking after the state store (`unlock --force`
//! breaks a lock whose holder is gone; `show` prints the lock and revisions).

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::output::{print_data, Format};
use crate::state::lock::{force_unlock, LockInfo, LOCK_KEY};

#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    pub what: StateCommand,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Break the cluster lock (only when its holder is gone).
    Unlock {
        cluster: String,
        /// Required: breaking a live run's lock lets two runs collide.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        cloud: CloudArgs,
    },
    /// Show who holds the lock, if anyone.
    Lock {
        cluster: String,
        #[command(flatten)]
        cloud: CloudArgs,
    },
}

pub async fn run(g: &GlobalArgs, args: StateArgs) -> Result<ExitCode> {
    match args.what {
        StateCommand::Unlock { cluster, force, cloud } => {
            if !force {
                bail!("breaking a lock can let two runs change {cluster} at once; if its holder is gone, add --force");
            }
            let s = Session::open(g, &cluster, &cloud).await?;
            let Some(store) = s.store(false).await? else {
                writeln!(anstream::stdout(), "{cluster} is not locked (no state store yet)")?;
                return Ok(ExitCode::SUCCESS);
            };
            match force_unlock(&store).await? {
                Some(info) => writeln!(
                    anstream::stdout(),
                    "removed the lock held by {} on {} (pid {}, `{}`)",
                    info.holder,
                    info.host,
                    info.pid,
                    info.command
                )?,
                None => writeln!(anstream::stdout(), "{cluster} is not locked")?,
            }
        }
        StateCommand::Lock { cluster, cloud } => {
            let s = Session::open(g, &cluster, &cloud).await?;
            let info = match s.store(false).await? {
                Some(store) => store.get_json::<LockInfo>(LOCK_KEY).await?,
                None => None,
            };
            match (g.output, info) {
                (Format::Text, None) => writeln!(anstream::stdout(), "{cluster} is not locked")?,
                (Format::Text, Some(i)) => writeln!(
                    anstream::stdout(),
                    "{cluster} is locked by {} on {} (pid {}, `{}`) since {}, expires {}",
                    i.holder,
                    i.host,
                    i.pid,
                    i.command,
                    i.acquired_at,
                    i.expires_at
                )?,
                (other, info) => print_data(other, &info)?,
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
