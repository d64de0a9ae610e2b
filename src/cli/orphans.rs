//! `pinfleet orphans`: resources tagged by pinfleet whose cluster no longer
//! exists in its state store (or has no definition at all), and instances
//! inside pinfleet VPCs that carry no owner tag — machines nobody answers for.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use aws_sdk_ec2::types::{Filter, Tag};
use clap::Args;

use serde::Serialize;

use super::cloud::CloudArgs;
use super::get::table;
use super::GlobalArgs;
use crate::cloud::aws::observe::{instance, list_instances};
use crate::cloud::aws::{sdk, Aws, AwsOptions};
use crate::cloud::tags;
use crate::output::{print_data, Format};
use crate::state::Store;

#[derive(Debug, Args)]
pub struct OrphansArgs {
    /// Regions to scan (default: those of the clusters folder).
    #[arg(long)]
    pub region: Vec<String>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

#[derive(Debug, Serialize)]
pub struct Orphan {
    pub region: String,
    pub kind: String,
    pub id: String,
    pub cluster: String,
    pub owner: String,
    pub why: String,
}

fn tag(tags: &[aws_sdk_ec2::types::Tag], key: &str) -> Option<String> {
    tags.iter().find(|t| t.key() == Some(key)).and_then(|t| t.value()).map(str::to_string)
}

pub async fn run(g: &GlobalArgs, args: OrphansArgs) -> Result<ExitCode> {
    let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    let defs: BTreeMap<String, &crate::spec::Loaded> =
        loaded.iter().map(|l| (l.cluster.metadata.name.clone(), l)).collect();
    let mut regions: BTreeSet<String> = args.region.iter().cloned().collect();
    if regions.is_empty() {
        regions = loaded.iter().map(|l| l.cluster.spec.cloud.region.clone()).collect();
    }
    let mut orphans = Vec::new();
    let mut alive: BTreeMap<String, bool> = BTreeMap::new();
    for region in regions {
        let aws =
            Aws::connect(&AwsOptions::from_env(args.cloud.target.aws().unwrap_or_default(), Some(region.clone()))?)
                .await?;
        let managed =
            || Filter::builder().name(format!("tag:{}", tags::MANAGED_BY)).values(tags::MANAGED_BY_VALUE).build();
        let ec2 = &aws.ec2;
        let (instances, vpcs, sgs, lts) = futures::try_join!(
            list_instances(&aws, None, false),
            async { sdk("DescribeVpcs", ec2.describe_vpcs().filters(managed()).send().await) },
            async {
                sdk(
                    "DescribeSecurityGroups",
                    ec2.describe_security_groups()
                        .filters(managed())
                        .max_results(1000)
                        .into_paginator()
                        .items()
                        .send()
                        .try_collect()
                        .await,
                )
            },
            async {
                sdk(
                    "DescribeLaunchTemplates",
                    ec2.describe_launch_templates()
                        .filters(managed())
                        .max_results(200)
                        .into_paginator()
                        .items()
                        .send()
                        .try_collect()
                        .await,
                )
            },
        )?;
        let mut found: Vec<(String, String, Option<String>, Option<String>)> = Vec::new();
        for i in instances.iter().filter(|i| i.is_live()) {
            found.push(("instance".into(), i.id.clone(), i.cluster.clone(), i.owner.clone()));
        }
        let mut tagged = |kind: &str, id: Option<&str>, t: &[Tag]| {
            found.push((kind.into(), id.unwrap_or_default().into(), tag(t, tags::CLUSTER), tag(t, tags::OWNER)));
        };
        for v in vpcs.vpcs() {
            tagged("vpc", v.vpc_id(), v.tags());
        }
        for s in &sgs {
            tagged("security-group", s.group_id(), s.tags());
        }
        for t in &lts {
            tagged("launch-template", t.launch_template_id(), t.tags());
        }
        for (kind, id, cluster, owner) in found {
            let cluster = cluster.unwrap_or_default();
            let why = match defs.get(&cluster) {
                None => Some(format!("no cluster `{cluster}` in {}", g.clusters_dir.display())),
                Some(l) => {
                    if !alive.contains_key(&cluster) {
                        let store = Store::open(&l.cluster.spec.state_store, &cluster, Some(&aws)).await;
                        let exists = match store {
                            Ok(s) => s.get(crate::state::SPEC_KEY).await.map(|o| o.is_some()).unwrap_or(false),
                            Err(_) => false,
                        };
                        alive.insert(cluster.clone(), exists);
                    }
                    (!alive[&cluster]).then(|| {
                        format!("cluster `{cluster}` does not exist in its state store (destroyed or never applied)")
                    })
                }
            };
            if let Some(why) = why {
                orphans.push(Orphan {
                    region: region.clone(),
                    kind,
                    id,
                    cluster,
                    owner: owner.unwrap_or_else(|| "(none)".into()),
                    why,
                });
            }
        }
        // Unowned machines inside pinfleet VPCs (started by hand, say).
        let vpc_ids: Vec<String> = vpcs.vpcs().iter().filter_map(|v| v.vpc_id().map(str::to_string)).collect();
        if !vpc_ids.is_empty() {
            let inside = sdk(
                "DescribeInstances",
                ec2.describe_instances()
                    .filters(Filter::builder().name("vpc-id").set_values(Some(vpc_ids)).build())
                    .max_results(1000)
                    .into_paginator()
                    .items()
                    .send()
                    .try_collect()
                    .await,
            )?;
            for i in
                inside.iter().flat_map(|r| r.instances()).map(instance).filter(|i| i.is_live() && i.owner.is_none())
            {
                orphans.push(Orphan {
                    region: region.clone(),
                    kind: "instance".into(),
                    id: i.id.clone(),
                    cluster: i.cluster.clone().unwrap_or_else(|| "-".into()),
                    owner: "(none)".into(),
                    why: format!(
                        "no {} tag, inside pinfleet VPC {}",
                        tags::OWNER,
                        i.vpc_id.clone().unwrap_or_default()
                    ),
                });
            }
        }
    }
    orphans.sort_by(|a, b| (&a.region, &a.cluster, &a.kind, &a.id).cmp(&(&b.region, &b.cluster, &b.kind, &b.id)));
    orphans.dedup_by(|a, b| a.id == b.id);
    if g.output == Format::Text {
        if orphans.is_empty() {
            writeln!(anstream::stdout(), "No orphans.")?;
        } else {
            let rows: Vec<Vec<String>> = orphans
                .iter()
                .map(|o| {
                    vec![
                        o.region.clone(),
                        o.kind.clone(),
                        o.id.clone(),
                        o.cluster.clone(),
                        o.owner.clone(),
                        o.why.clone(),
                    ]
                })
                .collect();
            write!(anstream::stdout(), "{}", table(&["REGION", "KIND", "ID", "CLUSTER", "OWNER", "WHY"], &rows))?;
        }
    } else {
        print_data(g.output, &orphans)?;
    }
    Ok(ExitCode::SUCCESS)
}
