//! Cluster validation, as a roll or a soak asks it between steps: every
//! node Ready, and the Deployments and DaemonSets of kube-system and of the
//! addons ready by the one set of readiness rules ([`super::ready`]).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::Client;

use super::drain::node_ready;

/// One validation pass: every node Ready (except `ignore`, nodes still
/// joining), and the Deployments and DaemonSets of kube-system and of the
/// addons ready. `Err` says what is not.
pub async fn validate(client: &Client, ignore: &BTreeSet<String>) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes.list(&ListParams::default()).await.map_err(|e| format!("listing nodes: {e}"))?;
    let not_ready: Vec<String> = list
        .items
        .iter()
        .filter(|n| !node_ready(n))
        .filter_map(|n| n.metadata.name.clone())
        .filter(|n| !ignore.contains(n))
        .collect();
    if !not_ready.is_empty() {
        return Err(format!("nodes not Ready: {}", not_ready.join(", ")));
    }
    use super::ready::{ready, ReadyKind};
    let (label, system) = (ListParams::default().labels(super::ADDON_LABEL), ListParams::default());
    // kube-system's workloads, and every addon's, wherever it lives.
    let scopes: [(Api<Deployment>, Api<DaemonSet>, &ListParams); 2] = [
        (Api::namespaced(client.clone(), "kube-system"), Api::namespaced(client.clone(), "kube-system"), &system),
        (Api::all(client.clone()), Api::all(client.clone()), &label),
    ];
    let mut problems = Vec::new();
    for (deploys, daemons, lp) in scopes {
        for d in deploys.list(lp).await.map_err(|e| e.to_string())?.items {
            let v = serde_json::to_value(&d).unwrap_or_default();
            if let Err(why) = ready(ReadyKind::Deployment, &v) {
                problems.push(format!("Deployment {}: {why}", d.metadata.name.unwrap_or_default()));
            }
        }
        for d in daemons.list(lp).await.map_err(|e| e.to_string())?.items {
            let v = serde_json::to_value(&d).unwrap_or_default();
            if let Err(why) = ready(ReadyKind::DaemonSet, &v) {
                problems.push(format!("DaemonSet {}: {why}", d.metadata.name.unwrap_or_default()));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
