//! `pinfleet controller`: kube-runtime Controllers for the six workload
//! kinds. Each reconcile loads the runtime-support profile, renders the
//! CR ([`crate::workloads::render`]), applies every child with server-side
//! apply (field manager `pinfleet-controller`) — only when the live object
//! differs in a field pinfleet sets, so a no-op resync writes nothing and
//! hand edits are reverted — prunes children no longer rendered, and
//! writes status computed from the children ([`status`]) only when it
//! changed. Children carry owner references, so deletion cascades.
//! Failures back off exponentially per object.
//!
//! At scale: every child kind is watched (paged lists, managed fields
//! dropped, kept compact by [`child`]) into a cache the reconcile compares
//! against, so an unchanged child costs no request, and pruning reads the
//! children the caches hold per owner instead of listing; a watch event is a reason to reconcile only when
//! it changes what the workload renders from (not its status, which only
//! this controller writes), or a child in a way the workload reads (not a
//! PodDisruptionBudget's counts), and not when it is the controller's own
//! write. A standby replica keeps the same caches warm and reconciles
//! everything when it comes to lead. Each workload's change-to-children and
//! change-to-pods latency is a Prometheus histogram (the reconcile SLO).

pub mod child;
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
    /// Writes per namespace (what one team's, or one test's, workloads cost).
    writes_by_namespace: Mutex<HashMap<String, u64>>,
    reconciles_by_namespace: Mutex<HashMap<String, u64>>,
    pub reconciles: AtomicU64,
    pub errors: AtomicU64,
    /// Reconcile durations: counts per bucket of [`BUCKETS`], then the sum in µs.
    durations: Mutex<([u64; BUCKETS.len() + 1], u64)>,
    attempts: Mutex<HashMap<String, u32>>,
    /// Records condition changes as Kubernetes Events on the workload.
    /// Event recorders, an object's events always through the same one (its
    /// series counted there). Each recorder sweeps its whole cache of recent
    /// events on every publish: one for the fleet made each workload's
    /// event cost as much as the number of workloads.
    recorders: Vec<Recorder>,
    /// The runtime-support ConfigMap and the Namespaces, kept by watches
    /// once [`run`] starts (until then, reconciles read them with GETs).
    caches: std::sync::OnceLock<Caches>,
    /// The owned children, per kind ("apps/v1/Deployment"), as the child
    /// watches keep them (managed fields dropped): a reconcile compares
    /// against these instead of reading each child.
    children: std::sync::RwLock<HashMap<String, kube::runtime::reflector::Store<child::Child>>>,
    /// The resourceVersion of this controller's own last write per object
    /// ("Deployment/ns/name"): its watch event is not a reason to reconcile.
    own: Mutex<HashMap<String, String>>,
    /// What each workload's last meaningful change looked like (a hash).
    last_seen: Mutex<HashMap<String, u64>>,
    /// What each child last looked like (a hash of what its workload reads).
    child_hashes: Mutex<HashMap<String, u64>>,
    /// The children the watches hold per owner (its uid), as (kind, name):
    /// what a reconcile prunes from, with no LIST (a LIST by label scans
    /// every object of its kind in the namespace, on a real server too).
    owned: Mutex<HashMap<String, std::collections::BTreeSet<(String, String)>>>,
    /// Workloads whose change waits for its children (and pods): the
    /// generation and when the change was seen.
    pending: Mutex<HashMap<String, Pending>>,
    /// From a workload's change to its children written, and to its pods created.
    pub children_latency: Histogram,
    pub pods_latency: Histogram,
    /// Whether this replica acts. A standby keeps every watch and cache
    /// warm and reconciles nothing; when it comes to lead, every workload
    /// is reconciled at once from the caches (no change made meanwhile is
    /// lost, and unchanged ones cost no request).
    leading: tokio::sync::watch::Sender<bool>,
    /// The one namespace watched, if not all.
    namespace: std::sync::OnceLock<String>,
    /// Where the runtime-support profiles are read (default [`SYSTEM_NAMESPACE`]).
    profile_namespace: std::sync::OnceLock<String>,
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

/// Leadership held; dropped when it is lost.
pub struct LeadGuard(Arc<Ctx>);

impl Drop for LeadGuard {
    fn drop(&mut self) {
        self.0.leading.send_replace(false);
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    generation: i64,
    seen: std::time::Instant,
    children_written: bool,
}

/// A latency histogram (seconds) for the reconcile-latency SLO.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: Mutex<(Vec<u64>, f64, std::collections::VecDeque<f64>)>,
}

