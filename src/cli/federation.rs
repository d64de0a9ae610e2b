//! `pinfleet federation plan|apply|status APP`: one app's replicas over the
//! members of its federation (clusters whose `spec.federation.name` names
//! it), from `clusters/federations/APP.yaml`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;
use serde::{Deserialize, Serialize};

use super::cloud::{home, Target};
use super::GlobalArgs;
use crate::federation::fanout::{self, FederatedService, Observed};
use crate::federation::placement::{self, Share};
use crate::output::{print_data, Format};
use crate::spec::Cluster;

#[derive(Debug, Args)]
pub struct FederationArgs {
    #[command(subcommand)]
    pub command: FederationCommand,
}

#[derive(Debug, Subcommand)]
pub enum FederationCommand {
    /// The split per member, the reason for each number, and what changes.
    Plan(FedArgs),
    /// Apply the split (members gaining first; losing ones after the others are Ready).
    Apply(FedArgs),
    /// Desired vs ready per member.
    Status(FedArgs),
}

#[derive(Debug, Args)]
pub struct FedArgs {
    /// The app: `clusters/federations/APP.yaml`.
    pub app: String,
    /// Folder with a `<cluster>.yaml` kubeconfig per member (default: each
    /// member's kubeconfig for --target).
    #[arg(long)]
    pub kubeconfig_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Target::Aws)]
    pub target: Target,
    /// How long a member may be unreachable or NotReady before its replicas move.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    pub grace: Duration,
    /// Let replicas move back to members that recovered.
    #[arg(long)]
    pub rebalance: bool,
    /// Do it (apply only).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// How long members gaining replicas may take to be Ready.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// What the CLI remembers between runs (`<home>/federation/APP.json`).
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Memory {
    unhealthy_since: BTreeMap<String, DateTime<Utc>>,
    failed_over: BTreeSet<String>,
}

fn memory_path(app: &str) -> PathBuf {
    home().join("federation").join(format!("{app}.json"))
}

#[derive(Debug, Serialize)]
struct Row {
    cluster: String,
    health: String,
    current: u32,
    ready: u32,
    desired: u32,
    reason: String,
}

struct World {
    fs: FederatedService,
    members: Vec<Cluster>,
    clients: BTreeMap<String, kube::Client>,
    observed: BTreeMap<String, Observed>,
}

async fn world(g: &GlobalArgs, a: &FedArgs) -> Result<World> {
    let path = g.clusters_dir.join("federations").join(format!("{}.yaml", a.app));
    let fs = fanout::load(&path)?;
    let (loaded, diags) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    if !diags.0.is_empty() {
        bail!("{diags}");
    }
    let members: Vec<Cluster> = loaded
        .into_iter()
        .map(|l| l.cluster)
        .filter(|c| c.spec.federation.as_ref().is_some_and(|f| f.name == fs.spec.federation))
        .collect();
    if members.is_empty() {
        bail!("no cluster in {} is a member of federation {}", g.clusters_dir.display(), fs.spec.federation);
    }
    let mut clients = BTreeMap::new();
    let mut observed = BTreeMap::new();
    let results = futures::future::join_all(members.iter().map(|c| {
        let kc = match &a.kubeconfig_dir {
            Some(d) => d.join(format!("{}.yaml", c.metadata.name)),
            None => a.target.kubeconfig(&c.metadata.name),
        };
        let fs = &fs;
        async move {
            let client = crate::kube::client_from_kubeconfig(&kc, crate::kube::Retry::Never).await;
            match client {
                Ok(client) => {
                    let o = fanout::observe(&client, fs).await;
                    (Some(client), o)
                }
                Err(e) => (
                    None,
                    Observed {
                        reachable: false,
                        ready_nodes: 0,
                        free_replicas: 0,
                        desired: 0,
                        ready: 0,
                        error: Some(format!("{e:#}")),
                    },
                ),
            }
        }
    }))
    .await;
    for (c, (client, o)) in members.iter().zip(results) {
        if let Some(client) = client {
            clients.insert(c.metadata.name.clone(), client);
        }
        observed.insert(c.metadata.name.clone(), o);
    }
    Ok(World { fs, members, clients, observed })
}

