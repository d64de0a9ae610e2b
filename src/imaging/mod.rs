//! The image pipeline's effects, beside the fleet's: the scheduled AMI
//! rollout job ([`job`]) and the soak gate ([`gating`]). What they decide
//! is `ami`'s (pure: the job's record and decision, the gate's comparison
//! and verdict); here the decisions meet the state store, AWS and the
//! cluster.
//!
//! ```text
//! cli ami rollout ─▶ imaging::job ──┐
//!                                   ├─▶ Roller::roll (rollout::run::upgrade, under the cluster lock)
//! cli ami gate ────▶ imaging::gating┘        │
//!                        ami::gate / ami::job (pure) decide
//! ```

pub mod gating;
pub mod job;

use std::io::Write as _;
use std::time::Duration;

use anyhow::Result;

use crate::cloud::aws::Aws;
use crate::rollout::driver::Event;
use crate::spec::Cluster;
use crate::state::pki::Pki;
use crate::state::Store;

/// What rolling images onto a cluster's groups works with: the job and the
/// gate alike ("roll these groups under the lock").
pub struct Roller<'a> {
    pub aws: &'a Aws,
    pub cluster: &'a Cluster,
    pub store: Store,
    pub pki: Pki,
    pub client: kube::Client,
    pub roll: crate::rollout::run::Options,
    /// The command line, for the lock and the records.
    pub command: String,
}

impl Roller<'_> {
    /// Rolls `groups` of `cluster` (the roller's own, or a copy with a
    /// group pinned to an image) with the roller's options.
    pub async fn roll(&self, cluster: &Cluster, groups: Vec<String>, why: &str, on: &dyn Fn(Event)) -> Result<()> {
        let mut opts = self.roll.clone();
        opts.groups = groups;
        crate::rollout::run::upgrade(
            self.aws,
            cluster,
            &self.store,
            &self.pki,
            self.client.clone(),
            &opts,
            why,
            &self.command,
            on,
        )
        .await
        .map(|_| ())
    }

    /// Runs `work` holding the cluster's lock.
    pub async fn locked<T>(&self, work: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        crate::state::lock::Lock::with(&self.store, &self.command, work).await
    }

    /// The cluster must keep validating (all nodes Ready, system and addon
    /// workloads ready) for the whole soak.
    pub async fn soak(&self, soak: Duration) -> Result<()> {
        let end = tokio::time::Instant::now() + soak;
        writeln!(anstream::stderr(), "ami: soaking for {}", humantime::format_duration(soak))?;
        loop {
            if let Err(why) = crate::kube::cluster::validate(&self.client, &Default::default()).await {
                anyhow::bail!("the cluster failed validation while the canary soaked: {why}");
            }
            if tokio::time::Instant::now() >= end {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(2).min(end - tokio::time::Instant::now())).await;
        }
    }
}
