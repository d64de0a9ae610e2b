//! What kubeadm keeps in the cluster, read and changed through the API as a
//! version upgrade needs it: the versions running (kubeadm-config's
//! ClusterConfiguration, each group's kubelets), the cluster-wide
//! configuration step (`kubernetesVersion` in ClusterConfiguration, which
//! every joining control-plane machine runs) and the addons kubeadm owns
//! (kube-proxy, CoreDNS), as `kubeadm upgrade apply` changes them.

use std::collections::BTreeMap;

use anyhow::{anyhow, Context as _, Result};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, PostParams};
use kube::Client;

use crate::spec::versions::{coredns_tag, Running, Version};

const NS: &str = "kube-system";
pub const CONFIG_MAP: &str = "kubeadm-config";
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
pub const GROUP_LABEL: &str = "pinfleet.dev/instance-group";

/// `kubernetesVersion` of a ClusterConfiguration document.
/// Why control-plane machines joining with this ClusterConfiguration (the
/// running cluster's kubeadm-config, which every joining control-plane
/// machine runs) could not replace the running ones; empty when nothing
/// stands in the way. `control_plane_addresses`: the running control-plane
/// Nodes' addresses (they go with their machines). Err when the document
/// is not YAML.
pub fn control_plane_join_blockers(doc: &str, control_plane_addresses: &[String]) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_saphyr::from_str(doc).map_err(|e| format!("ClusterConfiguration is not YAML: {e}"))?;
    let mut why = Vec::new();
    match v.get("controlPlaneEndpoint").and_then(serde_json::Value::as_str).filter(|e| !e.trim().is_empty()) {
        None => why.push(
            "controlPlaneEndpoint is unset: kubeadm refuses to add a control-plane machine to a cluster without a stable controlPlaneEndpoint address".to_string(),
        ),
        Some(ep) => {
            let host = ep.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()).map_or(ep, |(h, _)| h);
            let host = host.trim_start_matches('[').trim_end_matches(']');
            if control_plane_addresses.iter().any(|a| a == host) {
                why.push(format!(
                    "controlPlaneEndpoint {ep} is a running control-plane machine's own address: it goes with that machine, and every node and client with it"
                ));
            }
        }
    }
    for flag in machine_local_api_server_flags(&v) {
        why.push(format!(
            "apiServer.extraArgs {flag} names a file only the running control-plane machines hold: a new machine's API server would not start (for encryption-provider-config, without the keys of the Secrets stored now)"
        ));
    }
    Ok(why)
}

/// The API server flags that name files only the running machines hold
/// (`apiServer.extraArgs`, as a map in v1beta3 or a list of `{name, value}`
/// in v1beta4), each as `name=value`.
fn machine_local_api_server_flags(v: &serde_json::Value) -> Vec<String> {
    const LOCAL: [&str; 3] = ["encryption-provider-config", "audit-policy-file", "admission-control-config-file"];
    let args: Vec<(String, String)> = match v.pointer("/apiServer/extraArgs") {
        Some(serde_json::Value::Object(m)) => {
            m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect()
        }
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|x| {
                Some((x["name"].as_str()?.to_string(), x["value"].as_str().unwrap_or_default().to_string()))
            })
            .collect(),
        _ => Vec::new(),
    };
    args.into_iter().filter(|(k, _)| LOCAL.contains(&k.as_str())).map(|(k, v)| format!("{k}={v}")).collect()
}

pub fn cluster_configuration_version(doc: &str) -> Option<Version> {
    doc.lines()
        .find_map(|l| l.strip_prefix("kubernetesVersion:"))
        .and_then(|v| Version::parse(v.trim().trim_matches('"').trim_matches('\'')))
}

/// The document with `kubernetesVersion` set to `v` (the rest as it was).
pub fn with_version(doc: &str, v: Version) -> String {
    let mut out: Vec<String> = doc
        .lines()
        .map(|l| if l.starts_with("kubernetesVersion:") { format!("kubernetesVersion: v{v}") } else { l.to_string() })
        .collect();
    if !doc.lines().any(|l| l.starts_with("kubernetesVersion:")) {
        out.push(format!("kubernetesVersion: v{v}"));
    }
    out.join("\n") + "\n"
}

/// What the cluster runs: the control plane is the older of the cluster
/// configuration and its oldest control-plane kubelet (so a roll halted
/// halfway is finished before the next minor), node groups by their oldest kubelet.
/// `None` when the cluster keeps no kubeadm configuration (not set up by kubeadm).
pub async fn running(client: &Client) -> Result<Option<Running>> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let Some(cm) = cms.get_opt(CONFIG_MAP).await.with_context(|| format!("reading kube-system/{CONFIG_MAP}"))? else {
        return Ok(None);
    };
    let doc = cm.data.as_ref().and_then(|d| d.get("ClusterConfiguration")).cloned().unwrap_or_default();
    let configured = cluster_configuration_version(&doc)
        .ok_or_else(|| anyhow!("kube-system/{CONFIG_MAP} has no readable kubernetesVersion in ClusterConfiguration"))?;
    let nodes: Api<Node> = Api::all(client.clone());
    let mut control_plane = configured;
    let mut node_groups: BTreeMap<String, Version> = BTreeMap::new();
    for n in nodes.list(&ListParams::default()).await.context("listing nodes")?.items {
        let labels = n.metadata.labels.clone().unwrap_or_default();
        let Some(v) =
            n.status.as_ref().and_then(|s| s.node_info.as_ref()).and_then(|i| Version::parse(&i.kubelet_version))
        else {
            continue;
        };
        if labels.contains_key(CONTROL_PLANE_LABEL) {
            control_plane = control_plane.min(v);
        } else if let Some(g) = labels.get(GROUP_LABEL) {
            let e = node_groups.entry(g.clone()).or_insert(v);
            *e = (*e).min(v);
        }
    }
    Ok(Some(Running { control_plane, node_groups }))
}

