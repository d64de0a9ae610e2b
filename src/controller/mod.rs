//! `pinfleet controller`: kube-runtime Controllers for the six workload
//! kinds. Each reconcile loads the runtime-support profile, renders the
//! CR ([`crate::workloads::render`]), applies every child with server-side
//! apply (field manager `pinfleet-controller`) — only when the live object
//! differs in a field pinfleet sets, so a no-op resync writes nothing and
//! hand edits are reverted — prunes children no longer rendered, and
//! writes status computed from the children ([`status`]) only when it
//! changed. Children carry owner references, so deletion cascades.
//! Failures back off exponentially per object.

pub mod leader;
pub mod serving;
pub mod status;

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::workloads::render::{self, Kind, RenderError, RuntimeProfile};
use crate::workloads::*;

pub const MANAGER: &str = "pinfleet-controller";
/// Where the runtime-support addon publishes its profiles.
pub const SYSTEM_NAMESPACE: &str = "pinfleet-system";
pub const PROFILE_CONFIGMAP: &str = "runtime-support";
/// Periodic resync (children are also watched, so drift is seen sooner).
const RESYNC: Duration = Duration::from_secs(300);
const BACKOFF_MAX: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// Shared state and counters (exposed as metrics by the command).
pub struct Ctx {
    pub client: Client,
    pub cluster: String,
    pub writes: AtomicU64,
    pub reconciles: AtomicU64,
    pub errors: AtomicU64,
    /// Reconcile durations: counts per bucket of [`BUCKETS`], then the sum in µs.
    durations: Mutex<([u64; BUCKETS.len() + 1], u64)>,
    attempts: Mutex<HashMap<String, u32>>,
    /// Records condition changes as Kubernetes Events on the workload.
    recorder: Recorder,
    /// The runtime-support ConfigMap and the Namespaces, kept by watches
    /// once [`run`] starts (until then, reconciles read them with GETs).
    caches: std::sync::OnceLock<Caches>,
}

/// In-memory copies that spare every reconcile two GETs.
struct Caches {
    profiles: kube::runtime::reflector::Store<ConfigMap>,
    namespaces: kube::runtime::reflector::Store<Namespace>,
}

/// Histogram bucket bounds for reconcile durations, in seconds.
pub const BUCKETS: [f64; 7] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

impl Ctx {
    fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let mut d = self.durations.lock().expect("durations");
        let i = BUCKETS.iter().position(|b| secs <= *b).unwrap_or(BUCKETS.len());
        d.0[i] += 1;
        d.1 += took.as_micros() as u64;
    }

    /// Prometheus text exposition of the controller's counters.
    pub fn metrics(&self, leading: bool) -> String {
        let d = *self.durations.lock().expect("durations");
        let mut out = String::new();
        let counter = |out: &mut String, name: &str, help: &str, v: u64| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"));
        };
        counter(
            &mut out,
            "pinfleet_controller_reconciles_total",
            "Reconciles run.",
            self.reconciles.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "pinfleet_controller_reconcile_errors_total",
            "Reconciles that failed.",
            self.errors.load(Ordering::Relaxed),
        );
        counter(&mut out, "pinfleet_controller_writes_total", "API writes made.", self.writes.load(Ordering::Relaxed));
        out.push_str("# HELP pinfleet_controller_reconcile_duration_seconds Time per reconcile.\n# TYPE pinfleet_controller_reconcile_duration_seconds histogram\n");
        let mut cumulative = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += d.0[i];
            out.push_str(&format!(
                "pinfleet_controller_reconcile_duration_seconds_bucket{{le=\"{b}\"}} {cumulative}\n"
            ));
        }
        cumulative += d.0[BUCKETS.len()];
        out.push_str(&format!("pinfleet_controller_reconcile_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}\n"));
        out.push_str(&format!("pinfleet_controller_reconcile_duration_seconds_sum {}\n", d.1 as f64 / 1e6));
        out.push_str(&format!("pinfleet_controller_reconcile_duration_seconds_count {cumulative}\n"));
        out.push_str(&format!("# HELP pinfleet_controller_leader Whether this replica leads.\n# TYPE pinfleet_controller_leader gauge\npinfleet_controller_leader {}\n", u8::from(leading)));
        out
    }

    pub fn new(client: Client, cluster: &str) -> Arc<Ctx> {
        Arc::new(Ctx {
            cluster: cluster.into(),
            writes: AtomicU64::new(0),
            reconciles: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            durations: Mutex::new(([0; BUCKETS.len() + 1], 0)),
            attempts: Mutex::new(HashMap::new()),
            recorder: Recorder::new(
                client.clone(),
                Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() },
            ),
            client,
            caches: std::sync::OnceLock::new(),
        })
    }
}

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

