//! Kubernetes version upgrades as a plan (pure): from the versions a
//! cluster runs (its cluster-wide configuration and each group's kubelets)
//! to `spec.kubernetesVersion`, within the version skew policy:
//!
//! - the control plane first, one minor at a time (1.31 → 1.33 goes
//!   through 1.32); for each minor, the cluster-wide configuration
//!   (kubeadm's ClusterConfiguration, which joining control-plane machines
//!   run), the control-plane machines, then the cluster addons kubeadm
//!   owns (kube-proxy, CoreDNS) once no API server is older;
//! - node groups last, straight to the target, unless a kubelet would fall
//!   more than three minors behind the API server on the way (then they
//!   are rolled to the control plane's version first);
//! - no downgrades, no change of major version, no kubelet newer than the
//!   API server.
//!
//! `rollout::run::upgrade` carries the steps out; `pinfleet upgrade`
//! without `--yes` prints them.

use std::fmt;

use serde::Serialize;

pub use crate::spec::versions::{coredns_tag, etcd_move, Running, Version, KUBELET_SKEW};

/// One step of a version upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum Step {
    /// The cluster-wide configuration names `version` (kubeadm-config's ClusterConfiguration).
    ClusterConfiguration { version: Version },
    /// The control-plane groups' machines replaced with `version`'s.
    ControlPlane { version: Version },
    /// kube-proxy and CoreDNS at `version`'s.
    ClusterAddons { version: Version },
    /// These node groups' machines replaced with `version`'s.
    NodeGroups { version: Version, groups: Vec<String> },
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::ClusterConfiguration { version } => {
                write!(
                    f,
                    "cluster configuration to v{version} (kubeadm-config: what joining control-plane machines run)"
                )
            }
            Step::ControlPlane { version } => {
                write!(f, "control-plane machines to v{version}")?;
                match etcd_move(*version) {
                    Some((from, to)) => write!(
                        f,
                        " (etcd {from} → {to}: a minor of etcd, moved by kubeadm with the first control-plane machine; snapshot etcd before it)"
                    ),
                    None => Ok(()),
                }
            }
            Step::ClusterAddons { version } => write!(f, "kube-proxy and CoreDNS to v{version}'s"),
            Step::NodeGroups { version, groups } => write!(f, "node groups {} to v{version}", groups.join(", ")),
        }
    }
}

fn version_of_minor(minor: u32, target: Version) -> Version {
    if minor == target.minor {
        return target;
    }
    // The minors an upgrade passes through are installed at the newest patch the table knows.
    let patch = crate::spec::versions::minor(minor).map_or(0, |m| m.newest_patch);
    Version { major: target.major, minor, patch }
}

