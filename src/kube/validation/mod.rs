//! What kube-apiserver refuses, for the built-in kinds pinfleet and its
//! users write: the rules of Kubernetes' `pkg/apis/*/validation` and
//! apimachinery's `util/validation`, with their message texts.
//!
//! Pure: an object (JSON, after the server's defaulting) and, for updates,
//! the stored one in; a list of [`FieldError`]s out. Two callers: the sim
//! enforces them on every write (so a test that passes on the sim does not
//! meet a 422 on a real cluster), and the workload renderer checks what it
//! derives from a custom resource before sending it, so a name too long for
//! a child becomes a status condition instead of a retry loop.
//!
//! Each rule names the upstream function it mirrors. Rules the platform
//! never meets (volume sources in depth, security contexts) are left out;
//! a missing rule makes the sim more permissive, never stricter.
//!
//! Rules and wording move between minors; [`validate_as`] answers as a
//! given minor (the sim passes the cluster's). Where a rule changed, the
//! minor it changed in is named: from the feature gate's default where one
//! governs it (read from the v1.36.2 source), else 1.36, the minor it was
//! observed in on a real API server (the minors between were not checked).
//!
//! ```text
//! validate_as ──► meta (name, labels, annotations)
//!      └────────► the kind's rules, each API group's as upstream keeps them:
//!                 pod, service, config (core), apps and batch (──► pod for
//!                 their templates), policy, scheduling, coordination, rbac
//! format (apimachinery's name and value formats) sits under all of them
//! ```
//!
//! This file holds what every rule names: the field error and its 422
//! message, the minor being answered as, the JSON readers, and the entry
//! points that send an object to its kind's rules.

mod apps;
mod batch;
mod config;
mod coordination;
mod format;
mod meta;
mod pod;
mod policy;
mod rbac;
mod scheduling;
mod service;

use std::collections::BTreeSet;
use std::fmt;

use serde_json::{json, Value};

pub use format::{
    config_key, dns1035_label, dns1123_label, dns1123_subdomain, env_var_name, label_value, parse_quantity,
    path_segment_name, port_name, qualified_name, QUANTITY_PATTERN,
};
pub use meta::{labels, ANNOTATIONS_MAX_BYTES};

use apps::replicated;
use batch::{cronjob, job_spec, job_update};
use config::data_keys;
use coordination::lease;
use meta::{name_rule, object_meta};
use pod::{pod_spec, pod_template};
use policy::pdb;
use rbac::{rbac_rules, role_binding};
use scheduling::priority_class;
use service::service;

/// `field.ErrorType`: the kinds of field error the API server reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    Required,
    Invalid,
    Duplicate,
    NotSupported,
    NotFound,
    Forbidden,
    TooLong,
}

impl ErrorType {
    /// The `reason` of a `StatusCause`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
        }
    }
    fn text(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::NotFound => "Not found",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
        }
    }
}

/// One refused field, as `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: String,
    pub value: Value,
    pub detail: String,
}

