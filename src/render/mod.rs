//! Rendered templates: node bootstrap (cloud-init user-data, its shell
//! script, kubeadm configuration), the kind config and kubeconfigs.
//!
//! Pure: a loaded [`Cluster`] plus [`BootstrapParams`] (filled at apply time
//! from the state store's PKI) → text. The tera templates live in
//! templates/ and are compiled into the binary, so one file serves laptops,
//! scheduled jobs and the in-cluster controller alike.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result};
use serde::Serialize;
use serde_json::Value;
use tera::{Context, Tera};

use crate::spec::validate::parse_kubernetes_version;
use crate::spec::{Cluster, InstanceGroup, Role};

/// The templates, by name, compiled in.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("cloud-init.yaml", include_str!("../../templates/cloud-init.yaml.tera")),
    ("bootstrap.sh", include_str!("../../templates/bootstrap.sh.tera")),
    ("kubeadm.yaml", include_str!("../../templates/kubeadm.yaml.tera")),
    ("kind.yaml", include_str!("../../templates/kind.yaml.tera")),
    ("kubeconfig.yaml", include_str!("../../templates/kubeconfig.yaml.tera")),
];

/// kind clusters on a laptop get at most this many worker nodes in all.
pub const KIND_MAX_WORKERS: u32 = 3;

/// How a machine joins the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootstrapMode {
    /// The first control-plane machine: `kubeadm init`.
    Init,
    /// Further control-plane machines: `kubeadm join --control-plane`.
    JoinControlPlane,
    /// Worker nodes: `kubeadm join`.
    Join,
}

impl BootstrapMode {
    /// The mode a group's launch template carries (the first control-plane
    /// machine is launched with `Init` user-data given at RunInstances).
    pub fn for_role(role: Role) -> Self {
        match role {
            Role::ControlPlane => BootstrapMode::JoinControlPlane,
            Role::Node => BootstrapMode::Join,
        }
    }
}

/// Where machines find what only apply time knows. No secret is ever
/// rendered: machines fetch the join token, the CA hash and (control plane)
/// the shared certificates from the state store with their instance role.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootstrapParams {
    /// `host:port` of the API endpoint.
    pub api_endpoint: String,
    /// The state store's bucket (empty for a local store: machines on AWS
    /// need an S3 one).
    pub state_bucket: String,
    /// The cluster's folder in the bucket, without slashes at the ends.
    pub state_prefix: String,
    /// The control plane's etcd is kops's etcd-manager (a cluster taken
    /// over from kops): control-plane machines run its manifests, and
    /// etcd-manager on each takes over a member's volume.
    #[serde(default)]
    pub etcd_manager: bool,
}

impl BootstrapParams {
    /// The parameters of `cluster` (the endpoint a placeholder until known).
    pub fn for_cluster(cluster: &Cluster) -> Self {
        let (bucket, prefix) =
            match crate::spec::validate::state_store_base(&cluster.spec.state_store).strip_prefix("s3://") {
                Some(rest) => {
                    let (b, p) = rest.split_once('/').unwrap_or((rest, ""));
                    let base: Vec<&str> = [p.trim_matches('/'), cluster.metadata.name.as_str()]
                        .into_iter()
                        .filter(|x| !x.is_empty())
                        .collect();
                    (b.to_string(), base.join("/"))
                }
                None => (String::new(), cluster.metadata.name.clone()),
            };
        BootstrapParams {
            api_endpoint: format!("api.{}.pinfleet.internal:{}", cluster.metadata.name, cluster.spec.api.port),
            state_bucket: bucket,
            state_prefix: prefix,
            etcd_manager: false,
        }
    }

    /// Recognisable placeholders, for `pinfleet render` and snapshots.
    pub fn placeholder(cluster: &Cluster) -> Self {
        Self::for_cluster(cluster)
    }
}

/// What a kubeconfig needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KubeconfigParams {
    pub server: String,
    /// Base64 PEM of the cluster CA.
    pub ca_data: String,
    pub user: String,
    /// Base64 PEM of the client certificate and key.
    pub client_cert_data: String,
    pub client_key_data: String,
}

