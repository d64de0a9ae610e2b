//! Drift: what a cluster runs compared with its definition, layer by layer
//! (AWS, machines, Kubernetes, addons, platform workloads), and clusters
//! compared with each other by what they run.
//!
//! Where it sits: `cli::diff` gathers observations through
//! [`observe`] (the only part with effects: AWS through `apply::prepare`,
//! the cluster's API through kube) and hands them to the pure functions
//! here, which turn them into a [`Report`] per cluster or a list of
//! [`Difference`]s between clusters; `cli::diff` prints them. Nothing here
//! writes anywhere.

pub mod observe;
pub mod render;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

use crate::addons::install::ObjectDiff;
use crate::cloud::observed::ObservedInstance;
use crate::plan::{Action, Plan, Step};

/// The layers of a cluster, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "camelCase")]
pub enum Layer {
    /// What `plan` would change on AWS.
    Aws,
    /// Machines not on their group's launch template or image.
    Machines,
    /// The configured and running Kubernetes versions.
    Kubernetes,
    /// Addon objects live vs rendered.
    Addons,
    /// Children of platform workloads edited by hand.
    Workloads,
}

impl Layer {
    pub const ALL: [Layer; 5] = [Layer::Aws, Layer::Machines, Layer::Kubernetes, Layer::Addons, Layer::Workloads];

    pub fn name(self) -> &'static str {
        match self {
            Layer::Aws => "aws",
            Layer::Machines => "machines",
            Layer::Kubernetes => "kubernetes",
            Layer::Addons => "addons",
            Layer::Workloads => "workloads",
        }
    }
}

/// One thing that differs from the definition, and what fixes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// What differs: a resource, a group, an object.
    pub subject: String,
    /// How it differs.
    pub what: String,
    /// The command that makes it match again.
    pub fix: String,
    /// A field diff, where there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A layer's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum LayerState {
    InSync,
    Drifted {
        findings: Vec<Finding>,
    },
    /// The layer could not be read (the cluster's API down, AWS refusing).
    Unreachable {
        why: String,
    },
    /// The layer does not apply here (no AWS side on a local target).
    Skipped {
        why: String,
    },
}

impl LayerState {
    fn of(findings: Vec<Finding>) -> LayerState {
        if findings.is_empty() {
            LayerState::InSync
        } else {
            LayerState::Drifted { findings }
        }
    }

    /// One word for a table cell.
    pub fn word(&self) -> &'static str {
        match self {
            LayerState::InSync => "in sync",
            LayerState::Drifted { .. } => "drifted",
            LayerState::Unreachable { .. } => "unreachable",
            LayerState::Skipped { .. } => "-",
        }
    }
}

/// Everything that drifted on one cluster, by layer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub cluster: String,
    pub layers: BTreeMap<Layer, LayerState>,
}

impl Report {
    pub fn drifted(&self) -> bool {
        self.layers.values().any(|l| matches!(l, LayerState::Drifted { .. }))
    }

    pub fn unreachable(&self) -> bool {
        self.layers.values().any(|l| matches!(l, LayerState::Unreachable { .. }))
    }
}

/// The AWS layer: each change `apply` would make.
pub fn aws(cluster: &str, plan: &Plan) -> LayerState {
    let findings = plan
        .changes
        .iter()
        .map(|c| {
            let (what, fix) = match &c.op {
                Step::Refuse { why } => (format!("{} (apply refuses: {why})", c.summary), upgrade(cluster, None)),
                _ => (format!("{} {}: {}", c.action.symbol(), action_word(c.action), c.summary), apply(cluster)),
            };
            // The fields that differ, live → declared, where the plan has them.
            let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
            let fields: Vec<String> =
                c.fields.iter().map(|f| format!("{} {} → {}", f.field, shown(&f.before), shown(&f.after))).collect();
            let detail = (!fields.is_empty()).then(|| fields.join("\n"));
            Finding { subject: c.key.to_string(), what: format!("{what} (from {})", c.reason), fix, detail }
        })
        .collect();
    LayerState::of(findings)
}

