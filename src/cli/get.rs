//! `pinfleet get instances [CLUSTER|--all]`: the machines pinfleet manages,
//! with cluster, group, owner, AMI, state, launch-template version and age.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Subcommand};

use serde::Serialize;

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

#[derive(Debug, Serialize)]
pub struct Row {
    pub id: String,
    pub cluster: String,
    pub group: String,
    pub owner: String,
    pub image: String,
    pub instance_type: String,
    pub state: String,
    pub launch_template_version: String,
    pub zone: String,
    pub age: String,
    pub region: String,
}

fn age(secs: Option<i64>) -> String {
    let Some(s) = secs else { return "-".into() };
    let d = (chrono::Utc::now().timestamp() - s).max(0);
    match d {
        d if d < 120 => format!("{d}s"),
        d if d < 7200 => format!("{}m", d / 60),
        d if d < 172_800 => format!("{}h", d / 3600),
        d => format!("{}d", d / 86400),
    }
}

pub use crate::output::table;

pub use crate::cloud::aws::observe::list_instances;

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
            rows.push(Row {
                id: i.id.clone(),
                cluster: i.cluster.clone().unwrap_or_else(|| "-".into()),
                group: i.group.clone().unwrap_or_else(|| "-".into()),
                owner: i.owner.clone().unwrap_or_else(|| "(none)".into()),
                image: i.image_id.clone(),
                instance_type: i.instance_type.clone(),
                state: i.state.clone(),
                launch_template_version: i.launch_template_version.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
                zone: i.zone.clone().unwrap_or_default(),
                age: age(i.launch_time),
                region: region.clone(),
            });
        }
    }
    rows.sort_by(|a, b| (&a.cluster, &a.group, &a.id).cmp(&(&b.cluster, &b.group, &b.id)));
    if g.output == Format::Text {
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                vec![
                    r.id.clone(),
                    r.cluster.clone(),
                    r.group.clone(),
                    r.owner.clone(),
                    r.image.clone(),
                    r.instance_type.clone(),
                    r.state.clone(),
                    r.launch_template_version.clone(),
                    r.zone.clone(),
                    r.age.clone(),
                ]
            })
            .collect();
        write!(
            anstream::stdout(),
            "{}",
            table(
                &["INSTANCE", "CLUSTER", "GROUP", "OWNER", "AMI", "TYPE", "STATE", "LT-VERSION", "ZONE", "AGE"],
                &cells
            )
        )?;
    } else {
        print_data(g.output, &rows)?;
    }
    Ok(ExitCode::SUCCESS)
}
