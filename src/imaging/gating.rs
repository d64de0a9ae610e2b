//! The soak gate, run (effects): roll a canary group to a channel's
//! candidate, soak, run e2e, read what the new nodes report and compare it
//! with what the previous image's nodes reported; roll back to the
//! previous image and run e2e again (the downgrade), then promote the
//! candidate to the recipe's next channel or stop with the reason.
//!
//! Data flow: recipe + cluster → candidate and previous images (channel,
//! launch template) → baseline [`crate::ami::gate::NodeReport`]s → roll (the
//! rollout engine, with the group pinned to the candidate) → soak → e2e →
//! reports → roll back → e2e → [`crate::ami::gate::decide`] → channel writes
//! (`cloud::aws::channels`).

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::ami::gate::{self, Difference, NodeReport, Verdict};
use crate::ami::recipe::Loaded;
use crate::rollout::driver::Event;
use crate::spec::{Cluster, Image};

/// What the gate works with.
pub struct Gate<'a> {
    /// The canary cluster, its store and how groups are rolled.
    pub roller: super::Roller<'a>,
    pub recipe: &'a Loaded,
    /// The channel whose image is tried (`candidate`).
    pub from: String,
    pub canary_group: Option<String>,
    pub soak: Duration,
    pub e2e: crate::e2e::Options,
}

/// The gate's outcome, for the record and the screen.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    pub recipe: String,
    pub cluster: String,
    pub group: String,
    pub candidate: String,
    pub previous: String,
    pub before: Vec<NodeReport>,
    pub after: Vec<NodeReport>,
    pub differences: Vec<Difference>,
    pub upgrade_e2e: Result<(), String>,
    pub downgrade_e2e: Result<(), String>,
    pub verdict: Verdict,
}

/// The group the gate rolls: the one named, else the first node group
/// following one of the recipe's channels, else the first node group.
pub fn canary_group(cluster: &Cluster, recipe: &str, named: Option<&str>) -> Result<String> {
    let groups = &cluster.spec.instance_groups;
    if let Some(n) = named {
        return groups.iter().find(|g| g.name == n).map(|g| g.name.clone()).ok_or_else(|| {
            anyhow!(
                "no instance group {n} in {} (groups: {})",
                cluster.metadata.name,
                groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>().join(", ")
            )
        });
    }
    let nodes = || groups.iter().filter(|g| g.role == crate::spec::Role::Node);
    nodes()
        .find(|g| g.image.recipe.as_deref() == Some(recipe))
        .or_else(|| nodes().next())
        .map(|g| g.name.clone())
        .ok_or_else(|| anyhow!("{} has no node group to gate on", cluster.metadata.name))
}

async fn reports(client: &kube::Client, cluster: &str, group: &str) -> Result<Vec<NodeReport>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let sel = format!("pinfleet.dev/cluster={cluster},pinfleet.dev/instance-group={group}");
    let list = nodes.list(&ListParams::default().labels(&sel)).await?;
    let mut out: Vec<NodeReport> =
        list.items.iter().filter_map(|n| serde_json::to_value(n).ok()).map(|v| gate::report_of(&v)).collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    Ok(out)
}

fn pinned(cluster: &Cluster, group: &str, image: &str) -> Cluster {
    let mut c = cluster.clone();
    for g in c.spec.instance_groups.iter_mut().filter(|g| g.name == group) {
        let accelerator = g.image.accelerator;
        g.image = Image { id: Some(image.to_string()), selector: None, channel: None, recipe: None, accelerator };
    }
    c
}

async fn e2e(g: &Gate<'_>, cluster: &Cluster) -> Result<(), String> {
    let target = crate::e2e::Target { cluster: cluster.clone(), client: g.roller.client.clone(), addons: None };
    let report = crate::e2e::run(&target, &g.e2e, &|_, _| {}).await;
    let failed: Vec<String> = report
        .failures()
        .iter()
        .map(|c| match &c.outcome {
            crate::e2e::Outcome::Fail { reason, .. } => format!("{}: {reason}", c.name),
            _ => c.name.clone(),
        })
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(failed.join("; "))
    }
}