/// Latency buckets, in seconds: the SLO's bound (10 s) is one of them.
pub const LATENCY_BUCKETS: [f64; 12] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

impl Histogram {
    pub fn observe(&self, secs: f64) {
        let mut c = self.counts.lock().expect("histogram");
        if c.0.is_empty() {
            c.0 = vec![0; LATENCY_BUCKETS.len() + 1];
        }
        let i = LATENCY_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(LATENCY_BUCKETS.len());
        c.0[i] += 1;
        c.1 += secs;
        // Every observation is kept for the benchmark's quantiles (bounded:
        // the newest 100,000).
        if c.2.len() >= 100_000 {
            c.2.pop_front();
        }
        c.2.push_back(secs);
    }

    /// The q-quantile of the observations kept (None when there are none).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v: Vec<f64> = self.counts.lock().expect("histogram").2.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        Some(v[i])
    }

    /// The observations kept so far, removed (the benchmark's phases).
    pub fn take(&self) -> Vec<f64> {
        std::mem::take(&mut self.counts.lock().expect("histogram").2).into()
    }

    pub fn count(&self) -> u64 {
        self.counts.lock().expect("histogram").0.iter().sum()
    }

    /// Prometheus text exposition.
    fn expose(&self, out: &mut String, name: &str, help: &str) {
        let c = self.counts.lock().expect("histogram");
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        let mut cumulative = 0;
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += c.0.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{name}_bucket{{le=\"{b}\"}} {cumulative}\n"));
        }
        cumulative += c.0.get(LATENCY_BUCKETS.len()).copied().unwrap_or(0);
        out.push_str(&format!(
            "{name}_bucket{{le=\"+Inf\"}} {cumulative}\n{name}_sum {}\n{name}_count {cumulative}\n",
            c.1
        ));
    }
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
        self.children_latency.expose(
            &mut out,
            "pinfleet_workload_children_latency_seconds",
            "From a workload's change to its children written.",
        );
        self.pods_latency.expose(
            &mut out,
            "pinfleet_workload_pods_latency_seconds",
            "From a workload's change to its pods created.",
        );
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
            recorders: (0..RECORDERS)
                .map(|_| {
                    Recorder::new(
                        client.clone(),
                        Reporter { controller: MANAGER.into(), instance: std::env::var("POD_NAME").ok() },
                    )
                })
                .collect(),
            client,
            caches: std::sync::OnceLock::new(),
            children: Default::default(),
            own: Default::default(),
            last_seen: Default::default(),
            child_hashes: Default::default(),
            owned: Default::default(),
            writes_by_namespace: Default::default(),
            reconciles_by_namespace: Default::default(),
            pending: Default::default(),
            children_latency: Histogram::default(),
            pods_latency: Histogram::default(),
            leading: tokio::sync::watch::Sender::new(true),
            namespace: std::sync::OnceLock::new(),
            profile_namespace: std::sync::OnceLock::new(),
        })
    }

    /// Watches and reconciles one namespace only (`--namespace`): set
    /// before [`run`]. Without it, every namespace.
    pub fn only_in(self: &Arc<Self>, namespace: &str) -> Arc<Self> {
        let _ = self.namespace.set(namespace.to_string());
        self.clone()
    }

    /// Reads the runtime-support profiles from `namespace` instead of
    /// [`SYSTEM_NAMESPACE`] (set before [`run`]).
    pub fn profiles_in(self: &Arc<Self>, namespace: &str) -> Arc<Self> {
        let _ = self.profile_namespace.set(namespace.to_string());
        self.clone()
    }

    /// Where the runtime-support profiles are read.
    pub fn profile_namespace(&self) -> &str {
        self.profile_namespace.get().map(String::as_str).unwrap_or(SYSTEM_NAMESPACE)
    }

    /// A standby: it leads only once [`Ctx::lead`] says so.
    pub fn standby(self: &Arc<Self>) -> Arc<Self> {
        self.leading.send_replace(false);
        self.clone()
    }

    /// This replica leads until the returned guard is dropped (the elected
    /// task ends or is aborted when leadership is lost).
    pub fn lead(self: &Arc<Self>) -> LeadGuard {
        self.leading.send_replace(true);
        LeadGuard(self.clone())
    }

    pub fn is_leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// Notes that this controller is about to write an object: its watch
    /// event may arrive before the write's answer does.
    fn writing(&self, key: &str) {
        self.own.lock().expect("own").insert(key.to_string(), WRITING.to_string());
    }

    /// Notes this controller's own write of an object (None: it failed).
    fn wrote(&self, key: String, rv: Option<String>) {
        let mut own = self.own.lock().expect("own");
        match rv {
            Some(rv) => own.insert(key, rv),
            None => own.remove(&key),
        };
    }

    /// Whether a watch event is this controller's own last write (and no
    /// reason to reconcile). Each write is recognised once.
    fn is_own(&self, key: &str, rv: Option<&str>) -> bool {
        let mut own = self.own.lock().expect("own");
        match (own.get(key), rv) {
            // The answer is still on its way: this is the write's own event.
            (Some(w), _) if w == WRITING => true,
            (Some(w), Some(rv)) if w == rv => {
                own.remove(key);
                true
            }
            _ => false,
        }
    }

    /// Whether a workload's watch event changes what the controller renders
    /// from (its uid, generation, labels or annotations): its status, which
    /// only this controller writes, is no reason to reconcile.
    fn changed(&self, key: &str, meta: &kube::api::ObjectMeta) -> bool {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&meta.uid, meta.generation, &meta.labels, &meta.annotations).hash(&mut h);
        let h = h.finish();
        self.last_seen.lock().expect("last seen").insert(key.to_string(), h) != Some(h)
    }

    /// Whether a child's watch event changes anything the workload reads:
    /// its content, and its status only where the workload's status reads it
    /// (a PodDisruptionBudget's counts or a Service's load balancer do not).
    /// A first sighting (a cache's initial list, or a child new since) is
    /// told apart from a change to a child seen before.
    fn child_changed(&self, key: &str, o: &child::Child, status_read: bool) -> Sighting {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut meta = o.metadata.clone();
        meta.resource_version = None;
        meta.managed_fields = None;
        serde_json::to_string(&meta).unwrap_or_default().hash(&mut h);
        o.body().hash(&mut h);
        if status_read {
            o.status.as_ref().map(Value::to_string).hash(&mut h);
        }
        let h = h.finish();
        match self.child_hashes.lock().expect("child hashes").insert(key.to_string(), h) {
            None => Sighting::First,
            Some(before) if before != h => Sighting::Changed,
            Some(_) => Sighting::Same,
        }
    }

    /// The recorder for an object's events.
    fn recorder(&self, reference: &k8s_openapi::api::core::v1::ObjectReference) -> &Recorder {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&reference.namespace, &reference.name, &reference.kind).hash(&mut h);
        &self.recorders[h.finish() as usize % self.recorders.len()]
    }

    /// Counts one write for a workload in `ns`.
    fn wrote_in(&self, ns: &str) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        *self.writes_by_namespace.lock().expect("writes").entry(ns.to_string()).or_default() += 1;
    }

    /// The writes made for workloads in one namespace.
    pub fn writes_in(&self, ns: &str) -> u64 {
        self.writes_by_namespace.lock().expect("writes").get(ns).copied().unwrap_or(0)
    }

    /// The reconciles of workloads in one namespace.
    pub fn reconciles_in(&self, ns: &str) -> u64 {
        self.reconciles_by_namespace.lock().expect("reconciles").get(ns).copied().unwrap_or(0)
    }

    /// Notes a child as its watch shows it (`present`) or its deletion.
    fn index_child(&self, kind: &str, o: &child::Child, present: bool) {
        let Some(owner) = o.owner_references().iter().find(|r| r.controller == Some(true)) else { return };
        let kind = kind.to_string();
        let mut owned = self.owned.lock().expect("owned");
        if present {
            owned.entry(owner.uid.clone()).or_default().insert((kind, o.name_any()));
        } else if let Some(set) = owned.get_mut(&owner.uid) {
            set.remove(&(kind, o.name_any()));
            if set.is_empty() {
                owned.remove(&owner.uid);
            }
        }
    }

    /// The children the watches hold for an owner, as (kind, name).
    fn owned_by(&self, uid: &str) -> Vec<(String, String)> {
        self.owned.lock().expect("owned").get(uid).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    /// Drops what was noted of a deleted workload.
    fn forget(&self, key: &str) {
        self.last_seen.lock().expect("last seen").remove(key);
        self.pending.lock().expect("pending").remove(key);
    }

    /// A workload's change seen on the watch: its latency starts now.
    fn seen(&self, key: &str, generation: i64) {
        let mut p = self.pending.lock().expect("pending");
        match p.get(key) {
            Some(x) if x.generation >= generation => {}
            _ => {
                p.insert(
                    key.to_string(),
                    Pending { generation, seen: std::time::Instant::now(), children_written: false },
                );
            }
        }
    }

    /// The reconcile of `generation` wrote every child; `pods` whether the
    /// pods it wants exist. Observes the latencies once each.
    fn progressed(&self, key: &str, generation: i64, pods: bool) {
        let mut p = self.pending.lock().expect("pending");
        let Some(x) = p.get_mut(key).filter(|x| x.generation == generation) else { return };
        let took = x.seen.elapsed().as_secs_f64();
        if !x.children_written {
            x.children_written = true;
            self.children_latency.observe(took);
        }
        if pods {
            self.pods_latency.observe(took);
            p.remove(key);
        }
    }

    fn child_store(&self, kind: &str) -> Option<kube::runtime::reflector::Store<child::Child>> {
        self.children.read().expect("children").get(kind).cloned()
    }
}

