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

/// Why control-plane machines joining with this ClusterConfiguration (the
/// running cluster's kubeadm-config, which every joining control-plane
/// machine runs) could not replace the running ones; empty when nothing
/// stands in the way. `node_addresses`: each running Node's name and
/// addresses (an endpoint that is one of them goes with that machine).
/// Err when the document is not YAML.
pub fn control_plane_join_blockers(doc: &str, node_addresses: &[(String, String)]) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_saphyr::from_str(doc).map_err(|e| format!("ClusterConfiguration is not YAML: {e}"))?;
    let mut why = Vec::new();
    match v.get("controlPlaneEndpoint").and_then(serde_json::Value::as_str).filter(|e| !e.trim().is_empty()) {
        None => why.push(
            "controlPlaneEndpoint is unset: kubeadm refuses to add a control-plane machine to a cluster without a stable controlPlaneEndpoint address".to_string(),
        ),
        Some(ep) if ep.contains('/') || !well_formed(ep) => why.push(format!(
            "controlPlaneEndpoint {} is not HOST[:PORT] (kubeadm takes no scheme or path there)",
            ep.trim()
        )),
        Some(ep) => {
            let host = endpoint_host(ep);
            if let Some((node, _)) = node_addresses.iter().find(|(_, a)| same_host(&host, a)) {
                why.push(format!(
                    "controlPlaneEndpoint {} is Node {node}'s own address: it goes with that machine, and every node and client with it",
                    ep.trim()
                ));
            }
        }
    }
    for flag in machine_local_api_server_flags(&v) {
        let keys = if flag.starts_with("encryption-provider-config=") {
            " (without the keys of the Secrets stored now)"
        } else {
            ""
        };
        why.push(format!(
            "apiServer.extraArgs {flag} names a file only the running control-plane machines hold: a new machine's API server would not start{keys}"
        ));
    }
    Ok(why)
}

/// An endpoint kubeadm can take: an address, `[IPv6]:PORT`, or a
/// non-empty host with an optional port from 1 to 65535.
fn well_formed(ep: &str) -> bool {
    let ep = ep.trim();
    let port_ok = |p: &str| p.parse::<u16>().is_ok_and(|p| p > 0);
    if ep.split('%').next().unwrap_or_default().parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    if let Some(rest) = ep.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((_, "")) => true,
            Some((_, tail)) => tail.strip_prefix(':').is_some_and(port_ok),
            None => false,
        };
    }
    let (host, port) = match ep.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (ep, None),
    };
    !host.is_empty() && !host.contains(char::is_whitespace) && port.is_none_or(port_ok)
}

/// `controlPlaneEndpoint` of a ClusterConfiguration document, when set.
pub fn control_plane_endpoint(doc: &str) -> Option<String> {
    let v: serde_json::Value = serde_saphyr::from_str(doc).ok()?;
    v.get("controlPlaneEndpoint")?.as_str().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// The host of a `controlPlaneEndpoint` (`host`, `host:port`, an IPv6
/// address bare or in brackets, with or without a port).
pub fn endpoint_host(ep: &str) -> String {
    let ep = ep.trim();
    if ep.split('%').next().unwrap_or_default().parse::<std::net::IpAddr>().is_ok() {
        return ep.to_string();
    }
    if let Some(rest) = ep.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest).to_string();
    }
    ep.rsplit_once(':').filter(|(_, p)| p.parse::<u16>().is_ok()).map_or(ep, |(h, _)| h).to_string()
}

