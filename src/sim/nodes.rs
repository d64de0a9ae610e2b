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
    pub ready: bool,
}

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
        }
    }
}

/// vCPUs and memory of an EC2 instance type: known sizes, else from the size name.
pub fn instance_capacity(instance_type: &str) -> (u32, u32) {
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

fn ready_condition(ready: bool) -> Value {
    let now = now();
    if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status", "lastHeartbeatTime": now, "lastTransitionTime": now})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "container runtime network not ready", "lastHeartbeatTime": now, "lastTransitionTime": now})
    }
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
    let status = json!({
        "capacity": {"cpu": n.cpu, "memory": n.memory, "pods": "110"},
        "allocatable": {"cpu": n.cpu, "memory": n.memory, "pods": "110"},
        "conditions": [ready_condition(n.ready)],
        "nodeInfo": {"kubeletVersion": super::server::SIM_VERSION, "containerRuntimeVersion": "containerd://sim", "operatingSystem": "linux", "architecture": "amd64"},
    });
    let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name, "labels": labels}, "spec": spec, "status": status});
    match inner.get(&t, "", &n.name) {
        Err(_) => {
            let _ = inner.create(&t, "", obj, "kubelet", false);
        }
        Ok(existing) => {
            let mut updated = existing.clone();
            updated["status"]["conditions"] = json!([ready_condition(n.ready)]);
            if existing.pointer("/status/conditions/0/status") != updated.pointer("/status/conditions/0/status") {
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
    Some(n)
}

/// A Ready node of `group` as its kubelet would register it: the group's
/// labels and taints (control-plane machines tainted), zone and region
/// labels, allocatable from the machine type.
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
    let (cpus, mem) = instance_capacity(machine_type);
    let mut taints = group.taints.clone();
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
            out.push(group_node(
                cluster,
                g,
                &format!("{}-{}-{i}", cluster.metadata.name, g.name),
                zone,
                &g.machine_type,
            ));
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
    for i in instances {
        if let Some(spec) = node_for(cfg, i, now) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacities_by_type() {
        assert_eq!(instance_capacity("t3.medium"), (2, 4));
        assert_eq!(instance_capacity("m6i.xlarge"), (4, 16));
        assert_eq!(instance_capacity("c6i.2xlarge"), (8, 16));
        assert_eq!(instance_capacity("r5.large"), (2, 16));
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

/// Keeps the Nodes in step with the cluster's EC2 instances for as long as
/// the sim runs: a Node per running instance, Ready after the boot delay,
/// gone with the instance. An endpoint that stopped answering (moto ended)
/// is asked again with backoff up to 30s and reported once, not every poll.
pub async fn follow_ec2(store: super::server::Shared, aws: crate::cloud::aws::Aws, cfg: Ec2Nodes) {
    let name = cfg.cluster.metadata.name.clone();
    let mut failures = 0u32;
    loop {
        match crate::cloud::aws::observe::list_instances(&aws, Some(&name), false).await {
            Ok(instances) => {
                failures = 0;
                let mut inner = store.lock().expect("store lock");
                sync(&mut inner, &cfg, &instances, chrono::Utc::now().timestamp());
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
