//! apimachinery's `ValidateObjectMeta`: an object's name (checked as its
//! kind names are), labels and annotations. Every object passes here
//! first; the kinds' rules call [`labels`] for the label maps they carry.

use serde_json::Value;

use super::format::{dns1035_label, dns1123_label, dns1123_subdomain, label_value, path_segment_name, qualified_name};
use super::{entries, err, invalid, required, s, since, ErrorType, FieldError};

/// `TotalAnnotationSizeLimitB`: 256 KiB for all annotations of an object.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 * 1024;

/// How a kind's names are checked (`ValidateObjectMeta`'s `nameFn`).
#[derive(Clone, Copy)]
pub(super) enum NameRule {
    Subdomain,
    Label,
    Dns1035,
    PathSegment,
}

pub(super) fn name_rule(group: &str, kind: &str) -> NameRule {
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

/// `ValidateObjectMeta`: name or generateName, labels, annotations.
pub(super) fn object_meta(m: &Value, rule: NameRule, path: &str, e: &mut Vec<FieldError>) {
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
pub(super) fn annotations(v: Option<&Value>, path: &str, e: &mut Vec<FieldError>) {
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