fn api_resource(api_version: &str, kind: &str, plural: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn child_kind(obj: &Value, children: &[ChildKind]) -> Option<ApiResource> {
    let av = obj["apiVersion"].as_str()?;
    let kind = obj["kind"].as_str()?;
    children.iter().find(|(a, k, _)| *a == av && *k == kind).map(|(a, k, p)| api_resource(a, k, p))
}

/// The runtime-support profile: the CR's pinned version or the cluster
/// default from the runtime-support ConfigMap, else the built-in one.
pub async fn load_profile(client: &Client, pinned: Option<&str>) -> Result<RuntimeProfile, Error> {
    // An API error must not fall back to the built-in profile: that would
    // change every pod template and roll the fleet. It fails the reconcile,
    // which retries with backoff.
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    profile_from(cms.get_opt(PROFILE_CONFIGMAP).await?.and_then(|cm| cm.data).unwrap_or_default(), pinned)
}

/// The profile a workload gets from the runtime-support data (pure).
pub fn profile_from(
    data: std::collections::BTreeMap<String, String>,
    pinned: Option<&str>,
) -> Result<RuntimeProfile, Error> {
    let version = pinned.map(str::to_string).or_else(|| data.get("default").cloned());
    let key = version.as_ref().map(|v| format!("profile-{v}.json"));
    match key.as_ref().and_then(|k| data.get(k).map(|json| (k, json))) {
        Some((k, json)) => serde_json::from_str(json)
            .map_err(|e| Error::Other(format!("{SYSTEM_NAMESPACE}/{PROFILE_CONFIGMAP} {k}: {e}"))),
        None => Ok(RuntimeProfile::default_profile(version.as_deref().unwrap_or("builtin"))),
    }
}

async fn reconcile<K: Workload>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let start = std::time::Instant::now();
    let result = reconcile_inner(obj, ctx.clone()).await;
    ctx.observe(start.elapsed());
    result
}