/// The steps from `running` to `target`, or the rule that forbids it.
pub fn plan(running: &Running, target: Version) -> Result<Vec<Step>, String> {
    let cp = running.control_plane;
    if target.major != cp.major {
        return Err(format!("the control plane runs {cp}; a change of major version (to {target}) is not supported"));
    }
    if target < cp {
        return Err(format!(
            "the control plane runs {cp}; Kubernetes does not support downgrades (to {target}): restore from a backup or build a new cluster"
        ));
    }
    if let Some((g, v)) = running.node_groups.iter().find(|(_, v)| v.minor > cp.minor) {
        return Err(format!(
            "node group {g} runs kubelet {v}, newer than the control plane's {cp}; the version skew policy forbids kubelets newer than kube-apiserver: roll {g} back to {}.{} first",
            cp.major, cp.minor
        ));
    }
    let mut steps = Vec::new();
    let mut nodes = running.node_groups.clone();
    let mut at = cp;
    let minors: Vec<u32> = if target.minor > cp.minor {
        (cp.minor + 1..=target.minor).collect()
    } else if target.patch != cp.patch {
        vec![target.minor]
    } else {
        vec![]
    };
    for minor in minors {
        let v = version_of_minor(minor, target);
        // Kubelets that the new API server would leave too far behind move
        // to the control plane's present version first.
        let behind: Vec<String> =
            nodes.iter().filter(|(_, n)| n.minor + KUBELET_SKEW < minor).map(|(g, _)| g.clone()).collect();
        if !behind.is_empty() {
            for g in &behind {
                nodes.insert(g.clone(), at);
            }
            steps.push(Step::NodeGroups { version: at, groups: behind });
        }
        steps.push(Step::ClusterConfiguration { version: v });
        steps.push(Step::ControlPlane { version: v });
        steps.push(Step::ClusterAddons { version: v });
        at = v;
    }
    let stale: Vec<String> = nodes.iter().filter(|(_, n)| **n != target).map(|(g, _)| g.clone()).collect();
    if !stale.is_empty() {
        steps.push(Step::NodeGroups { version: target, groups: stale });
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn running(cp: &str, nodes: &[(&str, &str)]) -> Running {
        Running { control_plane: v(cp), node_groups: nodes.iter().map(|(g, n)| (g.to_string(), v(n))).collect() }
    }

    fn show(steps: &[Step]) -> Vec<String> {
        steps.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn one_minor_control_plane_first_then_nodes() {
        let steps = plan(&running("1.32.6", &[("general", "1.32.6")]), v("1.33.2")).unwrap();
        assert_eq!(
            show(&steps),
            [
                "cluster configuration to v1.33.2 (kubeadm-config: what joining control-plane machines run)",
                "control-plane machines to v1.33.2",
                "kube-proxy and CoreDNS to v1.33.2's",
                "node groups general to v1.33.2",
            ]
        );
    }

    #[test]
    fn stepping_into_1_37_says_etcd_moves_a_minor() {
        let steps = plan(&running("1.36.2", &[("general", "1.36.2")]), v("1.37.1")).unwrap();
        assert_eq!(
            show(&steps)[1],
            "control-plane machines to v1.37.1 (etcd 3.6.8-0 → 3.7.0-0: a minor of etcd, moved by kubeadm with the first control-plane machine; snapshot etcd before it)"
        );
        assert_eq!(etcd_move(v("1.36.2")), None);
    }

    #[test]
    fn two_minors_pass_through_the_middle_and_nodes_roll_once() {
        let steps = plan(&running("1.31.10", &[("general", "1.31.10"), ("gpu", "1.31.10")]), v("1.33.2")).unwrap();
        let cps: Vec<&Step> = steps.iter().filter(|s| matches!(s, Step::ControlPlane { .. })).collect();
        assert_eq!(cps, [&Step::ControlPlane { version: v("1.32.6") }, &Step::ControlPlane { version: v("1.33.2") }]);
        let node_steps: Vec<&Step> = steps.iter().filter(|s| matches!(s, Step::NodeGroups { .. })).collect();
        assert_eq!(
            node_steps,
            [&Step::NodeGroups { version: v("1.33.2"), groups: vec!["general".into(), "gpu".into()] }],
            "kubelets two minors behind are allowed: nodes go straight to the target"
        );
        assert!(matches!(steps.last(), Some(Step::NodeGroups { .. })));
    }

    #[test]
    fn kubelets_too_far_behind_move_first() {
        // 1.30 kubelets under a 1.34 API server would be four minors behind.
        let steps = plan(&running("1.33.2", &[("old", "1.30.14")]), v("1.34.0")).unwrap();
        assert_eq!(steps[0], Step::NodeGroups { version: v("1.33.2"), groups: vec!["old".into()] });
        assert_eq!(steps.last(), Some(&Step::NodeGroups { version: v("1.34.0"), groups: vec!["old".into()] }));
    }

    #[test]
    fn refusals_name_the_rule() {
        let e = plan(&running("1.33.2", &[]), v("1.32.6")).unwrap_err();
        assert!(e.contains("does not support downgrades"), "{e}");
        let e = plan(&running("1.32.6", &[("general", "1.33.2")]), v("1.33.2")).unwrap_err();
        assert!(e.contains("forbids kubelets newer than kube-apiserver"), "{e}");
        assert!(plan(&running("1.33.2", &[("general", "1.33.2")]), v("1.33.2")).unwrap().is_empty());
    }

    #[test]
    fn a_patch_release_reconfigures_and_rolls_everything() {
        let steps = plan(&running("1.33.1", &[("general", "1.33.1")]), v("1.33.2")).unwrap();
        assert_eq!(steps.len(), 4);
        assert_eq!(Version::parse("v1.33.2-eks-4f4795d"), Some(v("1.33.2")));
    }

    #[test]
    fn a_cluster_left_on_1_33_climbs_to_the_newest_minor_one_at_a_time() {
        let target = v(crate::spec::versions::DEFAULT);
        let steps = plan(&running("1.33.4", &[("general", "1.33.4")]), target).unwrap();
        let cps: Vec<String> = steps
            .iter()
            .filter_map(|s| match s {
                Step::ControlPlane { version } => Some(version.to_string()),
                _ => None,
            })
            .collect();
        // Each minor on the way at the newest patch the versions table knows.
        assert_eq!(cps, ["1.34.10", "1.35.9", target.to_string().as_str()]);
        assert_eq!(steps.last(), Some(&Step::NodeGroups { version: target, groups: vec!["general".into()] }));
    }
}
