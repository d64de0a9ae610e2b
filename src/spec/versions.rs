//! The Kubernetes minors pinfleet runs: one table (minor → newest patch,
//! dates, kubeadm's CoreDNS and etcd, the cloud controller and
//! cluster-autoscaler builds of that minor, the APIs the minor stopped
//! serving). Pure data and lookups; everything that depends on a minor
//! reads it here: the spec's validation and defaults, the upgrade planner
//! (`rollout::versions`), e2e's removed-API check, the addons' images, and
//! the sim, which answers as the cluster's minor.
//!
//! Keeping it current (README: "Kubernetes versions"): at each upstream
//! minor release add a row (its kubeadm constants `DefaultEtcdVersion` and
//! `CoreDNSVersion`, the release's "Removed APIs"), move patches forward,
//! and move [`CHECKED`] to the day the table was checked. A test fails
//! once the default minor's end of support has passed.

use chrono::NaiveDate;

/// One minor release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Minor {
    /// 1.`minor`.
    pub minor: u32,
    /// The newest patch this table knows (what an upgrade passing through
    /// the minor installs).
    pub newest_patch: u32,
    pub released: NaiveDate,
    /// Upstream's end of maintenance (the patch-release page's "End of Life").
    pub end_of_support: NaiveDate,
    /// kubeadm's CoreDNS image tag for the minor.
    pub coredns: &'static str,
    /// kubeadm's etcd image tag for the minor.
    pub etcd: &'static str,
    /// cloud-provider-aws's release for the minor (its releases track Kubernetes minors).
    pub cloud_controller: &'static str,
    /// cluster-autoscaler's release for the minor (likewise).
    pub cluster_autoscaler: &'static str,
    /// (apiVersion, kind) the API server of this minor no longer serves.
    pub removed_apis: &'static [(&'static str, &'static str)],
}

const fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    match NaiveDate::from_ymd_opt(y, m, d) {
        Some(d) => d,
        None => panic!("a date in the versions table does not exist"),
    }
}

/// The day this table was last checked against upstream.
pub const CHECKED: NaiveDate = date(2026, 11, 23);

/// Every minor pinfleet can run, oldest first: the supported window and the
/// minors before it, so a cluster left behind can climb out one minor at a
/// time. Dates follow upstream's yearly support (about 14 months from the
/// release, ending on the 28th). What was checked where: 1.36's kubeadm
/// constants and patch were read from the v1.36.2 source the real API
/// server here is built from; the patches of 1.34, 1.35 and 1.37 and
/// 1.37's CoreDNS and etcd (1.36's, here) were not checked against a
/// source here, and are the first thing to refresh. The cloud controller
/// and cluster-autoscaler are pinned to the first release of each minor.
pub const TABLE: &[Minor] = &[
    Minor {
        minor: 30,
        newest_patch: 14,
        released: date(2024, 4, 17),
        end_of_support: date(2025, 6, 28),
        coredns: "v1.11.1",
        etcd: "3.5.12-0",
        cloud_controller: "v1.30.0",
        cluster_autoscaler: "v1.30.0",
        removed_apis: &[],
    },
    Minor {
        minor: 31,
        newest_patch: 10,
        released: date(2024, 8, 13),
        end_of_support: date(2025, 10, 28),
        coredns: "v1.11.3",
        etcd: "3.5.15-0",
        cloud_controller: "v1.31.0",
        cluster_autoscaler: "v1.31.0",
        removed_apis: &[],
    },
    Minor {
        minor: 32,
        newest_patch: 6,
        released: date(2024, 12, 11),
        end_of_support: date(2026, 2, 28),
        coredns: "v1.11.3",
        etcd: "3.5.16-0",
        cloud_controller: "v1.32.0",
        cluster_autoscaler: "v1.32.0",
        removed_apis: &[
            ("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
            ("flowcontrol.apiserver.k8s.io/v1beta3", "PriorityLevelConfiguration"),
        ],
    },
    Minor {
        minor: 33,
        newest_patch: 4,
        released: date(2025, 4, 23),
        end_of_support: date(2026, 6, 28),
        coredns: "v1.12.0",
        etcd: "3.5.21-0",
        cloud_controller: "v1.33.0",
        cluster_autoscaler: "v1.33.0",
        removed_apis: &[],
    },
    Minor {
        minor: 34,
        newest_patch: 6,
        released: date(2025, 8, 27),
        end_of_support: date(2026, 10, 27),
        coredns: "v1.12.1",
        etcd: "3.6.4-0",
        cloud_controller: "v1.34.0",
        cluster_autoscaler: "v1.34.0",
        removed_apis: &[],
    },
    Minor {
        minor: 35,
        newest_patch: 4,
        released: date(2025, 12, 17),
        end_of_support: date(2027, 2, 28),
        coredns: "v1.13.1",
        etcd: "3.6.6-0",
        cloud_controller: "v1.35.0",
        cluster_autoscaler: "v1.35.0",
        removed_apis: &[],
    },
    Minor {
        minor: 36,
        newest_patch: 2,
        released: date(2026, 4, 22),
        end_of_support: date(2027, 6, 28),
        coredns: "v1.14.2",
        etcd: "3.6.8-0",
        cloud_controller: "v1.36.0",
        cluster_autoscaler: "v1.36.0",
        removed_apis: &[],
    },
    Minor {
        minor: 37,
        newest_patch: 0,
        released: date(2026, 8, 26),
        end_of_support: date(2027, 10, 28),
        coredns: "v1.14.2",
        etcd: "3.6.8-0",
        cloud_controller: "v1.37.0",
        cluster_autoscaler: "v1.37.0",
        removed_apis: &[],
    },
];

/// APIs removed before the table's first minor (still refused by every
/// minor in it): (apiVersion, kind, removed in 1.x).
const REMOVED_BEFORE: &[(&str, &str, u32)] = &[
    ("batch/v1beta1", "CronJob", 25),
    ("discovery.k8s.io/v1beta1", "EndpointSlice", 25),
    ("events.k8s.io/v1beta1", "Event", 25),
    ("autoscaling/v2beta1", "HorizontalPodAutoscaler", 25),
    ("policy/v1beta1", "PodDisruptionBudget", 25),
    ("policy/v1beta1", "PodSecurityPolicy", 25),
    ("node.k8s.io/v1beta1", "RuntimeClass", 25),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "FlowSchema", 26),
    ("flowcontrol.apiserver.k8s.io/v1beta1", "PriorityLevelConfiguration", 26),
    ("autoscaling/v2beta2", "HorizontalPodAutoscaler", 26),
    ("storage.k8s.io/v1beta1", "CSIStorageCapacity", 27),
    ("flowcontrol.apiserver.k8s.io/v1beta2", "FlowSchema", 29),
    ("flowcontrol.apiserver.k8s.io/v1beta2", "PriorityLevelConfiguration", 29),
];

