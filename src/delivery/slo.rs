//! SLOs per workload (pure): an SLI as two PromQL queries (errors and
//! total, each with `{{range}}`), an objective and a window; rendered as
//! Prometheus rules — the error ratio recorded over 5m, 30m, 1h, 6h and 3d,
//! and the multi-window, multi-burn-rate alerts of the SRE workbook:
//! page at 14.4× the budget's rate over 1h and 5m or 6× over 6h and 30m,
//! ticket at 1× over 3d and 6h. The same SLI, over one cluster, is what a
//! delivery's analysis checks when it names no metric of its own.
//!
//! ```text
//! Slo ─▶ rules(slo, vars) ─▶ rules YAML (promtool check/test rules; Prometheus)
//!    └─▶ analysis_metric(slo, burn) ─▶ delivery::analysis::Metric
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::analysis::{self, Condition, Metric, Op, Vars};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Slo {
    /// The SLO's name (`web-availability`): the rules' `slo` label.
    pub name: String,
    /// `availability` or `latency` (what the SLI counts as an error; shown).
    pub sli: String,
    /// Percent, e.g. 99.9.
    pub objective: f64,
    #[serde(with = "super::secs")]
    pub window: Duration,
    /// Bad events per second over `{{range}}`.
    pub errors: String,
    /// All events per second over `{{range}}`.
    pub total: String,
}

/// The burn-rate alerts: (alert, severity, factor, long window, short window).
pub const ALERTS: [(&str, &str, f64, &str, &str); 3] = [
    ("SLOErrorBudgetBurnFast", "page", 14.4, "1h", "5m"),
    ("SLOErrorBudgetBurnMedium", "page", 6.0, "6h", "30m"),
    ("SLOErrorBudgetBurnSlow", "ticket", 1.0, "3d", "6h"),
];

/// The ranges the error ratio is recorded over.
pub const RANGES: [&str; 5] = ["5m", "30m", "1h", "6h", "3d"];

impl Slo {
    /// The error budget: the share of events that may fail (0.001 for 99.9).
    pub fn budget(&self) -> f64 {
        // Rounded: 1 - 99.9/100 is 0.000999…89 in floating point.
        ((100.0 - self.objective) / 100.0 * 1e12).round() / 1e12
    }

    /// Problems with the SLO, each with its field.
    pub fn check(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !(self.objective > 0.0 && self.objective < 100.0) {
            out.push(format!("slo.objective: {} must be a percentage above 0 and below 100", self.objective));
        }
        if !crate::kube::validation::dns1123_label(&self.name).is_empty() {
            out.push(format!("slo.name: `{}` must be a DNS label (it names the rules)", self.name));
        }
        if !matches!(self.sli.as_str(), "availability" | "latency") {
            out.push(format!("slo.sli: `{}` is availability or latency", self.sli));
        }
        for (field, q) in [("errors", &self.errors), ("total", &self.total)] {
            if !q.contains("{{range}}") {
                out.push(format!("slo.{field}: the query needs `{{{{range}}}}` where its rate's range goes"));
            }
        }
        if self.window < Duration::from_secs(3 * 86400) {
            out.push("slo.window: at least 3d (the ticket alert looks back 3 days)".into());
        }
        out
    }

    /// The error ratio over `range`, one PromQL expression.
    pub fn ratio(&self, v: &Vars, range: &str) -> String {
        format!("({})\n/\n({})", analysis::render(&self.errors, v, range), analysis::render(&self.total, v, range))
    }
}

fn record_name(range: &str) -> String {
    format!("slo:sli_error:ratio_rate{range}")
}

/// The rules file for `slo` of one workload; `{{cluster}}` matches every
/// cluster (`.+`: the queries use it in a regex matcher, `=~`).
pub fn rules(slo: &Slo, namespace: &str, workload: &str) -> String {
    let v = Vars { cluster: ".+".into(), namespace: namespace.into(), workload: workload.into(), version: ".+".into() };
    let labels = format!("slo: {}\n          namespace: {namespace}\n          workload: {workload}", slo.name);
    let mut out = String::new();
    out.push_str(&format!(
        "# SLO {} of {namespace}/{workload}: {}% {} over {} (rendered by pinfleet)\n",
        slo.name,
        slo.objective,
        slo.sli,
        humantime::format_duration(slo.window)
    ));
    out.push_str("groups:\n");
    out.push_str(&format!("  - name: slo-{}-{}-{}\n    rules:\n", namespace, workload, slo.name));
    for range in RANGES {
        let expr = slo.ratio(&v, range);
        out.push_str(&format!(
            "      - record: {}\n        expr: |\n{}\n        labels:\n          {labels}\n",
            record_name(range),
            indent(&expr, 10)
        ));
    }
    for (alert, severity, factor, long, short) in ALERTS {
        let bound = factor * slo.budget();
        let sel = format!("{{slo=\"{}\",namespace=\"{namespace}\",workload=\"{workload}\"}}", slo.name);
        let expr = format!(
            "{long_rec}{sel} > ({factor} * {budget})\nand\n{short_rec}{sel} > ({factor} * {budget})",
            long_rec = record_name(long),
            short_rec = record_name(short),
            budget = fmt_f(slo.budget()),
        );
        out.push_str(&format!(
            "      - alert: {alert}\n        expr: |\n{}\n        labels:\n          severity: {severity}\n          burn: \"{factor}\"\n          {labels}\n        annotations:\n          summary: \"{namespace}/{workload} burns its {} error budget {factor}x too fast ({long} and {short} over {})\"\n",
            indent(&expr, 10),
            slo.name,
            fmt_f(bound),
        ));
    }
    out
}

