//! The pre-flight and cluster phases: each check reads the API and judges
//! what it read with a pure function below.

use std::collections::BTreeMap;

use anyhow::Result;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use serde_json::Value;

use super::{Outcome, Phase, Recorder, Target};
use crate::kube::kubeadm::{CONTROL_PLANE_LABEL, GROUP_LABEL};
use crate::spec::versions::{Version, KUBELET_SKEW};
use crate::spec::{Cluster, Role};

fn name_of(ns: Option<&str>, name: Option<&str>) -> String {
    match ns {
        Some(ns) => format!("{ns}/{}", name.unwrap_or_default()),
        None => name.unwrap_or_default().to_string(),
    }
}

/// Kubelets newer than the API server, or more than three minors older.
/// The checks whose objects count as drift in the metrics.
pub const DRIFT_ADDONS_CHECK: &str = "addons-match";
pub const DRIFT_WORKLOADS_CHECK: &str = "children-unedited";

pub fn skew(server: Version, kubelets: &[(String, Version)]) -> Outcome {
    let bad: Vec<String> = kubelets
        .iter()
        .filter(|(_, v)| v.minor > server.minor || v.minor + KUBELET_SKEW < server.minor)
        .map(|(n, v)| format!("{n} (kubelet {v})"))
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail(
            format!("kubelets outside the skew policy for API server {server} (never newer, at most {KUBELET_SKEW} minors older)"),
            bad,
        )
    }
}

/// Objects (`apiVersion kind name`) whose API version the next minor after
/// `server_minor` (or an earlier one) no longer serves.
pub fn removed(server_minor: u32, objects: &[(String, String, String)]) -> Outcome {
    let next = server_minor + 1;
    let bad: Vec<String> = objects
        .iter()
        .filter_map(|(api, kind, name)| {
            crate::spec::versions::removed_by(next)
                .into_iter()
                .find(|(a, k, _)| a == api && k == kind)
                .map(|(_, _, by)| format!("{kind} {name} uses {api} (removed in 1.{by})"))
        })
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail(format!("objects use API versions Kubernetes 1.{next} does not serve"), bad)
    }
}

/// Budgets that allow no disruption now: a drain would wait on them forever.
pub fn blocking_budgets(pdbs: &[PodDisruptionBudget]) -> Outcome {
    let bad: Vec<String> = pdbs
        .iter()
        .filter(|p| p.status.as_ref().is_some_and(|s| s.expected_pods > 0 && s.disruptions_allowed == 0))
        .map(|p| name_of(p.metadata.namespace.as_deref(), p.metadata.name.as_deref()))
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail("PodDisruptionBudgets allow no disruption: a roll's drain would wait on them", bad)
    }
}

fn selects(
    selector: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(sel) = selector else { return false };
    let ml = sel.match_labels.clone().unwrap_or_default();
    !ml.is_empty() && ml.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// Workloads of one replica outside kube-system that no budget covers:
/// every roll takes them down (a warning, not a failure).
pub fn lonely(workloads: &[(String, i32, BTreeMap<String, String>)], pdbs: &[PodDisruptionBudget]) -> Outcome {
    let bad: Vec<String> = workloads
        .iter()
        .filter(|(name, replicas, _)| *replicas == 1 && !name.starts_with("kube-system/"))
        .filter(|(name, _, labels)| {
            let ns = name.split('/').next().unwrap_or_default();
            !pdbs.iter().any(|p| {
                p.metadata.namespace.as_deref() == Some(ns)
                    && selects(p.spec.as_ref().and_then(|s| s.selector.as_ref()), labels)
            })
        })
        .map(|(n, _, _)| n.clone())
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::Warn {
            reason: "single-replica workloads without a PodDisruptionBudget go down during every roll".into(),
            objects: bad,
        }
    }
}

