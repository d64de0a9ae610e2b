//! The gateway's service (effects): records on the host cluster, the
//! admission loop under a Lease, placement onto member clusters and the
//! roll-up of their status. The API's side (submit, views, cancel, the
//! records) is in the files named below; the leader's loop (admission
//! pass, placement, roll-up, usage sampling) is [`leader`].
//!
//! ```text
//! http ──► Service::submit ──► intake::check (pure) + dry run on a member
//!                │                 + admission::never, packing::never (pure)
//!                ▼
//!          Submission (host cluster, Queued: small) + SubmissionBody (the workload, once)
//!                │ leader only: admit_once
//!                ▼
//!          admission::decide (pure) ─► AdmissionLedger write (resourceVersion)
//!                │                      ─► Submission.status Admitted / Preempted
//!                ▼ place_once
//!          packing::pack + placement::place (pure) ─► the body read, its digest checked
//!                                      ─► server-side apply on members ─► Placed
//!                ▼ rollup_once
//!          members' workload status ─► Running / Succeeded / Failed
//!                ▼ admit_once, past the pods-ready timeout
//!          gang::judge (pure) over the gang's pods ─► evicted: released, Queued with a backoff
//! ```
//!
//! The ledger is written before any submission is told it was admitted,
//! and it is the truth a new leader starts from: a reservation whose
//! submission still says Queued is rolled forward, a release whose
//! submission still holds is finished. So a leader killed anywhere loses no
//! accepted submission and admits none twice or over quota.
//!
//! This file holds what every part names: the service, its settings and
//! start, and the small readings of a record (its phase, its times, a
//! pod's share of its demand). The API's side is in parts: a submission's
//! way in (`submit`: every layer, then the record), the images it names
//! (`images`: provenance, versions a delivery marked bad), the dry run on
//! the members (`dry_run`), what the API shows (`views`), the records on
//! the host (`host`: the CRDs, the ledger, statuses, team quotas), the
//! member clusters (`members`: what the gateway last saw of each, and the
//! write of a workload onto one) and a standby's views (`standby`: the
//! leader's decision over the same records, so every replica answers as
//! the leader would).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use tokio::sync::{Notify, RwLock};

use super::admission::Waiting;
use super::identity::Identity;
use super::intake::{self, Caller, Policy};
use super::metrics::Metrics;
use super::quota::Amount;
use super::records::{self, Phase, Submission, SubmissionSpec};

mod dry_run;
mod host;
mod images;
mod leader;
mod members;
mod standby;
mod submit;
mod views;

pub use host::{install, seed_quotas};
pub use members::{MemberCluster, MemberView};
pub use submit::Decision;
pub use views::{stages, summary, View};

// What the leader's loop (leader.rs) names besides, through `use super::*`.
use std::collections::HashMap;
use std::sync::atomic::Ordering;

use kube::api::{DeleteParams, ListParams, PostParams};
use serde_json::{json, Value};

use super::admission::{self, Pending};
use super::gang;
use super::packing;
use super::quota;
use super::records::MemberPart;
use crate::federation::placement::{self, Division, Member as PlacementMember, Policy as PlacementPolicy};
use host::publish_placement_decision;
use members::{workload_api, write_to_member};

pub const MANAGER: &str = "pinfleet-gateway";

/// Settings the gateway runs with.
#[derive(Clone)]
pub struct Config {
    /// The host cluster namespace that holds the records (and the Lease).
    pub namespace: String,
    pub identity: String,
    pub policy: Policy,
    pub interval: Duration,
    pub lease_duration: Duration,
    /// How stale a member may be before it is shown as such.
    pub member_refresh: Duration,
    /// The host client's request budget ([`crate::kube::budget`]).
    pub api: crate::kube::budget::Budget,
    /// The audit trail's file (None: standard error).
    pub audit_log: Option<std::path::PathBuf>,
}

/// The last admission pass, as readers see it: the leader's own, or on a
/// standby the same decision over the same records ([`standby`]).
#[derive(Default)]
struct QueueView {
    waiting: BTreeMap<String, Waiting>,
    computed: Option<Instant>,
    queued: usize,
}

