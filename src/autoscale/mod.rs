//! Machines that scale: pinfleet serves cluster-autoscaler's `externalgrpc`
//! cloud provider over a cluster's node groups (`pinfleet autoscaler serve`),
//! so the standard cluster-autoscaler resizes them.
//!
//! ```text
//! cluster-autoscaler ─gRPC─▶ Provider ─▶ sizes (pure: floor, max, what exists)
//!   ─▶ the group's size recorded on its launch template (a tag)
//!   ─▶ machines launched / terminated through the roll's EC2 edge ─▶ history
//! ```
//!
//! A group's `desired` is the floor the autoscaler moves above, up to
//! `maxSize`; the size it sets is kept as a tag on the group's launch
//! template, which `plan` reads, so `apply` never undoes a scale-up.
//! Not served: prices and per-group options (the autoscaler then uses its
//! defaults), and template nodes (scale-up from zero needs a node to copy).

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use tonic::{Request, Response, Status};

use crate::cloud::aws::Aws;
use crate::cloud::observed::Observed;
use crate::cloud::tags;
use crate::spec::{Cluster, InstanceGroup, Role};

pub mod proto {
    #![allow(clippy::all, missing_docs)]
    tonic::include_proto!("clusterautoscaler.cloudprovider.v1.externalgrpc");
}

use proto::cloud_provider_server::{CloudProvider, CloudProviderServer};
use proto::instance_status::InstanceState;

/// The label cluster-autoscaler's AWS provider uses for GPU nodes.
pub const GPU_LABEL: &str = "k8s.amazonaws.com/accelerator";

/// A group's sizes as the autoscaler's requests are judged against them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupSize {
    /// `desired`: the autoscaler never goes below it.
    pub floor: u32,
    pub max: u32,
    /// The size in force: the autoscaler's, else `desired`.
    pub target: u32,
    /// Machines that exist (not terminated).
    pub live: u32,
}

impl GroupSize {
    pub fn new(g: &InstanceGroup, scaled: Option<u32>, live: u32) -> Self {
        let floor = g.desired_count();
        let max = g.max_size.max(floor);
        GroupSize { floor, max, target: floor.max(scaled.unwrap_or(0)).min(max), live }
    }

    /// The size after adding `delta` machines.
    pub fn increase(&self, delta: i32) -> Result<u32, String> {
        if delta <= 0 {
            return Err(format!("size increase must be positive, got {delta}"));
        }
        let new = self.target + delta as u32;
        if new > self.max {
            return Err(format!("size increase too large - desired:{new} max:{}", self.max));
        }
        Ok(new)
    }

    /// The size after lowering the target by `-delta` without deleting machines.
    pub fn decrease_target(&self, delta: i32) -> Result<u32, String> {
        if delta >= 0 {
            return Err(format!("size decrease must be negative, got {delta}"));
        }
        let new = self.target as i64 + delta as i64;
        if new < self.live as i64 {
            return Err(format!(
                "attempt to delete existing nodes targetSize:{} delta:{delta} existingNodes: {}",
                self.target, self.live
            ));
        }
        if new < self.floor as i64 {
            return Err(format!("size {new} is below the group's desired size {} (its floor)", self.floor));
        }
        Ok(new as u32)
    }

    /// The size after deleting `n` named machines.
    pub fn delete(&self, n: u32) -> Result<u32, String> {
        match self.target.checked_sub(n) {
            Some(new) if new >= self.floor => Ok(new),
            _ => Err(format!(
                "min size reached, nodes will not be deleted (the group's desired size {} is its floor)",
                self.floor
            )),
        }
    }
}

/// The instance id in a provider ID (`aws:///ZONE/ID`).
fn instance_of(provider_id: &str) -> Option<&str> {
    crate::kube::drain::instance_id(provider_id).filter(|id| id.starts_with("i-"))
}

/// The provider: a cluster's node groups on EC2.
pub struct Provider {
    pub aws: Aws,
    pub cluster: Cluster,
    pub store: crate::state::Store,
    /// The cluster's API (machines launched into it get a fresh join token).
    pub client: kube::Client,
    /// One size change at a time.
    changes: tokio::sync::Mutex<()>,
}

fn internal(e: anyhow::Error) -> Status {
    Status::internal(format!("{e:#}"))
}

impl Provider {
    pub fn new(aws: Aws, cluster: Cluster, store: crate::state::Store, client: kube::Client) -> Self {
        Provider { aws, cluster, store, client, changes: Default::default() }
    }

