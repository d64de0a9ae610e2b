//! `pinfleet adopt CLUSTER`: take over, in place, the running kops cluster
//! an imported cluster file describes. Shows what it claims (a dry run by
//! default); with `--yes` records the claims in pinfleet's state store,
//! then tags each resource. The judging is [`crate::adopt::claim`]'s, the
//! reading and tagging [`crate::adopt::aws`]'s.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;
use crate::adopt::claim;
use crate::output::{print_data, Format};

/// Where an adopt's claims are recorded, in the cluster's own state.
pub const CLAIMS_KEY: &str = "adopt/claims.json";

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The cluster file `pinfleet import kops` wrote (its name or path).
    pub cluster: String,
    /// Claim and tag (default: show what would be claimed).
    #[arg(long)]
    pub yes: bool,
    /// Claim this resource (an EC2 id) though another tool owns it.
    #[arg(long = "take", value_name = "ID")]
    pub take: Vec<String>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: AdoptArgs) -> anyhow::Result<ExitCode> {
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    let cluster = &s.loaded.cluster;
    let name = cluster.metadata.name.clone();
    let Some(kops_name) = cluster.metadata.annotations.get("pinfleet.dev/kops-name").cloned() else {
        bail!(
            "{name}: no metadata.annotations[pinfleet.dev/kops-name]: adopt takes over the kops cluster an imported file names (`pinfleet import kops`)"
        );
    };
    // The file's network and security groups (the machines' images and
    // user-data are not needed to match what exists).
    let mut inputs = crate::cloud::model::Inputs::default();
    for grp in &cluster.spec.instance_groups {
        inputs.images.insert(grp.name.clone(), ("ami-adopt".into(), "/dev/sda1".into()));
        inputs.user_data.insert(grp.name.clone(), String::new());
    }
    let desired = crate::cloud::model::desired(cluster, &inputs)?;
    let groups: BTreeMap<String, String> = cluster
        .spec
        .instance_groups
        .iter()
        .map(|grp| {
            (grp.labels.get(claim::KOPS_GROUP_TAG).cloned().unwrap_or_else(|| grp.name.clone()), grp.name.clone())
        })
        .collect();
    let found = crate::adopt::aws::find(&s.aws, &kops_name).await?;
    if found.is_empty() {
        bail!(
            "no AWS resource is tagged {}={kops_name} in {}: nothing to adopt (is the region right?)",
            claim::KOPS_CLUSTER_TAG,
            s.aws.region
        );
    }
    let claims = claim::judge(&found, &desired, &kops_name, &groups, &args.take);
    let write = args.yes && claims.refused.is_empty() && !claims.is_noop();
    if write {
        // The record first: a run killed while tagging is resumed by the
        // next (a tag already there is no change), and the record says
        // what this cluster took over.
        let store = crate::state::Store::open(&cluster.spec.state_store, &name, Some(&s.aws))
            .await
            .with_context(|| format!("opening {name}'s state store"))?;
        let record = serde_json::json!({"kopsName": kops_name, "at": chrono::Utc::now(), "claims": claims});
        store.put_json(CLAIMS_KEY, &record).await?;
        for c in claims.claim.iter().filter(|c| !c.already) {
            let mut tags = claim::claim_tags(&name, &c.key);
            if c.key == crate::cloud::key::ResourceKey::Vpc {
                tags.extend(claims.vpc_tags.iter().cloned());
            }
            crate::adopt::aws::tag(&s.aws, std::slice::from_ref(&c.id), &tags).await?;
        }
        let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for r in claims.roll.iter().filter(|r| !r.already) {
            by_group.entry(r.group.as_str()).or_default().push(r.id.clone());
        }
        for (grp, ids) in by_group {
            crate::adopt::aws::tag(&s.aws, &ids, &claim::roll_tags(&name, grp)).await?;
        }
    }
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", text(&claims, &name, args.yes))?,
        other => print_data(other, &claims)?,
    }
    s.report_calls(g);
    Ok(if claims.refused.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The claims as text: a table per part, then what would be written.
pub fn text(c: &claim::Claims, cluster: &str, yes: bool) -> String {
    let mut s = String::new();
    let rows = |v: Vec<Vec<String>>, head: &[&str]| crate::output::table(head, &v);
    if !c.claim.is_empty() {
        s += &format!("claimed for {cluster} (tags added, nothing replaced):\n");
        s += &rows(
            c.claim
                .iter()
                .map(|x| {
                    vec![
                        x.kind.clone(),
                        x.id.clone(),
                        x.key.to_string(),
                        if x.already { "claimed".into() } else { "to claim".into() },
                    ]
                })
                .collect(),
            &["KIND", "ID", "PINFLEET", "STATE"],
        );
    }
    if !c.roll.is_empty() {
        s += "machines to roll onto pinfleet's launch templates (`pinfleet upgrade`):\n";
        s += &rows(
            c.roll
                .iter()
                .map(|r| {
                    vec![
                        r.id.clone(),
                        r.kops_group.clone(),
                        r.group.clone(),
                        if r.already { "claimed".into() } else { "to claim".into() },
                    ]
                })
                .collect(),
            &["INSTANCE", "KOPS GROUP", "GROUP", "STATE"],
        );
    }
    if !c.left.is_empty() {
        s += "left as they are:\n";
        s += &rows(
            c.left.iter().map(|n| vec![n.kind.clone(), n.id.clone(), n.why.clone()]).collect(),
            &["KIND", "ID", "WHY"],
        );
    }
    if !c.refused.is_empty() {
        s += "refused (nothing is written while any is here; `--take ID` claims one anyway):\n";
        s += &rows(
            c.refused.iter().map(|n| vec![n.kind.clone(), n.id.clone(), n.why.clone()]).collect(),
            &["KIND", "ID", "WHY"],
        );
    }
    s += &if !c.refused.is_empty() {
        "nothing was written\n".to_string()
    } else if c.is_noop() {
        format!("{cluster} is adopted already: nothing to do\n")
    } else if yes {
        format!("{cluster} adopted: claims recorded and tagged\n")
    } else {
        "dry run: run again with --yes to claim\n".to_string()
    };
    s
}
