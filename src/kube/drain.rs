//! Node operations for rolls: list nodes by machine, cordon, drain through
//! the eviction API (PodDisruptionBudgets honoured; DaemonSet and mirror
//! pods skipped; 429s retried with backoff until the drain timeout, then a
//! report naming the blocking pods and budgets, or deletion with force),
//! delete, and validate the cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams};
use kube::Client;
use serde::Serialize;

/// Annotation that asks for a node's machine to be replaced.
pub const NEEDS_UPDATE: &str = "pinfleet.dev/needs-update";

/// A node as a roll sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeState {
    pub name: String,
    pub ready: bool,
    pub cordoned: bool,
    pub needs_update: bool,
}

/// The instance id in a providerID such as `aws:///us-east-1a/i-0abc`.
pub fn instance_id(provider_id: &str) -> Option<&str> {
    provider_id.rsplit('/').next().filter(|s| !s.is_empty())
}

pub fn node_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Nodes by the machine behind them.
pub async fn nodes_by_instance(client: &Client) -> Result<BTreeMap<String, NodeState>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.context("listing nodes")?;
    Ok(list
        .items
        .iter()
        .filter_map(|n| {
            let id = n.spec.as_ref()?.provider_id.as_deref().and_then(instance_id)?.to_string();
            let state = NodeState {
                name: n.metadata.name.clone()?,
                ready: node_ready(n),
                cordoned: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
                needs_update: n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(NEEDS_UPDATE)),
            };
            Some((id, state))
        })
        .collect())
}

pub async fn cordon(client: &Client, node: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(serde_json::json!({"spec": {"unschedulable": true}})))
        .await
        .with_context(|| format!("cordoning {node}"))?;
    Ok(())
}

pub async fn delete_node(client: &Client, node: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    match nodes.delete(node, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting node {node}")),
    }
}

/// Why a drain did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("drain of {node} timed out after {seconds}s: pods {} still there, blocked by {}", pods.join(", "), if budgets.is_empty() { "nothing reported".to_string() } else { format!("PodDisruptionBudget {}", budgets.join(", ")) })]
pub struct DrainBlocked {
    pub node: String,
    pub seconds: u64,
    pub pods: Vec<String>,
    pub budgets: Vec<String>,
}

fn skipped(p: &Pod) -> bool {
    let mirror = p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    let daemon = p.metadata.owner_references.as_ref().is_some_and(|o| o.iter().any(|r| r.kind == "DaemonSet"));
    mirror || daemon
}

fn finished(p: &Pod) -> bool {
    matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Pods that must leave the node.
async fn evictable(client: &Client, node: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::all(client.clone());
    let list = pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .with_context(|| format!("listing pods on {node}"))?;
    Ok(list.items.into_iter().filter(|p| !skipped(p)).collect())
}

fn key(p: &Pod) -> (String, String) {
    (p.metadata.namespace.clone().unwrap_or_default(), p.metadata.name.clone().unwrap_or_default())
}

/// Evicts every pod from the node (the client must not retry 429s itself:
/// see [`super::Retry::Never`]). Finished pods are deleted outright.
pub async fn drain(client: &Client, node: &str, timeout: Duration, force: bool) -> Result<()> {
    drain_with(client, node, timeout, force, None).await
}

/// Drains a machine that is about to go (a Spot interruption): each pod's
/// grace period capped to `within` (its own when shorter), and whatever is
/// left at the end deleted (the machine takes it anyway).
pub async fn drain_before(client: &Client, node: &str, within: Duration) -> Result<()> {
    drain_with(client, node, within, true, Some(within.as_secs() as i64)).await
}

async fn drain_with(client: &Client, node: &str, timeout: Duration, force: bool, grace_cap: Option<i64>) -> Result<()> {
    let deadline = Instant::now() + timeout;
    let mut backoff: BTreeMap<(String, String), (Instant, Duration)> = BTreeMap::new();
    loop {
        let pods = evictable(client, node).await?;
        if pods.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let blocked = blocked_by(client, node, &pods, timeout).await?;
            if !force {
                return Err(blocked.into());
            }
            tracing::warn!("{blocked}; deleting the pods (--force-drain)");
            for p in &pods {
                let (ns, name) = key(p);
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let dp = match grace_cap {
                    Some(_) => DeleteParams::default().grace_period(0),
                    None => DeleteParams::default(),
                };
                let _ = api.delete(&name, &dp).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        let now = Instant::now();
        let due: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| backoff.get(&key(p)).is_none_or(|(at, _)| *at <= now))
            .collect();
        let results = futures::stream::iter(due.iter().map(|p| async move {
            let (ns, name) = key(p);
            let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
            // The pod's own grace, capped to the time the machine has left.
            let own = p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
            let dp = grace_cap.map(|cap| DeleteParams::default().grace_period(own.min(cap).max(0) as u32));
            let r = if finished(p) {
                api.delete(&name, &dp.clone().unwrap_or_default()).await.map(|_| ())
            } else if let Some(grace) = dp.as_ref().and_then(|d| d.grace_period_seconds) {
                // Written out: kube's EvictParams sends `delete_options`,
                // which an API server ignores (the field is `deleteOptions`).
                let body = serde_json::json!({
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": name, "namespace": ns},
                    "deleteOptions": {"gracePeriodSeconds": grace},
                });
                api.create_subresource::<_, serde_json::Value>(
                    "eviction",
                    &name,
                    &kube::api::PostParams::default(),
                    &body,
                )
                .await
                .map(|_| ())
            } else {
                api.evict(&name, &EvictParams::default()).await.map(|_| ())
            };
            ((ns, name), r)
        }))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
        for (k, r) in results {
            match r {
                Ok(()) => {
                    backoff.remove(&k);
                }
                // A budget says not now, or the pod is already gone.
                Err(kube::Error::Api(e)) if e.code == 429 || e.code == 404 => {
                    let wait = backoff
                        .get(&k)
                        .map_or(Duration::from_millis(200), |(_, d)| (*d * 2).min(Duration::from_secs(5)));
                    backoff.insert(k, (Instant::now() + wait, wait));
                }
                Err(e) => return Err(e).with_context(|| format!("evicting {}/{} from {node}", k.0, k.1)),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The pods left and the budgets that allow no disruption for them.
async fn blocked_by(client: &Client, node: &str, pods: &[Pod], timeout: Duration) -> Result<DrainBlocked> {
    let mut budgets = BTreeSet::new();
    let namespaces: BTreeSet<String> = pods.iter().map(|p| key(p).0).collect();
    for ns in &namespaces {
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
        for pdb in api.list(&ListParams::default()).await?.items {
            let allowed = pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed);
            let labels = pdb
                .spec
                .as_ref()
                .and_then(|s| s.selector.as_ref())
                .and_then(|s| s.match_labels.clone())
                .unwrap_or_default();
            let covers = pods.iter().any(|p| {
                key(p).0 == *ns
                    && labels.iter().all(|(k, v)| p.metadata.labels.as_ref().and_then(|l| l.get(k)) == Some(v))
            });
            if covers && allowed == 0 {
                budgets.insert(format!("{ns}/{}", pdb.metadata.name.unwrap_or_default()));
            }
        }
    }
    Ok(DrainBlocked {
        node: node.to_string(),
        seconds: timeout.as_secs(),
        pods: pods.iter().map(|p| format!("{}/{}", key(p).0, key(p).1)).collect(),
        budgets: budgets.into_iter().collect(),
    })
}
