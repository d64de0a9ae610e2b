//! An in-memory fleet (machines and their nodes) on tokio's clock, for
//! benchmarks and tests of the driver: machines boot after a fixed delay,
//! drains take a fixed time. Run on a paused clock, a roll of 1,000
//! machines takes milliseconds of real time and reports simulated time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;
use tokio::time::Instant;

use super::driver::{Machine, Machines, Nodes};
use crate::kube::drain::NodeState;

struct SimMachine {
    id: String,
    group: String,
    version: u32,
    launched: Instant,
    cordoned: bool,
}

pub struct SimFleet {
    pub boot: Duration,
    pub drain: Duration,
    state: Mutex<(Vec<SimMachine>, u64, BTreeMap<String, u32>)>,
    /// The next this-many launches fail as EC2 refusing every offering.
    pub refuse_launches: std::sync::atomic::AtomicU32,
    /// Refusals also say the group's launches keep failing (the ledger's churn rule).
    pub churning: std::sync::atomic::AtomicBool,
    /// For a group rolled as kops's etcd-manager control plane: the last
    /// this-many machines' members are down whatever the machines do (a
    /// member is otherwise healthy while its machine is Ready and not
    /// cordoned).
    pub etcd_members_down: std::sync::atomic::AtomicUsize,
}

