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
    let zones: std::collections::BTreeMap<&str, &str> =
        spec.network.subnets.iter().map(|n| (n.name.as_str(), n.zone.as_str())).collect();
    // A group is held back when every offering it has is in the ledger.
    let mut held = Vec::new();
    for grp in &spec.instance_groups {
        let mut gz: Vec<String> =
            grp.subnets.iter().filter_map(|n| zones.get(n.as_str()).map(|z| z.to_string())).collect();
        gz.dedup();
        let fallback = grp.capacity.as_ref().map(|c| c.fallback.clone()).unwrap_or_default();
        let all = crate::capacity::offerings(&grp.markets(), &grp.instance_types(), &gz, &fallback);
        let out: Vec<&crate::capacity::Entry> =
            all.iter().filter_map(|o| ledgers.iter().find_map(|l| l.out(o, now))).collect();
        if !out.is_empty() {
            let next = all.iter().find(|o| ledgers.iter().all(|l| l.out(o, now).is_none()));
            held.push((grp.name.clone(), out.len(), all.len(), crate::capacity::blocked_reason(out[0], next)));
        }
    }
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
