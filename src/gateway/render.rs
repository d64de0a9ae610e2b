//! The gateway's answers as text for the terminal (pure): what
//! `pinfleet submit` and `pinfleet workloads list` print from the API's
//! JSON. What a team or a workload looks like (`queue`, `quota`,
//! `workloads describe`) is the console's views, drawn as text.

use std::fmt::Write as _;

use serde_json::Value;

use crate::views::text::table;

fn s<'a>(v: &'a Value, p: &str) -> &'a str {
    v.pointer(p).and_then(Value::as_str).unwrap_or("")
}

fn when(v: &Value) -> String {
    v.as_str()
        .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
        .map(|t| t.format("%H:%M:%S").to_string())
        .unwrap_or_else(|| "-".into())
}

fn estimate(e: &Value) -> String {
    if e.is_null() {
        return "unknown".into();
    }
    let a = when(&e["earliest"]);
    let b = when(&e["latest"]);
    if a == b {
        a
    } else {
        format!("{a}–{b}")
    }
}

/// The answer to `submit`.
pub fn decision(d: &Value) -> String {
    let mut out = String::new();
    let outcome = s(d, "/outcome");
    let name = s(d, "/name");
    let _ = writeln!(
        out,
        "{}{}{} (team {}, id {}){}",
        if d["dryRun"] == true { "dry run: " } else { "" },
        outcome,
        if name.is_empty() { String::new() } else { format!(" {name}") },
        s(d, "/team"),
        s(d, "/id"),
        if d["retry"] == true { ": a retry, this is the first answer" } else { "" }
    );
    if !s(d, "/demand").is_empty() {
        let _ = writeln!(out, "  asks: {}", s(d, "/demand"));
    }
    for p in d["problems"].as_array().into_iter().flatten() {
        let f = s(p, "/field");
        let _ = writeln!(
            out,
            "  ✗ [{}] {}{}",
            s(p, "/layer"),
            if f.is_empty() { String::new() } else { format!("{f}: ") },
            s(p, "/message")
        );
    }
    if let Some(w) = d.get("waiting").filter(|w| !w.is_null()) {
        out.push_str(&waiting(w));
    }
    out
}

fn waiting(w: &Value) -> String {
    format!(
        "  position {} in its team's queue ({} ahead in the fleet), expected start {}\n  why: {}\n  unblocks when: {}\n",
        w["position"],
        w["aheadInFleet"],
        estimate(&w["estimate"]),
        s(w, "/why/message"),
        s(w, "/why/unblock")
    )
}

/// `pinfleet workloads list`.
pub fn list(v: &Value) -> String {
    let rows: Vec<Vec<String>> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|i| {
            let placement: Vec<String> = i["status"]["placement"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| format!("{}:{}", s(p, "/cluster"), p["replicas"]))
                .collect();
            let why = match i.get("waiting").filter(|w| !w.is_null()) {
                Some(w) => format!("#{} {}", w["position"], s(w, "/why/message")),
                None => s(i, "/status/message").to_string(),
            };
            vec![
                s(i, "/team").into(),
                s(i, "/id").into(),
                format!("{}/{}", s(i, "/kind"), s(i, "/workload")),
                s(i, "/tier").into(),
                s(i, "/status/phase").into(),
                if placement.is_empty() { "-".into() } else { placement.join(",") },
                why,
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no workloads\n".into();
    }
    table(&["TEAM", "ID", "WORKLOAD", "TIER", "PHASE", "PLACED", "NOTE"], &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn waiting() -> Value {
        json!({"position": 1, "aheadInFleet": 3, "estimate": {"earliest": "2026-11-24T10:30:05Z", "latest": "2026-11-24T10:45:05Z"},
            "why": {"message": "team ads's OnDemand maximum: 6 of 8 cpu in use, this asks 4 (2 over)", "unblock": "2 cpu freed by team ads's OnDemand work finishing, or a higher maximum"}})
    }

    #[test]
    fn a_decision_reads_as_the_outcome_its_problems_or_its_wait() {
        let rejected = json!({"id": "b1", "name": "", "team": "ads", "dryRun": false, "outcome": "rejected", "demand": "", "retry": false,
            "problems": [{"layer": "schema", "field": "spec.replicas", "message": "Invalid value: -1: spec.replicas in body should be greater than or equal to 0"},
                         {"layer": "platform", "field": "spec.owner.team", "message": "\"search\" is not a team of bob (theirs: ads)"}]});
        let waiting = json!({"id": "b2", "name": "ads-1f2e", "team": "ads", "dryRun": true, "outcome": "would wait", "demand": "cpu 4, memory 4Gi, pods 4", "retry": false, "waiting": waiting()});
        insta::assert_snapshot!(format!("{}\n{}", decision(&rejected), decision(&waiting)));
    }

    #[test]
    fn a_list_of_submissions_as_a_table() {
        let item = json!({"team": "search", "id": "web-1", "name": "search-0a1b", "kind": "PinterestService", "workload": "web", "tier": "OnDemand", "priority": 0,
            "submittedBy": "alice", "artifact": "registry.example.com/web:1.2", "demand": "cpu 1500m, memory 3Gi, pods 3", "created": "2026-11-24T10:00:00Z",
            "status": {"phase": "Running", "placement": [{"cluster": "east-1", "replicas": 2, "reason": "capacity 40", "state": "Ready"}, {"cluster": "east-2", "replicas": 1, "reason": "capacity 12", "state": "Unreachable", "message": "not reached; last seen 2026-11-24T10:01:00Z"}]},
            "latency": {"admitted": 0.41, "placed": 0.2, "pods_created": 1.5}});
        let queued = json!({"team": "ads", "id": "train-7", "name": "ads-9c8d", "kind": "PinterestJobSet", "workload": "train", "tier": "OnDemand", "priority": 5,
            "status": {"phase": "Queued"}, "waiting": waiting(), "latency": {}});
        insta::assert_snapshot!(list(&json!({"items": [item, queued]})));
    }
}
