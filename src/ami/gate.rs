//! The soak gate's verdict (pure): what nodes on the candidate image
//! report against what nodes on the previous image reported, the recipe's
//! allow-list applied, and the e2e runs (upgrade and downgrade) folded in.
//!
//! Data flow: the engine reads Nodes from the canary cluster's API server
//! (`status.nodeInfo` and the node bootstrap's annotations) → [`report_of`]
//! → [`compare`] → [`decide`] → promote to the next channel, or stop with
//! the reason.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// What a gate compares, by the names a recipe's `allowDifferences` uses.
pub const ASPECTS: &[&str] = &["kernel", "osImage", "containerRuntime", "kubelet", "cgroup", "failedUnits"];

/// Annotations the node bootstrap writes on its Node.
pub const ANNOTATION_FAILED_UNITS: &str = "pinfleet.dev/failed-units";
pub const ANNOTATION_CGROUP: &str = "pinfleet.dev/cgroup";

/// What one node says about its image.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub node: String,
    pub kernel: String,
    pub os_image: String,
    pub container_runtime: String,
    pub kubelet: String,
    pub cgroup: String,
    pub failed_units: BTreeSet<String>,
}

impl NodeReport {
    fn aspect(&self, a: &str) -> String {
        match a {
            "kernel" => self.kernel.clone(),
            "osImage" => self.os_image.clone(),
            "containerRuntime" => self.container_runtime.clone(),
            "kubelet" => self.kubelet.clone(),
            "cgroup" => self.cgroup.clone(),
            "failedUnits" => self.failed_units.iter().cloned().collect::<Vec<_>>().join(","),
            _ => String::new(),
        }
    }
}