    fn group(&self, id: &str) -> Result<&InstanceGroup, Status> {
        self.cluster.spec.instance_groups.iter().find(|g| g.name == id && g.role == Role::Node).ok_or_else(|| {
            Status::not_found(format!("node group {id} not found in cluster {}", self.cluster.metadata.name))
        })
    }

    async fn observe(&self) -> Result<Observed, Status> {
        crate::cloud::aws::observe::observe(&self.aws, &self.cluster.metadata.name, None).await.map_err(internal)
    }

    fn size(&self, o: &Observed, g: &InstanceGroup) -> GroupSize {
        let scaled = o.template(&g.name).and_then(|t| t.scaled_size);
        let live = o.live_instances(&g.name).count() as u32;
        GroupSize::new(g, scaled, live)
    }

    fn proto_group(&self, g: &InstanceGroup) -> proto::NodeGroup {
        let floor = g.desired_count();
        proto::NodeGroup {
            id: g.name.clone(),
            min_size: floor as i32,
            max_size: g.max_size.max(floor) as i32,
            debug: format!(
                "{}/{} ({}, desired {floor} is the floor)",
                self.cluster.metadata.name, g.name, g.machine_type
            ),
        }
    }

    /// Records the group's size on its launch template.
    async fn record_size(&self, o: &Observed, group: &str, size: u32) -> Result<(), Status> {
        let lt = o.template(group).ok_or_else(|| {
            Status::failed_precondition(format!("group {group} has no launch template yet: run `pinfleet apply` first"))
        })?;
        self.aws
            .ec2
            .create_tags()
            .resources(&lt.id)
            .tags(aws_sdk_ec2::types::Tag::builder().key(tags::AUTOSCALER_SIZE).value(size.to_string()).build())
            .send()
            .await
            .map_err(|e| Status::internal(format!("recording the size of {group}: {e}")))?;
        Ok(())
    }

    /// The cluster observed and planned (one observation for a change's
    /// checks and its machines).
    async fn prepared(&self) -> Result<crate::apply::prepare::Prepared, Status> {
        crate::apply::prepare::prepare(&self.aws, &self.cluster).await.map_err(internal)
    }

    /// The roll's EC2 edge, for one change recorded as a new revision.
    async fn machines(
        &self,
        p: &crate::apply::prepare::Prepared,
    ) -> Result<crate::rollout::edges::AwsMachines, Status> {
        let revision = self.store.next_revision().await.map_err(internal)?;
        Ok(crate::rollout::edges::AwsMachines::new(&self.aws, &self.cluster, p, revision))
    }

    async fn record(&self, revision: u64, line: String) {
        let record = crate::state::HistoryRecord::of_actions(revision, "cluster-autoscaler (externalgrpc)", vec![line]);
        if let Err(e) = self.store.record(&record.acting_as(self.aws.caller_identity().await), &self.cluster).await {
            tracing::warn!("autoscaler: recording history: {e:#}");
        }
    }
}

#[tonic::async_trait]
impl CloudProvider for Provider {
    async fn node_groups(
        &self,
        _: Request<proto::NodeGroupsRequest>,
    ) -> Result<Response<proto::NodeGroupsResponse>, Status> {
        let node_groups = self
            .cluster
            .spec
            .instance_groups
            .iter()
            .filter(|g| g.role == Role::Node)
            .map(|g| self.proto_group(g))
            .collect();
        Ok(Response::new(proto::NodeGroupsResponse { node_groups }))
    }

    async fn node_group_for_node(
        &self,
        req: Request<proto::NodeGroupForNodeRequest>,
    ) -> Result<Response<proto::NodeGroupForNodeResponse>, Status> {
        let node = req.into_inner().node.unwrap_or_default();
        let none = || Response::new(proto::NodeGroupForNodeResponse { node_group: Some(proto::NodeGroup::default()) });
        let Some(id) = instance_of(&node.provider_id) else { return Ok(none()) };
        let instances = crate::cloud::aws::observe::list_instances(&self.aws, Some(&self.cluster.metadata.name), false)
            .await
            .map_err(internal)?;
        let group = instances.iter().find(|i| i.id == id).and_then(|i| i.group.clone());
        Ok(match group.as_deref().and_then(|g| self.group(g).ok()) {
            Some(g) => Response::new(proto::NodeGroupForNodeResponse { node_group: Some(self.proto_group(g)) }),
            None => none(),
        })
    }