/// One host however it is spelled: addresses compared as addresses (IPv6
/// case and zero compression, a zone, IPv4 mapped into IPv6 alike), names
/// without case or a final dot, a short name as the first label of a full one.
fn same_host(a: &str, b: &str) -> bool {
    let ip =
        |s: &str| s.trim().split('%').next().unwrap_or_default().parse::<std::net::IpAddr>().map(|a| a.to_canonical());
    match (ip(a), ip(b)) {
        (Ok(x), Ok(y)) => x == y,
        (Err(_), Err(_)) => {
            let name = |s: &str| s.trim().trim_end_matches('.').to_ascii_lowercase();
            let (a, b) = (name(a), name(b));
            let first = |s: &str| s.split('.').next().unwrap_or_default().to_string();
            a == b || (!a.contains('.') && a == first(&b)) || (!b.contains('.') && b == first(&a))
        }
        _ => false,
    }
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
    args.into_iter()
        .map(|(k, v)| (k.trim().trim_start_matches('-').to_string(), v))
        .filter(|(k, _)| LOCAL.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// `kubernetesVersion` of a ClusterConfiguration document.
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
        let nodes: Vec<(String, String)> =
            [("cp-0", "cp-0"), ("cp-0", "10.0.1.10"), ("cp-0", "fd00:20::4"), ("cp-0", "ip-10-0-1-10.ec2.internal")]
                .iter()
                .chain(&[("worker-0", "10.0.2.7")])
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect();
        let ok = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com:6443\napiServer:\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"30\"\n";
        assert!(blockers(ok, &nodes).unwrap().is_empty());
        // v1beta4's list and v1beta3's map of flags alike, however spelled.
        let v1beta4 = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com\napiServer:\n  extraArgs:\n  - name: encryption-provider-config\n    value: /etc/kubernetes/enc.yaml\n";
        let why = blockers(v1beta4, &nodes).unwrap();
        assert_eq!(
            why,
            ["apiServer.extraArgs encryption-provider-config=/etc/kubernetes/enc.yaml names a file only the running control-plane machines hold: a new machine's API server would not start (without the keys of the Secrets stored now)"]
        );
        let v1beta3 = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com\napiServer:\n  extraArgs:\n    audit-policy-file: /etc/kubernetes/audit.yaml\n    v: \"2\"\n";
        let why = blockers(v1beta3, &nodes).unwrap();
        assert!(
            why[0].contains("audit-policy-file=/etc/kubernetes/audit.yaml") && !why[0].contains("Secrets"),
            "{why:?}"
        );
        let dashed = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: api.lab.example.com\napiServer:\n  extraArgs:\n    \"--admission-control-config-file\": /a.yaml\n";
        assert!(blockers(dashed, &nodes).unwrap()[0].contains("admission-control-config-file=/a.yaml"));
        // No shared endpoint: kubeadm's own refusal.
        let none = "kind: ClusterConfiguration\napiServer: {}\n";
        assert!(blockers(none, &nodes).unwrap()[0].contains("without a stable controlPlaneEndpoint address"));
        // A machine's own address, however it is spelled, goes with it.
        for ep in [
            "10.0.1.10:6443",
            "' 10.0.1.10:6443 '",
            "10.0.1.10",
            "\"[fd00:20::4]:6443\"",
            "\"[FD00:20:0:0::4]:6443\"",
            "\"fd00:20::4\"",
            "IP-10-0-1-10.ec2.internal.:6443",
            "10.0.2.7:6443",
            "\"::ffff:10.0.1.10\"",
            "\"[::ffff:a00:10a]:6443\"",
            "\"[fd00:20::4%eth0]:6443\"",
            "\"fd00:20::4%eth0\"",
            "ip-10-0-1-10:6443",
            "cp-0",
        ] {
            let doc = format!("kind: ClusterConfiguration\ncontrolPlaneEndpoint: {ep}\n");
            let why = blockers(&doc, &nodes).unwrap();
            assert_eq!(why.len(), 1, "{ep}: {why:?}");
            assert!(why[0].contains("own address"), "{ep}: {why:?}");
        }
        let vip = "kind: ClusterConfiguration\ncontrolPlaneEndpoint: 10.0.1.200:6443\n";
        assert!(blockers(vip, &nodes).unwrap().is_empty(), "an address no machine holds (a VIP) stays");
        assert!(blockers("apiServer: [unclosed", &nodes).is_err());
        for bad in
            ["https://api.lab.example.com:6443", "\":6443\"", "api.lab.example.com:abc", "api.lab.example.com:70000"]
        {
            let doc = format!("kind: ClusterConfiguration\ncontrolPlaneEndpoint: {bad}\n");
            assert!(blockers(&doc, &nodes).unwrap()[0].contains("is not HOST[:PORT]"), "{bad}");
        }
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