fn action_word(a: Action) -> &'static str {
    match a {
        Action::Create => "missing",
        Action::Update => "differs",
        Action::Replace => "must be replaced",
        Action::Delete => "not declared",
    }
}

fn apply(cluster: &str) -> String {
    format!("pinfleet apply {cluster}")
}

fn upgrade(cluster: &str, group: Option<&str>) -> String {
    match group {
        Some(g) => format!("pinfleet upgrade {cluster} --instance-group {g} --yes"),
        None => format!("pinfleet upgrade {cluster} --yes"),
    }
}

/// The machines layer: per group, live machines not on the launch
/// template's newest version, and machines whose image is not what the
/// group's selector resolves to now.
pub fn machines(
    cluster: &str,
    groups: &[String],
    instances: &[ObservedInstance],
    latest_template: &BTreeMap<String, i64>,
    images: &BTreeMap<String, (String, String)>,
) -> LayerState {
    let mut out = Vec::new();
    for g in groups {
        let live: Vec<&ObservedInstance> =
            instances.iter().filter(|i| i.is_live() && i.group.as_deref() == Some(g.as_str())).collect();
        if let Some(&latest) = latest_template.get(g) {
            let behind: BTreeMap<String, usize> =
                live.iter().filter(|i| i.launch_template_version != Some(latest)).fold(BTreeMap::new(), |mut m, i| {
                    *m.entry(i.launch_template_version.map_or("none".into(), |v| format!("v{v}"))).or_default() += 1;
                    m
                });
            if !behind.is_empty() {
                let on: Vec<String> = behind.iter().map(|(v, n)| format!("{n} on {v}")).collect();
                out.push(Finding {
                    subject: format!("group/{g}"),
                    what: format!(
                        "{} of {} machines are not on the launch template's current version v{latest} ({})",
                        behind.values().sum::<usize>(),
                        live.len(),
                        on.join(", ")
                    ),
                    fix: upgrade(cluster, Some(g)),
                    detail: None,
                });
            }
        }
        if let Some((want, name)) = images.get(g) {
            let other: BTreeMap<&str, usize> =
                live.iter().filter(|i| &i.image_id != want).fold(BTreeMap::new(), |mut m, i| {
                    *m.entry(i.image_id.as_str()).or_default() += 1;
                    m
                });
            if !other.is_empty() {
                let on: Vec<String> = other.iter().map(|(id, n)| format!("{n} run {id}")).collect();
                out.push(Finding {
                    subject: format!("group/{g}"),
                    what: format!(
                        "{} of {} machines run another image than the selector resolves to now, {want} ({name}): {}",
                        other.values().sum::<usize>(),
                        live.len(),
                        on.join(", ")
                    ),
                    fix: format!(
                        "{} (after `pinfleet apply {cluster}` writes the new image)",
                        upgrade(cluster, Some(g))
                    ),
                    detail: None,
                });
            }
        }
    }
    LayerState::of(out)
}

/// One node as the diff sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFacts {
    pub name: String,
    /// Its instance group (`pinfleet.dev/instance-group`), or `-`.
    pub group: String,
    /// `status.nodeInfo`'s fields and the allocatable resources, by name
    /// (`kernelVersion`, `osImage`, `allocatable.cpu`, …).
    pub facts: BTreeMap<String, String>,
}

/// The Kubernetes layer: the version kubeadm's configuration holds and the
/// kubelets' against `spec.kubernetesVersion`.
pub fn kubernetes(cluster: &str, declared: &str, configured: Option<&str>, nodes: &[NodeFacts]) -> LayerState {
    let want = format!("v{}", declared.trim_start_matches('v'));
    let mut out = Vec::new();
    if let Some(c) = configured {
        let c = format!("v{}", c.trim_start_matches('v'));
        if c != want {
            out.push(Finding {
                subject: "kubeadm-config".into(),
                what: format!("the cluster configuration says {c}, the file {want}"),
                fix: upgrade(cluster, None),
                detail: None,
            });
        }
    }
    let mut by_group: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    for n in nodes {
        if let Some(v) = n.facts.get("kubeletVersion") {
            *by_group.entry(&n.group).or_default().entry(v).or_default() += 1;
        }
    }
    for (g, versions) in by_group {
        let off: Vec<String> =
            versions.iter().filter(|(v, _)| **v != want).map(|(v, n)| format!("{n} at {v}")).collect();
        if !off.is_empty() {
            let total: usize = versions.values().sum();
            out.push(Finding {
                subject: format!("group/{g}"),
                what: format!("kubelets not at {want}: {} of {total} ({})", off.len(), off.join(", ")),
                fix: upgrade(cluster, (g != "-").then_some(g)),
                detail: None,
            });
        }
    }
    LayerState::of(out)
}