async fn reconcile_inner<K: Workload>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let name = obj.name_any();
    let ns = obj.namespace().unwrap_or_else(|| "default".into());
    let generation = obj.meta().generation.unwrap_or(1);
    let client = &ctx.client;
    let pinned = obj.common().runtime.version.as_deref();
    // From the caches; what they don't hold (yet) is read from the API,
    // so an object created a moment ago is never taken for a missing one.
    let cached_cm =
        ctx.caches.get().and_then(|c| c.profiles.get(&ObjectRef::new(PROFILE_CONFIGMAP).within(SYSTEM_NAMESPACE)));
    let profile = match cached_cm {
        Some(cm) => profile_from(cm.data.clone().unwrap_or_default(), pinned),
        None => load_profile(client, pinned).await,
    };
    // A profile that does not load is the workload's problem to show in its
    // status (Reconciled=False with the reason), like a refused child.
    let (profile, profile_error) = match profile {
        Ok(p) => (p, None),
        Err(Error::Other(why)) => (RuntimeProfile::default_profile(pinned.unwrap_or("invalid")), Some(why)),
        Err(e) => return Err(e),
    };
    let cached_ns = ctx.caches.get().and_then(|c| c.namespaces.get(&ObjectRef::new(&ns)));
    let ns_labels = match cached_ns {
        Some(n) => n.metadata.labels.clone().unwrap_or_default(),
        None => Api::<Namespace>::all(client.clone())
            .get_opt(&ns)
            .await?
            .and_then(|n| n.metadata.labels)
            .unwrap_or_default(),
    };
    let rctx = render::Context { cluster: ctx.cluster.clone(), profile: profile.clone(), namespace_labels: ns_labels };
    let rendered = obj.render(&rctx);
    // The status as last written: both the prune decision and the status
    // write compare against it.
    let previous: Option<crate::workloads::WorkloadStatus> = serde_json::to_value(obj.as_ref())
        .ok()
        .and_then(|mut v| v.get_mut("status").map(Value::take))
        .filter(|v| !v.is_null())
        .and_then(|v| serde_json::from_value(v).ok());
    let mut live_children = Vec::new();
    let applied: Result<(), String> = match (&profile_error, &rendered) {
        (Some(why), _) => Err(why.clone()),
        (None, Err(e)) => Err(e.to_string()),
        (None, Ok(children)) => {
            let written: Result<(), kube::Error> = async {
                for child in children {
                    let Some(ar) = child_kind(child, K::CHILDREN) else { continue };
                    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
                    let child_name = child["metadata"]["name"].as_str().unwrap_or_default();
                    let (live, wrote) = crate::kube::apply::apply_if_changed(&api, child_name, child, MANAGER).await?;
                    if wrote {
                        ctx.writes.fetch_add(1, Ordering::Relaxed);
                    }
                    live_children.push(serde_json::to_value(&live).unwrap_or_default());
                }
                // Prune what this workload no longer renders. The set of children
                // changes only with the spec: when status says this generation was
                // already reconciled cleanly, there is nothing to prune (and no
                // need for a LIST per child kind on every resync).
                let selector = format!("pinfleet.dev/kind={},pinfleet.dev/name={name}", K::KIND.name());
                let done_before = previous.as_ref().is_some_and(|st| {
                    st.observed_generation == Some(generation)
                        && st.conditions.iter().any(|c| c.type_ == "Reconciled" && c.status == "True")
                });
                // A workload never reconciled (no status) at its first generation
                // has no children from an earlier spec: nothing to prune either.
                let first = previous.is_none() && generation <= 1;
                let prune_kinds: &[ChildKind] = if done_before || first { &[] } else { K::CHILDREN };
                for (av, kind, plural) in prune_kinds {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), &ns, &api_resource(av, kind, plural));
                    for o in api.list(&ListParams::default().labels(&selector)).await?.items {
                        let o_name = o.name_any();
                        let wanted =
                            children.iter().any(|c| c["kind"] == *kind && c["metadata"]["name"] == o_name.as_str());
                        let ours = o.owner_references().iter().any(|r| Some(&r.uid) == obj.meta().uid.as_ref());
                        if !wanted && ours {
                            ctx.writes.fetch_add(1, Ordering::Relaxed);
                            api.delete(&o_name, &DeleteParams::background()).await?;
                        }
                    }
                }
                Ok(())
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
        ctx.writes.fetch_add(1, Ordering::Relaxed);
        let api: Api<K> = Api::namespaced(client.clone(), &ns);
        // The whole status, typed, under the controller's field manager.
        let doc = json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "status": new_status,
        });
        api.patch_status(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(doc)).await?;
        let reference = obj.object_ref(&());
        for t in status::transitions(previous.as_ref(), &new_status) {
            let event = Event {
                type_: if t.warning { EventType::Warning } else { EventType::Normal },
                reason: t.reason,
                note: Some(t.note.chars().take(1000).collect()),
                action: "Reconcile".into(),
                secondary: None,
            };
            // Events are best effort: a cluster that refuses them still converges.
            if let Err(e) = ctx.recorder.publish(&event, &reference).await {
                tracing::debug!(object = name, "event not recorded: {e}");
            }
        }
    }
    ctx.attempts.lock().expect("attempts").remove(&format!("{}/{ns}/{name}", K::KIND.name()));
    match (applied, rendered) {
        // A spec the controller refuses waits for the next change.
        (Err(_), Err(_)) => Ok(Action::await_change()),
        (Err(e), _) => Err(Error::Other(e)),
        // Children are watched: their changes bring the next reconcile.
        _ => Ok(Action::requeue(RESYNC)),
    }
}

