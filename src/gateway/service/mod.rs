//! The gateway's service (effects): records on the host cluster, the
//! admission loop under a Lease, placement onto member clusters and the
//! roll-up of their status. This file is the API's side (submit, views,
//! cancel, the records); the leader's loop (admission pass, placement,
//! roll-up, usage sampling) is [`leader`].
//!
//! ```text
//! http ──► Service::submit ──► intake::check (pure) + dry run on a member
//!                │                 + admission::never (pure)
//!                ▼
//!          Submission (host cluster, Queued)
//!                │ leader only: admit_once
//!                ▼
//!          admission::decide (pure) ─► AdmissionLedger write (resourceVersion)
//!                │                      ─► Submission.status Admitted / Preempted
//!                ▼ place_once
//!          placement::place (pure) ─► server-side apply on members ─► Placed
//!                ▼ rollup_once
//!          members' workload status ─► Running / Succeeded / Failed
//! ```
//!
//! The ledger is written before any submission is told it was admitted,
//! and it is the truth a new leader starts from: a reservation whose
//! submission still says Queued is rolled forward, a release whose
//! submission still holds is finished. So a leader killed anywhere loses no
//! accepted submission and admits none twice or over quota.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::sync::{Notify, RwLock};

use super::admission::{self, Pending, Waiting, World};
use super::identity::Identity;
use super::intake::{self, Caller, Policy, Problem};
use super::metrics::Metrics;
use super::quota::{self, Amount, Ledger};
use super::records::{
    self, AdmissionLedger, AdmissionLedgerSpec, MemberPart, Phase, Submission, SubmissionSpec, SubmissionStatus,
    TeamQuota,
};
use crate::federation::placement::{self, Division, Member as PlacementMember, Policy as PlacementPolicy};

mod leader;

pub const MANAGER: &str = "pinfleet-gateway";

/// A member cluster the gateway places work on.
#[derive(Clone)]
pub struct MemberCluster {
    pub name: String,
    pub client: kube::Client,
    pub labels: BTreeMap<String, String>,
    pub weight: u32,
}

/// What the gateway last saw of a member.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    pub name: String,
    pub reachable: bool,
    pub allocatable: Amount,
    /// When it was last reached.
    pub seen: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The member's Kubernetes minor (`36`), as its API server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// Its runtime-support ConfigMap data: the profiles its controller renders with.
    #[serde(skip)]
    pub profiles: Option<BTreeMap<String, String>>,
    /// Its RuntimeClasses' pod overheads (None: not listed).
    #[serde(skip)]
    pub overheads: Option<BTreeMap<String, crate::workloads::demand::Requests>>,
}

/// What a member's API server says of itself beyond its nodes: its minor,
/// its runtime-support profiles and its RuntimeClasses' overheads. Each
/// part that cannot be read is left unknown (the gateway then counts with
/// the built-in profile and checks as the default minor).
async fn describe_member(
    client: &kube::Client,
) -> (Option<u32>, Option<BTreeMap<String, String>>, Option<BTreeMap<String, crate::workloads::demand::Requests>>) {
    let minor = client.apiserver_version().await.ok().and_then(|v| v.minor.trim_end_matches('+').parse::<u32>().ok());
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), crate::controller::SYSTEM_NAMESPACE);
    let profiles = match cms.get_opt(crate::controller::PROFILE_CONFIGMAP).await {
        Ok(cm) => Some(cm.and_then(|c| c.data).unwrap_or_default()),
        Err(_) => None,
    };
    let classes: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(client.clone());
    let overheads = match classes.list(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter_map(|rc| {
                    let name = rc.metadata.name?;
                    let fixed = rc.overhead.and_then(|o| o.pod_fixed).unwrap_or_default();
                    let q = |k: &str| fixed.get(k).map(|q| Value::String(q.0.clone()));
                    let cpu = q("cpu").map(|v| crate::kube::quantity::cpu_millis(&v).unwrap_or(0)).unwrap_or(0);
                    let memory = q("memory").map(|v| crate::kube::quantity::bytes(&v).unwrap_or(0)).unwrap_or(0);
                    Some((name, crate::workloads::demand::Requests { cpu, memory }))
                })
                .collect(),
        ),
        Err(_) => None,
    };
    (minor, profiles, overheads)
}

/// The answer to a submission.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub id: String,
    pub name: String,
    pub team: String,
    pub dry_run: bool,
    /// accepted (queued), admitted, rejected; for a retry, the first answer's.
    pub outcome: String,
    pub phase: Phase,
    pub demand: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// What admission would do now (dry run) or did: admitted, or why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// A retry of an earlier submission with the same id.
    pub retry: bool,
}

