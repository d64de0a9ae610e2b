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
    /// kubeadm's etcd image tag by patch: (first patch, tag), ascending
    /// (kubeadm moves etcd within a minor; see [`Minor::etcd_at`]).
    pub etcd: &'static [(u32, &'static str)],
    /// cloud-provider-aws's release for the minor (its releases track Kubernetes minors).
    pub cloud_controller: &'static str,
    /// cluster-autoscaler's release for the minor (likewise).
    pub cluster_autoscaler: &'static str,
    /// (apiVersion, kind) the API server of this minor no longer serves.
    pub removed_apis: &'static [(&'static str, &'static str)],
    /// What of this row was checked, against which source, on which day.
    pub checked: Checked,
}

/// The provenance of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    pub on: NaiveDate,
    /// What was read where (`kubeadm config images list`, a release page, …).
    pub what: &'static str,
}

/// A row older than this (days before [`CHECKED`]… or today) is due for a refresh.
pub const CHECK_POLICY_DAYS: i64 = 90;

impl Minor {
    /// kubeadm's etcd tag at 1.`minor`.`patch`.
    pub fn etcd_at(&self, patch: u32) -> &'static str {
        self.etcd.iter().rev().find(|(from, _)| *from <= patch).or(self.etcd.first()).map_or("", |(_, t)| t)
    }

    /// The etcd tag at the newest patch.
    pub fn etcd_newest(&self) -> &'static str {
        self.etcd_at(self.newest_patch)
    }
}

/// etcd's minor (`3.6`) of a kubeadm tag (`3.6.8-0`).
pub fn etcd_minor(tag: &str) -> &str {
    let mut parts = tag.splitn(3, '.');
    match (parts.next(), parts.next()) {
        (Some(a), Some(b)) => &tag[..a.len() + 1 + b.len()],
        _ => tag,
    }
}

const fn date(y: i32, m: u32, d: u32) -> NaiveDate {
    match NaiveDate::from_ymd_opt(y, m, d) {
        Some(d) => d,
        None => panic!("a date in the versions table does not exist"),
    }
}

/// The day this table was last checked against upstream.
pub const CHECKED: NaiveDate = date(2026, 11, 26);

/// Every minor pinfleet can run, oldest first: the supported window and the
/// minors before it, so a cluster left behind can climb out one minor at a
/// time. Dates follow upstream's yearly support (about 14 months from the
/// release, ending on the 28th, but where kubernetes.io gives another day).
/// Each row says what was checked against which source, and when; a test
/// fails once a row in support is older than [`CHECK_POLICY_DAYS`]. The
/// cloud controller and cluster-autoscaler are pinned to the first release
/// of each minor.
pub const TABLE: &[Minor] = &[
    Minor {
        minor: 30,
        newest_patch: 14,
        released: date(2024, 4, 17),
        end_of_support: date(2025, 7, 15),
        coredns: "v1.11.1",
        etcd: &[(0, "3.5.12-0")],
        cloud_controller: "v1.30.0",
        cluster_autoscaler: "v1.30.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "end of support from kubernetes.io/releases (2025-07-15); patches and images from the last table" },
    },
    Minor {
        minor: 31,
        newest_patch: 10,
        released: date(2024, 8, 13),
        end_of_support: date(2025, 10, 28),
        coredns: "v1.11.3",
        etcd: &[(0, "3.5.15-0")],
        cloud_controller: "v1.31.0",
        cluster_autoscaler: "v1.31.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 23), what: "as carried from the last table; not re-read here" },
    },
    Minor {
        minor: 32,
        newest_patch: 6,
        released: date(2024, 12, 11),
        end_of_support: date(2026, 2, 28),
        coredns: "v1.11.3",
        etcd: &[(0, "3.5.16-0")],
        cloud_controller: "v1.32.0",
        cluster_autoscaler: "v1.32.0",
        removed_apis: &[
            ("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema"),
            ("flowcontrol.apiserver.k8s.io/v1beta3", "PriorityLevelConfiguration"),
        ],
        checked: Checked { on: date(2026, 11, 23), what: "as carried from the last table; not re-read here" },
    },
    Minor {
        minor: 33,
        newest_patch: 13,
        released: date(2025, 4, 23),
        end_of_support: date(2026, 6, 28),
        coredns: "v1.12.0",
        etcd: &[(0, "3.5.21-0"), (6, "3.5.24-0")],
        cloud_controller: "v1.33.0",
        cluster_autoscaler: "v1.33.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "final patch 1.33.13 and etcd by patch (3.5.21-0 to 1.33.5, 3.5.24-0 from 1.33.6) from kubeadm's image lists, as issue 40 reports them" },
    },
    Minor {
        minor: 34,
        newest_patch: 10,
        released: date(2025, 8, 27),
        end_of_support: date(2026, 10, 27),
        coredns: "v1.12.1",
        etcd: &[(0, "3.6.4-0"), (2, "3.6.5-0")],
        cloud_controller: "v1.34.0",
        cluster_autoscaler: "v1.34.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "patch 1.34.10 and etcd by patch (3.6.4-0 to 1.34.1, 3.6.5-0 from 1.34.2) from kubeadm's image lists, as issue 40 reports them" },
    },
    Minor {
        minor: 35,
        newest_patch: 9,
        released: date(2025, 12, 17),
        end_of_support: date(2027, 2, 28),
        coredns: "v1.13.1",
        etcd: &[(0, "3.6.6-0")],
        cloud_controller: "v1.35.0",
        cluster_autoscaler: "v1.35.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "patch 1.35.9 from the release page, as issue 40 reports it; images carried" },
    },
    Minor {
        minor: 36,
        newest_patch: 2,
        released: date(2026, 4, 22),
        end_of_support: date(2027, 6, 28),
        coredns: "v1.14.2",
        etcd: &[(0, "3.6.8-0")],
        cloud_controller: "v1.36.0",
        cluster_autoscaler: "v1.36.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "kubeadm constants read from the v1.36.2 source the real API server here is built from; 1.36.4 is released (issue 40) but the default stays on 1.36.2, the build the real API server here runs, until the examples move with it" },
    },
    Minor {
        minor: 37,
        newest_patch: 1,
        released: date(2026, 8, 26),
        end_of_support: date(2027, 10, 28),
        coredns: "v1.14.6",
        etcd: &[(0, "3.7.0-0")],
        cloud_controller: "v1.37.0",
        cluster_autoscaler: "v1.37.0",
        removed_apis: &[],
        checked: Checked { on: date(2026, 11, 26), what: "CoreDNS v1.14.6, etcd 3.7.0-0 and patch 1.37.1 from kubeadm's image list and the release page, as issue 40 reports them" },
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

/// The README's versions table, drawn from [`TABLE`] as of [`CHECKED`]
/// (a test holds the README to it, so the two cannot drift).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| minor | newest patch | end of support | CoreDNS | etcd | status |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for m in TABLE {
        let default = format!("1.{}", m.minor) == DEFAULT.rsplit_once('.').map(|(a, _)| a).unwrap_or(DEFAULT);
        let status = match support(m.minor, CHECKED) {
            Support::Ended { .. } => "runs, to climb out".to_string(),
            _ if default => "supported, **the default**".to_string(),
            _ => "supported".to_string(),
        };
        let (minor, patch) = (format!("1.{}", m.minor), format!("1.{}.{}", m.minor, m.newest_patch));
        let (minor, patch) = if default { (format!("**{minor}**"), format!("**{patch}**")) } else { (minor, patch) };
        out += &format!(
            "| {minor} | {patch} | {} | {} | {} | {status} |\n",
            m.end_of_support.format("%Y-%m-%d"),
            m.coredns,
            m.etcd_newest()
        );
    }
    out
}

