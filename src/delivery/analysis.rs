//! A wave's analysis (pure), with Argo Rollouts' semantics: each metric
//! is measured `count` times, `interval` apart; a measurement is
//! successful, failed, inconclusive (no data, or neither condition says)
//! or an error (the query failed). The analysis fails once a metric has
//! more failed measurements than `failureLimit` (or more errors in a row
//! than `consecutiveErrorLimit`), is inconclusive once one has more
//! inconclusive ones than `inconclusiveLimit` (a person decides), and
//! succeeds when every metric has its count with neither.
//!
//! ```text
//! Analysis + the wave's cluster ─▶ query (rendered) ─▶ Prometheus (effects, delivery::prometheus)
//!        ▲                                                 │ value
//!        └──── judge(measurements) ◀── measure(metric, value)
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A bound a measured value is compared with: `< 0.01`, `>= 5`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Condition {
    pub op: Op,
    pub value: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = "<=")]
    Le,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = ">=")]
    Ge,
}

impl Condition {
    /// `< 0.01`, `result <= 0.2` (Argo's spelling), `>=5`.
    pub fn parse(s: &str) -> Result<Condition, String> {
        let t = s.trim();
        let t = t.strip_prefix("result").map(str::trim_start).unwrap_or(t);
        let (op, rest) = if let Some(r) = t.strip_prefix("<=") {
            (Op::Le, r)
        } else if let Some(r) = t.strip_prefix(">=") {
            (Op::Ge, r)
        } else if let Some(r) = t.strip_prefix('<') {
            (Op::Lt, r)
        } else if let Some(r) = t.strip_prefix('>') {
            (Op::Gt, r)
        } else {
            return Err(format!("`{s}`: expected a comparison with a number, e.g. \"< 0.01\" or \"result >= 0.99\""));
        };
        let value: f64 = rest.trim().parse().map_err(|_| format!("`{s}`: `{}` is not a number", rest.trim()))?;
        if !value.is_finite() {
            return Err(format!("`{s}`: the bound must be a finite number"));
        }
        Ok(Condition { op, value })
    }

    pub fn holds(&self, x: f64) -> bool {
        match self.op {
            Op::Lt => x < self.value,
            Op::Le => x <= self.value,
            Op::Gt => x > self.value,
            Op::Ge => x >= self.value,
        }
    }
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = match self.op {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        };
        write!(f, "{op} {}", number(self.value))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    pub name: String,
    /// PromQL with `{{cluster}}`, `{{namespace}}`, `{{workload}}`, `{{version}}`.
    pub query: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<Condition>,
    /// Where the analysis made this metric from the SLO: what its bound is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_burn: Option<BudgetBurn>,
}

/// A bound drawn from an SLO: `max_burn_rate` times the error budget (the
/// share of events that may fail), i.e. the error ratio that spends the
/// budget that many times as fast as the SLO's window allows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetBurn {
    pub max_burn_rate: f64,
    pub budget: f64,
}

impl Metric {
    /// The thresholds it is judged by, in words:
    /// `p99: ok < 0.3, FAILED >= 1, inconclusive between`.
    pub fn bounds(&self) -> String {
        let judged = match (self.success_condition, self.failure_condition) {
            (Some(s), Some(f)) if complementary(s, f) => format!("ok {s}, FAILED {f}"),
            (Some(s), Some(f)) => format!("ok {s}, FAILED {f}, inconclusive between"),
            (Some(s), None) => format!("ok {s}, FAILED otherwise"),
            (None, Some(f)) => format!("FAILED {f}, ok otherwise"),
            (None, None) => "no condition: inconclusive".into(),
        };
        match self.budget_burn {
            Some(b) => format!(
                "{}: {judged} (the error ratio at {}× the error budget's burn rate: {}% of events failing)",
                self.name,
                number(b.max_burn_rate),
                number(100.0 * b.budget * b.max_burn_rate)
            ),
            None => format!("{}: {judged}", self.name),
        }
    }
}

/// Whether every value meets one of the two conditions (`<= x` and `> x`):
/// no value is left inconclusive.
fn complementary(a: Condition, b: Condition) -> bool {
    a.value == b.value
        && matches!((a.op, b.op), (Op::Le, Op::Gt) | (Op::Lt, Op::Ge) | (Op::Gt, Op::Le) | (Op::Ge, Op::Lt))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Analysis {
    #[serde(with = "super::secs")]
    pub interval: Duration,
    pub count: u32,
    pub failure_limit: u32,
    pub inconclusive_limit: u32,
    pub consecutive_error_limit: u32,
    /// How long a wave runs the new version before its first measurement.
    #[serde(with = "super::secs")]
    pub bake: Duration,
    pub metrics: Vec<Metric>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    Successful,
    Failed,
    Inconclusive,
    Error,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Successful => "ok",
            Phase::Failed => "FAILED",
            Phase::Inconclusive => "inconclusive",
            Phase::Error => "error",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    pub metric: String,
    pub at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    pub phase: Phase,
    /// Why, in words: `0.2 is not < 0.01`, `no data`, the query's error.
    pub note: String,
}

/// What a query answered: a value, no data (an empty vector, or NaN: no
/// traffic to divide), or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Value(f64),
    NoData,
    Error(String),
}

