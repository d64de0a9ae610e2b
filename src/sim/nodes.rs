//! The node simulator: Node objects for machines, as kubelets would
//! register them. Declared directly (`declare`), or driven by EC2: every
//! running instance tagged for a cluster becomes a Node (providerID
//! `aws:///ZONE/INSTANCE-ID`, labels and taints from its instance group,
//! allocatable from its instance type) that turns Ready after a boot delay
//! — or never, for a chosen fraction — and goes when the instance ends.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::store::{now, Inner, Propagation, Sub};

/// Whether a Node reports Ready=True.
pub(super) fn node_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}
use crate::spec::{Cluster, Taint};

/// A machine to register as a Node.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub provider_id: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub cpu: String,
    pub memory: String,
    /// The kubelet has started (after the boot delay).
    pub ready: bool,
    /// The machine has no pod network until a CNI agent runs on it (a
    /// kubeadm machine); false for nodes that come with one (kind-like).
    pub needs_cni: bool,
    /// `status.addresses`: (type, address), e.g. ("InternalIP", "10.0.1.5").
    pub addresses: Vec<(String, String)>,
    /// `status.nodeInfo.kubeletVersion`, e.g. `v1.33.2`.
    pub kubelet_version: String,
    /// Extended resources its device plugins advertise (`nvidia.com/gpu`: `8`).
    pub extended: BTreeMap<String, String>,
    /// What the machine's image holds, as its builder measured it (the
    /// image's `pinfleet:facts` tag): kernel, osImage, containerd, cgroup,
    /// failedUnits. A kubelet reports the first three in `nodeInfo`; the
    /// node bootstrap writes the last two as annotations.
    pub image_facts: BTreeMap<String, String>,
}

/// Annotations the sim keeps on its Nodes (what a kubelet knows about its machine).
pub const BOOTED: &str = "sim.pinfleet.dev/booted";
pub const NEEDS_CNI: &str = "sim.pinfleet.dev/needs-cni";
pub const CNI_READY: &str = "sim.pinfleet.dev/cni-ready";
pub const SERVING_CSR: &str = "sim.pinfleet.dev/serving-csr";
/// Set to `stopped` on a Node to stop its kubelet (a fault to rehearse
/// with): the node lifecycle controller then marks Ready Unknown.
pub const KUBELET: &str = "sim.pinfleet.dev/kubelet";

/// kubelet's words for a node whose runtime has no pod network.
pub const NETWORK_NOT_READY: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

impl NodeSpec {
    pub fn simple(name: &str) -> Self {
        NodeSpec {
            name: name.into(),
            provider_id: None,
            labels: BTreeMap::new(),
            taints: vec![],
            cpu: "4".into(),
            memory: "16Gi".into(),
            ready: true,
            needs_cni: false,
            addresses: vec![("Hostname".into(), name.into())],
            // Kubelets of the sim's default version (`declare` takes the sim's own).
            kubelet_version: format!("v{}", crate::spec::versions::DEFAULT),
            extended: BTreeMap::new(),
            image_facts: BTreeMap::new(),
        }
    }
}

/// vCPUs and memory (GiB) of an EC2 instance type: an accelerated type's
/// as DescribeInstanceTypes lists it ([`crate::accelerated::SHAPES`]: a
/// p4d.24xlarge has 1,152 GiB, not four per vCPU), else from the size name.
pub fn instance_capacity(instance_type: &str) -> (u32, u32) {
    if let Some(s) = crate::accelerated::SHAPES.iter().find(|s| s.instance_type == instance_type) {
        return (s.vcpu, s.memory_gib);
    }
    let size = instance_type.split('.').nth(1).unwrap_or("large");
    let family = instance_type.split('.').next().unwrap_or("m");
    let cpus = match size {
        "nano" | "micro" | "small" | "medium" => 2,
        "large" => 2,
        "xlarge" => 4,
        s => s.trim_end_matches("xlarge").parse::<u32>().map(|n| n * 4).unwrap_or(4),
    };
    // GiB per vCPU by family: c = 2, r = 8, t/m/g and others = 4.
    let per_cpu = match family.chars().next() {
        Some('c') => 2,
        Some('r') | Some('x') => 8,
        _ => 4,
    };
    let mem = match (family.starts_with('t'), size) {
        (true, "nano") => 1,
        (true, "micro") => 1,
        (true, "small") => 2,
        (true, "medium") => 4,
        _ => cpus * per_cpu,
    };
    (cpus, mem)
}

