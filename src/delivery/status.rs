//! Where a delivery stands, as text (pure): the version and its state,
//! the line, the thresholds the analysis judges by, each wave with its
//! clusters (what they ran, what they move to, the analysis' numbers),
//! why anything is not moving, and whether the version is marked bad.
//!
//! ```text
//! FleetRollout + analyses + line (book) + the file's analysis ─▶ text ─▶ `pinfleet delivery status`
//! ```

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::analysis::{Analysis, Phase};
use super::book::{Bad, ClusterAnalysis, Stopped};
use crate::fleet::rollout::{decide, ClusterState, FleetRollout, RolloutState, Snapshot, Windows};

/// Everything `status` shows (also its `-o json`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub record: FleetRollout,
    pub analyses: BTreeMap<String, ClusterAnalysis>,
    pub line: Option<Stopped>,
    pub bad: Vec<Bad>,
    pub why: BTreeMap<String, String>,
    /// A freeze window holding it now, and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen: Option<String>,
    /// The workload's error budget left, as Prometheus says now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// The analysis each wave is judged by (the delivery file's): its
    /// measurements, limits and each metric's thresholds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judged_by: Option<Analysis>,
}

impl Status {
    pub fn new(
        record: FleetRollout,
        analyses: BTreeMap<String, ClusterAnalysis>,
        line: Option<Stopped>,
        bad: Vec<Bad>,
        windows: &dyn Windows,
        approved: &BTreeSet<String>,
        now: DateTime<Utc>,
    ) -> Status {
        let why = if record.state == RolloutState::Running {
            decide(&record, windows, approved, now).why.into_iter().map(|(k, v)| (k, v.to_string())).collect()
        } else {
            BTreeMap::new()
        };
        Status { record, analyses, line, bad, why, frozen: None, budget: None, judged_by: None }
    }
}

