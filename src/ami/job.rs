//! The scheduled AMI rollout job's record (`ami/NNNNNNNN.json` in the state
//! store): what was decided (canary group, the images per group), by whom,
//! and where the job stands, as a state machine: rolling the canary →
//! soaking → rolling the rest → done, or halted with the reason.
//!
//! Records are numbered by a conditional create (`If-None-Match: *`), so
//! two jobs started at once never write the same record, whichever of them
//! then gets the cluster lock.

use std::fmt;
use std::str::FromStr;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use crate::cloud::aws::Aws;
use crate::rollout::driver::Event;
use crate::spec::{Cluster, Role};
use crate::state::lock::Lock;
use crate::state::pki::Pki;
use crate::state::{Condition, PreconditionFailed, Store};

/// Where a job's records live.
pub const PREFIX: &str = "ami/";

/// One group's images.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupImage {
    pub group: String,
    /// What the launch template runs now (None before the first apply).
    pub current: Option<String>,
    pub resolved: String,
    pub resolved_name: String,
    pub resolved_created: Option<DateTime<Utc>>,
    pub newer: bool,
}

/// Where a rollout job stands. Written as the words `ami history` shows
/// ("rolling canary", "soaking", "rolling", "done", "halted: why"), which
/// older records carry too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum RolloutStatus {
    RollingCanary,
    Soaking,
    Rolling,
    Done,
    Halted(String),
}

impl fmt::Display for RolloutStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RolloutStatus::RollingCanary => f.write_str("rolling canary"),
            RolloutStatus::Soaking => f.write_str("soaking"),
            RolloutStatus::Rolling => f.write_str("rolling"),
            RolloutStatus::Done => f.write_str("done"),
            RolloutStatus::Halted(why) => write!(f, "halted: {why}"),
        }
    }
}

impl FromStr for RolloutStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s {
            "rolling canary" => RolloutStatus::RollingCanary,
            "soaking" => RolloutStatus::Soaking,
            "rolling" => RolloutStatus::Rolling,
            "done" => RolloutStatus::Done,
            other => match other.strip_prefix("halted: ") {
                Some(why) => RolloutStatus::Halted(why.to_string()),
                None => return Err(format!("unknown rollout status {other:?}")),
            },
        })
    }
}

impl TryFrom<String> for RolloutStatus {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<RolloutStatus> for String {
    fn from(s: RolloutStatus) -> String {
        s.to_string()
    }
}

impl RolloutStatus {
    pub fn is_finished(&self) -> bool {
        matches!(self, RolloutStatus::Done | RolloutStatus::Halted(_))
    }
}

/// A rollout decision and its progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AmiRollout {
    pub number: u64,
    pub decided_at: DateTime<Utc>,
    pub by: String,
    pub canary_group: String,
    pub groups: Vec<GroupImage>,
    pub status: RolloutStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}

impl AmiRollout {
    pub fn key(&self) -> String {
        key(self.number)
    }
}

fn key(number: u64) -> String {
    format!("{PREFIX}{number:08}.json")
}

/// Writes a new record under the next free number and returns it numbered.
/// The number is claimed with a conditional create: a job that loses the
/// race to another takes the next one.
pub async fn create(store: &Store, mut record: AmiRollout) -> Result<AmiRollout> {
    let mut number = store.list(PREFIX).await?.len() as u64 + 1;
    for _ in 0..1000 {
        record.number = number;
        match store.put(&key(number), serde_json::to_vec_pretty(&record)?, Condition::IfAbsent).await {
            Ok(_) => return Ok(record),
            Err(e) if e.downcast_ref::<PreconditionFailed>().is_some() => number += 1,
            Err(e) => return Err(e),
        }
    }
    anyhow::bail!("no free AMI rollout record number after {number}")
}

/// Saves a record's progress (only its own job writes it after creation).
pub async fn save(store: &Store, record: &AmiRollout) -> Result<()> {
    store.put_json(&record.key(), record).await.map(|_| ())
}

/// Every record, oldest first.
pub async fn history(store: &Store) -> Result<Vec<AmiRollout>> {
    let mut rows = Vec::new();
    for k in store.list(PREFIX).await? {
        if let Some(r) = store.get_json::<AmiRollout>(&k).await? {
            rows.push(r);
        }
    }
    rows.sort_by_key(|r| r.number);
    Ok(rows)
}

/// For each group: the AMI its selector resolves to now and the one its
/// launch template runs (reads launch templates and images only).
pub async fn resolve(aws: &Aws, cluster: &Cluster, now: DateTime<Utc>) -> Result<(Vec<GroupImage>, Vec<String>)> {
    let name = &cluster.metadata.name;
    let (observed, (resolved, warnings)) = futures::try_join!(
        crate::cloud::aws::observe::observe(aws, name, None),
        crate::cloud::aws::images::resolve(aws, cluster, now)
    )?;
    let current: BTreeMap<&str, &str> = observed
        .launch_templates
        .iter()
        .filter_map(|t| t.latest.as_ref().map(|d| (t.group.as_str(), d.image_id.as_str())))
        .collect();
    let rows = cluster
        .spec
        .instance_groups
        .iter()
        .map(|grp| {
            let r = &resolved[&grp.name];
            let cur = current.get(grp.name.as_str()).map(|s| s.to_string());
            GroupImage {
                group: grp.name.clone(),
                newer: cur.as_deref().is_some_and(|c| c != r.id),
                current: cur,
                resolved: r.id.clone(),
                resolved_name: r.name.clone(),
                resolved_created: r.created,
            }
        })
        .collect();
    Ok((rows, warnings))
}