/// Room for the next roll: a group that surges needs `maxSize` above
/// desired + surge; a group that drains first needs its other nodes to hold
/// what the drained ones run (CPU requests against allocatable).
/// `usage`: per group, each node's (allocatable millicores, requested millicores).
pub fn surge_room(cluster: &Cluster, usage: &BTreeMap<String, Vec<(i64, i64)>>) -> Outcome {
    let mut bad = Vec::new();
    for g in cluster.spec.instance_groups.iter().filter(|g| g.role == Role::Node) {
        let desired = g.desired_count();
        let surge = g.rollout.max_surge.resolve_up(desired);
        let unavailable = g.rollout.max_unavailable.resolve_down(desired);
        if surge > 0 && desired + surge > g.max_size {
            bad.push(format!(
                "{}: a roll surges {surge} above desired {desired} but maxSize is {}",
                g.name, g.max_size
            ));
        }
        if surge == 0 && unavailable > 0 {
            let mut nodes = usage.get(&g.name).cloned().unwrap_or_default();
            let requested: i64 = nodes.iter().map(|(_, r)| r).sum();
            nodes.sort_by_key(|(a, _)| std::cmp::Reverse(*a));
            let left: i64 = nodes.iter().skip(unavailable as usize).map(|(a, _)| a).sum();
            if requested > left {
                bad.push(format!(
                    "{}: draining {unavailable} node(s) leaves {left}m CPU allocatable for {requested}m requested",
                    g.name
                ));
            }
        }
    }
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail("not enough room for the next roll", bad)
    }
}

/// Nodes not Ready, or cordoned (but for the cordoned nodes of the
/// groups a roll in progress has yet to reach: its own work).
pub fn unready_nodes(nodes: &[Node], rolling: &std::collections::BTreeSet<String>) -> Outcome {
    let bad: Vec<String> = nodes
        .iter()
        .filter_map(|n| {
            let name = n.metadata.name.clone()?;
            let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
            let group = n.metadata.labels.as_ref().and_then(|l| l.get(crate::kube::kubeadm::GROUP_LABEL));
            let roll_work = group.is_some_and(|g| rolling.contains(g));
            match (crate::kube::drain::node_ready(n), cordoned) {
                (true, false) => None,
                (true, true) if roll_work => None,
                (false, _) => Some(format!("{name} (not Ready)")),
                (true, true) => Some(format!("{name} (cordoned)")),
            }
        })
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail(format!("{} node(s) not Ready and schedulable", bad.len()), bad)
    }
}

/// Each group's Ready nodes against its desired size.
pub fn group_sizes(cluster: &Cluster, nodes: &[Node]) -> Outcome {
    let mut ready: BTreeMap<String, u32> = BTreeMap::new();
    for n in nodes.iter().filter(|n| crate::kube::drain::node_ready(n)) {
        if let Some(g) = n.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)) {
            *ready.entry(g.clone()).or_default() += 1;
        }
    }
    let bad: Vec<String> = cluster
        .spec
        .instance_groups
        .iter()
        .filter_map(|g| {
            let have = ready.get(&g.name).copied().unwrap_or(0);
            (have < g.desired_count())
                .then(|| format!("{}: {have} of {} desired nodes Ready", g.name, g.desired_count()))
        })
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail("groups short of Ready nodes", bad)
    }
}

/// The workloads that are not ready, by the one set of readiness rules.
pub fn unready_workloads(objects: &[(crate::kube::ready::ReadyKind, Value)]) -> Outcome {
    let bad: Vec<String> = objects
        .iter()
        .filter_map(|(kind, v)| {
            crate::kube::ready::ready(*kind, v).err().map(|why| {
                let m = &v["metadata"];
                format!(
                    "{} {}/{}: {why}",
                    v["kind"].as_str().unwrap_or_default(),
                    m["namespace"].as_str().unwrap_or_default(),
                    m["name"].as_str().unwrap_or_default()
                )
            })
        })
        .collect();
    if bad.is_empty() {
        Outcome::Pass
    } else {
        Outcome::fail(format!("{} system or addon workload(s) not ready", bad.len()), bad)
    }
}