/// The kubelet's Ready condition: starting, up without a pod network, or Ready.
fn ready_condition(booted: bool, network: bool) -> Value {
    let now = now();
    let (status, reason, message) = match (booted, network) {
        (true, true) => ("True", "KubeletReady", "kubelet is posting ready status"),
        (true, false) => ("False", "KubeletNotReady", NETWORK_NOT_READY),
        (false, _) => ("False", "KubeletNotReady", "container runtime status check may not have completed yet"),
    };
    json!({"type": "Ready", "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now, "lastTransitionTime": now})
}

fn annotation<'a>(node: &'a Value, key: &str) -> Option<&'a str> {
    node.pointer("/metadata/annotations").and_then(|a| a.get(key)).and_then(Value::as_str)
}

/// Whether the node's runtime has a pod network (kind-like nodes always do).
pub fn has_network(node: &Value) -> bool {
    annotation(node, NEEDS_CNI) != Some("true") || annotation(node, CNI_READY) == Some("true")
}

/// Whether the node's kubelet has started.
pub fn booted(node: &Value) -> bool {
    annotation(node, BOOTED) == Some("true")
}

/// Registers (or updates) a Node.
pub fn declare(inner: &mut Inner, n: &NodeSpec) {
    let t = inner.registry.get("", "v1", "nodes").cloned().expect("nodes");
    let mut labels = n.labels.clone();
    labels.entry("kubernetes.io/hostname".into()).or_insert_with(|| n.name.clone());
    labels.entry("kubernetes.io/os".into()).or_insert_with(|| "linux".into());
    labels.entry("kubernetes.io/arch".into()).or_insert_with(|| "amd64".into());
    let taints: Vec<Value> =
        n.taints.iter().map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect.as_str()})).collect();
    let mut spec = json!({"taints": taints});
    if let Some(p) = &n.provider_id {
        spec["providerID"] = json!(p);
    }
    let addresses: Vec<Value> = n.addresses.iter().map(|(t, a)| json!({"type": t, "address": a})).collect();
    let mut allocatable = json!({"cpu": n.cpu, "memory": n.memory, "pods": "110"});
    for (k, v) in &n.extended {
        allocatable[k] = json!(v);
    }
    let status = json!({
        "capacity": allocatable,
        "allocatable": allocatable,
        "conditions": [ready_condition(n.ready, !n.needs_cni)],
        "addresses": addresses,
        "nodeInfo": {
            "kubeletVersion": n.kubelet_version,
            "containerRuntimeVersion": n.image_facts.get("containerd").map_or_else(|| "containerd://sim".to_string(), |v| format!("containerd://{}", v.trim_start_matches('v'))),
            "kernelVersion": n.image_facts.get("kernel").cloned().unwrap_or_default(),
            "osImage": n.image_facts.get("osImage").cloned().unwrap_or_default(),
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    });
    let mut annotations = json!({BOOTED: n.ready.to_string(), NEEDS_CNI: n.needs_cni.to_string()});
    if let Some(u) = n.image_facts.get("failedUnits") {
        annotations[crate::ami::gate::ANNOTATION_FAILED_UNITS] = json!(u);
    }
    if let Some(c) = n.image_facts.get("cgroup") {
        annotations[crate::ami::gate::ANNOTATION_CGROUP] = json!(c);
    }
    let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name, "labels": labels, "annotations": annotations}, "spec": spec, "status": status});
    match inner.get(&t, "", &n.name) {
        Err(_) => {
            let _ = inner.create(&t, "", obj, "kubelet", false);
        }
        Ok(existing) => {
            if booted(&existing) != n.ready {
                let mut updated = existing.clone();
                updated["metadata"]["annotations"][BOOTED] = json!(n.ready.to_string());
                let _ = inner.update(&t, "", &n.name, updated, "kubelet", Sub::Main, false);
            }
            let existing = inner.get(&t, "", &n.name).unwrap_or(existing);
            let mut updated = existing.clone();
            updated["status"]["conditions"] = if annotation(&existing, KUBELET) == Some("stopped") {
                // What kube-controller-manager posts once the kubelet is silent.
                json!([{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "message": "Kubelet stopped posting node status.", "lastHeartbeatTime": now(), "lastTransitionTime": now()}])
            } else {
                json!([ready_condition(n.ready, has_network(&existing))])
            };
            if existing.pointer("/status/conditions/0/status") != updated.pointer("/status/conditions/0/status")
                || existing.pointer("/status/conditions/0/message") != updated.pointer("/status/conditions/0/message")
            {
                let _ = inner.update(&t, "", &n.name, updated, "kubelet", Sub::Status, false);
            }
        }
    }
}