/// The group rolled and soaked first: the one asked for (it must have a
/// newer image), else the first node group with one, else the first group.
pub fn canary(cluster: &Cluster, changed: &[GroupImage], asked: Option<&str>) -> Result<String> {
    let role = |name: &str| cluster.spec.instance_groups.iter().find(|x| x.name == name).map(|x| x.role);
    match asked {
        Some(c) if changed.iter().any(|i| i.group == c) => Ok(c.to_string()),
        Some(c) => anyhow::bail!(
            "canary group {c} has no newer image (groups with one: {})",
            changed.iter().map(|i| i.group.as_str()).collect::<Vec<_>>().join(", ")
        ),
        None => changed
            .iter()
            .find(|i| role(&i.group) == Some(Role::Node))
            .or(changed.first())
            .map(|i| i.group.clone())
            .ok_or_else(|| anyhow::anyhow!("no group has a newer image")),
    }
}

/// What the scheduled job decides before it touches anything (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Outside the maintenance window: nothing to do.
    OutsideWindow,
    /// Every group already runs its newest image.
    UpToDate,
    /// Roll `canary` first, then the rest of `changed`.
    Roll { canary: String, changed: Vec<GroupImage> },
}

/// Decides the job's run at `now` from each group's image (see [`resolve`]).
pub fn decide(
    cluster: &Cluster,
    images: Vec<GroupImage>,
    window: Option<&super::window::Window>,
    canary_group: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Decision> {
    if window.is_some_and(|w| !w.contains(now)) {
        return Ok(Decision::OutsideWindow);
    }
    let changed: Vec<GroupImage> = images.into_iter().filter(|i| i.newer).collect();
    if changed.is_empty() {
        return Ok(Decision::UpToDate);
    }
    let canary = canary(cluster, &changed, canary_group)?;
    Ok(Decision::Roll { canary, changed })
}

/// What a rollout job works with.
pub struct Job<'a> {
    pub aws: &'a Aws,
    pub cluster: &'a Cluster,
    pub store: &'a Store,
    pub pki: &'a Pki,
    pub client: kube::Client,
    pub roll: crate::rollout::run::Options,
    /// How long the canary group must stay healthy before the rest roll.
    pub soak: Duration,
    pub command: String,
}

/// The job: a record of its own, then under the cluster lock the canary
/// group, the soak, the rest; the record follows every step and ends done
/// or halted with the reason (a lock held by another job included).
pub async fn rollout(
    job: &Job<'_>,
    now: DateTime<Utc>,
    canary: &str,
    changed: &[GroupImage],
    on: &dyn Fn(Event),
) -> Result<AmiRollout> {
    let (by, host) = crate::state::whoami();
    let by = match job.aws.caller_identity().await {
        Some(arn) => format!("{by}@{host} as {arn}"),
        None => format!("{by}@{host}"),
    };
    let record = AmiRollout {
        number: 0,
        decided_at: now,
        by,
        canary_group: canary.to_string(),
        groups: changed.to_vec(),
        status: RolloutStatus::RollingCanary,
        finished_at: None,
    };
    let mut record = create(job.store, record).await?;
    let roll = |groups: Vec<String>, why: &'static str| {
        let mut opts = job.roll.clone();
        opts.groups = groups;
        async move {
            crate::rollout::run::upgrade(
                job.aws,
                job.cluster,
                job.store,
                job.pki,
                job.client.clone(),
                &opts,
                why,
                &job.command,
                on,
            )
            .await
        }
    };
    let number = record.number;
    let steps = Lock::with(job.store, &job.command, async {
        writeln!(anstream::stderr(), "ami: rolling the canary group {canary} (record #{number})")?;
        roll(vec![canary.to_string()], "ami rollout (canary)").await?;
        record.status = RolloutStatus::Soaking;
        save(job.store, &record).await?;
        soak(&job.client, job.soak).await?;
        let rest: Vec<String> = changed.iter().map(|i| i.group.clone()).filter(|x| x != canary).collect();
        if !rest.is_empty() {
            record.status = RolloutStatus::Rolling;
            save(job.store, &record).await?;
            writeln!(anstream::stderr(), "ami: the canary held; rolling {}", rest.join(", "))?;
            roll(rest, "ami rollout").await?;
        }
        Ok(())
    })
    .await;
    record.status = match &steps {
        Ok(()) => RolloutStatus::Done,
        Err(e) => RolloutStatus::Halted(format!("{e:#}")),
    };
    record.finished_at = Some(Utc::now());
    save(job.store, &record).await?;
    steps.map(|()| record)
}

/// The canary must keep validating (all nodes Ready, system and addon
/// workloads ready) for the whole soak.
pub async fn soak(client: &kube::Client, soak: Duration) -> Result<()> {
    let end = tokio::time::Instant::now() + soak;
    writeln!(anstream::stderr(), "ami: soaking for {}", humantime::format_duration(soak))?;
    loop {
        if let Err(why) = crate::kube::cluster::validate(client, &Default::default()).await {
            anyhow::bail!("the cluster failed validation while the canary soaked: {why}");
        }
        if tokio::time::Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_secs(2).min(end - tokio::time::Instant::now())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_the_words_older_records_carry() {
        for s in ["rolling canary", "soaking", "rolling", "done", "halted: the canary failed validation"] {
            let parsed: RolloutStatus = s.parse().unwrap();
            assert_eq!(parsed.to_string(), s);
        }
        assert!("paused".parse::<RolloutStatus>().is_err());
        assert!(RolloutStatus::Halted("x".into()).is_finished() && !RolloutStatus::Soaking.is_finished());
    }
}