    async fn pricing_node_price(
        &self,
        _: Request<proto::PricingNodePriceRequest>,
    ) -> Result<Response<proto::PricingNodePriceResponse>, Status> {
        Err(Status::unimplemented("pinfleet does not price nodes"))
    }

    async fn pricing_pod_price(
        &self,
        _: Request<proto::PricingPodPriceRequest>,
    ) -> Result<Response<proto::PricingPodPriceResponse>, Status> {
        Err(Status::unimplemented("pinfleet does not price pods"))
    }

    async fn gpu_label(&self, _: Request<proto::GpuLabelRequest>) -> Result<Response<proto::GpuLabelResponse>, Status> {
        Ok(Response::new(proto::GpuLabelResponse { label: GPU_LABEL.into() }))
    }

    async fn get_available_gpu_types(
        &self,
        _: Request<proto::GetAvailableGpuTypesRequest>,
    ) -> Result<Response<proto::GetAvailableGpuTypesResponse>, Status> {
        Ok(Response::new(proto::GetAvailableGpuTypesResponse { gpu_types: Default::default() }))
    }

    async fn cleanup(&self, _: Request<proto::CleanupRequest>) -> Result<Response<proto::CleanupResponse>, Status> {
        Ok(Response::new(proto::CleanupResponse {}))
    }

    async fn refresh(&self, _: Request<proto::RefreshRequest>) -> Result<Response<proto::RefreshResponse>, Status> {
        // Every answer reads EC2 afresh; nothing is cached to refresh.
        Ok(Response::new(proto::RefreshResponse {}))
    }

