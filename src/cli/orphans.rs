//! `pinfleet orphans`: resources tagged by pinfleet whose cluster no longer
//! exists in its state store (or has no definition at all), and instances
//! inside pinfleet VPCs that carry no owner tag — machines nobody answers for.
//! Each region is scanned in the caller's account and in every account a
//! cluster lives in (through its role), and each orphan names its account;
//! an account that refuses is named (`not scanned: account … in …`, exit 1)
//! and the others still scanned.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::cloud::CloudArgs;
use super::GlobalArgs;
use crate::cloud::aws::{observe, Aws, AwsOptions};
use crate::cloud::orphans::{self, Known, Orphan};
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

pub async fn run(g: &GlobalArgs, args: OrphansArgs) -> Result<ExitCode> {
    let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    let mut regions: BTreeSet<String> = args.region.iter().cloned().collect();
    if regions.is_empty() {
        regions = loaded.iter().map(|l| l.cluster.spec.cloud.region.clone()).collect();
    }
    // Where to look: the caller's own account and each account a cluster
    // lives in (through its role), in every region scanned.
    let mut accounts: Vec<Option<crate::spec::Account>> = vec![None];
    let named: BTreeSet<crate::spec::Account> =
        loaded.iter().filter_map(|l| l.cluster.spec.cloud.account.clone()).collect();
    accounts.extend(named.into_iter().map(Some));
    let target = args.cloud.target.aws().unwrap_or_default();
    let mut found: Vec<Orphan> = Vec::new();
    let mut known: BTreeMap<String, Known> = BTreeMap::new();
    // An account that refuses is named; the others are still scanned.
    let mut refused = Vec::new();
    // The caller's own account (clusters without an account of their own live there).
    let mut caller: Option<String> = None;
    for region in regions {
        for account in &accounts {
            let mut opts = AwsOptions::from_env(target, Some(region.clone()))?;
            opts.role = account.clone().map(|account| crate::cloud::aws::account::RoleFor {
                account,
                cluster: "fleet".into(),
                command: g.command.clone(),
            });
            let scanned = async {
                let aws = Aws::connect(&opts).await?;
                let fleet = observe::fleet(&aws).await?;
                anyhow::Ok((aws, fleet))
            };
            let (aws, fleet) = match scanned.await {
                Ok(s) => s,
                Err(e) => match account {
                    Some(a) => {
                        refused.push(format!("account {} in {region}: {e:#}", a.id));
                        continue;
                    }
                    None => return Err(e),
                },
            };
            // Whether each cluster a tag names exists: its definition, then
            // its state store (read with the account's credentials when the
            // cluster lives in the account scanned, as its commands do).
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
            // The account scanned: the role's, or the caller's own as
            // GetCallerIdentity names it.
            let in_account = match aws.account() {
                Some(id) => id.to_string(),
                None => aws
                    .caller_identity()
                    .await
                    .as_deref()
                    .and_then(crate::cloud::aws::account::arn_account)
                    .unwrap_or("(unknown)")
                    .to_string(),
            };
            if account.is_none() {
                caller = Some(in_account.clone());
            }
            // Where each cluster lives: its account (the caller's without
            // one) and region.
            let homes: BTreeMap<String, (String, String)> = loaded
                .iter()
                .map(|l| {
                    let c = &l.cluster;
                    let a = c.spec.cloud.account.as_ref().map(|a| a.id.clone()).or_else(|| caller.clone());
                    (c.metadata.name.clone(), (a.unwrap_or_default(), c.spec.cloud.region.clone()))
                })
                .collect();
            let dir = g.clusters_dir.display().to_string();
            found.extend(orphans::judge(&in_account, &region, &fleet, &known, &homes, &dir));
        }
    }
    // The caller's own account, named by a cluster too, is scanned twice:
    // one row per resource of an account.
    found.sort_by(|a, b| {
        (&a.account, &a.region, &a.cluster, &a.kind, &a.id).cmp(&(&b.account, &b.region, &b.cluster, &b.kind, &b.id))
    });
    found.dedup_by(|a, b| (&a.account, &a.id) == (&b.account, &b.id));
    if g.output != Format::Text {
        print_data(g.output, &found)?;
    } else {
        write!(anstream::stdout(), "{}", crate::views::orphans::text(&found))?;
    }
    for r in &refused {
        writeln!(anstream::stderr(), "not scanned: {}", crate::views::text::safe(r))?;
    }
    Ok(if refused.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