/// The version a new cluster gets: the newest minor the addon set supports
/// (each addon's `kubernetes` range), at its newest patch.
pub const DEFAULT: &str = "1.36.2";

/// The minor of [`DEFAULT`] (a test holds them together).
pub const DEFAULT_MINOR: u32 = 36;

/// The row of 1.`minor`, if pinfleet runs it.
pub fn minor(minor: u32) -> Option<&'static Minor> {
    TABLE.iter().find(|m| m.minor == minor)
}

/// The oldest and newest minors pinfleet runs.
pub fn range() -> (u32, u32) {
    (TABLE[0].minor, TABLE[TABLE.len() - 1].minor)
}

/// Every API removal up to and including 1.`minor`: (apiVersion, kind, removed in 1.x).
pub fn removed_by(minor: u32) -> Vec<(&'static str, &'static str, u32)> {
    REMOVED_BEFORE
        .iter()
        .copied()
        .chain(TABLE.iter().flat_map(|m| m.removed_apis.iter().map(move |(a, k)| (*a, *k, m.minor))))
        .filter(|(_, _, by)| *by <= minor)
        .collect()
}

/// Where a minor stands on `today`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Support {
    /// In upstream support until the date.
    Supported { until: NaiveDate },
    /// pinfleet runs it (to climb out of it), but upstream support ended.
    Ended { on: NaiveDate, newest: u32 },
    /// Not a minor pinfleet can run.
    Unknown { oldest: u32, newest: u32 },
}

pub fn support(minor_number: u32, today: NaiveDate) -> Support {
    let (oldest, newest) = range();
    match minor(minor_number) {
        None => Support::Unknown { oldest, newest },
        Some(m) if m.end_of_support < today => Support::Ended { on: m.end_of_support, newest },
        Some(m) => Support::Supported { until: m.end_of_support },
    }
}

/// The minors in upstream support on `today`.
pub fn supported_on(today: NaiveDate) -> Vec<u32> {
    TABLE.iter().filter(|m| m.released <= today && m.end_of_support >= today).map(|m| m.minor).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_ordered_and_each_minor_follows_the_last() {
        for pair in TABLE.windows(2) {
            assert_eq!(pair[1].minor, pair[0].minor + 1);
            assert!(pair[1].released > pair[0].released && pair[1].end_of_support > pair[0].end_of_support);
        }
        for m in TABLE {
            assert!(m.cloud_controller.starts_with(&format!("v1.{}.", m.minor)), "{m:?}");
            assert!(m.cluster_autoscaler.starts_with(&format!("v1.{}.", m.minor)), "{m:?}");
        }
    }

    #[test]
    fn the_window_on_the_day_the_table_was_checked() {
        assert_eq!(supported_on(CHECKED), [35, 36, 37]);
        assert!(matches!(support(33, CHECKED), Support::Ended { .. }));
        assert_eq!(support(29, CHECKED), Support::Unknown { oldest: 30, newest: 37 });
    }

    #[test]
    fn the_default_is_a_row_at_its_newest_patch() {
        let m = minor(DEFAULT_MINOR).unwrap();
        assert_eq!(DEFAULT, format!("1.{}.{}", m.minor, m.newest_patch));
    }

    /// Fails once the default minor's end of support has passed, judged on
    /// the later of the day the table was checked and today's date here.
    #[test]
    fn the_default_minor_is_in_upstream_support() {
        let today = CHECKED.max(chrono::Utc::now().date_naive());
        let m = minor(DEFAULT_MINOR).unwrap();
        eprintln!("judged on {today} (the table was checked on {CHECKED})");
        assert!(
            m.end_of_support >= today,
            "the default, 1.{}, left upstream support on {} (judged on {today}; the table was checked on {CHECKED}): move DEFAULT to a supported minor and refresh the table",
            m.minor,
            m.end_of_support
        );
    }

    #[test]
    fn removals_accumulate() {
        assert!(removed_by(31).iter().all(|(_, _, by)| *by <= 31));
        assert!(removed_by(32).contains(&("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", 32)));
    }
}
