//! `pkg/apis/batch/validation`: Jobs (their spec, and what an update may
//! not change) and CronJobs (a name that fits the Jobs it makes, a
//! schedule that parses, a known time zone, the Job template).

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pod::pod_template;
use super::{forbidden, invalid, non_negative, not_supported, required, s, since, FieldError};

/// `ValidateJobUpdate`: a Job's selector, completion mode and pod template
/// stay as created (the template may change while the Job is suspended,
/// as the mutable scheduling directives allow).
pub(super) fn job_update(spec: &Value, old: &Value, e: &mut Vec<FieldError>) {
    for f in ["selector", "completionMode"] {
        if let (Some(new), Some(was)) = (spec.get(f), old.get(f)) {
            if new != was {
                e.push(invalid(format!("spec.{f}"), new.clone(), "field is immutable"));
            }
        }
    }
    let suspended = old.get("suspend").and_then(Value::as_bool) == Some(true);
    if let (false, Some(new), Some(was)) = (suspended, spec.get("template"), old.get("template")) {
        if new != was {
            e.push(invalid("spec.template", new.clone(), "field is immutable"));
        }
    }
}

/// `ValidateJobSpec`.
pub(super) fn job_spec(spec: &Value, path: &str, e: &mut Vec<FieldError>) {
    for f in ["parallelism", "completions", "backoffLimit"] {
        non_negative(spec, f, path, e);
    }
    if let Some(n) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64).filter(|n| *n <= 0) {
        e.push(invalid(format!("{path}.activeDeadlineSeconds"), n, "must be greater than 0"));
    }
    let mode = s(spec, "/completionMode").unwrap_or("NonIndexed");
    if !["NonIndexed", "Indexed"].contains(&mode) {
        e.push(not_supported(format!("{path}.completionMode"), mode, &["NonIndexed", "Indexed"]));
    }
    if mode == "Indexed" && spec.get("completions").is_none_or(Value::is_null) {
        e.push(required(format!("{path}.completions"), "when completion mode is Indexed"));
    }
    if let Some(v) = spec.get("backoffLimitPerIndex").filter(|v| !v.is_null()) {
        if mode != "Indexed" {
            let path = format!("{path}.backoffLimitPerIndex");
            if since(36) {
                e.push(invalid(path, v.clone(), "requires indexed completion mode"));
            } else {
                e.push(forbidden(path, "requires indexed completion mode"));
            }
        }
    }
    let template = spec.get("template");
    if since(36) {
        // validateJobSpec: a restartPolicy left to its default (Always) is
        // "Required" with the valid values; another value, "Unsupported".
        let policy = template.and_then(|t| s(t, "/spec/restartPolicy")).unwrap_or("Always");
        let mut lenient = template.cloned().unwrap_or(Value::Null);
        if policy == "Always" {
            if let Some(spec) = lenient.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("restartPolicy".into(), json!("Never"));
            }
        }
        pod_template(
            template.map(|_| &lenient).filter(|t| !t.is_null()),
            &format!("{path}.template"),
            &["OnFailure", "Never"],
            &BTreeSet::new(),
            e,
        );
        if policy == "Always" {
            e.push(required(format!("{path}.template.spec.restartPolicy"), "valid values: \"OnFailure\", \"Never\""));
        }
    } else {
        pod_template(template, &format!("{path}.template"), &["OnFailure", "Never"], &BTreeSet::new(), e);
    }
}

/// `ValidateCronJob`: the name fits the Jobs it makes, the schedule parses.
pub(super) fn cronjob(obj: &Value, e: &mut Vec<FieldError>) {
    let name = s(obj, "/metadata/name").unwrap_or_default();
    // Job names are the CronJob's name plus an 11-character suffix.
    if name.len() > 52 {
        e.push(invalid("metadata.name", name, "must be no more than 52 characters"));
    }
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    match s(spec, "/schedule").filter(|s| !s.is_empty()) {
        None => e.push(required("spec.schedule", "")),
        Some(schedule) => {
            if schedule.contains("TZ") {
                e.push(invalid(
                    "spec.schedule",
                    schedule,
                    "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                ));
            } else if let Err(msg) = crate::kube::cron::Schedule::parse(schedule) {
                e.push(invalid("spec.schedule", schedule, msg));
            }
        }
    }
    if let Some(tz) = s(spec, "/timeZone") {
        if tz.eq_ignore_ascii_case("local") {
            e.push(invalid(
                "spec.timeZone",
                tz,
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ));
        } else if !known_time_zone(tz) {
            e.push(invalid("spec.timeZone", tz, format!("unknown time zone {tz}")));
        }
    }
    let policy = s(spec, "/concurrencyPolicy").unwrap_or("Allow");
    if !["Allow", "Forbid", "Replace"].contains(&policy) {
        e.push(not_supported("spec.concurrencyPolicy", policy, &["Allow", "Forbid", "Replace"]));
    }
    let jt = spec.pointer("/jobTemplate/spec").unwrap_or(&Value::Null);
    job_spec(jt, "spec.jobTemplate.spec", e);
}

/// `time.LoadLocation`: the IANA database the system carries.
fn known_time_zone(tz: &str) -> bool {
    tz == "UTC"
        || (!tz.contains("..")
            && !tz.starts_with('/')
            && std::path::Path::new("/usr/share/zoneinfo").join(tz).is_file())
}
