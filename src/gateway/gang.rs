//! A placed gang whose pods do not all become ready (pure): as Kueue's
//! `waitForPodsReady`, a gang that holds its quota and devices without
//! running is evicted from its member, its quota released, and requeued
//! after an exponential backoff; past a limit of evictions it fails,
//! saying why.
//!
//! ```text
//! placed gang (placedAt, evictions so far) + its pods on the member
//!     │ judge(policy, …, now)
//!     ▼
//! Ready (never judged again) │ Wait (until the deadline)
//!   │ Evict (why; requeued, tried again from …) │ Fail (why)
//! ```
//!
//! The leader asks a member for a gang's pods only once its deadline has
//! passed (`service::leader`), then applies the verdict: deleted from the
//! member, released in the ledger, the record back in the queue with when
//! it may be tried again (the queue's why-not says so).

use chrono::{DateTime, Duration, Utc};

use super::admission::later;

/// Kueue's defaults: `waitForPodsReady.timeout` 5 minutes,
/// `requeuingStrategy.backoffBaseSeconds` 60 doubling per eviction up to
/// `backoffMaxSeconds` 3600. Kueue requeues for ever unless
/// `backoffLimitCount` is set; the gateway stops after 5 evictions (a gang
/// that never starts would otherwise take its devices for 5 minutes of
/// every hour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// How long a placed gang's pods have to be all Running and Ready.
    pub timeout: Duration,
    /// The wait before the first retry; each eviction doubles it.
    pub backoff_base: Duration,
    /// The longest wait between retries.
    pub backoff_max: Duration,
    /// Evictions after which the gang fails instead of being requeued.
    pub backoff_limit: u32,
}

pub const DEFAULT_TIMEOUT: Duration = Duration::minutes(5);
pub const DEFAULT_BACKOFF_BASE: Duration = Duration::seconds(60);
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::hours(1);
pub const DEFAULT_BACKOFF_LIMIT: u32 = 5;

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            timeout: DEFAULT_TIMEOUT,
            backoff_base: DEFAULT_BACKOFF_BASE,
            backoff_max: DEFAULT_BACKOFF_MAX,
            backoff_limit: DEFAULT_BACKOFF_LIMIT,
        }
    }
}

/// The workload kinds the gateway places whole and whose pods run
/// together: a TrainingJob (every role's pods) and a JobSet (its shards
/// at once). A service is divided among members, a CronJob's pods come
/// and go with its schedule, a daemon's follow the nodes.
pub fn is_gang(kind: &str) -> bool {
    matches!(kind, "PinterestTrainingJob" | "PinterestJobSet")
}

/// What a member says of a gang's pods.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Pods {
    /// How many the gang runs at once.
    pub expected: u64,
    /// Running with every container ready, or already Succeeded.
    pub ready: u64,
    /// Why one that is not ready is not (`pod t-worker-1: Unschedulable: …`).
    pub problem: Option<String>,
}

/// What becomes of a placed gang.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every pod is ready: the gang is not judged again.
    Ready,
    /// Not all ready, and the timeout has not passed.
    Wait { until: DateTime<Utc> },
    /// Evicted and requeued: this is its `evictions`th eviction, it may be
    /// admitted again from `retry_at`.
    Evict { why: String, evictions: u32, retry_at: DateTime<Utc> },
    /// Evicted for the last time: it fails.
    Fail { why: String, evictions: u32 },
}

/// The wait after the `evictions`th eviction: base × 2^(evictions − 1),
/// at most the maximum (Kueue's `backoffBaseSeconds` rule).
pub fn backoff(policy: &Policy, evictions: u32) -> Duration {
    let doubling = evictions.saturating_sub(1).min(30);
    let factor = 1i32.checked_shl(doubling).unwrap_or(i32::MAX);
    policy.backoff_base.checked_mul(factor).unwrap_or(policy.backoff_max).min(policy.backoff_max)
}

