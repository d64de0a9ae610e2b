//! Label selectors (`app=web,tier!=db,env in (a,b),!legacy`) and the field
//! selectors the emulator supports (metadata.name, metadata.namespace,
//! spec.nodeName, status.phase, and any other plain path).

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

/// A selector that selects nothing (`matchExpressions` with an unknown operator).
const NOTHING: &str = "\u{0}never";

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

fn set_values(s: &str) -> Vec<String> {
    s.trim()
        .trim_start_matches('(')
        .trim_end_matches(')')
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            if let Some(k) = p.strip_prefix('!') {
                reqs.push(Req::NotExists(k.trim().to_string()));
            } else if let Some((k, v)) = p.split_once("!=") {
                reqs.push(Req::Ne(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once("==") {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some((k, v)) = p.split_once('=') {
                reqs.push(Req::Eq(k.trim().into(), v.trim().into()));
            } else if let Some(i) = p.find(" notin ") {
                reqs.push(Req::NotIn(p[..i].trim().into(), set_values(&p[i + 7..])));
            } else if let Some(i) = p.find(" in ") {
                reqs.push(Req::In(p[..i].trim().into(), set_values(&p[i + 4..])));
            } else if p.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                reqs.push(Req::Exists(p.to_string()));
            } else {
                return Err(format!("unable to parse requirement: {p:?}"));
            }
        }
        Ok(LabelSelector(reqs))
    }

    /// From a `metav1.LabelSelector` object (matchLabels, matchExpressions).
    pub fn from_label_selector(v: &Value) -> Self {
        let mut reqs = Vec::new();
        if let Some(m) = v.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in m {
                reqs.push(Req::Eq(k.clone(), val.as_str().unwrap_or_default().to_string()));
            }
        }
        if let Some(exprs) = v.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e.get("key").and_then(Value::as_str).unwrap_or_default().to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                reqs.push(match e.get("operator").and_then(Value::as_str) {
                    Some("In") => Req::In(key, values),
                    Some("NotIn") => Req::NotIn(key, values),
                    Some("Exists") => Req::Exists(key),
                    Some("DoesNotExist") => Req::NotExists(key),
                    _ => Req::Exists(NOTHING.into()),
                });
            }
        }
        LabelSelector(reqs)
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|r| match r {
                Req::Eq(k, v) => format!("{k}={v}"),
                Req::Ne(k, v) => format!("{k}!={v}"),
                Req::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Req::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Req::Exists(k) => k.clone(),
                Req::NotExists(k) => format!("!{k}"),
            })
            .collect();
        write!(f, "{}", parts.join(","))
    }
}

#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {part:?}"));
            };
            out.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let ptr = format!("/{}", path.replace('.', "/"));
            let have = match obj.pointer(&ptr) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (have == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "web", "env": "prod"}}});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,env=prod", true),
            ("app!=web", false),
            ("env in (dev, prod)", true),
            ("env notin (prod)", false),
            ("app", true),
            ("!app", false),
            ("!tier", true),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
        let s = LabelSelector::from_label_selector(
            &json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}]}),
        );
        assert!(s.matches(&o));
        assert_eq!(s.to_string(), "app=web,env in (prod)");
    }

    #[test]
    fn field_selectors() {
        let p = json!({"metadata": {"name": "p1", "namespace": "default"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed").unwrap().matches(&p));
        assert!(!FieldSelector::parse("metadata.name=p2").unwrap().matches(&p));
        assert!(FieldSelector::parse("spec.nodeName=").unwrap().matches(&json!({})));
    }
}
