//! What the controller needs of each of the six workload kinds: the
//! child kinds it makes, its render, the replicas it wants, its status as
//! last written.

use std::fmt::Debug;

use kube::core::{ApiResource, GroupVersionKind};
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::workloads::render::{self, Kind, RenderError};
use crate::workloads::*;

/// A child kind: apiVersion, kind, plural.
type ChildKind = (&'static str, &'static str, &'static str);

const SERVICE_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("apps/v1", "Deployment", "deployments"),
    ("v1", "Service", "services"),
    ("networking.k8s.io/v1", "Ingress", "ingresses"),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
];
const JOBSET_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("batch/v1", "Job", "jobs"),
    ("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
];
const CRON_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("batch/v1", "CronJob", "cronjobs"),
];
const DAEMON_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("apps/v1", "DaemonSet", "daemonsets"),
];
const TRAINING_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("v1", "Service", "services"),
    ("batch/v1", "Job", "jobs"),
];
const STATEFUL_CHILDREN: &[ChildKind] = &[
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "ConfigMap", "configmaps"),
    ("v1", "Service", "services"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"),
];

/// What the controller needs of each workload kind.
pub trait Workload:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Serialize
    + Send
    + Sync
    + 'static
{
    const KIND: Kind;
    const CHILDREN: &'static [ChildKind];
    fn common(&self) -> &Common;
    fn want(&self) -> i64;
    fn render(&self, ctx: &render::Context) -> Result<Vec<Value>, RenderError>;
    /// The generation its status last reported done.
    fn observed(&self) -> Option<i64>;
    /// Its status as last written.
    fn last_status(&self) -> Option<crate::workloads::WorkloadStatus>;
}

macro_rules! workload {
    ($t:ty, $kind:expr, $children:expr, $render:path, $want:expr) => {
        impl Workload for $t {
            const KIND: Kind = $kind;
            const CHILDREN: &'static [ChildKind] = $children;
            fn common(&self) -> &Common {
                &self.spec.common
            }
            fn want(&self) -> i64 {
                let f: fn(&$t) -> i64 = $want;
                f(self)
            }
            fn render(&self, ctx: &render::Context) -> Result<Vec<Value>, RenderError> {
                $render(self, ctx)
            }
            fn observed(&self) -> Option<i64> {
                self.status.as_ref().and_then(|s| s.observed_generation)
            }
            fn last_status(&self) -> Option<crate::workloads::WorkloadStatus> {
                self.status.clone()
            }
        }
    };
}

workload!(PinterestService, Kind::Service, SERVICE_CHILDREN, render::service, |c| i64::from(c.spec.replicas));
workload!(PinterestJobSet, Kind::JobSet, JOBSET_CHILDREN, render::jobset, |c| i64::from(c.spec.shards));
workload!(PinterestCronJob, Kind::CronJob, CRON_CHILDREN, render::cronjob, |_| 0);
workload!(PinterestDaemon, Kind::Daemon, DAEMON_CHILDREN, render::daemon, |_| 0);
workload!(PinterestTrainingJob, Kind::TrainingJob, TRAINING_CHILDREN, render::training, |c| c
    .spec
    .roles
    .iter()
    .map(|r| i64::from(r.replicas))
    .sum());
workload!(PinterestStatefulSet, Kind::StatefulSet, STATEFUL_CHILDREN, render::statefulset, |c| i64::from(
    c.spec.replicas
));

pub(super) fn api_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

pub(super) fn child_kind(obj: &Value, children: &[ChildKind]) -> Option<ApiResource> {
    let av = obj["apiVersion"].as_str()?;
    let kind = obj["kind"].as_str()?;
    children.iter().find(|(a, k, _)| *a == av && *k == kind).map(|(a, k, p)| api_resource(a, k, p))
}
