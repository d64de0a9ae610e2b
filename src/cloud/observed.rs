//! What exists on AWS for a cluster, as found by tag-filtered observation.
//! Plain data: the plan compares it with the desired model.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    pub vpc: Option<ObservedVpc>,
    pub subnets: Vec<ObservedSubnet>,
    pub internet_gateway: Option<ObservedIgw>,
    pub addresses: Vec<ObservedAddress>,
    pub nat_gateways: Vec<ObservedNat>,
    pub route_tables: Vec<ObservedRouteTable>,
    pub security_groups: Vec<ObservedSecurityGroup>,
    pub load_balancer: Option<ObservedLoadBalancer>,
    pub target_group: Option<ObservedTargetGroup>,
    pub listener: Option<String>,
    pub launch_templates: Vec<ObservedLaunchTemplate>,
    pub instances: Vec<ObservedInstance>,
    /// The cluster's IAM roles (found by name) and instance profiles.
    #[serde(default)]
    pub iam_roles: Vec<ObservedRole>,
    #[serde(default)]
    pub instance_profiles: Vec<ObservedProfile>,
    /// The cluster's interruption queue and rules (found by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events_queue: Option<ObservedQueue>,
    #[serde(default)]
    pub event_rules: Vec<ObservedEventRule>,
    /// Set when the endpoint does not offer ELBv2 (LocalStack Community
    /// answers 501 "not included in your current license plan"): what it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elbv2_unavailable: Option<String>,
    /// A cluster `pinfleet adopt` took over, as its VPC's tags say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopted: Option<Adopted>,
}

/// What an adopted cluster's VPC says of where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Adopted {
    /// `kops:<kops's name for the cluster>`.
    pub from: String,
    /// The API load balancer and target group it came with, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balancer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_group: Option<String>,
}

impl Observed {
    /// The API endpoint's Elastic IP, if there is one.
    pub fn api_address(&self) -> Option<&ObservedAddress> {
        self.addresses.iter().find(|a| a.zone == crate::cloud::model::API_ADDRESS)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedVpc {
    pub id: String,
    pub cidr: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedSubnet {
    pub id: String,
    pub name: String,
    pub zone: String,
    pub cidr: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedIgw {
    pub id: String,
    pub attached_vpc: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedAddress {
    pub allocation_id: String,
    /// The zone whose NAT gateway it serves (from its resource tag), or
    /// `api` for the API endpoint's address.
    pub zone: String,
    #[serde(default)]
    pub public_ip: Option<String>,
    /// The instance it is associated with.
    #[serde(default)]
    pub instance: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedNat {
    pub id: String,
    pub zone: String,
    pub subnet_id: String,
    pub state: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedRouteTable {
    pub id: String,
    pub name: String,
    /// Target id of the 0.0.0.0/0 route (igw-… or nat-…).
    pub default_route: Option<String>,
    /// (association id, subnet id).
    pub associations: Vec<(String, String)>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ObservedSource {
    Cidr(String),
    GroupId(String),
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObservedRule {
    pub protocol: String,
    pub from_port: i32,
    pub to_port: i32,
    pub source: ObservedSource,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedSecurityGroup {
    pub id: String,
    pub name: String,
    pub ingress: Vec<ObservedRule>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedLoadBalancer {
    pub arn: String,
    pub dns_name: String,
    pub internal: bool,
    pub subnet_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedTargetGroup {
    pub arn: String,
    pub port: i32,
    pub targets: Vec<String>,
}

/// The launch-template data as read back (security group by id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedTemplateData {
    pub image_id: String,
    pub instance_type: String,
    pub root_device: String,
    pub root_volume_gib: i32,
    pub root_volume_type: String,
    pub encrypted: bool,
    pub instance_profile: Option<String>,
    pub key_name: Option<String>,
    pub security_group_ids: Vec<String>,
    pub imds_tokens_required: bool,
    pub user_data: String,
    pub tags: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<crate::capacity::Reservation>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedLaunchTemplate {
    pub id: String,
    pub name: String,
    pub group: String,
    pub latest_version: i64,
    pub latest: Option<ObservedTemplateData>,
    /// The group's size as the cluster autoscaler last set it (a tag on
    /// the template): the plan keeps at least this many machines.
    #[serde(default)]
    pub scaled_size: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedInstance {
    pub id: String,
    pub cluster: Option<String>,
    pub group: Option<String>,
    pub owner: Option<String>,
    pub state: String,
    pub image_id: String,
    pub instance_type: String,
    pub subnet_id: Option<String>,
    pub zone: Option<String>,
    pub vpc_id: Option<String>,
    pub private_ip: Option<String>,
    pub launch_template_version: Option<i64>,
    pub revision: Option<u64>,
    /// Seconds since the epoch.
    pub launch_time: Option<i64>,
    /// The Kubernetes version it was launched with (its tag).
    #[serde(default)]
    pub kubernetes_version: Option<String>,
    /// A Spot machine (EC2's instance lifecycle `spot`).
    #[serde(default)]
    pub spot: bool,
    /// A control-plane machine whose etcd is kops's etcd-manager (kops's
    /// own, tagged `k8s.io/role/control-plane`, or pinfleet's for a cluster
    /// taken over from kops, tagged `pinfleet.dev/etcd: etcd-manager`).
    #[serde(default)]
    pub etcd_manager: bool,
}

impl ObservedInstance {
    /// Not on its way out: pending, running, stopping or stopped.
    pub fn is_live(&self) -> bool {
        matches!(self.state.as_str(), "pending" | "running" | "stopping" | "stopped")
    }
}

impl Observed {
    pub fn subnet_by_name(&self, name: &str) -> Option<&ObservedSubnet> {
        self.subnets.iter().find(|s| s.name == name)
    }
    pub fn sg_by_name(&self, name: &str) -> Option<&ObservedSecurityGroup> {
        self.security_groups.iter().find(|s| s.name == name)
    }
    pub fn template(&self, group: &str) -> Option<&ObservedLaunchTemplate> {
        self.launch_templates.iter().find(|t| t.group == group)
    }
    pub fn live_instances<'a>(&'a self, group: &'a str) -> impl Iterator<Item = &'a ObservedInstance> + 'a {
        self.instances.iter().filter(move |i| i.is_live() && i.group.as_deref() == Some(group))
    }
}

/// An IAM role pinfleet made for the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedRole {
    /// `control-plane` or `nodes`.
    pub key: String,
    pub name: String,
    /// The inline policy's document, as IAM returns it.
    pub policy: Option<String>,
}

/// An instance profile, with the roles it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObservedProfile {
    pub key: String,
    pub name: String,
    pub roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedQueue {
    pub name: String,
    pub url: String,
    pub arn: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ObservedEventRule {
    /// One of `cloud::events::KINDS`.
    pub kind: String,
    pub name: String,
    pub pattern: String,
    /// The ARNs its targets send to.
    pub targets: Vec<String>,
}