/// Labels the kubelet may set on its own Node (the NodeRestriction admission
/// plugin refuses others in the kubernetes.io and k8s.io namespaces; those are
/// applied by pinfleet after the node joins).
pub fn kubelet_may_set(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else { return true };
    let restricted = |ns: &str| prefix == ns || prefix.ends_with(&format!(".{ns}"));
    if !restricted("kubernetes.io") && !restricted("k8s.io") {
        return true;
    }
    const ALLOWED: &[&str] = &[
        "kubernetes.io/hostname",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ];
    ALLOWED.contains(&key)
        || prefix == "kubelet.kubernetes.io"
        || prefix.ends_with(".kubelet.kubernetes.io")
        || prefix == "node.kubernetes.io"
        || prefix.ends_with(".node.kubernetes.io")
}

/// The label a machine's Node carries with its image (the AMI ID), set
/// by the machine itself at boot from its instance metadata.
pub const IMAGE_LABEL: &str = "pinfleet.dev/image";

/// The labels every node of a group carries, group labels last (they win).
pub fn node_labels(cluster: &Cluster, group: &InstanceGroup) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    labels.insert("pinfleet.dev/cluster".to_string(), cluster.metadata.name.clone());
    labels.insert("pinfleet.dev/instance-group".to_string(), group.name.clone());
    labels.insert("node.kubernetes.io/instance-type".to_string(), group.machine_type.clone());
    if group.role == Role::ControlPlane {
        labels.insert("node-role.kubernetes.io/control-plane".to_string(), String::new());
    }
    // An accelerated group's nodes name their GPU product as GPU feature
    // discovery would (the quota counts GPUs per product by this label).
    if let Some(label) = crate::accelerated::of_instance_type(&group.machine_type).and_then(|a| a.product_label) {
        labels.insert(crate::workloads::demand::PRODUCT_LABEL.to_string(), label.to_string());
    }
    labels.extend(group.labels.clone());
    labels
}

fn shell_quote(value: &Value, _: &std::collections::HashMap<String, Value>) -> tera::Result<Value> {
    let s = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(Value::String(format!("'{}'", s.replace('\'', r"'\''"))))
}

fn indent_by(value: &Value, args: &std::collections::HashMap<String, Value>) -> tera::Result<Value> {
    let s = value.as_str().ok_or_else(|| tera::Error::msg("indent_by takes a string"))?;
    let n = args.get("n").and_then(Value::as_u64).unwrap_or(2) as usize;
    let pad = " ".repeat(n);
    let out: Vec<String> = s.lines().map(|l| if l.is_empty() { String::new() } else { format!("{pad}{l}") }).collect();
    Ok(Value::String(out.join("\n")))
}

fn yaml_str(value: &Value, _: &std::collections::HashMap<String, Value>) -> tera::Result<Value> {
    // A JSON string is a valid YAML double-quoted scalar.
    let s = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    Ok(Value::String(serde_json::to_string(&s).expect("strings serialize")))
}

/// The tera environment over the compiled-in templates.
pub struct Renderer {
    tera: Tera,
}

impl Default for Renderer {
    fn default() -> Self {
        Self::new()
    }
}

impl Renderer {
    pub fn new() -> Self {
        let mut tera = Tera::default();
        tera.add_raw_templates(TEMPLATES.iter().copied()).expect("compiled-in templates parse");
        tera.register_filter("shell_quote", shell_quote);
        tera.register_filter("indent_by", indent_by);
        tera.register_filter("yaml_str", yaml_str);
        tera.autoescape_on(vec![]);
        Renderer { tera }
    }

    fn render(&self, name: &str, ctx: &Context) -> Result<String> {
        self.tera.render(name, ctx).with_context(|| format!("rendering template {name}"))
    }

