//! The operations an executor runs against the cloud: the vocabulary
//! between the plan (which decides them, pure) and the edge that performs
//! them (`cloud::aws::ops`). Data only, so a plan that carries them
//! serializes and is applied exactly as reviewed.

use serde::{Deserialize, Serialize};

use crate::cloud::model::{LaunchTemplateData, RouteTarget, Rule};
use crate::cloud::observed::ObservedSource;
use crate::spec::Role;

/// The host part of the API endpoint in rendered user-data, replaced by
/// the endpoint's address (the load balancer's DNS name, or the Elastic IP)
/// once it exists ("known after apply").
pub const API_HOST_PLACEHOLDER: &str = "@@API_HOST@@";

/// Substitutes the API endpoint's host for the placeholder.
pub fn with_api_host(user_data: &str, host: &str) -> String {
    user_data.replace(API_HOST_PLACEHOLDER, host)
}

/// What the executor does for a change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase")]
pub enum Op {
    CreateVpc {
        cidr: String,
    },
    CreateSubnet {
        name: String,
        zone: String,
        cidr: String,
        public: bool,
    },
    CreateInternetGateway,
    AllocateAddress {
        zone: String,
    },
    CreateNatGateway {
        zone: String,
        subnet: String,
    },
    CreateRouteTable {
        name: String,
    },
    /// Sets the default route and subnet associations of a route table.
    SyncRouteTable {
        name: String,
        default_route: Option<RouteTarget>,
        subnets: Vec<String>,
    },
    CreateSecurityGroup {
        name: String,
        description: String,
    },
    SyncSecurityGroupRules {
        name: String,
        add: Vec<Rule>,
        remove: Vec<ObservedRuleRef>,
    },
    CreateLoadBalancer {
        name: String,
        internal: bool,
        subnets: Vec<String>,
    },
    CreateTargetGroup {
        name: String,
        port: u16,
    },
    CreateListener {
        port: u16,
    },
    /// Points the API endpoint at the live control plane: registers it with
    /// the load balancer's target group, or moves the Elastic IP to it.
    SyncTargets,
    CreateLaunchTemplate {
        group: String,
        name: String,
        data: LaunchTemplateData,
    },
    CreateLaunchTemplateVersion {
        group: String,
        data: LaunchTemplateData,
    },
    LaunchInstances {
        group: String,
        role: Role,
        count: u32,
        subnets: Vec<String>,
    },
    TerminateInstances {
        group: String,
        ids: Vec<String>,
        wait: bool,
    },
    DeleteLaunchTemplate {
        group: String,
        id: String,
    },
    DeleteListener {
        arn: String,
    },
    DeleteLoadBalancer {
        arn: String,
    },
    DeleteTargetGroup {
        arn: String,
    },
    DeleteNatGateway {
        id: String,
    },
    ReleaseAddress {
        allocation_id: String,
    },
    DeleteRouteTable {
        id: String,
        associations: Vec<String>,
    },
    DeleteInternetGateway {
        id: String,
        vpc: Option<String>,
    },
    DeleteSubnet {
        id: String,
    },
    DeleteSecurityGroup {
        id: String,
    },
    DeleteVpc {
        id: String,
    },
    /// An IAM role EC2 may assume (path `/pinfleet/`, tagged), with its inline policy.
    CreateRole {
        name: String,
        trust: String,
        policy: String,
    },
    /// Replaces a role's inline policy.
    PutRolePolicy {
        name: String,
        policy: String,
    },
    /// An instance profile holding the role of the same name.
    CreateInstanceProfile {
        name: String,
    },
    /// Removes the profile's roles, then the profile.
    DeleteInstanceProfile {
        name: String,
        roles: Vec<String>,
    },
    /// Deletes the role's inline policies, then the role.
    DeleteRole {
        name: String,
    },
    /// The interruption queue (its policy lets the cluster's rules send).
    CreateEventQueue {
        name: String,
        rules: Vec<String>,
    },
    /// A rule with its pattern, targeting the queue.
    PutEventRule {
        name: String,
        pattern: String,
        queue: String,
    },
    /// Removes the rule's targets, then the rule.
    DeleteEventRule {
        name: String,
    },
    DeleteEventQueue {
        url: String,
    },
}

/// An observed rule to revoke, with the source as AWS knows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObservedRuleRef {
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub source: ObservedSource,
}

/// Why an operation failed, and whether trying again may help.
#[derive(Debug)]
pub struct OpError {
    pub retriable: bool,
    pub error: anyhow::Error,
}

impl OpError {
    pub fn fatal(e: impl Into<anyhow::Error>) -> Self {
        OpError { retriable: false, error: e.into() }
    }
    pub fn retriable(e: impl Into<anyhow::Error>) -> Self {
        OpError { retriable: true, error: e.into() }
    }
}

/// What the executor needs from a cloud: run one operation for one
/// resource. AWS implements it (`cloud::aws::ops::OpContext`); tests give
/// the executor an in-memory cloud.
pub trait Operations: Send + Sync {
    fn run<'a>(
        &'a self,
        key: &'a crate::cloud::key::ResourceKey,
        op: &'a Op,
    ) -> futures::future::BoxFuture<'a, Result<String, OpError>>;
}