/// The placement now, with health from the grace period and stickiness.
fn decide(
    w: &World,
    a: &FedArgs,
    mem: &mut Memory,
    now: DateTime<Utc>,
) -> Result<(Vec<Share>, BTreeMap<String, String>)> {
    let mut health = BTreeMap::new();
    let mut members = Vec::new();
    let mut policy = w.fs.spec.placement.clone();
    for c in &w.members {
        let name = c.metadata.name.clone();
        let o = &w.observed[&name];
        let up = o.reachable && o.ready_nodes > 0;
        let state = if up {
            mem.unhealthy_since.remove(&name);
            if mem.failed_over.contains(&name) && !a.rebalance {
                "recovered (kept out; --rebalance moves replicas back)".to_string()
            } else {
                mem.failed_over.remove(&name);
                "healthy".to_string()
            }
        } else {
            let since = *mem.unhealthy_since.entry(name.clone()).or_insert(now);
            let why = o.error.clone().unwrap_or_else(|| "no Ready nodes".into());
            if now - since >= chrono::Duration::from_std(a.grace).unwrap_or_default() {
                mem.failed_over.insert(name.clone());
                format!("failed over: {why}")
            } else {
                format!(
                    "unhealthy for {}s (grace {}): {why}",
                    (now - since).num_seconds(),
                    humantime::format_duration(a.grace)
                )
            }
        };
        // Within its grace period a member keeps its replicas.
        let in_grace = !up && !mem.failed_over.contains(&name);
        let placeable = (up && !mem.failed_over.contains(&name)) || in_grace;
        if in_grace {
            // It keeps what it runs until the grace period ends.
            policy.clusters.insert(name.clone(), placement::Limit { min: o.desired, max: Some(o.desired) });
        }
        members.push(fanout::member(c, o, placeable));
        health.insert(name, state);
    }
    let shares = placement::place(&w.fs.metadata.name, w.fs.spec.total_replicas, &policy, &members)?;
    Ok((shares, health))
}

pub async fn run(g: &GlobalArgs, args: FederationArgs) -> Result<ExitCode> {
    let (a, kind) = match &args.command {
        FederationCommand::Plan(a) => (a, "plan"),
        FederationCommand::Apply(a) => (a, "apply"),
        FederationCommand::Status(a) => (a, "status"),
    };
    let w = world(g, a).await?;
    let mpath = memory_path(&a.app);
    let mut mem: Memory = std::fs::read(&mpath).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let (shares, health) = decide(&w, a, &mut mem, Utc::now())?;
    let rows: Vec<Row> = shares
        .iter()
        .map(|s| {
            let o = &w.observed[&s.cluster];
            Row {
                cluster: s.cluster.clone(),
                health: health[&s.cluster].clone(),
                current: o.desired,
                ready: o.ready,
                desired: s.replicas,
                reason: s.reason.clone(),
            }
        })
        .collect();
    if kind == "status" {
        if g.output != Format::Text {
            print_data(g.output, &rows)?;
        } else {
            let mut out = anstream::stdout();
            writeln!(out, "{:<16} {:>8} {:>6}  HEALTH", "CLUSTER", "DESIRED", "READY")?;
            for r in &rows {
                writeln!(out, "{:<16} {:>8} {:>6}  {}", r.cluster, r.current, r.ready, r.health)?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if g.output != Format::Text {
        print_data(g.output, &rows)?;
    } else {
        let mut out = anstream::stdout();
        writeln!(
            out,
            "{} {} ({} replicas over federation {})",
            "app".bold(),
            w.fs.metadata.name,
            w.fs.spec.total_replicas,
            w.fs.spec.federation
        )?;
        for r in &rows {
            let change = match r.desired.cmp(&r.current) {
                std::cmp::Ordering::Greater => format!("{} → {}", r.current, r.desired).green().to_string(),
                std::cmp::Ordering::Less => format!("{} → {}", r.current, r.desired).red().to_string(),
                std::cmp::Ordering::Equal => format!("{}", r.desired),
            };
            writeln!(out, "  {:<16} {:<10} {}; {}", r.cluster, change, r.reason, r.health)?;
        }
    }
    if kind == "plan" || !a.yes {
        if kind == "apply" {
            writeln!(anstream::stderr(), "\nNothing changed. Run with --yes to apply.")?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let applied = fanout::apply(&w.fs, &shares, &w.clients, &w.observed, a.timeout).await?;
    for x in &applied {
        writeln!(anstream::stderr(), "{}: {} → {} ({})", x.cluster, x.from, x.to, x.action)?;
    }
    if let Some(dir) = mpath.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&mpath, serde_json::to_vec_pretty(&mem)?)?;
    writeln!(anstream::stderr(), "{} {} placed", "done:".green().bold(), w.fs.metadata.name)?;
    Ok(ExitCode::SUCCESS)
}