/// What a cluster runs now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Running {
    /// The cluster-wide configuration's version (what control-plane
    /// machines run), and the oldest control-plane kubelet.
    pub control_plane: Version,
    /// The oldest kubelet of each node group (groups without nodes absent).
    pub node_groups: std::collections::BTreeMap<String, Version>,
}

/// A Kubernetes release: 1.MINOR.PATCH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        // kubelets report e.g. `v1.33.2` or `v1.33.2-eks-1234`.
        let s = s.split(['-', '+']).next().unwrap_or(s);
        parse_kubernetes_version(s).map(|(major, minor, patch)| Version { major, minor, patch })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// kubeadm's CoreDNS for each minor (the versions table's).
pub fn coredns_tag(m: u32) -> Option<&'static str> {
    minor(m).map(|m| m.coredns)
}

/// The etcd tags (previous minor's newest, this version's) when a control
/// plane stepping into `version` moves etcd to another minor (1.36 → 1.37:
/// 3.6 → 3.7).
pub fn etcd_move(version: Version) -> Option<(&'static str, &'static str)> {
    let to = minor(version.minor)?.etcd_at(version.patch);
    let from = minor(version.minor.checked_sub(1)?)?.etcd_newest();
    (etcd_minor(from) != etcd_minor(to)).then_some((from, to))
}

/// A kubelet may be at most this many minors older than the API server.
pub const KUBELET_SKEW: u32 = 3;

/// `1.33.4` or `v1.33.4` as (major, minor, patch); anything else is None.
pub fn parse_kubernetes_version(v: &str) -> Option<(u32, u32, u32)> {
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut it = v.split('.');
    let parsed = (it.next()?.parse().ok()?, it.next()?.parse().ok()?, it.next()?.parse().ok()?);
    it.next().is_none().then_some(parsed)
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
    fn etcd_follows_kubeadm_by_patch_and_moves_a_minor_into_1_37() {
        let m33 = minor(33).unwrap();
        assert_eq!((m33.etcd_at(5), m33.etcd_at(6), m33.etcd_newest()), ("3.5.21-0", "3.5.24-0", "3.5.24-0"));
        let m34 = minor(34).unwrap();
        assert_eq!((m34.etcd_at(1), m34.etcd_at(2)), ("3.6.4-0", "3.6.5-0"));
        assert_eq!(etcd_minor(minor(36).unwrap().etcd_newest()), "3.6");
        assert_eq!(etcd_minor(minor(37).unwrap().etcd_newest()), "3.7");
        for m in TABLE {
            assert!(m.etcd.windows(2).all(|w| w[0].0 < w[1].0) && m.etcd[0].0 == 0, "{m:?}");
        }
    }

    /// Every row in upstream support was checked within the policy, judged
    /// on today's date here: a stale row fails the build until refreshed.
    #[test]
    fn every_supported_row_was_checked_within_the_policy() {
        let today = chrono::Utc::now().date_naive().max(CHECKED);
        for m in TABLE.iter().filter(|m| m.end_of_support >= today) {
            let age = (today - m.checked.on).num_days();
            assert!(
                age <= CHECK_POLICY_DAYS,
                "1.{}: checked {age} days ago ({}: {}); the policy is {CHECK_POLICY_DAYS} days: refresh the row",
                m.minor,
                m.checked.on,
                m.checked.what
            );
        }
    }

    #[test]
    fn removals_accumulate() {
        assert!(removed_by(31).iter().all(|(_, _, by)| *by <= 31));
        assert!(removed_by(32).contains(&("flowcontrol.apiserver.k8s.io/v1beta3", "FlowSchema", 32)));
    }
}
