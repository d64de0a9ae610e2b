//! The gateway's records, kept in the host cluster's API (group
//! `gateway.pinfleet.dev`): a `Submission` per submitted workload and its
//! `SubmissionBody`, a `TeamQuota` per team and one `AdmissionLedger`, the
//! reservations every admission writes before it tells anyone.
//!
//! ```text
//! HTTP submit ──► Submission (spec: kind, name, team, tier, demand, digest: small)
//!             └─► SubmissionBody (the workload as submitted: written once, owned by it)
//!                     │ leader: decide ──► AdmissionLedger (write first)
//!                     ▼
//!                 Submission.status (Admitted → Placed → Running/Finished)
//!                     │ leader: place ──► reads the body, checks its digest, writes it to members
//! ```
//!
//! A submission's name comes from its team and the client's id, so a retry
//! lands on the records the first attempt made (the body has the same name).
//!
//! The workload (up to 1 MiB) is kept apart from the record every status
//! change rewrites and every pass lists: the `Submission` stays within
//! [`SUBMISSION_SPEC_MAX`], and the body is read only to place the workload
//! or to show it. The body is a custom resource of the gateway's own group
//! rather than a ConfigMap: the gateway's RBAC stays one group, the
//! workload stays a structured object (`kubectl get submissionbody -o
//! yaml` shows it as submitted, not as a string), and its schema carries
//! the rule that makes it immutable (`self == oldSelf`), which the API
//! server (and the sim) enforce on every update. An ownerReference to the
//! Submission's uid lets the garbage collector remove it with the record.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::{CustomResource, KubeSchema};
use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::quota::{Amount, TierQuota};
use crate::workloads::Tier;

pub const GROUP: &str = "gateway.pinfleet.dev";
/// Where the gateway keeps its records on the host cluster (by default).
pub const NAMESPACE: &str = "pinfleet-gateway";

/// Submissions of one team not yet finished (queued, admitted, placed,
/// running), by default (`--max-open-per-team`): past it a new one is
/// refused with 429 until some finish.
/// Kueue's LocalQueue has no such cap; a body is up to 1 MiB, so one
/// team could otherwise fill the host cluster's store (and the gateway's
/// cache holds every record: 500 × 32 KiB).
pub const MAX_OPEN_PER_TEAM: usize = 500;

/// The most a Submission's spec may take, serialized: what every status
/// change rewrites and every pass of the leader lists. Past it a submission
/// is refused (422) at submit. Its status adds a part per member placed on
/// and a message, [`SUBMISSION_STATUS_MAX`] at most.
pub const SUBMISSION_SPEC_MAX: usize = 16 << 10;

/// What a Submission's status holds at most: a part per member it is
/// placed on (name, state, counts, and a reason and a message each cut to
/// [`MESSAGE_MAX`]: 1.2 KiB at most) and its own message (cut likewise),
/// stated for up to 12 members.
pub const SUBMISSION_STATUS_MAX: usize = 16 << 10;

/// A message kept in a record (a member's, the submission's own) is cut to this.
pub const MESSAGE_MAX: usize = 512;

/// The most a SubmissionBody holds: the workload as submitted, within the
/// API's 1 MiB request body.
pub const BODY_MAX: usize = 1 << 20;

/// How long the leader waits for an admitted submission's body (written
/// just after the record) before it fails it: a gateway that stopped in
/// between leaves a record without one; a retry with the same id writes it.
pub const BODY_GRACE: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

/// How long a finished (or cancelled, failed, preempted) submission's
/// record is kept before the leader collects it.
pub const KEEP_FINISHED: chrono::TimeDelta = chrono::TimeDelta::days(7);
/// What one team keeps on the host at most, in bytes: its records and
/// their bodies, open and finished alike (64 bodies of the largest size;
/// hundreds of a typical few KiB). Past it the team's oldest finished
/// records are collected before their week is out; when its open ones
/// alone fill it, a new submission is refused until some finish.
pub const KEPT_PER_TEAM: u64 = 64 << 20;

