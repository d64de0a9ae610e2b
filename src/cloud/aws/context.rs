//! What every AWS operation shares: the apply's context (ids of resources
//! as they come to exist, the desired model, tags) and the one way an SDK
//! call's failure becomes an [`OpError`] that says whether to retry. Both
//! the EC2/ELBv2 operations ([`super::ops`]) and the IAM ones
//! ([`super::iam`]) build on it; neither depends on the other for it.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
use tokio::sync::Mutex;

use super::Aws;
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::observed::ObservedInstance;
use crate::cloud::ops::OpError;
use crate::cloud::tags;

/// Error codes that clear up by themselves: resources still being released
/// or not yet visible everywhere (EC2 is eventually consistent).
const RETRIABLE: &[&str] = &[
    "DependencyViolation",
    "InvalidIPAddress.InUse",
    "ResourceInUse",
    "IncorrectState",
    "InvalidGroup.InUse",
    "InvalidSubnetID.NotFound",
    "InvalidVpcID.NotFound",
    "InvalidRouteTableID.NotFound",
    "InvalidGroup.NotFound",
    "InvalidNatGatewayID.NotFound",
    "InvalidInternetGatewayID.NotFound",
    "InvalidAllocationID.NotFound",
    "InvalidLaunchTemplateId.NotFound",
    "InvalidInstanceID.NotFound",
    "Gateway.NotAttached",
    // Capacity comes and goes; a later attempt often gets it.
    "InsufficientInstanceCapacity",
];

pub type R<T> = Result<T, OpError>;

/// An SDK error as every service client returns it.
type SdkError<E> = aws_sdk_ec2::error::SdkError<E, aws_smithy_runtime_api::http::Response>;

pub fn call<T, E>(what: &str, r: Result<T, SdkError<E>>) -> R<T>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    r.map_err(|e| {
        let retriable = super::error_code(&e).is_some_and(|c| RETRIABLE.contains(&c));
        OpError { retriable, error: anyhow::anyhow!("{what}: {}", super::client::describe_sdk_error(&e)) }
    })
}

/// Like [`call`], but the listed codes mean "already done".
pub fn call_ok_if<T, E>(what: &str, done: &[&str], r: Result<T, SdkError<E>>) -> R<Option<T>>
where
    E: aws_sdk_ec2::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if super::error_code(&e).is_some_and(|c| done.contains(&c)) => Ok(None),
        Err(e) => call(what, Err(e)),
    }
}

/// Shared state of one apply: ids of resources as they come to exist.
pub struct OpContext {
    pub aws: Aws,
    pub desired: Desired,
    pub base_tags: BTreeMap<String, String>,
    pub revision: u64,
    /// User-data for the very first control-plane machine (`kubeadm init`).
    pub init_user_data: Option<String>,
    /// Instances observed before the apply started.
    pub observed_instances: Vec<ObservedInstance>,
    /// key → id (vpc, subnet/x, sg/x, lt/x, lb, tg, igw, nat/zone, eip/zone, rt/x).
    pub ids: Mutex<BTreeMap<K, String>>,
    /// Launch template version per group, once known.
    pub versions: Mutex<BTreeMap<String, i64>>,
    pub lb_dns: Mutex<Option<String>>,
    /// The host launch templates' joins use instead of `lb_dns`: a taken-over
    /// cluster's own API name ([`crate::cloud::model::Desired::join_host`]).
    pub join_host: Option<String>,
    pub launched: Mutex<Vec<String>>,
    /// The fleet-wide capacity ledger launches read and write (None: kept
    /// for this apply only).
    pub ledger: Option<std::sync::Arc<dyn crate::capacity::LedgerStore>>,
}

impl OpContext {
    pub(super) async fn id(&self, key: &K) -> R<String> {
        self.ids.lock().await.get(key).cloned().ok_or_else(|| OpError {
            retriable: false,
            error: anyhow::anyhow!("{key} does not exist yet (a dependency failed?)"),
        })
    }
    pub(super) async fn set(&self, key: &K, id: &str) {
        self.ids.lock().await.insert(key.clone(), id.to_string());
    }
    pub(super) fn tags_for(&self, key: &K, extra: &[(&str, &str)]) -> Vec<Tag> {
        let key = key.to_string();
        let mut t = self.base_tags.clone();
        t.insert(tags::RESOURCE.into(), key.clone());
        t.insert(tags::NAME.into(), format!("{}-{}", self.desired.cluster, key.replace('/', "-")));
        for (k, v) in extra {
            t.insert((*k).into(), (*v).into());
        }
        t.into_iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect()
    }
    pub(super) fn spec(&self, rt: ResourceType, key: &K, extra: &[(&str, &str)]) -> TagSpecification {
        TagSpecification::builder().resource_type(rt).set_tags(Some(self.tags_for(key, extra))).build()
    }
}
