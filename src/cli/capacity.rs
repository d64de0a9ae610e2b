//! `pinfleet capacity CLUSTER`: the fleet-wide capacity ledger in the
//! cluster's state store (every offering EC2 refused recently, until when,
//! and who met it) and which of the cluster's groups it holds back.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::output::{print_data, table, Format};

#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// A cluster whose state store holds the ledger (every cluster sharing it sees the same).
    pub cluster: String,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: CapacityArgs) -> Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let spec = &s.loaded.cluster.spec;
    let ledgers = crate::state::capacity::all(&spec.state_store, Some(&s.aws)).await?;
    let now = chrono::Utc::now();
    // A group is held back when some offering it has is in the ledger.
    let held: Vec<(String, usize, usize, String)> = spec
        .instance_groups
        .iter()
        .filter_map(|grp| {
            grp.capacity_held(s.name(), spec, &ledgers, now).map(|(n, of, why)| (grp.name.clone(), n, of, why))
        })
        .collect();
    if g.output == Format::Text {
        let rows: Vec<Vec<String>> = ledgers
            .iter()
            .flat_map(|l| l.entries.iter().map(move |e| (l, e)))
            .filter(|(_, e)| e.until > now)
            .map(|(l, e)| {
                vec![
                    format!("{}/{}", l.account, l.region),
                    e.offering.market.as_str().to_string(),
                    e.offering.instance_type.clone(),
                    e.offering.zone.clone(),
                    e.code.clone(),
                    e.since.format("%H:%M:%S").to_string(),
                    e.until.format("%H:%M:%S").to_string(),
                    e.strikes.to_string(),
                    e.by.clone(),
                ]
            })
            .collect();
        let mut out = anstream::stdout();
        if rows.is_empty() {
            writeln!(out, "no offering is held back: EC2 refused nothing recently")?;
        } else {
            write!(
                out,
                "{}",
                table(
                    &["ACCOUNT/REGION", "MARKET", "TYPE", "ZONE", "CODE", "SINCE", "UNTIL", "STRIKES", "MET BY"],
                    &rows
                )
            )?;
        }
        for (group, n, of, why) in &held {
            writeln!(out, "group {group}: {n} of {of} offerings out; {why}")?;
        }
    } else {
        let groups: Vec<serde_json::Value> = held
            .iter()
            .map(|(g, n, of, why)| serde_json::json!({"group": g, "out": n, "offerings": of, "reason": why}))
            .collect();
        print_data(g.output, &serde_json::json!({"ledgers": ledgers, "groups": groups}))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// "group G: N of M offerings out; blocked on capacity: …" for each of the
/// cluster's groups the ledger holds back (nothing when there is no state
/// store yet or it cannot be read: this is a note, not the command's work).
pub(super) async fn held_lines(s: &Session) -> Vec<String> {
    let spec = &s.loaded.cluster.spec;
    if !spec.instance_groups.iter().any(|g| g.capacity.is_some()) {
        return Vec::new();
    }
    let Ok(ledgers) = crate::state::capacity::all(&spec.state_store, Some(&s.aws)).await else { return Vec::new() };
    s.loaded.cluster.capacity_held_lines(&ledgers, chrono::Utc::now())
}
