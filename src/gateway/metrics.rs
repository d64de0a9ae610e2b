//! The gateway's Prometheus metrics: latency per stage of a submission
//! (accepted → admitted → placed → pods created) as histograms, and counts
//! of what it answered. Written by the service, read by `/metrics`.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Upper bounds in seconds (the last bucket is +Inf).
const BUCKETS: [f64; 14] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0];

#[derive(Debug, Clone, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, v: f64) {
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] = self.counts[i].saturating_add(1);
            }
        }
        self.count = self.count.saturating_add(1);
        self.sum += v;
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stages: BTreeMap<&'static str, Histogram>,
    submit: Histogram,
    answers: BTreeMap<(String, u16), u64>,
    admitted: u64,
    preempted: u64,
    cycles: u64,
}

/// The stages measured per submission.
pub const STAGES: [&str; 3] = ["admitted", "placed", "pods_created"];

impl Metrics {
    /// Seconds from the previous stage to `stage`.
    pub fn stage(&self, stage: &'static str, seconds: f64) {
        self.inner.lock().expect("metrics").stages.entry(stage).or_default().observe(seconds.max(0.0));
    }

    pub fn submit_latency(&self, seconds: f64) {
        self.inner.lock().expect("metrics").submit.observe(seconds);
    }

    pub fn answered(&self, route: &str, status: u16) {
        let mut m = self.inner.lock().expect("metrics");
        let n = m.answers.entry((route.to_string(), status)).or_default();
        *n = n.saturating_add(1);
    }

    pub fn cycle(&self, admitted: usize, preempted: usize) {
        let mut m = self.inner.lock().expect("metrics");
        m.cycles = m.cycles.saturating_add(1);
        m.admitted = m.admitted.saturating_add(admitted as u64);
        m.preempted = m.preempted.saturating_add(preempted as u64);
    }

    /// The text exposition format.
    pub fn render(&self, leading: bool, queued: usize) -> String {
        let m = self.inner.lock().expect("metrics");
        let mut out = String::new();
        let hist = |out: &mut String, name: &str, labels: &str, h: &Histogram| {
            let sep = if labels.is_empty() { "" } else { "," };
            for (i, b) in BUCKETS.iter().enumerate() {
                out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}\n", h.counts[i]));
            }
            out.push_str(&format!("{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}\n", h.count));
            let l = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
            out.push_str(&format!("{name}_sum{l} {}\n{name}_count{l} {}\n", h.sum, h.count));
        };
        out.push_str("# HELP pinfleet_gateway_stage_seconds Seconds from a submission's previous stage to this one (accepted→admitted→placed→pods_created).\n# TYPE pinfleet_gateway_stage_seconds histogram\n");
        for s in STAGES {
            let h = m.stages.get(s).cloned().unwrap_or_default();
            hist(&mut out, "pinfleet_gateway_stage_seconds", &format!("stage=\"{s}\""), &h);
        }
        out.push_str("# HELP pinfleet_gateway_submit_seconds Seconds to answer a submission.\n# TYPE pinfleet_gateway_submit_seconds histogram\n");
        hist(&mut out, "pinfleet_gateway_submit_seconds", "", &m.submit);
        out.push_str("# HELP pinfleet_gateway_responses_total Answers by route and status.\n# TYPE pinfleet_gateway_responses_total counter\n");
        for ((route, status), n) in &m.answers {
            out.push_str(&format!("pinfleet_gateway_responses_total{{route=\"{route}\",code=\"{status}\"}} {n}\n"));
        }
        out.push_str(&format!(
            "# TYPE pinfleet_gateway_admitted_total counter\npinfleet_gateway_admitted_total {}\n# TYPE pinfleet_gateway_preempted_total counter\npinfleet_gateway_preempted_total {}\n# TYPE pinfleet_gateway_admission_cycles_total counter\npinfleet_gateway_admission_cycles_total {}\n# TYPE pinfleet_gateway_queued gauge\npinfleet_gateway_queued {queued}\n# TYPE pinfleet_gateway_leader gauge\npinfleet_gateway_leader {}\n",
            m.admitted, m.preempted, m.cycles, u8::from(leading)
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_lands_in_every_bucket_at_or_above_it() {
        let m = Metrics::default();
        m.stage("admitted", 0.3);
        m.stage("admitted", 20.0);
        let text = m.render(true, 2);
        assert!(text.contains("pinfleet_gateway_stage_seconds_bucket{stage=\"admitted\",le=\"0.25\"} 0\n"));
        assert!(text.contains("pinfleet_gateway_stage_seconds_bucket{stage=\"admitted\",le=\"0.5\"} 1\n"));
        assert!(text.contains("pinfleet_gateway_stage_seconds_bucket{stage=\"admitted\",le=\"+Inf\"} 2\n"));
        assert!(text.contains("pinfleet_gateway_stage_seconds_count{stage=\"admitted\"} 2\n"));
        assert!(text.contains("pinfleet_gateway_queued 2\n"));
    }
}
