//! Failover across a federation's members (pure, `now` a parameter): a
//! member that is unreachable or has no Ready nodes keeps its replicas for a
//! grace period, then is failed over (its replicas move to the others); a
//! member that recovers stays out until a rebalance is asked for, so
//! replicas do not flap back and forth.
//!
//! What this remembers between runs ([`Memory`]) lives in the state store
//! (`federation/APP.json` under the first member's cluster), so every
//! operator and the scheduled job see the same failovers.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::fanout::{self, FederatedService, Observed};
use super::placement::{self, Share};
use crate::spec::Cluster;
use crate::state::Store;

/// Since when each member has been unhealthy, and which are failed over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    pub unhealthy_since: BTreeMap<String, DateTime<Utc>>,
    pub failed_over: BTreeSet<String>,
}

/// How failover behaves.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// How long a member may be unhealthy before its replicas move.
    pub grace: Duration,
    /// Let replicas move back to members that recovered.
    pub rebalance: bool,
}

/// The placement now, and each member's health in words.
pub fn assess(
    fs: &FederatedService,
    members: &[Cluster],
    observed: &BTreeMap<String, Observed>,
    mem: &mut Memory,
    policy: Policy,
    now: DateTime<Utc>,
) -> Result<(Vec<Share>, BTreeMap<String, String>)> {
    let mut health = BTreeMap::new();
    let mut placed = Vec::new();
    let mut placement_policy = fs.spec.placement.clone();
    for c in members {
        let name = c.metadata.name.clone();
        let o = &observed[&name];
        let up = o.reachable && o.ready_nodes > 0;
        let state = if up {
            mem.unhealthy_since.remove(&name);
            if mem.failed_over.contains(&name) && !policy.rebalance {
                "recovered (kept out; --rebalance moves replicas back)".to_string()
            } else {
                mem.failed_over.remove(&name);
                "healthy".to_string()
            }
        } else {
            let since = *mem.unhealthy_since.entry(name.clone()).or_insert(now);
            let why = o.error.clone().unwrap_or_else(|| "no Ready nodes".into());
            if now - since >= chrono::Duration::from_std(policy.grace).unwrap_or_default() {
                mem.failed_over.insert(name.clone());
                format!("failed over: {why}")
            } else {
                format!(
                    "unhealthy for {}s (grace {}): {why}",
                    (now - since).num_seconds(),
                    humantime::format_duration(policy.grace)
                )
            }
        };
        let in_grace = !up && !mem.failed_over.contains(&name);
        let placeable = (up && !mem.failed_over.contains(&name)) || in_grace;
        if in_grace {
            // It keeps what it runs until the grace period ends.
            placement_policy.clusters.insert(name.clone(), placement::Limit { min: o.desired, max: Some(o.desired) });
        }
        placed.push(fanout::member(c, o, placeable));
        health.insert(name, state);
    }
    let shares = placement::place(&fs.metadata.name, fs.spec.total_replicas, &placement_policy, &placed)?;
    Ok((shares, health))
}

fn key(app: &str) -> String {
    format!("federation/{app}.json")
}

/// The memory of `app`'s failovers (empty the first time).
pub async fn load(store: &Store, app: &str) -> Result<Memory> {
    Ok(store.get_json(&key(app)).await?.unwrap_or_default())
}

pub async fn save(store: &Store, app: &str, mem: &Memory) -> Result<()> {
    store.put_json(&key(app), mem).await.map(|_| ())
}

/// The state store holding the failover memory: `url` when given, else the
/// first member's (by name), so every operator finds the same one.
pub async fn open_store(url: Option<&str>, members: &[Cluster]) -> Result<Store> {
    use anyhow::Context as _;
    let first = members.first().context("the federation has no members")?;
    let url = url.unwrap_or(&first.spec.state_store);
    let aws = if url.starts_with("s3://") {
        let opts = crate::cloud::aws::AwsOptions::from_env(
            crate::cloud::aws::Target::Aws,
            Some(first.spec.cloud.region.clone()),
        )?;
        Some(crate::cloud::aws::Aws::connect(&opts).await?)
    } else {
        None
    };
    Store::open(url, &first.metadata.name, aws.as_ref().map(|a| a as &dyn crate::state::S3Access))
        .await
        .with_context(|| format!("opening {url} for the federation's failover memory"))
}

/// One member in `federation plan|status`: what it runs, what it should.
#[derive(Debug, Clone, Serialize)]
pub struct MemberRow {
    pub cluster: String,
    pub health: String,
    pub current: u32,
    pub ready: u32,
    pub desired: u32,
    pub reason: String,
}

/// The rows for the shares [`assess`] decided.
pub fn rows(
    shares: &[Share],
    health: &BTreeMap<String, String>,
    observed: &BTreeMap<String, Observed>,
) -> Vec<MemberRow> {
    shares
        .iter()
        .map(|s| {
            let o = &observed[&s.cluster];
            MemberRow {
                cluster: s.cluster.clone(),
                health: health.get(&s.cluster).cloned().unwrap_or_default(),
                current: o.desired,
                ready: o.ready,
                desired: s.replicas,
                reason: s.reason.clone(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn memory_round_trips_through_json() {
        let mut m = Memory::default();
        m.unhealthy_since.insert("b".into(), at("2026-11-22T10:00:00Z"));
        m.failed_over.insert("c".into());
        let back: Memory = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
