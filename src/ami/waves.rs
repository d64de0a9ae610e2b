//! Waves (pure): how a channel's new image reaches the fleet — each wave a
//! cumulative share of the clusters and a soak before the next, like
//! Bottlerocket's (1% after an hour, 5% after 4, 10% after a day, 25%
//! after 3 days, everything after 6), or the `urgent` profile for a fix
//! that cannot wait. A failed gate on any wave halts the rest.
//!
//! Data flow: fleet members (sorted, canaries first) + a [`Profile`] →
//! [`plan`] → waves the fleet rollout runs as its stages.

use std::time::Duration;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// 1%, 5%, 10%, 25%, 100% of the fleet, 1, 4, 24, 72 and 144 hours after the promotion.
    Standard,
    /// 10% at once, the rest an hour later.
    Urgent,
}

impl Profile {
    /// (cumulative share in percent, hours since the start before the wave begins).
    pub fn steps(self) -> &'static [(u32, u64)] {
        match self {
            Profile::Standard => &[(1, 1), (5, 4), (10, 24), (25, 72), (100, 144)],
            Profile::Urgent => &[(10, 0), (100, 1)],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Wave {
    pub number: usize,
    /// Cumulative share of the fleet once this wave is done, in percent.
    pub share: u32,
    /// When it may start, counted from the promotion.
    #[serde(with = "humantime_serde_secs")]
    pub starts_after: Duration,
    pub clusters: Vec<String>,
}

mod humantime_serde_secs {
    pub fn serialize<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

/// Splits `clusters` (in rollout order) into waves: each wave takes the
/// clusters up to its cumulative share (rounded up, at least one more than
/// the wave before while any remain); waves left empty are dropped.
pub fn plan(profile: Profile, clusters: &[String]) -> Vec<Wave> {
    let n = clusters.len();
    let mut out = Vec::new();
    let mut taken = 0usize;
    for (share, hours) in profile.steps() {
        if taken >= n {
            break;
        }
        let upto = ((n * *share as usize).div_ceil(100)).max(taken + 1).min(n);
        out.push(Wave {
            number: out.len() + 1,
            share: *share,
            starts_after: Duration::from_secs(hours * 3600),
            clusters: clusters[taken..upto].to_vec(),
        });
        taken = upto;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i:03}")).collect()
    }

    #[test]
    fn waves_cover_the_fleet_once_in_order() {
        for n in [1, 2, 3, 7, 40, 200, 1000] {
            for p in [Profile::Standard, Profile::Urgent] {
                let w = plan(p, &names(n));
                let all: Vec<String> = w.iter().flat_map(|w| w.clusters.clone()).collect();
                assert_eq!(all, names(n), "{p:?} over {n}");
                assert!(w.iter().all(|w| !w.clusters.is_empty()));
            }
        }
        let w = plan(Profile::Standard, &names(200));
        let sizes: Vec<usize> = w.iter().map(|w| w.clusters.len()).collect();
        assert_eq!(sizes, [2, 8, 10, 30, 150]);
        assert_eq!(w[4].starts_after, Duration::from_secs(144 * 3600));
        // Three clusters: one per wave until the fleet is covered.
        assert_eq!(plan(Profile::Standard, &names(3)).len(), 3);
        assert_eq!(plan(Profile::Urgent, &names(3)).iter().map(|w| w.clusters.len()).collect::<Vec<_>>(), [1, 2]);
    }
}
