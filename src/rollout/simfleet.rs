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
        SimFleet { boot, drain, state: Mutex::new((machines, seq, versions)) }
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
