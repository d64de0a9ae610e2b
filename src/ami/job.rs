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
