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

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{json, Value};

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

// ---- apimachinery util/validation: the name and value formats ----------

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
/// `TotalAnnotationSizeLimitB`: 256 KiB for all annotations of an object.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;
/// ConfigMap and Secret data: 1 MiB (`MaxSecretSize`, `RuntimeObjectsMaxSize`).
const DATA_MAX_BYTES: usize = 1024 * 1024;

/// Whether `s` matches one of the formats above, anchored. The sim checks
/// every write with these, so each pattern is compiled once per process.
fn matches(fmt: &'static str, s: &str) -> bool {
    match by_hand(fmt, s) {
        Some(m) => m,
        None => by_regex(fmt, s),
    }
}

/// The formats every write checks, matched without a regex: the sim spent
/// more on regex_lite's matcher than on the rest of its validation. Each
/// mirrors its pattern exactly (a property test holds them to it).
fn by_hand(fmt: &'static str, s: &str) -> Option<bool> {
    let b = s.as_bytes();
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    let label = |b: &[u8]| {
        b.first().is_some_and(lower_alnum)
            && b.last().is_some_and(lower_alnum)
            && b.iter().all(|c| lower_alnum(c) || *c == b'-')
    };
    let qualified = |b: &[u8]| {
        b.first().is_some_and(alnum)
            && b.last().is_some_and(alnum)
            && b.iter().all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
    };
    Some(match fmt {
        DNS1123_LABEL_FMT => label(b),
        DNS1123_SUBDOMAIN_FMT => b.split(|c| *c == b'.').all(label),
        DNS1035_LABEL_FMT => label(b) && b[0].is_ascii_lowercase(),
        QUALIFIED_NAME_FMT => qualified(b),
        LABEL_VALUE_FMT => b.is_empty() || qualified(b),
        CONFIG_KEY_FMT => !b.is_empty() && b.iter().all(|c| alnum(c) || matches!(c, b'-' | b'_' | b'.')),
        _ => return None,
    })
}

fn by_regex(fmt: &'static str, s: &str) -> bool {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex};
    static COMPILED: LazyLock<Mutex<HashMap<&'static str, regex_lite::Regex>>> = LazyLock::new(Default::default);
    let mut compiled = COMPILED.lock().expect("regex cache");
    compiled
        .entry(fmt)
        .or_insert_with(|| regex_lite::Regex::new(&format!("^{fmt}$")).expect("a valid pattern"))
        .is_match(s)
}

/// `RegexError`: the message with its examples, e.g. `(e.g. 'my-name',  or '123-abc', regex used …)`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
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

fn max_len(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// Label keys and values say bytes from 1.36 (apimachinery's
/// `validate/content`, which `IsValidLabelValue` and `IsQualifiedName` became).
fn max_len_label(n: usize) -> String {
    if since(36) {
        format!("must be no more than {n} bytes")
    } else {
        max_len(n)
    }
}

/// `IsDNS1123Label`.
pub fn dns1123_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    if !matches(DNS1123_LABEL_FMT, s) {
        out.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    out
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(max_len(253));
    }
    if !matches(DNS1123_SUBDOMAIN_FMT, s) {
        out.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    out
}

/// `IsDNS1035Label` (Service names).
pub fn dns1035_label(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len(63));
    }
    if !matches(DNS1035_LABEL_FMT, s) {
        out.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    out
}

/// `IsValidPortName`: an IANA service name, at most 15 characters.
pub fn port_name(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 15 {
        out.push(max_len(15));
    }
    if !s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') || s.is_empty() {
        out.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !s.bytes().any(|b| b.is_ascii_lowercase()) {
        out.push("must contain at least one letter (a-z)".into());
    }
    if s.contains("--") {
        out.push("must not contain consecutive hyphens".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        out.push("must not begin or end with a hyphen".into());
    }
    out
}

/// `IsQualifiedName` (label and annotation keys).
pub fn qualified_name(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let msg = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
    let examples = ["MyName", "my.name", "123-abc"];
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".into());
            } else {
                out.extend(dns1123_subdomain(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(msg, QUALIFIED_NAME_FMT, &examples)
            )]
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        out.push(format!("name part {}", max_len_label(63)));
    }
    if !matches(QUALIFIED_NAME_FMT, name) {
        out.push(format!("name part {}", regex_error(msg, QUALIFIED_NAME_FMT, &examples)));
    }
    out
}