pub struct Service {
    pub host: kube::Client,
    pub members: Vec<MemberCluster>,
    pub identity: Arc<Identity>,
    pub metrics: Metrics,
    pub config: Config,
    pub leading: Arc<AtomicBool>,
    /// Why this replica is not ready (its leader's pass panicked or
    /// overran its deadline): `/readyz` answers 503 with it.
    pub unready: std::sync::Mutex<Option<String>>,
    /// Per team: what its namespaces on the members run beyond what the
    /// ledger holds for it (measured by the leader, counted against it; a
    /// standby measures it alike for its views).
    drift: RwLock<BTreeMap<String, Amount>>,
    /// When the members were last measured for drift.
    drift_measured: std::sync::Mutex<Option<Instant>>,
    submissions: Store<Submission>,
    member_views: RwLock<Vec<MemberView>>,
    queue: RwLock<QueueView>,
    wake: Notify,
    /// Where every decision is written.
    pub audit_log: Arc<super::audit::AuditLog>,
    /// The registries images are resolved and verified against.
    pub registries: crate::registry::Registries,
    /// Where deliveries mark versions bad (`--delivery-store`): their
    /// images are refused. Set once, before serving.
    pub delivery_line: std::sync::OnceLock<crate::delivery::book::Line>,
    /// The versions marked bad as last read, and when.
    bad_versions: tokio::sync::Mutex<(Option<Instant>, BTreeMap<String, crate::delivery::book::Bad>)>,
    /// The last hour whose expired use records were dropped.
    usage_pruned: std::sync::Mutex<Option<DateTime<Utc>>>,
    /// Per team, the records this replica is writing or wrote that its
    /// cache has not shown yet (and since when): counted against the
    /// team's open submissions, so a flood cannot pass the cap in the
    /// cache's lag.
    opening: std::sync::Mutex<BTreeMap<String, BTreeMap<String, (Instant, u64, String)>>>,
    /// The submissions watch: ends with the service.
    watch: tokio::task::JoinHandle<()>,
    /// Bumped whenever what readers see may have changed (a submission
    /// event, an admission pass).
    changes: tokio::sync::watch::Sender<u64>,
    /// The same, per team: the console tells each viewer only of changes
    /// to what they may see.
    team_changes: tokio::sync::watch::Sender<BTreeMap<String, u64>>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl Service {
    /// Connects the caches (a watch of every Submission: followers answer
    /// reads and take over warm) and returns the service.
    pub async fn start(
        host: kube::Client,
        members: Vec<MemberCluster>,
        identity: Arc<Identity>,
        config: Config,
    ) -> Result<Arc<Service>> {
        let audit_log = Arc::new(super::audit::AuditLog::open(config.audit_log.as_deref())?);
        let host = crate::kube::budget::wrap(host, config.api);
        let (reader, writer) = reflector::store();
        let stream = reflector::reflector(
            writer,
            // The cache keeps what the gateway reads: the records' managed
            // fields (a list of every writer's field set) are dropped.
            watcher(subs(&host, &config.namespace), watcher::Config::default().page_size(500))
                .modify(|s| s.metadata.managed_fields = None),
        )
        // Backs off while the host cannot be reached: an error retried at
        // once never yields, and would hold a core and the runtime's
        // shutdown with it.
        .default_backoff()
        .applied_objects();
        let (changes, _) = tokio::sync::watch::channel(0u64);
        let (team_changes, _) = tokio::sync::watch::channel(BTreeMap::<String, u64>::new());
        let tx = changes.clone();
        let ttx = team_changes.clone();
        let watch = tokio::spawn(async move {
            use futures::StreamExt;
            let mut s = std::pin::pin!(stream);
            while let Some(ev) = s.next().await {
                match ev {
                    Ok(sub) => {
                        tx.send_modify(|n| *n = n.wrapping_add(1));
                        ttx.send_modify(|m| {
                            let n = m.entry(sub.spec.team.clone()).or_default();
                            *n = n.wrapping_add(1);
                        });
                    }
                    Err(e) => tracing::debug!("submission watch: {e}"),
                }
            }
        });
        let registries_of = |p: &Policy| {
            let hosts: Vec<String> = p.allowed_registries.iter().map(|r| intake::image_registry(r)).collect();
            // A registry on loopback speaks plain HTTP (a test's, a local mirror's).
            let plain = hosts.iter().filter(|h| h.starts_with("127.0.0.1:") || h.starts_with("localhost:")).cloned();
            crate::registry::Registries::new(hosts.clone(), plain.collect())
        };
        let registries = registries_of(&config.policy);
        let svc = Arc::new(Service {
            host,
            members,
            identity,
            metrics: Metrics::default(),
            config,
            leading: Arc::new(AtomicBool::new(false)),
            unready: std::sync::Mutex::new(None),
            drift: RwLock::new(BTreeMap::new()),
            drift_measured: std::sync::Mutex::new(None),
            submissions: reader,
            member_views: RwLock::new(Vec::new()),
            queue: RwLock::new(QueueView::default()),
            wake: Notify::new(),
            registries,
            delivery_line: std::sync::OnceLock::new(),
            bad_versions: tokio::sync::Mutex::new((None, BTreeMap::new())),
            audit_log,
            usage_pruned: std::sync::Mutex::new(None),
            opening: std::sync::Mutex::new(BTreeMap::new()),
            watch,
            changes,
            team_changes,
        });
        tokio::time::timeout(Duration::from_secs(30), svc.submissions.wait_until_ready())
            .await
            .context("the submissions cache did not fill within 30 s")??;
        svc.refresh_members().await;
        Ok(svc)
    }

    /// Every decision: who, what (the workload and its artifact), when, the answer.
    /// Writes one decision to the audit trail ([`super::audit`]).
    pub async fn audit(&self, caller: &Caller, verb: &str, what: &str, artifact: &str, answer: u16, reason: &str) {
        self.audit_log.write(&super::audit::Entry::new(Some(caller), verb, what, answer, reason).artifact(artifact));
    }

    /// Follows changes readers may see (submissions, the queue).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Follows changes per team (each team's submissions and queue positions).
    pub fn subscribe_teams(&self) -> tokio::sync::watch::Receiver<BTreeMap<String, u64>> {
        self.team_changes.subscribe()
    }

    pub fn all(&self) -> Vec<Arc<Submission>> {
        self.submissions.state()
    }
}

/// How long a team's use over time is kept on the host.
pub const USAGE_KEPT: chrono::TimeDelta = chrono::TimeDelta::hours(24);

fn subs(host: &kube::Client, ns: &str) -> Api<Submission> {
    Api::namespaced(host.clone(), ns)
}

fn phase(s: &Submission) -> Phase {
    s.status.as_ref().map(|st| st.phase).unwrap_or_default()
}

fn ts(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32).unwrap_or_else(Utc::now)
}

