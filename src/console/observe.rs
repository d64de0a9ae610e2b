//! What the console knows of each member cluster: its nodes (watched, so
//! a node that goes NotReady shows at once), its version, addons and last
//! end-to-end run (read every `refresh`: they change rarely), and since
//! when it has not answered. A member that stops answering keeps its last
//! figures and is marked stale; it is never shown as empty.
//!
//! ```text
//! member API ─watch nodes─┐
//!            ─read every refresh (version, addons, e2e results)─┤
//!                                                   MemberSnapshot ─► console::build
//!                                                   changes (a counter) ─► server-sent events
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use serde_json::Value;

use crate::gateway::service::MemberCluster;
use crate::views::cluster::{Addon, E2eCheck, E2eRun, Machine};
use crate::views::Reach;

/// One member as last seen.
#[derive(Debug, Clone, PartialEq)]
pub struct MemberSnapshot {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub reach: Reach,
    pub version: Option<String>,
    pub machines: Vec<Machine>,
    pub addons: Vec<Addon>,
    pub e2e: Option<E2eRun>,
    pub drift_since: Option<DateTime<Utc>>,
}

impl MemberSnapshot {
    fn new(name: &str, labels: &BTreeMap<String, String>) -> MemberSnapshot {
        MemberSnapshot {
            name: name.to_string(),
            labels: labels.clone(),
            reach: Reach::Stale { since: None, error: "not read yet".into() },
            version: None,
            machines: Vec::new(),
            addons: Vec::new(),
            e2e: None,
            drift_since: None,
        }
    }

    /// The same figures (when it was last seen aside).
    fn same(&self, o: &MemberSnapshot) -> bool {
        let reach = |r: &Reach| match r {
            Reach::Live { .. } => None,
            Reach::Stale { since, .. } => Some(*since),
        };
        reach(&self.reach) == reach(&o.reach)
            && self.version == o.version
            && self.machines == o.machines
            && self.addons == o.addons
            && self.e2e == o.e2e
            && self.drift_since == o.drift_since
    }
}

/// Where the fleet's rollouts are read: its folder (fleet.yaml and the
/// clusters) and the AWS side of its state store.
pub struct FleetSource {
    pub folder: crate::fleet::Folder,
    pub target: crate::cloud::aws::Target,
    /// The addon packages, for what each cluster's definition selects.
    pub packages: Vec<crate::addons::package::Package>,
}

impl FleetSource {
    /// The addon versions a cluster's definition selects (None: not a
    /// cluster of the folder; an error: its selection does not resolve).
    pub fn defined_addons(&self, cluster: &str) -> Option<anyhow::Result<BTreeMap<String, String>>> {
        let l = self.folder.loaded.iter().find(|l| l.cluster.metadata.name == cluster)?;
        Some(
            crate::addons::select(&l.cluster, &self.packages)
                .map(|sel| sel.iter().map(|s| (s.package.meta.name.clone(), s.package.meta.version.clone())).collect())
                .map_err(|e| anyhow::anyhow!("{e}")),
        )
    }

    /// One cluster of the folder as its records say: the applied revisions
    /// (its state store) and its machines (EC2, by their tags). None: not a
    /// cluster of the folder.
    pub async fn records(&self, cluster: &str) -> Option<anyhow::Result<ClusterRecords>> {
        use anyhow::Context as _;
        let l = self.folder.loaded.iter().find(|l| l.cluster.metadata.name == cluster)?;
        let read = async {
            let opts = crate::cloud::aws::AwsOptions::from_env(self.target, Some(l.cluster.spec.cloud.region.clone()))?;
            let aws = crate::cloud::aws::Aws::connect(&opts).await?;
            let url = &l.cluster.spec.state_store;
            let store = crate::state::Store::open_existing(url, cluster, Some(&aws))
                .await
                .with_context(|| format!("opening state store {url}"))?;
            let revisions = match &store {
                Some(store) => store.history().await?,
                None => Vec::new(),
            };
            let instances = crate::cloud::aws::observe::list_instances(&aws, Some(cluster), false).await?;
            // The capacity ledger: a note, never the page's failure.
            let capacity = match crate::state::capacity::all(url, Some(&aws)).await {
                Ok(ledgers) => l.cluster.capacity_held_lines(&ledgers, chrono::Utc::now()),
                Err(e) => vec![format!("the capacity ledger could not be read: {e:#}")],
            };
            // The etcd backups: a note, never the page's failure.
            let interval_seconds = i64::try_from(l.cluster.spec.etcd.backups.interval.0.as_secs()).unwrap_or(i64::MAX);
            let etcd_backup = match &store {
                None => None,
                Some(store) => Some(match crate::etcd::agent::list(store).await {
                    Ok(list) => crate::views::cluster::EtcdBackup {
                        last_verified: list
                            .iter()
                            .filter(|b| b.verified())
                            .max_by_key(|b| b.manifest.taken_at)
                            .map(|b| (b.manifest.id.clone(), b.manifest.taken_at)),
                        last_failed: list
                            .iter()
                            .max_by_key(|b| b.manifest.taken_at)
                            .filter(|b| b.verdict.as_ref().is_some_and(|v| !v.ok))
                            .map(|b| b.manifest.id.clone()),
                        count: list.len(),
                        interval_seconds,
                        note: None,
                    },
                    Err(e) => crate::views::cluster::EtcdBackup {
                        interval_seconds,
                        note: Some(format!("reading its etcd backups: {e:#}")),
                        ..Default::default()
                    },
                }),
            };
            Ok(ClusterRecords { revisions, instances, capacity, etcd_backup })
        };
        Some(match tokio::time::timeout(Duration::from_secs(10), read).await {
            Ok(r) => r,
            Err(_) => Err(anyhow::anyhow!("AWS did not answer within 10 s")),
        })
    }
}

