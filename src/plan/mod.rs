//! desired vs observed → [`Plan`]: an ordered list of changes, each with the
//! resource, field-level before → after, the reason (the spec field behind
//! it) and what it depends on. Pure. A plan serializes, so it can be shown
//! ([`show`]), saved and applied exactly as reviewed; plan, apply and
//! dry-run walk the same data.

mod destroy;
mod endpoint;
mod events;
mod iam;
mod machines;
mod network;
mod security;
pub mod show;

use crate::cloud::key::ResourceKey as K;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cloud::model::{Desired, LaunchTemplateData, Rule, Source};
use crate::cloud::observed::{Observed, ObservedInstance, ObservedSource};

pub use crate::cloud::ops::{with_api_host, ObservedRuleRef, Op, API_HOST_PLACEHOLDER};
pub use destroy::destroy;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Update,
    Replace,
    Delete,
}

impl Action {
    /// `+`, `~`, `-/+`, `-`, as terraform shows them.
    pub fn symbol(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The resource's key, e.g. `subnet/private-a`, `instances/general`.
    pub key: crate::cloud::key::ResourceKey,
    pub action: Action,
    pub summary: String,
    pub fields: Vec<FieldChange>,
    /// Why: the spec field (or observation) behind the change.
    pub reason: String,
    pub depends_on: Vec<crate::cloud::key::ResourceKey>,
    pub op: Step,
}

/// What a change does: an operation the executor runs, or a refusal, a
/// change pinfleet will not make by itself (apply stops before anything and
/// says why). The executor never sees a refusal.
///
/// Serialized as the operation (`{"op": "createVpc", …}`), a refusal as
/// `{"op": "refuse", "why": …}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "serde_json::Value", into = "serde_json::Value")]
pub enum Step {
    Run(Op),
    Refuse { why: String },
}

impl From<Op> for Step {
    fn from(op: Op) -> Step {
        Step::Run(op)
    }
}

impl From<Step> for serde_json::Value {
    fn from(s: Step) -> serde_json::Value {
        match s {
            Step::Run(op) => serde_json::to_value(op).unwrap_or_default(),
            Step::Refuse { why } => serde_json::json!({"op": "refuse", "why": why}),
        }
    }
}

impl TryFrom<serde_json::Value> for Step {
    type Error = String;
    fn try_from(v: serde_json::Value) -> Result<Step, String> {
        if v["op"] == "refuse" {
            return Ok(Step::Refuse { why: v["why"].as_str().unwrap_or_default().to_string() });
        }
        serde_json::from_value(v).map(Step::Run).map_err(|e| e.to_string())
    }
}

impl Step {
    /// The operation, unless this is a refusal.
    pub fn op(&self) -> Option<&Op> {
        match self {
            Step::Run(op) => Some(op),
            Step::Refuse { .. } => None,
        }
    }
}

/// Instances running an older launch-template version: a later
/// `pinfleet upgrade` replaces them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutNote {
    pub group: String,
    pub instances: Vec<String>,
    pub current_version: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub cluster: String,
    pub changes: Vec<Change>,
    pub needs_rollout: Vec<RolloutNote>,
    /// AWS calls made while observing, by operation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aws_calls: BTreeMap<String, u64>,
}

impl Plan {
    /// The history record of applying this plan as revision `revision`,
    /// by this user and host, with the command line that did it.
    pub fn history(&self, revision: u64, command: &str) -> crate::state::HistoryRecord {
        crate::state::HistoryRecord {
            created: self.count(Action::Create),
            updated: self.count(Action::Update),
            replaced: self.count(Action::Replace),
            deleted: self.count(Action::Delete),
            ..crate::state::HistoryRecord::of_actions(
                revision,
                command,
                self.changes.iter().map(|c| c.key.to_string()).collect(),
            )
        }
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }
    pub fn refusals(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| matches!(c.op, Step::Refuse { .. })).collect()
    }
}

fn field(name: &str, before: Option<impl ToString>, after: Option<impl ToString>) -> FieldChange {
    FieldChange { field: name.to_string(), before: before.map(|b| b.to_string()), after: after.map(|a| a.to_string()) }
}