/// A measured value in words: at most six decimals, no trailing zeros.
pub fn number(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_string()
    }
}

/// One measurement of `m` from its query's answer.
pub fn measure(m: &Metric, answer: Answer, at: DateTime<Utc>) -> Measurement {
    let (value, phase, note) = match answer {
        Answer::Error(e) => (None, Phase::Error, e),
        Answer::NoData => (None, Phase::Inconclusive, "no data".to_string()),
        Answer::Value(x) if !x.is_finite() => (None, Phase::Inconclusive, format!("{x} is not a number to judge")),
        Answer::Value(x) => {
            let (phase, note) = match (m.success_condition, m.failure_condition) {
                (_, Some(f)) if f.holds(x) => (Phase::Failed, format!("{} {f}", number(x))),
                (Some(s), _) if s.holds(x) => (Phase::Successful, format!("{} {s}", number(x))),
                // Only a success condition: not meeting it fails (as Argo judges).
                (Some(s), None) => (Phase::Failed, format!("{} is not {s}", number(x))),
                (Some(s), Some(f)) => (Phase::Inconclusive, format!("{} is neither {s} nor {f}", number(x))),
                // Only a failure condition, not met: successful.
                (None, Some(f)) => (Phase::Successful, format!("{} is not {f}", number(x))),
                (None, None) => (Phase::Inconclusive, format!("{}: no condition to judge by", number(x))),
            };
            (Some(x), phase, note)
        }
    };
    Measurement { metric: m.name.clone(), at, value, phase, note }
}

/// Where an analysis stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict", content = "reason")]
pub enum Verdict {
    Running,
    Successful,
    Failed(String),
    Inconclusive(String),
}

/// The verdict of the measurements so far (in the order they were taken).
pub fn judge(a: &Analysis, ms: &[Measurement]) -> Verdict {
    let mut by: BTreeMap<&str, Vec<&Measurement>> = a.metrics.iter().map(|m| (m.name.as_str(), vec![])).collect();
    for m in ms {
        if let Some(v) = by.get_mut(m.metric.as_str()) {
            v.push(m);
        }
    }
    let mut inconclusive = None;
    for (name, v) in &by {
        let count = |p: Phase| v.iter().filter(|m| m.phase == p).count();
        let failed = count(Phase::Failed);
        if failed > a.failure_limit as usize {
            let last = v.iter().rev().find(|m| m.phase == Phase::Failed).map(|m| m.note.as_str()).unwrap_or("");
            return Verdict::Failed(format!(
                "{name}: {failed} of {} measurements failed (failureLimit {}); last: {last}",
                v.len(),
                a.failure_limit
            ));
        }
        let errors_in_a_row = v.iter().rev().take_while(|m| m.phase == Phase::Error).count();
        if errors_in_a_row > a.consecutive_error_limit as usize {
            let last = v.last().map(|m| m.note.as_str()).unwrap_or("");
            return Verdict::Failed(format!(
                "{name}: the query failed {errors_in_a_row} times in a row (consecutiveErrorLimit {}); last: {last}",
                a.consecutive_error_limit
            ));
        }
        let unsure = count(Phase::Inconclusive);
        if unsure > a.inconclusive_limit as usize && inconclusive.is_none() {
            let last = v.iter().rev().find(|m| m.phase == Phase::Inconclusive).map(|m| m.note.as_str()).unwrap_or("");
            inconclusive = Some(format!(
                "{name}: {unsure} inconclusive measurements (inconclusiveLimit {}); last: {last}",
                a.inconclusive_limit
            ));
        }
    }
    if let Some(why) = inconclusive {
        return Verdict::Inconclusive(why);
    }
    if by.values().all(|v| v.len() >= a.count as usize) {
        Verdict::Successful
    } else {
        Verdict::Running
    }
}

/// The values a query names, quoted for a PromQL string.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    pub cluster: String,
    pub namespace: String,
    pub workload: String,
    pub version: String,
}