/// One submission as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub name: String,
    #[serde(flatten)]
    pub summary: crate::views::workload::Summary,
    pub submitted_by: String,
    /// Each image's provenance verdict, where the team has a trust policy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<crate::provenance::Verdict>,
    pub status: SubmissionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// Seconds per stage: admitted, placed, pods_created (from the previous stage).
    pub latency: BTreeMap<String, f64>,
    pub created: Option<DateTime<Utc>>,
}

/// RuntimeClasses' overheads: known only when every reachable member
/// listed them (a class on one member but not another is refused on that
/// one); each the largest of the members'.
fn common_overheads(reachable: &[&MemberView]) -> Option<BTreeMap<String, crate::workloads::demand::Requests>> {
    if !reachable.is_empty() && reachable.iter().all(|v| v.overheads.is_some()) {
        let mut all: Option<BTreeMap<String, crate::workloads::demand::Requests>> = None;
        for v in reachable {
            let o = v.overheads.clone().unwrap_or_default();
            all = Some(match all {
                None => o,
                Some(a) => a
                    .into_iter()
                    .filter_map(|(k, r)| {
                        o.get(&k).map(|s| {
                            (
                                k,
                                crate::workloads::demand::Requests {
                                    cpu: r.cpu.max(s.cpu),
                                    memory: r.memory.max(s.memory),
                                },
                            )
                        })
                    })
                    .collect(),
            });
        }
        all
    } else {
        None
    }
}

/// What a submission is, as the API and the console name it.
pub fn summary(s: &Submission) -> crate::views::workload::Summary {
    crate::views::workload::Summary {
        team: s.spec.team.clone(),
        id: s.spec.id.clone(),
        kind: s.spec.workload.get("kind").and_then(Value::as_str).unwrap_or_default().to_string(),
        workload: s.spec.workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string(),
        tier: quota::tier_name(s.spec.tier).to_string(),
        priority: s.spec.priority,
        artifact: s.spec.artifact.clone(),
        demand: s.spec.demand.show(),
    }
}

