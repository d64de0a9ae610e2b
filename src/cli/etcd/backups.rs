//! `pinfleet etcd backups`, `verify` and `gc`: the stored backups listed,
//! one restored into a scratch etcd and judged, the ones past their
//! retention collected. The work is [`crate::etcd`]'s; this file prints.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use serde::Serialize;

use super::{open, StoreArgs};
use crate::cli::GlobalArgs;
use crate::etcd::agent;
use crate::etcd::conn::EtcdArgs;
use crate::etcd::manifest::{self, Backup};
use crate::etcd::plan::pick;
use crate::etcd::policy::{self, Fate};
use crate::etcd::scratch::Binaries;
use crate::output::{print_data, table, Format};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The backup (default: the newest).
    #[arg(long)]
    pub backup: Option<String>,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Judge the snapshot alone, without the live store.
    #[arg(long)]
    pub offline: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(flatten)]
    backup: &'a Backup,
    /// Whether a restore takes it as verified (a backup whose manifest is
    /// lost never is, whatever verdict survives).
    verified: bool,
    age_seconds: i64,
    fate: String,
}

pub async fn backups(g: &GlobalArgs, a: StoreArgs) -> Result<ExitCode> {
    let (store, spec) = open(g, &a).await?;
    let list = agent::list(&store).await?;
    let now = chrono::Utc::now();
    let fates: std::collections::BTreeMap<String, Fate> = policy::fates(&list, &spec, now).into_iter().collect();
    let fate = |id: &str| match fates.get(id) {
        Some(Fate::Keep(why)) => format!("kept: {why}"),
        Some(Fate::Locked(until)) => format!("locked until {}", until.format("%Y-%m-%d")),
        Some(Fate::Collect) => "collected at the next gc".to_string(),
        None => String::new(),
    };
    if g.output != Format::Text {
        let rows: Vec<Row> = list
            .iter()
            .rev()
            .map(|b| Row {
                backup: b,
                verified: b.verified(),
                age_seconds: (now - b.manifest.taken_at).num_seconds(),
                fate: fate(&b.manifest.id),
            })
            .collect();
        print_data(g.output, &rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .rev()
        .map(|b| {
            let age = Duration::from_secs((now - b.manifest.taken_at).num_seconds().max(0) as u64);
            vec![
                b.manifest.id.clone(),
                humantime::format_duration(age).to_string(),
                b.manifest.revision.to_string(),
                human_bytes(b.manifest.size),
                match &b.verdict {
                    _ if b.recovered.is_some() => "no: manifest lost".to_string(),
                    Some(v) if v.ok => "yes".to_string(),
                    Some(_) => "FAILED".to_string(),
                    None => "not yet".to_string(),
                },
                fate(&b.manifest.id),
            ]
        })
        .collect();
    let mut out = anstream::stdout();
    if rows.is_empty() {
        writeln!(out, "no etcd backups of {} in {}", a.cluster, store.describe(manifest::BACKUPS))?;
    } else {
        write!(out, "{}", table(&["BACKUP", "AGE", "REVISION", "SIZE", "VERIFIED", "RETENTION"], &rows))?;
    }
    // Agents that failed since the newest backup say why none came.
    let newest = list.iter().map(|b| b.manifest.taken_at).max();
    for t in agent::troubles(&store, newest).await? {
        writeln!(out, "{}", crate::views::text::safe(&policy::trouble_line(&t, now)))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

pub async fn verify(g: &GlobalArgs, a: VerifyArgs) -> Result<ExitCode> {
    let (store, _) = open(g, &a.store).await?;
    let list = agent::list(&store).await?;
    let b = match &a.backup {
        Some(_) => pick(&list, a.backup.as_deref(), &a.store.cluster)?,
        None => list.last().with_context(|| format!("{} has no etcd backup", a.store.cluster))?,
    };
    let bins =
        Binaries::find().context("verifying needs etcd's binaries (etcd, etcdutl) in PINFLEET_ETCD_DIR or on PATH")?;
    let v = crate::etcd::verify::verify(&store, &b.manifest, &bins, (!a.offline).then_some(&a.etcd)).await?;
    let mut out = anstream::stdout();
    writeln!(
        out,
        "{} {}: restored in {:.1}s",
        b.manifest.id,
        if v.ok { "verified" } else { "FAILED" },
        v.restore_seconds
    )?;
    for c in &v.checks {
        writeln!(out, "  ok    {c}")?;
    }
    for p in &v.problems {
        writeln!(out, "  FAIL  {p}")?;
    }
    Ok(if v.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

pub async fn gc(g: &GlobalArgs, a: StoreArgs) -> Result<ExitCode> {
    let (store, spec) = open(g, &a).await?;
    let (collected, waiting) = agent::gc(&store, &spec).await?;
    let mut out = anstream::stdout();
    writeln!(
        out,
        "collected {} backup(s){}",
        collected.len(),
        if collected.is_empty() { String::new() } else { format!(": {}", collected.join(", ")) }
    )?;
    for w in waiting {
        writeln!(out, "kept: {w}")?;
    }
    Ok(ExitCode::SUCCESS)
}