/// The fields in which an observed launch template differs from the desired
/// one, with the spec field behind each.
pub fn template_changes(
    want: &LaunchTemplateData,
    have: &crate::cloud::observed::ObservedTemplateData,
    sg_names: &BTreeMap<String, String>,
    api_host: Option<&str>,
    group: &str,
) -> Vec<(FieldChange, String)> {
    let g = format!("spec.instanceGroups[{group}]");
    let mut out = Vec::new();
    let mut cmp = |name: &str, a: String, b: String, why: String| {
        if a != b {
            out.push((field(name, Some(b), Some(a)), why));
        }
    };
    cmp("imageId", want.image_id.clone(), have.image_id.clone(), format!("{g}.image"));
    cmp("instanceType", want.instance_type.clone(), have.instance_type.clone(), format!("{g}.machineType"));
    cmp("rootDevice", want.root_device.clone(), have.root_device.clone(), format!("{g}.image (root device)"));
    cmp(
        "rootVolume.sizeGiB",
        want.root_volume_gib.to_string(),
        have.root_volume_gib.to_string(),
        format!("{g}.rootVolume.sizeGiB"),
    );
    cmp(
        "rootVolume.type",
        want.root_volume_type.clone(),
        have.root_volume_type.clone(),
        format!("{g}.rootVolume.type"),
    );
    cmp(
        "rootVolume.encrypted",
        want.encrypted.to_string(),
        have.encrypted.to_string(),
        format!("{g}.rootVolume.encrypted"),
    );
    cmp(
        "instanceProfile",
        want.instance_profile.clone().unwrap_or_default(),
        have.instance_profile.clone().unwrap_or_default(),
        format!("{g}.instanceProfile / spec.iam"),
    );
    cmp(
        "keyName",
        want.key_name.clone().unwrap_or_default(),
        have.key_name.clone().unwrap_or_default(),
        "spec.sshKeyName".into(),
    );
    let have_sgs: Vec<String> =
        have.security_group_ids.iter().map(|id| sg_names.get(id).cloned().unwrap_or_else(|| id.clone())).collect();
    cmp("securityGroup", want.security_group.clone(), have_sgs.join(","), format!("{g}.role"));
    cmp(
        "metadataOptions.httpTokens",
        if want.imds_tokens_required { "required" } else { "optional" }.into(),
        if have.imds_tokens_required { "required" } else { "optional" }.into(),
        "IMDSv2 is always required".into(),
    );
    let want_ud = match api_host {
        Some(h) => with_api_host(&want.user_data, h),
        None => want.user_data.clone(),
    };
    cmp(
        "userData",
        want_ud,
        have.user_data.clone(),
        "rendered bootstrap (spec.kubernetesVersion, labels, taints, templates/)".into(),
    );
    let reservation = |r: &Option<crate::capacity::Reservation>| r.as_ref().map(|r| r.to_string()).unwrap_or_default();
    cmp(
        "capacityReservationSpecification",
        reservation(&want.capacity_reservation),
        reservation(&have.capacity_reservation),
        format!("{g}.capacity.reservation"),
    );
    let fmt_tags =
        |t: &BTreeMap<String, String>| t.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
    cmp("tags", fmt_tags(&want.tags), fmt_tags(&have.tags), format!("{g}.cloudLabels / spec.owner"));
    out
}

fn observed_rule_to_desired(r: &crate::cloud::observed::ObservedRule, sg_names: &BTreeMap<String, String>) -> Rule {
    Rule {
        protocol: r.protocol.clone(),
        from_port: r.from_port,
        to_port: r.to_port,
        source: match &r.source {
            ObservedSource::Cidr(c) => Source::Cidr(c.clone()),
            ObservedSource::GroupId(id) => match sg_names.get(id) {
                Some(n) => Source::Group(n.clone()),
                None => Source::Cidr(format!("sg:{id}")),
            },
        },
    }
}

/// Which live instances to terminate when a group shrinks: those on an
/// outdated launch-template version first, then the oldest.
pub fn pick_excess<'a>(
    live: &[&'a ObservedInstance],
    excess: usize,
    current: Option<i64>,
) -> Vec<&'a ObservedInstance> {
    let mut sorted: Vec<&ObservedInstance> = live.to_vec();
    sorted.sort_by_key(|i| {
        (i.launch_template_version == current && current.is_some(), i.launch_time.unwrap_or(0), i.id.clone())
    });
    sorted.into_iter().take(excess).collect()
}

/// The changes so far, in the order the families add them.
#[derive(Debug, Default)]
pub(crate) struct Changes(pub Vec<Change>);

impl Changes {
    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        key: K,
        action: Action,
        summary: String,
        fields: Vec<FieldChange>,
        reason: String,
        depends_on: Vec<K>,
        op: impl Into<Step>,
    ) {
        self.0.push(Change { key, action, summary, fields, reason, depends_on, op: op.into() });
    }
}

/// The plan that makes `observed` match `desired`: each family of
/// resources adds its changes (network, security groups, the API endpoint,
/// machines), then subnets that left the spec, then everything is ordered.
pub fn diff(desired: &Desired, observed: &Observed) -> Plan {
    let mut out = Changes::default();
    network::diff(desired, observed, &mut out);
    security::diff(desired, observed, &mut out);
    iam::diff(desired, observed, &mut out);
    events::diff(desired, observed, &mut out);
    endpoint::diff(desired, observed, &mut out);
    let needs_rollout = machines::diff(desired, observed, &mut out);
    network::removed_subnets(desired, observed, &mut out);
    let mut changes = out.0;
    order(&mut changes);
    Plan { cluster: desired.cluster.clone(), changes, needs_rollout, aws_calls: BTreeMap::new() }
}

/// Topological order (stable: keeps the given order among independent
/// changes); dependencies on keys not in the plan are dropped.
pub(crate) fn order(changes: &mut Vec<Change>) {
    let keys: BTreeSet<K> = changes.iter().map(|c| c.key.clone()).collect();
    for c in changes.iter_mut() {
        c.depends_on.retain(|d| keys.contains(d) && d != &c.key);
        c.depends_on.sort();
        c.depends_on.dedup();
    }
    let mut done: BTreeSet<K> = BTreeSet::new();
    let mut out = Vec::with_capacity(changes.len());
    let mut rest = std::mem::take(changes);
    while !rest.is_empty() {
        let before = rest.len();
        let (ready, blocked): (Vec<Change>, Vec<Change>) =
            rest.into_iter().partition(|c| c.depends_on.iter().all(|d| done.contains(d)));
        for c in &ready {
            done.insert(c.key.clone());
        }
        out.extend(ready);
        rest = blocked;
        if rest.len() == before {
            // A cycle would be a bug in the planner; keep going rather than lose changes.
            out.append(&mut rest);
        }
    }
    *changes = out;
}
