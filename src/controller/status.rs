//! Workload status from its children (pure): the conditions Ready,
//! Progressing, Degraded and Reconciled (Succeeded for batch kinds), with
//! replica and shard counts, computed the way `kubectl rollout status`
//! judges a rollout.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::Value;

use crate::workloads::render::Kind;
use crate::workloads::{ChildRef, ShardStatus, WorkloadStatus};

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    pub ready: bool,
    pub progressing: bool,
    pub degraded: bool,
    /// Batch kinds: Some(true) succeeded, Some(false) failed, None running.
    pub succeeded: Option<bool>,
    pub reason: String,
    pub message: String,
    pub replicas: Option<i64>,
    pub ready_replicas: Option<i64>,
    pub updated_replicas: Option<i64>,
    pub shards: Option<ShardStatus>,
    /// Every child with whether it is ready, for `status.children`.
    pub children: Vec<ChildRef>,
}

fn i(v: &Value, p: &str) -> i64 {
    v.pointer(p).and_then(Value::as_i64).unwrap_or(0)
}

fn cond(v: &Value, t: &str) -> Option<bool> {
    v.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == t).map(|c| c["status"] == "True")
}

fn rollout(primary: &Value, want: i64) -> Summary {
    let observed = i(primary, "/status/observedGeneration") >= i(primary, "/metadata/generation");
    let updated = i(primary, "/status/updatedReplicas").max(i(primary, "/status/updatedNumberScheduled"));
    let ready = i(primary, "/status/readyReplicas").max(i(primary, "/status/numberReady"));
    let total = i(primary, "/status/replicas").max(i(primary, "/status/currentNumberScheduled"));
    let done = observed && updated >= want && total == want && ready >= want;
    Summary {
        ready: done,
        progressing: !done,
        degraded: observed && ready < want && updated >= want,
        succeeded: None,
        reason: if done {
            "Available".into()
        } else if !observed {
            "Reconciling".into()
        } else {
            "RollingOut".into()
        },
        message: format!("{ready}/{want} ready, {updated} updated"),
        replicas: Some(total),
        ready_replicas: Some(ready),
        updated_replicas: Some(updated),
        shards: None,
        children: vec![],
    }
}

fn batch(jobs: &[&Value]) -> Summary {
    let failed = jobs.iter().any(|j| cond(j, "Failed") == Some(true));
    let complete = !jobs.is_empty() && jobs.iter().all(|j| cond(j, "Complete") == Some(true));
    let total: i64 = jobs.iter().map(|j| i(j, "/spec/completions")).sum();
    let succeeded: i64 = jobs.iter().map(|j| i(j, "/status/succeeded")).sum();
    let active: i64 = jobs.iter().map(|j| i(j, "/status/active")).sum();
    let failed_pods: i64 = jobs.iter().map(|j| i(j, "/status/failed")).sum();
    let failed_indexes: Vec<String> = jobs
        .iter()
        .filter_map(|j| j.pointer("/status/failedIndexes").and_then(Value::as_str).map(str::to_string))
        .filter(|s| !s.is_empty())
        .collect();
    Summary {
        ready: complete,
        progressing: !complete && !failed,
        degraded: failed || failed_pods > 0,
        succeeded: if complete {
            Some(true)
        } else if failed {
            Some(false)
        } else {
            None
        },
        reason: if complete {
            "Completed".into()
        } else if failed {
            "Failed".into()
        } else {
            "Running".into()
        },
        message: format!("{succeeded}/{total} shards succeeded, {active} active"),
        replicas: None,
        ready_replicas: None,
        updated_replicas: None,
        shards: Some(ShardStatus {
            total: total as i32,
            active: active as i32,
            succeeded: succeeded as i32,
            failed: failed_pods as i32,
            failed_indexes: failed_indexes.join(","),
        }),
        children: vec![],
    }
}

/// Whether a workload's status reads this child kind's status (the
/// controller reconciles on those children's status changes only).
pub fn reads_status(kind: &str) -> bool {
    crate::kube::ready::ReadyKind::of(kind).is_some() || matches!(kind, "PersistentVolumeClaim" | "CronJob")
}

/// Whether one child is ready: a controller has rolled it out, a Job has
/// completed, a CronJob or config object exists.
fn child_ready(c: &Value) -> bool {
    use crate::kube::ready::{ready, ReadyKind};
    match c["kind"].as_str() {
        Some("PersistentVolumeClaim") => c.pointer("/status/phase").and_then(Value::as_str) == Some("Bound"),
        // The platform's one set of rules; what they do not cover exists, so is ready.
        Some(kind) => ReadyKind::of(kind).is_none_or(|k| ready(k, c).is_ok()),
        None => true,
    }
}