/// What one record keeps on the host: its body, and its record at the
/// most its spec and status may take.
pub fn kept_bytes(s: &Submission) -> u64 {
    s.spec.body_bytes.saturating_add((SUBMISSION_SPEC_MAX + SUBMISSION_STATUS_MAX) as u64)
}

/// Room for `more` bytes under `cap` among one team's records (`open`:
/// whether each is unfinished; `done_at`: when a finished one ended):
/// the finished records to collect for it, oldest first, or None when
/// the open ones alone leave no room (pure).
pub fn make_room(records: &[(String, u64, bool, Option<DateTime<Utc>>)], more: u64, cap: u64) -> Option<Vec<String>> {
    let held: u64 = records.iter().map(|r| r.1).fold(0u64, u64::saturating_add);
    let mut over = held.saturating_add(more).saturating_sub(cap);
    if over == 0 {
        return Some(Vec::new());
    }
    let mut finished: Vec<&(String, u64, bool, Option<DateTime<Utc>>)> = records.iter().filter(|r| !r.2).collect();
    finished.sort_by_key(|r| (r.3, r.0.clone()));
    let mut out = Vec::new();
    for r in finished {
        if over == 0 {
            break;
        }
        out.push(r.0.clone());
        over = over.saturating_sub(r.1);
    }
    (over == 0).then_some(out)
}
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
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.kind"),
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
    /// The workload's kind (PinterestService, …); the workload itself is
    /// in the SubmissionBody of the same name.
    #[serde(default)]
    pub kind: String,
    /// The workload's name (metadata.name) on the members.
    #[serde(default)]
    pub workload_name: String,
    /// The workload's namespace on the members (the team's).
    #[serde(default)]
    pub namespace: String,
    /// The body's size, in bytes (its JSON).
    #[serde(default)]
    pub body_bytes: u64,
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
    /// Digest of the workload: a retried id with another workload is
    /// refused, and a body whose digest differs is not placed.
    pub digest: String,
    /// Set by `cancel`; the leader releases and removes it.
    #[serde(default)]
    pub cancel: bool,
    /// The previous release's field: the whole workload, kept in the
    /// record. Read only to migrate (see [`migration_of`]): the leader
    /// writes the SubmissionBody from it and removes it. The schema keeps
    /// it (preserving what it holds), or the API server would prune it on
    /// every read and the old records would lose their workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub workload: Option<serde_json::Value>,
    /// The provenance verdict of each image the team's trust policy checked
    /// (what was checked, which key, which statement, or why not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "open_array")]
    pub provenance: Vec<crate::provenance::Verdict>,
}

