//! The controller's histograms: the reconcile-latency SLO's (from a
//! workload's change to its children written and to its pods created) and
//! the reconcile durations' buckets, exposed as Prometheus text by
//! [`super::Ctx::metrics`].

use std::sync::Mutex;

/// A latency histogram (seconds) for the reconcile-latency SLO.
#[derive(Debug, Default)]
pub struct Histogram {
    counts: Mutex<(Vec<u64>, f64, std::collections::VecDeque<f64>)>,
}

/// Latency buckets, in seconds: the SLO's bound (10 s) is one of them.
pub const LATENCY_BUCKETS: [f64; 12] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

impl Histogram {
    pub fn observe(&self, secs: f64) {
        let mut c = self.counts.lock().expect("histogram");
        if c.0.is_empty() {
            c.0 = vec![0; LATENCY_BUCKETS.len() + 1];
        }
        let i = LATENCY_BUCKETS.iter().position(|b| secs <= *b).unwrap_or(LATENCY_BUCKETS.len());
        c.0[i] += 1;
        c.1 += secs;
        // Every observation is kept for the benchmark's quantiles (bounded:
        // the newest 100,000).
        if c.2.len() >= 100_000 {
            c.2.pop_front();
        }
        c.2.push_back(secs);
    }

    /// The q-quantile of the observations kept (None when there are none).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let mut v: Vec<f64> = self.counts.lock().expect("histogram").2.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        Some(v[i])
    }

    /// The observations kept so far, removed (the benchmark's phases).
    pub fn take(&self) -> Vec<f64> {
        std::mem::take(&mut self.counts.lock().expect("histogram").2).into()
    }

    pub fn count(&self) -> u64 {
        self.counts.lock().expect("histogram").0.iter().sum()
    }

    /// Prometheus text exposition.
    pub(super) fn expose(&self, out: &mut String, name: &str, help: &str) {
        let c = self.counts.lock().expect("histogram");
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} histogram\n"));
        let mut cumulative = 0;
        for (i, b) in LATENCY_BUCKETS.iter().enumerate() {
            cumulative += c.0.get(i).copied().unwrap_or(0);
            out.push_str(&format!("{name}_bucket{{le=\"{b}\"}} {cumulative}\n"));
        }
        cumulative += c.0.get(LATENCY_BUCKETS.len()).copied().unwrap_or(0);
        out.push_str(&format!(
            "{name}_bucket{{le=\"+Inf\"}} {cumulative}\n{name}_sum {}\n{name}_count {cumulative}\n",
            c.1
        ));
    }
}

/// Histogram bucket bounds for reconcile durations, in seconds.
pub const BUCKETS: [f64; 7] = [0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];
