//! A roll's progress as it happens (`rollout.json` in the state store):
//! why it runs, each group's machines replaced so far, and how it ended.
//! Written by the roll as its events arrive, read by `upgrade` status and
//! by people watching a long roll from another machine.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::driver::{Event, GroupReport};

/// Where the record lives in the cluster's state store.
pub const KEY: &str = "rollout.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupState {
    Rolling,
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupProgress {
    pub outdated: usize,
    pub machines: usize,
    pub replaced: usize,
    pub status: GroupState,
}

/// How a roll ended.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Outcome {
    Done { groups: Vec<GroupReport> },
    Halted { error: String },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RollProgress {
    pub why: String,
    pub started_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub groups: BTreeMap<String, GroupProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The Kubernetes version steps begun, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub version_steps: Vec<String>,
}

impl RollProgress {
    pub fn new(why: &str, now: DateTime<Utc>) -> Self {
        RollProgress {
            why: why.to_string(),
            started_at: now,
            updated_at: now,
            groups: BTreeMap::new(),
            outcome: None,
            finished_at: None,
            version_steps: Vec::new(),
        }
    }

    /// Takes in one event of the roll; true when the record changed.
    pub fn record(&mut self, e: &Event, now: DateTime<Utc>) -> bool {
        match e {
            Event::Started { group, outdated, machines } => {
                self.groups.insert(
                    group.clone(),
                    GroupProgress {
                        outdated: *outdated,
                        machines: *machines,
                        replaced: 0,
                        status: GroupState::Rolling,
                    },
                );
            }
            Event::Replaced { group, done, .. } => match self.groups.get_mut(group) {
                Some(g) => g.replaced = *done,
                None => return false,
            },
            Event::Finished { group, replaced, .. } => match self.groups.get_mut(group) {
                Some(g) => {
                    g.status = GroupState::Done;
                    g.replaced = *replaced;
                }
                None => return false,
            },
            Event::VersionStep { step } => self.version_steps.push(step.clone()),
            Event::Launched { .. }
            | Event::Draining { .. }
            | Event::Validated { .. }
            | Event::BlockedOnCapacity { .. }
            | Event::Backup { .. }
            | Event::Kops { .. } => return false,
        }
        self.updated_at = now;
        true
    }

    pub fn finish(&mut self, outcome: Outcome, now: DateTime<Utc>) {
        self.outcome = Some(outcome);
        self.finished_at = Some(now);
        self.updated_at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fill_the_record() {
        let t = Utc::now();
        let mut p = RollProgress::new("upgrade", t);
        assert!(p.record(&Event::Started { group: "general".into(), outdated: 3, machines: 5 }, t));
        assert!(!p.record(&Event::Launched { group: "general".into(), ids: vec![] }, t));
        assert!(p.record(&Event::Replaced { group: "general".into(), instance: "i-1".into(), done: 2, total: 3 }, t));
        assert!(p.record(&Event::Finished { group: "general".into(), replaced: 3, seconds: 1.0 }, t));
        // The group's own count at its end (also when a Replaced event was missed).
        assert_eq!(p.groups["general"].replaced, 3);
        assert_eq!(p.groups["general"].status, GroupState::Done);
        p.finish(Outcome::Halted { error: "x".into() }, t);
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["outcome"]["status"], "halted");
        assert_eq!(v["groups"]["general"]["status"], "done");
    }
}