/// What a cluster's records hold beside its API.
pub struct ClusterRecords {
    pub revisions: Vec<crate::state::HistoryRecord>,
    pub instances: Vec<crate::cloud::observed::ObservedInstance>,
    /// "group G: N of M offerings out; blocked on capacity: …" per held-back group.
    pub capacity: Vec<String>,
    /// Its etcd backups (None: it has no state store yet).
    pub etcd_backup: Option<crate::views::cluster::EtcdBackup>,
}

/// The latest fleet rollout as last read, or why it could not be.
type RolloutRead = (Option<crate::views::fleet::FleetStatusView>, Option<String>);

pub struct Observer {
    members: RwLock<BTreeMap<String, MemberSnapshot>>,
    rollout: RwLock<RolloutRead>,
    changes: tokio::sync::watch::Sender<u64>,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        for t in self.tasks.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default() {
            t.abort();
        }
    }
}

/// A node as the console shows it.
pub fn machine(n: &Node) -> Machine {
    let labels = n.metadata.labels.clone().unwrap_or_default();
    let info = n.status.as_ref().and_then(|s| s.node_info.clone());
    let ready =
        n.status.as_ref().and_then(|s| s.conditions.as_ref()).and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
    let is_ready = ready.is_some_and(|c| c.status == "True");
    let reason = if is_ready {
        None
    } else {
        Some(match ready {
            Some(c) => format!(
                "{}{}",
                c.reason.clone().unwrap_or_else(|| "NotReady".into()),
                c.message.as_ref().map(|m| format!(": {m}")).unwrap_or_default()
            ),
            None => "no Ready condition reported yet".into(),
        })
    };
    let os_image = info.as_ref().map(|i| i.os_image.clone()).unwrap_or_default();
    Machine {
        name: n.metadata.name.clone().unwrap_or_default(),
        group: labels.get("pinfleet.dev/instance-group").cloned().unwrap_or_else(|| "(no group)".into()),
        role: if labels.contains_key("node-role.kubernetes.io/control-plane") { "control-plane" } else { "node" }
            .into(),
        image: labels.get(crate::render::IMAGE_LABEL).cloned().unwrap_or_else(|| {
            if os_image.is_empty() {
                "unreported".into()
            } else {
                os_image.clone()
            }
        }),
        os_image,
        kernel: info.as_ref().map(|i| i.kernel_version.clone()).unwrap_or_default(),
        kubelet: info.as_ref().map(|i| i.kubelet_version.clone()).unwrap_or_default(),
        runtime: info.as_ref().map(|i| i.container_runtime_version.clone()).unwrap_or_default(),
        created: n.metadata.creation_timestamp.as_ref().and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0)),
        ready: is_ready,
        reason,
        unschedulable: n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
        // `aws:///ZONE/INSTANCE-ID`, as the cloud controller sets it.
        instance: n
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|p| p.strip_prefix("aws://"))
            .and_then(|p| p.rsplit('/').next())
            .filter(|i| i.starts_with("i-"))
            .map(str::to_string),
        launch_template_version: None,
    }
}

