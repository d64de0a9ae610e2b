//! The platform smoke phase: in a temporary namespace, one workload of each
//! of the six platform kinds must reach Ready (or Succeeded) with runtime
//! support injected into its native child; the service gets ready
//! endpoints; an eviction that would break a budget is refused; the
//! JobSet's shards complete. The namespace goes afterwards, also when the
//! run is interrupted (Ctrl-C).

use std::time::Duration;

use anyhow::{anyhow, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, EvictParams, ListParams, PostParams};
use serde_json::{json, Value};

use super::{Outcome, Phase, Recorder, Target};

/// The label on smoke namespaces (`kubectl delete ns -l pinfleet.dev/e2e` clears leftovers).
pub const NAMESPACE_LABEL: &str = "pinfleet.dev/e2e";

/// Long-running workloads wait; batch ones exit at once.
const SERVE_IMAGE: &str = "registry.k8s.io/pause:3.10";
const BATCH_IMAGE: &str = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1";

/// The six workloads: (kind, name, spec beyond owner and template, batch).
pub fn workloads() -> Vec<(&'static str, &'static str, Value, bool)> {
    vec![
        // maxUnavailable 0: the service's own budget refuses every eviction.
        (
            "PinterestService",
            "e2e-service",
            json!({"replicas": 2, "ports": [{"name": "http", "port": 8080}], "disruption": {"maxUnavailable": 0}}),
            false,
        ),
        ("PinterestJobSet", "e2e-jobset", json!({"shards": 2, "parallelism": 2}), true),
        ("PinterestCronJob", "e2e-cronjob", json!({"schedule": "0 0 1 1 *", "job": {"shards": 1}}), true),
        ("PinterestDaemon", "e2e-daemon", json!({}), false),
        (
            "PinterestTrainingJob",
            "e2e-training",
            json!({"framework": "PyTorch", "roles": [{"name": "worker", "replicas": 2}]}),
            true,
        ),
        ("PinterestStatefulSet", "e2e-stateful", json!({"replicas": 2}), false),
    ]
}

fn manifest(kind: &str, name: &str, spec: &Value, batch: bool, profile: Option<&str>) -> Value {
    let container = if batch {
        json!({"name": "app", "image": BATCH_IMAGE, "command": ["sh", "-c", "exit 0"]})
    } else {
        json!({"name": "app", "image": SERVE_IMAGE})
    };
    let mut s = spec.clone();
    s["owner"] = json!({"team": "platform", "project": "e2e"});
    s["template"] = json!({"spec": {"containers": [container]}});
    if let Some(p) = profile {
        s["runtime"] = json!({"version": p});
    }
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": s})
}

/// What the workload must reach: Succeeded for JobSets and TrainingJobs,
/// Ready for the rest (a CronJob is Ready once its CronJob exists).
fn goal(kind: &str) -> &'static str {
    match kind {
        "PinterestJobSet" | "PinterestTrainingJob" => "Succeeded",
        _ => "Ready",
    }
}

fn condition<'a>(obj: &'a Value, t: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == t)
}

/// Where runtime support is missing from a child's pod template (pure).
pub fn injection_gaps(child: &Value) -> Vec<String> {
    let template = child
        .pointer("/spec/template")
        .or_else(|| child.pointer("/spec/jobTemplate/spec/template"))
        .cloned()
        .unwrap_or(Value::Null);
    let mut gaps = Vec::new();
    let inits: Vec<&str> = template
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    if !inits.contains(&"platform-init") {
        gaps.push("no platform-init init container".to_string());
    }
    let has_env = template
        .pointer("/spec/containers/0/env")
        .and_then(Value::as_array)
        .is_some_and(|e| e.iter().any(|v| v["name"] == "CLUSTER"));
    if !has_env {
        gaps.push("no CLUSTER in the app container's environment".to_string());
    }
    if template.pointer("/metadata/annotations/pinfleet.dev~1runtime-profile").is_none() {
        gaps.push("no pinfleet.dev/runtime-profile annotation".to_string());
    }
    gaps
}

async fn poll<T, F, Fut>(timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<std::ops::ControlFlow<T, String>>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match f().await? {
            std::ops::ControlFlow::Break(v) => return Ok(v),
            std::ops::ControlFlow::Continue(why) if tokio::time::Instant::now() >= deadline => {
                return Err(anyhow!("not within {}: {why}", humantime::format_duration(timeout)));
            }
            std::ops::ControlFlow::Continue(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

fn resource(kind: &str) -> ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("pinfleet.dev", "v1alpha1", kind);
    ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()))
}