/// A submitted workload's body: the workload as submitted, written once
/// beside its Submission (same name), owned by it, never changed.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "gateway.pinfleet.dev",
    version = "v1alpha1",
    kind = "SubmissionBody",
    namespaced,
    printcolumn(name = "Digest", type_ = "string", json_path = ".spec.digest"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    doc = "The workload a Submission of the same name carries, as submitted: written once, removed with it."
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self == oldSelf").message("a submission's body is immutable"))]
pub struct SubmissionBodySpec {
    /// Digest of the workload (as the Submission records it).
    pub digest: String,
    /// The platform workload as submitted (PinterestService, …).
    #[schemars(schema_with = "open_object")]
    pub workload: serde_json::Value,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodShape {
    pub pods: u64,
    pub per_pod: Amount,
    /// Which nodes its pods may land on: the template's node selector and
    /// required node affinity, as a pod `{"spec": {…}}` (absent: any node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "open_object")]
    pub scheduling: Option<serde_json::Value>,
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
    vec![Submission::crd(), SubmissionBody::crd(), TeamQuota::crd(), AdmissionLedger::crd(), UsageHistory::crd()]
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

/// Digest of a workload, for telling a retry from a reused id, and a
/// body from a swapped one. Taken over the workload as an API server keeps
/// it ([`as_stored`]), so the body read back has the digest of what was
/// submitted.
pub fn digest(workload: &serde_json::Value) -> String {
    let stored = as_stored(workload);
    hex::encode(Sha256::digest(serde_json::to_vec(&stored).unwrap_or_default()))[..16].to_string()
}

/// A workload as a Kubernetes API server stores it in a custom resource's
/// open subtree: keys sorted (as it answers them), nulls dropped (from
/// objects), and every number kept as a double (`1.0` reads back `1`; an
/// integer past 2^53 reads back rounded).
pub fn as_stored(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        // Keys in order (a server answers them sorted; this build's maps
        // keep the order they were written in).
        Value::Object(m) => {
            let mut kept: Vec<(&String, &Value)> = m.iter().filter(|(_, v)| !v.is_null()).collect();
            kept.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(kept.into_iter().map(|(k, v)| (k.clone(), as_stored(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(as_stored).collect()),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or_default();
            let whole = f.fract() == 0.0;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let as_int = if whole && f.abs() < 9.0e18 {
                Some(serde_json::Number::from(f as i64))
            } else if whole && (0.0..1.8e19).contains(&f) {
                Some(serde_json::Number::from(f as u64))
            } else {
                None
            };
            as_int.or_else(|| serde_json::Number::from_f64(f)).map_or(Value::Null, Value::Number)
        }
        other => other.clone(),
    }
}

/// A submission's body, owned by its record (the garbage collector
/// removes it with the record).
pub fn body_of(s: &Submission, workload: serde_json::Value) -> SubmissionBody {
    use kube::Resource as _;
    let mut b = SubmissionBody::new(
        s.metadata.name.as_deref().unwrap_or_default(),
        SubmissionBodySpec { digest: s.spec.digest.clone(), workload },
    );
    b.metadata.namespace = s.metadata.namespace.clone();
    b.metadata.labels = s.metadata.labels.clone();
    b.metadata.owner_references = s.controller_owner_ref(&()).map(|o| vec![o]);
    b
}

/// Why a body may not be placed as its record's workload: another
/// digest than the record's, or not owned by the record. Located at the
/// object and field.
pub fn body_refused(s: &Submission, b: &SubmissionBody) -> Option<String> {
    let ns = b.metadata.namespace.as_deref().unwrap_or_default();
    let name = b.metadata.name.as_deref().unwrap_or_default();
    let found = digest(&b.spec.workload);
    if found != s.spec.digest || b.spec.digest != s.spec.digest {
        return Some(format!(
            "SubmissionBody {ns}/{name}: spec.workload has digest {found} (the body says {}), not the submission's {}: \
             the body was changed after submit; refused, not placed",
            b.spec.digest, s.spec.digest
        ));
    }
    let uid = s.metadata.uid.as_deref().unwrap_or_default();
    let owned = b.metadata.owner_references.iter().flatten().any(|o| o.kind == "Submission" && o.uid == uid);
    if !owned {
        return Some(format!(
            "SubmissionBody {ns}/{name}: metadata.ownerReferences does not name this submission (uid {uid}): \
             the body was written by someone else; refused, not placed"
        ));
    }
    None
}

/// What a record of the previous release's form (its workload in
/// `spec.workload`, no body) becomes: the body written from that workload,
/// and the merge patch of its spec (the small fields set from the workload,
/// `workload` removed). None for a record of the current form; an error,
/// located, when the record's digest is not its workload's (as submit and
/// placement refuse a body that differs).
pub fn migration_of(s: &Submission) -> Option<Result<(SubmissionBody, serde_json::Value), String>> {
    let workload = s.spec.workload.as_ref()?;
    let ns = s.metadata.namespace.as_deref().unwrap_or_default();
    let name = s.metadata.name.as_deref().unwrap_or_default();
    let found = digest(workload);
    // The previous release took its digest over the workload's keys in the
    // order submitted (a store that keeps that order gives it back).
    let previous = hex::encode(Sha256::digest(serde_json::to_vec(workload).unwrap_or_default()))[..16].to_string();
    if found != s.spec.digest && previous != s.spec.digest {
        return Some(Err(format!(
            "Submission {ns}/{name}: spec.workload (the previous release's form) has digest {found}, not the \
             record's spec.digest {}: the record was changed after submit; refused, not placed",
            s.spec.digest
        )));
    }
    let meta = |field: &str| workload.pointer(&format!("/metadata/{field}")).and_then(serde_json::Value::as_str);
    let kind = workload.get("kind").and_then(serde_json::Value::as_str).unwrap_or_default();
    let patch = serde_json::json!({"spec": {
        "kind": kind,
        "workloadName": meta("name").unwrap_or_default(),
        "namespace": meta("namespace").unwrap_or(&s.spec.team),
        "bodyBytes": serde_json::to_vec(workload).map_or(0, |b| b.len() as u64),
        "digest": found,
        "workload": null,
    }});
    // The body and the record carry this release's digest from here on.
    let mut body = body_of(s, workload.clone());
    body.spec.digest = found;
    Some(Ok((body, patch)))
}

/// A message cut to [`MESSAGE_MAX`] bytes (at a character's boundary).
pub fn cut(message: &str) -> String {
    if message.len() <= MESSAGE_MAX {
        return message.to_string();
    }
    let mut end = MESSAGE_MAX.saturating_sub(3);
    while !message.is_char_boundary(end) {
        end = end.saturating_sub(1);
    }
    format!("{}...", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_read_back_as_an_api_server_keeps_it_has_the_submitted_digest() {
        // What a real v1.36 API server returned for an open subtree.
        let submitted: serde_json::Value = serde_json::from_str(
            r#"{"n":12345678901234567890,"a":null,"b":1.0,"c":{},"d":[],"f":2.50,"g":{"h":null}}"#,
        )
        .unwrap();
        let read_back: serde_json::Value =
            serde_json::from_str(r#"{"b":1,"c":{},"d":[],"f":2.5,"g":{},"n":12345678901234567000}"#).unwrap();
        assert_eq!(digest(&submitted), digest(&read_back));
        assert_ne!(digest(&submitted), digest(&serde_json::json!({"b": 2})));
    }

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

    fn record(workload: &serde_json::Value) -> Submission {
        let mut s = Submission::new(
            "search-0123456789ab",
            serde_json::from_value(serde_json::json!({"id": "web-1", "team": "search", "tier": "OnDemand",
                "submittedBy": "a", "authenticatedBy": "oidc", "kind": "PinterestService", "workloadName": "web",
                "artifact": "img", "demand": {"cpu": 1000, "memory": 1, "pods": 1}, "digest": digest(workload)}))
            .unwrap(),
        );
        s.metadata.namespace = Some("gw".into());
        s.metadata.uid = Some("uid-1".into());
        s
    }

    #[test]
    fn a_body_is_owned_by_its_record_and_one_changed_after_submit_is_refused_where_it_differs() {
        let w = serde_json::json!({"kind": "PinterestService", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
        let s = record(&w);
        let b = body_of(&s, w.clone());
        assert_eq!(body_refused(&s, &b), None);
        let owner = &b.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str(), owner.controller), ("Submission", "uid-1", Some(true)));
        let mut changed = b.clone();
        changed.spec.workload["spec"]["replicas"] = serde_json::json!(9);
        let why = body_refused(&s, &changed).unwrap();
        assert!(why.starts_with("SubmissionBody gw/search-0123456789ab: spec.workload has digest"), "{why}");
        assert!(why.contains(&s.spec.digest) && why.ends_with("refused, not placed"), "{why}");
        let mut stranger = b;
        stranger.metadata.owner_references = None;
        assert!(body_refused(&s, &stranger).unwrap().contains("metadata.ownerReferences"));
    }

    #[test]
    fn a_bodys_schema_makes_it_immutable_and_a_record_keeps_only_the_previous_forms_workload() {
        use kube::CustomResourceExt;
        let body = serde_json::to_value(SubmissionBody::crd()).unwrap();
        let spec = &body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec["x-kubernetes-validations"][0]["rule"], "self == oldSelf", "{spec:#}");
        let sub = serde_json::to_value(Submission::crd()).unwrap();
        let props = &sub["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        assert!(props.get("kind").is_some(), "{props:#}");
        // The previous release's field: kept as written (not pruned), not required.
        assert_eq!(props["workload"]["x-kubernetes-preserve-unknown-fields"], true, "{props:#}");
        let required =
            sub["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["required"].clone();
        assert!(!required.as_array().unwrap().iter().any(|r| r == "workload"), "{required}");
    }

    #[test]
    fn a_record_of_the_previous_form_becomes_its_body_and_small_fields_unless_its_digest_differs() {
        let w = serde_json::json!({"kind": "PinterestJobSet", "metadata": {"name": "crunch"}, "spec": {"shards": 2}});
        let mut old = record(&w);
        old.spec.kind = String::new();
        old.spec.workload_name = String::new();
        old.spec.workload = Some(w.clone());
        let (body, patch) = migration_of(&old).unwrap().unwrap();
        assert_eq!((body.spec.workload.clone(), body.spec.digest.clone()), (w.clone(), digest(&w)));
        assert_eq!(body_refused(&old, &body), None, "owned by the record, its digest");
        let bytes = serde_json::to_vec(&w).unwrap().len();
        assert_eq!(
            patch,
            serde_json::json!({"spec": {"kind": "PinterestJobSet", "workloadName": "crunch", "namespace": "search",
                "bodyBytes": bytes, "digest": digest(&w), "workload": null}})
        );
        // A record the previous release wrote carries the digest of the keys
        // in the order submitted: it migrates, and takes this release's.
        let mut earlier = old.clone();
        earlier.spec.digest = hex::encode(Sha256::digest(
            serde_json::to_vec(
                &serde_json::json!({"spec": {"shards": 2}, "metadata": {"name": "crunch"}, "kind": "PinterestJobSet"}),
            )
            .unwrap(),
        ))[..16]
            .to_string();
        earlier.spec.workload = Some(
            serde_json::from_str(r#"{"spec":{"shards":2},"metadata":{"name":"crunch"},"kind":"PinterestJobSet"}"#)
                .unwrap(),
        );
        let (body, patch) = migration_of(&earlier).unwrap().unwrap();
        assert_eq!(body.spec.digest, digest(&w), "{patch}");
        assert_eq!(patch["spec"]["digest"], digest(&w).as_str());
        let mut current = old.clone();
        current.spec.workload = None;
        assert!(migration_of(&current).is_none(), "a record of the current form is left alone");
        let mut changed = old;
        changed.spec.workload = Some(serde_json::json!({"kind": "PinterestJobSet", "metadata": {"name": "other"}}));
        let why = migration_of(&changed).unwrap().unwrap_err();
        assert!(
            why.starts_with(
                "Submission gw/search-0123456789ab: spec.workload (the previous release's form) has digest"
            ),
            "{why}"
        );
        assert!(why.contains(&changed.spec.digest) && why.ends_with("refused, not placed"), "{why}");
    }

    #[test]
    fn a_message_kept_in_a_record_is_cut_at_a_character() {
        assert_eq!(cut("short"), "short");
        let long = "é".repeat(MESSAGE_MAX);
        let c = cut(&long);
        assert!(c.len() <= MESSAGE_MAX && c.ends_with("..."), "{}", c.len());
    }

    #[test]
    fn use_is_kept_by_team_and_hour() {
        let at: DateTime<Utc> = "2026-11-25T06:41:07Z".parse().unwrap();
        assert_eq!(hour_of(at).to_rfc3339(), "2026-11-25T06:00:00+00:00");
        assert_eq!(usage_history_name("search", hour_of(at)), "search-2026112506");
    }
}
