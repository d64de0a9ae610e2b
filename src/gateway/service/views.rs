//! What the API and the console show of submissions: a submission's
//! summary, its stages and their latencies, and where it waits (the last
//! admission pass's queue).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{ts, Service};
use crate::gateway::admission::Waiting;
use crate::gateway::quota;
use crate::gateway::records::{Submission, SubmissionStatus};

/// One submission as the API shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    pub name: String,
    #[serde(flatten)]
    pub summary: crate::views::workload::Summary,
    pub submitted_by: String,
    /// Each image's provenance verdict, where the team has a trust policy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<crate::provenance::Verdict>,
    pub status: SubmissionStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    /// Seconds per stage: admitted, placed, pods_created (from the previous stage).
    pub latency: BTreeMap<String, f64>,
    pub created: Option<DateTime<Utc>>,
}

/// What a submission is, as the API and the console name it.
pub fn summary(s: &Submission) -> crate::views::workload::Summary {
    crate::views::workload::Summary {
        team: s.spec.team.clone(),
        id: s.spec.id.clone(),
        kind: s.spec.kind.clone(),
        workload: s.spec.workload_name.clone(),
        tier: quota::tier_name(s.spec.tier).to_string(),
        priority: s.spec.priority,
        artifact: s.spec.artifact.clone(),
        demand: s.spec.demand.show(),
    }
}

/// A submission's stages, each with when the stage before it was reached
/// and when it was: accepted, admitted, placed, pods_created, finished.
pub fn stages(st: &SubmissionStatus) -> [(&'static str, Option<DateTime<Utc>>, Option<DateTime<Utc>>); 5] {
    [
        ("accepted", None, st.accepted_at),
        ("admitted", st.accepted_at, st.admitted_at),
        ("placed", st.admitted_at, st.placed_at),
        ("pods_created", st.placed_at, st.pods_created_at),
        ("finished", st.pods_created_at.or(st.placed_at), st.finished_at),
    ]
}

impl Service {
    /// A submission as the API shows it.
    pub async fn view(&self, s: &Submission) -> View {
        let name = s.metadata.name.clone().unwrap_or_default();
        let st = s.status.clone().unwrap_or_default();
        let mut latency = BTreeMap::new();
        // The API's stages: those with a stage before them, both reached.
        for (k, a, b) in stages(&st).into_iter().filter(|(k, ..)| !matches!(*k, "accepted" | "finished")) {
            if let (Some(a), Some(b)) = (a, b) {
                latency.insert(k.to_string(), b.signed_duration_since(a).num_milliseconds() as f64 / 1000.0);
            }
        }
        View {
            name: name.clone(),
            summary: summary(s),
            submitted_by: s.spec.submitted_by.clone(),
            provenance: s.spec.provenance.clone(),
            status: st,
            waiting: self.queue.read().await.waiting.get(&name).cloned(),
            latency,
            created: s.metadata.creation_timestamp.as_ref().map(ts),
        }
    }

    /// Waiting submissions with their position, estimate and reason.
    pub async fn waiting(&self) -> BTreeMap<String, Waiting> {
        self.queue.read().await.waiting.clone()
    }

    pub async fn queued_count(&self) -> usize {
        self.queue.read().await.queued
    }

    /// One waiting submission's position, estimate and reason.
    pub async fn waiting_for(&self, name: &str) -> Option<Waiting> {
        self.queue.read().await.waiting.get(name).cloned()
    }
}
