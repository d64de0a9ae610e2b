//! A fleet rollout's record and its decisions (pure). The record is what
//! the state store keeps (`<fleet store>/rollout.json`): the target, the
//! stages as planned (their settings copied in, so editing `fleet.yaml`
//! mid-rollout cannot reorder what already ran), and every cluster's state
//! with the images and versions it had before and is moving to.
//!
//! ```text
//! FleetPlan ─▶ FleetRollout::new ─▶ decide(record, windows, approvals, now) ─▶ Decision
//!                     ▲                                                          │
//!                     └──────────── the driver (fleet::run) carries it out ◀────┘
//! ```
//!
//! [`decide`] says what may start now, which stage gate to run, when to
//! look again, and for every cluster that is not moving, why not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{FleetPlan, Target};
use crate::spec::IntOrPercent;

/// What a cluster runs (before) or moves to (after): each group's image and
/// launch-template version, and the Kubernetes version.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// Group → AMI id.
    #[serde(default)]
    pub images: BTreeMap<String, String>,
    /// Group → launch-template version (before a roll; empty in targets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub launch_template_versions: BTreeMap<String, i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
}

impl Snapshot {
    /// This target as the whole of what the cluster runs after it: what the
    /// target does not change (the Kubernetes version of an image rollout,
    /// a group it leaves alone) is the cluster's present. Shown beside
    /// `from`, both sides read the same way.
    pub fn over(&self, present: &Snapshot) -> Snapshot {
        let mut images = present.images.clone();
        images.extend(self.images.clone());
        Snapshot {
            images,
            launch_template_versions: BTreeMap::new(),
            kubernetes_version: self.kubernetes_version.clone().or_else(|| present.kubernetes_version.clone()),
        }
    }

