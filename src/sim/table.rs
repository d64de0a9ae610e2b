//! Server-side printing (`Accept: …;as=Table;g=meta.k8s.io`): the columns
//! `kubectl get` shows — node status, pod readiness, deployment rollout
//! state, CRD printer columns — computed here as the real server does.

use serde_json::{json, Value};

use super::registry::ResourceType;

fn s<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// kubectl's short age: 45s, 3m, 5h, 2d.
pub fn age(created: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else { return "<unknown>".into() };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

fn column(name: &str, ty: &str, priority: u8) -> Value {
    json!({"name": name, "type": ty, "format": if name == "Name" { "name" } else { "" }, "description": "", "priority": priority})
}

fn columns(t: &ResourceType) -> Vec<Value> {
    let mut c = vec![column("Name", "string", 0)];
    match (t.group.as_str(), t.plural.as_str()) {
        ("", "nodes") => c.extend([
            column("Status", "string", 0),
            column("Roles", "string", 0),
            column("Age", "string", 0),
            column("Version", "string", 0),
            column("Internal-IP", "string", 1),
        ]),
        ("certificates.k8s.io", "certificatesigningrequests") => c.extend([
            column("Age", "date", 0),
            column("SignerName", "string", 0),
            column("Requestor", "string", 0),
            column("RequestedDuration", "string", 0),
            column("Condition", "string", 0),
        ]),
        ("", "pods") => c.extend([
            column("Ready", "string", 0),
            column("Status", "string", 0),
            column("Restarts", "string", 0),
            column("Age", "string", 0),
            column("IP", "string", 1),
            column("Node", "string", 1),
        ]),
        ("apps", "deployments") => c.extend([
            column("Ready", "string", 0),
            column("Up-to-date", "integer", 0),
            column("Available", "integer", 0),
            column("Age", "string", 0),
        ]),
        ("apps", "replicasets") => c.extend([
            column("Desired", "integer", 0),
            column("Current", "integer", 0),
            column("Ready", "integer", 0),
            column("Age", "string", 0),
        ]),
        ("apps", "daemonsets") => c.extend([
            column("Desired", "integer", 0),
            column("Current", "integer", 0),
            column("Ready", "integer", 0),
            column("Age", "string", 0),
        ]),
        ("apps", "statefulsets") => c.extend([column("Ready", "string", 0), column("Age", "string", 0)]),
        ("batch", "jobs") => {
            c.extend([column("Status", "string", 0), column("Completions", "string", 0), column("Age", "string", 0)])
        }
        ("", "configmaps") => c.extend([column("Data", "integer", 0), column("Age", "string", 0)]),
        ("policy", "poddisruptionbudgets") => c.extend([
            column("Min Available", "string", 0),
            column("Max Unavailable", "string", 0),
            column("Allowed Disruptions", "integer", 0),
            column("Age", "string", 0),
        ]),
        _ if !t.columns.is_empty() => {
            for col in &t.columns {
                let prio = col.get("priority").and_then(Value::as_u64).unwrap_or(0) as u8;
                c.push(column(col.get("name").and_then(Value::as_str).unwrap_or(""), "string", prio));
            }
            if !t.columns.iter().any(|c| c.get("name").and_then(Value::as_str) == Some("Age")) {
                c.push(column("Age", "string", 0));
            }
        }
        _ => c.push(column("Age", "string", 0)),
    }
    c
}

fn cells(t: &ResourceType, o: &Value) -> Vec<Value> {
    let age_text = age(s(o, "/metadata/creationTimestamp"));
    let mut c = vec![json!(s(o, "/metadata/name"))];
    let i = |p: &str| o.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    match (t.group.as_str(), t.plural.as_str()) {
        ("", "nodes") => {
            node_cells(o, &mut c, &age_text);
        }
        ("certificates.k8s.io", "certificatesigningrequests") => {
            // As kubectl prints them: Approved,Issued / Denied / Pending.
            let conds: Vec<&str> = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|c| c["type"].as_str()).collect())
                .unwrap_or_default();
            let mut condition = if conds.is_empty() { "Pending".to_string() } else { conds.join(",") };
            if o.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty()) {
                condition.push_str(",Issued");
            }
            c.extend([
                json!(age_text),
                json!(s(o, "/spec/signerName")),
                json!(s(o, "/spec/username")),
                json!("<none>"),
                json!(condition),
            ]);
        }
        ("", "pods") => {
            pod_cells(o, &mut c, &age_text);
        }
        ("apps", "deployments") => c.extend([
            json!(format!(
                "{}/{}",
                i("/status/readyReplicas"),
                o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
            )),
            json!(i("/status/updatedReplicas")),
            json!(i("/status/availableReplicas")),
            json!(age_text),
        ]),
        ("apps", "replicasets") => c.extend([
            json!(i("/spec/replicas")),
            json!(i("/status/replicas")),
            json!(i("/status/readyReplicas")),
            json!(age_text),
        ]),
        ("apps", "daemonsets") => c.extend([
            json!(i("/status/desiredNumberScheduled")),
            json!(i("/status/currentNumberScheduled")),
            json!(i("/status/numberReady")),
            json!(age_text),
        ]),
        ("apps", "statefulsets") => c.extend([
            json!(format!(
                "{}/{}",
                i("/status/readyReplicas"),
                o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1)
            )),
            json!(age_text),
        ]),
        ("batch", "jobs") => {
            let done = o
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| {
                    c.iter().find(|c| c["status"] == "True" && (c["type"] == "Complete" || c["type"] == "Failed"))
                })
                .map(|c| c["type"].as_str().unwrap_or_default().to_string());
            let status = done.unwrap_or_else(|| "Running".into());
            let completions = o.pointer("/spec/completions").and_then(Value::as_i64).unwrap_or(1);
            c.extend([json!(status), json!(format!("{}/{completions}", i("/status/succeeded"))), json!(age_text)]);
        }
        ("", "configmaps") => {
            c.extend([json!(o.get("data").and_then(Value::as_object).map(|d| d.len()).unwrap_or(0)), json!(age_text)])
        }
        ("policy", "poddisruptionbudgets") => {
            let show = |p: &str| {
                o.pointer(p)
                    .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
                    .unwrap_or_else(|| "N/A".into())
            };
            c.extend([
                json!(show("/spec/minAvailable")),
                json!(show("/spec/maxUnavailable")),
                json!(i("/status/disruptionsAllowed")),
                json!(age_text),
            ]);
        }
        _ if !t.columns.is_empty() => {
            for col in &t.columns {
                let path = col.get("jsonPath").and_then(Value::as_str).unwrap_or_default();
                let v = jsonpath(o, path).cloned().unwrap_or(Value::Null);
                let text = match (col.get("type").and_then(Value::as_str), &v) {
                    (Some("date"), Value::String(d)) => age(d),
                    (_, Value::String(s)) => s.clone(),
                    (_, Value::Null) => "<none>".into(),
                    (_, other) => other.to_string(),
                };
                c.push(json!(text));
            }
            if !t.columns.iter().any(|c| c.get("name").and_then(Value::as_str) == Some("Age")) {
                c.push(json!(age_text));
            }
        }
        _ => c.push(json!(age_text)),
    }
    c
}

