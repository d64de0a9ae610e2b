//! kops's etcd, as etcd-manager runs it, on the sim's EC2-backed
//! control-plane machines (kops's own, or pinfleet's for a cluster taken
//! over from kops: [`ObservedInstance::etcd_manager`]). Each etcd cluster
//! (`main`, `events`) has a member per EBS volume tagged
//! `k8s.io/etcd/<cluster>` and `k8s.io/role/control-plane=1`; a booted
//! machine without one attaches an unattached volume of that cluster in
//! its own zone (EC2 AttachVolume, on moto, as etcd-manager does) and runs
//! that member; with none free it waits, as etcd-manager does. A member is
//! healthy while a booted, running machine holds its volume. Each member
//! shows as its static pod's mirror pod `etcd-manager-<cluster>-<node>`.
//! Without a quorum of `main`, the API server fails every request
//! (see [`super::server`]).
//!
//! ```text
//! EC2 instances + volumes ─▶ pass (attach free volumes) ─▶ View ─▶ apply: mirror pods, quorum
//! ```

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context as _, Result};
use serde_json::{json, Value};

use crate::cloud::observed::ObservedInstance;

use crate::kube::etcd::ETCD_MANAGER_CLUSTERS as CLUSTERS;

/// One etcd cluster's members as EC2 shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    /// Every volume of the cluster (a member each).
    pub volumes: usize,
    /// Node (instance id) → the volume it holds, for booted running machines.
    pub holders: BTreeMap<String, String>,
}

/// etcd-manager's clusters, as of the last pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    pub clusters: BTreeMap<String, Members>,
    /// The machines that run etcd-manager (not kubeadm's stacked etcd).
    pub machines: BTreeSet<String>,
}

impl View {
    /// A majority of `main`'s members is held (trivially, with none).
    pub fn has_quorum(&self) -> bool {
        self.clusters.get("main").is_none_or(|m| m.volumes == 0 || m.holders.len() * 2 > m.volumes)
    }
}

/// One pass over the cluster's machines and etcd volumes: each booted
/// etcd-manager machine that holds no volume of a cluster attaches a free
/// one in its zone. `booted`: whether a running machine has booted.
pub async fn pass(
    aws: &crate::cloud::aws::Aws,
    instances: &[ObservedInstance],
    booted: &(dyn Fn(&ObservedInstance) -> bool + Sync),
) -> Result<View> {
    let mut view = View::default();
    let runs: Vec<&ObservedInstance> = instances.iter().filter(|i| i.etcd_manager && i.state == "running").collect();
    view.machines = runs.iter().map(|i| i.id.clone()).collect();
    if runs.is_empty() {
        return Ok(view);
    }
    let f = |n: &str, v: &str| aws_sdk_ec2::types::Filter::builder().name(n).values(v).build();
    for c in CLUSTERS {
        let out = aws
            .ec2
            .describe_volumes()
            .filters(f("tag-key", &format!("k8s.io/etcd/{c}")))
            .filters(f("tag:k8s.io/role/control-plane", "1"))
            .send()
            .await
            .context("DescribeVolumes")?;
        let volumes = out.volumes();
        let mut members = Members { volumes: volumes.len(), ..Default::default() };
        let holder =
            |v: &aws_sdk_ec2::types::Volume| v.attachments().iter().find_map(|a| a.instance_id().map(str::to_string));
        let mut free: Vec<(&str, &str)> = volumes
            .iter()
            .filter(|v| holder(v).is_none())
            .filter_map(|v| Some((v.volume_id()?, v.availability_zone()?)))
            .collect();
        for v in volumes {
            if let (Some(id), Some(by)) = (v.volume_id(), holder(v)) {
                if runs.iter().any(|i| i.id == by && booted(i)) {
                    members.holders.insert(by, id.to_string());
                }
            }
        }
        let waiting: Vec<&&ObservedInstance> =
            runs.iter().filter(|i| booted(i) && !members.holders.contains_key(&i.id)).collect();
        for i in waiting {
            let zone = i.zone.as_deref().unwrap_or_default();
            let Some(pos) = free.iter().position(|(_, z)| *z == zone) else { continue };
            // The machine itself asks: one that has ended asks nothing.
            let now = aws.ec2.describe_instances().instance_ids(&i.id).send().await.context("DescribeInstances")?;
            let running = now
                .reservations()
                .iter()
                .flat_map(|r| r.instances())
                .any(|x| x.state().and_then(|s| s.name()) == Some(&aws_sdk_ec2::types::InstanceStateName::Running));
            if !running {
                continue;
            }
            let (volume, _) = free.remove(pos);
            let device = if c == "main" { "/dev/xvdu" } else { "/dev/xvdv" };
            match aws.ec2.attach_volume().volume_id(volume).instance_id(&i.id).device(device).send().await {
                Ok(_) => {
                    members.holders.insert(i.id.clone(), volume.to_string());
                }
                // Racing another machine for it, as etcd-manager says: tried again next pass.
                Err(e) => tracing::debug!("sim: etcd-manager on {}: attaching {volume}: {e}", i.id),
            }
        }
        view.clusters.insert(c.to_string(), members);
    }
    Ok(view)
}

/// The mirror pod of etcd-manager's static pod for cluster `c` on `node`.
pub fn mirror_pod(c: &str, node: &str, volume: &str) -> Value {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("etcd-manager-{c}-{node}"), "namespace": "kube-system",
            "labels": {"k8s-app": format!("etcd-manager-{c}")},
            "annotations": {"kubernetes.io/config.mirror": "sim", "kubernetes.io/config.source": "file",
                "sim.pinfleet.dev/volume": volume},
        },
        "spec": {
            "nodeName": node, "hostNetwork": true, "priorityClassName": "system-cluster-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "etcd-manager", "image": "registry.k8s.io/etcd-manager/etcd-manager-slim:v3.0.20250704",
                "command": ["/etcd-manager", format!("--volume-tag=k8s.io/etcd/{c}")]}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{"name": "etcd-manager", "ready": true, "restartCount": 0,
                "image": "registry.k8s.io/etcd-manager/etcd-manager-slim:v3.0.20250704", "imageID": "",
                "state": {"running": {"startedAt": now}}}],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn main_keeps_its_quorum_while_most_of_its_volumes_are_held() {
        let held = |n: usize| {
            let holders = (0..n).map(|i| (format!("i-{i}"), format!("vol-{i}"))).collect();
            View { clusters: [("main".to_string(), Members { volumes: 3, holders })].into(), ..Default::default() }
        };
        assert!(held(3).has_quorum());
        assert!(held(2).has_quorum());
        assert!(!held(1).has_quorum());
        assert!(View::default().has_quorum());
    }
}
