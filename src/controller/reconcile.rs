//! One workload's reconcile: its inputs (profile, namespace labels) from
//! the caches, every rendered child applied unless its watch shows it up to
//! date, what is no longer rendered pruned, and the status (and an Event
//! per transition) written when it changed; failures back off per object.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::ResourceExt;
use serde_json::{json, Value};

use super::context::{obj_key, Ctx};
use super::profile::{load_profile, profile_in};
use super::workload::{api_resource, child_kind, Workload};
use super::{child, status, Error, MANAGER, PROFILE_CONFIGMAP};
use crate::workloads::render::{self, RuntimeProfile};

/// Periodic resync (children are also watched, so drift is seen sooner).
const RESYNC: Duration = Duration::from_secs(300);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

pub(super) async fn reconcile<K: Workload>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if !ctx.is_leading() {
        // A standby: the leader acts; this one is reconciled when it leads.
        return Ok(Action::await_change());
    }
    let start = std::time::Instant::now();
    let result = reconcile_inner(obj, ctx.clone()).await;
    ctx.observe(start.elapsed());
    result
}

async fn reconcile_inner<K: Workload>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let name = obj.name_any();
    let ns = obj.namespace().unwrap_or_else(|| "default".into());
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    *ctx.reconciles_by_namespace.lock().expect("reconciles").entry(ns.clone()).or_default() += 1;
    let generation = obj.meta().generation.unwrap_or(1);
    let (profile, profile_error, ns_labels) = inputs(obj.as_ref(), &ctx, &ns).await?;
    let rctx = render::Context { cluster: ctx.cluster.clone(), profile: profile.clone(), namespace_labels: ns_labels };
    let rendered = obj.render(&rctx);
    // The status as last written: both the prune decision and the status
    // write compare against it.
    let previous: Option<crate::workloads::WorkloadStatus> = obj.last_status();
    let mut live_children = Vec::new();
    let applied: Result<(), String> = match (&profile_error, &rendered) {
        (Some(why), _) => Err(why.clone()),
        (None, Err(e)) => Err(e.to_string()),
        (None, Ok(children)) => {
            let written: Result<(), kube::Error> = async {
                for child in children {
                    live_children.extend(apply_child(obj.as_ref(), &ctx, &ns, child).await?);
                }
                prune(obj.as_ref(), &ctx, &ns, children, previous.as_ref()).await
            }
            .await;
            match written {
                Ok(()) => Ok(()),
                // A child the server refuses (422 invalid, 400, 403 …) is the
                // workload's problem to show in its status, with the server's
                // own words; conflicts, throttling and outages are retried.
                Err(kube::Error::Api(ae)) if refused(ae.code) => Err(ae.message),
                Err(e) => return Err(e.into()),
            }
        }
    };
    let summary = status::summarize(K::KIND, obj.want(), &live_children);
    let labels = render::selector(&render::Workload {
        kind: K::KIND,
        name: &name,
        namespace: &ns,
        uid: "",
        common: obj.common(),
    });
    let selector = labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",");
    // Condition times have second precision, as the API keeps them.
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time =
        serde_json::from_value(json!(now)).map_err(|e| Error::Other(format!("a time that does not parse: {e}")))?;
    let observation = status::Observation {
        kind: K::KIND,
        generation,
        summary: &summary,
        reconciled: applied.clone(),
        now,
        profile: &profile.version,
        selector: &selector,
    };
    let new_status = status::status(&observation, previous.as_ref());
    if previous.as_ref() != Some(&new_status) {
        write_status(obj.as_ref(), &ctx, &ns, previous.as_ref(), &new_status).await?;
    }
    ctx.attempts.lock().expect("attempts").remove(&format!("{}/{ns}/{name}", K::KIND.name()));
    if applied.is_ok() {
        let want = obj.want();
        let pods = want > 0 && summary.replicas.unwrap_or(0) >= want;
        ctx.progressed(&obj_key(K::KIND.name(), &ns, &name), generation, pods);
    }
    match (applied, rendered) {
        // A spec the controller refuses waits for the next change.
        (Err(_), Err(_)) => Ok(Action::await_change()),
        (Err(e), _) => Err(Error::Other(e)),
        // Children are watched: their changes bring the next reconcile.
        _ => Ok(Action::requeue(RESYNC)),
    }
}

