//! The cluster definition format (`apiVersion: pinfleet.dev/v1alpha1`,
//! `kind: Cluster`).
//!
//! These types are the single source of truth: the JSON Schema that editors
//! and the structural checker use is derived from them (schemars), and every
//! later stage (cloud model, templates, addons, rollout, federation) reads a
//! loaded, defaulted [`Cluster`]. Fields with a `#[serde(default)]` are filled
//! at load time, so a loaded cluster is fully defaulted.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub const API_VERSION: &str = "pinfleet.dev/v1alpha1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "pinfleet Cluster", description = "A Kubernetes cluster on AWS managed by pinfleet.")]
pub struct Cluster {
    pub api_version: ApiVersion,
    pub kind: ClusterKind,
    /// Relative path of a base file this one extends (deep merge; lists of
    /// named items merge by name; `$patch: delete` removes an inherited item).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extends: Option<String>,
    pub metadata: Metadata,
    pub spec: ClusterSpec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ApiVersion {
    #[serde(rename = "pinfleet.dev/v1alpha1")]
    V1Alpha1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ClusterKind {
    Cluster,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    /// Cluster name: a DNS label, unique in the state store.
    pub name: String,
    /// Free-form labels (env, tier, region…) used to select clusters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// Team that owns the cluster and its machines (tagged on every resource).
    pub owner: String,
    pub cloud: Cloud,
    /// Where pinfleet keeps state: `s3://bucket/prefix` (with
    /// `?expectedBucketOwner=ACCOUNT`, every S3 call states the bucket's
    /// account) or `file://dir`.
    pub state_store: String,
    /// Kubernetes version, `MAJOR.MINOR.PATCH`.
    pub kubernetes_version: String,
    pub network: Network,
    #[serde(default)]
    pub api: Api,
    #[serde(default)]
    pub iam: Iam,
    /// EC2 key pair for SSH access to machines (none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_name: Option<String>,
    pub instance_groups: Vec<InstanceGroup>,
    #[serde(default)]
    pub addons: Vec<AddonRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub federation: Option<Federation>,
    /// The control plane's etcd: backups (on by default) and Secrets'
    /// encryption at rest.
    #[serde(default)]
    pub etcd: EtcdSpec,
}

/// The control plane's etcd.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EtcdSpec {
    #[serde(default)]
    pub backups: BackupSpec,
}

/// etcd backups, taken by `pinfleet etcd agent` on the control-plane
/// machines into the state store beside the cluster's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BackupSpec {
    /// Off only with a reason (recorded in history when applied).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// A full snapshot this often.
    #[serde(default = "default_backup_interval")]
    pub interval: DurationSpec,
    /// What changed since the last full snapshot, from a watch, is flushed
    /// this often: the most writes a restore can lose (the RPO).
    #[serde(default = "default_delta_interval")]
    pub delta_interval: DurationSpec,
    /// Every backup is kept this long, ...
    #[serde(default = "default_keep_all")]
    pub keep_all: DurationSpec,
    /// ... then the newest of each hour this long, ...
    #[serde(default = "default_keep_hourly")]
    pub keep_hourly: DurationSpec,
    /// ... then the newest of each day this long; older ones are collected.
    #[serde(default = "default_keep_daily")]
    pub keep_daily: DurationSpec,
    /// A change to the control plane (upgrade, a roll of a control-plane
    /// group, an AMI rollout) needs a verified backup younger than this,
    /// and takes one when there is none.
    #[serde(default = "default_fresh")]
    pub fresh_for: DurationSpec,
    /// How long such a change waits for the backup it asks the agents for
    /// (taken and verified) before it refuses to start.
    #[serde(default = "default_wait_for_backup")]
    pub wait_for_backup: DurationSpec,
    /// Backups stored under S3 Object Lock (the bucket must have Object
    /// Lock enabled): no one deletes them before their retention ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<ObjectLockSpec>,
}

impl Default for BackupSpec {
    fn default() -> Self {
        BackupSpec {
            enabled: true,
            interval: default_backup_interval(),
            delta_interval: default_delta_interval(),
            keep_all: default_keep_all(),
            keep_hourly: default_keep_hourly(),
            keep_daily: default_keep_daily(),
            fresh_for: default_fresh(),
            wait_for_backup: default_wait_for_backup(),
            object_lock: None,
        }
    }
}

