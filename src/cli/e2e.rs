//! `pinfleet e2e [CLUSTER…] [--all] [-l SELECTOR]`: end-to-end validation
//! of running clusters, in parallel; a table (or `-o json`, `--junit FILE`);
//! a non-zero exit when any check fails.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;

use super::cloud::CloudArgs;
use super::GlobalArgs;
use crate::e2e::{self, Phase};
use crate::output::Format;

#[derive(Debug, Args)]
pub struct E2eArgs {
    /// Clusters to check (names in the clusters folder).
    pub clusters: Vec<String>,
    /// Every cluster in the clusters folder.
    #[arg(long)]
    pub all: bool,
    /// Clusters whose labels match, e.g. `env=staging,region!=use1`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Only these phases (repeatable; default: all three).
    #[arg(long = "phase", value_enum)]
    pub phases: Vec<Phase>,
    /// Also write the results as JUnit XML here.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Clusters checked at once.
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// How long the smoke workloads may take to turn Ready or Succeeded.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub smoke_timeout: Duration,
    /// Run the smoke workloads on this runtime-support profile version.
    #[arg(long)]
    pub smoke_profile: Option<String>,
    /// Do not compare the live addon objects with the rendered set.
    #[arg(long, env = "PINFLEET_SKIP_ADDONS")]
    pub no_addons: bool,
    /// Keep each cluster's results in it (pinfleet-system/pinfleet-e2e-results),
    /// where the workload controller serves them as metrics.
    #[arg(long)]
    pub record: bool,
    /// Kubeconfig (with one cluster; default: the one bootstrap wrote, or the target's).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, a: E2eArgs) -> Result<ExitCode> {
    let names = select(g, &a)?;
    if a.kubeconfig.is_some() && names.len() != 1 {
        bail!("--kubeconfig names one cluster's API; {} clusters were chosen", names.len());
    }
    let mut targets = Vec::new();
    for name in &names {
        let loaded = super::render::load_one(g, name)?;
        let kubeconfig = a.cloud.target.kubeconfig_or(a.kubeconfig.as_deref(), name);
        let client = crate::kube::client_or_in_cluster(&kubeconfig, crate::kube::Retry::Never)
            .await
            .with_context(|| format!("cluster {name}: no API client (kubeconfig {})", kubeconfig.display()))?;
        let cluster = a.cloud.target.cluster_as_run(loaded.cluster);
        let addons = if a.no_addons { None } else { Some(crate::addons::rendered(&g.addons_dir, &cluster)?) };
        targets.push(e2e::Target { cluster, client, addons });
    }
    let opts = e2e::Options {
        phases: if a.phases.is_empty() {
            vec![Phase::Preflight, Phase::Cluster, Phase::Smoke]
        } else {
            a.phases.clone()
        },
        smoke_timeout: a.smoke_timeout,
        smoke_profile: a.smoke_profile.clone(),
        rolling_groups: Default::default(),
    };
    let text = g.output == Format::Text;
    let on = std::sync::Arc::new(move |cluster: &str, c: &e2e::Check| {
        if text {
            let _ = writeln!(anstream::stderr(), "{}", crate::views::cluster::tables::e2e_line(cluster, c));
        }
    });
    let clients: Vec<kube::Client> = targets.iter().map(|t| t.client.clone()).collect();
    let reports = e2e::run_many(targets, &opts, a.parallel, on).await;
    if a.record {
        for (client, r) in clients.iter().zip(&reports) {
            e2e::record(client, r).await.with_context(|| format!("recording the results in {}", r.cluster))?;
        }
    }
    if let Some(path) = &a.junit {
        std::fs::write(path, e2e::junit::render(&reports)).with_context(|| format!("writing {}", path.display()))?;
    }
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::views::cluster::tables::e2e_summary(&reports))?,
        other => crate::output::print_data(other, &reports)?,
    }
    Ok(if reports.iter().any(e2e::Report::failed) { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The clusters named, or all, or those whose labels match.
fn select(g: &GlobalArgs, a: &E2eArgs) -> Result<Vec<String>> {
    if !a.clusters.is_empty() {
        return Ok(a.clusters.clone());
    }
    if !a.all && a.selector.is_none() {
        bail!("name clusters, or choose them with --all or -l SELECTOR");
    }
    let selector =
        crate::spec::selector::Selector::parse(a.selector.as_deref().unwrap_or("")).map_err(anyhow::Error::msg)?;
    let opts = super::validate::load_options(&g.addons_dir);
    let (loaded, diags) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &opts);
    if !diags.0.is_empty() {
        bail!("{diags}");
    }
    let names: Vec<String> = loaded
        .into_iter()
        .filter(|l| selector.matches(&l.cluster.metadata.labels))
        .map(|l| l.cluster.metadata.name)
        .collect();
    if names.is_empty() {
        bail!("no cluster in {} matches", g.clusters_dir.display());
    }
    Ok(names)
}