/// `app@…sha256:0123456789ab` for each container.
fn images(s: &Snapshot) -> String {
    if s.images.is_empty() {
        return "-".into();
    }
    s.images
        .iter()
        .map(|(c, i)| {
            let short = match i.rsplit_once("@sha256:") {
                Some((_, hex)) => format!("sha256:{}", &hex[..hex.len().min(12)]),
                None => i.rsplit('/').next().unwrap_or(i).to_string(),
            };
            format!("{c}={short}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The analysis in one cell: the verdict and each metric's values.
pub fn analysis_cell(a: Option<&ClusterAnalysis>) -> String {
    let Some(a) = a else { return "-".into() };
    let mut by: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for m in &a.measurements {
        let v = match (m.value, m.phase) {
            (Some(x), Phase::Successful) => format!("{x:.4}"),
            (Some(x), p) => format!("{x:.4} {p}"),
            (None, p) => p.to_string(),
        };
        by.entry(m.metric.as_str()).or_default().push(v);
    }
    let numbers: Vec<String> = by.iter().map(|(k, v)| format!("{k} [{}]", v.join(", "))).collect();
    match a.bake_until {
        Some(t) if numbers.is_empty() && a.verdict == "baking" => format!("baking until {}", t.format("%H:%M:%S UTC")),
        _ if numbers.is_empty() => a.verdict.clone(),
        _ => format!("{}: {}", a.verdict, numbers.join("; ")),
    }
}

/// What a wave's analysis is judged by: how often and how long it
/// measures, its limits, and each metric's thresholds.
pub fn judged_by(a: &Analysis) -> String {
    let mut out = format!(
        "analysis: {} measurement(s) {} apart after a {} bake; fails past {} failed, holds past {} inconclusive\n",
        a.count,
        humantime::format_duration(a.interval),
        humantime::format_duration(a.bake),
        a.failure_limit,
        a.inconclusive_limit
    );
    for m in &a.metrics {
        out.push_str(&format!("  {}\n", m.bounds()));
    }
    out
}

pub fn text(s: &Status) -> String {
    let r = &s.record;
    let mut out = format!(
        "delivery #{} of {} · {} · started by {} {}\n",
        r.number,
        r.target.to_string().trim_start_matches("workload "),
        r.state,
        r.by,
        r.created_at.format("%Y-%m-%d %H:%M UTC")
    );
    match &s.line {
        Some(l) => out.push_str(&format!(
            "line: STOPPED by {} at {}: {} (only a --hotfix moves)\n",
            l.by,
            l.at.format("%Y-%m-%d %H:%M UTC"),
            l.reason
        )),
        None => out.push_str("line: open\n"),
    }
    if let Some(b) = &s.budget {
        out.push_str(&format!("{b}\n"));
    }
    if let Some(a) = &s.judged_by {
        out.push_str(&judged_by(a));
    }
    if let Some(f) = &s.frozen {
        out.push_str(&format!("frozen: {f} (a --hotfix goes past it, audited)\n"));
    }
    for st in &r.stages {
        let state = if let Some(t) = st.passed_at {
            format!("passed {}", t.format("%H:%M:%S UTC"))
        } else if let Some(h) = &st.held {
            format!("held: {h}; `pinfleet delivery approve FILE {}.gate` goes on, `rollback` goes back", st.name)
        } else if st.clusters.iter().all(|c| c.state == ClusterState::Pending) {
            "waiting".into()
        } else if r.state == RolloutState::Reverted {
            "rolled back".into()
        } else {
            "in progress".into()
        };
        out.push_str(&format!("wave {} ({} cluster(s)): {state}\n", st.name, st.clusters.len()));
        let rows: Vec<Vec<String>> = st
            .clusters
            .iter()
            .map(|c| {
                let state = match &c.state {
                    ClusterState::Failed(e) | ClusterState::RevertFailed(e) => format!("{}: {e}", c.state),
                    other => other.to_string(),
                };
                let state = match s.why.get(&c.name) {
                    Some(w) if c.state == ClusterState::Pending => format!("{state} ({w})"),
                    _ => state,
                };
                vec![
                    format!("{}{}", c.name, if c.canary { " (canary)" } else { "" }),
                    state,
                    images(&c.from),
                    images(&c.to),
                    analysis_cell(s.analyses.get(&c.name)),
                ]
            })
            .collect();
        for line in crate::output::table(&["CLUSTER", "STATE", "FROM", "TO", "ANALYSIS"], &rows).lines() {
            out.push_str(&format!("  {}\n", line.trim_end()));
        }
    }
    if let RolloutState::Halted(why) = &r.state {
        out.push_str(&format!("halted: {why}\n"));
    }
    for b in &s.bad {
        out.push_str(&format!(
            "BAD: {} ({} {}, delivery #{}) marked {}: {}; the gateway refuses it\n",
            b.image,
            b.workload,
            b.version,
            b.delivery,
            b.at.format("%Y-%m-%d %H:%M UTC"),
            b.reason
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::analysis::{measure, Answer};
    use crate::delivery::spec::DeliverySpec;
    use chrono::TimeZone;

    #[test]
    fn a_delivery_rolled_back_by_its_canarys_numbers() {
        let spec = DeliverySpec::parse(crate::delivery::spec::tests::FILE, std::path::Path::new("/d")).unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 11, 27, 6, 0, 0).unwrap();
        let mut r = crate::delivery::run::record(&spec, 4, "dev", t0);
        let old: Snapshot = Snapshot {
            images: [("app".to_string(), format!("127.0.0.1:5000/feeds/web@sha256:{}", "b".repeat(64)))].into(),
            ..Default::default()
        };
        let north = r.cluster_mut("north").unwrap();
        north.from = old;
        north.state = ClusterState::Reverted;
        r.state = RolloutState::Reverted;
        let m = &spec.analysis.metrics[0];
        let ms = vec![measure(m, Answer::Value(0.0007), t0), measure(m, Answer::Value(0.21), t0)];
        let analyses = [(
            "north".to_string(),
            ClusterAnalysis {
                cluster: "north".into(),
                measurements: ms,
                verdict: "failed: 1 of 2 measurements failed".into(),
                bake_until: None,
            },
        )]
        .into();
        let bad = vec![Bad {
            image: spec.images["app"].clone(),
            digest: format!("sha256:{}", "a".repeat(64)),
            workload: "feeds/web".into(),
            version: "v3".into(),
            delivery: 4,
            reason: "analysis failed on north".into(),
            at: t0,
        }];
        let mut s = Status::new(r, analyses, None, bad, &crate::fleet::rollout::Always, &BTreeSet::new(), t0);
        s.judged_by = Some(spec.analysis.clone());
        insta::assert_snapshot!(text(&s));
    }
}
