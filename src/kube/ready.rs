//! The one set of readiness rules (pure), read from an object's status the
//! way `kubectl rollout status` judges it: the addon installer waits on
//! them, cluster validation (rolls, soaks) checks system and addon
//! workloads with them, and the workload controller reports its children's
//! readiness with them. `Err` says what is still missing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The kinds whose readiness the platform judges, and what "ready" means
/// for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadyKind {
    /// Established.
    CustomResourceDefinition,
    /// Available, with every replica updated.
    Deployment,
    /// Every scheduled pod updated and ready.
    DaemonSet,
    /// Every replica ready.
    StatefulSet,
    /// Complete.
    Job,
}

impl ReadyKind {
    /// The kind of an object, when it is one of these.
    pub fn of(kind: &str) -> Option<ReadyKind> {
        Some(match kind {
            "CustomResourceDefinition" => ReadyKind::CustomResourceDefinition,
            "Deployment" => ReadyKind::Deployment,
            "DaemonSet" => ReadyKind::DaemonSet,
            "StatefulSet" => ReadyKind::StatefulSet,
            "Job" => ReadyKind::Job,
            _ => return None,
        })
    }
}

/// `Ok` when the object is ready; `Err(why not)` otherwise. A failed Job
/// is `Err` too, with the reason, so a wait can stop early.
pub fn ready(kind: ReadyKind, obj: &Value) -> Result<(), String> {
    let status = &obj["status"];
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let generation = int(&obj["metadata"]["generation"]);
    let observed = int(&status["observedGeneration"]);
    let cond = |t: &str| {
        status["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == t)).map(|c| c["status"] == "True")
    };
    let stale = || (generation > observed).then(|| format!("generation {generation} not yet observed (at {observed})"));
    match kind {
        ReadyKind::CustomResourceDefinition => match cond("Established") {
            Some(true) => Ok(()),
            _ => Err("not Established".into()),
        },
        ReadyKind::Deployment => {
            if let Some(s) = stale() {
                return Err(s);
            }
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            let (updated, available) = (int(&status["updatedReplicas"]), int(&status["availableReplicas"]));
            if updated < want || available < want {
                Err(format!("{available}/{want} available, {updated}/{want} updated"))
            } else {
                Ok(())
            }
        }
        ReadyKind::DaemonSet => {
            if let Some(s) = stale() {
                return Err(s);
            }
            let want = int(&status["desiredNumberScheduled"]);
            let (updated, ready) = (int(&status["updatedNumberScheduled"]), int(&status["numberReady"]));
            if updated < want || ready < want {
                Err(format!("{ready}/{want} ready, {updated}/{want} updated"))
            } else {
                Ok(())
            }
        }
        ReadyKind::StatefulSet => {
            if let Some(s) = stale() {
                return Err(s);
            }
            let want = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            let (updated, ready) = (int(&status["updatedReplicas"]), int(&status["readyReplicas"]));
            if updated < want || ready < want {
                Err(format!("{ready}/{want} ready, {updated}/{want} updated"))
            } else {
                Ok(())
            }
        }
        ReadyKind::Job => match (cond("Complete"), cond("Failed")) {
            (Some(true), _) => Ok(()),
            (_, Some(true)) => Err("failed".into()),
            _ => Err(format!(
                "{} of {} completions",
                int(&status["succeeded"]),
                obj["spec"]["completions"].as_i64().unwrap_or(1)
            )),
        },
    }
}

/// Whether waiting longer can help (a failed Job will not complete).
pub fn terminal(kind: ReadyKind, obj: &Value) -> bool {
    kind == ReadyKind::Job && ready(kind, obj).is_err_and(|e| e == "failed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deployments_need_every_replica_available_and_updated() {
        let d = |status: Value| json!({"metadata": {"generation": 2}, "spec": {"replicas": 2}, "status": status});
        assert_eq!(
            ready(ReadyKind::Deployment, &d(json!({"observedGeneration": 1}))),
            Err("generation 2 not yet observed (at 1)".into())
        );
        assert_eq!(
            ready(
                ReadyKind::Deployment,
                &d(json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 1}))
            ),
            Err("1/2 available, 2/2 updated".into())
        );
        assert!(ready(
            ReadyKind::Deployment,
            &d(json!({"observedGeneration": 2, "updatedReplicas": 2, "availableReplicas": 2}))
        )
        .is_ok());
    }

    #[test]
    fn daemonsets_crds_and_jobs() {
        let ds = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 2}});
        assert_eq!(ready(ReadyKind::DaemonSet, &ds), Err("2/3 ready, 3/3 updated".into()));
        let crd = json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert!(ready(ReadyKind::CustomResourceDefinition, &crd).is_ok());
        assert!(ready(ReadyKind::CustomResourceDefinition, &json!({})).is_err());
        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        assert!(terminal(ReadyKind::Job, &failed));
        let done = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert!(ready(ReadyKind::Job, &done).is_ok() && !terminal(ReadyKind::Job, &done));
    }
}