impl SimFleet {
    /// `n` Ready machines per group on version 1.
    pub fn new(groups: &[(&str, u32)], boot: Duration, drain: Duration) -> Self {
        let past = Instant::now().checked_sub(boot).unwrap_or_else(Instant::now);
        let mut machines = Vec::new();
        let mut seq = 0;
        for (g, n) in groups {
            for _ in 0..*n {
                seq += 1;
                machines.push(SimMachine {
                    id: format!("i-{seq:06}"),
                    group: g.to_string(),
                    version: 1,
                    launched: past,
                    cordoned: false,
                });
            }
        }
        let versions = groups.iter().map(|(g, _)| (g.to_string(), 1)).collect();
        SimFleet {
            boot,
            drain,
            state: Mutex::new((machines, seq, versions)),
            refuse_launches: std::sync::atomic::AtomicU32::new(0),
            churning: std::sync::atomic::AtomicBool::new(false),
            etcd_members_down: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// A new launch-template version for a group (its machines are outdated).
    pub fn bump(&self, group: &str) {
        *self.state.lock().unwrap().2.entry(group.to_string()).or_default() += 1;
    }

    fn ready(&self, m: &SimMachine) -> bool {
        Instant::now() >= m.launched + self.boot
    }

    /// (machines, on the current version) of a group.
    pub fn count(&self, group: &str) -> (usize, usize) {
        let s = self.state.lock().unwrap();
        let v = s.2[group];
        let ms: Vec<&SimMachine> = s.0.iter().filter(|m| m.group == group).collect();
        (ms.len(), ms.iter().filter(|m| m.version == v).count())
    }
}

impl Machines for SimFleet {
    async fn list(&self, group: &str) -> Result<Vec<Machine>> {
        let s = self.state.lock().unwrap();
        let v = s.2[group];
        Ok(s.0
            .iter()
            .filter(|m| m.group == group)
            .map(|m| Machine { id: m.id.clone(), current: m.version == v })
            .collect())
    }
    async fn launch(&self, group: &str, n: u32) -> Result<Vec<String>> {
        use std::sync::atomic::Ordering;
        if self.refuse_launches.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| v.checked_sub(1)).is_ok() {
            let churn = self.churning.load(Ordering::SeqCst).then(|| {
                format!(
                    "2 of the last 2 launches of sim/{group} failed (the last at 10:42): halting rollouts of the group"
                )
            });
            return Err(crate::capacity::Blocked {
                group: group.to_string(),
                reason: "blocked on capacity: m6i.large in us-east-1a, InsufficientInstanceCapacity since 10:42, every offering of the group is out".into(),
                churn,
            }
            .into());
        }
        let mut s = self.state.lock().unwrap();
        let v = s.2[group];
        let mut ids = Vec::new();
        for _ in 0..n {
            s.1 += 1;
            let id = format!("i-{:06}", s.1);
            ids.push(id.clone());
            s.0.push(SimMachine { id, group: group.into(), version: v, launched: Instant::now(), cordoned: false });
        }
        Ok(ids)
    }
    async fn terminate(&self, id: &str) -> Result<()> {
        self.state.lock().unwrap().0.retain(|m| m.id != id);
        Ok(())
    }
}

impl Nodes for SimFleet {
    async fn list(&self) -> Result<BTreeMap<String, NodeState>> {
        let s = self.state.lock().unwrap();
        Ok(s.0
            .iter()
            .map(|m| {
                (
                    m.id.clone(),
                    NodeState { name: m.id.clone(), ready: self.ready(m), cordoned: m.cordoned, needs_update: false },
                )
            })
            .collect())
    }
    async fn cordon(&self, node: &str) -> Result<()> {
        if let Some(m) = self.state.lock().unwrap().0.iter_mut().find(|m| m.id == node) {
            m.cordoned = true;
        }
        Ok(())
    }
    async fn drain(&self, _node: &str, _timeout: Duration, _force: bool) -> Result<()> {
        tokio::time::sleep(self.drain).await;
        Ok(())
    }
    async fn etcd_manager_health(&self, members: usize, leaving: Option<&str>) -> Result<(), String> {
        let down = self.etcd_members_down.load(std::sync::atomic::Ordering::SeqCst);
        // Each machine's mirror pods, as the API server would list them.
        let pods: Vec<(String, String, bool)> = {
            let s = self.state.lock().unwrap();
            let up = s.0.len().saturating_sub(down);
            s.0.iter()
                .enumerate()
                .flat_map(|(i, m)| {
                    let ready = self.ready(m) && !m.cordoned && i < up;
                    crate::kube::etcd::ETCD_MANAGER_CLUSTERS
                        .iter()
                        .map(move |c| (format!("etcd-manager-{c}-{}", m.id), m.id.clone(), ready))
                })
                .collect()
        };
        crate::kube::etcd::etcd_manager_shortfall(&pods, members, leaving)
    }
    async fn remove_etcd_member(&self, _node: &str) -> Result<()> {
        // The in-memory fleet has no etcd; its control planes are node groups' size.
        Ok(())
    }
    async fn delete(&self, _node: &str) -> Result<()> {
        Ok(())
    }
    async fn validate(&self, _ignore: &BTreeSet<String>) -> Result<(), String> {
        Ok(())
    }
    /// Wakes when the next booting machine turns Ready. Nothing else here
    /// changes by itself (drains end as the driver's own work), so with
    /// nothing booting it waits for the driver's work instead of waking
    /// every `max` to find nothing new.
    async fn changed(&self, _max: Duration) {
        let next = {
            let s = self.state.lock().unwrap();
            s.0.iter().map(|m| m.launched + self.boot).filter(|t| *t > Instant::now()).min()
        };
        match next {
            Some(t) => tokio::time::sleep_until(t).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::driver::{self, Event, GroupRoll};

    fn roll_cfg() -> GroupRoll {
        GroupRoll {
            group: "general".into(),
            limits: crate::rollout::policy::node_group_limits(
                4,
                4,
                &crate::spec::IntOrPercent::Int(1),
                &crate::spec::IntOrPercent::Int(0),
                false,
            ),
            drain_timeout: Duration::from_secs(900),
            force_drain: false,
            boot_timeout: Duration::from_secs(900),
            validate_count: 1,
            validate_interval: Duration::from_secs(0),
            validation_timeout: Duration::from_secs(900),
            force_ids: BTreeSet::new(),
            etcd_members: false,
            etcd_manager: None,
        }
    }

    fn etcd_manager_cfg() -> GroupRoll {
        let mut cfg = roll_cfg();
        cfg.group = "control-plane".into();
        cfg.limits = crate::rollout::policy::node_group_limits(
            3,
            2,
            &crate::spec::IntOrPercent::Int(0),
            &crate::spec::IntOrPercent::Int(1),
            false,
        );
        cfg.etcd_manager = Some(3);
        cfg.validation_timeout = Duration::from_secs(120);
        cfg
    }

    /// kops's control plane: with a member already down, the first machine
    /// is refused before anything of it is touched, and before the roll
    /// calls it draining.
    #[tokio::test(start_paused = true)]
    async fn an_etcd_manager_control_plane_without_a_spare_member_is_refused_before_any_drain() {
        let fleet = SimFleet::new(&[("control-plane", 3)], Duration::from_secs(90), Duration::from_secs(30));
        fleet.bump("control-plane");
        fleet.etcd_members_down.store(1, std::sync::atomic::Ordering::SeqCst);
        let events = Mutex::new(Vec::new());
        let err = driver::roll_group(&fleet, &fleet, &etcd_manager_cfg(), &|e| events.lock().unwrap().push(e.clone()))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not taken down: etcd main: 1 of 3 members healthy without"), "{err}");
        assert!(err.contains("nothing of it was changed"), "{err}");
        let events = events.lock().unwrap();
        assert!(!events.iter().any(|e| matches!(e, Event::Draining { .. } | Event::Launched { .. })), "{events:?}");
        assert_eq!(fleet.count("control-plane"), (3, 0));
    }

    /// A group whose machines are all current is done only once every
    /// etcd member is healthy (a run resumed while a replacement's member
    /// still starts waits for it), and one that never comes back halts it.
    #[tokio::test(start_paused = true)]
    async fn an_etcd_manager_control_plane_is_done_once_every_member_is_back() {
        let fleet = SimFleet::new(&[("control-plane", 3)], Duration::from_secs(90), Duration::from_secs(30));
        fleet.etcd_members_down.store(1, std::sync::atomic::Ordering::SeqCst);
        let start = Instant::now();
        let back = async {
            tokio::time::sleep(Duration::from_secs(40)).await;
            fleet.etcd_members_down.store(0, std::sync::atomic::Ordering::SeqCst);
        };
        let cfg = etcd_manager_cfg();
        let (report, ()) = tokio::join!(driver::roll_group(&fleet, &fleet, &cfg, &|_| {}), back);
        assert_eq!(report.unwrap().replaced, 0);
        assert!(start.elapsed() >= Duration::from_secs(40), "finished before the member was back");

        fleet.etcd_members_down.store(1, std::sync::atomic::Ordering::SeqCst);
        let err = driver::roll_group(&fleet, &fleet, &etcd_manager_cfg(), &|_| {}).await.unwrap_err().to_string();
        assert!(err.contains("the replacement's etcd member is not healthy within 2m: etcd main: 2 of 3"), "{err}");
        assert!(err.contains("every machine of it is replaced (0 in this run), the roll is halted"), "{err}");
    }

    /// A surge that meets a refusal of every offering waits, saying why,
    /// and finishes once capacity returns: no machine failed.
    #[tokio::test(start_paused = true)]
    async fn a_roll_blocked_on_capacity_waits_and_counts_no_failure() {
        let fleet = SimFleet::new(&[("general", 4)], Duration::from_secs(90), Duration::from_secs(30));
        fleet.bump("general");
        fleet.refuse_launches.store(2, std::sync::atomic::Ordering::SeqCst);
        let cfg = roll_cfg();
        let events = Mutex::new(Vec::new());
        let start = Instant::now();
        let report =
            driver::roll_group(&fleet, &fleet, &cfg, &|e| events.lock().unwrap().push(e.clone())).await.unwrap();
        assert_eq!(report.replaced, 4);
        assert_eq!(fleet.count("general"), (4, 4));
        let blocked: Vec<String> = events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::BlockedOnCapacity { reason, .. } => Some(reason.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(blocked.len(), 2);
        assert!(blocked[0].starts_with("blocked on capacity: m6i.large in us-east-1a"), "{blocked:?}");
        assert!(start.elapsed() >= 2 * driver::CAPACITY_RETRY);
    }

    /// A group whose launches keep failing (two of its last four) halts
    /// its roll at once with the reason, instead of waiting.
    #[tokio::test(start_paused = true)]
    async fn a_roll_of_a_churning_group_halts_with_the_reason() {
        let fleet = SimFleet::new(&[("general", 4)], Duration::from_secs(90), Duration::from_secs(30));
        fleet.bump("general");
        fleet.refuse_launches.store(1, std::sync::atomic::Ordering::SeqCst);
        fleet.churning.store(true, std::sync::atomic::Ordering::SeqCst);
        let start = Instant::now();
        let err = driver::roll_group(&fleet, &fleet, &roll_cfg(), &|_| {}).await.unwrap_err().to_string();
        assert!(err.contains("halting rollouts of the group"), "{err}");
        assert!(start.elapsed() < driver::CAPACITY_RETRY, "no wait");
        assert_eq!(fleet.count("general").0, 4, "nothing was drained");
    }
}