/// The mark of a write whose answer has not come back yet.
const WRITING: &str = "(writing)";

fn obj_key(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
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

async fn reconcile<K: Workload>(obj: Arc<K>, ctx: Arc<Ctx>) -> Result<Action, Error> {
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

/// Page size for the controller's lists (a relist of 20,000 objects is
/// 40 requests, not one answer of hundreds of megabytes).
const PAGE: u32 = 500;

/// Event recorders a controller keeps (see `Ctx::recorders`).
const RECORDERS: usize = 64;

/// Reconciles at once per workload kind. Each holds its rendered children
/// while it waits on the API, so a backlog of thousands (a fresh start, a
/// new runtime profile) costs memory by this bound, not by its length;
/// above the client's in-flight budget, more would only wait in line.
const CONCURRENCY: u16 = 32;

/// Drops what a cache never reads: managed fields are often half an object.
fn slim<R: Resource>(o: &mut R) {
    o.meta_mut().managed_fields = None;
}

async fn run_one<K: Workload>(ctx: Arc<Ctx>) {
    use futures::TryStreamExt as _;
    use kube::runtime::{reflector, WatchStreamExt as _};
    let client = ctx.client.clone();
    let (reader, writer) = reflector::store::<K>();
    let c = ctx.clone();
    // The workloads: a change to what the controller renders from is a
    // reason to reconcile (not its status, which only the controller
    // writes); a new generation starts its latency clock.
    let scope = ctx.namespace.get().cloned();
    // What changed while this replica stood by and the leader has not
    // reported done: reconciled first when this replica comes to lead,
    // before everything else is (a change made as the leader died waits
    // for its own reconcile, not for every workload's).
    let waiting: Arc<Mutex<HashMap<String, ObjectRef<K>>>> = Default::default();
    let w = waiting.clone();
    let workloads: Api<K> = match &scope {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let main = watcher(workloads, watcher::Config::default().page_size(PAGE))
        .default_backoff()
        .modify(slim::<K>)
        .reflect(writer)
        .try_filter_map(move |ev| {
            let trigger = match ev {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    let key = obj_key(K::KIND.name(), &o.namespace().unwrap_or_default(), &o.name_any());
                    let changed = c.changed(&key, o.meta());
                    if changed {
                        c.seen(&key, o.meta().generation.unwrap_or(1));
                    }
                    if !c.is_leading() {
                        let done = o.observed() == Some(o.meta().generation.unwrap_or(1));
                        let mut w = w.lock().expect("waiting");
                        if done {
                            w.remove(&key);
                        } else if changed {
                            w.insert(key, ObjectRef::from_obj(&o));
                        }
                    }
                    changed.then_some(o)
                }
                // A workload gone: its children go by their owner
                // references; what the controller noted of it goes now.
                watcher::Event::Delete(o) => {
                    c.forget(&obj_key(K::KIND.name(), &o.namespace().unwrap_or_default(), &o.name_any()));
                    None
                }
                _ => None,
            };
            futures::future::ready(Ok(trigger))
        });
    let mut controller = Controller::for_stream(main, reader);
    for (av, kind, plural) in K::CHILDREN {
        let ar = api_resource(av, kind, plural);
        let kind_key = format!("{av}/{kind}");
        // Several workload kinds own the same child kinds (ConfigMaps …):
        // each watches its own, by the kind label.
        let cfg = watcher::Config::default().labels(&format!("pinfleet.dev/kind={}", K::KIND.name())).page_size(PAGE);
        let w = reflector::store::Writer::new(ar.clone());
        let store = w.as_reader();
        let c = ctx.clone();
        let key_kind = kind_key.clone();
        let status_read = status::reads_status(kind);
        let wait = waiting.clone();
        let api: Api<child::Child> = match &scope {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
            None => Api::all_with(client.clone(), &ar),
        };
        let stream =
            watcher(api, cfg).default_backoff().modify(slim::<child::Child>).reflect(w).try_filter_map(move |ev| {
                let trigger = match ev {
                    // A child gone is always a reason: it is made again.
                    watcher::Event::Delete(o) => {
                        let key = obj_key(&key_kind, &o.namespace().unwrap_or_default(), &o.name_any());
                        c.child_hashes.lock().expect("child hashes").remove(&key);
                        c.index_child(kind, &o, false);
                        Some(o)
                    }
                    watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                        c.index_child(kind, &o, true);
                        let key = obj_key(&key_kind, &o.namespace().unwrap_or_default(), &o.name_any());
                        let sighting = c.child_changed(&key, &o, status_read);
                        let changed = sighting != Sighting::Same;
                        let own = c.is_own(&key, o.meta().resource_version.as_deref());
                        // A child first seen (a standby's initial list) is
                        // no reason for its owner to go first: counted so,
                        // every owner whose children listed after it waited
                        // first, and at 20,000 services the change made as
                        // the leader died queued behind thousands.
                        if sighting == Sighting::Changed && !own && !c.is_leading() {
                            let ns = o.namespace().unwrap_or_default();
                            for r in o.owner_references().iter().filter(|r| r.kind == K::KIND.name()) {
                                wait.lock()
                                    .expect("waiting")
                                    .insert(obj_key(K::KIND.name(), &ns, &r.name), ObjectRef::new(&r.name).within(&ns));
                            }
                        }
                        (changed && !own).then_some(o)
                    }
                    _ => None,
                };
                futures::future::ready(Ok(trigger))
            });
        controller = controller.owns_stream_with(stream, ar);
        ctx.children.write().expect("children").insert(format!("{}/{}", K::KIND.name(), kind_key), store);
    }
    // Coming to lead reconciles what waits first, then every workload
    // (from the warm caches: unchanged ones cost no request).
    let (first_tx, first_rx) = futures::channel::mpsc::unbounded::<ObjectRef<K>>();
    let (all_tx, all_rx) = futures::channel::mpsc::unbounded::<()>();
    let c = ctx.clone();
    let mut leading = ctx.leading.subscribe();
    let takeover = tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            if !*leading.borrow_and_update() {
                continue;
            }
            let first: Vec<ObjectRef<K>> = waiting.lock().expect("waiting").drain().map(|(_, r)| r).collect();
            let (n, before) = (first.len() as u64, c.reconciles.load(Ordering::Relaxed));
            for r in first {
                let _ = first_tx.unbounded_send(r);
            }
            // Everything else once those are done (or after a while: the
            // count is shared by the kinds).
            let since = tokio::time::Instant::now();
            while c.reconciles.load(Ordering::Relaxed) < before + n && since.elapsed() < TAKEOVER_FIRST {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let _ = all_tx.unbounded_send(());
        }
    });
    let _stop_takeover = AbortOnDrop(takeover);
    controller
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .reconcile_on(first_rx)
        .reconcile_all_on(all_rx)
        .run(reconcile::<K>, error_policy::<K>, ctx)
        .for_each(|_| async {})
        .await;
}

/// What a child's watch event is, against what was seen of it before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sighting {
    First,
    Changed,
    Same,
}

/// How long a new leader lets what waited go first before reconciling
/// every workload.
const TAKEOVER_FIRST: Duration = Duration::from_secs(3);

/// Ends a task when dropped (the takeover watcher ends with its controller).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the watches behind the caches and waits until they are filled.
async fn start_caches(ctx: &Ctx) {
    use kube::runtime::{reflector, WatchStreamExt as _};
    let client = ctx.client.clone();
    let (profiles, pw) = reflector::store::<ConfigMap>();
    let (namespaces, nw) = reflector::store::<Namespace>();
    // Only the one ConfigMap: the controller's Role names it (resourceNames).
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ctx.profile_namespace());
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