/// The addons layer: each object whose live form differs from the rendered
/// one, with the fields that differ and the unified diff.
pub fn addons(cluster: &str, diffs: &[ObjectDiff]) -> LayerState {
    let findings = diffs
        .iter()
        .map(|d| {
            let what = match (&d.live, &d.desired) {
                (None, _) => "missing from the cluster (deleted, or never installed)".to_string(),
                (Some(_), None) => "no longer rendered: pruned on the next apply".to_string(),
                (Some(l), Some(r)) => {
                    let fields = changed_paths(l, r);
                    format!("changed in the cluster: {}", fields.join(", "))
                }
            };
            Finding {
                subject: format!("{} ({})", d.key, d.addon),
                what,
                fix: format!("pinfleet addons apply {cluster}"),
                // The field diff where both sides exist (a whole missing
                // object is named, not printed).
                detail: (d.live.is_some() && d.desired.is_some()).then(|| d.unified()),
            }
        })
        .collect();
    LayerState::of(findings)
}

/// The dotted paths where two JSON values differ (lists by index, at most
/// eight named).
pub fn changed_paths(a: &Value, b: &Value) -> Vec<String> {
    fn walk(a: Option<&Value>, b: Option<&Value>, at: &str, out: &mut Vec<String>) {
        match (a, b) {
            (Some(Value::Object(x)), Some(Value::Object(y))) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    walk(x.get(k), y.get(k), &join(at, k), out);
                }
            }
            (Some(Value::Array(x)), Some(Value::Array(y))) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(Some(p), Some(q), &format!("{at}[{i}]"), out);
                }
            }
            (x, y) if x != y => out.push(if at.is_empty() { "<root>".into() } else { at.to_string() }),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(Some(a), Some(b), "", &mut out);
    if out.len() > 8 {
        let more = out.len() - 8;
        out.truncate(8);
        out.push(format!("and {more} more"));
    }
    out
}

fn join(at: &str, k: &str) -> String {
    if at.is_empty() {
        k.to_string()
    } else {
        format!("{at}.{k}")
    }
}

/// A child object of a platform workload, as read from the cluster.
#[derive(Debug, Clone)]
pub struct Child {
    /// `Deployment team-a/web`.
    pub name: String,
    /// `PinterestService team-a/web`.
    pub owner: String,
    /// The object's `metadata.managedFields`.
    pub managed_fields: Value,
}

/// Managers that write workloads' specs as part of running them (the
/// platform's controller, Kubernetes' own controllers), not by hand.
pub fn is_automation(manager: &str, controller: &str) -> bool {
    manager == controller
        || matches!(manager, "kube-controller-manager" | "kube-scheduler" | "kubelet" | "horizontal-pod-autoscaler")
        || manager.starts_with("pinfleet")
}

/// The workloads layer: children whose spec someone other than the
/// controller (or Kubernetes' own controllers) wrote, naming who and what.
pub fn workloads(children: &[Child], controller: &str) -> LayerState {
    let mut out = Vec::new();
    for c in children {
        for e in c.managed_fields.as_array().into_iter().flatten() {
            let manager = e["manager"].as_str().unwrap_or_default();
            if is_automation(manager, controller) || e.get("subresource").is_some_and(|s| s == "status") {
                continue;
            }
            let fields: Vec<String> =
                field_paths(&e["fieldsV1"]).into_iter().filter(|p| p == "spec" || p.starts_with("spec.")).collect();
            if fields.is_empty() {
                continue;
            }
            let when = e["time"].as_str().map(|t| format!(" at {t}")).unwrap_or_default();
            out.push(Finding {
                subject: c.name.clone(),
                what: format!("edited by hand ({manager}{when}) under {}: {}", c.owner, fields.join(", ")),
                fix: format!(
                    "change {} instead, and undo the edit (or delete the child: the controller recreates it)",
                    c.owner
                ),
                detail: None,
            });
        }
    }
    LayerState::of(out)
}