/// Runs the gate; `say` hears each step. Channel writes are the caller's
/// (they span the recipe's regions).
pub async fn run(g: &Gate<'_>, on: &dyn Fn(Event), say: &dyn Fn(&str)) -> Result<Outcome> {
    let r = &g.roller;
    let recipe = &g.recipe.name;
    let name = &r.cluster.metadata.name;
    let Some(candidate) = crate::cloud::aws::channels::current(r.aws, recipe, &g.from).await? else {
        bail!(
            "channel {} of recipe {recipe} has never been written in {} (promote a baked image to it first)",
            g.from,
            r.aws.region
        )
    };
    let group = canary_group(r.cluster, recipe, g.canary_group.as_deref())?;
    let images = super::job::resolve(r.aws, r.cluster, chrono::Utc::now()).await?.0;
    let previous =
        images.iter().find(|i| i.group == group).and_then(|i| i.current.clone()).ok_or_else(|| {
            anyhow!("instance group {group} of {name} has no machines yet: bootstrap the cluster first")
        })?;
    if previous == candidate {
        bail!("instance group {group} of {name} already runs {candidate}: the gate needs a group on the previous image to compare with");
    }
    let before = reports(&r.client, name, &group).await?;
    if before.is_empty() {
        bail!("instance group {group} of {name} has no Nodes to compare with");
    }
    let next = {
        let chans = &g.recipe.recipe.channels;
        chans.iter().position(|c| *c == g.from).and_then(|i| chans.get(i + 1)).cloned()
    };
    let roll = |image: String, why: &'static str| {
        let cluster = pinned(r.cluster, &group, &image);
        let groups = vec![group.clone()];
        async move { r.roll(&cluster, groups, why, on).await }
    };
    let outcome = r
        .locked(async {
            say(&format!("gate: rolling {group} of {name} to {candidate} ({recipe}/{}), from {previous}", g.from));
            roll(candidate.clone(), "ami gate (candidate)").await?;
            r.soak(g.soak).await?;
            let after = reports(&r.client, name, &group).await?;
            let upgrade_e2e = e2e(g, &pinned(r.cluster, &group, &candidate)).await;
            let differences = gate::compare(&before, &after, &g.recipe.recipe.allow_differences);
            for d in &differences {
                say(&format!(
                    "gate: {} differs{}: {} → {}",
                    d.aspect,
                    if d.allowed { " (allowed)" } else { "" },
                    d.before,
                    d.after
                ));
            }
            say(&format!("gate: rolling {group} back to {previous} (the downgrade)"));
            roll(previous.clone(), "ami gate (downgrade)").await?;
            let downgrade_e2e = e2e(g, &pinned(r.cluster, &group, &previous)).await;
            let verdict = gate::decide(&differences, upgrade_e2e.clone(), downgrade_e2e.clone(), next.as_deref());
            anyhow::Ok(Outcome {
                recipe: recipe.clone(),
                cluster: name.clone(),
                group: group.clone(),
                candidate: candidate.clone(),
                previous: previous.clone(),
                before: before.clone(),
                after,
                differences,
                upgrade_e2e,
                downgrade_e2e,
                verdict,
            })
        })
        .await?;
    // The record: what was compared and why it passed or stopped, kept
    // beside the cluster's other state (one object per candidate; a gate
    // run again on the same candidate replaces it).
    let key = record_key(recipe, &outcome.candidate);
    r.store.put_json(&key, &Record { at: chrono::Utc::now(), by: r.command.clone(), outcome: outcome.clone() }).await?;
    say(&format!("gate: recorded in the state store as {key}"));
    Ok(outcome)
}

/// Where a gate's outcome is kept in the cluster's state store.
pub fn record_key(recipe: &str, candidate: &str) -> String {
    format!("images/gates/{recipe}/{candidate}.json")
}

/// A gate's outcome as the state store keeps it.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub at: chrono::DateTime<chrono::Utc>,
    pub by: String,
    pub outcome: Outcome,
}