/// The pre-flight phase; false when the API cannot be reached (the rest is
/// skipped). With `full` false only reachability is checked.
pub async fn preflight(t: &Target, r: &mut Recorder<'_>, full: bool) -> bool {
    let client = t.client.clone();
    // The API server's version, read once by the reachability check.
    let mut server = None;
    let reachable = r
        .check(Phase::Preflight, "api-reachable", async {
            let v = client.apiserver_version().await?;
            server = Version::parse(&v.git_version);
            Ok(Outcome::Pass)
        })
        .await
        .clone();
    if !matches!(reachable, Outcome::Pass) {
        return false;
    }
    if !full {
        return true;
    }
    let server = server.unwrap_or(Version { major: 1, minor: 0, patch: 0 });
    let nodes: Api<Node> = Api::all(t.client.clone());
    r.check(Phase::Preflight, "version-skew", async {
        let list = nodes.list(&ListParams::default()).await?;
        let kubelets: Vec<(String, Version)> = list
            .items
            .iter()
            .filter_map(|n| {
                let v = Version::parse(&n.status.as_ref()?.node_info.as_ref()?.kubelet_version)?;
                Some((n.metadata.name.clone()?, v))
            })
            .collect();
        Ok(skew(server, &kubelets))
    })
    .await;
    r.check(Phase::Preflight, "removed-apis", async {
        let mut objects: Vec<(String, String, String)> = Vec::new();
        for a in t.addons.iter().flatten() {
            for o in &a.objects {
                objects.push((o.key.api_version.clone(), o.key.kind.clone(), format!("{} ({})", o.key, a.name)));
            }
        }
        // What the server still serves under a version the next minor drops.
        for (api, kind, by) in
            crate::spec::versions::removed_by(server.minor + 1).into_iter().filter(|(_, _, by)| *by == server.minor + 1)
        {
            let (group, version) = api.split_once('/').unwrap_or(("", api));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
            if let Ok((ar, _)) = kube::discovery::pinned_kind(&t.client, &gvk).await {
                let api: Api<kube::api::DynamicObject> = Api::all_with(t.client.clone(), &ar);
                for o in api.list(&ListParams::default()).await?.items {
                    let _ = by;
                    objects.push((
                        ar.api_version.clone(),
                        kind.to_string(),
                        name_of(o.metadata.namespace.as_deref(), o.metadata.name.as_deref()),
                    ));
                }
            }
        }
        Ok(removed(server.minor, &objects))
    })
    .await;
    let pdbs: Vec<PodDisruptionBudget> = Api::<PodDisruptionBudget>::all(t.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    r.check(Phase::Preflight, "budgets-allow-disruption", async { Ok(blocking_budgets(&pdbs)) }).await;
    r.check(Phase::Preflight, "single-replica-workloads", async {
        type Row = (String, i32, BTreeMap<String, String>);
        let row =
            |meta: &kube::api::ObjectMeta, replicas: Option<i32>, template: Option<&kube::api::ObjectMeta>| -> Row {
                let labels = template.and_then(|m| m.labels.clone()).unwrap_or_default();
                (name_of(meta.namespace.as_deref(), meta.name.as_deref()), replicas.unwrap_or(1), labels)
            };
        let mut w: Vec<Row> = Vec::new();
        for d in Api::<Deployment>::all(t.client.clone()).list(&ListParams::default()).await?.items {
            let spec = d.spec.as_ref();
            w.push(row(&d.metadata, spec.and_then(|s| s.replicas), spec.and_then(|s| s.template.metadata.as_ref())));
        }
        for x in Api::<StatefulSet>::all(t.client.clone()).list(&ListParams::default()).await?.items {
            let spec = x.spec.as_ref();
            w.push(row(&x.metadata, spec.and_then(|s| s.replicas), spec.and_then(|s| s.template.metadata.as_ref())));
        }
        Ok(lonely(&w, &pdbs))
    })
    .await;
    r.check(Phase::Preflight, "surge-capacity", async {
        let nodes = nodes.list(&ListParams::default()).await?.items;
        let pods = Api::<Pod>::all(t.client.clone()).list(&ListParams::default()).await?.items;
        let mut requested: BTreeMap<String, i64> = BTreeMap::new();
        for p in &pods {
            let daemon = p.metadata.owner_references.iter().flatten().any(|o| o.kind == "DaemonSet");
            let done = matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"));
            let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
            if daemon || done {
                continue;
            }
            let cpu: i64 = p
                .spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .filter_map(|c| c.resources.as_ref()?.requests.as_ref()?.get("cpu").map(|q| millicores(&q.0)))
                .sum();
            *requested.entry(node).or_default() += cpu;
        }
        let mut usage: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
        for n in &nodes {
            let (Some(name), Some(g)) =
                (n.metadata.name.clone(), n.metadata.labels.as_ref().and_then(|l| l.get(GROUP_LABEL)).cloned())
            else {
                continue;
            };
            if n.metadata.labels.as_ref().is_some_and(|l| l.contains_key(CONTROL_PLANE_LABEL)) {
                continue;
            }
            let alloc = n
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .and_then(|a| a.get("cpu"))
                .map(|q| millicores(&q.0))
                .unwrap_or(0);
            usage.entry(g).or_default().push((alloc, requested.get(&name).copied().unwrap_or(0)));
        }
        Ok(surge_room(&t.cluster, &usage))
    })
    .await;
    true
}

/// CPU quantity in millicores ("250m", "2", "0.5").
pub fn millicores(q: &str) -> i64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0),
        None => q.parse::<f64>().map(|c| (c * 1000.0) as i64).unwrap_or(0),
    }
}