/// A query template with `{{cluster}}`, `{{namespace}}`, `{{workload}}`,
/// `{{version}}` and `{{range}}` filled in; the values are escaped for a
/// PromQL string (they come from names, but a quote must not end one).
pub fn render(query: &str, v: &Vars, range: &str) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    query
        .replace("{{cluster}}", &esc(&v.cluster))
        .replace("{{namespace}}", &esc(&v.namespace))
        .replace("{{workload}}", &esc(&v.workload))
        .replace("{{version}}", &esc(&v.version))
        .replace("{{range}}", range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(success: Option<&str>, failure: Option<&str>) -> Metric {
        Metric {
            name: "errors".into(),
            query: "q".into(),
            success_condition: success.map(|s| Condition::parse(s).unwrap()),
            failure_condition: failure.map(|s| Condition::parse(s).unwrap()),
            budget_burn: None,
        }
    }

    #[test]
    fn a_metric_says_the_thresholds_it_is_judged_by() {
        assert_eq!(
            metric(Some("< 0.01"), Some(">= 0.05")).bounds(),
            "errors: ok < 0.01, FAILED >= 0.05, inconclusive between"
        );
        assert_eq!(metric(Some("<= 0.01"), Some("> 0.01")).bounds(), "errors: ok <= 0.01, FAILED > 0.01");
        assert_eq!(metric(Some("< 0.01"), None).bounds(), "errors: ok < 0.01, FAILED otherwise");
        assert_eq!(metric(None, Some("> 2")).bounds(), "errors: FAILED > 2, ok otherwise");
    }

    fn analysis(count: u32, failure_limit: u32, inconclusive_limit: u32) -> Analysis {
        Analysis {
            interval: Duration::from_secs(1),
            count,
            failure_limit,
            inconclusive_limit,
            consecutive_error_limit: 2,
            bake: Duration::ZERO,
            metrics: vec![metric(Some("< 0.01"), Some(">= 0.05"))],
        }
    }

    #[test]
    fn conditions_read_as_argo_writes_them_and_refuse_the_rest() {
        assert_eq!(Condition::parse("result < 0.01").unwrap(), Condition { op: Op::Lt, value: 0.01 });
        assert_eq!(Condition::parse(">=5").unwrap().to_string(), ">= 5");
        assert!(Condition::parse("== 1").unwrap_err().contains("expected a comparison"));
        assert!(Condition::parse("< lots").unwrap_err().contains("`lots` is not a number"));
        assert!(Condition::parse("< NaN").is_err() && Condition::parse("< inf").is_err());
    }

    #[test]
    fn each_answer_is_judged_by_the_conditions_it_meets() {
        let m = metric(Some("< 0.01"), Some(">= 0.05"));
        let at = Utc::now();
        let phase = |a: Answer| measure(&m, a, at).phase;
        assert_eq!(phase(Answer::Value(0.001)), Phase::Successful);
        assert_eq!(phase(Answer::Value(0.2)), Phase::Failed);
        assert_eq!(phase(Answer::Value(0.02)), Phase::Inconclusive);
        assert_eq!(phase(Answer::NoData), Phase::Inconclusive);
        assert_eq!(phase(Answer::Value(f64::NAN)), Phase::Inconclusive);
        assert_eq!(phase(Answer::Error("503".into())), Phase::Error);
        // A success condition alone: missing it fails.
        let only = metric(Some("< 0.01"), None);
        assert_eq!(measure(&only, Answer::Value(0.02), at).note, "0.02 is not < 0.01");
        assert_eq!(measure(&only, Answer::Value(0.02), at).phase, Phase::Failed);
    }

    #[test]
    fn limits_decide_failed_inconclusive_and_successful() {
        let m = metric(Some("< 0.01"), Some(">= 0.05"));
        let at = Utc::now();
        let run = |a: &Analysis, answers: Vec<Answer>| {
            let ms: Vec<Measurement> = answers.into_iter().map(|x| measure(&m, x, at)).collect();
            judge(a, &ms)
        };
        let a = analysis(3, 1, 0);
        assert_eq!(run(&a, vec![Answer::Value(0.0), Answer::Value(0.001)]), Verdict::Running);
        assert_eq!(run(&a, vec![Answer::Value(0.0); 3]), Verdict::Successful);
        // One failure is within failureLimit 1; a second fails the analysis.
        assert_eq!(run(&a, vec![Answer::Value(0.2), Answer::Value(0.0), Answer::Value(0.0)]), Verdict::Successful);
        let v = run(&a, vec![Answer::Value(0.2), Answer::Value(0.3)]);
        assert!(
            matches!(&v, Verdict::Failed(w) if w.contains("2 of 2 measurements failed") && w.contains("0.3 >= 0.05")),
            "{v:?}"
        );
        // No data pauses for a person.
        assert!(matches!(run(&a, vec![Answer::NoData]), Verdict::Inconclusive(w) if w.contains("no data")));
        // Errors fail only past the consecutive limit, and a success in between resets them.
        let e = || Answer::Error("connection refused".into());
        assert_eq!(run(&a, vec![e(), e(), Answer::Value(0.0), e()]), Verdict::Successful);
        assert!(matches!(run(&a, vec![e(), e(), e()]), Verdict::Failed(w) if w.contains("3 times in a row")));
    }

    #[test]
    fn values_cannot_end_the_string_they_are_put_in() {
        let v =
            Vars { cluster: "no\"rth".into(), namespace: "feeds".into(), workload: "web".into(), version: "v3".into() };
        assert_eq!(
            render(r#"rate(x{cluster="{{cluster}}",ns="{{namespace}}",v="{{version}}"}[{{range}}])"#, &v, "5m"),
            r#"rate(x{cluster="no\"rth",ns="feeds",v="v3"}[5m])"#
        );
    }
}