pub fn remove(inner: &mut Inner, name: &str) {
    let t = inner.registry.get("", "v1", "nodes").cloned().expect("nodes");
    let _ = inner.delete(&t, "", name, Propagation::Background, None, false);
}

/// How EC2-backed nodes behave.
#[derive(Debug, Clone)]
pub struct Ec2Nodes {
    pub cluster: Cluster,
    pub boot_delay: Duration,
    /// Fraction (0..1) of machines that never become Ready.
    pub fail_fraction: f64,
    pub poll: Duration,
    /// Machines have no pod network until its agent runs on them (true, as
    /// kubeadm machines); false for rehearsals that install no addons.
    pub needs_cni: bool,
    /// Image id → its builder's facts (filled as new images are seen).
    pub image_facts: BTreeMap<String, BTreeMap<String, String>>,
}

/// Deterministic per instance: the same machine always fails or not.
pub fn fails(instance_id: &str, fraction: f64) -> bool {
    use sha2::Digest;
    let h = sha2::Sha256::digest(instance_id.as_bytes());
    let x = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as f64 / u32::MAX as f64;
    x < fraction
}

/// The Node a running instance should have now (None before it registers).
pub fn node_for(cfg: &Ec2Nodes, i: &crate::cloud::observed::ObservedInstance, now: i64) -> Option<NodeSpec> {
    if i.state != "running" {
        return None;
    }
    let group = cfg.cluster.spec.instance_groups.iter().find(|g| Some(&g.name) == i.group.as_ref())?;
    let zone = i.zone.clone().unwrap_or_default();
    let booted = now - i.launch_time.unwrap_or(now) >= cfg.boot_delay.as_secs() as i64;
    let mut n = group_node(&cfg.cluster, group, &i.id, &zone, &i.instance_type);
    n.provider_id = Some(format!("aws:///{zone}/{}", i.id));
    n.ready = booted && !fails(&i.id, cfg.fail_fraction);
    n.needs_cni = cfg.needs_cni;
    if let Some(v) = &i.kubernetes_version {
        n.kubelet_version = format!("v{}", v.trim_start_matches('v'));
    }
    if let Some(f) = cfg.image_facts.get(&i.image_id) {
        n.image_facts = f.clone();
    }
    if let Some(ip) = &i.private_ip {
        // EC2's private DNS names: `ec2.internal` in us-east-1, `<region>.compute.internal` elsewhere.
        let region = &cfg.cluster.spec.cloud.region;
        let domain =
            if region == "us-east-1" { "ec2.internal".to_string() } else { format!("{region}.compute.internal") };
        let dns = format!("ip-{}.{domain}", ip.replace('.', "-"));
        n.addresses =
            vec![("InternalIP".into(), ip.clone()), ("InternalDNS".into(), dns.clone()), ("Hostname".into(), dns)];
    }
    Some(n)
}

