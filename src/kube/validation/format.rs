//! apimachinery's `util/validation`: the formats names and values must
//! have (DNS labels and subdomains, qualified names, label values, config
//! keys, port and environment variable names, path segments) with their
//! message texts, and quantities. Under every kind's rules; names none of them.

use serde_json::Value;

use super::since;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";

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
