//! The gateway's records, kept in the host cluster's API (group
//! `gateway.pinfleet.dev`): a `Submission` per submitted workload, a
//! `TeamQuota` per team and one `AdmissionLedger`, the reservations every
//! admission writes before it tells anyone.
//!
//! ```text
//! HTTP submit ──► Submission (spec: the workload, team, tier, demand)
//!                     │ leader: decide ──► AdmissionLedger (write first)
//!                     ▼
//!                 Submission.status (Admitted → Placed → Running/Finished)
//! ```
//!
//! A submission's name comes from its team and the client's id, so a retry
//! lands on the record the first attempt made.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::CustomResource;
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::quota::{Amount, TierQuota};
use crate::workloads::Tier;

pub const GROUP: &str = "gateway.pinfleet.dev";
/// Where the gateway keeps its records on the host cluster (by default).
pub const NAMESPACE: &str = "pinfleet-gateway";

/// Submissions of one team not yet finished (queued, admitted, placed,
/// running): past it a new one is refused with 429 until some finish.
/// Kueue's LocalQueue has no such cap; a record is up to 1 MiB, so one
/// team could otherwise fill the host cluster's store.
pub const MAX_OPEN_PER_TEAM: usize = 500;

/// How long a finished (or cancelled, failed, preempted) submission's
/// record is kept before the leader collects it.
pub const KEEP_FINISHED: chrono::TimeDelta = chrono::TimeDelta::days(7);
pub const LEDGER: &str = "fleet";
pub const TEAM_LABEL: &str = "gateway.pinfleet.dev/team";
pub const SUBMISSION_LABEL: &str = "gateway.pinfleet.dev/submission";

fn open_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A list of objects kept as written (the provenance verdicts).
fn open_array(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}})
}

/// A submitted workload.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.pinfleet.dev",
    version = "v1alpha1",
    kind = "Submission",
    namespaced,
    shortname = "sub",
    status = "SubmissionStatus",
    printcolumn(name = "Team", type_ = "string", json_path = ".spec.team"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.workload.kind"),
    printcolumn(name = "Tier", type_ = "string", json_path = ".spec.tier"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "A workload submitted through the gateway: who, what, and where it stands."
)]
#[serde(rename_all = "camelCase")]
pub struct SubmissionSpec {
    /// The client's id for this submission (a retry with the same id is the same submission).
    pub id: String,
    pub team: String,
    pub tier: Tier,
    /// The value of its priority class (what orders the queue and preemption).
    #[serde(default)]
    pub priority: i32,
    /// The class the priority comes from (see intake::PriorityClass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class: Option<String>,
    pub submitted_by: String,
    /// How the caller proved who they are (oidc, serviceaccount, certificate).
    pub authenticated_by: String,
    /// The platform workload as submitted (PinterestService, …).
    #[schemars(schema_with = "open_object")]
    pub workload: serde_json::Value,
    /// The business container's image: the artifact version the audit names.
    pub artifact: String,
    /// Requests × replicas (or parallelism).
    pub demand: Amount,
    /// Its pods by shape (each pod template's requests and how many run
    /// at once); absent in records written before: every pod the average.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shapes: Vec<PodShape>,
    /// How long it runs once started (batch work), in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_seconds: Option<i64>,
    /// Digest of the workload: a retried id with another workload is refused.
    pub digest: String,
    /// Set by `cancel`; the leader releases and removes it.
    #[serde(default)]
    pub cancel: bool,
    /// The provenance verdict of each image the team's trust policy checked
    /// (what was checked, which key, which statement, or why not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "open_array")]
    pub provenance: Vec<crate::provenance::Verdict>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub enum Phase {
    #[default]
    Queued,
    Admitted,
    Placed,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Preempted,
}

impl Phase {
    /// Holds a reservation.
    pub fn holds(self) -> bool {
        matches!(self, Phase::Admitted | Phase::Placed | Phase::Running)
    }

    pub fn done(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed | Phase::Cancelled | Phase::Preempted)
    }
}

/// One member cluster's part.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberPart {
    pub cluster: String,
    pub replicas: u32,
    pub reason: String,
    /// What the member reports: Ready / Succeeded / Failed / Progressing / unreachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<DateTime<Utc>>,
    /// What the member runs when a delivery moved it since the placement
    /// (`v3 (delivery feeds/web #4)`); absent while it runs what was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubmissionStatus {
    #[serde(default)]
    pub phase: Phase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admitted_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_created_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<MemberPart>,
    /// When every pod of a placed gang was seen ready (it is not judged again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_ready_at: Option<DateTime<Utc>>,
    /// How often it was evicted because its pods were not all ready in time.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub evictions: u32,
    /// An evicted gang is not admitted again before this (its backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<DateTime<Utc>>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Pods of one shape a submission runs at once (what placement packs
/// onto a member's nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodShape {
    pub pods: u64,
    pub per_pod: Amount,
}