/// A Ready node of `group` as its kubelet would register it: the group's
/// labels and taints (control-plane machines tainted), zone and region
/// labels, allocatable from the machine type. `machine_type` is the type
/// launched, which may be a fallback of the group's first choice: what
/// the machine itself reports — its instance type (the kubelet's, from
/// the instance metadata), its GPU product (GPU feature discovery's), its
/// devices and the device's taint — is the launched type's.
pub fn group_node(
    cluster: &Cluster,
    group: &crate::spec::InstanceGroup,
    name: &str,
    zone: &str,
    machine_type: &str,
) -> NodeSpec {
    let mut labels = crate::render::node_labels(cluster, group);
    labels.insert("topology.kubernetes.io/zone".into(), zone.to_string());
    labels.insert("topology.kubernetes.io/region".into(), cluster.spec.cloud.region.clone());
    let launched = crate::accelerated::of_instance_type(machine_type);
    let mut taints: Vec<Taint> = group.taints.clone();
    if machine_type != group.machine_type {
        labels.insert("node.kubernetes.io/instance-type".into(), machine_type.to_string());
        match launched.and_then(|a| a.product_label) {
            Some(p) => {
                labels.insert(crate::workloads::demand::PRODUCT_LABEL.to_string(), p.to_string());
            }
            None => {
                labels.remove(crate::workloads::demand::PRODUCT_LABEL);
            }
        }
    }
    // The device's taint, as `InstanceGroup::taints_with_accelerators` gives
    // it, of the devices this machine has.
    if let Some(a) = launched {
        if !taints.iter().any(|t| t.key == a.resource) {
            taints.push(Taint {
                key: a.resource.into(),
                value: "present".into(),
                effect: crate::spec::TaintEffect::NoSchedule,
            });
        }
    }
    let (cpus, mem) = instance_capacity(machine_type);
    // The device plugin advertises the machine's accelerators (the sim's
    // kubelet stands for it; EC2's GpuInfo / NeuronInfo counts).
    let extended: BTreeMap<String, String> = crate::accelerated::of_instance_type(machine_type)
        .map(|a| (a.resource.to_string(), a.count.to_string()))
        .into_iter()
        .collect();
    if group.role == crate::spec::Role::ControlPlane {
        taints.push(Taint {
            key: "node-role.kubernetes.io/control-plane".into(),
            value: String::new(),
            effect: crate::spec::TaintEffect::NoSchedule,
        });
    }
    NodeSpec {
        name: name.to_string(),
        provider_id: None,
        labels,
        taints,
        cpu: cpus.to_string(),
        memory: format!("{mem}Gi"),
        ready: true,
        needs_cni: true,
        addresses: vec![("Hostname".into(), name.to_string())],
        kubelet_version: format!("v{}", group.kubernetes_version(&cluster.spec)),
        extended,
        image_facts: BTreeMap::new(),
    }
}

/// The nodes a cluster file describes (each group's desired count, spread
/// over its subnets' zones), for rehearsals without EC2.
pub fn declared_for(cluster: &Cluster) -> Vec<NodeSpec> {
    let mut out = Vec::new();
    for g in &cluster.spec.instance_groups {
        let zones: Vec<&str> = g
            .subnets
            .iter()
            .filter_map(|s| cluster.spec.network.subnets.iter().find(|n| &n.name == s).map(|n| n.zone.as_str()))
            .collect();
        for i in 0..g.desired.unwrap_or(g.min_size) {
            let zone = zones.get(i as usize % zones.len().max(1)).copied().unwrap_or("zone-a");
            let name = format!("{}-{}-{i}", cluster.metadata.name, g.name);
            let mut n = group_node(cluster, g, &name, zone, &g.machine_type);
            let ip = format!("10.{}.{}.{}", 100 + out.len() / 250, out.len() % 250, 10 + i % 200);
            n.addresses = vec![("InternalIP".into(), ip), ("Hostname".into(), name)];
            out.push(n);
        }
    }
    out
}

