//! Server-side apply with discovery, the way every writer of the platform
//! talks to an API server: a kind's API found once per run (a kind whose
//! CRD was just installed is found once the CRD is Established), apply
//! under one field manager with `force` (the manager owns what it sets),
//! a server-side dry run for diffs, and the comparable form of an object
//! (without what the server owns).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use kube::Client;
use serde_json::Value;

/// A connection plus the discovery answers seen so far, writing as one manager.
pub struct Applier {
    client: Client,
    manager: &'static str,
    resources: HashMap<(String, String), (ApiResource, ApiCapabilities)>,
}

fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

impl Applier {
    pub fn new(client: Client, manager: &'static str) -> Self {
        Applier { client, manager, resources: HashMap::new() }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The API for one kind (discovered once per run).
    pub async fn resource(&mut self, api_version: &str, kind: &str) -> Result<(ApiResource, ApiCapabilities)> {
        let k = (api_version.to_string(), kind.to_string());
        if let Some(r) = self.resources.get(&k) {
            return Ok(r.clone());
        }
        let (g, v) = split_api_version(api_version);
        let found = kube::discovery::pinned_kind(&self.client, &GroupVersionKind::gvk(g, v, kind))
            .await
            .with_context(|| format!("the API server does not serve {kind} in {api_version}"))?;
        self.resources.insert(k, found.clone());
        Ok(found)
    }

    pub async fn api(&mut self, api_version: &str, kind: &str, namespace: &str) -> Result<Api<DynamicObject>> {
        let (ar, caps) = self.resource(api_version, kind).await?;
        Ok(match caps.scope {
            Scope::Namespaced => Api::namespaced_with(self.client.clone(), namespace, &ar),
            Scope::Cluster => Api::all_with(self.client.clone(), &ar),
        })
    }

    pub async fn get(&mut self, api_version: &str, kind: &str, namespace: &str, name: &str) -> Result<Option<Value>> {
        let api = self.api(api_version, kind, namespace).await?;
        let obj = api.get_opt(name).await.with_context(|| format!("reading {kind} {namespace}/{name}"))?;
        Ok(obj.map(|o| serde_json::to_value(o).expect("objects serialise")))
    }

    /// Server-side apply under the applier's manager (a dry run leaves the cluster alone).
    async fn patch(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        value: &Value,
        dry_run: bool,
    ) -> Result<(Option<String>, DynamicObject)> {
        let api = self.api(api_version, kind, namespace).await?;
        let what = format!("{kind} {namespace}/{name}");
        let before = match dry_run {
            true => None,
            false => api
                .get_opt(name)
                .await
                .with_context(|| format!("reading {what}"))?
                .and_then(|b| b.metadata.resource_version),
        };
        let mut pp = PatchParams::apply(self.manager).force();
        pp.dry_run = dry_run;
        let doing = if dry_run { "dry-run of" } else { "applying" };
        let after = api.patch(name, &pp, &Patch::Apply(value)).await.with_context(|| format!("{doing} {what}"))?;
        Ok((before, after))
    }

    /// Server-side apply; returns whether the resourceVersion moved.
    pub async fn apply(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        value: &Value,
    ) -> Result<bool> {
        let (before, after) = self.patch(api_version, kind, namespace, name, value, false).await?;
        let changed = before != after.metadata.resource_version;
        if changed {
            let to = after.metadata.resource_version;
            tracing::info!(object = %format!("{kind} {namespace}/{name}"), from = ?before, to = ?to, "applied a change");
        }
        Ok(changed)
    }

    /// What applying would leave (server-side dry run), for diffs.
    pub async fn dry_run(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
        value: &Value,
    ) -> Result<Value> {
        let (_, out) = self.patch(api_version, kind, namespace, name, value, true).await?;
        Ok(serde_json::to_value(out).expect("objects serialise"))
    }
}

/// Whether every field `desired` sets already has its value in `live`.
pub fn up_to_date(desired: &Value, live: &Value) -> bool {
    use super::fields::{get, leaves};
    leaves(desired).iter().all(|p| get(desired, p) == get(live, p))
}

/// Server-side apply of `desired` through `api` under `manager` (forced),
/// skipped when every field it sets already has its value: a controller
/// that reconciles often writes only what changed. Returns the live object
/// and whether it wrote; errors stay kube's own, so a caller can tell the
/// server refusing the object from an outage.
pub async fn apply_if_changed(
    api: &Api<DynamicObject>,
    name: &str,
    desired: &Value,
    manager: &str,
) -> Result<(DynamicObject, bool), kube::Error> {
    if let Some(live) = api.get_opt(name).await? {
        if up_to_date(desired, &serde_json::to_value(&live).unwrap_or_default()) {
            return Ok((live, false));
        }
    }
    Ok((api.patch(name, &PatchParams::apply(manager).force(), &Patch::Apply(desired)).await?, true))
}

/// An object without what the server owns (status, bookkeeping metadata).
pub fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("status");
        if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in ["managedFields", "resourceVersion", "generation", "uid", "creationTimestamp", "selfLink"] {
                m.remove(k);
            }
            if m.get("annotations").and_then(Value::as_object).is_some_and(|a| a.is_empty()) {
                m.remove("annotations");
            }
        }
    }
    v
}

/// Connects with the kubeconfig and reports an unreachable API server
/// clearly instead of retrying for minutes.
pub async fn connect(kubeconfig: &std::path::Path) -> Result<Client> {
    if !kubeconfig.exists() {
        bail!("no kubeconfig at {}: bootstrap the cluster first or pass --kubeconfig", kubeconfig.display());
    }
    let client = super::client_from_kubeconfig(kubeconfig, super::Retry::Default).await?;
    tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
        .await
        .map_err(|_| anyhow!("the API server in {} did not answer within 20s", kubeconfig.display()))?
        .with_context(|| format!("reaching the API server in {}", kubeconfig.display()))?;
    Ok(client)
}
