//! What the reconciles share ([`Ctx`]): the client, the caches the
//! watches fill, this controller's own writes (their events are no reason
//! to reconcile), what each workload and child last looked like, the
//! children each owner holds, leadership, and the counters and latencies
//! the metrics expose.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::child;
use super::metrics::{Histogram, BUCKETS};
use super::{MANAGER, SYSTEM_NAMESPACE};

/// Shared state and counters (exposed as metrics by the command).
pub struct Ctx {
    pub client: Client,
    pub cluster: String,
    pub writes: AtomicU64,
    /// Writes per namespace (what one team's, or one test's, workloads cost).
    writes_by_namespace: Mutex<HashMap<String, u64>>,
    pub(super) reconciles_by_namespace: Mutex<HashMap<String, u64>>,
    pub reconciles: AtomicU64,
    pub errors: AtomicU64,
    /// Reconcile durations: counts per bucket of [`BUCKETS`], then the sum in µs.
    durations: Mutex<([u64; BUCKETS.len() + 1], u64)>,
    pub(super) attempts: Mutex<HashMap<String, u32>>,
    /// Records condition changes as Kubernetes Events on the workload.
    /// Event recorders, an object's events always through the same one (its
    /// series counted there). Each recorder sweeps its whole cache of recent
    /// events on every publish: one for the fleet made each workload's
    /// event cost as much as the number of workloads.
    recorders: Vec<Recorder>,
    /// The runtime-support ConfigMap and the Namespaces, kept by watches
    /// once [`run`](super::run) starts (until then, reconciles read them with GETs).
    pub(super) caches: std::sync::OnceLock<Caches>,
    /// The owned children, per kind ("apps/v1/Deployment"), as the child
    /// watches keep them (managed fields dropped): a reconcile compares
    /// against these instead of reading each child.
    pub(super) children: std::sync::RwLock<HashMap<String, kube::runtime::reflector::Store<child::Child>>>,
    /// The resourceVersion of this controller's own last write per object
    /// ("Deployment/ns/name"): its watch event is not a reason to reconcile.
    own: Mutex<HashMap<String, String>>,
    /// What each workload's last meaningful change looked like (a hash).
    last_seen: Mutex<HashMap<String, u64>>,
    /// What each child last looked like (a hash of what its workload reads).
    pub(super) child_hashes: Mutex<HashMap<String, u64>>,
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
    pub(super) leading: tokio::sync::watch::Sender<bool>,
    /// The one namespace watched, if not all.
    pub(super) namespace: std::sync::OnceLock<String>,
    /// Where the runtime-support profiles are read (default [`SYSTEM_NAMESPACE`]).
    profile_namespace: std::sync::OnceLock<String>,
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

/// In-memory copies that spare every reconcile two GETs.
pub(super) struct Caches {
    pub(super) profiles: kube::runtime::reflector::Store<ConfigMap>,
    pub(super) namespaces: kube::runtime::reflector::Store<Namespace>,
}

impl Ctx {
    pub(super) fn observe(&self, took: Duration) {
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
    /// before [`run`](super::run). Without it, every namespace.
    pub fn only_in(self: &Arc<Self>, namespace: &str) -> Arc<Self> {
        let _ = self.namespace.set(namespace.to_string());
        self.clone()
    }

    /// Reads the runtime-support profiles from `namespace` instead of
    /// [`SYSTEM_NAMESPACE`] (set before [`run`](super::run)).
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
    pub(super) fn writing(&self, key: &str) {
        self.own.lock().expect("own").insert(key.to_string(), WRITING.to_string());
    }

    /// Notes this controller's own write of an object (None: it failed).
    pub(super) fn wrote(&self, key: String, rv: Option<String>) {
        let mut own = self.own.lock().expect("own");
        match rv {
            Some(rv) => own.insert(key, rv),
            None => own.remove(&key),
        };
    }

    /// Whether a watch event is this controller's own last write (and no
    /// reason to reconcile). Each write is recognised once.
    pub(super) fn is_own(&self, key: &str, rv: Option<&str>) -> bool {
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
    pub(super) fn changed(&self, key: &str, meta: &kube::api::ObjectMeta) -> bool {
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
    pub(super) fn child_changed(&self, key: &str, o: &child::Child, status_read: bool) -> Sighting {
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
    pub(super) fn recorder(&self, reference: &k8s_openapi::api::core::v1::ObjectReference) -> &Recorder {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&reference.namespace, &reference.name, &reference.kind).hash(&mut h);
        &self.recorders[h.finish() as usize % self.recorders.len()]
    }

    /// Counts one write for a workload in `ns`.
    pub(super) fn wrote_in(&self, ns: &str) {
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
    pub(super) fn index_child(&self, kind: &str, o: &child::Child, present: bool) {
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
    pub(super) fn owned_by(&self, uid: &str) -> Vec<(String, String)> {
        self.owned.lock().expect("owned").get(uid).map(|s| s.iter().cloned().collect()).unwrap_or_default()
    }

    /// Drops what was noted of a deleted workload.
    pub(super) fn forget(&self, key: &str) {
        self.last_seen.lock().expect("last seen").remove(key);
        self.pending.lock().expect("pending").remove(key);
    }

    /// A workload's change seen on the watch: its latency starts now.
    pub(super) fn seen(&self, key: &str, generation: i64) {
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
    pub(super) fn progressed(&self, key: &str, generation: i64, pods: bool) {
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

    pub(super) fn child_store(&self, kind: &str) -> Option<kube::runtime::reflector::Store<child::Child>> {
        self.children.read().expect("children").get(kind).cloned()
    }
}

/// The mark of a write whose answer has not come back yet.
const WRITING: &str = "(writing)";

pub(super) fn obj_key(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
}

/// Event recorders a controller keeps (see `Ctx::recorders`).
const RECORDERS: usize = 64;

/// What a child's watch event is, against what was seen of it before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sighting {
    First,
    Changed,
    Same,
}