/// `5m`, `90s`, `1h`.
pub fn show(d: Duration) -> String {
    let s = d.num_seconds();
    if s % 3600 == 0 && s > 0 {
        format!("{}h", s / 3600)
    } else if s % 60 == 0 && s > 0 {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// Judges a placed gang at `now`: `placed_at` when it was written to
/// `member`, `evictions` how often it was evicted before.
pub fn judge(
    policy: &Policy,
    member: &str,
    placed_at: DateTime<Utc>,
    evictions: u32,
    pods: &Pods,
    now: DateTime<Utc>,
) -> Verdict {
    if pods.ready >= pods.expected {
        return Verdict::Ready;
    }
    let until = later(placed_at, policy.timeout);
    if now < until {
        return Verdict::Wait { until };
    }
    let evictions = evictions.saturating_add(1);
    let problem = pods.problem.as_deref().map(|p| format!("; {p}")).unwrap_or_default();
    let what = format!(
        "{} of {} pods ready on {member} within {} (waitForPodsReady{problem})",
        pods.ready,
        pods.expected,
        show(policy.timeout)
    );
    if evictions >= policy.backoff_limit {
        return Verdict::Fail {
            why: format!(
                "failed: evicted {evictions} times, its pods never all ready: {what}; not requeued again (the limit is {}): resubmit it once what keeps its pods from starting is fixed",
                policy.backoff_limit
            ),
            evictions,
        };
    }
    let wait = backoff(policy, evictions);
    let retry_at = later(now, wait);
    Verdict::Evict {
        why: format!(
            "evicted: {what}; its quota is released and it is requeued, tried again from {} (backoff {}, eviction {evictions} of at most {})",
            retry_at.format("%H:%M:%S"),
            show(wait),
            policy.backoff_limit
        ),
        evictions,
        retry_at,
    }
}

/// The eviction count a verdict's why names (the ledger keeps the why:
/// applying a release twice sets the same count, it does not add).
pub fn evictions_in(why: &str) -> Option<u32> {
    let rest = match why.strip_prefix("failed: evicted ") {
        Some(r) => r,
        None => why.rsplit_once("eviction ")?.1,
    };
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        format!("2026-11-24T{s}Z").parse().unwrap()
    }

    fn pods(ready: u64, problem: Option<&str>) -> Pods {
        Pods { expected: 2, ready, problem: problem.map(str::to_string) }
    }

    #[test]
    fn a_gang_not_ready_within_the_timeout_is_evicted_with_a_doubling_backoff() {
        let p = Policy::default();
        let stuck =
            pods(0, Some("pod t-worker-0: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu"));
        // Before the deadline it waits; all ready, it is done with.
        assert_eq!(judge(&p, "gpu", t("10:00:00"), 0, &stuck, t("10:04:59")), Verdict::Wait { until: t("10:05:00") });
        assert_eq!(judge(&p, "gpu", t("10:00:00"), 0, &pods(2, None), t("10:09:00")), Verdict::Ready);
        assert_eq!(
            judge(&p, "gpu", t("10:00:00"), 0, &stuck, t("10:05:00")),
            Verdict::Evict {
                why: "evicted: 0 of 2 pods ready on gpu within 5m (waitForPodsReady; pod t-worker-0: Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu); its quota is released and it is requeued, tried again from 10:06:00 (backoff 1m, eviction 1 of at most 5)".into(),
                evictions: 1,
                retry_at: t("10:06:00"),
            }
        );
        // The waits double: 1m, 2m, 4m, 8m …, at most the maximum.
        let waits: Vec<String> = (1..=8).map(|n| show(backoff(&p, n))).collect();
        assert_eq!(waits, ["1m", "2m", "4m", "8m", "16m", "32m", "1h", "1h"]);
        match judge(&p, "gpu", t("10:00:00"), 2, &pods(1, None), t("10:05:00")) {
            Verdict::Evict { evictions, retry_at, why } => {
                assert_eq!((evictions, retry_at), (3, t("10:09:00")));
                assert_eq!(evictions_in(&why), Some(3));
                assert!(why.contains("1 of 2 pods ready on gpu within 5m (waitForPodsReady)"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn past_the_limit_of_evictions_it_fails_saying_why() {
        let p = Policy { timeout: Duration::seconds(2), backoff_limit: 2, ..Policy::default() };
        match judge(&p, "gpu", t("10:00:00"), 1, &pods(0, None), t("10:00:02")) {
            Verdict::Fail { why, evictions } => {
                assert_eq!(evictions, 2);
                assert_eq!(evictions_in(&why), Some(2));
                assert_eq!(why, "failed: evicted 2 times, its pods never all ready: 0 of 2 pods ready on gpu within 2s (waitForPodsReady); not requeued again (the limit is 2): resubmit it once what keeps its pods from starting is fixed");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn no_value_overflows_the_judgement() {
        let p = Policy {
            timeout: Duration::MAX,
            backoff_base: Duration::MAX,
            backoff_max: Duration::MAX,
            backoff_limit: u32::MAX,
        };
        assert!(matches!(judge(&p, "m", t("10:00:00"), 0, &pods(0, None), t("10:00:00")), Verdict::Wait { .. }));
        let now = DateTime::<Utc>::MAX_UTC;
        let v =
            judge(&Policy { timeout: Duration::zero(), ..p }, "m", t("10:00:00"), u32::MAX - 1, &pods(0, None), now);
        assert!(matches!(v, Verdict::Fail { .. }), "{v:?}");
        assert_eq!(backoff(&Policy::default(), u32::MAX), DEFAULT_BACKOFF_MAX);
    }
}