/// The summary of a workload of `kind` whose spec wants `want` replicas.
pub fn summarize(kind: Kind, want: i64, children: &[Value]) -> Summary {
    let listed = children
        .iter()
        .map(|c| ChildRef {
            kind: c["kind"].as_str().unwrap_or_default().to_string(),
            name: c["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            ready: child_ready(c),
        })
        .collect();
    Summary { children: listed, ..summarize_primary(kind, want, children) }
}

fn summarize_primary(kind: Kind, want: i64, children: &[Value]) -> Summary {
    fn of<'a>(children: &'a [Value], k: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        children.iter().filter(move |c| c["kind"] == k)
    }
    match kind {
        Kind::Service => of(children, "Deployment").next().map(|d| rollout(d, want)).unwrap_or_default(),
        Kind::StatefulSet => of(children, "StatefulSet").next().map(|d| rollout(d, want)).unwrap_or_default(),
        Kind::Daemon => of(children, "DaemonSet")
            .next()
            .map(|d| {
                let desired = i(d, "/status/desiredNumberScheduled");
                rollout(d, desired)
            })
            .unwrap_or_default(),
        Kind::JobSet | Kind::TrainingJob => batch(&of(children, "Job").collect::<Vec<_>>()),
        Kind::CronJob => {
            let cj = of(children, "CronJob").next();
            Summary {
                ready: cj.is_some(),
                reason: if cj.is_some() { "Scheduled".into() } else { "Reconciling".into() },
                message: cj
                    .and_then(|c| c.pointer("/status/lastScheduleTime"))
                    .and_then(Value::as_str)
                    .map(|t| format!("last run {t}"))
                    .unwrap_or_else(|| "not run yet".into()),
                ..Default::default()
            }
        }
    }
}

/// What one reconcile saw, from which the status is written.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub kind: Kind,
    pub generation: i64,
    pub summary: &'a Summary,
    /// Whether the children were applied, or the refusal (render or API server).
    pub reconciled: Result<(), String>,
    pub now: Time,
    pub profile: &'a str,
    /// The pods' label selector (for the scale subresource).
    pub selector: &'a str,
}

/// The typed status (the type that also generates the CRD's schema):
/// conditions, keeping the transition time of a condition whose status did
/// not change, and counts.
pub fn status(o: &Observation, previous: Option<&WorkloadStatus>) -> WorkloadStatus {
    let since = |t: &str, s: &str| {
        previous
            .and_then(|p| p.conditions.iter().find(|c| c.type_ == t && c.status == s))
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| o.now.clone())
    };
    let c = |t: &str, ok: bool, reason: &str, message: &str| {
        let status = if ok { "True" } else { "False" };
        Condition {
            type_: t.to_string(),
            status: status.to_string(),
            // The API requires a reason (CamelCase, non-empty).
            reason: if reason.is_empty() { t.to_string() } else { reason.to_string() },
            message: message.to_string(),
            observed_generation: Some(o.generation),
            last_transition_time: since(t, status),
        }
    };
    let summary = o.summary;
    let mut conditions = vec![];
    match &o.reconciled {
        Ok(()) => conditions.push(c("Reconciled", true, "Applied", "children applied")),
        Err(e) => conditions.push(c("Reconciled", false, "ApplyFailed", e)),
    }
    if matches!(o.kind, Kind::JobSet | Kind::TrainingJob) {
        conditions.push(c("Succeeded", summary.succeeded == Some(true), &summary.reason, &summary.message));
    }
    let applied = o.reconciled.is_ok();
    conditions.push(c(
        "Ready",
        summary.ready && applied,
        if applied { &summary.reason } else { "ApplyFailed" },
        &summary.message,
    ));
    conditions.push(c("Progressing", summary.progressing, &summary.reason, &summary.message));
    conditions.push(c("Degraded", summary.degraded, &summary.reason, &summary.message));
    WorkloadStatus {
        observed_generation: Some(o.generation),
        conditions,
        replicas: summary.replicas.map(|r| r as i32),
        ready_replicas: summary.ready_replicas.map(|r| r as i32),
        updated_replicas: summary.updated_replicas.map(|r| r as i32),
        selector: summary.replicas.map(|_| o.selector.to_string()),
        shards: summary.shards.clone(),
        runtime_profile: Some(o.profile.to_string()),
        last_schedule_time: None,
        last_successful_time: None,
        children: summary.children.clone(),
    }
}

/// An event to record on the workload: a condition changed status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub condition: String,
    pub reason: String,
    pub note: String,
    pub warning: bool,
}

