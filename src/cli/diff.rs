//! `pinfleet diff CLUSTER` (drift by layer), `diff --all` / `-l SELECTOR`
//! (every cluster at once, as a table), `diff A B` and `diff --all-of
//! SELECTOR` (clusters compared by what they run). Reads only. Exit 0 when
//! nothing drifted or differs, 2 when something did, 1 on error (and when
//! nothing drifted but a cluster could not be read).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::Args;

use super::cloud::{CloudArgs, Target};
use super::GlobalArgs;
use crate::cloud::aws::{Aws, AwsOptions};
use crate::diff::{self, observe, Layer};
use crate::output::{print_data, Format};
use crate::spec::selector::Selector;

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// One cluster (what drifted from its definition), or two (compared
    /// with each other by what they run).
    pub clusters: Vec<String>,
    /// Every cluster in the clusters folder, in parallel.
    #[arg(long, conflicts_with_all = ["selector", "all_of"])]
    pub all: bool,
    /// The clusters whose labels match, in parallel.
    #[arg(short = 'l', long, conflicts_with = "all_of")]
    pub selector: Option<String>,
    /// Compare every cluster the selector matches with each other, naming
    /// the odd one out.
    #[arg(long, value_name = "SELECTOR")]
    pub all_of: Option<String>,
    /// Only these layers (comma-separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub layer: Vec<Layer>,
    /// A kubeconfig: PATH for the one cluster, or NAME=PATH per cluster
    /// (repeatable); default: the one bootstrap wrote for the target.
    #[arg(long)]
    pub kubeconfig: Vec<String>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, a: DiffArgs) -> Result<ExitCode> {
    let layers: Vec<Layer> = if a.layer.is_empty() { Layer::ALL.to_vec() } else { a.layer.clone() };
    let (loaded, stage_labels) = load(g)?;
    // Which clusters, and how they are to be looked at.
    let (names, compare): (Vec<String>, bool) = if a.all {
        (loaded.keys().cloned().collect(), false)
    } else if let Some(s) = &a.selector {
        (select(&loaded, s)?, false)
    } else if let Some(s) = &a.all_of {
        let chosen = select(&loaded, s)?;
        if chosen.len() < 2 {
            bail!("--all-of {s} matches {} cluster(s); comparing needs two or more", chosen.len());
        }
        (chosen, true)
    } else {
        match a.clusters.len() {
            1 | 2 => (a.clusters.iter().map(|c| resolve(g, &loaded, c)).collect::<Result<_>>()?, a.clusters.len() == 2),
            0 => bail!("name a cluster (its drift), two (compared), or use --all, -l SELECTOR or --all-of SELECTOR"),
            n => {
                bail!("{n} clusters named: diff takes one (its drift) or two (compared); use --all-of to compare more")
            }
        }
    };
    if names.is_empty() {
        bail!("no cluster matches");
    }
    let kubeconfigs = kubeconfigs(&a.kubeconfig, &names, &loaded)?;
    let mut targets = Vec::new();
    for n in &names {
        let cluster = a.cloud.target.cluster_as_run(loaded[n].clone());
        let kubeconfig = kubeconfigs.get(n).cloned().unwrap_or_else(|| a.cloud.target.kubeconfig(n));
        // An account that refuses (AccessDenied, a role landing elsewhere)
        // leaves its own clusters unread; the others are still compared.
        let mut no_aws = format!("--target {} has no AWS side", target_name(a.cloud.target));
        let mut aws_refused = false;
        let aws = match a.cloud.target.aws() {
            Some(t) => {
                let opts = AwsOptions::for_cluster(t, &cluster, &g.command)?;
                match Aws::connect(&opts).await {
                    Ok(aws) => Some(aws),
                    Err(e) => {
                        no_aws = format!("{e:#}");
                        aws_refused = true;
                        None
                    }
                }
            }
            None => None,
        };
        targets.push(observe::Target { cluster, kubeconfig, aws, no_aws, aws_refused });
    }
    if compare {
        return run_compare(g, &targets, &stage_labels).await;
    }
    let reports = futures::future::join_all(targets.iter().map(|t| observe::report(t, &layers, &g.addons_dir))).await;
    match g.output {
        Format::Text => {
            let mut out = anstream::stdout();
            if reports.len() > 1 {
                writeln!(out, "{}", diff::render::table(&reports, &layers))?;
            }
            for r in &reports {
                write!(out, "{}", diff::render::report(r))?;
            }
        }
        other => print_data(other, &reports)?,
    }
    Ok(if reports.iter().any(diff::Report::drifted) {
        ExitCode::from(2)
    } else if reports.iter().any(diff::Report::unreachable) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn run_compare(g: &GlobalArgs, targets: &[observe::Target], stage_labels: &BTreeSet<String>) -> Result<ExitCode> {
    let prints = futures::future::join_all(targets.iter().map(|t| async move {
        observe::fingerprint(t, stage_labels)
            .await
            .with_context(|| format!("reading cluster {}", t.cluster.metadata.name))
    }))
    .await
    .into_iter()
    .collect::<Result<Vec<_>>>()?;
    let diffs = diff::compare(&prints);
    match g.output {
        Format::Text => {
            let names: Vec<String> = prints.iter().map(|p| p.cluster.clone()).collect();
            write!(anstream::stdout(), "{}", diff::render::differences(&names, &diffs))?;
        }
        other => print_data(other, &diffs)?,
    }
    Ok(if diffs.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(2) })
}

/// Every cluster of the folder by name, and the label keys fleet stages
/// and windows select on (expected to differ between clusters).
fn load(g: &GlobalArgs) -> Result<(BTreeMap<String, crate::spec::Cluster>, BTreeSet<String>)> {
    let opts = super::validate::load_options(&g.addons_dir);
    let (loaded, diags) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &opts);
    if !diags.0.is_empty() {
        bail!("{diags}");
    }
    let fleet = crate::fleet::spec::FleetSpec::load(&g.clusters_dir.join("fleet.yaml"))?;
    let mut keys: BTreeSet<String> = fleet.stages.iter().flat_map(|s| s.selector.keys().map(str::to_string)).collect();
    keys.extend(fleet.windows.iter().filter_map(|w| w.selector.as_ref()).flat_map(|s| s.keys().map(str::to_string)));
    Ok((loaded.into_iter().map(|l| (l.cluster.metadata.name.clone(), l.cluster)).collect(), keys))
}

