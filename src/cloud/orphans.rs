//! Orphans (pure): resources tagged by pinfleet whose cluster has no
//! definition or no longer exists in its state store, and machines inside
//! pinfleet VPCs that carry no owner tag — machines nobody answers for.
//! The fleet-wide reads are `aws::observe::fleet`; whether a cluster
//! exists is asked of its state store by the caller; each orphan names the
//! account and region it is in, and [`crate::views::orphans`] draws them.

use std::collections::BTreeMap;

use serde::Serialize;

use super::observed::ObservedInstance;
use super::tags;

/// A resource found by its `managed-by` tag, with the tags that say whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tagged {
    pub kind: String,
    pub id: String,
    pub cluster: Option<String>,
    pub owner: Option<String>,
}

/// What one region holds that pinfleet made, and the machines in its VPCs.
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    pub tagged: Vec<Tagged>,
    /// Live instances inside pinfleet VPCs, tagged or not.
    pub in_vpcs: Vec<ObservedInstance>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Orphan {
    /// The AWS account it is in (scanned through a cluster's role, or the
    /// caller's own).
    pub account: String,
    pub region: String,
    pub kind: String,
    pub id: String,
    pub cluster: String,
    pub owner: String,
    pub why: String,
}

/// Whether a cluster named by a tag is known: no definition, a definition
/// whose state store has no spec (destroyed or never applied), or alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    NoDefinition,
    NotInStateStore,
    Alive,
}

/// The orphans of one account's region, given what each tagged cluster is.
pub fn judge(
    account: &str,
    region: &str,
    fleet: &Fleet,
    clusters: &BTreeMap<String, Known>,
    homes: &BTreeMap<String, (String, String)>,
    clusters_dir: &str,
) -> Vec<Orphan> {
    let mut out = Vec::new();
    for t in &fleet.tagged {
        let cluster = t.cluster.clone().unwrap_or_default();
        let why = match clusters.get(&cluster).copied().unwrap_or(Known::NoDefinition) {
            Known::NoDefinition => format!("no cluster `{cluster}` in {clusters_dir}"),
            Known::NotInStateStore => {
                format!("cluster `{cluster}` does not exist in its state store (destroyed or never applied)")
            }
            // A live cluster's name on a resource where that cluster does
            // not live (left behind by a move of account or region, or a
            // cluster of the same name elsewhere): not its.
            Known::Alive => match homes.get(&cluster) {
                Some((a, r)) if a != account || r != region => {
                    format!("cluster `{cluster}` lives in account {a}, {r}: this is not its")
                }
                _ => continue,
            },
        };
        out.push(Orphan {
            account: account.to_string(),
            region: region.to_string(),
            kind: t.kind.clone(),
            id: t.id.clone(),
            cluster,
            owner: t.owner.clone().unwrap_or_else(|| "(none)".into()),
            why,
        });
    }
    // Unowned machines inside pinfleet VPCs (started by hand, say).
    for i in fleet.in_vpcs.iter().filter(|i| i.is_live() && i.owner.is_none()) {
        out.push(Orphan {
            account: account.to_string(),
            region: region.to_string(),
            kind: "instance".into(),
            id: i.id.clone(),
            cluster: i.cluster.clone().unwrap_or_else(|| "-".into()),
            owner: "(none)".into(),
            why: format!("no {} tag, inside pinfleet VPC {}", tags::OWNER, i.vpc_id.clone().unwrap_or_default()),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live cluster's name on a resource in another account or region
    /// (left behind by a move, or another cluster of the same name) is an
    /// orphan there; where the cluster lives it is not.
    #[test]
    fn a_live_clusters_name_elsewhere_than_it_lives_is_an_orphan() {
        let fleet = Fleet {
            tagged: vec![Tagged { kind: "vpc".into(), id: "vpc-1".into(), cluster: Some("c2".into()), owner: None }],
            in_vpcs: vec![],
        };
        let known: BTreeMap<String, Known> = [("c2".to_string(), Known::Alive)].into();
        let homes: BTreeMap<String, (String, String)> =
            [("c2".to_string(), ("222222222222".to_string(), "us-east-1".to_string()))].into();
        assert!(judge("222222222222", "us-east-1", &fleet, &known, &homes, "clusters").is_empty());
        for (account, region) in [("333333333333", "us-east-1"), ("222222222222", "us-west-2")] {
            let out = judge(account, region, &fleet, &known, &homes, "clusters");
            assert_eq!(out.len(), 1, "{account} {region}");
            assert!(out[0].why.contains("lives in account 222222222222, us-east-1"), "{:?}", out[0]);
        }
    }
}
