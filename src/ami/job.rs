//! The scheduled AMI rollout job's record (`ami/NNNNNNNN.json` in the state
//! store): what was decided (canary group, the images per group), by whom,
//! and where the job stands, as a state machine: rolling the canary →
//! soaking → rolling the rest → done, or halted with the reason.
//!
//! Pure: the record and the decision. The job itself (the store's
//! records, the images resolved, the roll) is `imaging::job`'s.

use std::fmt;
use std::str::FromStr;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::spec::{Cluster, Role};

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

/// Where record `number` lives in the state store.
pub fn key(number: u64) -> String {
    format!("{PREFIX}{number:08}.json")
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

/// Decides the job's run at `now` from each group's image (`imaging::job::resolve`).
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