impl FieldError {
    /// `ErrorBody()`: the message without the field, as in a StatusCause.
    pub fn body(&self) -> String {
        let mut s = match self.kind {
            ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong => self.kind.text().to_string(),
            _ => format!("{}: {}", self.kind.text(), shown(&self.value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Go's `%v`/`%q` of a bad value: strings quoted, numbers bare, the rest JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn err(kind: ErrorType, field: impl Into<String>, value: impl Into<Value>, detail: impl Into<String>) -> FieldError {
    FieldError { kind, field: field.into(), value: value.into(), detail: detail.into() }
}
fn required(field: impl Into<String>, detail: &str) -> FieldError {
    err(ErrorType::Required, field, "", detail)
}
fn invalid(field: impl Into<String>, value: impl Into<Value>, detail: impl Into<String>) -> FieldError {
    err(ErrorType::Invalid, field, value, detail)
}
fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
    err(ErrorType::Forbidden, field, "", detail)
}
fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
    let list = supported.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(", ");
    err(ErrorType::NotSupported, field, value, format!("supported values: {list}"))
}

fn non_negative(spec: &Value, field: &str, path: &str, e: &mut Vec<FieldError>) {
    if let Some(n) = spec.get(field).and_then(Value::as_i64).filter(|n| *n < 0) {
        e.push(invalid(format!("{path}.{field}"), n, "must be greater than or equal to 0"));
    }
}

/// The 422 message: `Deployment.apps "web" is invalid: …`, one error bare,
/// several in brackets (`errors.NewInvalid` with an aggregate).
pub fn invalid_message(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> String {
    let what = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
    let mut seen = BTreeSet::new();
    let msgs: Vec<String> = errors.iter().map(ToString::to_string).filter(|m| seen.insert(m.clone())).collect();
    match msgs.len() {
        0 => format!("{what} {name:?} is invalid"),
        1 => format!("{what} {name:?} is invalid: {}", msgs[0]),
        _ => format!("{what} {name:?} is invalid: [{}]", msgs.join(", ")),
    }
}

/// The 422 `Status.details` for those errors.
pub fn invalid_details(kind: &str, group: &str, name: &str, errors: &[FieldError]) -> Value {
    let causes: Vec<Value> =
        errors.iter().map(|e| json!({"reason": e.kind.reason(), "message": e.body(), "field": e.field})).collect();
    json!({"name": name, "group": group, "kind": kind, "causes": causes})
}

/// The minor being validated as, for the duration of one [`validate_as`]
/// (a scoped thread-local keeps the rule functions' shapes upstream's).
/// The minor whose rules and messages validation answers with (the
/// sim's serving version while it validates a write).
pub mod answering {
    use std::cell::Cell;
    thread_local!(static MINOR: Cell<u32> = const { Cell::new(0) });

    pub fn minor() -> u32 {
        match MINOR.with(Cell::get) {
            0 => crate::spec::versions::DEFAULT_MINOR,
            m => m,
        }
    }

    /// Sets the minor until the guard drops.
    pub fn set(minor: u32) -> Guard {
        Guard(MINOR.with(|m| m.replace(minor)))
    }

    pub struct Guard(u32);

    impl Drop for Guard {
        fn drop(&mut self) {
            MINOR.with(|m| m.set(self.0));
        }
    }
}

/// Whether the minor validated as is `minor` or newer.
fn since(minor: u32) -> bool {
    answering::minor() >= minor
}

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn entries(v: Option<&Value>) -> Vec<(&String, &Value)> {
    v.and_then(Value::as_object).map(|m| m.iter().collect()).unwrap_or_default()
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// True for the built-in kinds whose rules this module knows.
pub fn knows(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        (
            "",
            "Pod"
                | "PodTemplate"
                | "Service"
                | "ConfigMap"
                | "Secret"
                | "Namespace"
                | "ServiceAccount"
                | "ResourceQuota"
                | "Node"
                | "Endpoints"
                | "Event"
                | "PersistentVolumeClaim"
        ) | ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch", "Job" | "CronJob")
            | ("policy", "PodDisruptionBudget")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("coordination.k8s.io", "Lease")
            | ("rbac.authorization.k8s.io", "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding")
            | ("events.k8s.io", "Event")
    )
}

/// Validates a built-in object (`ValidateXxx`, and `ValidateXxxUpdate` when
/// `old` is given). Kinds this module does not know get only metadata checks.
pub fn validate(group: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    validate_as(crate::spec::versions::DEFAULT_MINOR, group, kind, obj, old)
}

/// [`validate`] as the API server of 1.`minor` answers.
pub fn validate_as(minor: u32, group: &str, kind: &str, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let _minor = answering::set(minor);
    let mut e = Vec::new();
    object_meta(obj.get("metadata").unwrap_or(&Value::Null), name_rule(group, kind), "metadata", &mut e);
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    match (group, kind) {
        ("", "Pod") => pod_spec(spec, "spec", &["Always", "OnFailure", "Never"], &BTreeSet::new(), &mut e),
        ("", "PodTemplate") => {
            pod_template(obj.get("template"), "template", &["Always", "OnFailure", "Never"], &BTreeSet::new(), &mut e)
        }
        ("", "Service") => service(spec, &mut e),
        ("", "ConfigMap") => data_keys(obj, &["data", "binaryData"], &mut e),
        ("", "Secret") => data_keys(obj, &["data", "stringData"], &mut e),
        ("apps", "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet") => {
            replicated(kind, spec, old.map(|o| o.get("spec").unwrap_or(&Value::Null)), &mut e)
        }
        ("batch", "Job") => {
            job_spec(spec, "spec", &mut e);
            if let Some(old) = old.and_then(|o| o.get("spec")) {
                job_update(spec, old, &mut e);
            }
        }
        ("batch", "CronJob") => cronjob(obj, &mut e),
        ("policy", "PodDisruptionBudget") => pdb(spec, &mut e),
        ("scheduling.k8s.io", "PriorityClass") => priority_class(obj, old, &mut e),
        ("coordination.k8s.io", "Lease") => lease(spec, &mut e),
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => rbac_rules(kind, obj, &mut e),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => role_binding(kind, obj, old, &mut e),
        _ => {}
    }
    e
}

/// A body the server cannot decode: a quantity that does not parse is a
/// 400 before any validation (`cannot be handled as a Deployment: quantities must match …`).
pub fn decode_error(obj: &Value) -> Option<String> {
    fn walk(v: &Value, in_resources: bool) -> bool {
        match v {
            Value::Object(m) => m.iter().any(|(k, v)| {
                let quantities = matches!(k.as_str(), "requests" | "limits" | "hard" | "capacity" | "allocatable");
                if in_resources && quantities {
                    v.as_object().is_some_and(|q| q.values().any(|q| parse_quantity(q).is_none()))
                } else {
                    walk(v, k == "resources" || k == "spec" || k == "status" || k == "overhead")
                }
            }),
            Value::Array(a) => a.iter().any(|v| walk(v, in_resources)),
            _ => false,
        }
    }
    walk(obj, false).then(|| format!("quantities must match the regular expression '{QUANTITY_PATTERN}'"))
}