/// One workload to its goal, then its child checked for runtime support.
async fn workload(client: &kube::Client, ns: &str, kind: &str, name: &str, timeout: Duration) -> Result<Outcome> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    let want = goal(kind);
    let obj = poll(timeout, || async {
        let o = serde_json::to_value(api.get(name).await?)?;
        if let Some(c) = condition(&o, "Reconciled").filter(|c| c["status"] == "False") {
            return Err(anyhow!("{kind} {ns}/{name}: Reconciled=False: {}", c["message"].as_str().unwrap_or_default()));
        }
        if condition(&o, "Succeeded").is_some_and(|c| c["status"] == "False" && c["reason"] == "Failed") {
            return Err(anyhow!("{kind} {ns}/{name} failed: {}", condition(&o, "Succeeded").unwrap()["message"]));
        }
        Ok(match condition(&o, want) {
            Some(c) if c["status"] == "True" => std::ops::ControlFlow::Break(o),
            Some(c) => std::ops::ControlFlow::Continue(format!(
                "{want}={} {}",
                c["status"],
                c["message"].as_str().unwrap_or_default()
            )),
            None => std::ops::ControlFlow::Continue(format!(
                "no {want} condition yet (is the workload controller running?)"
            )),
        })
    })
    .await
    .map_err(|e| anyhow!("{kind} {ns}/{name} did not reach {want}: {e:#}"));
    let obj = match obj {
        Ok(o) => o,
        Err(e) => return Ok(Outcome::fail(format!("{e:#}"), vec![format!("{kind} {ns}/{name}")])),
    };
    // The workload's native child (not its Service, ConfigMap or budget).
    let child = obj
        .pointer("/status/children")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                matches!(c["kind"].as_str(), Some("Deployment" | "StatefulSet" | "DaemonSet" | "Job" | "CronJob"))
            })
        })
        .cloned()
        .unwrap_or(Value::Null);
    let (ck, cn) = (child["kind"].as_str().unwrap_or_default(), child["name"].as_str().unwrap_or_default());
    let group = match ck {
        "Deployment" | "StatefulSet" | "DaemonSet" => "apps",
        "Job" | "CronJob" => "batch",
        _ => return Ok(Outcome::fail(format!("{kind} {ns}/{name} lists no child"), vec![])),
    };
    let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, "v1", ck));
    let child_api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let c = serde_json::to_value(child_api.get(cn).await?)?;
    let gaps = injection_gaps(&c);
    Ok(if gaps.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail(
            format!("runtime support not injected into {ck} {ns}/{cn}: {}", gaps.join("; ")),
            vec![format!("{ck} {ns}/{cn}")],
        )
    })
}

async fn endpoints(client: &kube::Client, ns: &str, timeout: Duration) -> Result<Outcome> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels("kubernetes.io/service-name=e2e-service");
    let r = poll(timeout, || async {
        let ready: usize = slices
            .list(&lp)
            .await?
            .items
            .iter()
            .flat_map(|s| s.endpoints.iter())
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready).unwrap_or(false))
            .count();
        Ok(if ready > 0 {
            std::ops::ControlFlow::Break(ready)
        } else {
            std::ops::ControlFlow::Continue("no ready endpoint".into())
        })
    })
    .await;
    Ok(match r {
        Ok(_) => Outcome::Pass,
        Err(e) => Outcome::fail(
            format!("Service {ns}/e2e-service has no ready endpoints: {e:#}"),
            vec![format!("Service {ns}/e2e-service")],
        ),
    })
}

/// The service's own PodDisruptionBudget (maxUnavailable 0) must refuse an eviction.
async fn budget(client: &kube::Client, ns: &str, timeout: Duration) -> Result<Outcome> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let pdb = poll(timeout, || async {
        let found = pdbs
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|p| p.status.as_ref().is_some_and(|s| s.expected_pods >= 2));
        Ok(match found {
            Some(p) => std::ops::ControlFlow::Break(p.metadata.name.unwrap_or_default()),
            None => std::ops::ControlFlow::Continue("no budget of e2e-service counting its pods".into()),
        })
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=e2e-service"))
        .await?
        .items
        .into_iter()
        .find_map(|p| p.metadata.name)
        .ok_or_else(|| anyhow!("no pod of e2e-service to evict"))?;
    Ok(match pods.evict(&pod, &EvictParams::default()).await {
        Err(kube::Error::Api(e)) if e.code == 429 => Outcome::Pass,
        Err(e) => Outcome::fail(format!("evicting {ns}/{pod}: {e}"), vec![format!("Pod {ns}/{pod}")]),
        Ok(_) => Outcome::fail(
            format!("an eviction that breaks PodDisruptionBudget {pdb} (maxUnavailable 0) was allowed"),
            vec![format!("Pod {ns}/{pod}"), format!("PodDisruptionBudget {ns}/{pdb}")],
        ),
    })
}

