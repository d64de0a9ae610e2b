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
    // Where to look: each (region, account) once; a named cluster's own.
    let mut scopes: Vec<(String, Option<crate::spec::Account>, Option<String>)> = Vec::new();
    if let Some(c) = &a.cluster {
        let loaded = super::render::load_one(g, c)?;
        let spec = &loaded.cluster.spec.cloud;
        scopes.push((spec.region.clone(), spec.account.clone(), Some(loaded.cluster.metadata.name.clone())));
    } else {
        let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
        let places: BTreeSet<(String, Option<crate::spec::Account>)> = loaded
            .iter()
            .map(|l| (l.cluster.spec.cloud.region.clone(), l.cluster.spec.cloud.account.clone()))
            .collect();
        if places.is_empty() {
            anyhow::bail!("no clusters in {} to take regions from; name a cluster", g.clusters_dir.display());
        }
        scopes.extend(places.into_iter().map(|(r, acc)| (r, acc, None)));
    }
    let mut rows = Vec::new();
    // An account that refuses is named, and the others are still listed.
    let mut refused = Vec::new();
    for (region, account, cluster) in scopes {
        let mut opts = AwsOptions::from_env(a.cloud.target.aws().unwrap_or_default(), Some(region.clone()))?;
        opts.role = account.clone().map(|account| crate::cloud::aws::account::RoleFor {
            account,
            cluster: cluster.clone().unwrap_or_else(|| "fleet".into()),
            command: g.command.clone(),
        });
        let listed = async {
            let aws = Aws::connect(&opts).await?;
            list_instances(&aws, cluster.as_deref(), a.include_terminated).await
        };
        match listed.await {
            Ok(found) => rows.extend(found.iter().map(|i| InstanceRow::of(i, &region, chrono::Utc::now()))),
            Err(e) if account.is_some() => {
                let id = account.as_ref().map(|a| a.id.as_str()).unwrap_or_default();
                refused.push(format!("account {id} in {region}: {e:#}"));
            }
            Err(e) => return Err(e),
        }
    }
    for r in &refused {
        writeln!(anstream::stderr(), "not listed: {r}")?;
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
    Ok(if refused.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