/// A Node's columns: status, roles, age, version.
fn node_cells(o: &Value, c: &mut Vec<Value>, age_text: &str) {
    let ready = o
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"] == "True");
    let mut status = match ready {
        Some(true) => "Ready".to_string(),
        Some(false) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let roles: Vec<&str> = o
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|l| l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).collect())
        .unwrap_or_default();
    c.extend([
        json!(status),
        json!(if roles.is_empty() { "<none>".to_string() } else { roles.join(",") }),
        json!(age_text),
        json!(s(o, "/status/nodeInfo/kubeletVersion")),
        json!("<none>"),
    ]);
}

/// A Pod's columns: ready, status, restarts, age.
fn pod_cells(o: &Value, c: &mut Vec<Value>, age_text: &str) {
    let total = o.pointer("/spec/containers").and_then(Value::as_array).map(Vec::len).unwrap_or(0);
    let ready = o
        .pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|c| c["ready"] == true).count())
        .unwrap_or(0);
    // As the server's pod printer: the phase, overridden by a
    // container's waiting or terminated reason (last container
    // first), "Terminating" while deleted; restarts summed.
    let mut reason = s(o, "/status/phase").to_string();
    if reason.is_empty() {
        reason = "Pending".into();
    }
    let mut restarts = 0;
    let mut has_running = false;
    let statuses = o.pointer("/status/containerStatuses").and_then(Value::as_array).cloned().unwrap_or_default();
    for st in statuses.iter().rev() {
        restarts += st["restartCount"].as_i64().unwrap_or(0);
        let waiting = st.pointer("/state/waiting/reason").and_then(Value::as_str).filter(|r| !r.is_empty());
        let terminated = st.pointer("/state/terminated/reason").and_then(Value::as_str).filter(|r| !r.is_empty());
        if let Some(r) = waiting.or(terminated) {
            reason = r.to_string();
        } else if st["ready"] == true && st.pointer("/state/running").is_some() {
            has_running = true;
        }
    }
    if reason == "Completed" && has_running {
        reason = "Running".into();
    }
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        reason = "Terminating".into();
    }
    let ip = s(o, "/status/podIP");
    let node = s(o, "/spec/nodeName");
    c.extend([
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts.to_string()),
        json!(age_text),
        json!(if ip.is_empty() { "<none>" } else { ip }),
        json!(if node.is_empty() { "<none>" } else { node }),
    ]);
}