/// The leaf paths of a `fieldsV1` set (`f:spec`/`f:replicas` → `spec.replicas`;
/// list items by key, `k:{"name":"app"}` → `[name=app]`).
pub fn field_paths(fields: &Value) -> Vec<String> {
    fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
        let Some(m) = v.as_object() else { return };
        let kids: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.as_str() != ".").collect();
        if kids.is_empty() {
            if !at.is_empty() {
                out.push(at.to_string());
            }
            return;
        }
        for (k, child) in kids {
            let seg = if let Some(f) = k.strip_prefix("f:") {
                join(at, f)
            } else if let Some(key) = k.strip_prefix("k:") {
                let item: Value = serde_json::from_str(key).unwrap_or(Value::Null);
                let label = item
                    .as_object()
                    .map(|o| o.iter().map(|(a, b)| format!("{a}={}", b.as_str().map_or(b.to_string(), str::to_string))))
                    .map(|v| v.collect::<Vec<_>>().join(","))
                    .unwrap_or_default();
                format!("{at}[{label}]")
            } else if let Some(val) = k.strip_prefix("v:") {
                format!("{at}[{val}]")
            } else {
                join(at, k)
            };
            walk(child, &seg, out);
        }
    }
    let mut out = Vec::new();
    walk(fields, "", &mut out);
    out
}

/// What one cluster runs, reduced to comparable facts: attribute → value.
/// Built by [`fingerprint`].
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fingerprint {
    pub cluster: String,
    pub facts: BTreeMap<String, String>,
}

/// The definition's paths that are expected to differ between clusters
/// meant to match: names, addresses, zones, the region, the state store and
/// the labels fleet stages select on.
pub fn expected_to_differ(path: &str, stage_labels: &BTreeSet<String>) -> bool {
    let last = path.rsplit('.').next().unwrap_or(path);
    let last = last.split('[').next().unwrap_or(last);
    path == "metadata.name"
        || path.starts_with("spec.stateStore")
        || path.starts_with("spec.cloud.region")
        || path.starts_with("spec.cloud.zones")
        || path.starts_with("spec.network.subnets")
        || path.contains(".subnets[")
        || last.to_ascii_lowercase().contains("cidr")
        || last == "zone"
        || last == "zones"
        || path.strip_prefix("metadata.labels.").is_some_and(|k| stage_labels.contains(k))
}

/// Flattens a JSON value into dotted paths → scalar text.
pub fn flatten(v: &Value) -> BTreeMap<String, String> {
    fn walk(v: &Value, at: &str, out: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, c) in m {
                    walk(c, &join(at, k), out);
                }
            }
            Value::Array(a) => {
                // Items with a name are keyed by it (groups, subnets, addons).
                for (i, c) in a.iter().enumerate() {
                    let key = c.get("name").and_then(Value::as_str).map_or(i.to_string(), str::to_string);
                    walk(c, &format!("{at}[{key}]"), out);
                }
            }
            Value::Null => {}
            Value::String(s) => {
                out.insert(at.to_string(), s.clone());
            }
            other => {
                out.insert(at.to_string(), other.to_string());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(v, "", &mut out);
    out
}