    /// One line: `ami-1 (general, control-plane) · 1.33.4`.
    pub fn summary(&self) -> String {
        let mut by: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (g, i) in &self.images {
            by.entry(i).or_default().push(g);
        }
        let mut parts: Vec<String> = match by.len() {
            0 => vec![],
            1 => by.keys().map(|i| i.to_string()).collect(),
            _ => by.iter().map(|(i, gs)| format!("{i} ({})", gs.join(", "))).collect(),
        };
        parts.extend(self.kubernetes_version.clone());
        if parts.is_empty() {
            "-".into()
        } else {
            parts.join(" · ")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum ClusterState {
    Pending,
    Rolling,
    Done,
    Failed(String),
    Reverted,
    RevertFailed(String),
}

impl fmt::Display for ClusterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterState::Pending => f.write_str("pending"),
            ClusterState::Rolling => f.write_str("rolling"),
            ClusterState::Done => f.write_str("done"),
            ClusterState::Failed(_) => f.write_str("failed"),
            ClusterState::Reverted => f.write_str("reverted"),
            ClusterState::RevertFailed(_) => f.write_str("revert failed"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRun {
    pub name: String,
    pub region: String,
    pub canary: bool,
    pub state: ClusterState,
    /// Rolls started (a run killed mid-roll starts it again).
    #[serde(default)]
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// What it ran when its roll started (what `revert` goes back to).
    #[serde(default)]
    pub from: Snapshot,
    pub to: Snapshot,
    /// Why the last start was put off (another run held the cluster's lock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_until: Option<DateTime<Utc>>,
    /// What its machines run now, read when the rollout ended with it
    /// failed: each group's images with how many machines run each (a
    /// failed roll leaves a group on mixed images).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
}

impl ClusterRun {
    /// Touched by the rollout: rolled, rolling, or failed part-way.
    pub fn touched(&self) -> bool {
        matches!(self.state, ClusterState::Rolling | ClusterState::Done | ClusterState::Failed(_))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageRun {
    pub name: String,
    pub selector: String,
    #[serde(with = "secs")]
    pub soak: Duration,
    /// A count or a percentage of the stage's clusters (`1`, `10%`).
    pub max_failures: String,
    pub approval: bool,
    pub canary: bool,
    /// How many of its clusters roll at once (all when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    pub clusters: Vec<ClusterRun>,
    /// When its last cluster finished rolling (the soak starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_at: Option<DateTime<Utc>>,
    /// When its gate passed (the next stage may start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed_at: Option<DateTime<Utc>>,
    /// Its gate could not say pass or fail (an inconclusive analysis): the
    /// stage waits for a person (`approve STAGE.gate`) and says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<String>,
}

mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

impl StageRun {
    /// Failures it may take: `maxFailures` of its cluster count (rounded down).
    pub fn budget(&self) -> u32 {
        self.max_failures.parse::<IntOrPercent>().map(|m| m.resolve_down(self.clusters.len() as u32)).unwrap_or(0)
    }

    pub fn failed(&self) -> Vec<&ClusterRun> {
        self.clusters.iter().filter(|c| matches!(c.state, ClusterState::Failed(_))).collect()
    }

    /// When its soak ends (once rolled).
    pub fn soak_until(&self) -> Option<DateTime<Utc>> {
        self.rolled_at.map(|t| t + chrono::Duration::from_std(self.soak).unwrap_or_default())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum RolloutState {
    Running,
    Done,
    /// Every stage went through, but clusters failed within their stages'
    /// failure budgets: they are not on the target. A budget lets the
    /// rollout go on; it never makes a failed cluster a success.
    FinishedWithFailures(String),
    Halted(String),
    Reverted,
}

impl fmt::Display for RolloutState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RolloutState::Running => f.write_str("running"),
            RolloutState::Done => f.write_str("done"),
            RolloutState::FinishedWithFailures(why) => write!(f, "finished with failures: {why}"),
            RolloutState::Halted(why) => write!(f, "halted: {why}"),
            RolloutState::Reverted => f.write_str("reverted"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetRollout {
    /// Numbered in the fleet's store (`rollouts/NNNNNNNN.json` once finished).
    pub number: u64,
    pub target: Target,
    pub created_at: DateTime<Utc>,
    pub by: String,
    pub state: RolloutState,
    pub stages: Vec<StageRun>,
    #[serde(default)]
    pub unstaged: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
}

impl FleetRollout {
    /// A new record from a plan; `to` is each cluster's target snapshot.
    pub fn new(
        number: u64,
        plan: &FleetPlan,
        spec: &super::FleetSpec,
        to: &BTreeMap<String, Snapshot>,
        by: &str,
        now: DateTime<Utc>,
    ) -> FleetRollout {
        let stages = plan
            .stages
            .iter()
            .map(|s| {
                let st = spec.stages.iter().find(|x| x.name == s.name);
                StageRun {
                    name: s.name.clone(),
                    selector: s.selector.clone(),
                    soak: s.soak,
                    max_failures: s.max_failures.clone(),
                    approval: s.approval,
                    canary: st.is_some_and(|x| x.canary),
                    max_parallel: st.and_then(|x| x.max_parallel),
                    clusters: s
                        .clusters
                        .iter()
                        .map(|p| ClusterRun {
                            name: p.cluster.clone(),
                            region: p.region.clone(),
                            canary: p.canary,
                            state: ClusterState::Pending,
                            attempts: 0,
                            started_at: None,
                            finished_at: None,
                            from: Snapshot::default(),
                            to: to.get(&p.cluster).cloned().unwrap_or_default(),
                            blocked: None,
                            blocked_until: None,
                            runs: None,
                        })
                        .collect(),
                    rolled_at: None,
                    passed_at: None,
                    held: None,
                }
            })
            .collect();
        FleetRollout {
            number,
            target: plan.target.clone(),
            created_at: now,
            by: by.to_string(),
            state: RolloutState::Running,
            stages,
            unstaged: plan.unstaged.clone(),
            finished_at: None,
        }
    }

    pub fn cluster_mut(&mut self, name: &str) -> Option<&mut ClusterRun> {
        self.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()).find(|c| c.name == name)
    }

    pub fn clusters(&self) -> impl Iterator<Item = (&StageRun, &ClusterRun)> {
        self.stages.iter().flat_map(|s| s.clusters.iter().map(move |c| (s, c)))
    }

    /// After a run was killed: clusters it left rolling start again (a roll
    /// picks up where it stopped). Returns their names.
    pub fn resume(&mut self) -> Vec<String> {
        let mut again = Vec::new();
        for c in self.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()) {
            if c.state == ClusterState::Rolling {
                c.state = ClusterState::Pending;
                again.push(c.name.clone());
            }
        }
        again
    }

    /// The clusters that failed, each with why and what it runs now: the
    /// last word of a rollout that went through with failures.
    pub fn failures(&self) -> Option<String> {
        let failed: Vec<String> = self
            .clusters()
            .filter_map(|(_, c)| match &c.state {
                ClusterState::Failed(e) => {
                    let e = one_line(e);
                    Some(match &c.runs {
                        Some(runs) => format!("{} (failed: {e}; its machines run {runs})", c.name),
                        None => format!("{} (failed: {e})", c.name),
                    })
                }
                _ => None,
            })
            .collect();
        match failed.len() {
            0 => None,
            1 => Some(format!("1 cluster failed and is not on the target: {}", failed[0])),
            n => Some(format!("{n} clusters failed and are not on the target: {}", failed.join(", "))),
        }
    }

    /// Whether any cluster failed, in any stage.
    pub fn any_failed(&self) -> bool {
        self.clusters().any(|(_, c)| matches!(c.state, ClusterState::Failed(_)))
    }

    pub fn is_finished(&self) -> bool {
        self.state != RolloutState::Running
    }

    /// Whether `stage` can be approved: the rollout runs, has it, and it asks for approval.
    pub fn approvable(&self, stage: &str) -> Result<(), String> {
        if self.is_finished() {
            return Err(format!("fleet rollout #{} is {}: nothing to approve", self.number, self.state));
        }
        match self.stages.iter().find(|s| s.name == stage) {
            None => Err(format!(
                "fleet rollout #{} has no stage {stage} (its stages: {})",
                self.number,
                self.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ")
            )),
            Some(s) if !s.approval => {
                Err(format!("stage {stage} does not need an approval (fleet.yaml: approval: false)"))
            }
            Some(_) => Ok(()),
        }
    }
}

/// Why a cluster is not moving now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "why")]
pub enum Why {
    /// Outside every maintenance window it has; opens again then.
    WindowClosed { next: Option<DateTime<Utc>> },
    /// An earlier stage is not through yet.
    StageGate { stage: String, waiting: StageWait },
    /// Its stage needs `fleet rollout approve STAGE`.
    ApprovalMissing { stage: String },
    /// The stage's canary cluster rolls (and passes) first.
    CanaryFirst { canary: String },
    /// The stage rolls this many clusters at once.
    Parallel { max: u32 },
    /// Another run holds the cluster's lock.
    LockHeld { holder: String, retry: DateTime<Utc> },
    /// The rollout is halted (the failure budget is spent, or a canary failed).
    Halted { reason: String },
}

/// Where a stage stands when a later one waits for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "step")]
pub enum StageWait {
    Rolling {
        left: usize,
    },
    Soaking {
        until: DateTime<Utc>,
    },
    Gate,
    Approval,
    /// Its gate was inconclusive: a person decides (`approve STAGE.gate`).
    Held {
        reason: String,
    },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |t: &DateTime<Utc>| t.format("%a %Y-%m-%d %H:%M UTC").to_string();
        match self {
            Why::WindowClosed { next: Some(t) } => write!(f, "maintenance window closed; next opening {}", at(t)),
            Why::WindowClosed { next: None } => f.write_str("maintenance window closed; no opening in the next year"),
            Why::StageGate { stage, waiting } => match waiting {
                StageWait::Rolling { left } => write!(f, "stage gate: {stage} still rolling ({left} left)"),
                StageWait::Soaking { until } => write!(f, "stage gate: {stage} soaking until {}", at(until)),
                StageWait::Gate => write!(f, "stage gate: {stage}'s end-to-end gate runs"),
                StageWait::Approval => write!(f, "stage gate: {stage} waits for its approval"),
                StageWait::Held { reason } => {
                    write!(f, "stage gate: {stage}'s gate was inconclusive ({reason}); approve {stage}.gate to go on")
                }
            },
            Why::ApprovalMissing { stage } => {
                write!(f, "approval missing: pinfleet fleet rollout approve {stage}")
            }
            Why::CanaryFirst { canary } => write!(f, "the stage's canary {canary} goes first"),
            Why::Parallel { max } => write!(f, "the stage rolls {max} at a time"),
            Why::LockHeld { holder, retry } => write!(f, "lock held: {holder}; retried {}", at(retry)),
            Why::Halted { reason } => write!(f, "halted: {reason}"),
        }
    }
}

/// What the driver does next.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Clusters to start rolling now.
    pub start: Vec<String>,
    /// A stage whose clusters have all finished rolling: its soak starts now.
    pub rolled: Option<usize>,
    /// A stage whose soak is over: run its end-to-end gate.
    pub gate: Option<usize>,
    /// A stage whose inconclusive gate a person approved: it passes now.
    pub promote: Option<usize>,
    /// The earliest time something changes by itself (a window, a soak).
    pub wake: Option<DateTime<Utc>>,
    /// Every cluster not moving, and why.
    pub why: BTreeMap<String, Why>,
    /// The failure budget is spent (or a canary failed): halt everything.
    pub halt: Option<String>,
    /// Every stage passed.
    pub finished: bool,
}

/// The approval that lets a stage whose gate was inconclusive go on.
pub fn gate_approval(stage: &str) -> String {
    format!("{stage}.gate")
}

/// When a cluster's windows allow it: open now, or the next opening.
pub trait Windows {
    fn open(&self, cluster: &str, now: DateTime<Utc>) -> Result<(), Option<DateTime<Utc>>>;
}

/// No windows: always open.
pub struct Always;

impl Windows for Always {
    fn open(&self, _: &str, _: DateTime<Utc>) -> Result<(), Option<DateTime<Utc>>> {
        Ok(())
    }
}

impl Windows for (&super::FleetSpec, &[super::Member]) {
    fn open(&self, cluster: &str, now: DateTime<Utc>) -> Result<(), Option<DateTime<Utc>>> {
        let Some(m) = self.1.iter().find(|m| m.name == cluster) else { return Ok(()) };
        let ws = super::windows_for(self.0, m);
        if ws.is_empty() || ws.iter().any(|w| w.contains(now)) {
            return Ok(());
        }
        Err(ws.iter().filter_map(|w| w.next_open(now)).min())
    }
}

fn earliest(a: Option<DateTime<Utc>>, b: DateTime<Utc>) -> Option<DateTime<Utc>> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The next step of a running rollout at `now` (pure).
pub fn decide(r: &FleetRollout, windows: &dyn Windows, approved: &BTreeSet<String>, now: DateTime<Utc>) -> Decision {
    let mut d = Decision::default();
    if let RolloutState::Halted(reason) = &r.state {
        for (_, c) in r.clusters().filter(|(_, c)| c.state == ClusterState::Pending) {
            d.why.insert(c.name.clone(), Why::Halted { reason: reason.clone() });
        }
        d.halt = Some(reason.clone());
        return d;
    }
    let Some(current) = r.stages.iter().position(|s| s.passed_at.is_none()) else {
        d.finished = true;
        return d;
    };
    let stage = &r.stages[current];
    // The failure budget, and the canary, before anything else.
    let failed = stage.failed();
    let canary_failed = failed.iter().find(|c| c.canary);
    if let Some(c) = canary_failed {
        d.halt = Some(format!("stage {}: the canary {} failed", stage.name, c.name));
    } else if failed.len() as u32 > stage.budget() {
        d.halt = Some(format!(
            "stage {}: {} of {} clusters failed (maxFailures {} allows {}): {}",
            stage.name,
            failed.len(),
            stage.clusters.len(),
            stage.max_failures,
            stage.budget(),
            failed.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(reason) = &d.halt {
        for (_, c) in r.clusters().filter(|(_, c)| c.state == ClusterState::Pending) {
            d.why.insert(c.name.clone(), Why::Halted { reason: reason.clone() });
        }
        return d;
    }
    // Later stages wait for this one.
    let rolling = stage.clusters.iter().filter(|c| c.state == ClusterState::Rolling).count();
    let pending: Vec<&ClusterRun> = stage.clusters.iter().filter(|c| c.state == ClusterState::Pending).collect();
    let needs_approval = stage.approval && !approved.contains(&stage.name);
    let gate_approved = approved.contains(&gate_approval(&stage.name));
    let waiting = if needs_approval {
        StageWait::Approval
    } else if let Some(reason) = stage.held.as_ref().filter(|_| !gate_approved) {
        StageWait::Held { reason: reason.clone() }
    } else if !pending.is_empty() || rolling > 0 {
        StageWait::Rolling { left: pending.len() + rolling }
    } else {
        match stage.soak_until() {
            Some(until) if until > now => StageWait::Soaking { until },
            _ => StageWait::Gate,
        }
    };
    for s in &r.stages[current + 1..] {
        for c in &s.clusters {
            d.why.insert(c.name.clone(), Why::StageGate { stage: stage.name.clone(), waiting: waiting.clone() });
        }
    }
    if needs_approval {
        for c in &pending {
            d.why.insert(c.name.clone(), Why::ApprovalMissing { stage: stage.name.clone() });
        }
        return d;
    }
    if pending.is_empty() && rolling == 0 {
        match (stage.rolled_at, &waiting) {
            (None, _) => d.rolled = Some(current),
            // A held gate waits for a person: nothing wakes it.
            (Some(_), StageWait::Held { .. }) => {}
            (Some(_), _) if stage.held.is_some() => d.promote = Some(current),
            (Some(_), StageWait::Soaking { until }) => d.wake = Some(*until),
            (Some(_), _) => d.gate = Some(current),
        }
        return d;
    }
    // Who may start: the canary alone first, then up to maxParallel.
    let canary = stage.clusters.iter().find(|c| c.canary && c.state != ClusterState::Done);
    let mut slots = stage.max_parallel.map_or(usize::MAX, |m| (m as usize).saturating_sub(rolling));
    for c in pending {
        if let Some(k) = canary.filter(|k| k.name != c.name) {
            d.why.insert(c.name.clone(), Why::CanaryFirst { canary: k.name.clone() });
            continue;
        }
        if let (Some(holder), Some(retry)) = (&c.blocked, c.blocked_until) {
            if retry > now {
                d.why.insert(c.name.clone(), Why::LockHeld { holder: holder.clone(), retry });
                d.wake = earliest(d.wake, retry);
                continue;
            }
        }
        if let Err(next) = windows.open(&c.name, now) {
            d.why.insert(c.name.clone(), Why::WindowClosed { next });
            if let Some(t) = next {
                d.wake = earliest(d.wake, t);
            }
            continue;
        }
        if slots == 0 {
            d.why.insert(c.name.clone(), Why::Parallel { max: stage.max_parallel.unwrap_or(0) });
            continue;
        }
        slots -= 1;
        d.start.push(c.name.clone());
    }
    d
}

/// A reason on one line (an error's own newlines would break a table row).
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::{plan, FleetSpec, Member};
    use chrono::TimeZone;

    fn m(name: &str, env: &str) -> Member {
        Member { name: name.into(), labels: [("env".to_string(), env.to_string())].into(), region: "us-east-1".into() }
    }

    fn record(spec: &FleetSpec, members: &[Member]) -> FleetRollout {
        let now = Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap();
        let p = plan(spec, members, &Target::Ami("ami-new".into()), &BTreeMap::new(), now);
        FleetRollout::new(1, &p, spec, &BTreeMap::new(), "me", now)
    }

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap()
    }

    #[test]
    fn a_target_reads_like_what_it_replaces() {
        let from = Snapshot {
            images: [("general".to_string(), "ami-old".to_string()), ("gpu".to_string(), "ami-gpu".to_string())].into(),
            launch_template_versions: [("general".to_string(), 3)].into(),
            kubernetes_version: Some("1.36.2".into()),
        };
        let image = Snapshot { images: [("general".to_string(), "ami-new".to_string())].into(), ..Default::default() };
        assert_eq!(from.summary(), "ami-gpu (gpu) · ami-old (general) · 1.36.2");
        assert_eq!(image.over(&from).summary(), "ami-gpu (gpu) · ami-new (general) · 1.36.2");
        let version = Snapshot { kubernetes_version: Some("1.37.0".into()), ..Default::default() };
        assert_eq!(version.over(&from).summary(), "ami-gpu (gpu) · ami-old (general) · 1.37.0");
    }

    #[test]
    fn one_stage_at_a_time_soak_then_gate() {
        let spec = FleetSpec::parse(
            "stages:\n  - {name: dev, selector: env=dev, soak: 1h}\n  - {name: prod, selector: env=prod, soak: 0s, canary: true, maxFailures: 1}\n",
        )
        .unwrap();
        let members = [m("d1", "dev"), m("p1", "prod"), m("p2", "prod"), m("p3", "prod")];
        let mut r = record(&spec, &members);
        let none = BTreeSet::new();
        let d = decide(&r, &Always, &none, t0());
        assert_eq!(d.start, ["d1"]);
        assert!(
            matches!(&d.why["p1"], Why::StageGate { stage, waiting: StageWait::Rolling { left: 1 } } if stage == "dev")
        );
        r.cluster_mut("d1").unwrap().state = ClusterState::Done;
        assert_eq!(decide(&r, &Always, &none, t0()).rolled, Some(0));
        r.stages[0].rolled_at = Some(t0());
        let d = decide(&r, &Always, &none, t0() + chrono::Duration::minutes(20));
        assert_eq!(d.wake, Some(t0() + chrono::Duration::hours(1)));
        assert_eq!(d.why["p2"].to_string(), "stage gate: dev soaking until Mon 2026-11-23 01:00 UTC");
        let d = decide(&r, &Always, &none, t0() + chrono::Duration::hours(1));
        assert_eq!(d.gate, Some(0));
        r.stages[0].passed_at = Some(t0() + chrono::Duration::hours(1));
        // The canary (first in order: p1) alone, then the rest at once.
        let d = decide(&r, &Always, &none, t0() + chrono::Duration::hours(1));
        assert_eq!(d.start, ["p1"]);
        assert_eq!(d.why["p2"], Why::CanaryFirst { canary: "p1".into() });
        r.cluster_mut("p1").unwrap().state = ClusterState::Done;
        assert_eq!(decide(&r, &Always, &none, t0()).start, ["p2", "p3"]);
    }

    #[test]
    fn failures_beyond_max_failures_halt_the_whole_rollout() {
        let spec = FleetSpec::parse(
            "stages:\n  - {name: prod, selector: env=prod, maxFailures: \"34%\"}\n  - {name: late, selector: env=late}\n",
        )
        .unwrap();
        let members = [m("p1", "prod"), m("p2", "prod"), m("p3", "prod"), m("l1", "late")];
        let mut r = record(&spec, &members);
        let none = BTreeSet::new();
        // 34% of 3 is one failure: the stage goes on.
        r.cluster_mut("p1").unwrap().state = ClusterState::Failed("gate".into());
        r.cluster_mut("p2").unwrap().state = ClusterState::Rolling;
        let d = decide(&r, &Always, &none, t0());
        assert_eq!((d.halt.as_deref(), d.start.as_slice()), (None, ["p3".to_string()].as_slice()));
        // A second one halts everything, naming both.
        r.cluster_mut("p2").unwrap().state = ClusterState::Failed("boot".into());
        let d = decide(&r, &Always, &none, t0());
        let halt = d.halt.unwrap();
        assert!(halt.contains("2 of 3 clusters failed") && halt.contains("p1, p2"), "{halt}");
        assert!(d.start.is_empty());
        assert!(matches!(d.why["l1"], Why::Halted { .. }) && matches!(d.why["p3"], Why::Halted { .. }));
    }

    #[test]
    fn approvals_windows_and_held_locks_explain_themselves() {
        let spec = FleetSpec::parse(
            "stages:\n  - {name: prod, selector: env=prod, approval: true, maxParallel: 1}\nwindows:\n  - {cluster: p2, window: \"Tue 02:00-05:00 America/Los_Angeles\"}\n",
        )
        .unwrap();
        let members = [m("p1", "prod"), m("p2", "prod"), m("p3", "prod")];
        let mut r = record(&spec, &members);
        let w = (&spec, &members[..]);
        let d = decide(&r, &w, &BTreeSet::new(), t0());
        assert!(d.start.is_empty());
        assert_eq!(d.why["p1"].to_string(), "approval missing: pinfleet fleet rollout approve prod");
        let approved: BTreeSet<String> = ["prod".to_string()].into();
        r.cluster_mut("p1").unwrap().blocked = Some("ops@host (pid 7, `pinfleet upgrade p1`)".into());
        r.cluster_mut("p1").unwrap().blocked_until = Some(t0() + chrono::Duration::minutes(1));
        let d = decide(&r, &w, &approved, t0());
        // p1 is locked, p2 outside its window (Tue 02:00 PST = 10:00 UTC), p3 starts.
        assert_eq!(d.start, ["p3"]);
        assert!(d.why["p1"].to_string().starts_with("lock held: ops@host"));
        assert_eq!(
            d.why["p2"],
            Why::WindowClosed { next: Some(Utc.with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap()) }
        );
        assert_eq!(d.wake, Some(t0() + chrono::Duration::minutes(1)));
        r.cluster_mut("p3").unwrap().state = ClusterState::Rolling;
        let d = decide(&r, &w, &approved, t0() + chrono::Duration::minutes(2));
        assert_eq!(d.why["p1"], Why::Parallel { max: 1 });
    }

    #[test]
    fn an_inconclusive_gate_holds_its_stage_until_a_person_approves_it() {
        let spec = FleetSpec::parse(
            "stages:\n  - {name: canary, selector: env=c, soak: 0s}\n  - {name: rest, selector: env=r}\n",
        )
        .unwrap();
        let mut r = record(&spec, &[m("c1", "c"), m("r1", "r")]);
        r.cluster_mut("c1").unwrap().state = ClusterState::Done;
        r.stages[0].rolled_at = Some(t0());
        r.stages[0].held = Some("c1: no data".into());
        let d = decide(&r, &Always, &BTreeSet::new(), t0());
        assert_eq!((d.gate, d.promote, d.wake), (None, None, None), "nothing moves by itself");
        assert_eq!(
            d.why["r1"].to_string(),
            "stage gate: canary's gate was inconclusive (c1: no data); approve canary.gate to go on"
        );
        let d = decide(&r, &Always, &[gate_approval("canary")].into(), t0());
        assert_eq!(d.promote, Some(0));
    }

    #[test]
    fn a_killed_run_starts_its_rolling_clusters_again() {
        let spec = FleetSpec::default_stages();
        let mut r = record(&spec, &[m("d1", "dev"), m("d2", "dev")]);
        r.cluster_mut("d1").unwrap().state = ClusterState::Rolling;
        r.cluster_mut("d2").unwrap().state = ClusterState::Done;
        let text = serde_json::to_string(&r).unwrap();
        let mut back: FleetRollout = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.resume(), ["d1"]);
        assert_eq!(decide(&back, &Always, &BTreeSet::new(), t0()).start, ["d1"]);
    }
}