/// The cluster phase.
pub async fn cluster(t: &Target, r: &mut Recorder<'_>, rolling: &std::collections::BTreeSet<String>) {
    let nodes: Api<Node> = Api::all(t.client.clone());
    let list = nodes.list(&ListParams::default()).await.map(|l| l.items);
    r.check(Phase::Cluster, "nodes-ready", async {
        Ok(unready_nodes(list.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?, rolling))
    })
    .await;
    r.check(Phase::Cluster, "group-sizes", async {
        Ok(group_sizes(&t.cluster, list.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?))
    })
    .await;
    r.check(Phase::Cluster, "workloads-ready", async {
        Ok(unready_workloads(&system_and_addon_workloads(&t.client).await?))
    })
    .await;
    match &t.addons {
        Some(addons) => {
            r.check(Phase::Cluster, DRIFT_ADDONS_CHECK, async {
                let diffs = crate::addons::install::Installer::new(t.client.clone()).diff(addons, false).await?;
                Ok(if diffs.is_empty() {
                    Outcome::Pass
                } else {
                    Outcome::fail(
                        format!(
                            "{} addon object(s) differ from the rendered set (`pinfleet addons diff` shows how)",
                            diffs.len()
                        ),
                        diffs.iter().map(|d| format!("{} ({})", d.key, d.addon)).collect(),
                    )
                })
            })
            .await;
        }
        None => {
            r.check(Phase::Cluster, DRIFT_ADDONS_CHECK, async {
                Ok(Outcome::Skip {
                    reason: "no addon set rendered for this run (--no-addons, or PINFLEET_SKIP_ADDONS)".into(),
                })
            })
            .await;
        }
    }
    // Children of platform workloads edited by hand: drift worth a
    // ticket, not a failed run (the workloads still serve).
    r.check(Phase::Cluster, DRIFT_WORKLOADS_CHECK, async {
        Ok(match crate::diff::observe::workloads(&t.client).await? {
            crate::diff::LayerState::Drifted { findings } => Outcome::Warn {
                reason: format!(
                    "{} child object(s) of platform workloads edited by hand (`pinfleet diff` names who and what)",
                    findings.len()
                ),
                objects: findings.iter().map(|f| f.subject.clone()).collect(),
            },
            _ => Outcome::Pass,
        })
    })
    .await;
}