/// A submission's stages, each with when the stage before it was reached
/// and when it was: accepted, admitted, placed, pods_created, finished.
pub fn stages(st: &SubmissionStatus) -> [(&'static str, Option<DateTime<Utc>>, Option<DateTime<Utc>>); 5] {
    [
        ("accepted", None, st.accepted_at),
        ("admitted", st.accepted_at, st.admitted_at),
        ("placed", st.admitted_at, st.placed_at),
        ("pods_created", st.placed_at, st.pods_created_at),
        ("finished", st.pods_created_at.or(st.placed_at), st.finished_at),
    ]
}

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

/// The last admission pass, as readers see it.
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
    /// ledger holds for it (measured by the leader; counted against it).
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

fn subs(host: &kube::Client, ns: &str) -> Api<Submission> {
    Api::namespaced(host.clone(), ns)
}

fn workload_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(crate::workloads::GROUP, crate::workloads::VERSION, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(client.clone(), ns, &ar)
}

fn phase(s: &Submission) -> Phase {
    s.status.as_ref().map(|st| st.phase).unwrap_or_default()
}

/// Installs the gateway's CRDs and namespace on the host cluster (server-side apply).
pub async fn install(host: &kube::Client, namespace: &str) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    let pp = PatchParams::apply(MANAGER).force();
    for crd in records::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &pp, &Patch::Apply(&crd)).await.with_context(|| format!("installing CRD {name}"))?;
    }
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(host.clone());
    nss.patch(
        namespace,
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})),
    )
    .await
    .context("creating the gateway's namespace")?;
    // Established before anyone lists them.
    for _ in 0..50 {
        if subs(host, namespace).list(&ListParams::default().limit(1)).await.is_ok()
            && Api::<TeamQuota>::namespaced(host.clone(), namespace).list(&ListParams::default().limit(1)).await.is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("the gateway's CRDs were not served by the host cluster within 5 s")
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
            watcher(subs(&host, &config.namespace), watcher::Config::default().page_size(500)),
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

    /// Reads every member's allocatable (Ready nodes); a member that cannot
    /// be reached keeps its last figures and is marked.
    pub async fn refresh_members(&self) {
        let mut out = Vec::new();
        let before = self.member_views.read().await.clone();
        for m in &self.members {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(m.client.clone());
            let last = before.iter().find(|v| v.name == m.name).cloned();
            match tokio::time::timeout(Duration::from_secs(5), nodes.list(&ListParams::default())).await {
                Ok(Ok(list)) => {
                    let mut a = Amount::default();
                    for n in list.items {
                        let ready = n
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                        let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
                        if !ready || unschedulable {
                            continue;
                        }
                        let al = n.status.and_then(|s| s.allocatable).unwrap_or_default();
                        let q = |k: &str| al.get(k).map(|q| q.0.clone()).unwrap_or_default();
                        a = a.plus(Amount::new(
                            crate::federation::fanout::cpu_millis(&q("cpu")).unwrap_or(0),
                            crate::federation::fanout::mem_bytes(&q("memory")).unwrap_or(0),
                            q("pods").parse().unwrap_or(0),
                        ));
                    }
                    let (minor, profiles, overheads) =
                        match tokio::time::timeout(Duration::from_secs(5), describe_member(&m.client)).await {
                            Ok(d) => d,
                            Err(_) => (None, None, None),
                        };
                    out.push(MemberView {
                        name: m.name.clone(),
                        reachable: true,
                        allocatable: a,
                        seen: Some(Utc::now()),
                        error: None,
                        minor: minor.or(last.as_ref().and_then(|l| l.minor)),
                        profiles: profiles.or(last.as_ref().and_then(|l| l.profiles.clone())),
                        overheads: overheads.or(last.as_ref().and_then(|l| l.overheads.clone())),
                    });
                }
                Ok(Err(e)) => out.push(MemberView {
                    name: m.name.clone(),
                    reachable: false,
                    allocatable: last.as_ref().map(|l| l.allocatable).unwrap_or_default(),
                    seen: last.as_ref().and_then(|l| l.seen),
                    error: Some(e.to_string()),
                    minor: last.as_ref().and_then(|l| l.minor),
                    profiles: last.as_ref().and_then(|l| l.profiles.clone()),
                    overheads: last.and_then(|l| l.overheads),
                }),
                Err(_) => out.push(MemberView {
                    name: m.name.clone(),
                    reachable: false,
                    allocatable: last.as_ref().map(|l| l.allocatable).unwrap_or_default(),
                    seen: last.as_ref().and_then(|l| l.seen),
                    error: Some("no answer within 5 s".into()),
                    minor: last.as_ref().and_then(|l| l.minor),
                    profiles: last.as_ref().and_then(|l| l.profiles.clone()),
                    overheads: last.and_then(|l| l.overheads),
                }),
            }
        }
        *self.member_views.write().await = out;
    }

    pub async fn member_views(&self) -> Vec<MemberView> {
        self.member_views.read().await.clone()
    }

    /// The fleet's capacity: every member's allocatable, reachable or last seen.
    pub async fn fleet(&self) -> Amount {
        self.member_views.read().await.iter().fold(Amount::default(), |a, m| a.plus(m.allocatable))
    }

    /// Every team's quota against the fleet (a record that does not resolve is skipped and said).
    pub async fn world(&self) -> Result<(World, BTreeMap<String, Vec<String>>)> {
        let fleet = self.fleet().await;
        let list = Api::<TeamQuota>::namespaced(self.host.clone(), &self.config.namespace)
            .list(&ListParams::default())
            .await
            .context("listing team quotas")?;
        let mut quotas = BTreeMap::new();
        let mut broken = BTreeMap::new();
        for tq in list.items {
            let team = tq.metadata.name.clone().unwrap_or_default();
            let s = &tq.spec;
            match quota::resolve(&team, s.cohort.as_deref(), &s.tiers, s.max_workloads, s.pods_per_minute, &fleet) {
                Ok(q) => {
                    quotas.insert(team, q);
                }
                Err(e) => {
                    broken.insert(team, e);
                }
            }
        }
        Ok((World::new(quotas, fleet), broken))
    }

    async fn read_ledger(&self) -> Result<(Ledger, Option<String>)> {
        let api: Api<AdmissionLedger> = Api::namespaced(self.host.clone(), &self.config.namespace);
        match api.get_opt(records::LEDGER).await.context("reading the admission ledger")? {
            None => Ok((Ledger::default(), None)),
            Some(l) => {
                let ledger: Ledger =
                    serde_json::from_value(l.spec.ledger.clone()).context("the admission ledger does not parse")?;
                Ok((ledger, l.metadata.resource_version.clone()))
            }
        }
    }

    /// Writes the ledger if nobody else did since `rv`: false when another writer won.
    async fn write_ledger(&self, ledger: &Ledger, rv: Option<String>) -> Result<bool> {
        let api: Api<AdmissionLedger> = Api::namespaced(self.host.clone(), &self.config.namespace);
        let mut obj =
            AdmissionLedger::new(records::LEDGER, AdmissionLedgerSpec { ledger: serde_json::to_value(ledger)? });
        obj.metadata.namespace = Some(self.config.namespace.clone());
        let r = match rv {
            None => api.create(&PostParams::default(), &obj).await.map(|_| ()),
            Some(rv) => {
                obj.metadata.resource_version = Some(rv);
                api.replace(records::LEDGER, &PostParams::default(), &obj).await.map(|_| ())
            }
        };
        match r {
            Ok(()) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e).context("writing the admission ledger"),
        }
    }

    async fn set_status(&self, name: &str, f: impl FnOnce(&mut SubmissionStatus)) -> Result<()> {
        let cur = match self.submissions.get(&reflector::ObjectRef::new(name).within(&self.config.namespace)) {
            Some(s) => s.status.clone().unwrap_or_default(),
            None => subs(&self.host, &self.config.namespace).get(name).await?.status.unwrap_or_default(),
        };
        let mut st = cur.clone();
        f(&mut st);
        if st == cur {
            return Ok(());
        }
        subs(&self.host, &self.config.namespace)
            .patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": st})))
            .await
            .with_context(|| format!("writing {name}'s status"))?;
        Ok(())
    }

    fn pending_of(s: &Submission) -> Pending {
        Pending {
            name: s.metadata.name.clone().unwrap_or_default(),
            team: s.spec.team.clone(),
            tier: s.spec.tier,
            priority: s.spec.priority,
            created: s.metadata.creation_timestamp.as_ref().map(ts).unwrap_or_else(Utc::now),
            demand: s.spec.demand,
            expected_duration: s.spec.expected_seconds.map(expected),
        }
    }

    /// Checks a submission through every layer and, unless a dry run,
    /// records it. A retried id returns the first answer.
    pub async fn submit(
        &self,
        caller: &Caller,
        id: &str,
        workload: &Value,
        priority_class: Option<&str>,
        dry_run: bool,
    ) -> Result<(u16, Decision)> {
        let started = Instant::now();
        let bad = |problems: Vec<Problem>, team: &str, name: String| Decision {
            id: id.to_string(),
            name,
            team: team.to_string(),
            dry_run,
            outcome: "rejected".into(),
            phase: Phase::Queued,
            demand: String::new(),
            problems,
            waiting: None,
            retry: false,
        };
        if let Err(p) = intake::check_id(id) {
            let team = workload.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default();
            self.audit(caller, "submit", team, "", 422, &p.message).await;
            return Ok((422, bad(vec![p], team, String::new())));
        }
        let views = self.member_views().await;
        let reachable: Vec<&MemberView> = views.iter().filter(|v| v.reachable).collect();
        let profiles: Vec<BTreeMap<String, String>> = reachable.iter().filter_map(|v| v.profiles.clone()).collect();
        let minors: Vec<u32> = reachable.iter().filter_map(|v| v.minor).collect();
        let overheads = common_overheads(&reachable);
        let members = intake::Members { profiles: &profiles, minors: &minors, overheads: overheads.as_ref() };
        let intake = match intake::check(workload, caller, &self.config.policy, &members) {
            Ok(i) => i,
            Err(p) => {
                let team = workload.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default();
                self.audit(caller, "submit", &format!("{team}/{id}"), "", 422, &problems_text(&p)).await;
                return Ok((422, bad(p, team, String::new())));
            }
        };
        let class = match self.config.policy.class(priority_class, &intake.team, intake.tier, caller) {
            Ok(c) => c,
            Err(p) => {
                self.audit(caller, "submit", &format!("{}/{id}", intake.team), &intake.artifact, 422, &p.message).await;
                return Ok((422, bad(vec![p], &intake.team, String::new())));
            }
        };
        let priority = class.value;
        let mut intake = intake;
        let verdicts = match self.provenance(caller, id, &mut intake).await {
            Ok(v) => v,
            Err(p) => {
                self.audit(
                    caller,
                    "submit",
                    &format!("{}/{id}", intake.team),
                    &intake.artifact,
                    422,
                    &problems_text(&p),
                )
                .await;
                return Ok((422, bad(p, &intake.team, String::new())));
            }
        };
        if let Err((code, p)) = self.not_marked_bad(&intake).await {
            self.audit(caller, "submit", &format!("{}/{id}", intake.team), &intake.artifact, code, &problems_text(&p))
                .await;
            return Ok((code, bad(p, &intake.team, String::new())));
        }
        let name = records::submission_name(&intake.team, id);
        let digest = records::digest(&intake.workload);
        // A retry: the record the first attempt made answers.
        if let Some(existing) = subs(&self.host, &self.config.namespace).get_opt(&name).await? {
            if existing.spec.digest != digest {
                let p = Problem::new(
                    "request",
                    "id",
                    format!("id {id:?} was used for another workload of team {}: choose a new id", intake.team),
                );
                return Ok((409, bad(vec![p], &intake.team, name)));
            }
            let mut d = self.decision_of(&existing, dry_run).await;
            d.retry = true;
            return Ok((200, d));
        }
        let mut problems = Vec::new();
        // Layer 3: a server-side dry run where it could land.
        problems.extend(self.dry_run(&intake.workload, &views).await);
        // Layer 4: can the fleet (and the team's quota) ever hold it.
        let (world, broken) = self.world().await?;
        if let Some(errs) = broken.get(&intake.team) {
            problems.push(Problem::new(
                "capacity",
                "",
                format!("team {}'s quota does not resolve: {}", intake.team, errs.join("; ")),
            ));
        } else if let Some(why) = admission::never(&world, &intake.team, intake.tier, &intake.demand) {
            problems.push(Problem::new("capacity", "", why));
        }
        if !problems.is_empty() {
            self.audit(caller, "submit", &name, &intake.artifact, 422, &problems_text(&problems)).await;
            return Ok((422, bad(problems, &intake.team, name)));
        }
        let spec = SubmissionSpec {
            id: id.to_string(),
            team: intake.team.clone(),
            tier: intake.tier,
            priority,
            priority_class: Some(class.name.clone()),
            submitted_by: caller.user.clone(),
            authenticated_by: caller.via.clone(),
            workload: intake.workload.clone(),
            artifact: intake.artifact.clone(),
            demand: intake.demand,
            expected_seconds: intake.expected_seconds,
            digest,
            cancel: false,
            provenance: verdicts,
        };
        if dry_run {
            return Ok((200, self.would(&world, id, name, spec).await?));
        }
        let open = self.all().iter().filter(|s| s.spec.team == intake.team && !phase(s).done()).count();
        if open >= records::MAX_OPEN_PER_TEAM {
            let why = format!(
                "team {} has {open} submissions not finished (at most {}): wait for some to finish, or cancel some",
                intake.team,
                records::MAX_OPEN_PER_TEAM
            );
            self.audit(caller, "submit", &name, &intake.artifact, 429, &why).await;
            return Ok((429, bad(vec![Problem::new("request", "", why)], &intake.team, name)));
        }
        self.record(caller, name, spec, &intake.artifact, started).await
    }

    /// Provenance, where the team has a trust policy: every image resolved
    /// to its digest and verified (cached by digest); trusted images are
    /// pinned in the workload (what the members run), an untrusted one is
    /// refused at its field (enforce) or admitted and audited (warn).
    async fn provenance(
        &self,
        caller: &Caller,
        id: &str,
        intake: &mut intake::Intake,
    ) -> Result<Vec<crate::provenance::Verdict>, Vec<Problem>> {
        let Some(policy) = self.config.policy.trust.get(&intake.team) else { return Ok(Vec::new()) };
        let mut verdicts = Vec::new();
        let mut pinned = BTreeMap::new();
        let mut problems = Vec::new();
        for (at, image) in intake::image_fields(&intake.kind, &intake.workload) {
            if pinned.contains_key(&image) {
                continue;
            }
            let checked = self.registries.check(&image, policy).await;
            match (&checked.verdict.refused, checked.verdict.admits(policy.mode)) {
                (Some(why), false) => problems.push(Problem::new("provenance", at, why.clone())),
                (Some(why), true) => {
                    let what = format!("{}/{id}", intake.team);
                    self.audit(caller, "provenance", &what, &image, 200, &format!("admitted in warn mode: {why}"))
                        .await;
                }
                (None, _) => {}
            }
            if let (Some(p), true) = (&checked.pinned, checked.verdict.admits(policy.mode)) {
                pinned.insert(image.clone(), p.clone());
            }
            verdicts.push(checked.verdict);
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        intake::pin_images(&mut intake.workload, &pinned);
        if let Some(p) = pinned.get(&intake.artifact) {
            intake.artifact = p.clone();
        }
        Ok(verdicts)
    }

    /// Refuses images a delivery marked bad (by digest: a pinned image, or
    /// one submitted by digest), each at its field ([`intake::marked_bad`]:
    /// the delivery and its reason named only to its own team). The list
    /// is read at most every 5 s; when it cannot be read, the last list
    /// read answers, and with none a 503 says why.
    async fn not_marked_bad(&self, intake: &intake::Intake) -> Result<(), (u16, Vec<Problem>)> {
        let Some(line) = self.delivery_line.get() else { return Ok(()) };
        let mut cache = self.bad_versions.lock().await;
        if cache.0.is_none_or(|t| t.elapsed() > Duration::from_secs(5)) {
            match line.bad().await {
                Ok(b) => *cache = (Some(Instant::now()), b),
                Err(e) if cache.0.is_none() => {
                    tracing::warn!("reading the versions marked bad: {e:#}");
                    let p =
                        Problem::new("delivery", "", "the versions marked bad cannot be read now; try again shortly");
                    return Err((503, vec![p]));
                }
                Err(e) => tracing::warn!("reading the versions marked bad (the last list answers): {e:#}"),
            }
        }
        let problems = intake::marked_bad(intake, &cache.1);
        if problems.is_empty() {
            Ok(())
        } else {
            Err((422, problems))
        }
    }

    /// Exactly what admission would answer now, for a dry run.
    async fn would(&self, world: &admission::World, id: &str, name: String, spec: SubmissionSpec) -> Result<Decision> {
        let priority = spec.priority;
        // Exactly what admission would answer now.
        let (mut ledger, _) = self.read_ledger().await?;
        let mut queue: Vec<Pending> = self.queued().iter().map(|s| Self::pending_of(s)).collect();
        let me = Pending {
            name: name.clone(),
            team: spec.team.clone(),
            tier: spec.tier,
            priority,
            created: Utc::now(),
            demand: spec.demand,
            expected_duration: spec.expected_seconds.map(expected),
        };
        queue.push(me);
        admission::order(&mut queue);
        let now = Utc::now();
        let before = ledger.clone();
        let batch = admission::decide(&world, &mut ledger, &queue, now);
        let admitted = batch.admitted.iter().any(|(n, _)| *n == name);
        let waiting = if admitted {
            None
        } else {
            admission::explain(&world, &before, &queue, &batch.waiting, now).remove(&name)
        };
        Ok(Decision {
            id: id.to_string(),
            name,
            team: spec.team,
            dry_run: true,
            outcome: if admitted { "would be admitted" } else { "would wait" }.into(),
            phase: if admitted { Phase::Admitted } else { Phase::Queued },
            demand: spec.demand.show(),
            problems: vec![],
            waiting,
            retry: false,
        })
    }

    /// Records an accepted submission (a concurrent retry's record answers
    /// as a retry) and wakes the leader.
    async fn record(
        &self,
        caller: &Caller,
        name: String,
        spec: SubmissionSpec,
        artifact: &str,
        started: Instant,
    ) -> Result<(u16, Decision)> {
        let team = spec.team.clone();
        let mut obj = Submission::new(&name, spec);
        obj.metadata.namespace = Some(self.config.namespace.clone());
        obj.metadata.labels = Some([(records::TEAM_LABEL.to_string(), team)].into());
        let created = match subs(&self.host, &self.config.namespace).create(&PostParams::default(), &obj).await {
            Ok(c) => c,
            // A concurrent retry made it first: answer as a retry.
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = subs(&self.host, &self.config.namespace).get(&name).await?;
                let mut d = self.decision_of(&existing, false).await;
                d.retry = true;
                return Ok((200, d));
            }
            Err(e) => return Err(e).context("recording the submission"),
        };
        let now = Utc::now();
        subs(&self.host, &self.config.namespace)
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Queued", "acceptedAt": now}})),
            )
            .await
            .context("recording the submission's acceptance")?;
        self.audit(caller, "submit", &name, artifact, 201, "accepted").await;
        self.metrics.submit_latency(started.elapsed().as_secs_f64());
        self.wake.notify_one();
        let mut d = self.decision_of(&created, false).await;
        d.outcome = "accepted".into();
        Ok((201, d))
    }

    /// A server-side dry run of the workload and of every child the
    /// controller would create from it, on one reachable member of each
    /// Kubernetes minor among them; each refusal at the workload's field.
    async fn dry_run(&self, workload: &Value, views: &[MemberView]) -> Vec<Problem> {
        let mut by_minor: BTreeMap<Option<u32>, &MemberCluster> = BTreeMap::new();
        for v in views.iter().filter(|v| v.reachable) {
            if let Some(m) = self.members.iter().find(|m| m.name == v.name) {
                by_minor.entry(v.minor).or_insert(m);
            }
        }
        let kind = workload.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let mut problems: Vec<Problem> = Vec::new();
        for (minor, m) in by_minor {
            let at = match minor {
                Some(n) => format!("cluster {} (1.{n})", m.name),
                None => format!("cluster {}", m.name),
            };
            // Validation does not depend on the namespace: `default` always exists.
            let mut obj = workload.clone();
            obj["metadata"]["namespace"] = json!("default");
            let pp = PostParams { dry_run: true, field_manager: Some(MANAGER.into()) };
            let mut objects = vec![(workload_api(&m.client, &kind, "default"), obj.clone(), None)];
            let data = views.iter().find(|v| v.name == m.name).and_then(|v| v.profiles.clone()).unwrap_or_default();
            let pinned = obj.pointer("/spec/runtime/version").and_then(Value::as_str);
            if let Ok(profile) = crate::controller::profile_from(data, pinned) {
                let ctx = crate::workloads::render::Context {
                    cluster: m.name.clone(),
                    profile,
                    namespace_labels: Default::default(),
                };
                if let Ok(children) = crate::workloads::demand::children(&kind, &obj, &ctx) {
                    for mut c in children {
                        // Owned by a workload that does not exist yet: the
                        // reference would be refused for its empty uid.
                        if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
                            meta.remove("ownerReferences");
                        }
                        let api = child_api(&m.client, &c);
                        objects.push((api, c.clone(), Some(c)));
                    }
                }
            }
            for (api, body, child) in objects {
                let Ok(dynobj) = serde_json::from_value::<DynamicObject>(body) else { continue };
                match api.create(&pp, &dynobj).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
                        for (field, message) in refusal_causes(&e.message) {
                            let field = match &child {
                                Some(c) if !field.is_empty() => crate::workloads::demand::field_of(workload, c, &field),
                                _ => field,
                            };
                            // The gateway's own check of the same rule said it already.
                            if !field.is_empty() && problems.iter().any(|p| p.field == field) {
                                continue;
                            }
                            problems.push(Problem::new("dry-run", field, format!("{at}: {message}")));
                        }
                    }
                    // 409: a child of that name exists in `default`: not a problem of this workload.
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!("dry run on {}: {e}", m.name),
                }
            }
        }
        problems
    }

    fn queued(&self) -> Vec<Arc<Submission>> {
        self.all().into_iter().filter(|s| phase(s) == Phase::Queued && !s.spec.cancel).collect()
    }

    async fn decision_of(&self, s: &Submission, dry_run: bool) -> Decision {
        let name = s.metadata.name.clone().unwrap_or_default();
        let waiting = self.queue.read().await.waiting.get(&name).cloned();
        Decision {
            id: s.spec.id.clone(),
            name,
            team: s.spec.team.clone(),
            dry_run,
            outcome: match phase(s) {
                Phase::Queued => "accepted",
                p if p.holds() || p == Phase::Succeeded => "admitted",
                _ => "ended",
            }
            .into(),
            phase: phase(s),
            demand: s.spec.demand.show(),
            problems: vec![],
            waiting,
            retry: false,
        }
    }

    /// A submission as the API shows it.
    pub async fn view(&self, s: &Submission) -> View {
        let name = s.metadata.name.clone().unwrap_or_default();
        let st = s.status.clone().unwrap_or_default();
        let mut latency = BTreeMap::new();
        // The API's stages: those with a stage before them, both reached.
        for (k, a, b) in stages(&st).into_iter().filter(|(k, ..)| !matches!(*k, "accepted" | "finished")) {
            if let (Some(a), Some(b)) = (a, b) {
                latency.insert(k.to_string(), b.signed_duration_since(a).num_milliseconds() as f64 / 1000.0);
            }
        }
        View {
            name: name.clone(),
            summary: summary(s),
            submitted_by: s.spec.submitted_by.clone(),
            provenance: s.spec.provenance.clone(),
            status: st,
            waiting: self.queue.read().await.waiting.get(&name).cloned(),
            latency,
            created: s.metadata.creation_timestamp.as_ref().map(ts),
        }
    }

    /// The submission of `team` with client id `id`.
    pub async fn find(&self, team: &str, id: &str) -> Result<Option<Submission>> {
        Ok(subs(&self.host, &self.config.namespace).get_opt(&records::submission_name(team, id)).await?)
    }

    /// Marks a submission for cancelling; the leader releases it and removes it from the members.
    pub async fn cancel(&self, name: &str) -> Result<()> {
        subs(&self.host, &self.config.namespace)
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"spec": {"cancel": true}})))
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    pub async fn set_priority(&self, name: &str, class: &intake::PriorityClass) -> Result<()> {
        subs(&self.host, &self.config.namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"priority": class.value, "priorityClass": class.name}})),
            )
            .await?;
        self.wake.notify_one();
        Ok(())
    }

    /// Waiting submissions with their position, estimate and reason.
    pub async fn waiting(&self) -> BTreeMap<String, Waiting> {
        self.queue.read().await.waiting.clone()
    }

    pub async fn queued_count(&self) -> usize {
        self.queue.read().await.queued
    }

    /// One waiting submission's position, estimate and reason.
    pub async fn waiting_for(&self, name: &str) -> Option<Waiting> {
        self.queue.read().await.waiting.get(name).cloned()
    }

    /// The admission ledger as the host holds it now.
    pub async fn ledger(&self) -> Result<Ledger> {
        Ok(self.read_ledger().await?.0)
    }
}

