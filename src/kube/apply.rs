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

/// Whether every field `desired` sets already has its value in `live`, as
/// a real API server returns it: an element of a keyed list (a container
/// by name) is there when an element with that key is (the server fills
/// in its defaults), and a zero value the server leaves out of what it
/// returns (`paused: false`, an empty list) counts as set.
pub fn up_to_date(desired: &Value, live: &Value) -> bool {
    stale(desired, live).next().is_none()
}

fn stale<'a>(desired: &'a Value, live: &'a Value) -> impl Iterator<Item = super::fields::Path> + 'a {
    use super::fields::{get, leaves, Seg};
    leaves(desired).into_iter().filter(move |p| {
        let (want, have) = (get(desired, p), get(live, p));
        match (p.last(), want, have) {
            (Some(Seg::K(_) | Seg::V(_)), _, have) => have.is_none(),
            (_, Some(w), None) => !is_zero(w),
            (_, w, h) => w != h,
        }
    })
}

/// A value Go's `omitempty` leaves out of what the server returns.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// The fields `desired` sets whose value `live` does not have (for logs).
pub fn stale_fields(desired: &Value, live: &Value) -> Vec<String> {
    stale(desired, live).map(|p| format!("{p:?}")).collect()
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

/// Where two values differ, as JSON pointers (`/conditions/0/status`), at
/// most ten and then how many more: for logs that say why a write happened.
pub fn differences(a: &Value, b: &Value) -> String {
    fn walk(a: Option<&Value>, b: Option<&Value>, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    walk(x.get(k), y.get(k), &format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")), out);
                }
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(Some(p), Some(q), &format!("{at}/{i}"), out);
                }
            }
            (p, q) if p != q => out.push(if at.is_empty() { "/".into() } else { at.to_string() }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(Some(a), Some(b), "", &mut out);
    match out.len() {
        0 => "no differences".into(),
        n if n > 10 => format!("{} and {} more", out[..10].join(", "), n - 10),
        _ => out.join(", "),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn up_to_date_reads_live_objects_as_a_real_server_returns_them() {
        let desired = json!({"spec": {"paused": false, "replicas": 2, "template": {"spec": {
            "containers": [{"name": "app", "image": "a:1", "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]}]}}}});
        // Defaults filled in, zero values left out.
        let live = json!({"spec": {"replicas": 2, "template": {"spec": {
            "containers": [{"name": "app", "image": "a:1", "imagePullPolicy": "IfNotPresent",
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}}]}]}}}});
        assert!(up_to_date(&desired, &live), "{:?}", stale_fields(&desired, &live));
        // A changed value, a missing element and a non-zero value left out are not.
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(7);
        assert!(!up_to_date(&desired, &edited));
        let mut gone = live.clone();
        gone["spec"]["template"]["spec"]["containers"][0]["env"] = json!([]);
        assert_eq!(stale_fields(&desired, &gone).len(), 3, "{:?}", stale_fields(&desired, &gone));
        let paused = json!({"spec": {"paused": true}});
        assert!(!up_to_date(&paused, &json!({"spec": {}})));
    }

    #[test]
    fn differences_name_each_changed_leaf() {
        let a = json!({"replicas": 2, "conditions": [{"type": "Ready", "status": "False"}], "a/b": 1});
        let b = json!({"replicas": 2, "conditions": [{"type": "Ready", "status": "True"}], "a/b": 2, "new": true});
        assert_eq!(differences(&a, &b), "/a~1b, /conditions/0/status, /new");
        assert_eq!(differences(&a, &a), "no differences");
        assert_eq!(differences(&json!([1]), &json!([1, 2])), "/");
        let many_a = json!((0..12).map(|i| (i.to_string(), json!(i))).collect::<serde_json::Map<_, _>>());
        assert!(differences(&many_a, &json!({})).ends_with("and 2 more"));
    }
}