/// `IsValidLabelValue`.
pub fn label_value(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 63 {
        out.push(max_len_label(63));
    }
    if !matches(LABEL_VALUE_FMT, s) {
        out.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    out
}

/// `IsConfigMapKey` (ConfigMap and Secret keys).
pub fn config_key(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    if s.len() > 253 {
        out.push(max_len(253));
    }
    if !matches(CONFIG_KEY_FMT, s) {
        out.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            CONFIG_KEY_FMT,
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if s == "." {
        out.push("must not be '.'".into());
    } else if s == ".." {
        out.push("must not be '..'".into());
    } else if s.starts_with("..") {
        out.push("must not start with '..'".into());
    }
    out
}

/// `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation, on by default since 1.32).
pub fn env_var_name(s: &str) -> Vec<String> {
    if s.bytes().all(|b| (0x20..=0x7e).contains(&b) && b != b'=') {
        Vec::new()
    } else {
        vec!["a valid environment variable name must consist only of printable ASCII characters other than '='".into()]
    }
}

/// `path.IsValidPathSegmentName` (RBAC object names).
pub fn path_segment_name(s: &str) -> Vec<String> {
    if s == "." || s == ".." {
        return vec![format!("may not be '{s}'")];
    }
    let mut out = Vec::new();
    for c in ["/", "%"] {
        if s.contains(c) {
            out.push(format!("may not contain '{c}'"));
        }
    }
    out
}

/// A quantity (`resource.ParseQuantity`) as a number, for comparisons.
pub fn parse_quantity(q: &Value) -> Option<f64> {
    let s = match q {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => return n.as_f64(),
        _ => return None,
    };
    static QUANTITY: std::sync::LazyLock<regex_lite::Regex> =
        std::sync::LazyLock::new(|| regex_lite::Regex::new(QUANTITY_PATTERN).expect("pattern"));
    let c = QUANTITY.captures(&s)?;
    let num: f64 = c[1].parse().ok()?;
    let mult = match &c[2] {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        e if e.starts_with(['e', 'E']) => 10f64.powi(e[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    Some(num * mult)
}

/// The pattern a quantity must match; a body with another is refused while
/// decoding (400), before validation.
pub const QUANTITY_PATTERN: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

// ---- the objects ------------------------------------------------------------

fn s<'a>(v: &'a Value, ptr: &str) -> Option<&'a str> {
    v.pointer(ptr).and_then(Value::as_str)
}

fn entries(v: Option<&Value>) -> Vec<(&String, &Value)> {
    v.and_then(Value::as_object).map(|m| m.iter().collect()).unwrap_or_default()
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

/// How a kind's names are checked (`ValidateObjectMeta`'s `nameFn`).
#[derive(Clone, Copy)]
enum NameRule {
    Subdomain,
    Label,
    Dns1035,
    PathSegment,
}

fn name_rule(group: &str, kind: &str) -> NameRule {
    match (group, kind) {
        ("", "Namespace") => NameRule::Label,
        // RelaxedServiceNameValidation (on by default from 1.36): an RFC 1123 label.
        ("", "Service") if since(36) => NameRule::Label,
        ("", "Service") => NameRule::Dns1035,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Subdomain,
    }
}

fn check_name(rule: NameRule, s: &str) -> Vec<String> {
    match rule {
        NameRule::Subdomain => dns1123_subdomain(s),
        NameRule::Label => dns1123_label(s),
        NameRule::Dns1035 => dns1035_label(s),
        NameRule::PathSegment => path_segment_name(s),
    }
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

/// `ValidateObjectMeta`: name or generateName, labels, annotations.
fn object_meta(m: &Value, rule: NameRule, path: &str, e: &mut Vec<FieldError>) {
    let name = s(m, "/name").unwrap_or_default();
    let generate = s(m, "/generateName").unwrap_or_default();
    if name.is_empty() && generate.is_empty() {
        e.push(required(format!("{path}.name"), "name or generateName is required"));
    }
    if !generate.is_empty() {
        // As the API server does: a trailing dash is part of the prefix, not the name.
        let masked = generate.strip_suffix('-').map(|g| format!("{g}a")).unwrap_or_else(|| generate.to_string());
        for msg in check_name(rule, &masked) {
            e.push(invalid(format!("{path}.generateName"), generate, msg));
        }
    }
    if !name.is_empty() {
        for msg in check_name(rule, name) {
            e.push(invalid(format!("{path}.name"), name, msg));
        }
    }
    labels(m.get("labels"), &format!("{path}.labels"), e);
    annotations(m.get("annotations"), &format!("{path}.annotations"), e);
}

/// `ValidateLabels`.
pub fn labels(v: Option<&Value>, path: &str, e: &mut Vec<FieldError>) {
    for (k, val) in entries(v) {
        for msg in qualified_name(k) {
            e.push(invalid(path, k.as_str(), msg));
        }
        let val = val.as_str().unwrap_or_default();
        for msg in label_value(val) {
            e.push(invalid(path, val, msg));
        }
    }
}

/// `ValidateAnnotations`.
fn annotations(v: Option<&Value>, path: &str, e: &mut Vec<FieldError>) {
    let mut total = 0;
    for (k, val) in entries(v) {
        for msg in qualified_name(&k.to_ascii_lowercase()) {
            e.push(invalid(path, k.as_str(), msg));
        }
        total += k.len() + val.as_str().map_or(0, str::len);
    }
    if total > ANNOTATIONS_MAX_BYTES {
        e.push(err(ErrorType::TooLong, path, "", format!("may not be more than {ANNOTATIONS_MAX_BYTES} bytes")));
    }
}

/// `claims` are the names of volumes the owner adds to every pod (a
/// StatefulSet's `volumeClaimTemplates`): the template's containers may mount them.
fn pod_template(t: Option<&Value>, path: &str, restart: &[&str], claims: &BTreeSet<String>, e: &mut Vec<FieldError>) {
    let Some(t) = t.filter(|t| !t.is_null()) else {
        e.push(required(path, ""));
        return;
    };
    let m = t.get("metadata").unwrap_or(&Value::Null);
    labels(m.get("labels"), &format!("{path}.labels"), e);
    annotations(m.get("annotations"), &format!("{path}.annotations"), e);
    pod_spec(t.get("spec").unwrap_or(&Value::Null), &format!("{path}.spec"), restart, claims, e);
}

/// `ValidatePodSpec`, the parts workloads meet.
fn pod_spec(spec: &Value, path: &str, restart: &[&str], claims: &BTreeSet<String>, e: &mut Vec<FieldError>) {
    // Volumes (`ValidateVolumes`).
    let mut volumes = BTreeSet::new();
    for (i, v) in items(spec.get("volumes")).iter().enumerate() {
        let p = format!("{path}.volumes[{i}]");
        let name = s(v, "/name").unwrap_or_default();
        if name.is_empty() {
            e.push(required(format!("{p}.name"), ""));
        } else {
            for msg in dns1123_label(name) {
                e.push(invalid(format!("{p}.name"), name, msg));
            }
            if !volumes.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
        if v.as_object().is_some_and(|o| o.keys().all(|k| k == "name")) {
            e.push(required(p, "must specify a volume type"));
        }
    }
    // What a container may mount: the pod's volumes and its owner's claims
    // (the StatefulSet controller adds a volume per claim template to each
    // pod, replacing a same-named one; a real server accepts such a mount).
    let mountable: BTreeSet<String> = volumes.union(claims).cloned().collect();
    // Container names are unique across init, regular and ephemeral
    // containers. From 1.36 the regular containers' names are taken first,
    // so a clash is reported on the init container (validateInitContainers).
    let mut names = BTreeSet::new();
    let groups = if since(36) {
        [("containers", false), ("initContainers", true), ("ephemeralContainers", false)]
    } else {
        [("initContainers", true), ("containers", false), ("ephemeralContainers", false)]
    };
    if items(spec.get("containers")).is_empty() {
        e.push(required(format!("{path}.containers"), ""));
    }
    for (field, init) in groups {
        for (i, c) in items(spec.get(field)).iter().enumerate() {
            let p = format!("{path}.{field}[{i}]");
            container(c, &p, init, field == "ephemeralContainers", &mountable, e);
            let name = s(c, "/name").unwrap_or_default();
            if !name.is_empty() && !names.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
    }
    // The pod's restartPolicy (defaulted to Always), as the kind allows it.
    let policy = s(spec, "/restartPolicy").unwrap_or("Always");
    if !restart.contains(&policy) {
        e.push(not_supported(format!("{path}.restartPolicy"), policy, restart));
    }
}

/// `validateContainers` / `validateInitContainers` for one container.
fn container(c: &Value, p: &str, init: bool, ephemeral: bool, volumes: &BTreeSet<String>, e: &mut Vec<FieldError>) {
    let name = s(c, "/name").unwrap_or_default();
    if name.is_empty() {
        e.push(required(format!("{p}.name"), ""));
    } else {
        for msg in dns1123_label(name) {
            e.push(invalid(format!("{p}.name"), name, msg));
        }
    }
    if s(c, "/image").unwrap_or_default().trim().is_empty() {
        e.push(required(format!("{p}.image"), ""));
    }
    // Ports (`validateContainerPorts`): names unique within the container.
    let mut port_names = BTreeSet::new();
    for (i, port) in items(c.get("ports")).iter().enumerate() {
        let pp = format!("{p}.ports[{i}]");
        let pname = s(port, "/name").unwrap_or_default();
        if !pname.is_empty() {
            let msgs = port_name(pname);
            if !msgs.is_empty() {
                for msg in msgs {
                    e.push(invalid(format!("{pp}.name"), pname, msg));
                }
            } else if !port_names.insert(pname.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{pp}.name"), pname, ""));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => e.push(required(format!("{pp}.containerPort"), "")),
            Some(n) if !(1..=65535).contains(&n) => {
                e.push(invalid(format!("{pp}.containerPort"), n, "must be between 1 and 65535, inclusive"))
            }
            _ => {}
        }
        if let Some(h) = port.get("hostPort").and_then(Value::as_i64).filter(|h| *h != 0) {
            if !(1..=65535).contains(&h) {
                e.push(invalid(format!("{pp}.hostPort"), h, "must be between 1 and 65535, inclusive"));
            }
        }
        let proto = s(port, "/protocol").unwrap_or("TCP");
        if !["SCTP", "TCP", "UDP"].contains(&proto) {
            e.push(not_supported(format!("{pp}.protocol"), proto, &["SCTP", "TCP", "UDP"]));
        }
    }
    // Environment (`ValidateEnv`).
    for (i, env) in items(c.get("env")).iter().enumerate() {
        let n = s(env, "/name").unwrap_or_default();
        if n.is_empty() {
            e.push(required(format!("{p}.env[{i}].name"), ""));
        } else {
            for msg in env_var_name(n) {
                e.push(invalid(format!("{p}.env[{i}].name"), n, msg));
            }
        }
    }
    // Mounts name a volume of the pod (`ValidateVolumeMounts`).
    let mut paths = BTreeSet::new();
    for (i, m) in items(c.get("volumeMounts")).iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{i}]");
        let n = s(m, "/name").unwrap_or_default();
        if n.is_empty() {
            e.push(required(format!("{mp}.name"), ""));
        } else if !volumes.contains(n) {
            e.push(err(ErrorType::NotFound, format!("{mp}.name"), n, ""));
        }
        let path = s(m, "/mountPath").unwrap_or_default();
        if path.is_empty() {
            e.push(required(format!("{mp}.mountPath"), ""));
        } else if !paths.insert(path.to_string()) {
            e.push(invalid(format!("{mp}.mountPath"), path, "must be unique"));
        }
    }
    // Requests never above limits (`ValidateResourceRequirements`).
    let limits: BTreeMap<&String, f64> = entries(c.pointer("/resources/limits"))
        .into_iter()
        .filter_map(|(k, v)| parse_quantity(v).map(|q| (k, q)))
        .collect();
    for (k, v) in entries(c.pointer("/resources/requests")) {
        if let (Some(req), Some(lim)) = (parse_quantity(v), limits.get(k)) {
            if req > *lim {
                let limit = c.pointer(&format!("/resources/limits/{k}")).map(shown_quantity).unwrap_or_default();
                // Reported at the requests map, not its key (as every
                // supported minor's `ValidateResourceRequirements` does).
                e.push(invalid(
                    format!("{p}.resources.requests"),
                    shown_quantity(v),
                    format!("must be less than or equal to {k} limit of {limit}"),
                ));
            }
        }
    }
    // Restart policy and probes: a native sidecar is an init container with
    // restartPolicy Always; other init containers run to completion and may
    // have no probes or lifecycle hooks.
    let restart = s(c, "/restartPolicy");
    // ContainerRestartRules (on by default from 1.35): any container may say
    // Always, OnFailure or Never (validateContainerRestartPolicy).
    let rules = since(35);
    if init {
        match restart {
            Some(r) if rules && !["Always", "Never", "OnFailure"].contains(&r) => {
                e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always", "Never", "OnFailure"]))
            }
            Some(r) if !rules && r != "Always" => e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always"])),
            _ => {}
        }
        if restart != Some("Always") {
            for f in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if c.get(f).is_some_and(|v| !v.is_null()) {
                    e.push(forbidden(
                        format!("{p}.{f}"),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    } else if let (Some(r), false) = (restart, ephemeral) {
        if !rules {
            e.push(forbidden(format!("{p}.restartPolicy"), "may not be set for non-init containers"));
        } else if !["Always", "Never", "OnFailure"].contains(&r) {
            e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always", "Never", "OnFailure"]));
        }
    }
}

fn shown_quantity(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn non_negative(spec: &Value, field: &str, path: &str, e: &mut Vec<FieldError>) {
    if let Some(n) = spec.get(field).and_then(Value::as_i64).filter(|n| *n < 0) {
        e.push(invalid(format!("{path}.{field}"), n, "must be greater than or equal to 0"));
    }
}

/// A label selector as a predicate over labels (`LabelSelectorAsSelector`).
fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let get = |k: &str| labels.get(k).and_then(Value::as_str);
    let by_label = entries(sel.get("matchLabels")).into_iter().all(|(k, v)| get(k) == v.as_str());
    let by_expr = items(sel.get("matchExpressions")).iter().all(|x| {
        let key = s(x, "/key").unwrap_or_default();
        let values: Vec<&str> = items(x.get("values")).iter().filter_map(Value::as_str).collect();
        match s(x, "/operator").unwrap_or_default() {
            "In" => get(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => get(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => get(key).is_some(),
            "DoesNotExist" => get(key).is_none(),
            _ => false,
        }
    });
    by_label && by_expr
}

/// Deployment, ReplicaSet, DaemonSet, StatefulSet: a selector that matches
/// the template, restartPolicy Always, and what may not change.
fn replicated(kind: &str, spec: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    non_negative(spec, "replicas", "spec", e);
    non_negative(spec, "minReadySeconds", "spec", e);
    let template = spec.get("template");
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => {
            e.push(required("spec.selector", ""));
            // A missing selector selects nothing, so the template's labels
            // do not match it either (the API server reports both).
            if template.is_some() {
                let tl = template.and_then(|t| t.pointer("/metadata/labels")).cloned().unwrap_or(Value::Null);
                e.push(invalid("spec.template.metadata.labels", tl, "`selector` does not match template `labels`"));
            }
        }
        Some(sel) => {
            labels(sel.get("matchLabels"), "spec.selector.matchLabels", e);
            let empty = entries(sel.get("matchLabels")).is_empty() && items(sel.get("matchExpressions")).is_empty();
            if empty {
                let what = kind.to_ascii_lowercase();
                e.push(invalid("spec.selector", sel.clone(), format!("empty selector is invalid for {what}")));
            } else if let Some(t) = template {
                let tl = t.pointer("/metadata/labels").cloned().unwrap_or(json!({}));
                if !selector_matches(sel, &tl) {
                    e.push(invalid("spec.template.metadata.labels", tl, "`selector` does not match template `labels`"));
                }
            }
        }
    }
    // A StatefulSet's pods get a volume per claim template (the API server
    // validates the template with those names among its volumes).
    let claims: BTreeSet<String> = if kind == "StatefulSet" {
        items(spec.get("volumeClaimTemplates"))
            .iter()
            .filter_map(|c| s(c, "/metadata/name"))
            .map(str::to_string)
            .collect()
    } else {
        BTreeSet::new()
    };
    pod_template(template, "spec.template", &["Always"], &claims, e);
    let Some(old) = old else { return };
    if kind == "StatefulSet" {
        // ValidateStatefulSetUpdate: only these spec fields may change.
        let allowed = [
            "replicas",
            "template",
            "updateStrategy",
            "minReadySeconds",
            "ordinals",
            "revisionHistoryLimit",
            "persistentVolumeClaimRetentionPolicy",
        ];
        let rest = |v: &Value| -> Value {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| !allowed.contains(&k.as_str()));
            }
            v
        };
        if rest(spec) != rest(old) {
            e.push(forbidden("spec", "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"));
        }
    } else if let (Some(new), Some(was)) = (spec.get("selector"), old.get("selector")) {
        if new != was {
            e.push(invalid("spec.selector", new.clone(), "field is immutable"));
        }
    }
}

/// `ValidateJobUpdate`: a Job's selector, completion mode and pod template
/// stay as created (the template may change while the Job is suspended,
/// as the mutable scheduling directives allow).
fn job_update(spec: &Value, old: &Value, e: &mut Vec<FieldError>) {
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
fn job_spec(spec: &Value, path: &str, e: &mut Vec<FieldError>) {
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
fn cronjob(obj: &Value, e: &mut Vec<FieldError>) {
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
            } else if let Err(msg) = super::cron::Schedule::parse(schedule) {
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

/// `ValidateService`, the parts users meet.
fn service(spec: &Value, e: &mut Vec<FieldError>) {
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    let ty = s(spec, "/type").unwrap_or("ClusterIP");
    if !TYPES.contains(&ty) {
        e.push(not_supported("spec.type", ty, &TYPES));
    }
    let ports = items(spec.get("ports"));
    let headless = s(spec, "/clusterIP") == Some("None");
    if ports.is_empty() && ty != "ExternalName" && !headless {
        e.push(required("spec.ports", ""));
    }
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("spec.ports[{i}]");
        let name = s(port, "/name").unwrap_or_default();
        if ports.len() > 1 && name.is_empty() {
            e.push(required(format!("{p}.name"), ""));
        } else if !name.is_empty() {
            for msg in dns1123_label(name) {
                e.push(invalid(format!("{p}.name"), name, msg));
            }
            if !names.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
        match port.get("port").and_then(Value::as_i64) {
            None | Some(0) => e.push(required(format!("{p}.port"), "")),
            Some(n) if !(1..=65535).contains(&n) => {
                e.push(invalid(format!("{p}.port"), n, "must be between 1 and 65535, inclusive"))
            }
            _ => {}
        }
        let proto = s(port, "/protocol").unwrap_or("TCP");
        if !["SCTP", "TCP", "UDP"].contains(&proto) {
            e.push(not_supported(format!("{p}.protocol"), proto, &["SCTP", "TCP", "UDP"]));
        }
        match port.get("targetPort") {
            Some(Value::Number(n)) => {
                let n = n.as_i64().unwrap_or(0);
                if !(1..=65535).contains(&n) {
                    e.push(invalid(format!("{p}.targetPort"), n, "must be between 1 and 65535, inclusive"));
                }
            }
            Some(Value::String(t)) => {
                for msg in port_name(t) {
                    e.push(invalid(format!("{p}.targetPort"), t.as_str(), msg));
                }
            }
            _ => {}
        }
    }
    labels(spec.get("selector"), "spec.selector", e);
}

/// ConfigMap and Secret keys (`ValidateConfigMap`, `ValidateSecret`).
fn data_keys(obj: &Value, fields: &[&str], e: &mut Vec<FieldError>) {
    let mut seen = BTreeSet::new();
    let mut total = 0;
    for f in fields {
        for (k, v) in entries(obj.get(*f)) {
            for msg in config_key(k) {
                e.push(invalid(format!("{f}[{k}]"), k.as_str(), msg));
            }
            if !seen.insert(k.clone()) && *f == "binaryData" {
                e.push(invalid(format!("data[{k}]"), k.as_str(), "duplicate of key present in binaryData"));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if total > DATA_MAX_BYTES {
        e.push(err(ErrorType::TooLong, "data", "", format!("may not be more than {DATA_MAX_BYTES} bytes")));
    }
}

/// `ValidatePodDisruptionBudgetSpec`.
fn pdb(spec: &Value, e: &mut Vec<FieldError>) {
    let min = spec.get("minAvailable").filter(|v| !v.is_null());
    let max = spec.get("maxUnavailable").filter(|v| !v.is_null());
    if min.is_some() && max.is_some() {
        // From 1.36 the bad value is the internal Go struct, which has no
        // JSON tags: its field names, in its order, with nil as null.
        let shown = if since(36) {
            json!({
                "MinAvailable": min,
                "Selector": spec.get("selector").filter(|v| !v.is_null()),
                "MaxUnavailable": max,
                "UnhealthyPodEvictionPolicy": spec.get("unhealthyPodEvictionPolicy").filter(|v| !v.is_null()),
            })
        } else {
            spec.clone()
        };
        e.push(invalid("spec", shown, "minAvailable and maxUnavailable cannot be both set"));
    }
    for (field, v) in [("minAvailable", min), ("maxUnavailable", max)] {
        match v {
            Some(Value::Number(n)) if n.as_i64().is_some_and(|n| n < 0) => {
                e.push(invalid(format!("spec.{field}"), n.as_i64().unwrap_or(0), "must be greater than or equal to 0"))
            }
            Some(Value::String(p)) => match p.strip_suffix('%').and_then(|n| n.parse::<u32>().ok()) {
                None => e.push(invalid(
                    format!("spec.{field}"),
                    p.as_str(),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                )),
                Some(n) if n > 100 => {
                    e.push(invalid(format!("spec.{field}"), p.as_str(), "must not be greater than 100%"))
                }
                _ => {}
            },
            _ => {}
        }
    }
    if let Some(sel) = spec.get("selector") {
        labels(sel.get("matchLabels"), "spec.selector.matchLabels", e);
    }
}

/// `ValidatePriorityClass` and its update rule.
fn priority_class(obj: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    let name = s(obj, "/metadata/name").unwrap_or_default();
    let value = obj.get("value").and_then(Value::as_i64).unwrap_or(0);
    let global_default = obj.get("globalDefault").and_then(Value::as_bool).unwrap_or(false);
    if name.starts_with("system-") {
        // `IsKnownSystemPriorityClass`: the two built-in classes, each with
        // its own value and never the global default.
        let known = [("system-node-critical", 2_000_001_000), ("system-cluster-critical", 2_000_000_000)];
        let why = match known.iter().find(|(n, _)| *n == name) {
            None => Some(format!("{name} is not a known system priority class")),
            Some((n, v)) if *v != value => Some(format!("value of {n} PriorityClass must be {v}")),
            Some((n, _)) if global_default => Some(format!("globalDefault of {n} PriorityClass must be false")),
            Some(_) => None,
        };
        if let Some(why) = why {
            let base = "priority class names with 'system-' prefix are reserved for system use only";
            e.push(forbidden("metadata.name", &format!("{base}. error: {why}")));
        }
    } else if value > 1_000_000_000 {
        e.push(forbidden("value", "maximum allowed value of a user defined priority is 1000000000"));
    }
    if let Some(p) = s(obj, "/preemptionPolicy") {
        if !["Never", "PreemptLowerPriority"].contains(&p) {
            e.push(not_supported("preemptionPolicy", p, &["Never", "PreemptLowerPriority"]));
        }
    }
    if let Some(old) = old {
        if old.get("value") != obj.get("value") {
            e.push(forbidden("value", "may not be changed in an update."));
        }
    }
}

/// `ValidateLeaseSpec`.
fn lease(spec: &Value, e: &mut Vec<FieldError>) {
    if let Some(n) = spec.get("leaseDurationSeconds").and_then(Value::as_i64).filter(|n| *n <= 0) {
        e.push(invalid("spec.leaseDurationSeconds", n, "must be greater than 0"));
    }
    if let Some(n) = spec.get("leaseTransitions").and_then(Value::as_i64).filter(|n| *n < 0) {
        e.push(invalid("spec.leaseTransitions", n, "must be greater than or equal to 0"));
    }
}

/// `ValidatePolicyRule` for each rule of a Role or ClusterRole.
fn rbac_rules(kind: &str, obj: &Value, e: &mut Vec<FieldError>) {
    for (i, r) in items(obj.get("rules")).iter().enumerate() {
        let p = format!("rules[{i}]");
        if items(r.get("verbs")).is_empty() {
            e.push(required(format!("{p}.verbs"), "verbs must contain at least one value"));
        }
        let urls = !items(r.get("nonResourceURLs")).is_empty();
        if urls {
            if kind == "Role" {
                e.push(invalid(
                    format!("{p}.nonResourceURLs"),
                    r["nonResourceURLs"].clone(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !items(r.get("apiGroups")).is_empty() || !items(r.get("resources")).is_empty() {
                e.push(invalid(
                    format!("{p}.nonResourceURLs"),
                    r["nonResourceURLs"].clone(),
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if items(r.get("apiGroups")).is_empty() {
            e.push(required(format!("{p}.apiGroups"), "resource rules must supply at least one api group"));
        }
        if items(r.get("resources")).is_empty() {
            e.push(required(format!("{p}.resources"), "resource rules must supply at least one resource"));
        }
    }
}

/// `ValidateRoleBinding` and its update rule (roleRef is immutable).
fn role_binding(kind: &str, obj: &Value, old: Option<&Value>, e: &mut Vec<FieldError>) {
    let rr = obj.get("roleRef").unwrap_or(&Value::Null);
    let allowed: &[&str] = if kind == "RoleBinding" { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    let rk = s(rr, "/kind").unwrap_or_default();
    if !allowed.contains(&rk) {
        e.push(not_supported("roleRef.kind", rk, allowed));
    }
    let ag = s(rr, "/apiGroup").unwrap_or_default();
    if ag != "rbac.authorization.k8s.io" {
        e.push(not_supported("roleRef.apiGroup", ag, &["rbac.authorization.k8s.io"]));
    }
    if s(rr, "/name").unwrap_or_default().is_empty() {
        e.push(required("roleRef.name", ""));
    }
    for (i, sub) in items(obj.get("subjects")).iter().enumerate() {
        let p = format!("subjects[{i}]");
        if s(sub, "/name").unwrap_or_default().is_empty() {
            e.push(required(format!("{p}.name"), ""));
        }
        let k = s(sub, "/kind").unwrap_or_default();
        if !["ServiceAccount", "User", "Group"].contains(&k) {
            e.push(not_supported(format!("{p}.kind"), k, &["ServiceAccount", "User", "Group"]));
        }
    }
    if let Some(old) = old {
        if old.get("roleRef") != obj.get("roleRef") {
            e.push(invalid("roleRef", rr.clone(), "cannot change roleRef"));
        }
    }
}

#[cfg(test)]
mod formats {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn matched_by_hand_as_by_the_pattern(s in "[aZ09._/ -]{0,8}") {
            for fmt in [DNS1123_LABEL_FMT, DNS1123_SUBDOMAIN_FMT, DNS1035_LABEL_FMT, QUALIFIED_NAME_FMT, LABEL_VALUE_FMT, CONFIG_KEY_FMT] {
                prop_assert_eq!(by_hand(fmt, &s), Some(by_regex(fmt, &s)), "{} against {:?}", fmt, s);
            }
        }
    }
}