/// A cluster's comparable facts: its effective definition without what is
/// expected to differ, the API server's version, images per group, addon
/// versions, and each node fact per group as a distribution ("5.10.0 on
/// every node", "6.1.0 ×1, 5.10.0 ×2").
pub fn fingerprint(
    cluster: &str,
    definition: &Value,
    stage_labels: &BTreeSet<String>,
    server_version: Option<&str>,
    images: &BTreeMap<String, BTreeSet<String>>,
    addon_versions: &BTreeMap<String, String>,
    nodes: &[NodeFacts],
) -> Fingerprint {
    let mut facts: BTreeMap<String, String> = flatten(definition)
        .into_iter()
        .filter(|(k, _)| !expected_to_differ(k, stage_labels))
        .map(|(k, v)| (format!("definition {k}"), v))
        .collect();
    if let Some(v) = server_version {
        facts.insert("api server version".into(), v.to_string());
    }
    for (g, ids) in images {
        facts.insert(format!("group {g} image"), ids.iter().cloned().collect::<Vec<_>>().join(", "));
    }
    for (a, v) in addon_versions {
        facts.insert(format!("addon {a} version"), v.clone());
    }
    let mut dist: BTreeMap<(String, String), BTreeMap<String, usize>> = BTreeMap::new();
    for n in nodes {
        for (k, v) in &n.facts {
            *dist.entry((n.group.clone(), k.clone())).or_default().entry(v.clone()).or_default() += 1;
        }
    }
    for ((g, k), values) in dist {
        let text = if values.len() == 1 {
            format!("{} on every node", values.keys().next().expect("one value"))
        } else {
            let mut v: Vec<(&String, &usize)> = values.iter().collect();
            v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            v.iter().map(|(val, n)| format!("{val} ×{n}")).collect::<Vec<_>>().join(", ")
        };
        facts.insert(format!("nodes of {g} {k}"), text);
    }
    Fingerprint { cluster: cluster.to_string(), facts }
}

/// One fact on which clusters disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Difference {
    pub fact: String,
    /// Cluster → its value (`(none)` where it has none).
    pub values: BTreeMap<String, String>,
    /// The clusters whose value is not the most common one (empty for a
    /// pair, where neither is "the" odd one).
    pub odd: Vec<String>,
}

const NONE: &str = "(none)";

/// Every fact on which the clusters disagree. With three or more, the
/// clusters holding a value fewer clusters share than the most common one
/// are named odd ones out.
pub fn compare(prints: &[Fingerprint]) -> Vec<Difference> {
    let facts: BTreeSet<&String> = prints.iter().flat_map(|p| p.facts.keys()).collect();
    let mut out = Vec::new();
    for f in facts {
        let values: BTreeMap<String, String> = prints
            .iter()
            .map(|p| (p.cluster.clone(), p.facts.get(f).cloned().unwrap_or_else(|| NONE.to_string())))
            .collect();
        let distinct: BTreeSet<&String> = values.values().collect();
        if distinct.len() < 2 {
            continue;
        }
        let mut count: BTreeMap<&String, usize> = BTreeMap::new();
        for v in values.values() {
            *count.entry(v).or_default() += 1;
        }
        let top = count.values().copied().max().unwrap_or(0);
        let leaders = count.values().filter(|&&n| n == top).count();
        let odd = if prints.len() >= 3 && leaders == 1 {
            values.iter().filter(|(_, v)| count[v] < top).map(|(c, _)| c.clone()).collect()
        } else {
            Vec::new()
        };
        out.push(Difference { fact: f.clone(), values, odd });
    }
    out
}