/// How long a team's use over time is kept on the host.
pub const USAGE_KEPT: chrono::TimeDelta = chrono::TimeDelta::hours(24);

/// The API resource of a child the controller renders.
fn child_api(client: &kube::Client, child: &Value) -> Api<DynamicObject> {
    let av = child["apiVersion"].as_str().unwrap_or_default();
    let kind = child["kind"].as_str().unwrap_or_default();
    let (group, version) = av.rsplit_once('/').unwrap_or(("", av));
    let lower = kind.to_ascii_lowercase();
    let plural = if lower.ends_with('s') { format!("{lower}es") } else { format!("{lower}s") };
    let ar = ApiResource::from_gvk_with_plural(&kube::core::GroupVersionKind::gvk(group, version, kind), &plural);
    Api::namespaced_with(client.clone(), "default", &ar)
}

/// `Deployment.apps "web" is invalid: [spec.a: Invalid value: …, spec.b: Required value]`
/// → each cause's field and message (the whole message when it has no list).
fn refusal_causes(message: &str) -> Vec<(String, String)> {
    let Some((_, list)) = message.split_once(" is invalid: ") else {
        return vec![(String::new(), message.to_string())];
    };
    let list = list.strip_prefix('[').and_then(|l| l.strip_suffix(']')).unwrap_or(list);
    let mut out: Vec<(String, String)> = Vec::new();
    for part in list.split(", ") {
        let field_like = |f: &str| {
            !f.is_empty()
                && !f.contains(' ')
                && f.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && f.contains('.')
                || f == "metadata"
                || f == "spec"
        };
        match part.split_once(": ") {
            Some((f, m)) if field_like(f) => out.push((f.to_string(), m.to_string())),
            _ => match out.last_mut() {
                Some(last) => {
                    last.1.push_str(", ");
                    last.1.push_str(part);
                }
                None => out.push((String::new(), part.to_string())),
            },
        }
    }
    out
}

