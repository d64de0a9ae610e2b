//! The diff as text: one cluster's report by layer, the fleet's table, and
//! clusters compared. Pure; `cli::diff` prints what these return.

use std::fmt::Write as _;

use super::{Difference, Layer, LayerState, Report};

/// One cluster's report: each layer's state, then each finding with its fix.
pub fn report(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", r.cluster);
    for (layer, state) in &r.layers {
        match state {
            LayerState::InSync => {
                let _ = writeln!(out, "  {:<11} in sync", layer.name());
            }
            LayerState::Skipped { why } => {
                let _ = writeln!(out, "  {:<11} not checked: {why}", layer.name());
            }
            LayerState::Unreachable { why } => {
                let _ = writeln!(out, "  {:<11} unreachable: {why}", layer.name());
            }
            LayerState::Drifted { findings } => {
                let _ = writeln!(out, "  {:<11} drifted ({})", layer.name(), findings.len());
                for f in findings {
                    let _ = writeln!(out, "    - {}: {}", f.subject, f.what);
                    let _ = writeln!(out, "      fix: {}", f.fix);
                    if let Some(d) = &f.detail {
                        for line in d.lines() {
                            let _ = writeln!(out, "        {line}");
                        }
                    }
                }
            }
        }
    }
    out
}

/// The fleet at a glance: cluster × layer.
pub fn table(reports: &[Report], layers: &[Layer]) -> String {
    let width = reports.iter().map(|r| r.cluster.len()).max().unwrap_or(0).max("CLUSTER".len());
    let mut out = format!("{:<width$}", "CLUSTER");
    for l in layers {
        let _ = write!(out, "  {:<11}", l.name().to_uppercase());
    }
    out = out.trim_end().to_string();
    out.push('\n');
    for r in reports {
        let mut line = format!("{:<width$}", r.cluster);
        for l in layers {
            let word = r.layers.get(l).map_or("-", LayerState::word);
            let _ = write!(line, "  {word:<11}");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Clusters compared: the odd ones out first (three or more), then each
/// fact that differs with every cluster's value.
pub fn differences(clusters: &[String], diffs: &[Difference]) -> String {
    let mut out = String::new();
    if diffs.is_empty() {
        let _ = writeln!(out, "{} run the same (apart from what is expected to differ)", clusters.join(", "));
        return out;
    }
    let odd = super::odd_ones(diffs);
    for (c, n) in &odd {
        let _ = writeln!(
            out,
            "odd one out: {c} ({n} fact{} differ{} from the rest)",
            plural(*n),
            if *n == 1 { "s" } else { "" }
        );
    }
    if !odd.is_empty() {
        out.push('\n');
    }
    let n = diffs.len();
    let _ =
        writeln!(out, "{n} fact{} differ{} between {}:", plural(n), if n == 1 { "s" } else { "" }, clusters.join(", "));
    let width = clusters.iter().map(String::len).max().unwrap_or(0);
    for d in diffs {
        let _ = writeln!(out, "  {}", d.fact);
        for (c, v) in &d.values {
            let mark = if d.odd.contains(c) { "  <- odd one out" } else { "" };
            let _ = writeln!(out, "    {c:<width$}  {v}{mark}");
        }
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;

    fn sample() -> Vec<Report> {
        let a = Report {
            cluster: "dev-local".into(),
            layers: [
                (Layer::Aws, LayerState::Skipped { why: "--target sim has no AWS side".into() }),
                (Layer::Kubernetes, LayerState::InSync),
                (
                    Layer::Addons,
                    LayerState::Drifted {
                        findings: vec![Finding {
                            subject: "apps/v1 DaemonSet kube-system/node-exporter (monitoring)".into(),
                            what: "missing from the cluster (deleted, or never installed)".into(),
                            fix: "pinfleet addons apply dev-local".into(),
                            detail: Some("--- live\n+++ desired\n+kind: DaemonSet\n".into()),
                        }],
                    },
                ),
            ]
            .into(),
        };
        let b = Report {
            cluster: "prod-use1".into(),
            layers: [(Layer::Kubernetes, LayerState::Unreachable { why: "no kubeconfig".into() })].into(),
        };
        vec![a, b]
    }

    #[test]
    fn a_report_and_the_table() {
        let r = sample();
        insta::assert_snapshot!("diff_report", report(&r[0]));
        insta::assert_snapshot!("diff_table", table(&r, &[Layer::Aws, Layer::Kubernetes, Layer::Addons]));
    }

    #[test]
    fn differences_name_the_odd_one_out() {
        let d = vec![Difference {
            fact: "nodes of general kernelVersion".into(),
            values: [
                ("a".to_string(), "5.10.0 on every node".to_string()),
                ("b".into(), "5.10.0 on every node".into()),
                ("c".into(), "6.1.0 on every node".into()),
            ]
            .into(),
            odd: vec!["c".into()],
        }];
        let names: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        insta::assert_snapshot!("diff_differences", differences(&names, &d));
        insta::assert_snapshot!("diff_same", differences(&names, &[]));
    }
}