/// An answer that says the request itself is wrong: retrying the same
/// object cannot succeed until the workload or its profile changes.
fn refused(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 401 | 404 | 408 | 409 | 429)
}

fn error_policy<K: Workload>(obj: Arc<K>, err: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.errors.fetch_add(1, Ordering::Relaxed);
    let key = format!("{}/{}/{}", K::KIND.name(), obj.namespace().unwrap_or_default(), obj.name_any());
    let mut attempts = ctx.attempts.lock().expect("attempts");
    let n = attempts.entry(key.clone()).or_insert(0);
    *n += 1;
    let delay = Duration::from_millis(500 * 2u64.saturating_pow((*n).min(10))).min(BACKOFF_MAX);
    tracing::warn!(object = key, attempt = *n, "reconcile failed, retrying in {delay:?}: {err}");
    Action::requeue(delay)
}

async fn run_one<K: Workload>(ctx: Arc<Ctx>) {
    let client = ctx.client.clone();
    let mut controller = Controller::new(Api::<K>::all(client.clone()), watcher::Config::default());
    for (av, kind, plural) in K::CHILDREN {
        let ar = api_resource(av, kind, plural);
        let cfg = watcher::Config::default().labels(&format!("pinfleet.dev/kind={}", K::KIND.name()));
        controller = controller.owns_with(Api::<DynamicObject>::all_with(client.clone(), &ar), ar, cfg);
    }
    controller.run(reconcile::<K>, error_policy::<K>, ctx).for_each(|_| async {}).await;
}

/// Starts the watches behind the caches and waits until they are filled.
async fn start_caches(ctx: &Ctx) {
    use kube::runtime::{reflector, WatchStreamExt as _};
    let client = ctx.client.clone();
    let (profiles, pw) = reflector::store::<ConfigMap>();
    let (namespaces, nw) = reflector::store::<Namespace>();
    // Only the one ConfigMap: the controller's Role names it (resourceNames).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), SYSTEM_NAMESPACE);
    let cfg = watcher::Config::default().fields(&format!("metadata.name={PROFILE_CONFIGMAP}"));
    tokio::spawn(reflector(pw, watcher(cms, cfg)).default_backoff().for_each(|_| async {}));
    let nss: Api<Namespace> = Api::all(client);
    tokio::spawn(reflector(nw, watcher(nss, watcher::Config::default())).default_backoff().for_each(|_| async {}));
    let ready = async {
        let _ = futures::join!(profiles.wait_until_ready(), namespaces.wait_until_ready());
    };
    // If the watches can't start (RBAC, an old server), reconciles keep
    // reading with GETs.
    if tokio::time::timeout(Duration::from_secs(30), ready).await.is_ok() {
        let _ = ctx.caches.set(Caches { profiles, namespaces });
    } else {
        tracing::warn!("the runtime-support and Namespace watches did not start; reading them per reconcile");
    }
}

/// Runs the controllers for all six kinds until the process ends.
pub async fn run(ctx: Arc<Ctx>) {
    start_caches(&ctx).await;
    futures::join!(
        run_one::<PinterestService>(ctx.clone()),
        run_one::<PinterestJobSet>(ctx.clone()),
        run_one::<PinterestCronJob>(ctx.clone()),
        run_one::<PinterestDaemon>(ctx.clone()),
        run_one::<PinterestTrainingJob>(ctx.clone()),
        run_one::<PinterestStatefulSet>(ctx.clone()),
    );
}