    fn group_context(
        &self,
        cluster: &Cluster,
        group: &InstanceGroup,
        mode: BootstrapMode,
        params: &BootstrapParams,
    ) -> Context {
        let spec = &cluster.spec;
        let version = group.kubernetes_version(spec);
        let (_, minor, _) = parse_kubernetes_version(version).unwrap_or((1, 0, 0));
        let labels = node_labels(cluster, group);
        let kubelet_labels: BTreeMap<_, _> = labels.iter().filter(|(k, _)| kubelet_may_set(k)).collect();
        // The machine's image, filled in on the machine from its metadata.
        // What the machine is, from its metadata too: a group that fell back
        // to another type (g5 refused, g6 launched) is labelled by what was
        // launched, and its GPU product by that type (the quota counts by it).
        let accelerated = group
            .instance_types()
            .iter()
            .any(|t| crate::accelerated::of_instance_type(t).is_some_and(|a| a.product_label.is_some()));
        let node_labels_arg = kubelet_labels
            .iter()
            .map(|(k, v)| match k.as_str() {
                "node.kubernetes.io/instance-type" => format!("{k}=@@INSTANCE_TYPE@@"),
                crate::workloads::demand::PRODUCT_LABEL if accelerated => format!("{k}=@@GPU_PRODUCT@@"),
                _ => format!("{k}={v}"),
            })
            .chain([format!("{IMAGE_LABEL}=@@IMAGE_ID@@")])
            .collect::<Vec<_>>()
            .join(",");
        let mut sans =
            vec![params.api_endpoint.rsplit_once(':').map(|(h, _)| h).unwrap_or(&params.api_endpoint).to_string()];
        sans.extend(spec.api.dns_name.clone());
        let mut ctx = Context::new();
        ctx.insert("cluster", &cluster.metadata.name);
        ctx.insert("owner", &spec.owner);
        ctx.insert("region", &spec.cloud.region);
        ctx.insert("kubernetes_version", version);
        ctx.insert("kubernetes_minor", &format!("1.{minor}"));
        ctx.insert("kubernetes_tag", &format!("v{version}"));
        ctx.insert("kubeadm_api", if minor >= 31 { "kubeadm.k8s.io/v1beta4" } else { "kubeadm.k8s.io/v1beta3" });
        ctx.insert("extra_args_as_list", &(minor >= 31));
        ctx.insert("pod_cidr", &spec.network.pod_cidr.to_string());
        ctx.insert("service_cidr", &spec.network.service_cidr.to_string());
        ctx.insert("api_port", &spec.api.port);
        ctx.insert("cert_sans", &sans);
        ctx.insert("group", &group.name);
        ctx.insert("role", group.role.as_str());
        ctx.insert("mode", &mode);
        ctx.insert("node_labels", &node_labels_arg);
        ctx.insert("gpu_product_arms", &crate::accelerated::product_case_arms());
        ctx.insert("taints", &group.taints_with_accelerators());
        ctx.insert("params", params);
        ctx.insert("etcd_manager", &(params.etcd_manager && mode == BootstrapMode::JoinControlPlane));
        ctx
    }

    /// kubeadm configuration for one group and mode.
    pub fn kubeadm_config(
        &self,
        cluster: &Cluster,
        group: &InstanceGroup,
        mode: BootstrapMode,
        params: &BootstrapParams,
    ) -> Result<String> {
        self.render("kubeadm.yaml", &self.group_context(cluster, group, mode, params))
    }

    /// The node bootstrap shell script (installs containerd and kubelet, runs kubeadm).
    pub fn bootstrap_script(
        &self,
        cluster: &Cluster,
        group: &InstanceGroup,
        mode: BootstrapMode,
        params: &BootstrapParams,
    ) -> Result<String> {
        self.render("bootstrap.sh", &self.group_context(cluster, group, mode, params))
    }

    /// Cloud-init user-data for one group and mode.
    pub fn user_data(
        &self,
        cluster: &Cluster,
        group: &InstanceGroup,
        mode: BootstrapMode,
        params: &BootstrapParams,
    ) -> Result<String> {
        let mut ctx = self.group_context(cluster, group, mode, params);
        ctx.insert("bootstrap_script", &self.render("bootstrap.sh", &ctx)?);
        ctx.insert("kubeadm_config", &self.render("kubeadm.yaml", &ctx)?);
        self.render("cloud-init.yaml", &ctx)
    }