/// What rendering needs beyond the workload: its runtime profile (or why
/// it does not load, the workload's problem to show) and its namespace's
/// labels, from the caches; what they don't hold (yet) is read from the
/// API, so an object created a moment ago is never taken for a missing one.
async fn inputs<K: Workload>(
    obj: &K,
    ctx: &Ctx,
    ns: &str,
) -> Result<(RuntimeProfile, Option<String>, std::collections::BTreeMap<String, String>), Error> {
    let client = &ctx.client;
    let pinned = obj.common().runtime.version.as_deref();
    let cached_cm = ctx
        .caches
        .get()
        .and_then(|c| c.profiles.get(&ObjectRef::new(PROFILE_CONFIGMAP).within(ctx.profile_namespace())));
    let profile = match cached_cm {
        Some(cm) => profile_in(ctx.profile_namespace(), cm.data.clone().unwrap_or_default(), pinned),
        None => load_profile(client, ctx.profile_namespace(), pinned).await,
    };
    // A profile that does not load is the workload's problem to show in its
    // status (Reconciled=False with the reason), like a refused child.
    let (profile, profile_error) = match profile {
        Ok(p) => (p, None),
        Err(Error::Other(why)) => (RuntimeProfile::default_profile(pinned.unwrap_or("invalid")), Some(why)),
        Err(e) => return Err(e),
    };
    let cached_ns = ctx.caches.get().and_then(|c| c.namespaces.get(&ObjectRef::new(ns)));
    let ns_labels = match cached_ns {
        Some(n) => n.metadata.labels.clone().unwrap_or_default(),
        None => {
            Api::<Namespace>::all(client.clone()).get_opt(ns).await?.and_then(|n| n.metadata.labels).unwrap_or_default()
        }
    };
    Ok((profile, profile_error, ns_labels))
}

/// Applies one rendered child unless its watch shows it up to date; the
/// child as the server holds it (None: not a kind this workload makes).
async fn apply_child<K: Workload>(obj: &K, ctx: &Ctx, ns: &str, child: &Value) -> Result<Option<Value>, kube::Error> {
    let client = &ctx.client;
    let name = obj.name_any();
    let Some(ar) = child_kind(child, K::CHILDREN) else { return Ok(None) };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let child_name = child["metadata"]["name"].as_str().unwrap_or_default();
    let kind_key = format!("{}/{}", ar.api_version, ar.kind);
    // The child as its watch holds it: up to date, no request.
    let store = ctx.child_store(&format!("{}/{kind_key}", K::KIND.name()));
    let cached = store
        .as_ref()
        .and_then(|s| s.get(&ObjectRef::<child::Child>::new_with(child_name, ar.clone()).within(ns)))
        .map(|c| c.to_value());
    // A Job's pod template cannot change once it exists (the
    // API server refuses it): a Job that runs keeps its
    // template, and the workload's next Job takes the new one.
    let kept;
    let child = match (ar.kind.as_str(), &cached) {
        ("Job", Some(live)) => {
            kept = keep_job_template(child, live);
            &kept
        }
        ("Job", None) => match api.get_opt(child_name).await? {
            Some(live) => {
                kept = keep_job_template(child, &serde_json::to_value(&live).unwrap_or_default());
                &kept
            }
            None => child,
        },
        _ => child,
    };
    let current = cached.as_ref().is_some_and(|c| crate::kube::apply::up_to_date(child, c));
    // A child a filled cache does not hold is new: applied
    // without reading it first (the apply is the same
    // either way; the read only saves a write of what is
    // already there, which a filled cache rules out but for
    // a write whose event is still on its way).
    let filled = store
        .as_ref()
        .is_some_and(|s| futures::FutureExt::now_or_never(s.wait_until_ready()).is_some_and(|r| r.is_ok()));
    let key = obj_key(&kind_key, ns, child_name);
    let (live, wrote) = match (current, &cached) {
        (true, Some(c)) => (c.clone(), false),
        (_, None) if filled => {
            ctx.writing(&key);
            let params = PatchParams::apply(MANAGER).force();
            // The answer read as the caches read a child: its
            // managed fields passed over, not built.
            let answers: Api<child::Child> = Api::namespaced_with(client.clone(), ns, &ar);
            match answers.patch(child_name, &params, &Patch::Apply(child)).await {
                Ok(live) => (live.to_value(), true),
                Err(e) => {
                    ctx.wrote(key, None);
                    return Err(e);
                }
            }
        }
        _ => {
            ctx.writing(&key);
            match crate::kube::apply::apply_if_changed(&api, child_name, child, MANAGER).await {
                Ok((live, wrote)) => (serde_json::to_value(&live).unwrap_or_default(), wrote),
                Err(e) => {
                    ctx.wrote(key, None);
                    return Err(e);
                }
            }
        }
    };
    if wrote {
        if tracing::enabled!(tracing::Level::DEBUG) {
            let stale = cached.as_ref().map(|c| crate::kube::apply::stale_fields(child, c));
            tracing::debug!(workload = name, child = key, ?stale, "child written");
        }
        ctx.wrote_in(ns);
        let rv = live.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_string);
        ctx.wrote(key, rv);
    } else if !current {
        // Read and found up to date: nothing of ours is coming.
        ctx.wrote(key, None);
    }
    Ok(Some(live))
}