/// The team of a submission's record name (`<team>-<id digest>`), as
/// [`records::submission_name`] makes it.
fn team_of_record(name: &str) -> String {
    records::team_of(name)
}

/// Problems as one audit reason: `field: message; …`.
fn problems_text(problems: &[Problem]) -> String {
    problems.iter().map(|p| format!("{}: {}", p.field, p.message)).collect::<Vec<_>>().join("; ")
}

/// A delete of what is already gone is done.
fn not_found_ok(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(ae) if ae.code == 404 => Ok(()),
        e => Err(e),
    }
}

fn per_pod(spec: &SubmissionSpec) -> Amount {
    let n = spec.demand.pods.max(1);
    Amount::new(
        spec.demand.cpu.checked_div(n).unwrap_or_default(),
        spec.demand.memory.checked_div(n).unwrap_or_default(),
        1,
    )
}

fn ts(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> DateTime<Utc> {
    DateTime::<Utc>::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32).unwrap_or_else(Utc::now)
}

/// Writes a workload into its team's namespace on a member. The namespace
/// carries the team's Pod Security level (`enforce`, `warn` and `audit`):
/// the member's own Pod Security admission is the second line behind the
/// gateway's check, and refuses what the gateway would.
async fn write_to_member(
    m: &MemberCluster,
    team: &str,
    level: crate::kube::podsecurity::Level,
    submission: &str,
    workload: &Value,
) -> Result<()> {
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(m.client.clone());
    let pp = PatchParams::apply(MANAGER).force();
    let mut labels = serde_json::Map::new();
    for mode in ["enforce", "warn", "audit"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), json!(level.as_str()));
        labels.insert(format!("pod-security.kubernetes.io/{mode}-version"), json!("latest"));
    }
    nss.patch(
        team,
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": labels}})),
    )
    .await?;
    let kind = workload.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut w = workload.clone();
    w["metadata"]["namespace"] = json!(team);
    w["metadata"]["labels"][records::SUBMISSION_LABEL] = json!(submission);
    w["metadata"]["labels"][records::TEAM_LABEL] = json!(team);
    if let Some(m) = w.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("uid");
        m.remove("creationTimestamp");
    }
    workload_api(&m.client, kind, team).patch(name, &pp, &Patch::Apply(&w)).await?;
    Ok(())
}

