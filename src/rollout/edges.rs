//! The real edges of a roll: machines on EC2 (launched through the same
//! operation the apply executor uses, so tags, subnets spread and client
//! tokens are identical) and nodes through the Kubernetes API.

use crate::cloud::key::ResourceKey as K;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};
use futures::StreamExt as _;
use kube::runtime::{watcher, WatchStreamExt as _};
use tokio::sync::Notify;

use super::driver::{Machine, Machines, Nodes};
use crate::cloud::aws::observe::list_instances;
use crate::cloud::aws::Aws;
use crate::cloud::model::Desired;
use crate::cloud::observed::Observed;
use crate::kube::drain::{self, NodeState};
use crate::plan::Op;
use crate::spec::Cluster;

/// A cluster's machines on EC2.
pub struct AwsMachines {
    pub aws: Aws,
    pub cluster: Cluster,
    pub desired: Desired,
    pub observed: Observed,
    /// Each group's current launch-template version.
    pub versions: BTreeMap<String, i64>,
    /// The revision this roll launches under (client tokens derive from it).
    pub revision: u64,
}

impl AwsMachines {
    /// The edge for a prepared cluster, launching under `revision`: each
    /// group's current launch-template version as observed.
    pub fn new(aws: &Aws, cluster: &Cluster, p: &crate::apply::prepare::Prepared, revision: u64) -> Self {
        AwsMachines {
            aws: aws.clone(),
            cluster: cluster.clone(),
            desired: p.desired.clone(),
            observed: p.observed.clone(),
            versions: p.observed.launch_templates.iter().map(|t| (t.group.clone(), t.latest_version)).collect(),
            revision,
        }
    }

    /// Runs one engine operation. A launch numbers its client tokens after
    /// the machines this revision already started, so it needs a fresh list
    /// of them; a termination does not.
    async fn run(&self, key: &K, op: &Op, fresh_instances: bool) -> Result<Vec<String>> {
        let mut o = self.observed.clone();
        if fresh_instances {
            o.instances = list_instances(&self.aws, Some(&self.cluster.metadata.name), false).await?;
        }
        let ctx =
            crate::apply::prepare::context(&self.aws, &self.cluster, self.desired.clone(), &o, None, self.revision);
        crate::cloud::aws::ops::run(&ctx, key, op).await.map_err(|e| e.error)?;
        let launched = ctx.launched.lock().await.clone();
        Ok(launched)
    }
}

impl AwsMachines {
    /// The API endpoint follows the control plane through a roll: the load
    /// balancer's targets, or the Elastic IP moved to a live machine.
    async fn sync_endpoint(&self) -> Result<()> {
        self.run(&K::Targets, &Op::SyncTargets, false).await.map(|_| ())
    }
}

impl Machines for AwsMachines {
    async fn list(&self, group: &str) -> Result<Vec<Machine>> {
        let current = self.versions.get(group).copied();
        Ok(list_instances(&self.aws, Some(&self.cluster.metadata.name), false)
            .await?
            .into_iter()
            .filter(|i| i.is_live() && i.group.as_deref() == Some(group))
            .map(|i| Machine { current: i.launch_template_version == current, id: i.id })
            .collect())
    }

    async fn launch(&self, group: &str, n: u32) -> Result<Vec<String>> {
        let g = self
            .cluster
            .spec
            .instance_groups
            .iter()
            .find(|g| g.name == group)
            .ok_or_else(|| anyhow!("no instance group {group}"))?;
        let op = Op::LaunchInstances { group: group.into(), role: g.role, count: n, subnets: g.subnets.clone() };
        let launched = self.run(&K::Instance(group.to_string()), &op, true).await?;
        if g.role == crate::spec::Role::ControlPlane {
            self.sync_endpoint().await?;
        }
        Ok(launched)
    }

    async fn terminate(&self, id: &str) -> Result<()> {
        // The machine's group, as observed when the roll began (machines it
        // launched itself are never the ones it terminates).
        let group =
            self.observed.instances.iter().find(|i| i.id == id).and_then(|i| i.group.clone()).unwrap_or_default();
        // A machine of kops's leaves its Auto Scaling group first (the
        // group's size going down with it), or the group would start
        // another in its place.
        if self.observed.adopted.is_some() {
            crate::cloud::aws::autoscaling::release(&self.aws, id).await?;
        }
        let op = Op::TerminateInstances { group: group.clone(), ids: vec![id.to_string()], wait: false };
        self.run(&K::Instances(group.clone()), &op, false).await?;
        let control_plane = self
            .cluster
            .spec
            .instance_groups
            .iter()
            .any(|g| g.role == crate::spec::Role::ControlPlane && g.name == group);
        if control_plane {
            self.sync_endpoint().await?;
        }
        Ok(())
    }
}

/// Nodes through the API; a watch on Nodes wakes the driver.
pub struct KubeNodes {
    pub client: kube::Client,
    changed: Arc<Notify>,
    watch: tokio::task::JoinHandle<()>,
}

impl KubeNodes {
    /// `client` must not retry 429s itself (drains decide; see `Retry::Never`).
    pub fn new(client: kube::Client) -> Self {
        let changed = Arc::new(Notify::new());
        let (c, nodes) = (changed.clone(), kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone()));
        let watch = tokio::spawn(async move {
            let mut s = std::pin::pin!(watcher(nodes, watcher::Config::default()).default_backoff());
            while let Some(e) = s.next().await {
                if e.is_ok() {
                    c.notify_waiters();
                }
            }
        });
        KubeNodes { client, changed, watch }
    }
}

impl Drop for KubeNodes {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Nodes for KubeNodes {
    async fn list(&self) -> Result<BTreeMap<String, NodeState>> {
        drain::nodes_by_instance(&self.client).await
    }
    async fn cordon(&self, node: &str) -> Result<()> {
        drain::cordon(&self.client, node).await
    }
    async fn drain(&self, node: &str, timeout: Duration, force: bool) -> Result<()> {
        drain::drain(&self.client, node, timeout, force).await
    }
    async fn delete(&self, node: &str) -> Result<()> {
        drain::delete_node(&self.client, node).await
    }
    async fn remove_etcd_member(&self, node: &str) -> Result<()> {
        crate::kube::etcd::remove_member(&self.client, node).await
    }
    async fn etcd_manager_health(&self, members: usize, leaving: Option<&str>) -> Result<(), String> {
        crate::kube::etcd::etcd_manager_health(&self.client, members, leaving).await
    }
    async fn validate(&self, ignore: &BTreeSet<String>) -> Result<(), String> {
        crate::kube::cluster::validate(&self.client, ignore).await
    }
    async fn changed(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.changed.notified()).await;
    }
}