/// A record's expected run time as a duration: one too long to hold (a
/// record written before intake bounded it) is the longest there is.
fn expected(seconds: i64) -> chrono::Duration {
    chrono::Duration::try_seconds(seconds).unwrap_or(chrono::Duration::MAX)
}

fn per_pod(spec: &SubmissionSpec) -> Amount {
    let n = spec.demand.pods.max(1);
    let mut a = Amount::new(
        spec.demand.cpu.checked_div(n).unwrap_or_default(),
        spec.demand.memory.checked_div(n).unwrap_or_default(),
        1,
    );
    for r in super::quota::FLAVORS {
        a.set(r, spec.demand.get(r).div_ceil(n));
    }
    a
}

/// A record's pods by shape, for packing onto nodes: as submitted, or
/// (a record written before shapes were kept) every pod the average.
fn shapes(spec: &SubmissionSpec) -> Vec<super::packing::Shape> {
    if spec.shapes.is_empty() {
        return vec![super::packing::Shape { pods: spec.demand.pods, per_pod: per_pod(spec) }];
    }
    spec.shapes.iter().map(|s| super::packing::Shape { pods: s.pods, per_pod: s.per_pod }).collect()
}

/// The team of a submission's record name (`<team>-<id digest>`), as
/// [`records::submission_name`] makes it.
fn team_of_record(name: &str) -> String {
    records::team_of(name)
}

/// A delete of what is already gone is done.
fn not_found_ok(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(ae) if ae.code == 404 => Ok(()),
        e => Err(e),
    }
}