/// A Node object (as JSON) → its report.
pub fn report_of(node: &serde_json::Value) -> NodeReport {
    let s = |p: &str| node.pointer(p).and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let ann = |k: &str| node.pointer("/metadata/annotations").and_then(|a| a.get(k)).and_then(|v| v.as_str());
    NodeReport {
        node: s("/metadata/name"),
        kernel: s("/status/nodeInfo/kernelVersion"),
        os_image: s("/status/nodeInfo/osImage"),
        container_runtime: s("/status/nodeInfo/containerRuntimeVersion"),
        kubelet: s("/status/nodeInfo/kubeletVersion"),
        cgroup: ann(ANNOTATION_CGROUP).unwrap_or_default().to_string(),
        failed_units: ann(ANNOTATION_FAILED_UNITS)
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .collect(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub aspect: String,
    pub before: String,
    pub after: String,
    pub allowed: bool,
}

/// Differences between the previous image's nodes and the candidate's.
/// Each aspect is compared by the set of values seen on each side; a
/// failed unit the candidate's nodes show that the previous ones did not
/// is a difference of its own.
pub fn compare(before: &[NodeReport], after: &[NodeReport], allow: &[String]) -> Vec<Difference> {
    let mut out = Vec::new();
    let values = |rs: &[NodeReport], a: &str| -> BTreeSet<String> { rs.iter().map(|r| r.aspect(a)).collect() };
    for a in ASPECTS.iter().filter(|a| **a != "failedUnits") {
        let (b, n) = (values(before, a), values(after, a));
        if b != n {
            let join = |s: &BTreeSet<String>| {
                s.iter()
                    .map(|v| if v.is_empty() { "(not reported)".to_string() } else { v.clone() })
                    .collect::<Vec<_>>()
                    .join(" | ")
            };
            out.push(Difference {
                aspect: a.to_string(),
                before: join(&b),
                after: join(&n),
                allowed: allow.iter().any(|x| x == a),
            });
        }
    }
    let old: BTreeSet<&String> = before.iter().flat_map(|r| &r.failed_units).collect();
    let mut new: BTreeMap<&String, Vec<&str>> = BTreeMap::new();
    for r in after {
        for u in r.failed_units.iter().filter(|u| !old.contains(u)) {
            new.entry(u).or_default().push(&r.node);
        }
    }
    for (unit, nodes) in new {
        out.push(Difference {
            aspect: "failedUnits".into(),
            before: "not failed".into(),
            after: format!("{unit} failed on {}", nodes.join(", ")),
            allowed: allow.iter().any(|x| x == "failedUnits"),
        });
    }
    out
}

/// A gate's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    Promote { to: String },
    Stop { reason: String },
}

/// The verdict from the differences and the e2e runs on the candidate
/// (upgrade) and back on the previous image (downgrade).
pub fn decide(
    diffs: &[Difference],
    upgrade_e2e: Result<(), String>,
    downgrade_e2e: Result<(), String>,
    next: Option<&str>,
) -> Verdict {
    if let Err(e) = upgrade_e2e {
        return Verdict::Stop { reason: format!("e2e on the candidate failed: {e}") };
    }
    let refused: Vec<String> =
        diffs.iter().filter(|d| !d.allowed).map(|d| format!("{}: {} → {}", d.aspect, d.before, d.after)).collect();
    if !refused.is_empty() {
        return Verdict::Stop {
            reason: format!(
                "the candidate's nodes differ where the recipe allows no difference: {}",
                refused.join("; ")
            ),
        };
    }
    if let Err(e) = downgrade_e2e {
        return Verdict::Stop { reason: format!("e2e after rolling back to the previous image failed: {e}") };
    }
    match next {
        Some(to) => Verdict::Promote { to: to.to_string() },
        None => Verdict::Stop { reason: "the candidate passed, but the recipe names no channel after it".into() },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, kernel: &str, failed: &[&str]) -> NodeReport {
        NodeReport {
            node: name.into(),
            kernel: kernel.into(),
            os_image: "Ubuntu 24.04.1 LTS".into(),
            container_runtime: "containerd://2.1.4".into(),
            kubelet: "v1.36.2".into(),
            cgroup: "v2".into(),
            failed_units: failed.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn differences_are_listed_and_the_allow_list_applies() {
        let before = [node("a", "6.8.0-1015-aws", &[]), node("b", "6.8.0-1015-aws", &["motd-news.service"])];
        let after = [node("c", "6.8.0-1021-aws", &["motd-news.service", "fwupd.service"])];
        let d = compare(&before, &after, &["kernel".to_string()]);
        assert_eq!(d.len(), 2, "{d:?}");
        assert!(d[0].aspect == "kernel" && d[0].allowed && d[0].after == "6.8.0-1021-aws");
        assert!(d[1].aspect == "failedUnits" && !d[1].allowed && d[1].after == "fwupd.service failed on c");
        let v = decide(&d, Ok(()), Ok(()), Some("stable"));
        assert!(matches!(&v, Verdict::Stop { reason } if reason.contains("fwupd.service failed on c")), "{v:?}");
        let ok = compare(&before, &[node("c", "6.8.0-1021-aws", &[])], &["kernel".to_string()]);
        assert_eq!(decide(&ok, Ok(()), Ok(()), Some("stable")), Verdict::Promote { to: "stable".into() });
        assert!(
            matches!(decide(&ok, Ok(()), Err("x".into()), Some("stable")), Verdict::Stop { reason } if reason.contains("rolling back"))
        );
        assert!(
            matches!(decide(&ok, Err("pods pending".into()), Ok(()), Some("stable")), Verdict::Stop { reason } if reason.contains("pods pending"))
        );
    }

    #[test]
    fn reports_come_from_node_objects() {
        let n = serde_json::json!({
            "metadata": {"name": "n1", "annotations": {ANNOTATION_FAILED_UNITS: "a.service, b.service", ANNOTATION_CGROUP: "v2"}},
            "status": {"nodeInfo": {"kernelVersion": "6.8", "osImage": "Ubuntu", "containerRuntimeVersion": "containerd://2.1.4", "kubeletVersion": "v1.36.2"}}
        });
        let r = report_of(&n);
        assert_eq!(r.failed_units.len(), 2);
        assert_eq!((r.kernel.as_str(), r.cgroup.as_str(), r.kubelet.as_str()), ("6.8", "v2", "v1.36.2"));
    }
}