/// Publishes a placement as a SIG-Multicluster `PlacementDecision` on the
/// host (when its CRD is installed there), so other tools can read it.
async fn publish_placement_decision(host: &kube::Client, ns: &str, s: &Submission, shares: &[placement::Share]) {
    let gvk = kube::api::GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "PlacementDecision");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "placementdecisions");
    let api: Api<DynamicObject> = Api::namespaced_with(host.clone(), ns, &ar);
    let name = s.metadata.name.clone().unwrap_or_default();
    let decisions: Vec<Value> = shares
        .iter()
        .filter(|s| s.replicas > 0)
        .map(|sh| json!({"clusterName": sh.cluster, "reason": format!("{} replicas: {}", sh.replicas, sh.reason)}))
        .collect();
    let obj = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "PlacementDecision",
        "metadata": {"name": name, "namespace": ns, "labels": {records::SUBMISSION_LABEL: name}},
        "decisions": decisions});
    if let Err(e) = api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&obj)).await {
        tracing::debug!("PlacementDecision for {name} not published: {e}");
    }
}

/// A record's expected run time as a duration: one too long to hold (a
/// record written before intake bounded it) is the longest there is.
fn expected(seconds: i64) -> chrono::Duration {
    chrono::Duration::try_seconds(seconds).unwrap_or(chrono::Duration::MAX)
}