/// The conditions whose status differs between `previous` and `next`
/// status documents, as events: a condition turning bad (Ready, Reconciled
/// or Succeeded False, Degraded True) is a warning. Progressing is left out
/// (it flips on every rollout and Ready already tells the story). A
/// resync that changes nothing yields nothing.
pub fn transitions(previous: Option<&WorkloadStatus>, next: &WorkloadStatus) -> Vec<Transition> {
    let status_of =
        |t: &str| previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == t)).map(|c| c.status.as_str());
    let mut out = vec![];
    for c in &next.conditions {
        let (t, now) = (c.type_.as_str(), c.status.as_str());
        if t == "Progressing" || status_of(t) == Some(now) {
            continue;
        }
        // A fresh workload's "not ready yet" is not news.
        if previous.is_none() && t != "Reconciled" && now == "False" {
            continue;
        }
        let bad = if t == "Degraded" { now == "True" } else { now == "False" };
        out.push(Transition {
            condition: t.to_string(),
            reason: if c.reason.is_empty() { t.to_string() } else { c.reason.clone() },
            note: format!("{t}={now}: {}", c.message),
            warning: bad,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_finished_rollout_is_ready() {
        let d = json!({"kind": "Deployment", "metadata": {"generation": 2}, "status": {"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3}});
        let s = summarize(Kind::Service, 3, &[d]);
        assert!(s.ready && !s.progressing && !s.degraded);
        let rolling = json!({"kind": "Deployment", "metadata": {"generation": 3}, "status": {"observedGeneration": 3, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3}});
        let s = summarize(Kind::Service, 3, &[rolling]);
        assert!(!s.ready && s.progressing);
    }

    #[test]
    fn batch_success_and_failure() {
        let ok = json!({"kind": "Job", "spec": {"completions": 4}, "status": {"succeeded": 4, "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(summarize(Kind::JobSet, 0, &[ok]).succeeded, Some(true));
        let bad = json!({"kind": "Job", "spec": {"completions": 4}, "status": {"failed": 2, "failedIndexes": "1,3", "conditions": [{"type": "Failed", "status": "True"}]}});
        let s = summarize(Kind::JobSet, 0, &[bad]);
        assert_eq!(s.succeeded, Some(false));
        assert_eq!(s.shards.unwrap().failed_indexes, "1,3");
    }

    #[test]
    fn every_child_is_listed_with_its_readiness() {
        let d = json!({"kind": "Deployment", "metadata": {"name": "home", "generation": 1}, "spec": {"replicas": 2}, "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 1}});
        let sa = json!({"kind": "ServiceAccount", "metadata": {"name": "home"}});
        let summary = summarize(Kind::Service, 2, &[sa, d]);
        let st = status(&observation(&summary, 1, Ok(()), 1), None);
        assert_eq!(
            serde_json::to_value(&st.children).unwrap(),
            json!([{"kind": "ServiceAccount", "name": "home", "ready": true}, {"kind": "Deployment", "name": "home", "ready": false}])
        );
    }

    fn observation(summary: &Summary, generation: i64, reconciled: Result<(), String>, minute: u32) -> Observation<'_> {
        let now: Time = serde_json::from_value(json!(format!("2026-11-22T10:{minute:02}:00Z"))).unwrap();
        Observation { kind: Kind::Service, generation, summary, reconciled, now, profile: "v1", selector: "app=x" }
    }

    #[test]
    fn events_only_for_changed_conditions() {
        let rolling = Summary { progressing: true, reason: "RollingOut".into(), ..Default::default() };
        let first = status(&observation(&rolling, 1, Ok(()), 1), None);
        let names = |ts: Vec<Transition>| ts.into_iter().map(|t| (t.condition, t.warning)).collect::<Vec<_>>();
        assert_eq!(names(transitions(None, &first)), [("Reconciled".to_string(), false)]);
        assert!(transitions(Some(&first), &first).is_empty(), "an unchanged status records nothing");
        let ready = Summary { ready: true, reason: "Available".into(), ..Default::default() };
        let second = status(&observation(&ready, 1, Ok(()), 2), Some(&first));
        assert_eq!(names(transitions(Some(&first), &second)), [("Ready".to_string(), false)]);
        let failed = status(&observation(&ready, 2, Err("denied".into()), 3), Some(&second));
        assert_eq!(
            names(transitions(Some(&second), &failed)),
            [("Reconciled".to_string(), true), ("Ready".to_string(), true)]
        );
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let s = Summary { ready: true, reason: "Available".into(), ..Default::default() };
        let first = status(&observation(&s, 1, Ok(()), 1), None);
        let second = status(&observation(&s, 1, Ok(()), 2), Some(&first));
        assert_eq!(first, second, "an unchanged status is identical, so nothing is written");
    }
}