/// One observation of EC2 applied to the Nodes: register, mark Ready, remove.
pub fn sync(
    inner: &mut Inner,
    cfg: &Ec2Nodes,
    instances: &[crate::cloud::observed::ObservedInstance],
    now: i64,
) -> usize {
    let t = inner.registry.get("", "v1", "nodes").cloned().expect("nodes");
    let existing: Vec<String> = inner
        .list(&t, None, &Default::default(), &Default::default(), None, None)
        .map(|r| {
            r.items
                .iter()
                .filter(|n| {
                    n.pointer("/spec/providerID").and_then(Value::as_str).is_some_and(|p| p.starts_with("aws:///"))
                })
                .filter_map(|n| n.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let mut changed = 0;
    let mut wanted = std::collections::BTreeSet::new();
    let configured = super::kubeadm::configured_version(inner);
    for i in instances {
        if let Some(spec) = node_for(cfg, i, now) {
            // kubeadm join's preflight, before the kubelet ever registers.
            let machine = crate::spec::versions::Version::parse(&spec.kubelet_version);
            if let (false, Some(m), Some(c)) = (existing.contains(&spec.name), machine, configured) {
                if let Some(why) = super::kubeadm::join_refusal(m, c) {
                    warn_once(&spec.name, &format!("sim: kubeadm join on {} failed: {why}", spec.name));
                    continue;
                }
            }
            wanted.insert(spec.name.clone());
            let before = inner.resource_version();
            declare(inner, &spec);
            changed += usize::from(inner.resource_version() != before);
        }
    }
    for name in existing.iter().filter(|n| !wanted.contains(*n)) {
        remove(inner, name);
        changed += 1;
    }
    changed
}

/// Logs `what` once per machine (a machine that cannot join is retried every poll).
fn warn_once(machine: &str, what: &str) {
    static SEEN: std::sync::Mutex<std::collections::BTreeSet<String>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    if SEEN.lock().map(|mut s| s.insert(machine.to_string())).unwrap_or(false) {
        tracing::warn!("{what}");
    }
}

/// The facts of an image another account shared (EC2 shows the viewer
/// none of the owner's tags): the machine knows what it booted, so the
/// sim, an emulator on moto, reads them as the owner would.
async fn owners_facts(
    aws: &crate::cloud::aws::Aws,
    owner: &str,
    id: &str,
) -> Option<std::collections::BTreeMap<String, String>> {
    if owner.is_empty() || aws.account() == Some(owner) {
        return None;
    }
    let as_owner = crate::cloud::aws::Aws::connect(&crate::cloud::aws::AwsOptions {
        region: Some(aws.region.clone()),
        moto_account: Some(owner.to_string()),
        ..Default::default()
    })
    .await
    .ok()?;
    crate::cloud::aws::images::facts(&as_owner, &[id.to_string()]).await.ok()?.remove(id)
}

/// Keeps the Nodes in step with the cluster's EC2 instances for as long as
/// the sim runs: a Node per running instance, Ready after the boot delay,
/// gone with the instance. An endpoint that stopped answering (moto ended)
/// is asked again with backoff up to 30s and reported once, not every poll.
pub async fn follow_ec2(store: super::store::Shared, aws: crate::cloud::aws::Aws, mut cfg: Ec2Nodes) {
    let name = cfg.cluster.metadata.name.clone();
    let mut failures = 0u32;
    loop {
        match crate::cloud::aws::observe::list_instances(&aws, Some(&name), false).await {
            Ok(instances) => {
                failures = 0;
                let unseen: Vec<String> = instances
                    .iter()
                    .map(|i| i.image_id.clone())
                    .filter(|id| !id.is_empty() && !cfg.image_facts.contains_key(id))
                    .collect::<std::collections::BTreeSet<_>>()
                    .into_iter()
                    .collect();
                if !unseen.is_empty() {
                    if let Ok(facts) = crate::cloud::aws::images::facts_and_owners(&aws, &unseen).await {
                        for (id, (owner, f)) in facts {
                            let f = if f.is_empty() { owners_facts(&aws, &owner, &id).await.unwrap_or(f) } else { f };
                            cfg.image_facts.insert(id, f);
                        }
                    }
                }
                // kops's etcd-manager on its machines takes over its volumes.
                let now = chrono::Utc::now().timestamp();
                let boot = cfg.boot_delay.as_secs() as i64;
                let booted = |i: &crate::cloud::observed::ObservedInstance| {
                    now - i.launch_time.unwrap_or(now) >= boot && !fails(&i.id, cfg.fail_fraction)
                };
                let view = super::etcd_manager::pass(&aws, &instances, &booted).await;
                let mut inner = store.lock().expect("store lock");
                sync(&mut inner, &cfg, &instances, now);
                match view {
                    Ok(view) => etcd_manager_pods(&mut inner, view),
                    Err(e) => tracing::warn!("node simulator: etcd-manager: {e:#}"),
                }
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!("node simulator: {e:#} (retrying with backoff)");
                }
                failures = failures.saturating_add(1);
            }
        }
        let backoff = cfg.poll * 2u32.saturating_pow(failures.min(6));
        tokio::time::sleep(backoff.min(std::time::Duration::from_secs(30))).await;
    }
}

/// Keeps the mirror pods in step with `view` (a member's pod while its
/// machine holds its volume, gone after), and records it for the quorum.
pub fn etcd_manager_pods(inner: &mut Inner, view: super::etcd_manager::View) {
    let pods_t = inner.registry.get("", "v1", "pods").cloned().expect("pods");
    let existing: Vec<String> = inner
        .list(&pods_t, Some("kube-system"), &Default::default(), &Default::default(), None, None)
        .map(|r| {
            r.items
                .iter()
                .filter_map(|p| p.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string))
                .filter(|n| n.starts_with("etcd-manager-"))
                .collect()
        })
        .unwrap_or_default();
    let mut wanted = std::collections::BTreeSet::new();
    for (c, m) in &view.clusters {
        for (node, volume) in &m.holders {
            let name = format!("etcd-manager-{c}-{node}");
            if !existing.contains(&name) {
                let _ = inner.create(
                    &pods_t,
                    "kube-system",
                    super::etcd_manager::mirror_pod(c, node, volume),
                    "kubelet",
                    false,
                );
            }
            wanted.insert(name);
        }
    }
    for name in existing.iter().filter(|n| !wanted.contains(*n)) {
        let _ = inner.delete(&pods_t, "kube-system", name, Propagation::Background, None, false);
    }
    inner.etcd_manager = view;
}

/// What kubelets, the node lifecycle controller and the kubelet-serving
/// signer do with the Nodes on every pass:
/// - a node without a pod network turns Ready once a CNI agent runs on it
///   (a Running hostNetwork pod that mounts the host's `/etc/cni/net.d`,
///   where agents write their config); the config stays, and so does Ready;
/// - each started kubelet files a `kubernetes.io/kubelet-serving` CSR for
///   its addresses, and serves logs only once it is issued;
/// - a node that is not Ready carries `node.kubernetes.io/not-ready:NoSchedule`;
/// - an approved kubelet-serving CSR gets its certificate.
pub fn kubelets(inner: &mut Inner, pods: &[std::sync::Arc<Value>]) {
    let nodes_t = inner.registry.get("", "v1", "nodes").cloned().expect("nodes");
    let csr_t = inner.registry.get("certificates.k8s.io", "v1", "certificatesigningrequests").cloned().expect("csrs");
    let list = |inner: &Inner, t| inner.list(t, None, &Default::default(), &Default::default(), None, None);
    let nodes = list(inner, &nodes_t).map(|r| r.items).unwrap_or_default();
    if nodes.is_empty() {
        return;
    }
    control_plane_etcd(inner, &nodes, pods);
    // Only the Nodes the sim registered have a simulated kubelet; a Node
    // written through the API is left as its writer keeps it.
    for node in nodes.into_iter().filter(|n| annotation(n, BOOTED).is_some()) {
        let name = node.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut main = node.clone();
        let network_arrived = booted(&node) && !has_network(&node) && pods.iter().any(|p| runs_cni(p, &name));
        if network_arrived {
            main["metadata"]["annotations"][CNI_READY] = json!("true");
        }
        if booted(&node) && annotation(&node, SERVING_CSR).is_none() {
            if let Some(csr) = file_serving_csr(inner, &csr_t, &node) {
                main["metadata"]["annotations"][SERVING_CSR] = json!(csr);
            }
        }
        // The node lifecycle controller taints by the Ready condition as posted.
        let ready = network_arrived || node_ready(&node);
        let taint = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});
        let mut taints: Vec<Value> =
            main.pointer("/spec/taints").and_then(Value::as_array).cloned().unwrap_or_default();
        let tainted = taints.iter().any(|t| t["key"] == taint["key"] && t["effect"] == taint["effect"]);
        if ready && tainted {
            taints.retain(|t| !(t["key"] == taint["key"] && t["effect"] == taint["effect"]));
        } else if !ready && !tainted {
            taints.push(taint);
        }
        main["spec"]["taints"] = json!(taints);
        if main != node {
            let _ = inner.update(&nodes_t, "", &name, main.clone(), "kubelet", Sub::Main, false);
        }
        // The kubelet posts Ready once its runtime reports the network.
        if network_arrived {
            if let Ok(mut st) = inner.get(&nodes_t, "", &name) {
                st["status"]["conditions"] = json!([ready_condition(true, true)]);
                let _ = inner.update(&nodes_t, "", &name, st, "kubelet", Sub::Status, false);
            }
        }
    }
    // The signer (kube-controller-manager's csrsigning): approved and not denied → issued.
    for csr in list(inner, &csr_t).map(|r| r.items).unwrap_or_default() {
        let has = |t: &str| {
            csr.pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
        };
        let issued = csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        if csr.pointer("/spec/signerName") == Some(&json!(KUBELET_SERVING))
            && has("Approved")
            && !has("Denied")
            && !issued
        {
            let name = csr.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            let cn = csr.pointer("/spec/username").and_then(Value::as_str).unwrap_or("system:node:sim").to_string();
            if let Ok(cert) = rcgen::generate_simple_self_signed(vec![cn.replace(':', "-")]) {
                use base64::Engine as _;
                let mut st = csr.clone();
                st["status"]["certificate"] = json!(base64::engine::general_purpose::STANDARD.encode(cert.cert.pem()));
                let _ = inner.update(&csr_t, "", &name, st, "certificate-controller", Sub::Status, false);
            }
        }
    }
}

pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

/// kubeadm's etcd on the control-plane machines the sim registered: which
/// are up, members for new ones, and the etcd static pod's mirror pod on
/// each member's node.
fn control_plane_etcd(inner: &mut Inner, nodes: &[Value], pods: &[std::sync::Arc<Value>]) {
    let machines: Vec<(String, String, bool)> = nodes
        .iter()
        .filter(|n| annotation(n, BOOTED).is_some())
        .filter(|n| {
            n.pointer("/metadata/labels").and_then(|l| l.get("node-role.kubernetes.io/control-plane")).is_some()
        })
        // Machines running kops's etcd-manager are no kubeadm etcd members.
        .filter(|n| {
            let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
            !inner.etcd_manager.machines.contains(name)
        })
        .map(|n| {
            let name = n.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
            let ip = n
                .pointer("/status/addresses")
                .and_then(Value::as_array)
                .and_then(|a| a.iter().find(|x| x["type"] == "InternalIP"))
                .and_then(|x| x["address"].as_str())
                .unwrap_or(&name)
                .to_string();
            (name, ip, booted(n))
        })
        .collect();
    if machines.is_empty() && inner.etcd.members.is_empty() {
        return;
    }
    let first = inner.etcd.members.is_empty();
    inner.etcd.observe(&machines);
    if first {
        if let Some(init) = inner.etcd.members.first().map(|m| m.name.clone()) {
            // `kubeadm init` ran on that machine, at its version.
            let version = nodes
                .iter()
                .find(|n| n.pointer("/metadata/name").and_then(Value::as_str) == Some(init.as_str()))
                .and_then(|n| n.pointer("/status/nodeInfo/kubeletVersion").and_then(Value::as_str))
                .and_then(crate::spec::versions::Version::parse);
            if let Some(v) = version {
                super::kubeadm::init(inner, v, "10.244.0.0/16");
            }
        }
    }
    let live: std::collections::BTreeSet<(String, String)> = pods
        .iter()
        .filter_map(|p| {
            let m = p.get("metadata")?;
            Some((m.get("namespace")?.as_str()?.to_string(), m.get("name")?.as_str()?.to_string()))
        })
        .collect();
    inner.etcd.forget_except(&live);
    let pods_t = inner.registry.get("", "v1", "pods").cloned().expect("pods");
    for (name, ip, up) in &machines {
        let mirror = format!("etcd-{name}");
        let exists = pods.iter().any(|p| {
            p.pointer("/metadata/namespace").and_then(Value::as_str) == Some("kube-system")
                && p.pointer("/metadata/name").and_then(Value::as_str) == Some(mirror.as_str())
        });
        if *up && !exists && inner.etcd.is_member(name) {
            let _ = inner.create(&pods_t, "kube-system", super::etcd::mirror_pod(name, ip), "kubelet", false);
        }
    }
}