/// A team's quota, as the platform team writes it.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.pinfleet.dev",
    version = "v1alpha1",
    kind = "TeamQuota",
    namespaced,
    shortname = "tq",
    printcolumn(name = "Cohort", type_ = "string", json_path = ".spec.cohort"),
    printcolumn(name = "Workloads", type_ = "integer", json_path = ".spec.maxWorkloads"),
    printcolumn(name = "PodsPerMinute", type_ = "integer", json_path = ".spec.podsPerMinute"),
    doc = "A team's quota across the fleet: per tier a guaranteed amount and a maximum, a workload cap and a creation rate."
)]
#[serde(rename_all = "camelCase")]
pub struct TeamQuotaSpec {
    /// Teams of one cohort lend each other their unused guarantees (default: the team alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cohort: Option<String>,
    /// Reserved, OnDemand, Preemptible.
    #[serde(default)]
    pub tiers: BTreeMap<String, TierQuota>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_workloads: Option<u64>,
    /// Pods admitted per minute at most (a spike of submissions is not a spike of pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_minute: Option<u64>,
}

/// The reservations of everything admitted: written before any
/// submission is told it was admitted, with the object's resourceVersion,
/// so two leaders can never both admit against the same free room.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.pinfleet.dev",
    version = "v1alpha1",
    kind = "AdmissionLedger",
    namespaced,
    doc = "The gateway's ledger of reservations (written by the admitting leader only)."
)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionLedgerSpec {
    #[schemars(schema_with = "open_object")]
    pub ledger: serde_json::Value,
}

/// A team's use of its quota over one hour, sampled by the admitting
/// leader (so every replica's console shows the same history, and a
/// restart loses none of it). Named by team and hour; kept a day.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "gateway.pinfleet.dev",
    version = "v1alpha1",
    kind = "UsageHistory",
    namespaced,
    printcolumn(name = "Team", type_ = "string", json_path = ".spec.team"),
    printcolumn(name = "Hour", type_ = "string", json_path = ".spec.hour"),
    doc = "A team's use of its quota over one hour: samples per tier as shares of the tier's maximum."
)]
#[serde(rename_all = "camelCase")]
pub struct UsageHistorySpec {
    pub team: String,
    /// The hour the samples fall in (its first instant).
    pub hour: DateTime<Utc>,
    #[serde(default)]
    pub samples: Vec<UsageSample>,
}

/// One tier's use at one time: cpu, memory and pods as shares of its maximum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    pub at: DateTime<Utc>,
    pub tier: String,
    pub cpu: f64,
    pub memory: f64,
    pub pods: f64,
}

/// The hour a time falls in.
pub fn hour_of(at: DateTime<Utc>) -> DateTime<Utc> {
    use chrono::{DurationRound as _, TimeDelta};
    at.duration_trunc(TimeDelta::hours(1)).unwrap_or(at)
}

/// The record of a team's use in an hour.
pub fn usage_history_name(team: &str, hour: DateTime<Utc>) -> String {
    format!("{team}-{}", hour.format("%Y%m%d%H"))
}

/// Every record's CRD, in a stable order.
pub fn crds() -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> {
    use kube::CustomResourceExt;
    vec![Submission::crd(), TeamQuota::crd(), AdmissionLedger::crd(), UsageHistory::crd()]
}

/// The record's name for a team's client id: DNS-safe, stable.
pub fn submission_name(team: &str, id: &str) -> String {
    let h = Sha256::digest(format!("{team}/{id}").as_bytes());
    format!("{team}-{}", &hex::encode(h)[..12])
}

/// The team a record name of [`submission_name`] belongs to.
pub fn team_of(name: &str) -> String {
    name.len()
        .checked_sub(13)
        .filter(|i| name.as_bytes().get(*i) == Some(&b'-'))
        .map_or(name, |i| &name[..i])
        .to_string()
}

/// Digest of a workload, for telling a retry from a reused id.
pub fn digest(workload: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(serde_json::to_vec(workload).unwrap_or_default()))[..16].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_name_gives_back_its_team() {
        assert_eq!(team_of(&submission_name("red-team", "job 1")), "red-team");
    }

    #[test]
    fn a_retry_names_the_same_record_and_teams_never_collide() {
        assert_eq!(submission_name("search", "build-42"), submission_name("search", "build-42"));
        assert_ne!(submission_name("search", "build-42"), submission_name("ads", "build-42"));
        assert!(submission_name("search", "x").len() <= 63);
    }

    #[test]
    fn use_is_kept_by_team_and_hour() {
        let at: DateTime<Utc> = "2026-11-25T06:41:07Z".parse().unwrap();
        assert_eq!(hour_of(at).to_rfc3339(), "2026-11-25T06:00:00+00:00");
        assert_eq!(usage_history_name("search", hour_of(at)), "search-2026112506");
    }
}
