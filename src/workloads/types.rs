//! The six workload kinds as Rust types. Shared parts (owner, tier, pod
//! template, config templates, runtime toggles, status) are common structs;
//! rules the schema cannot say are CEL (`x-kubernetes-validations`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

/// Pod templates and PVC specs are kept open in the CRD schema (the full
/// upstream schemas would make each CRD hundreds of kilobytes); the
/// controller validates them by typing them as k8s-openapi structs.
fn open_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// Kubernetes' int-or-string (a structural schema: a real API server refuses
/// an untyped field in a CRD).
pub(crate) fn int_or_string(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
}

fn optional_int_or_string(g: &mut SchemaGenerator) -> Schema {
    int_or_string(g)
}

/// Who owns the workload (labels for ownership, cost and GC). Immutable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("owner is immutable"))]
pub struct Owner {
    #[schemars(length(min = 1, max = 63))]
    pub team: String,
    #[schemars(length(min = 1, max = 63))]
    pub project: String,
}

/// Scheduling priority: each tier maps to a PriorityClass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Tier {
    Reserved,
    #[default]
    OnDemand,
    Preemptible,
}

/// A file rendered before the app starts, from an inline template or a ConfigMap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigTemplate {
    pub name: String,
    pub mount_path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Toggle {
    #[serde(default = "yes")]
    pub enabled: bool,
}

impl Default for Toggle {
    fn default() -> Self {
        Toggle { enabled: true }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrafficRuntime {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Service-discovery set the pods register into (default: the workload name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serviceset: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoggingRuntime {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricsRuntime {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

// Runtime support is on unless a workload turns it off.
impl Default for TrafficRuntime {
    fn default() -> Self {
        TrafficRuntime { enabled: true, serviceset: None }
    }
}

impl Default for LoggingRuntime {
    fn default() -> Self {
        LoggingRuntime { enabled: true, paths: Vec::new() }
    }
}

impl Default for MetricsRuntime {
    fn default() -> Self {
        MetricsRuntime { enabled: true, port: None, path: None }
    }
}

/// Runtime support toggles and overrides.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Runtime {
    /// Pin a runtime-support profile version (default: the cluster's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default)]
    pub identity: Toggle,
    #[serde(default)]
    pub traffic: TrafficRuntime,
    #[serde(default)]
    pub logging: LoggingRuntime,
    #[serde(default)]
    pub metrics: MetricsRuntime,
    /// Per-sidecar resource overrides, by sidecar name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "open_object")]
    pub overrides: BTreeMap<String, serde_json::Value>,
}

/// What every kind shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Common {
    pub owner: Owner,
    #[serde(default)]
    pub tier: Tier,
    /// The user's containers (runtime support is added by the platform).
    #[schemars(schema_with = "open_object")]
    pub template: PodTemplateSpec,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_templates: Vec<ConfigTemplate>,
    #[serde(default)]
    pub runtime: Runtime,
    #[serde(default)]
    pub paused: bool,
}

/// A child object, for status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChildRef {
    pub kind: String,
    pub name: String,
    pub ready: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShardStatus {
    pub total: i32,
    pub active: i32,
    pub succeeded: i32,
    pub failed: i32,
    /// Failed shard indexes, e.g. `1,3-5`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failed_indexes: String,
}

/// Status shared by every kind: conditions Ready, Progressing, Degraded,
/// Reconciled (Succeeded for batch kinds), counts for the scale subresource.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
    /// Label selector of the pods, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_profile: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    #[schemars(length(min = 1, max = 15))]
    pub name: String,
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_int_or_string")]
    pub target_port: Option<serde_json::Value>,
    #[serde(default = "tcp")]
    pub protocol: String,
}

fn tcp() -> String {
    "TCP".into()
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_int_or_string")]
    pub max_surge: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_int_or_string")]
    pub max_unavailable: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Ingress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_name: Option<String>,
    #[serde(default)]
    pub hosts: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default)]
    pub tls: bool,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_int_or_string")]
    pub max_unavailable: Option<serde_json::Value>,
}

/// A long-running stateless service.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestService",
    namespaced,
    shortname = "psvc",
    category = "platform",
    status = "WorkloadStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Available", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A long-running stateless service: Deployment, Service, Ingress, PodDisruptionBudget and runtime support."
)]
#[serde(rename_all = "camelCase")]
pub struct PinterestServiceSpec {
    #[serde(flatten)]
    pub common: Common,
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    #[serde(default)]
    pub strategy: RolloutStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ServicePort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<Ingress>,
    #[serde(default)]
    pub disruption: Disruption,
}

