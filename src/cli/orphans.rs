//! `pinfleet orphans`: resources tagged by pinfleet whose cluster no longer
//! exists in its state store (or has no definition at all), and instances
//! inside pinfleet VPCs that carry no owner tag — machines nobody answers for.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::cloud::CloudArgs;
use super::GlobalArgs;
use crate::cloud::aws::{observe, Aws, AwsOptions};
use crate::cloud::orphans::{self, Known, Orphan};
use crate::output::{print_data, table, Format};
use crate::state::Store;

#[derive(Debug, Args)]
pub struct OrphansArgs {
    /// Regions to scan (default: those of the clusters folder).
    #[arg(long)]
    pub region: Vec<String>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: OrphansArgs) -> Result<ExitCode> {
    let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    let mut regions: BTreeSet<String> = args.region.iter().cloned().collect();
    if regions.is_empty() {
        regions = loaded.iter().map(|l| l.cluster.spec.cloud.region.clone()).collect();
    }
    let mut found: Vec<Orphan> = Vec::new();
    let mut known: BTreeMap<String, Known> = BTreeMap::new();
    for region in regions {
        let target = args.cloud.target.aws().unwrap_or_default();
        let aws = Aws::connect(&AwsOptions::from_env(target, Some(region.clone()))?).await?;
        let fleet = observe::fleet(&aws).await?;
        // Whether each cluster a tag names exists: its definition, then its state store.
        for name in fleet.tagged.iter().filter_map(|t| t.cluster.clone()) {
            if known.contains_key(&name) {
                continue;
            }
            let state = match loaded.iter().find(|l| l.cluster.metadata.name == name) {
                None => Known::NoDefinition,
                Some(l) => match Store::open(&l.cluster.spec.state_store, &name, Some(&aws)).await {
                    Ok(s) if s.get(crate::state::SPEC_KEY).await.is_ok_and(|o| o.is_some()) => Known::Alive,
                    _ => Known::NotInStateStore,
                },
            };
            known.insert(name, state);
        }
        found.extend(orphans::judge(&region, &fleet, &known, &g.clusters_dir.display().to_string()));
    }
    found.sort_by(|a, b| (&a.region, &a.cluster, &a.kind, &a.id).cmp(&(&b.region, &b.cluster, &b.kind, &b.id)));
    found.dedup_by(|a, b| a.id == b.id);
    if g.output != Format::Text {
        print_data(g.output, &found)?;
    } else if found.is_empty() {
        writeln!(anstream::stdout(), "No orphans.")?;
    } else {
        let rows: Vec<Vec<String>> = found
            .iter()
            .map(|o| {
                vec![o.region.clone(), o.kind.clone(), o.id.clone(), o.cluster.clone(), o.owner.clone(), o.why.clone()]
            })
            .collect();
        write!(anstream::stdout(), "{}", table(&["REGION", "KIND", "ID", "CLUSTER", "OWNER", "WHY"], &rows))?;
    }
    Ok(ExitCode::SUCCESS)
}
