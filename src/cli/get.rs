//! `pinfleet get instances [CLUSTER|--all]`: the machines pinfleet manages,
//! with cluster, group, owner, AMI, state, launch-template version and age.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

use super::cloud::CloudArgs;
use super::GlobalArgs;
use crate::cloud::aws::{Aws, AwsOptions};
use crate::output::{print_data, Format};

#[derive(Debug, Args)]
pub struct GetArgs {
    #[command(subcommand)]
    pub what: GetWhat,
}

#[derive(Debug, Subcommand)]
pub enum GetWhat {
    /// Instances of one cluster, or of every pinfleet cluster with --all.
    Instances(InstancesArgs),
}

#[derive(Debug, Args)]
pub struct InstancesArgs {
    pub cluster: Option<String>,
    /// Every pinfleet-managed instance in the regions of the clusters folder.
    #[arg(long, conflicts_with = "cluster")]
    pub all: bool,
    /// Include terminated instances.
    #[arg(long)]
    pub include_terminated: bool,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub use crate::cloud::aws::observe::list_instances;
use crate::views::cluster::tables::InstanceRow;

pub async fn run(g: &GlobalArgs, args: GetArgs) -> Result<ExitCode> {
    let GetWhat::Instances(a) = args.what;
    let mut scopes: Vec<(String, Option<String>)> = Vec::new();
    if let Some(c) = &a.cluster {
        let loaded = super::render::load_one(g, c)?;
        scopes.push((loaded.cluster.spec.cloud.region.clone(), Some(loaded.cluster.metadata.name.clone())));
    } else {
        let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
        let regions: BTreeSet<String> = loaded.iter().map(|l| l.cluster.spec.cloud.region.clone()).collect();
        if regions.is_empty() {
            anyhow::bail!("no clusters in {} to take regions from; name a cluster", g.clusters_dir.display());
        }
        scopes.extend(regions.into_iter().map(|r| (r, None)));
    }
    let mut rows = Vec::new();
    for (region, cluster) in scopes {
        let aws = Aws::connect(&AwsOptions::from_env(a.cloud.target.aws().unwrap_or_default(), Some(region.clone()))?)
            .await?;
        for i in list_instances(&aws, cluster.as_deref(), a.include_terminated).await? {
            rows.push(InstanceRow::of(&i, &region, chrono::Utc::now()));
        }
    }
    rows.sort_by(|a, b| (&a.cluster, &a.group, &a.id).cmp(&(&b.cluster, &b.group, &b.id)));
    match g.output {
        Format::Text => {
            write!(anstream::stdout(), "{}", crate::views::cluster::tables::instances_table(&rows))?;
            // A named cluster's groups the capacity ledger holds back, and why.
            if let Some(c) = &a.cluster {
                if let Ok(s) = super::cloud::Session::open(g, c, &a.cloud).await {
                    for line in super::capacity::held_lines(&s).await {
                        writeln!(anstream::stdout(), "{line}")?;
                    }
                }
            }
        }
        other => print_data(other, &rows)?,
    }
    Ok(ExitCode::SUCCESS)
}
