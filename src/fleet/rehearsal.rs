//! A fleet of in-memory clusters for rehearsing a fleet rollout on tokio's
//! paused clock: each cluster is a [`SimFleet`] of one node group rolled by
//! the real roll driver (surge, boot and drain times as given), so a
//! rehearsal of 25,000 machines across 21 clusters takes seconds of real
//! time and reports simulated time. Clusters can be told to fail their
//! roll or their stage gate (the tests' halts and reverts).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Result;

use super::rollout::Snapshot;
use super::run::Fleet;
use crate::rollout::driver::{self, GroupRoll};
use crate::rollout::policy;
use crate::rollout::simfleet::SimFleet;
use crate::spec::IntOrPercent;

pub const GROUP: &str = "general";

struct Cluster {
    machines: SimFleet,
    roll: GroupRoll,
    /// The image its launch template names, and the template's version.
    image: Mutex<(String, i64)>,
}

pub struct Rehearsal {
    clusters: BTreeMap<String, Cluster>,
    /// Clusters whose roll fails (after `fail_after`).
    pub fail_roll: Mutex<BTreeSet<String>>,
    pub fail_after: Duration,
    /// Clusters whose stage gate fails.
    pub fail_gate: Mutex<BTreeSet<String>>,
    /// (cluster, image) of every roll, in the order they started.
    pub rolls: Mutex<Vec<(String, String)>>,
}

/// The fastest one cluster of `nodes` machines can roll with `surge` at a
/// time (ceil(nodes / surge) waves of boot + drain), in seconds.
pub fn roll_floor(nodes: u32, surge: &IntOrPercent, boot: Duration, drain: Duration) -> f64 {
    let s = surge.resolve_up(nodes).max(1);
    policy::floor_seconds(nodes, s, boot.as_secs_f64(), drain.as_secs_f64())
}

impl Rehearsal {
    /// Clusters of the given sizes, all on `image`, each rolled with `surge`.
    pub fn new(sizes: &[(&str, u32)], image: &str, surge: IntOrPercent, boot: Duration, drain: Duration) -> Self {
        let clusters = sizes
            .iter()
            .map(|(name, n)| {
                let roll = GroupRoll {
                    group: GROUP.into(),
                    limits: policy::node_group_limits(*n, *n, &surge, &IntOrPercent::Int(0), false),
                    drain_timeout: Duration::from_secs(900),
                    force_drain: false,
                    boot_timeout: Duration::from_secs(900),
                    validate_count: 1,
                    validate_interval: Duration::ZERO,
                    validation_timeout: Duration::from_secs(900),
                    force_ids: BTreeSet::new(),
                    etcd_members: false,
                    etcd_manager: None,
                };
                let c = Cluster {
                    machines: SimFleet::new(&[(GROUP, *n)], boot, drain),
                    roll,
                    image: Mutex::new((image.to_string(), 1)),
                };
                (name.to_string(), c)
            })
            .collect();
        Rehearsal {
            clusters,
            fail_roll: Mutex::new(BTreeSet::new()),
            fail_after: Duration::from_secs(60),
            fail_gate: Mutex::new(BTreeSet::new()),
            rolls: Mutex::new(Vec::new()),
        }
    }

    /// The image a cluster runs, and how many of its machines run it.
    pub fn image(&self, cluster: &str) -> (String, usize, usize) {
        let c = &self.clusters[cluster];
        let (all, current) = c.machines.count(GROUP);
        (c.image.lock().unwrap().0.clone(), all, current)
    }

    fn cluster(&self, name: &str) -> Result<&Cluster> {
        self.clusters.get(name).ok_or_else(|| anyhow::anyhow!("no cluster {name} in the rehearsal"))
    }
}

impl Fleet for Rehearsal {
    async fn current(&self, cluster: &str) -> Result<Snapshot> {
        let (image, version) = self.cluster(cluster)?.image.lock().unwrap().clone();
        Ok(Snapshot {
            images: [(GROUP.to_string(), image)].into(),
            launch_template_versions: [(GROUP.to_string(), version)].into(),
            kubernetes_version: None,
        })
    }

    async fn roll(&self, cluster: &str, to: &Snapshot, _why: &str) -> Result<()> {
        let image = to.images.get(GROUP).cloned().unwrap_or_default();
        self.rolls.lock().unwrap().push((cluster.to_string(), image.clone()));
        if self.fail_roll.lock().unwrap().contains(cluster) {
            tokio::time::sleep(self.fail_after).await;
            anyhow::bail!("replacement i-000001 in group {GROUP} never became Ready");
        }
        // A new launch-template version when the image changes; the machines follow.
        let c = self.cluster(cluster)?;
        {
            let mut at = c.image.lock().unwrap();
            if at.0 != image {
                *at = (image, at.1 + 1);
                c.machines.bump(GROUP);
            }
        }
        driver::roll_group(&c.machines, &c.machines, &c.roll, &|_| {}).await.map(|_| ())
    }

    async fn gate(&self, cluster: &str) -> Result<()> {
        if self.fail_gate.lock().unwrap().contains(cluster) {
            anyhow::bail!("the e2e gate after the stage failed: cluster/nodes-ready: 1 node NotReady");
        }
        Ok(())
    }
}
