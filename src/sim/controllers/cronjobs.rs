//! The CronJob controller: a Job for each due slot of the schedule (under
//! its concurrency policy), the history the spec keeps, and the status.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{all, controller_uid, i, name, ns, owner_ref, s, set_status, t, terminating, uid, Controllers};
use crate::sim::store::{Inner, Propagation};

impl Controllers {
    /// One CronJob pass at `now_ts` (a parameter, so tests choose the time).
    pub fn cronjobs(&self, inner: &mut Inner, now_ts: chrono::DateTime<chrono::Utc>) {
        let cj_t = t(inner, "batch", "cronjobs");
        let job_t = t(inner, "batch", "jobs");
        let parse_time = |v: &str| chrono::DateTime::parse_from_rfc3339(v).ok().map(|d| d.with_timezone(&chrono::Utc));
        for cj in all(inner, &cj_t).into_iter().filter(|c| !terminating(c)) {
            let jobs: Vec<Arc<Value>> = all(inner, &job_t)
                .into_iter()
                .filter(|j| controller_uid(j).as_deref() == Some(uid(&cj).as_str()))
                .collect();
            let finished = |j: &Value| {
                j.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .and_then(|c| {
                        c.iter().find(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
                    })
                    .map(|c| c["type"] == "Complete")
            };
            let active: Vec<&Value> =
                jobs.iter().map(|j| &**j).filter(|j| finished(j).is_none() && !terminating(j)).collect();
            let mut last = cj.pointer("/status/lastScheduleTime").and_then(Value::as_str).and_then(parse_time);
            let suspended = cj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
            if let (false, Ok(schedule)) = (suspended, crate::kube::cron::Schedule::parse(s(&cj, "/spec/schedule"))) {
                let after = last.or_else(|| parse_time(s(&cj, "/metadata/creationTimestamp"))).unwrap_or(now_ts);
                if let Some(slot) = schedule.last_between(after, now_ts) {
                    let policy = s(&cj, "/spec/concurrencyPolicy");
                    let skip = policy == "Forbid" && !active.is_empty();
                    if policy == "Replace" {
                        for j in &active {
                            let _ = inner.delete(&job_t, &ns(j), &name(j), Propagation::Background, None, false);
                        }
                    }
                    if !skip {
                        let template = cj.pointer("/spec/jobTemplate").cloned().unwrap_or(json!({}));
                        let mut meta = template.get("metadata").cloned().unwrap_or(json!({}));
                        if !meta.is_object() {
                            meta = json!({});
                        }
                        meta["name"] = json!(format!("{}-{}", name(&cj), slot.timestamp() / 60));
                        meta["ownerReferences"] = json!([owner_ref(&cj, "batch/v1", "CronJob")]);
                        meta["annotations"]["batch.kubernetes.io/cronjob-scheduled-timestamp"] =
                            json!(slot.to_rfc3339());
                        let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": template.get("spec").cloned().unwrap_or(json!({}))});
                        let _ = inner.create(&job_t, &ns(&cj), job, "cronjob-controller", false);
                    }
                    last = Some(slot);
                }
            }
            // Keep the history the spec asks for.
            let keep_ok = i(&cj, "/spec/successfulJobsHistoryLimit", 3) as usize;
            let keep_failed = i(&cj, "/spec/failedJobsHistoryLimit", 1) as usize;
            for (want, limit) in [(true, keep_ok), (false, keep_failed)] {
                let mut done: Vec<&Value> = jobs.iter().map(|j| &**j).filter(|j| finished(j) == Some(want)).collect();
                done.sort_by_key(|j| s(j, "/metadata/creationTimestamp").to_string());
                let excess = done.len().saturating_sub(limit);
                for j in done.into_iter().take(excess) {
                    let _ = inner.delete(&job_t, &ns(j), &name(j), Propagation::Background, None, false);
                }
            }
            let jobs: Vec<Arc<Value>> = all(inner, &job_t)
                .into_iter()
                .filter(|j| controller_uid(j).as_deref() == Some(uid(&cj).as_str()))
                .collect();
            let active_refs: Vec<Value> = jobs.iter().filter(|j| finished(j).is_none()).map(|j| json!({"apiVersion": "batch/v1", "kind": "Job", "name": name(j), "namespace": ns(j), "uid": uid(j)})).collect();
            let mut status = json!({"active": active_refs});
            if let Some(l) = last {
                status["lastScheduleTime"] = json!(l.format("%Y-%m-%dT%H:%M:%SZ").to_string());
            }
            if let Some(t) = jobs
                .iter()
                .filter(|j| finished(j) == Some(true))
                .filter_map(|j| j.pointer("/status/completionTime").cloned())
                .max_by_key(|t| t.as_str().unwrap_or_default().to_string())
            {
                status["lastSuccessfulTime"] = t;
            }
            set_status(inner, &cj_t, &cj, status, "cronjob-controller");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cronjobs_create_a_job_per_due_slot_and_honour_forbid() {
        let mut inner = Inner::new();
        let cj_t = t(&inner, "batch", "cronjobs");
        let job_t = t(&inner, "batch", "jobs");
        let cj = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "tick"}, "spec": {
            "schedule": "*/5 * * * *", "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "t:1"}]}}}}}});
        inner.create(&cj_t, "default", cj, "test", false).unwrap();
        let c = Controllers::default();
        let jobs = |inner: &Inner| all(inner, &job_t).iter().map(|j| name(j)).collect::<Vec<_>>();
        // "Now" is the creation time as stored (whole seconds): never past a
        // slot boundary the clock crossed since.
        let created = inner.get(&cj_t, "default", "tick").unwrap()["metadata"]["creationTimestamp"].clone();
        let now: chrono::DateTime<chrono::Utc> = created.as_str().unwrap().parse().unwrap();
        c.cronjobs(&mut inner, now);
        assert!(jobs(&inner).is_empty(), "nothing is due before the first slot after creation");
        c.cronjobs(&mut inner, now + chrono::Duration::minutes(6));
        assert_eq!(jobs(&inner).len(), 1);
        let status = inner.get(&cj_t, "default", "tick").unwrap()["status"].clone();
        assert_eq!(status["active"].as_array().unwrap().len(), 1);
        // The next slot comes while the first Job still runs: Forbid skips it.
        c.cronjobs(&mut inner, now + chrono::Duration::minutes(11));
        assert_eq!(jobs(&inner).len(), 1);
    }
}