/// Prunes what this workload no longer renders: the children the
/// watches hold for it, and those its last status listed (made by a write
/// whose watch event may not have come yet). With the watches running
/// this needs no LIST; each candidate is read before it goes (only what it
/// owns is deleted).
async fn prune<K: Workload>(
    obj: &K,
    ctx: &Ctx,
    ns: &str,
    children: &[Value],
    previous: Option<&crate::workloads::WorkloadStatus>,
) -> Result<(), kube::Error> {
    let client = &ctx.client;
    let name = obj.name_any();
    let uid = obj.meta().uid.clone().unwrap_or_default();
    let rendered: std::collections::HashSet<(&str, &str)> = children
        .iter()
        .map(|c| (c["kind"].as_str().unwrap_or_default(), c["metadata"]["name"].as_str().unwrap_or_default()))
        .collect();
    let watched =
        K::CHILDREN.iter().all(|(av, kind, _)| ctx.child_store(&format!("{}/{av}/{kind}", K::KIND.name())).is_some());
    let mut candidates: std::collections::BTreeSet<(String, String)> = if watched {
        ctx.owned_by(&uid).into_iter().collect()
    } else {
        // No watches (a reconcile outside `run`): LIST by the labels.
        let selector = format!("pinfleet.dev/kind={},pinfleet.dev/name={name}", K::KIND.name());
        let mut found = std::collections::BTreeSet::new();
        for (av, kind, plural) in K::CHILDREN {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &api_resource(av, kind, plural));
            for o in api.list_metadata(&ListParams::default().labels(&selector)).await?.items {
                found.insert((kind.to_string(), o.name_any()));
            }
        }
        found
    };
    if let Some(st) = previous {
        candidates.extend(st.children.iter().map(|c| (c.kind.clone(), c.name.clone())));
    }
    candidates.retain(|(k, n)| !rendered.contains(&(k.as_str(), n.as_str())));
    for (kind, child_name) in candidates {
        let Some((av, kind, plural)) = K::CHILDREN.iter().find(|(_, k, _)| *k == kind) else { continue };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &api_resource(av, kind, plural));
        let Some(o) = api.get_metadata_opt(&child_name).await? else { continue };
        if o.owner_references().iter().any(|r| r.uid == uid) {
            ctx.wrote_in(ns);
            tracing::debug!(workload = name, child = child_name, kind, "child no longer rendered: deleted");
            match api.delete(&child_name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// Writes the workload's new status (whole, typed, under the controller's
/// field manager) and an Event per transition, best effort.
async fn write_status<K: Workload>(
    obj: &K,
    ctx: &Ctx,
    ns: &str,
    previous: Option<&crate::workloads::WorkloadStatus>,
    new_status: &crate::workloads::WorkloadStatus,
) -> Result<(), Error> {
    let client = &ctx.client;
    let name = obj.name_any();
    if tracing::enabled!(tracing::Level::DEBUG) {
        let (was, now) = (json!(previous), json!(new_status));
        tracing::debug!(workload = name, "status written: {}", crate::kube::apply::differences(&was, &now));
    }
    ctx.wrote_in(ns);
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    // The whole status, typed, under the controller's field manager.
    let doc = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": new_status,
    });
    api.patch_status(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(doc)).await?;
    let reference = obj.object_ref(&());
    for t in status::transitions(previous, new_status) {
        let event = Event {
            type_: if t.warning { EventType::Warning } else { EventType::Normal },
            reason: t.reason,
            note: Some(t.note.chars().take(1000).collect()),
            action: "Reconcile".into(),
            secondary: None,
        };
        // Events are best effort: a cluster that refuses them still converges.
        if let Err(e) = ctx.recorder(&reference).publish(&event, &reference).await {
            tracing::debug!(object = name, "event not recorded: {e}");
        }
    }
    Ok(())
}

/// An answer that says the request itself is wrong: retrying the same
/// object cannot succeed until the workload or its profile changes.
fn refused(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 401 | 404 | 408 | 409 | 429)
}

pub(super) fn error_policy<K: Workload>(obj: Arc<K>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.errors.fetch_add(1, Ordering::Relaxed);
    let key = format!("{}/{}/{}", K::KIND.name(), obj.namespace().unwrap_or_default(), obj.name_any());
    let mut attempts = ctx.attempts.lock().expect("attempts");
    let n = attempts.entry(key.clone()).or_insert(0);
    *n += 1;
    let delay = Duration::from_millis(500 * 2u64.saturating_pow((*n).min(10))).min(BACKOFF_MAX);
    tracing::warn!(object = key, attempt = *n, "reconcile failed, retrying in {delay:?}: {err}");
    Action::requeue(delay)
}

/// The desired Job with the live Job's pod template: a Job's template is
/// immutable, so a change to it (a new runtime profile, an edited
/// workload) reaches the next Job, never the one that runs.
fn keep_job_template(desired: &Value, live: &Value) -> Value {
    let mut d = desired.clone();
    if let (Some(t), Some(spec)) = (live.pointer("/spec/template"), d.get_mut("spec").and_then(Value::as_object_mut)) {
        spec.insert("template".into(), t.clone());
    }
    d
}