/// The cluster-wide configuration step: ClusterConfiguration names `v`.
/// Written with the resourceVersion read, so a concurrent change fails.
pub async fn set_cluster_version(client: &Client, v: Version) -> Result<bool> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut cm = cms.get(CONFIG_MAP).await.with_context(|| format!("reading kube-system/{CONFIG_MAP}"))?;
    let data = cm.data.get_or_insert_with(Default::default);
    let doc = data.get("ClusterConfiguration").cloned().unwrap_or_default();
    if cluster_configuration_version(&doc) == Some(v) {
        return Ok(false);
    }
    data.insert("ClusterConfiguration".into(), with_version(&doc, v));
    cms.replace(CONFIG_MAP, &PostParams::default(), &cm)
        .await
        .with_context(|| format!("writing kube-system/{CONFIG_MAP}"))?;
    Ok(true)
}

/// `image` with its tag replaced.
fn retag(image: &str, tag: &str) -> String {
    let repo = match image.rsplit_once(':') {
        Some((repo, t)) if !t.contains('/') => repo,
        _ => image,
    };
    format!("{repo}:{tag}")
}

/// kube-proxy and CoreDNS at `v`'s images, where the cluster has them.
/// Returns what changed, e.g. `kube-proxy v1.33.2`.
pub async fn upgrade_addons(client: &Client, v: Version) -> Result<Vec<String>> {
    let mut changed = Vec::new();
    let daemons: Api<DaemonSet> = Api::namespaced(client.clone(), NS);
    if let Some(mut ds) = daemons.get_opt("kube-proxy").await? {
        let tag = format!("v{v}");
        if let Some(c) = ds.spec.as_mut().and_then(|s| s.template.spec.as_mut()).and_then(|s| s.containers.first_mut())
        {
            let want = retag(c.image.as_deref().unwrap_or("registry.k8s.io/kube-proxy"), &tag);
            if c.image.as_deref() != Some(want.as_str()) {
                c.image = Some(want);
                daemons.replace("kube-proxy", &PostParams::default(), &ds).await.context("updating kube-proxy")?;
                changed.push(format!("kube-proxy {tag}"));
            }
        }
    }
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NS);
    if let (Some(mut d), Some(tag)) = (deploys.get_opt("coredns").await?, coredns_tag(v.minor)) {
        if let Some(c) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()).and_then(|s| s.containers.first_mut()) {
            let want = retag(c.image.as_deref().unwrap_or("registry.k8s.io/coredns/coredns"), tag);
            if c.image.as_deref() != Some(want.as_str()) {
                c.image = Some(want);
                deploys.replace("coredns", &PostParams::default(), &d).await.context("updating CoreDNS")?;
                changed.push(format!("CoreDNS {tag}"));
            }
        }
    }
    Ok(changed)
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_stops_a_control_plane_machine_joining_with_the_running_configuration_is_named() {
        use super::control_plane_join_blockers as blockers;
        let cp = ["10.0.1.10".to_string()];
        let ok = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com:6443\napiServer:\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"30\"\n";
        assert!(blockers(ok, &cp).unwrap().is_empty());
        // v1beta4's list and v1beta3's map of flags alike.
        let v1beta4 = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com\napiServer:\n  extraArgs:\n  - name: encryption-provider-config\n    value: /etc/kubernetes/enc.yaml\n";
        let why = blockers(v1beta4, &cp).unwrap();
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(
            why[0].starts_with("apiServer.extraArgs encryption-provider-config=/etc/kubernetes/enc.yaml names a file"),
            "{why:?}"
        );
        let v1beta3 = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com\napiServer:\n  extraArgs:\n    audit-policy-file: /etc/kubernetes/audit.yaml\n    v: \"2\"\n";
        assert!(blockers(v1beta3, &cp).unwrap()[0].contains("audit-policy-file=/etc/kubernetes/audit.yaml"));
        // No shared endpoint, or the machine's own address: kubeadm's words, or why not.
        let none = "kind: ClusterConfiguration\napiServer: {}\n";
        assert!(blockers(none, &cp).unwrap()[0].contains("without a stable controlPlaneEndpoint address"));
        let own = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: 10.0.1.10:6443\n";
        assert!(blockers(own, &cp).unwrap()[0].contains("a running control-plane machine's own address"));
        let vip = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: 10.0.1.200:6443\n";
        assert!(blockers(vip, &cp).unwrap().is_empty(), "an address no machine holds (a VIP) stays");
        assert!(blockers("apiServer: [unclosed", &cp).is_err());
    }

    use super::*;

    #[test]
    fn reads_and_sets_the_cluster_configuration_version() {
        let doc =
            "apiServer: {}\nclusterName: dev\nkubernetesVersion: v1.32.6\nnetworking:\n  podSubnet: 10.244.0.0/16\n";
        assert_eq!(cluster_configuration_version(doc), Version::parse("1.32.6"));
        let v = Version::parse("1.33.2").unwrap();
        let new = with_version(doc, v);
        assert_eq!(cluster_configuration_version(&new), Some(v));
        assert!(new.contains("clusterName: dev\n") && new.contains("  podSubnet: 10.244.0.0/16\n"));
        assert_eq!(retag("registry.k8s.io/kube-proxy:v1.32.6", "v1.33.2"), "registry.k8s.io/kube-proxy:v1.33.2");
        assert_eq!(retag("localhost:5000/kube-proxy", "v1"), "localhost:5000/kube-proxy:v1");
    }
}
