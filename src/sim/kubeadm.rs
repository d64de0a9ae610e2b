//! What kubeadm does to the sim's cluster: `kubeadm init` on the first
//! control-plane machine writes the cluster-wide configuration
//! (kubeadm-config, naming the version every later control-plane machine
//! runs) and installs kube-proxy and CoreDNS; `kubeadm join` refuses a
//! machine the version skew policy forbids, with kubeadm's preflight
//! message, and such a machine never registers a Node.

use serde_json::{json, Value};

use crate::kube::kubeadm::{cluster_configuration_version, CONFIG_MAP};
use crate::spec::versions::{coredns_tag, Version, KUBELET_SKEW};

/// The version the cluster-wide configuration names, if kubeadm init ran.
pub fn configured_version(inner: &super::Inner) -> Option<Version> {
    // Read in place: every write asks (the version validation answers as).
    let cm = inner.peek("", "configmaps", "kube-system", CONFIG_MAP)?;
    cluster_configuration_version(cm.pointer("/data/ClusterConfiguration")?.as_str()?)
}

/// Why kubeadm's join preflight refuses a machine with kubelet and kubeadm
/// `machine` when the cluster's configuration names `cluster`.
pub fn join_refusal(machine: Version, cluster: Version) -> Option<String> {
    if machine.minor > cluster.minor {
        return Some(format!(
            "[ERROR KubeletVersion]: the kubelet version is higher than the control plane version. This is not a supported version skew and may lead to a malfunctional cluster. Kubelet version: \"{machine}\" Control plane version: \"{cluster}\""
        ));
    }
    if machine.minor + KUBELET_SKEW < cluster.minor {
        return Some(format!(
            "[ERROR KubeletVersion]: Kubelet version \"{machine}\" is lower than kubeadm can support. Please upgrade kubelet"
        ));
    }
    None
}

/// The objects `kubeadm init` at `v` leaves in the cluster.
pub fn init_objects(v: Version, pod_cidr: &str) -> Vec<Value> {
    let config = format!(
        "apiServer: {{}}\napiVersion: kubeadm.k8s.io/v1beta4\nclusterName: kubernetes\nkind: ClusterConfiguration\nkubernetesVersion: v{v}\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: {pod_cidr}\n  serviceSubnet: 10.96.0.0/12\n"
    );
    let coredns = coredns_tag(v.minor).unwrap_or("v1.12.0");
    vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, "namespace": "kube-system"},
            "data": {"ClusterConfiguration": config}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "kube-proxy", "namespace": "kube-system", "labels": {"k8s-app": "kube-proxy"}},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-proxy"}},
                "spec": {
                    "hostNetwork": true, "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "kube-proxy", "image": format!("registry.k8s.io/kube-proxy:v{v}"),
                        "command": ["/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf"]}],
                },
            },
        }}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "coredns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
            "template": {
                "metadata": {"labels": {"k8s-app": "kube-dns"}},
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                    "containers": [{"name": "coredns", "image": format!("registry.k8s.io/coredns/coredns:{coredns}"),
                        "args": ["-conf", "/etc/coredns/Corefile"],
                        "resources": {"requests": {"cpu": "100m", "memory": "70Mi"}, "limits": {"memory": "170Mi"}}}],
                },
            },
        }}),
    ]
}

/// Runs `kubeadm init` in the sim: its objects, unless already there.
pub fn init(inner: &mut super::Inner, v: Version, pod_cidr: &str) {
    if configured_version(inner).is_some() {
        return;
    }
    for obj in init_objects(v, pod_cidr) {
        let api_version = obj["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        if let Some(t) = inner.registry.by_kind(&api_version, &kind).cloned() {
            let _ = inner.create(&t, "kube-system", obj, "kubeadm", false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn join_preflight_follows_the_skew_policy() {
        assert_eq!(join_refusal(v("1.32.6"), v("1.32.6")), None);
        assert_eq!(join_refusal(v("1.31.10"), v("1.33.2")), None, "two minors older is allowed");
        let newer = join_refusal(v("1.33.2"), v("1.32.6")).unwrap();
        assert!(newer.contains("the kubelet version is higher than the control plane version"), "{newer}");
        assert!(join_refusal(v("1.29.0"), v("1.33.2")).unwrap().contains("lower than kubeadm can support"));
    }
}