/// A Running hostNetwork pod on `node` that mounts the host's CNI config folder.
fn runs_cni(pod: &Value, node: &str) -> bool {
    pod.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node)
        && pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod.pointer("/spec/hostNetwork").and_then(Value::as_bool) == Some(true)
        && pod.pointer("/spec/volumes").and_then(Value::as_array).is_some_and(|vs| {
            vs.iter().any(|v| {
                v.pointer("/hostPath/path").and_then(Value::as_str).is_some_and(|p| p.starts_with("/etc/cni/net.d"))
            })
        })
}

/// The serving CSR a kubelet files: CN `system:node:NAME`, O `system:nodes`,
/// its DNS names and IPs as SANs, an ECDSA P-256 key. Returns its name.
fn file_serving_csr(inner: &mut Inner, csr_t: &super::registry::ResourceType, node: &Value) -> Option<String> {
    let name = node.pointer("/metadata/name").and_then(Value::as_str)?;
    let addresses: Vec<(&str, &str)> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| Some((x["type"].as_str()?, x["address"].as_str()?))).collect())
        .unwrap_or_default();
    let pem = serving_csr_pem(name, &addresses).ok()?;
    use base64::Engine as _;
    let obj = json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": KUBELET_SERVING,
            "usages": ["digital signature", "server auth"],
            "username": format!("system:node:{name}"),
            "groups": ["system:nodes", "system:authenticated"],
        },
    });
    let created = inner.create(csr_t, "", obj, "kubelet", false).ok()?;
    created.pointer("/metadata/name").and_then(Value::as_str).map(str::to_string)
}