/// kube-system's Deployments, DaemonSets and StatefulSets, and every addon's.
pub async fn system_and_addon_workloads(client: &kube::Client) -> Result<Vec<(crate::kube::ready::ReadyKind, Value)>> {
    use crate::kube::ready::ReadyKind;
    let mut out = Vec::new();
    let (system, addon) = (ListParams::default(), ListParams::default().labels(crate::kube::ADDON_LABEL));
    let mut seen = std::collections::BTreeSet::new();
    for (ns, lp) in [(Some("kube-system"), &system), (None, &addon)] {
        let d: Api<Deployment> = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
        let ds: Api<DaemonSet> = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
        let ss: Api<StatefulSet> = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
        let mut push = |kind: ReadyKind, v: Value| {
            let key = (
                v["kind"].as_str().unwrap_or_default().to_string(),
                v["metadata"]["namespace"].clone().to_string(),
                v["metadata"]["name"].clone().to_string(),
            );
            if seen.insert(key) {
                out.push((kind, v));
            }
        };
        for x in d.list(lp).await?.items {
            let mut v = serde_json::to_value(&x)?;
            v["kind"] = "Deployment".into();
            push(ReadyKind::Deployment, v);
        }
        for x in ds.list(lp).await?.items {
            let mut v = serde_json::to_value(&x)?;
            v["kind"] = "DaemonSet".into();
            push(ReadyKind::DaemonSet, v);
        }
        for x in ss.list(lp).await?.items {
            let mut v = serde_json::to_value(&x)?;
            v["kind"] = "StatefulSet".into();
            push(ReadyKind::StatefulSet, v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    #[test]
    fn skew_and_removed_apis() {
        assert_eq!(skew(v("1.33.4"), &[("a".into(), v("1.31.0"))]), Outcome::Pass);
        let Outcome::Fail { objects, .. } = skew(v("1.33.4"), &[("a".into(), v("1.34.0")), ("b".into(), v("1.29.1"))])
        else {
            panic!()
        };
        assert_eq!(objects, ["a (kubelet 1.34.0)", "b (kubelet 1.29.1)"]);
        let objs = vec![
            ("flowcontrol.apiserver.k8s.io/v1beta3".to_string(), "FlowSchema".to_string(), "fs".to_string()),
            ("apps/v1".to_string(), "Deployment".to_string(), "d".to_string()),
        ];
        assert_eq!(
            removed(33, &objs),
            Outcome::fail(
                "objects use API versions Kubernetes 1.34 does not serve",
                vec!["FlowSchema fs uses flowcontrol.apiserver.k8s.io/v1beta3 (removed in 1.32)".into()]
            )
        );
        assert_eq!(removed(30, &objs[1..]), Outcome::Pass);
        assert_eq!(millicores("250m"), 250);
        assert_eq!(millicores("1.5"), 1500);
    }

    #[test]
    fn a_roll_s_own_cordoned_nodes_are_not_a_fault_while_it_is_on_the_way() {
        let node = |name: &str, group: &str, cordoned: bool| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": {"pinfleet.dev/instance-group": group}},
                "spec": {"unschedulable": cordoned},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .unwrap()
        };
        let nodes = [node("a", "control-plane", false), node("b", "general", true)];
        let Outcome::Fail { objects, .. } = unready_nodes(&nodes, &Default::default()) else { panic!() };
        assert_eq!(objects, ["b (cordoned)"]);
        let rolling = ["general".to_string()].into();
        assert_eq!(unready_nodes(&nodes, &rolling), Outcome::Pass, "general's roll resumes its own drain");
    }
}