    /// A kind cluster config with the groups' labels and taints; workers are
    /// capped at [`KIND_MAX_WORKERS`] across node groups (at least one each
    /// while the cap allows), control plane at one node.
    pub fn kind_config(&self, cluster: &Cluster) -> Result<String> {
        #[derive(Serialize)]
        struct KindNode {
            role: &'static str,
            group: String,
            labels: BTreeMap<String, String>,
            taints: Vec<String>,
        }
        let mut nodes = Vec::new();
        if let Some(cp) = cluster.spec.instance_groups.iter().find(|g| g.role == Role::ControlPlane) {
            nodes.push(KindNode {
                role: "control-plane",
                group: cp.name.clone(),
                labels: cp
                    .labels
                    .iter()
                    .filter(|(k, _)| kubelet_may_set(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                taints: Vec::new(),
            });
        }
        let workers: Vec<&InstanceGroup> =
            cluster.spec.instance_groups.iter().filter(|g| g.role == Role::Node).collect();
        let counts =
            kind_worker_counts(&workers.iter().map(|g| g.desired_count()).collect::<Vec<_>>(), KIND_MAX_WORKERS);
        for (g, n) in workers.iter().zip(counts) {
            for _ in 0..n {
                let mut labels = node_labels(cluster, g);
                labels.retain(|k, _| kubelet_may_set(k));
                nodes.push(KindNode {
                    role: "worker",
                    group: g.name.clone(),
                    labels,
                    taints: g.taints_with_accelerators().iter().map(ToString::to_string).collect(),
                });
            }
        }
        let mut ctx = Context::new();
        ctx.insert("cluster", &cluster.metadata.name);
        ctx.insert("kind_image", &format!("kindest/node:v{}", cluster.spec.kubernetes_version.trim_start_matches('v')));
        ctx.insert("pod_cidr", &cluster.spec.network.pod_cidr.to_string());
        ctx.insert("service_cidr", &cluster.spec.network.service_cidr.to_string());
        ctx.insert("nodes", &nodes);
        self.render("kind.yaml", &ctx)
    }

    /// A kubeconfig for the cluster.
    pub fn kubeconfig(&self, cluster: &Cluster, params: &KubeconfigParams) -> Result<String> {
        let mut ctx = Context::new();
        ctx.insert("cluster", &cluster.metadata.name);
        ctx.insert("params", params);
        self.render("kubeconfig.yaml", &ctx)
    }

    /// Every template rendered for one cluster, by relative output path.
    pub fn render_all(&self, cluster: &Cluster, params: &BootstrapParams) -> Result<BTreeMap<String, String>> {
        let mut files = BTreeMap::new();
        for g in &cluster.spec.instance_groups {
            let mut modes = vec![BootstrapMode::for_role(g.role)];
            if g.role == Role::ControlPlane
                && cluster.spec.instance_groups.iter().find(|x| x.role == Role::ControlPlane).map(|x| &x.name)
                    == Some(&g.name)
            {
                modes.insert(0, BootstrapMode::Init);
            }
            for mode in modes {
                let suffix = if mode == BootstrapMode::Init { "-init" } else { "" };
                files.insert(format!("{}/user-data{suffix}.yaml", g.name), self.user_data(cluster, g, mode, params)?);
                files.insert(
                    format!("{}/bootstrap{suffix}.sh", g.name),
                    self.bootstrap_script(cluster, g, mode, params)?,
                );
                files
                    .insert(format!("{}/kubeadm{suffix}.yaml", g.name), self.kubeadm_config(cluster, g, mode, params)?);
            }
        }
        files.insert("kind.yaml".into(), self.kind_config(cluster)?);
        let kc = KubeconfigParams {
            server: format!("https://{}", params.api_endpoint),
            ca_data: "<cluster CA, filled at bootstrap>".into(),
            user: format!("{}-admin", cluster.metadata.name),
            client_cert_data: "<admin certificate, filled at bootstrap>".into(),
            client_key_data: "<admin key, filled at bootstrap>".into(),
        };
        files.insert("kubeconfig.yaml".into(), self.kubeconfig(cluster, &kc)?);
        Ok(files)
    }
}

/// Splits at most `cap` kind workers over node groups wanting `wanted`
/// machines: one each first (while the cap allows), then round-robin.
pub fn kind_worker_counts(wanted: &[u32], cap: u32) -> Vec<u32> {
    let mut counts = vec![0u32; wanted.len()];
    let mut left = cap;
    loop {
        let mut progressed = false;
        for (i, w) in wanted.iter().enumerate() {
            if left > 0 && counts[i] < (*w).max(1) {
                counts[i] += 1;
                left -= 1;
                progressed = true;
            }
        }
        if !progressed || left == 0 {
            return counts;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_label_restrictions() {
        assert!(kubelet_may_set("tier"));
        assert!(kubelet_may_set("pinfleet.dev/instance-group"));
        assert!(kubelet_may_set("node.kubernetes.io/instance-type"));
        assert!(kubelet_may_set("topology.kubernetes.io/zone"));
        assert!(!kubelet_may_set("node-role.kubernetes.io/worker"));
        assert!(!kubelet_may_set("kubernetes.io/role"));
    }

    #[test]
    fn kind_workers_are_capped_and_shared() {
        assert_eq!(kind_worker_counts(&[10, 2], 3), vec![2, 1]);
        assert_eq!(kind_worker_counts(&[1, 1, 1, 1], 3), vec![1, 1, 1, 0]);
        assert_eq!(kind_worker_counts(&[0], 3), vec![1]);
        assert_eq!(kind_worker_counts(&[], 3), Vec::<u32>::new());
    }
}