/// The JSONPath subset printer columns use: `.a.b`, `[N]`, and
/// `[?(@.key=="value")]` (first match).
pub fn jsonpath<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    let mut rest = path.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            cur = cur.get(&r[..end])?;
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix("[?(@.") {
            let end = r.find(")]")?;
            let (key, want) = r[..end].split_once("==")?;
            let want = want.trim().trim_matches(|c| c == '"' || c == '\'');
            cur = cur.as_array()?.iter().find(|item| item.get(key.trim()).and_then(Value::as_str) == Some(want))?;
            rest = &r[end + 2..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            cur = cur.get(r[..end].parse::<usize>().ok()?)?;
            rest = &r[end + 1..];
        } else {
            return None;
        }
    }
    Some(cur)
}

fn partial(o: &Value) -> Value {
    let m = o.get("metadata").cloned().unwrap_or(json!({}));
    let mut meta = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "labels",
        "annotations",
        "deletionTimestamp",
    ] {
        if let Some(v) = m.get(f) {
            meta[f] = v.clone();
        }
    }
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta})
}

/// A Table of `items`, as the real server renders it for kubectl.
pub fn table(t: &ResourceType, items: &[Value], resource_version: &str, cont: Option<&str>) -> Value {
    let rows: Vec<Value> = items.iter().map(|o| json!({"cells": cells(t, o), "object": partial(o)})).collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(c) = cont {
        metadata["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": columns(t), "rows": rows})
}

/// Whether the client asked for server-side printing.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').next().is_some_and(|first| first.contains("as=Table"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"status": {"conditions": [{"type": "Progressing", "status": "True"}, {"type": "Ready", "status": "False", "reason": "RollingOut"}]}, "spec": {"replicas": 3}});
        assert_eq!(jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"), Some(&json!("False")));
        assert_eq!(jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].reason"), Some(&json!("RollingOut")));
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), Some(&json!("Progressing")));
        assert_eq!(jsonpath(&o, ".spec.replicas"), Some(&json!(3)));
        assert_eq!(jsonpath(&o, ".spec.missing"), None);
    }
}