    async fn node_group_target_size(
        &self,
        req: Request<proto::NodeGroupTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupTargetSizeResponse>, Status> {
        let g = self.group(&req.into_inner().id)?;
        let o = self.observe().await?;
        Ok(Response::new(proto::NodeGroupTargetSizeResponse { target_size: self.size(&o, g).target as i32 }))
    }

    async fn node_group_increase_size(
        &self,
        req: Request<proto::NodeGroupIncreaseSizeRequest>,
    ) -> Result<Response<proto::NodeGroupIncreaseSizeResponse>, Status> {
        let req = req.into_inner();
        let g = self.group(&req.id)?;
        let _one = self.changes.lock().await;
        let p = self.prepared().await?;
        let size = self.size(&p.observed, g);
        let new = size.increase(req.delta).map_err(Status::invalid_argument)?;
        // Recorded first: an apply meanwhile keeps the new machines.
        self.record_size(&p.observed, &g.name, new).await?;
        crate::state::join::ensure_fresh(Some(&self.client), &self.store, chrono::Utc::now())
            .await
            .map_err(internal)?;
        let machines = self.machines(&p).await?;
        let missing = new.saturating_sub(size.live);
        let ids = if missing > 0 {
            use crate::rollout::driver::Machines as _;
            machines.launch(&g.name, missing).await.map_err(internal)?
        } else {
            vec![]
        };
        self.record(
            machines.revision,
            format!("autoscaler: {} {} → {new}: launched {}", g.name, size.target, ids.join(", ")),
        )
        .await;
        Ok(Response::new(proto::NodeGroupIncreaseSizeResponse {}))
    }

    async fn node_group_delete_nodes(
        &self,
        req: Request<proto::NodeGroupDeleteNodesRequest>,
    ) -> Result<Response<proto::NodeGroupDeleteNodesResponse>, Status> {
        let req = req.into_inner();
        let g = self.group(&req.id)?;
        let _one = self.changes.lock().await;
        let p = self.prepared().await?;
        let o = &p.observed;
        let members: BTreeMap<&str, &crate::cloud::observed::ObservedInstance> =
            o.live_instances(&g.name).map(|i| (i.id.as_str(), i)).collect();
        let mut ids = Vec::new();
        for n in &req.nodes {
            match instance_of(&n.provider_id).filter(|id| members.contains_key(id)) {
                Some(id) => ids.push(id.to_string()),
                None => {
                    return Err(Status::invalid_argument(format!(
                        "node {} ({}) does not belong to node group {}",
                        n.name, n.provider_id, g.name
                    )))
                }
            }
        }
        let size = self.size(o, g);
        let new = size.delete(ids.len() as u32).map_err(Status::failed_precondition)?;
        let machines = self.machines(&p).await?;
        for id in &ids {
            use crate::rollout::driver::Machines as _;
            machines.terminate(id).await.map_err(internal)?;
        }
        self.record_size(o, &g.name, new).await?;
        self.record(
            machines.revision,
            format!("autoscaler: {} {} → {new}: terminated {}", g.name, size.target, ids.join(", ")),
        )
        .await;
        Ok(Response::new(proto::NodeGroupDeleteNodesResponse {}))
    }

    async fn node_group_decrease_target_size(
        &self,
        req: Request<proto::NodeGroupDecreaseTargetSizeRequest>,
    ) -> Result<Response<proto::NodeGroupDecreaseTargetSizeResponse>, Status> {
        let req = req.into_inner();
        let g = self.group(&req.id)?;
        let _one = self.changes.lock().await;
        let o = self.observe().await?;
        let new = self.size(&o, g).decrease_target(req.delta).map_err(Status::failed_precondition)?;
        self.record_size(&o, &g.name, new).await?;
        Ok(Response::new(proto::NodeGroupDecreaseTargetSizeResponse {}))
    }

    async fn node_group_nodes(
        &self,
        req: Request<proto::NodeGroupNodesRequest>,
    ) -> Result<Response<proto::NodeGroupNodesResponse>, Status> {
        let g = self.group(&req.into_inner().id)?;
        let instances = crate::cloud::aws::observe::list_instances(&self.aws, Some(&self.cluster.metadata.name), false)
            .await
            .map_err(internal)?;
        let instances = instances
            .into_iter()
            .filter(|i| i.group.as_deref() == Some(&g.name) && i.state != "terminated")
            .map(|i| {
                let state = match i.state.as_str() {
                    "pending" => InstanceState::InstanceCreating,
                    "shutting-down" | "stopping" | "stopped" => InstanceState::InstanceDeleting,
                    _ => InstanceState::InstanceRunning,
                };
                proto::Instance {
                    id: format!("aws:///{}/{}", i.zone.as_deref().unwrap_or_default(), i.id),
                    status: Some(proto::InstanceStatus { instance_state: state as i32, error_info: None }),
                }
            })
            .collect();
        Ok(Response::new(proto::NodeGroupNodesResponse { instances }))
    }

    async fn node_group_template_node_info(
        &self,
        _: Request<proto::NodeGroupTemplateNodeInfoRequest>,
    ) -> Result<Response<proto::NodeGroupTemplateNodeInfoResponse>, Status> {
        Err(Status::unimplemented(
            "pinfleet serves no template nodes: the autoscaler copies a running node of the group (scale-up from zero is not supported)",
        ))
    }

    async fn node_group_get_options(
        &self,
        _: Request<proto::NodeGroupAutoscalingOptionsRequest>,
    ) -> Result<Response<proto::NodeGroupAutoscalingOptionsResponse>, Status> {
        Err(Status::unimplemented("pinfleet keeps the autoscaler's default options for every group"))
    }
}

/// Serves the provider on `addr` until `shutdown` resolves.
pub async fn serve(
    provider: Provider,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<()> {
    // Behind the edge, as every listener pinfleet opens (gRPC over
    // HTTP/2: cluster-autoscaler's calls are small and unary).
    let app = tonic::service::Routes::new(CloudProviderServer::from_arc(Arc::new(provider))).into_axum_router();
    let limits =
        crate::edge::Limits { request_time: std::time::Duration::from_secs(30), ..crate::edge::Limits::for_metrics() };
    crate::edge::serve(app, listener, None, limits, None, None, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(floor: u32, max: u32, target: u32, live: u32) -> GroupSize {
        GroupSize { floor, max, target, live }
    }

    #[test]
    fn the_autoscaler_moves_between_desired_and_max() {
        assert_eq!(size(2, 6, 2, 2).increase(3), Ok(5));
        assert_eq!(size(2, 6, 5, 5).increase(2), Err("size increase too large - desired:7 max:6".into()));
        assert!(size(2, 6, 5, 5).increase(0).is_err());
        assert_eq!(size(2, 6, 5, 5).delete(2), Ok(3));
        assert!(size(2, 6, 3, 3).delete(2).unwrap_err().starts_with("min size reached"));
        assert_eq!(size(2, 6, 5, 3).decrease_target(-2), Ok(3));
        assert_eq!(
            size(2, 6, 5, 4).decrease_target(-2),
            Err("attempt to delete existing nodes targetSize:5 delta:-2 existingNodes: 4".into())
        );
    }

    #[test]
    fn provider_ids_name_instances() {
        assert_eq!(instance_of("aws:///us-east-1a/i-0abc"), Some("i-0abc"));
        assert_eq!(instance_of("kind://docker/kind/node"), None);
    }
}
