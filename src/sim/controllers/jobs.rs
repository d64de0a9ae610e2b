//! The Job controller: pods up to parallelism until completions succeed
//! (an index each under Indexed completion), Failed past the backoff
//! limit, and the Job's conditions and counts.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{
    all, controller_uid, i, name, ns, owner_ref, pod_from_template, s, set_status, t, terminating, uid, Controllers,
};
use crate::sim::store::{now, Inner, Propagation};

impl Controllers {
    pub(super) fn jobs(&self, inner: &mut Inner) {
        let job_t = t(inner, "batch", "jobs");
        let pods_t = t(inner, "", "pods");
        for job in all(inner, &job_t).into_iter().filter(|j| !terminating(j)) {
            let done = job.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|c| {
                c.iter().any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
            });
            let pods: Vec<Arc<Value>> = all(inner, &pods_t)
                .into_iter()
                .filter(|p| controller_uid(p).as_deref() == Some(uid(&job).as_str()))
                .collect();
            let indexed = s(&job, "/spec/completionMode") == "Indexed";
            let completions = i(&job, "/spec/completions", if indexed { 1 } else { i(&job, "/spec/parallelism", 1) });
            let parallelism = i(&job, "/spec/parallelism", 1);
            let backoff = i(&job, "/spec/backoffLimit", 6);
            let idx =
                |p: &Value| s(p, "/metadata/annotations/batch.kubernetes.io~1job-completion-index").parse::<i64>().ok();
            let succeeded_idx: std::collections::BTreeSet<i64> =
                pods.iter().filter(|p| s(p, "/status/phase") == "Succeeded").filter_map(|p| idx(p)).collect();
            let succeeded = if indexed {
                succeeded_idx.len() as i64
            } else {
                pods.iter().filter(|p| s(p, "/status/phase") == "Succeeded").count() as i64
            };
            let failed = pods.iter().filter(|p| s(p, "/status/phase") == "Failed").count() as i64;
            let active: Vec<&Value> = pods
                .iter()
                .map(|p| &**p)
                .filter(|p| !matches!(s(p, "/status/phase"), "Succeeded" | "Failed") && !terminating(p))
                .collect();
            let suspended = job.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            let mut conditions = job.pointer("/status/conditions").cloned().unwrap_or(json!([]));
            if !done && !suspended {
                if failed > backoff {
                    conditions = json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit", "lastTransitionTime": now()}]);
                    for p in &active {
                        let _ = inner.delete(&pods_t, &ns(p), &name(p), Propagation::Background, None, false);
                    }
                } else if succeeded >= completions {
                    conditions = json!([
                        {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now()},
                        {"type": "Complete", "status": "True", "reason": "CompletionsReached", "lastTransitionTime": now()},
                    ]);
                } else {
                    let want_active = parallelism.min(completions - succeeded) - active.len() as i64;
                    let busy: std::collections::BTreeSet<i64> = active.iter().filter_map(|p| idx(p)).collect();
                    let mut next = (0..completions).filter(|n| !succeeded_idx.contains(n) && !busy.contains(n));
                    for _ in 0..want_active.max(0) {
                        let mut pod = pod_from_template(
                            &job["spec"]["template"],
                            &ns(&job),
                            Some(&format!("{}-", name(&job))),
                            None,
                            owner_ref(&job, "batch/v1", "Job"),
                            &[("batch.kubernetes.io/job-name", name(&job)), ("job-name", name(&job))],
                        );
                        if indexed {
                            let Some(n) = next.next() else { break };
                            pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] =
                                json!(n.to_string());
                            pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] =
                                json!(n.to_string());
                            pod["metadata"]["generateName"] = json!(format!("{}-{n}-", name(&job)));
                            for c in
                                pod.pointer_mut("/spec/containers").and_then(Value::as_array_mut).into_iter().flatten()
                            {
                                let env = c.as_object_mut().expect("container").entry("env").or_insert(json!([]));
                                if let Some(e) = env.as_array_mut() {
                                    e.push(json!({"name": "JOB_COMPLETION_INDEX", "value": n.to_string()}));
                                }
                            }
                        }
                        let _ = inner.create(&pods_t, &ns(&job), pod, "job-controller", false);
                    }
                }
            }
            let active_now = all(inner, &pods_t)
                .into_iter()
                .filter(|p| {
                    controller_uid(p).as_deref() == Some(uid(&job).as_str())
                        && !matches!(s(p, "/status/phase"), "Succeeded" | "Failed")
                        && !terminating(p)
                })
                .count();
            let mut status = json!({"active": active_now, "succeeded": succeeded, "failed": failed, "conditions": conditions, "startTime": job.pointer("/status/startTime").cloned().unwrap_or(json!(now()))});
            if indexed {
                status["completedIndexes"] =
                    json!(succeeded_idx.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","));
            }
            if conditions.as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Complete")) {
                status["completionTime"] = job.pointer("/status/completionTime").cloned().unwrap_or(json!(now()));
            }
            let mut cmp_old = job.get("status").cloned().unwrap_or(json!({}));
            let mut cmp_new = status.clone();
            for v in [&mut cmp_old, &mut cmp_new] {
                if let Some(o) = v.as_object_mut() {
                    o.remove("startTime");
                    o.remove("completionTime");
                }
            }
            if cmp_old != cmp_new {
                set_status(inner, &job_t, &job, status, "job-controller");
            }
        }
    }
}