async fn shards(client: &kube::Client, ns: &str) -> Result<Outcome> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("PinterestJobSet"));
    let o = serde_json::to_value(api.get("e2e-jobset").await?)?;
    let (total, done) = (
        o.pointer("/status/shards/total").and_then(Value::as_i64),
        o.pointer("/status/shards/succeeded").and_then(Value::as_i64),
    );
    Ok(match (total, done) {
        (Some(2), Some(2)) => Outcome::Pass,
        _ => Outcome::fail(
            format!("PinterestJobSet {ns}/e2e-jobset: shards {}/{} succeeded", done.unwrap_or(0), total.unwrap_or(0)),
            vec![format!("PinterestJobSet {ns}/e2e-jobset")],
        ),
    })
}

/// The checks in a created namespace.
async fn checks(t: &Target, r: &mut Recorder<'_>, ns: &str, opts: &super::Options) {
    let (client, timeout) = (&t.client, opts.smoke_timeout);
    r.check(Phase::Smoke, "create-workloads", async {
        for (kind, name, spec, batch) in workloads() {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
            let obj: DynamicObject =
                serde_json::from_value(manifest(kind, name, &spec, batch, opts.smoke_profile.as_deref()))?;
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| anyhow!("creating {kind} {ns}/{name}: {e} (are the platform CRDs installed?)"))?;
        }
        Ok(Outcome::Pass)
    })
    .await;
    // The six wait side by side; each is reported under its kind.
    let waits = workloads().into_iter().map(|(kind, name, _, _)| async move {
        let start = std::time::Instant::now();
        let outcome =
            workload(client, ns, kind, name, timeout).await.unwrap_or_else(|e| Outcome::fail(format!("{e:#}"), vec![]));
        (kind, start.elapsed().as_secs_f64(), outcome)
    });
    for (kind, seconds, outcome) in futures::future::join_all(waits).await {
        r.push(super::Check { phase: Phase::Smoke, name: kind.to_string(), seconds, outcome });
    }
    r.check(Phase::Smoke, "service-endpoints", endpoints(client, ns, timeout)).await;
    r.check(Phase::Smoke, "budget-refuses-eviction", budget(client, ns, timeout)).await;
    r.check(Phase::Smoke, "jobset-shards", shards(client, ns)).await;
}

/// The smoke phase: a namespace, the checks (or Ctrl-C), then the namespace removed.
pub async fn run(t: &Target, r: &mut Recorder<'_>, opts: &super::Options) {
    let timeout = opts.smoke_timeout;
    // Without the platform's CRDs there is no platform to smoke.
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(t.client.clone());
    if let Ok(None) = crds.get_opt("pinterestservices.pinfleet.dev").await {
        r.push(super::Check {
            phase: Phase::Smoke,
            name: "platform".into(),
            seconds: 0.0,
            outcome: Outcome::Skip { reason: "the platform CRDs are not installed (the platform-crds addon)".into() },
        });
        return;
    }
    let nss: Api<Namespace> = Api::all(t.client.clone());
    let name = format!("pinfleet-e2e-{:06x}", rand::random::<u32>() & 0xff_ffff);
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {NAMESPACE_LABEL: "true"}}}))
            .expect("a Namespace");
    let created = r
        .check(Phase::Smoke, "namespace", async {
            nss.create(&PostParams::default(), &ns).await?;
            Ok(Outcome::Pass)
        })
        .await
        .clone();
    if !matches!(created, Outcome::Pass) {
        return;
    }
    let interrupted = tokio::select! {
        _ = checks(t, r, &name, opts) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        r.push(super::Check {
            phase: Phase::Smoke,
            name: "interrupted".into(),
            seconds: 0.0,
            outcome: Outcome::fail("interrupted (Ctrl-C); the namespace is removed", vec![]),
        });
    }
    r.check(Phase::Smoke, "cleanup", async {
        nss.delete(&name, &DeleteParams::default()).await?;
        poll(timeout, || async {
            Ok(match nss.get_opt(&name).await? {
                None => std::ops::ControlFlow::Break(()),
                Some(_) => std::ops::ControlFlow::Continue(format!("namespace {name} still terminating")),
            })
        })
        .await?;
        Ok(Outcome::Pass)
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn injection_gaps_name_what_is_missing() {
        let ok = json!({"spec": {"template": {"metadata": {"annotations": {"pinfleet.dev/runtime-profile": "v1"}},
            "spec": {"initContainers": [{"name": "platform-init"}], "containers": [{"name": "app", "env": [{"name": "CLUSTER", "value": "c"}]}]}}}});
        assert!(injection_gaps(&ok).is_empty());
        let cron =
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "app"}]}}}}}});
        assert_eq!(
            injection_gaps(&cron),
            [
                "no platform-init init container",
                "no CLUSTER in the app container's environment",
                "no pinfleet.dev/runtime-profile annotation"
            ]
        );
    }
}
