//! `pinfleet history CLUSTER`: the applied revisions in the state store.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::output::table;
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct HistoryArgs {
    pub cluster: String,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: HistoryArgs) -> Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let history = match s.store(false).await? {
        Some(store) => store.history().await?,
        None => Vec::new(),
    };
    if g.output == Format::Text {
        let rows: Vec<Vec<String>> = history
            .iter()
            .map(|r| {
                vec![
                    r.revision.to_string(),
                    r.applied_at.clone(),
                    match &r.identity {
                        Some(arn) => format!("{}@{} as {arn}", r.by, r.host),
                        None => format!("{}@{}", r.by, r.host),
                    },
                    format!("+{} ~{} -/+{} -{}", r.created, r.updated, r.replaced, r.deleted),
                    r.command.split_whitespace().skip(1).collect::<Vec<_>>().join(" "),
                ]
            })
            .collect();
        write!(anstream::stdout(), "{}", table(&["REVISION", "APPLIED", "BY", "CHANGES", "COMMAND"], &rows))?;
    } else {
        print_data(g.output, &history)?;
    }
    Ok(ExitCode::SUCCESS)
}