/// The clusters named odd one out on any fact, with how many facts each.
pub fn odd_ones(diffs: &[Difference]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in diffs {
        for c in &d.odd {
            *out.entry(c.clone()).or_default() += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, group: &str, kernel: &str) -> NodeFacts {
        NodeFacts {
            name: name.into(),
            group: group.into(),
            facts: [("kernelVersion".to_string(), kernel.to_string()), ("kubeletVersion".into(), "v1.36.2".into())]
                .into(),
        }
    }

    #[test]
    fn field_paths_read_managed_fields() {
        let f = json!({"f:metadata": {"f:labels": {"f:x": {}}}, "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}}});
        assert_eq!(
            field_paths(&f),
            ["metadata.labels.x", "spec.replicas", "spec.template.spec.containers[name=app].image"]
        );
    }

    #[test]
    fn a_hand_edit_names_who_and_what_and_automation_is_not_one() {
        let child = |manager: &str| Child {
            name: "Deployment t/web".into(),
            owner: "PinterestService t/web".into(),
            managed_fields: json!([
                {"manager": "pinfleet-controller", "operation": "Apply", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": manager, "operation": "Update", "time": "2026-11-24T10:00:00Z", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status", "fieldsV1": {"f:status": {"f:replicas": {}}}}
            ]),
        };
        assert_eq!(workloads(&[child("kube-controller-manager")], "pinfleet-controller"), LayerState::InSync);
        let LayerState::Drifted { findings } = workloads(&[child("kubectl-edit")], "pinfleet-controller") else {
            panic!("a hand edit is drift")
        };
        assert_eq!(
            findings[0].what,
            "edited by hand (kubectl-edit at 2026-11-24T10:00:00Z) under PinterestService t/web: spec.replicas"
        );
    }

    #[test]
    fn kubelets_are_grouped_and_the_configuration_named() {
        let nodes = [node("a", "general", "5.10"), node("b", "general", "5.10")];
        assert_eq!(kubernetes("c", "1.36.2", Some("v1.36.2"), &nodes), LayerState::InSync);
        let LayerState::Drifted { findings } = kubernetes("c", "1.37.0", Some("v1.36.2"), &nodes) else { panic!() };
        assert_eq!(findings.len(), 2);
        assert_eq!(findings[0].what, "the cluster configuration says v1.36.2, the file v1.37.0");
        assert_eq!(findings[1].what, "kubelets not at v1.37.0: 1 of 2 (2 at v1.36.2)");
        assert_eq!(findings[1].fix, "pinfleet upgrade c --instance-group general --yes");
    }

    #[test]
    fn what_is_expected_to_differ_is_left_out() {
        let stage: BTreeSet<String> = ["env".to_string()].into();
        for p in [
            "metadata.name",
            "metadata.labels.env",
            "spec.network.vpcCidr",
            "spec.network.subnets[private-a].cidr",
            "spec.cloud.zones[0]",
            "spec.instanceGroups[general].subnets[0]",
            "spec.api.allowedCidrs[0]",
        ] {
            assert!(expected_to_differ(p, &stage), "{p}");
        }
        for p in ["metadata.labels.tier", "spec.instanceGroups[general].machineType", "spec.kubernetesVersion"] {
            assert!(!expected_to_differ(p, &stage), "{p}");
        }
    }

    #[test]
    fn the_odd_one_out_is_named_with_every_node_as_one_line() {
        let def = json!({"metadata": {"name": "x"}, "spec": {"kubernetesVersion": "1.36.2"}});
        let print = |c: &str, kernel: &str| {
            fingerprint(
                c,
                &def,
                &BTreeSet::new(),
                Some("v1.36.2"),
                &BTreeMap::new(),
                &BTreeMap::new(),
                &[node("n1", "general", kernel), node("n2", "general", kernel)],
            )
        };
        let prints = [print("a", "5.10"), print("b", "5.10"), print("c", "6.1")];
        let d = compare(&prints);
        assert_eq!(d.len(), 1, "{d:?}");
        assert_eq!(d[0].fact, "nodes of general kernelVersion");
        assert_eq!(d[0].values["c"], "6.1 on every node");
        assert_eq!(d[0].odd, ["c"]);
        assert_eq!(odd_ones(&d), BTreeMap::from([("c".to_string(), 1)]));
        assert!(compare(&prints[..2]).is_empty(), "a and b match");
        let pair = compare(&[prints[0].clone(), prints[2].clone()]);
        assert!(pair[0].odd.is_empty(), "of two, neither is the odd one");
    }

    #[test]
    fn changed_paths_name_leaves() {
        let a = json!({"spec": {"replicas": 2, "template": {"x": [1, 2]}}});
        let b = json!({"spec": {"replicas": 3, "template": {"x": [1, 5]}}});
        assert_eq!(changed_paths(&a, &b), ["spec.replicas", "spec.template.x[1]"]);
    }
}