fn one() -> i32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ClaimScope {
    #[default]
    Shared,
    PerShard,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeClaimTemplate {
    pub name: String,
    #[serde(default)]
    pub scope: ClaimScope,
    #[schemars(schema_with = "open_object")]
    pub spec: serde_json::Value,
}

/// Many parallel jobs running the same container, each a shard of the work.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestJobSet",
    namespaced,
    shortname = "pjs",
    category = "platform",
    status = "WorkloadStatus",
    printcolumn(
        name = "Succeeded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Succeeded\")].status"
    ),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.conditions[?(@.type==\"Succeeded\")].reason"),
    printcolumn(name = "Shards", type_ = "integer", json_path = ".spec.shards"),
    printcolumn(name = "Done", type_ = "integer", json_path = ".status.shards.succeeded"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "Parallel shards of one batch job: an Indexed Job with SHARD_INDEX and SHARD_COUNT."
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.parallelism) || self.parallelism <= self.shards").message("parallelism cannot exceed shards"))]
pub struct PinterestJobSetSpec {
    #[serde(flatten)]
    pub common: Common,
    #[schemars(range(min = 1, max = 100000))]
    pub shards: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub parallelism: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit_per_index: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<VolumeClaimTemplate>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum ConcurrencyPolicy {
    #[default]
    Allow,
    Forbid,
    Replace,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CronJobRun {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
}

/// A scheduled batch run with the same runtime support.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestCronJob",
    namespaced,
    shortname = "pcj",
    category = "platform",
    status = "WorkloadStatus",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule"),
    printcolumn(name = "Suspend", type_ = "boolean", json_path = ".spec.suspend"),
    printcolumn(name = "Last-Run", type_ = "date", json_path = ".status.lastScheduleTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A scheduled batch run: a CronJob with the platform's runtime support."
)]
#[serde(rename_all = "camelCase")]
pub struct PinterestCronJobSpec {
    #[serde(flatten)]
    pub common: Common,
    #[schemars(length(min = 1))]
    pub schedule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub successful_jobs_history_limit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_jobs_history_limit: Option<i32>,
    #[serde(default)]
    pub suspend: bool,
    #[serde(default)]
    pub job: CronJobRun,
}

/// An infrastructure daemon on every (selected) node.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestDaemon",
    namespaced,
    shortname = "pds",
    category = "platform",
    status = "WorkloadStatus",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".status.replicas"),
    printcolumn(name = "Available", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "An infrastructure daemon: a DaemonSet. Privileged or host-network daemons only in infrastructure namespaces."
)]
#[serde(rename_all = "camelCase")]
pub struct PinterestDaemonSpec {
    #[serde(flatten)]
    pub common: Common,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "open_list")]
    pub tolerations: Vec<serde_json::Value>,
    #[serde(default)]
    pub update_strategy: RolloutStrategy,
    #[serde(default)]
    pub privileged: bool,
    #[serde(default)]
    pub host_network: bool,
}

fn open_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Framework {
    PyTorch,
    TensorFlow,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TrainingRole {
    /// master, worker, ps or chief.
    pub name: String,
    #[schemars(range(min = 1))]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub template: Option<PodTemplateSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Accelerators {
    /// nvidia.com/gpu or aws.amazon.com/neuron
    #[serde(rename = "type")]
    pub kind: String,
    /// Devices per worker pod (each role's pods ask for this many).
    #[schemars(range(min = 1))]
    pub count: i32,
    /// The GPU product (A100, H100, A10G, L4): the pods are held to nodes
    /// whose `nvidia.com/gpu.product` is one. Absent, the gateway gives the
    /// first GPU product in the team's quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
}

/// Distributed training (TensorFlow, PyTorch).
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestTrainingJob",
    namespaced,
    shortname = "ptj",
    category = "platform",
    status = "WorkloadStatus",
    printcolumn(
        name = "Succeeded",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Succeeded\")].status"
    ),
    printcolumn(name = "Framework", type_ = "string", json_path = ".spec.framework"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "Distributed training: an Indexed Job per role, a headless Service and rendezvous environment."
)]
#[serde(rename_all = "camelCase")]
pub struct PinterestTrainingJobSpec {
    #[serde(flatten)]
    pub common: Common,
    pub framework: Framework,
    #[schemars(length(min = 1))]
    pub roles: Vec<TrainingRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerators: Option<Accelerators>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum PodManagementPolicy {
    #[default]
    OrderedReady,
    Parallel,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatefulUpdateStrategy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "optional_int_or_string")]
    pub max_unavailable: Option<serde_json::Value>,
}

/// A stateful workload.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "pinfleet.dev",
    version = "v1alpha1",
    kind = "PinterestStatefulSet",
    namespaced,
    shortname = "psts",
    category = "platform",
    status = "WorkloadStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Available", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A stateful workload: StatefulSet, headless Service and PodDisruptionBudget."
)]
#[serde(rename_all = "camelCase")]
pub struct PinterestStatefulSetSpec {
    #[serde(flatten)]
    pub common: Common,
    #[serde(default = "one")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
    #[serde(default)]
    pub pod_management_policy: PodManagementPolicy,
    #[serde(default)]
    pub update_strategy: StatefulUpdateStrategy,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumeClaimTemplates are immutable"))]
    pub volume_claim_templates: Vec<VolumeClaimTemplate>,
}
