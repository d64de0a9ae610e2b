//! The runtime-support profile a workload renders with: its pinned
//! version or the cluster's default, from the runtime-support ConfigMap,
//! else the built-in one.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::Client;

use super::{Error, PROFILE_CONFIGMAP, SYSTEM_NAMESPACE};
use crate::workloads::render::RuntimeProfile;

/// The runtime-support profile: the CR's pinned version or the cluster
/// default from the runtime-support ConfigMap, else the built-in one.
pub async fn load_profile(client: &Client, namespace: &str, pinned: Option<&str>) -> Result<RuntimeProfile, Error> {
    // An API error must not fall back to the built-in profile: that would
    // change every pod template and roll the fleet. It fails the reconcile,
    // which retries with backoff.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    profile_in(namespace, cms.get_opt(PROFILE_CONFIGMAP).await?.and_then(|cm| cm.data).unwrap_or_default(), pinned)
}

/// The profile a workload gets from the runtime-support data (pure).
pub fn profile_from(
    data: std::collections::BTreeMap<String, String>,
    pinned: Option<&str>,
) -> Result<RuntimeProfile, Error> {
    profile_in(SYSTEM_NAMESPACE, data, pinned)
}

/// [`profile_from`] with the data read from `namespace` (named in errors).
pub fn profile_in(
    namespace: &str,
    data: std::collections::BTreeMap<String, String>,
    pinned: Option<&str>,
) -> Result<RuntimeProfile, Error> {
    let version = pinned.map(str::to_string).or_else(|| data.get("default").cloned());
    let key = version.as_ref().map(|v| format!("profile-{v}.json"));
    match key.as_ref().and_then(|k| data.get(k).map(|json| (k, json))) {
        Some((k, json)) => {
            serde_json::from_str(json).map_err(|e| Error::Other(format!("{namespace}/{PROFILE_CONFIGMAP} {k}: {e}")))
        }
        None => Ok(RuntimeProfile::default_profile(version.as_deref().unwrap_or("builtin"))),
    }
}
