//! The scheduled AMI rollout job, run (effects): its records in the state
//! store (`ami/NNNNNNNN.json`), each group's images resolved against EC2,
//! and the roll — the canary group, the soak, the rest — under the
//! cluster lock. The record and the decision are `ami::job`'s (pure).
//!
//! Records are numbered by a conditional create (`If-None-Match: *`), so
//! two jobs started at once never write the same record, whichever of them
//! then gets the cluster lock.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};

use super::Roller;
use crate::ami::job::{key, AmiRollout, GroupImage, RolloutStatus, PREFIX};
use crate::cloud::aws::Aws;
use crate::rollout::driver::Event;
use crate::spec::Cluster;
use crate::state::{Condition, PreconditionFailed, Store};

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

/// The job: a record of its own, then under the cluster lock the canary
/// group, the soak, the rest; the record follows every step and ends done
/// or halted with the reason (a lock held by another job included).
pub async fn rollout(
    job: &Roller<'_>,
    soak: Duration,
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
    let mut record = create(&job.store, record).await?;
    let number = record.number;
    let steps = job
        .locked(async {
            writeln!(anstream::stderr(), "ami: rolling the canary group {canary} (record #{number})")?;
            job.roll(job.cluster, vec![canary.to_string()], "ami rollout (canary)", on).await?;
            record.status = RolloutStatus::Soaking;
            save(&job.store, &record).await?;
            job.soak(soak).await?;
            let rest: Vec<String> = changed.iter().map(|i| i.group.clone()).filter(|x| x != canary).collect();
            if !rest.is_empty() {
                record.status = RolloutStatus::Rolling;
                save(&job.store, &record).await?;
                writeln!(anstream::stderr(), "ami: the canary held; rolling {}", rest.join(", "))?;
                job.roll(job.cluster, rest, "ami rollout", on).await?;
            }
            Ok(())
        })
        .await;
    record.status = match &steps {
        Ok(()) => RolloutStatus::Done,
        Err(e) => RolloutStatus::Halted(format!("{e:#}")),
    };
    record.finished_at = Some(Utc::now());
    save(&job.store, &record).await?;
    steps.map(|()| record)
}