fn select(loaded: &BTreeMap<String, crate::spec::Cluster>, s: &str) -> Result<Vec<String>> {
    let sel = Selector::parse(s).map_err(|e| anyhow::anyhow!("-l {s}: {e}"))?;
    Ok(loaded.iter().filter(|(_, c)| sel.matches(&c.metadata.labels)).map(|(n, _)| n.clone()).collect())
}

/// A CLUSTER argument: a name in the folder, or a file of one of them.
fn resolve(g: &GlobalArgs, loaded: &BTreeMap<String, crate::spec::Cluster>, arg: &str) -> Result<String> {
    if loaded.contains_key(arg) {
        return Ok(arg.to_string());
    }
    let l = super::render::load_one(g, arg)?;
    let name = l.cluster.metadata.name.clone();
    if !loaded.contains_key(&name) {
        bail!("{arg} is not in the clusters folder {}", g.clusters_dir.display());
    }
    Ok(name)
}

/// `--kubeconfig PATH` (one cluster) or `NAME=PATH` (each named cluster;
/// a name must be a cluster of the folder, diffed this time or not).
fn kubeconfigs(
    given: &[String],
    names: &[String],
    loaded: &BTreeMap<String, crate::spec::Cluster>,
) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for k in given {
        match k.split_once('=') {
            Some((n, p)) => {
                if !loaded.contains_key(n) {
                    bail!("--kubeconfig {k}: there is no cluster {n} in the clusters folder");
                }
                out.insert(n.to_string(), PathBuf::from(p));
            }
            None if names.len() == 1 => {
                out.insert(names[0].clone(), PathBuf::from(k));
            }
            None => bail!("--kubeconfig {k}: with several clusters, name each one (NAME=PATH)"),
        }
    }
    Ok(out)
}

fn target_name(t: Target) -> &'static str {
    match t {
        Target::Aws => "aws",
        Target::Localstack => "localstack",
        Target::Kind => "kind",
        Target::Sim => "sim",
    }
}