fn default_backup_interval() -> DurationSpec {
    DurationSpec(Duration::from_secs(15 * 60))
}
fn default_wait_for_backup() -> DurationSpec {
    DurationSpec(Duration::from_secs(10 * 60))
}
fn default_delta_interval() -> DurationSpec {
    DurationSpec(Duration::from_secs(30))
}
fn default_keep_all() -> DurationSpec {
    DurationSpec(Duration::from_secs(24 * 3600))
}
fn default_keep_hourly() -> DurationSpec {
    DurationSpec(Duration::from_secs(7 * 24 * 3600))
}
fn default_keep_daily() -> DurationSpec {
    DurationSpec(Duration::from_secs(365 * 24 * 3600))
}
// Twice the interval: with the agent running, a verified backup is always
// younger (one every 15 minutes, verified within a minute or two).
fn default_fresh() -> DurationSpec {
    DurationSpec(Duration::from_secs(30 * 60))
}

/// S3 Object Lock for backups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectLockSpec {
    pub mode: ObjectLockMode,
    /// Days each backup is locked.
    pub days: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum ObjectLockMode {
    Governance,
    Compliance,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cloud {
    #[serde(default)]
    pub provider: Provider,
    /// AWS region, e.g. `us-east-1`.
    pub region: String,
    /// Availability zones the cluster uses, e.g. `us-east-1a`.
    pub zones: Vec<String>,
    /// The AWS account the cluster lives in and the role pinfleet assumes
    /// there (usually from a base). Absent: the caller's own credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub account: Option<Account>,
}

/// An account and the one role pinfleet assumes in it, from the caller's
/// identity (as Cluster API's AWS provider names a role identity per cluster).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Account {
    /// The 12-digit account id; GetCallerIdentity must name it once the
    /// role is assumed, or the command refuses to act.
    pub id: String,
    /// `arn:aws:iam::<id>:role/<name>`.
    pub role_arn: String,
    /// Sent with AssumeRole when the role's trust policy asks for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    #[default]
    Aws,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Network {
    pub vpc_cidr: Cidr,
    pub subnets: Vec<Subnet>,
    /// Pod network; must not overlap the VPC or the service network.
    #[serde(default = "default_pod_cidr")]
    pub pod_cidr: Cidr,
    /// Service network; must not overlap the VPC or the pod network.
    #[serde(default = "default_service_cidr")]
    pub service_cidr: Cidr,
}

// The same defaults as kops, so clusters moving over keep their addressing.
fn default_pod_cidr() -> Cidr {
    Cidr("100.96.0.0/11".parse().expect("valid literal"))
}
fn default_service_cidr() -> Cidr {
    Cidr("100.64.0.0/13".parse().expect("valid literal"))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Subnet {
    pub name: String,
    pub zone: String,
    pub cidr: Cidr,
    #[serde(rename = "type")]
    pub kind: SubnetType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SubnetType {
    Public,
    Private,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Api {
    /// Port the API server listens on behind the load balancer.
    #[serde(default = "default_api_port")]
    pub port: u16,
    #[serde(default)]
    pub load_balancer: ApiLoadBalancer,
    /// Source CIDRs allowed to reach the API.
    #[serde(default = "default_allowed_cidrs")]
    pub allowed_cidrs: Vec<Cidr>,
    /// Extra DNS name for the API certificate and kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_name: Option<String>,
}

impl Default for Api {
    fn default() -> Self {
        Api {
            port: default_api_port(),
            load_balancer: ApiLoadBalancer::default(),
            allowed_cidrs: default_allowed_cidrs(),
            dns_name: None,
        }
    }
}

fn default_api_port() -> u16 {
    6443
}
fn default_allowed_cidrs() -> Vec<Cidr> {
    vec![Cidr("0.0.0.0/0".parse().expect("valid literal"))]
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ApiLoadBalancer {
    /// How the API endpoint is served: `network` (an ELBv2 network load
    /// balancer in front of the control plane) or `elastic-ip` (no load
    /// balancer: an Elastic IP on the one control-plane machine, moved to its
    /// replacement in a roll; for endpoints without ELBv2, like LocalStack
    /// Community).
    #[serde(default, rename = "type")]
    pub kind: ApiEndpointKind,
    #[serde(default)]
    pub scheme: LoadBalancerScheme,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ApiEndpointKind {
    #[default]
    Network,
    ElasticIp,
}

impl ApiLoadBalancer {
    /// True when the endpoint is a load balancer (ELBv2 is needed).
    pub fn uses_elbv2(&self) -> bool {
        self.kind == ApiEndpointKind::Network
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LoadBalancerScheme {
    #[default]
    InternetFacing,
    Internal,
}

/// Existing IAM instance profiles to use instead of the roles and profiles
/// pinfleet makes for the cluster (least privilege per machine role).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Iam {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_plane_instance_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_instance_profile: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceGroup {
    pub name: String,
    pub role: Role,
    /// EC2 instance type, e.g. `m6i.large`.
    pub machine_type: String,
    pub min_size: u32,
    pub max_size: u32,
    /// Instances wanted now; defaults to minSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired: Option<u32>,
    pub image: Image,
    /// Names of subnets (from spec.network.subnets) the group spreads over.
    pub subnets: Vec<String>,
    #[serde(default)]
    pub root_volume: RootVolume,
    /// Kubernetes node labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Extra AWS tags on the group's machines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cloud_labels: BTreeMap<String, String>,
    /// IAM instance profile; defaults to spec.iam's profile for the role.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    #[serde(default)]
    pub rollout: RolloutSpec,
    /// Where the group's machines may come from besides `machineType`:
    /// more instance types, the market, and the fallback order when EC2
    /// refuses an offering (see the README's "Capacity").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacitySpec>,
    /// The Kubernetes version this group's machines install when it is not
    /// `spec.kubernetesVersion`: set by a version upgrade for one of its
    /// steps, never read from files.
    #[serde(skip)]
    #[schemars(skip)]
    pub kubernetes_version: Option<String>,
}

impl InstanceGroup {
    /// Instances wanted now (desired, or minSize when unset).
    pub fn desired_count(&self) -> u32 {
        self.desired.unwrap_or(self.min_size)
    }

    /// The Kubernetes version its machines install.
    pub fn kubernetes_version<'a>(&'a self, spec: &'a ClusterSpec) -> &'a str {
        self.kubernetes_version.as_deref().unwrap_or(&spec.kubernetes_version).trim_start_matches('v')
    }
}

/// An instance group's capacity: the instance types and markets it may
/// launch on, in the order it tries them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapacitySpec {
    /// More instance types, tried after `machineType` in this order (all of
    /// the image's architecture).
    #[serde(default)]
    pub types: Vec<String>,
    /// More instance types by what they offer (vCPU, memory, families,
    /// generations), tried after `types`, smallest first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<crate::capacity::Requirements>,
    /// OnDemand (default), Spot, or Mixed (an On-Demand base and a Spot share).
    #[serde(default)]
    pub market: MarketSpec,
    /// Mixed: this many machines are always On-Demand.
    #[serde(default)]
    pub on_demand_base: u32,
    /// Mixed: the percentage of machines above the base on Spot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spot_percent: Option<u32>,
    /// What changes first when EC2 refuses an offering: `market`, `zone`,
    /// `type` (default: market, then zone, then type).
    #[serde(default = "default_fallback")]
    pub fallback: Vec<crate::capacity::Fallback>,
    /// Launch calls EC2 refuses for capacity, at most, a minute (calls it
    /// serves are never held back).
    #[serde(default = "default_launches_per_minute")]
    pub launches_per_minute: u32,
    /// An On-Demand Capacity Reservation the machines launch into (the
    /// launch template's `CapacityReservationSpecification`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<ReservationSpec>,
}

/// Which On-Demand Capacity Reservations a group's machines use: exactly
/// one of `id` (a reservation, `cr-` and 17 hex digits), `resourceGroupArn`
/// (a resource group of reservations) and `preference` (`open`: any open
/// reservation that matches, EC2's default; `none`: never one). EC2's
/// `CapacityReservationSpecification`, as a launch template carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReservationSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_group_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<crate::capacity::ReservationPreference>,
}

impl ReservationSpec {
    /// What the launch template carries (None when the spec names none or several: validation refuses those).
    pub fn target(&self) -> Option<crate::capacity::Reservation> {
        use crate::capacity::Reservation;
        match (&self.id, &self.resource_group_arn, self.preference) {
            (Some(id), None, None) => Some(Reservation::Id(id.clone())),
            (None, Some(arn), None) => Some(Reservation::ResourceGroup(arn.clone())),
            (None, None, Some(p)) => Some(Reservation::Preference(p)),
            _ => None,
        }
    }
}

fn default_fallback() -> Vec<crate::capacity::Fallback> {
    use crate::capacity::Fallback;
    vec![Fallback::Market, Fallback::Zone, Fallback::Type]
}

fn default_launches_per_minute() -> u32 {
    6
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum MarketSpec {
    #[default]
    OnDemand,
    Spot,
    Mixed,
}

impl InstanceGroup {
    /// The group's taints: its own, and for accelerated machines the
    /// device's `RESOURCE=present:NoSchedule` (unless the group already
    /// taints that key), so only pods that ask for the device (and tolerate
    /// it, as the platform's render and the ExtendedResourceToleration
    /// plugin make them) land there.
    pub fn taints_with_accelerators(&self) -> Vec<Taint> {
        let mut taints = self.taints.clone();
        if let Some(a) = crate::accelerated::of_instance_type(&self.machine_type) {
            if !taints.iter().any(|t| t.key == a.resource) {
                taints.push(Taint { key: a.resource.into(), value: "present".into(), effect: TaintEffect::NoSchedule });
            }
        }
        taints
    }

    /// Every instance type of the group, in the order tried.
    pub fn instance_types(&self) -> Vec<String> {
        let mut out = vec![self.machine_type.clone()];
        let arch = self.arch();
        let by_shape = self
            .capacity
            .iter()
            .filter_map(|c| c.requirements.as_ref())
            .flat_map(|r| crate::capacity::matching(r, arch));
        for t in self.capacity.iter().flat_map(|c| c.types.iter().cloned()).chain(by_shape) {
            if !out.contains(&t) {
                out.push(t);
            }
        }
        out
    }

    /// The processor architecture its types must have: its image
    /// selector's, else its machine type's.
    pub fn arch(&self) -> crate::capacity::Arch {
        match &self.image.selector {
            Some(s) if s.architecture == Architecture::Arm64 => crate::capacity::Arch::Arm64,
            Some(_) => crate::capacity::Arch::X86_64,
            None => crate::capacity::architecture_of(&self.machine_type),
        }
    }

    /// The markets the group launches on, in the order tried.
    pub fn markets(&self) -> Vec<crate::capacity::Market> {
        use crate::capacity::Market;
        match self.capacity.as_ref().map(|c| c.market).unwrap_or_default() {
            MarketSpec::OnDemand => vec![Market::OnDemand],
            MarketSpec::Spot => vec![Market::Spot, Market::OnDemand],
            MarketSpec::Mixed => vec![Market::Spot, Market::OnDemand],
        }
    }

    /// When the capacity ledgers hold back some of the group's offerings:
    /// (offerings out, offerings in all, why — with what is tried next).
    pub fn capacity_held(
        &self,
        cluster: &str,
        spec: &ClusterSpec,
        ledgers: &[crate::capacity::Ledger],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Option<(usize, usize, String)> {
        let mut zones: Vec<String> = self
            .subnets
            .iter()
            .filter_map(|n| spec.network.subnets.iter().find(|s| &s.name == n).map(|s| s.zone.clone()))
            .collect();
        zones.dedup();
        let fallback = self.capacity.as_ref().map(|c| c.fallback.clone()).unwrap_or_default();
        let all = crate::capacity::offerings(&self.markets(), &self.instance_types(), &zones, &fallback);
        let out: Vec<&crate::capacity::Entry> =
            all.iter().filter_map(|o| ledgers.iter().find_map(|l| l.out(o, now))).collect();
        let first = out.first()?;
        let next = all.iter().find(|o| ledgers.iter().all(|l| l.out(o, now).is_none()));
        let mut why = crate::capacity::blocked_reason(first, next);
        if let Some(churn) = ledgers.iter().find_map(|l| l.churn(&format!("{cluster}/{}", self.name))) {
            why = format!("{why}; {churn}");
        }
        Some((out.len(), all.len(), why))
    }

    /// Whether the group may run Spot machines.
    pub fn allows_spot(&self) -> bool {
        matches!(self.capacity.as_ref().map(|c| c.market), Some(MarketSpec::Spot | MarketSpec::Mixed))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    ControlPlane,
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ControlPlane => "control-plane",
            Role::Node => "node",
        }
    }
}

/// Exactly one of `id`, `selector` and `channel` (with its `recipe`).
/// A file that extends a base choosing another way says `$patch: replace`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Image {
    /// A pinned AMI id, `ami-…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Newest non-deprecated image matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImageSelector>,
    /// The image a pinfleet channel holds in the cluster's region
    /// (`pinfleet ami promote`), read at every plan: `stable`, `candidate`…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The recipe (`images/RECIPE.yaml`) whose channel this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recipe: Option<String>,
    /// The accelerator driver stack a pinned id or a selected image
    /// carries (`nvidia`, `neuron`), for a group of accelerated machines;
    /// a recipe says its own (`accelerator` in the recipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerator: Option<crate::accelerated::Kind>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ImageSelector {
    /// Account ids or aliases (`amazon`, `self`) that own the image.
    pub owners: Vec<String>,
    /// Image name; `*` and `?` are wildcards.
    pub name: String,
    #[serde(default)]
    pub architecture: Architecture,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Architecture {
    #[default]
    #[serde(rename = "x86_64")]
    X86_64,
    #[serde(rename = "arm64")]
    Arm64,
}

impl Architecture {
    pub fn as_str(self) -> &'static str {
        match self {
            Architecture::X86_64 => "x86_64",
            Architecture::Arm64 => "arm64",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RootVolume {
    #[serde(rename = "sizeGiB", default = "default_volume_size")]
    pub size_gib: u32,
    #[serde(rename = "type", default)]
    pub kind: VolumeType,
    /// Root volumes are encrypted unless turned off explicitly.
    #[serde(default = "default_true")]
    pub encrypted: bool,
}

impl Default for RootVolume {
    fn default() -> Self {
        RootVolume { size_gib: default_volume_size(), kind: VolumeType::default(), encrypted: true }
    }
}

fn default_volume_size() -> u32 {
    64
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    #[default]
    Gp3,
    Gp2,
    Io1,
    Io2,
}

impl VolumeType {
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeType::Gp3 => "gp3",
            VolumeType::Gp2 => "gp2",
            VolumeType::Io1 => "io1",
            VolumeType::Io2 => "io2",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    pub key: String,
    #[serde(default)]
    pub value: String,
    pub effect: TaintEffect,
}

impl fmt::Display for Taint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect.as_str())
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect.as_str())
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub enum TaintEffect {
    NoSchedule,
    PreferNoSchedule,
    NoExecute,
}

impl TaintEffect {
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

/// How a group's machines are replaced. Defaults follow kops on AWS: surge
/// one machine, never drop below desired, 15 minutes to drain and validate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RolloutSpec {
    #[serde(default = "default_surge")]
    pub max_surge: IntOrPercent,
    #[serde(default = "default_unavailable")]
    pub max_unavailable: IntOrPercent,
    #[serde(default = "default_timeout")]
    pub drain_timeout: DurationSpec,
    #[serde(default = "default_timeout")]
    pub validation_timeout: DurationSpec,
}

impl Default for RolloutSpec {
    fn default() -> Self {
        RolloutSpec {
            max_surge: default_surge(),
            max_unavailable: default_unavailable(),
            drain_timeout: default_timeout(),
            validation_timeout: default_timeout(),
        }
    }
}

fn default_surge() -> IntOrPercent {
    IntOrPercent::Int(1)
}
fn default_unavailable() -> IntOrPercent {
    IntOrPercent::Int(0)
}
fn default_timeout() -> DurationSpec {
    DurationSpec(Duration::from_secs(15 * 60))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonRef {
    /// Name of a package under addons/.
    pub name: String,
    /// Pinned version; the package's own version when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Values passed to the addon's templates.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub values: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Federation {
    /// Name of the federation this cluster is a member of.
    pub name: String,
    /// Static weight for weighted placement.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Labels used by placement (region, zone, …).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    /// Largest share of any one app this member may hold, e.g. `60%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_share: Option<IntOrPercent>,
}

fn default_weight() -> u32 {
    1
}

// ---------------------------------------------------------------------------
// Scalar newtypes. Each carries `x-pinfleet-format` in its schema so the
// structural checker validates it (with a location) before serde sees it.

/// An IP network in CIDR notation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr(pub IpNet);

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let net: IpNet = s.parse().map_err(|_| format!("`{s}` is not a CIDR (expected e.g. 10.0.0.0/16)"))?;
        if net.trunc() != net {
            return Err(format!("`{s}` has host bits set (the network is {})", net.trunc()));
        }
        Ok(Cidr(net))
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A whole number or a percentage (`2`, `25%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(u32),
    Percent(u32),
}

impl IntOrPercent {
    /// Resolves against a total, rounding up (as Kubernetes does for surge).
    pub fn resolve_up(self, total: u32) -> u32 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => (u64::from(total) * u64::from(p)).div_ceil(100) as u32,
        }
    }
    /// Resolves against a total, rounding down (as Kubernetes does for unavailability).
    pub fn resolve_down(self, total: u32) -> u32 {
        match self {
            IntOrPercent::Int(n) => n,
            IntOrPercent::Percent(p) => (u64::from(total) * u64::from(p) / 100) as u32,
        }
    }
}

impl FromStr for IntOrPercent {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("`{s}` is neither a whole number nor a percentage like 25%");
        match s.strip_suffix('%') {
            Some(p) => {
                let p: u32 = p.parse().map_err(|_| bad())?;
                if p > 100 {
                    return Err(format!("`{s}` is more than 100%"));
                }
                Ok(IntOrPercent::Percent(p))
            }
            None => s.parse().map(IntOrPercent::Int).map_err(|_| bad()),
        }
    }
}

impl fmt::Display for IntOrPercent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IntOrPercent::Int(n) => write!(f, "{n}"),
            IntOrPercent::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A duration written as `90s`, `15m`, `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSpec(pub Duration);

impl FromStr for DurationSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        humantime::parse_duration(s)
            .map(DurationSpec)
            .map_err(|_| format!("`{s}` is not a duration (expected e.g. 90s, 15m, 1h30m)"))
    }
}

impl fmt::Display for DurationSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

macro_rules! string_newtype_serde {
    ($ty:ty, $name:literal, $format:literal, $schema:tt) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl JsonSchema for $ty {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed($name)
            }
            fn json_schema(_: &mut SchemaGenerator) -> Schema {
                json_schema!($schema)
            }
        }
    };
}

string_newtype_serde!(Cidr, "Cidr", "cidr", {
    "type": "string",
    "x-pinfleet-format": "cidr",
    "description": "An IP network in CIDR notation, e.g. 10.0.0.0/16."
});
string_newtype_serde!(DurationSpec, "Duration", "duration", {
    "type": "string",
    "x-pinfleet-format": "duration",
    "pattern": "^([0-9]+(ns|us|ms|s|m|h|d))+$",
    "description": "A duration such as 90s, 15m or 1h30m."
});

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for DurationSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for IntOrPercent {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrPercent::Int(n) => s.serialize_u32(*n),
            IntOrPercent::Percent(_) => s.collect_str(self),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrPercent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u32),
            Str(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(IntOrPercent::Int(n)),
            Raw::Str(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl JsonSchema for IntOrPercent {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("IntOrPercent")
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "x-pinfleet-format": "int-or-percent",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9]+%$"}
            ],
            "description": "A whole number or a percentage such as 25%."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int_or_percent_rounds_like_kubernetes() {
        let p: IntOrPercent = "25%".parse().unwrap();
        assert_eq!(p.resolve_up(10), 3);
        assert_eq!(p.resolve_down(10), 2);
        assert_eq!(IntOrPercent::Int(2).resolve_up(10), 2);
        assert!("120%".parse::<IntOrPercent>().is_err());
        assert!("x".parse::<IntOrPercent>().is_err());
    }

    #[test]
    fn cidrs_reject_host_bits() {
        assert!("10.0.0.0/16".parse::<Cidr>().is_ok());
        assert_eq!(
            "10.0.0.1/16".parse::<Cidr>().unwrap_err(),
            "`10.0.0.1/16` has host bits set (the network is 10.0.0.0/16)"
        );
    }
}

impl Cluster {
    /// "group G: N of M offerings out; blocked on capacity: …" for each
    /// group the capacity ledgers hold back (what `plan`, `get instances`,
    /// `capacity` and the console's cluster page say).
    pub fn capacity_held_lines(
        &self,
        ledgers: &[crate::capacity::Ledger],
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<String> {
        self.spec
            .instance_groups
            .iter()
            .filter_map(|g| {
                g.capacity_held(&self.metadata.name, &self.spec, ledgers, now)
                    .map(|(n, of, why)| format!("group {}: {n} of {of} offerings out; {why}", g.name))
            })
            .collect()
    }
}