/// A PEM certificate request as kubelet makes it for its serving certificate.
pub fn serving_csr_pem(node: &str, addresses: &[(&str, &str)]) -> Result<String, rcgen::Error> {
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    for (kind, a) in addresses {
        match *kind {
            "InternalIP" | "ExternalIP" => {
                if let Ok(ip) = a.parse() {
                    params.subject_alt_names.push(rcgen::SanType::IpAddress(ip));
                }
            }
            _ => params.subject_alt_names.push(rcgen::SanType::DnsName((*a).try_into()?)),
        }
    }
    let key = rcgen::KeyPair::generate()?;
    params.serialize_request(&key)?.pem()
}

/// Whether the kubelet on `node` can serve (its serving CSR is issued).
pub fn serves_tls(inner: &Inner, node: &Value) -> bool {
    let Some(csr) = annotation(node, SERVING_CSR) else { return false };
    let Some(t) = inner.registry.get("certificates.k8s.io", "v1", "certificatesigningrequests") else { return false };
    inner
        .get(t, "", csr)
        .ok()
        .and_then(|c| c.pointer("/status/certificate").and_then(Value::as_str).map(|s| !s.is_empty()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_by_type() {
        // Accelerated types as EC2 lists them.
        assert_eq!(instance_capacity("p4d.24xlarge"), (96, 1152));
        assert_eq!(instance_capacity("p5.48xlarge"), (192, 2048));
        assert_eq!(instance_capacity("g5.2xlarge"), (8, 32));
        assert_eq!(instance_capacity("t3.medium"), (2, 4));
        assert_eq!(instance_capacity("m6i.xlarge"), (4, 16));
        assert_eq!(instance_capacity("c6i.2xlarge"), (8, 16));
        assert_eq!(instance_capacity("r5.large"), (2, 16));
    }

    /// Issue: a machine launched as a fallback type (g5.2xlarge refused,
    /// g6.2xlarge launched) was labelled by its group's first choice: an
    /// A10G node that had an L4.
    #[test]
    fn a_machine_is_labelled_by_the_type_launched() {
        let path = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/clusters/prod-use1.yaml"));
        let loaded = crate::spec::load_cluster(path, &Default::default()).unwrap_or_else(|d| panic!("{d}"));
        let cluster = &loaded.cluster;
        let gpu = cluster.spec.instance_groups.iter().find(|g| g.machine_type == "g5.2xlarge").expect("a g5 group");
        let label = |n: &NodeSpec, k: &str| n.labels.get(k).cloned().unwrap_or_default();
        let first = group_node(cluster, gpu, "n0", "us-east-1a", "g5.2xlarge");
        assert_eq!(label(&first, "node.kubernetes.io/instance-type"), "g5.2xlarge");
        assert_eq!(label(&first, crate::workloads::demand::PRODUCT_LABEL), "NVIDIA-A10G");
        let fell_back = group_node(cluster, gpu, "n1", "us-east-1a", "g6.2xlarge");
        assert_eq!(label(&fell_back, "node.kubernetes.io/instance-type"), "g6.2xlarge");
        assert_eq!(label(&fell_back, crate::workloads::demand::PRODUCT_LABEL), "NVIDIA-L4");
        assert_eq!(fell_back.extended.get(crate::workloads::demand::GPU).map(String::as_str), Some("1"));
        assert_eq!(fell_back.taints.iter().filter(|t| t.key == crate::workloads::demand::GPU).count(), 1);
        assert_eq!((fell_back.cpu.as_str(), fell_back.memory.as_str()), ("8", "32Gi"));
        // A fallback without GPUs carries no GPU product.
        let plain = group_node(cluster, gpu, "n2", "us-east-1a", "m6i.2xlarge");
        assert!(!plain.labels.contains_key(crate::workloads::demand::PRODUCT_LABEL), "{:?}", plain.labels);
        assert!(plain.extended.is_empty());
    }

    #[test]
    fn failures_are_deterministic_and_proportional() {
        let ids: Vec<String> = (0..2000).map(|n| format!("i-{n:017x}")).collect();
        let failed = ids.iter().filter(|i| fails(i, 0.1)).count();
        assert!((150..250).contains(&failed), "{failed}");
        assert_eq!(fails("i-1", 0.5), fails("i-1", 0.5));
        assert!(!ids.iter().any(|i| fails(i, 0.0)));
    }
}
