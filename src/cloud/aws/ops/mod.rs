//! The operations behind each plan change, against EC2 and ELBv2. Each is
//! idempotent where AWS allows it (duplicates and not-founds are treated as
//! done) and says whether a failure is worth retrying (eventual
//! consistency, dependencies still draining).

use crate::cloud::key::ResourceKey as K;
use std::time::Duration;

use aws_sdk_ec2::types::Filter;

use crate::cloud::ops::Op;

mod balancer;
mod delete;
mod launch;
mod machines;
mod network;

pub use super::context::OpContext;
use super::context::{call, call_ok_if, R};
pub use crate::cloud::ops::OpError;
pub use launch::{client_token, spread};

impl crate::cloud::ops::Operations for OpContext {
    fn run<'a>(&'a self, key: &'a K, op: &'a Op) -> futures::future::BoxFuture<'a, Result<String, OpError>> {
        Box::pin(run(self, key, op))
    }
}

fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    Filter::builder().name(name).set_values(Some(values.into_iter().map(Into::into).collect())).build()
}

/// Polling interval while waiting on AWS state (NAT gateways, terminations).
const POLL: Duration = Duration::from_secs(2);
/// How long to wait for a NAT gateway or termination before giving up this attempt.
const WAIT_LIMIT: Duration = Duration::from_secs(600);

/// Runs one operation.
/// Runs one operation.
pub async fn run(ctx: &OpContext, key: &K, op: &Op) -> R<String> {
    match op {
        Op::CreateRole { .. }
        | Op::PutRolePolicy { .. }
        | Op::CreateInstanceProfile { .. }
        | Op::DeleteInstanceProfile { .. }
        | Op::DeleteRole { .. } => super::iam::run(ctx, key, op).await,
        Op::CreateEventQueue { .. }
        | Op::PutEventRule { .. }
        | Op::DeleteEventRule { .. }
        | Op::DeleteEventQueue { .. } => super::events::run(ctx, key, op).await,
        Op::CreateVpc { cidr } => network::create_vpc(ctx, key, cidr).await,
        Op::CreateSubnet { zone, cidr, public, .. } => network::create_subnet(ctx, key, zone, cidr, *public).await,
        Op::CreateInternetGateway => network::create_internet_gateway(ctx, key).await,
        Op::AllocateAddress { zone } => network::allocate_address(ctx, key, zone).await,
        Op::CreateNatGateway { zone, subnet } => network::create_nat_gateway(ctx, key, zone, subnet).await,
        Op::CreateRouteTable { .. } => network::create_route_table(ctx, key).await,
        Op::SyncRouteTable { name, default_route, subnets } => {
            network::sync_route_table(ctx, name, default_route.as_ref(), subnets).await
        }
        Op::CreateSecurityGroup { name, description } => {
            network::create_security_group(ctx, key, name, description).await
        }
        Op::SyncSecurityGroupRules { name, add, remove } => {
            network::sync_security_group_rules(ctx, name, add, remove).await
        }
        Op::CreateLoadBalancer { name, internal, subnets } => {
            balancer::create_load_balancer(ctx, key, name, *internal, subnets).await
        }
        Op::CreateTargetGroup { name, port } => balancer::create_target_group(ctx, key, name, *port).await,
        Op::CreateListener { port } => balancer::create_listener(ctx, key, *port).await,
        Op::SyncTargets => balancer::sync_targets(ctx).await,
        Op::CreateLaunchTemplate { group, name, data } => {
            machines::create_launch_template(ctx, key, group, name, data).await
        }
        Op::CreateLaunchTemplateVersion { group, data } => {
            machines::create_launch_template_version(ctx, key, group, data).await
        }
        Op::LaunchInstances { group, role, count, subnets } => launch::launch(ctx, group, *role, *count, subnets).await,
        Op::TerminateInstances { ids, wait, .. } => machines::terminate_instances(ctx, ids, *wait).await,
        Op::DeleteLaunchTemplate { id, .. } => delete::delete_launch_template(ctx, id).await,
        Op::DeleteListener { arn } => delete::delete_listener(ctx, arn).await,
        Op::DeleteLoadBalancer { arn } => delete::delete_load_balancer(ctx, arn).await,
        Op::DeleteTargetGroup { arn } => delete::delete_target_group(ctx, arn).await,
        Op::DeleteNatGateway { id } => delete::delete_nat_gateway(ctx, id).await,
        Op::ReleaseAddress { allocation_id } => delete::release_address(ctx, allocation_id).await,
        Op::DeleteRouteTable { id, associations } => delete::delete_route_table(ctx, id, associations).await,
        Op::DeleteInternetGateway { id, vpc } => delete::delete_internet_gateway(ctx, id, vpc.as_deref()).await,
        Op::DeleteSubnet { id } => delete::delete_subnet(ctx, id).await,
        Op::DeleteSecurityGroup { id } => delete::delete_security_group(ctx, id).await,
        Op::DeleteVpc { id } => delete::delete_vpc(ctx, id).await,
    }
}