fn fmt_f(x: f64) -> String {
    // Short and exact enough for a rule: 0.0144, 0.001.
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn indent(s: &str, n: usize) -> String {
    s.lines().map(|l| format!("{}{l}", " ".repeat(n))).collect::<Vec<_>>().join("\n")
}

/// The metric a delivery's analysis checks when it names none: the SLI's
/// error ratio over `range` on the wave's cluster and version, successful
/// at or below `burn` times the budget (`maxBurnRate`: the version may
/// spend its budget that many times as fast as the window allows), failed
/// above it. No band between is left inconclusive: only no data is.
pub fn analysis_metric(slo: &Slo, burn: f64, range: &str) -> Metric {
    let bound = burn * slo.budget();
    Metric {
        name: format!("{}-error-ratio", slo.name),
        query: format!("({})\n/\n({})", slo.errors.replace("{{range}}", range), slo.total.replace("{{range}}", range)),
        success_condition: Some(Condition { op: Op::Le, value: bound }),
        failure_condition: Some(Condition { op: Op::Gt, value: bound }),
        budget_burn: Some(analysis::BudgetBurn { max_burn_rate: burn, budget: slo.budget() }),
    }
}

/// The share of the window's error budget left, from the error ratio over
/// the window (1: untouched, 0 or less: spent).
pub fn budget_left(slo: &Slo, ratio_over_window: f64) -> f64 {
    if slo.budget() <= 0.0 {
        return 0.0;
    }
    1.0 - ratio_over_window / slo.budget()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn web() -> Slo {
        Slo {
            name: "web-availability".into(),
            sli: "availability".into(),
            objective: 99.9,
            window: Duration::from_secs(30 * 86400),
            errors: r#"sum(rate(http_requests_total{cluster=~"{{cluster}}",namespace="{{namespace}}",workload="{{workload}}",code=~"5.."}[{{range}}]))"#.into(),
            total: r#"sum(rate(http_requests_total{cluster=~"{{cluster}}",namespace="{{namespace}}",workload="{{workload}}"}[{{range}}]))"#.into(),
        }
    }

    #[test]
    fn the_rules_of_an_availability_slo() {
        insta::assert_snapshot!(rules(&web(), "feeds", "web"));
    }

    #[test]
    fn an_slo_says_what_is_wrong_with_it() {
        let mut s = web();
        s.objective = 100.0;
        s.name = "Web!".into();
        s.errors = "sum(rate(x[5m]))".into();
        s.window = Duration::from_secs(3600);
        let p = s.check().join("\n");
        for want in ["slo.objective", "slo.name", "slo.errors: the query needs `{{range}}`", "slo.window"] {
            assert!(p.contains(want), "{want} in {p}");
        }
        assert!(web().check().is_empty());
    }

    #[test]
    fn the_analysis_checks_the_same_sli_within_its_burn() {
        let m = analysis_metric(&web(), 1.0, "1m");
        assert!(m.query.contains("[1m]") && m.query.contains("code=~\"5..\""));
        assert!((budget_left(&web(), 0.0005) - 0.5).abs() < 1e-9);
        // Past maxBurnRate times the budget it fails; within it, it passes.
        let at = chrono::Utc::now();
        let phase = |m: &Metric, x: f64| analysis::measure(m, analysis::Answer::Value(x), at).phase;
        for (burn, within, past) in
            [(1.0, 0.001, 0.0011), (1.0, 0.0, 0.002), (2.0, 0.002, 0.0021), (0.5, 0.0005, 0.0006)]
        {
            let m = analysis_metric(&web(), burn, "1m");
            assert_eq!(phase(&m, within), analysis::Phase::Successful, "{within} at {burn}x");
            assert_eq!(phase(&m, past), analysis::Phase::Failed, "{past} at {burn}x");
        }
        assert_eq!(
            m.bounds(),
            "web-availability-error-ratio: ok <= 0.001, FAILED > 0.001 \
             (the error ratio at 1× the error budget's burn rate: 0.1% of events failing)"
        );
    }
}