/// The e2e results ConfigMap's report as the cluster view's run.
pub fn e2e_run(data: &BTreeMap<String, String>) -> (Option<E2eRun>, Option<DateTime<Utc>>) {
    let drift = data
        .get(crate::e2e::DRIFT_SINCE_KEY)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    let Some(report) = data.get("report.json").and_then(|r| serde_json::from_str::<Value>(r).ok()) else {
        return (None, drift);
    };
    let finished = data.get("metrics.prom").and_then(|m| {
        m.lines()
            .find(|l| l.starts_with("pinfleet_e2e_last_run_timestamp_seconds"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<i64>().ok())
            .and_then(|s| DateTime::from_timestamp(s, 0))
    });
    let checks = report["checks"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| E2eCheck {
                    phase: c["phase"].as_str().unwrap_or_default().to_lowercase(),
                    name: c["name"].as_str().unwrap_or_default().to_string(),
                    result: c["result"].as_str().unwrap_or("unknown").to_string(),
                    reason: c["reason"].as_str().map(str::to_string),
                    objects: c["objects"]
                        .as_array()
                        .map(|o| o.iter().filter_map(Value::as_str).map(str::to_string).collect())
                        .unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default();
    (Some(E2eRun { finished, seconds: report["seconds"].as_f64().unwrap_or(0.0), checks }), drift)
}

async fn addons(client: &kube::Client) -> kube::Result<Vec<Addon>> {
    let lp = ListParams::default().labels(crate::kube::ADDON_LABEL);
    let mut by: BTreeMap<(String, String), (usize, usize)> = BTreeMap::new();
    let key = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        let l = m.labels.clone().unwrap_or_default();
        (
            l.get(crate::kube::ADDON_LABEL).cloned().unwrap_or_default(),
            l.get(crate::addons::render::VERSION_LABEL).cloned().unwrap_or_else(|| "-".into()),
        )
    };
    for d in Api::<Deployment>::all(client.clone()).list(&lp).await? {
        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
        let e = by.entry(key(&d.metadata)).or_default();
        e.0 += 1;
        e.1 += usize::from(ready >= want);
    }
    for d in Api::<DaemonSet>::all(client.clone()).list(&lp).await? {
        let st = d.status.unwrap_or_default();
        let e = by.entry(key(&d.metadata)).or_default();
        e.0 += 1;
        e.1 += usize::from(st.number_ready >= st.desired_number_scheduled);
    }
    Ok(by
        .into_iter()
        .map(|((name, version), (workloads, ready))| Addon { name, version, workloads, ready, defined: None })
        .collect())
}

impl Observer {
    /// Starts watching every member (and reading the fleet's rollouts when
    /// given where); figures arrive within a refresh.
    pub fn start(members: &[MemberCluster], fleet: Option<Arc<FleetSource>>, refresh: Duration) -> Arc<Observer> {
        let (changes, _) = tokio::sync::watch::channel(0u64);
        let o = Arc::new(Observer {
            members: RwLock::new(
                members.iter().map(|m| (m.name.clone(), MemberSnapshot::new(&m.name, &m.labels))).collect(),
            ),
            rollout: RwLock::new((None, None)),
            changes,
            tasks: std::sync::Mutex::new(Vec::new()),
        });
        let mut tasks = Vec::new();
        for m in members {
            tasks.push(tokio::spawn(Self::watch_nodes(Arc::downgrade(&o), m.clone())));
            tasks.push(tokio::spawn(Self::read_details(Arc::downgrade(&o), m.clone(), refresh)));
        }
        if let Some(f) = fleet {
            tasks.push(tokio::spawn(Self::read_rollouts(Arc::downgrade(&o), f, refresh)));
        }
        *o.tasks.lock().expect("the task list") = tasks;
        o
    }

    /// The latest fleet rollout, and why it could not be read.
    pub fn rollout(&self) -> RolloutRead {
        self.rollout.read().map(|r| r.clone()).unwrap_or((None, None))
    }

    async fn read_rollouts(me: std::sync::Weak<Observer>, f: Arc<FleetSource>, refresh: Duration) {
        loop {
            let read =
                tokio::time::timeout(Duration::from_secs(20), crate::fleet::status::read(&f.folder, f.target)).await;
            let Some(o) = me.upgrade() else { return };
            let now = match read {
                Ok(Ok(v)) => (v, None),
                // The last rollout read stays shown, with why it is not current.
                Ok(Err(e)) => (o.rollout().0, Some(format!("reading the fleet's state store: {e:#}"))),
                Err(_) => (o.rollout().0, Some("the fleet's state store did not answer within 20 s".into())),
            };
            let changed = o.rollout.write().map(|mut r| {
                // When it was read aside, only a change is news.
                let same = r.1 == now.1
                    && r.0.as_ref().map(|v| (&v.state, &v.stages, &v.lock))
                        == now.0.as_ref().map(|v| (&v.state, &v.stages, &v.lock));
                *r = now;
                !same
            });
            if changed.unwrap_or(false) {
                o.changes.send_modify(|n| *n += 1);
            }
            drop(o);
            tokio::time::sleep(refresh).await;
        }
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub fn snapshot(&self) -> Vec<MemberSnapshot> {
        self.members.read().map(|m| m.values().cloned().collect()).unwrap_or_default()
    }

    pub fn member(&self, name: &str) -> Option<MemberSnapshot> {
        self.members.read().ok().and_then(|m| m.get(name).cloned())
    }

    fn update(&self, name: &str, f: impl FnOnce(&mut MemberSnapshot)) {
        let changed = {
            let Ok(mut all) = self.members.write() else { return };
            let Some(m) = all.get_mut(name) else { return };
            let before = m.clone();
            f(m);
            !m.same(&before)
        };
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn answered(m: &mut MemberSnapshot) {
        m.reach = Reach::Live { seen: Utc::now() };
    }

    fn failed(m: &mut MemberSnapshot, e: String) {
        let since = match &m.reach {
            Reach::Live { seen } => Some(*seen),
            Reach::Stale { since, .. } => *since,
        };
        m.reach = Reach::Stale { since, error: e };
    }

    async fn watch_nodes(me: std::sync::Weak<Observer>, m: MemberCluster) {
        let (reader, writer) = reflector::store::<Node>();
        let stream =
            reflector::reflector(writer, watcher(Api::<Node>::all(m.client.clone()), watcher::Config::default()))
                .default_backoff();
        let mut s = std::pin::pin!(stream);
        // The store is whole once the first list is in (InitDone).
        let mut listed = false;
        while let Some(ev) = s.next().await {
            let Some(o) = me.upgrade() else { return };
            match ev {
                Ok(watcher::Event::InitDone | watcher::Event::Apply(_) | watcher::Event::Delete(_)) => {
                    listed |= matches!(ev, Ok(watcher::Event::InitDone));
                    if listed {
                        let mut machines: Vec<Machine> = reader.state().iter().map(|n| machine(n)).collect();
                        machines.sort_by(|a, b| (&a.group, &a.name).cmp(&(&b.group, &b.name)));
                        o.update(&m.name, |s| {
                            s.machines = machines;
                            Self::answered(s);
                        });
                    }
                }
                Ok(_) => {}
                Err(e) => o.update(&m.name, |s| Self::failed(s, format!("watching nodes: {e}"))),
            }
        }
    }

    async fn read_details(me: std::sync::Weak<Observer>, m: MemberCluster, refresh: Duration) {
        loop {
            let read = async {
                let version = m.client.apiserver_version().await?.git_version;
                let addons = addons(&m.client).await?;
                let cm = Api::<ConfigMap>::namespaced(m.client.clone(), crate::controller::SYSTEM_NAMESPACE)
                    .get_opt(crate::e2e::RESULTS_CONFIGMAP)
                    .await?;
                let (e2e, drift) = cm.and_then(|c| c.data).map(|d| e2e_run(&d)).unwrap_or((None, None));
                Ok::<_, kube::Error>((version, addons, e2e, drift))
            };
            let r = tokio::time::timeout(Duration::from_secs(5), read).await;
            let Some(o) = me.upgrade() else { return };
            match r {
                Ok(Ok((version, addons, e2e, drift))) => o.update(&m.name, |s| {
                    s.version = Some(version);
                    s.addons = addons;
                    s.e2e = e2e;
                    s.drift_since = drift;
                    Self::answered(s);
                }),
                Ok(Err(e)) => o.update(&m.name, |s| Self::failed(s, e.to_string())),
                Err(_) => o.update(&m.name, |s| Self::failed(s, "no answer within 5 s".into())),
            }
            drop(o);
            tokio::time::sleep(refresh).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_e2e_results_configmap_reads_as_a_run() {
        let data = BTreeMap::from([
            ("report.json".to_string(), r#"{"cluster":"east","seconds":12.5,"checks":[{"phase":"Cluster","name":"nodes-ready","seconds":0.1,"result":"fail","reason":"1 node not Ready","objects":["n1"]},{"phase":"Smoke","name":"dns","seconds":0.2,"result":"pass"}]}"#.to_string()),
            ("metrics.prom".to_string(), "# HELP x\npinfleet_e2e_last_run_timestamp_seconds{cluster=\"east\"} 1764000000\n".to_string()),
            ("drift-since".to_string(), "2026-11-24T09:00:00+00:00".to_string()),
        ]);
        let (run, drift) = e2e_run(&data);
        let run = run.expect("a run");
        assert_eq!(run.seconds, 12.5);
        assert_eq!(run.finished, DateTime::from_timestamp(1_764_000_000, 0));
        assert_eq!(run.checks.len(), 2);
        assert_eq!(run.checks[0].result, "fail");
        assert_eq!(run.checks[0].phase, "cluster");
        assert_eq!(run.checks[0].objects, vec!["n1".to_string()]);
        assert_eq!(drift, Some("2026-11-24T09:00:00Z".parse().unwrap()));
        assert_eq!(e2e_run(&BTreeMap::new()), (None, None), "no run recorded");
    }
}
