//! The member clusters the gateway places work on: what it last saw of
//! each (Ready nodes' allocatable, its minor, its runtime-support profiles,
//! its RuntimeClasses' overheads), read on every refresh, and the write of
//! a workload into its team's namespace on one (the leader's placement).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde::Serialize;
use serde_json::{json, Value};

use super::{Service, MANAGER};
use crate::gateway::quota::Amount;
use crate::gateway::records;

/// A member cluster the gateway places work on.
#[derive(Clone)]
pub struct MemberCluster {
    pub name: String,
    pub client: kube::Client,
    pub labels: BTreeMap<String, String>,
    pub weight: u32,
}

/// What the gateway last saw of a member.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    pub name: String,
    pub reachable: bool,
    pub allocatable: Amount,
    /// When it was last reached.
    pub seen: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The member's Kubernetes minor (`36`), as its API server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<u32>,
    /// Its runtime-support ConfigMap data: the profiles its controller renders with.
    #[serde(skip)]
    pub profiles: Option<BTreeMap<String, String>>,
    /// Its RuntimeClasses' pod overheads (None: not listed).
    #[serde(skip)]
    pub overheads: Option<BTreeMap<String, crate::workloads::demand::Requests>>,
    /// Each Ready node's name, allocatable and taint (what placement packs
    /// pods onto, and drift reads the flavor of a node from).
    #[serde(skip)]
    pub nodes: Vec<(String, crate::gateway::packing::Node)>,
    /// Each of `nodes`' name and labels, as a node
    /// (`{"metadata": {"name", "labels"}}`): what a pod's node selector and
    /// affinity are matched against ([`crate::kube::scheduling`]).
    #[serde(skip)]
    pub node_meta: Vec<serde_json::Value>,
    /// The cpu, memory and pods of its nodes tainted NoSchedule or NoExecute
    /// (a GPU group's): part of `allocatable`, but no room for work that
    /// asks for no accelerator (its pods do not tolerate the taint).
    #[serde(skip)]
    pub tainted: Amount,
}

impl MemberView {
    /// The member as packing sees it.
    pub fn packing(&self) -> crate::gateway::packing::Member {
        crate::gateway::packing::Member { name: self.name.clone(), nodes: self.nodes.clone() }
    }

    /// The accelerator flavor a node offers (its GPU product, or Neuron
    /// devices), by its name: None for a node without any (or not seen).
    pub fn flavor_of(&self, node: &str) -> Option<crate::workloads::demand::Flavor> {
        let (_, n) = self.nodes.iter().find(|(name, _)| name == node)?;
        crate::gateway::quota::FLAVORS.into_iter().find(|r| n.free.get(*r) > 0).and_then(|r| r.flavor())
    }
}

/// What a member's API server says of itself beyond its nodes: its minor,
/// its runtime-support profiles and its RuntimeClasses' overheads. Each
/// part that cannot be read is left unknown (the gateway then counts with
/// the built-in profile and checks as the default minor).
async fn describe_member(
    client: &kube::Client,
) -> (Option<u32>, Option<BTreeMap<String, String>>, Option<BTreeMap<String, crate::workloads::demand::Requests>>) {
    let minor = client.apiserver_version().await.ok().and_then(|v| v.minor.trim_end_matches('+').parse::<u32>().ok());
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), crate::controller::SYSTEM_NAMESPACE);
    let profiles = match cms.get_opt(crate::controller::PROFILE_CONFIGMAP).await {
        Ok(cm) => Some(cm.and_then(|c| c.data).unwrap_or_default()),
        Err(_) => None,
    };
    let classes: Api<k8s_openapi::api::node::v1::RuntimeClass> = Api::all(client.clone());
    let overheads = match classes.list(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter_map(|rc| {
                    let name = rc.metadata.name?;
                    let fixed = rc.overhead.and_then(|o| o.pod_fixed).unwrap_or_default();
                    let q = |k: &str| fixed.get(k).map(|q| Value::String(q.0.clone()));
                    let cpu = q("cpu").map(|v| crate::kube::quantity::cpu_millis(&v).unwrap_or(0)).unwrap_or(0);
                    let memory = q("memory").map(|v| crate::kube::quantity::bytes(&v).unwrap_or(0)).unwrap_or(0);
                    Some((name, crate::workloads::demand::Requests { cpu, memory, ..Default::default() }))
                })
                .collect(),
        ),
        Err(_) => None,
    };
    (minor, profiles, overheads)
}

/// RuntimeClasses' overheads: known only when every reachable member
/// listed them (a class on one member but not another is refused on that
/// one); each the largest of the members'.
pub(super) fn common_overheads(
    reachable: &[&MemberView],
) -> Option<BTreeMap<String, crate::workloads::demand::Requests>> {
    if !reachable.is_empty() && reachable.iter().all(|v| v.overheads.is_some()) {
        let mut all: Option<BTreeMap<String, crate::workloads::demand::Requests>> = None;
        for v in reachable {
            let o = v.overheads.clone().unwrap_or_default();
            all = Some(match all {
                None => o,
                Some(a) => a.into_iter().filter_map(|(k, r)| o.get(&k).map(|s| (k, r.max(*s)))).collect(),
            });
        }
        all
    } else {
        None
    }
}

/// What a Ready node offers the quota: cpu, memory, pods, and its
/// accelerators by flavor — `nvidia.com/gpu` counted as the product its
/// [`PRODUCT_LABEL`](crate::workloads::demand::PRODUCT_LABEL) names, by
/// one of the values pods are held to (a GPU node without one offers
/// none: no workload could select it by product),
/// `aws.amazon.com/neuron` as Neuron devices.
pub fn node_allocatable(
    al: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    product: Option<crate::workloads::demand::Flavor>,
) -> Amount {
    use crate::gateway::quota::Resource;
    use crate::workloads::demand::{GPU, NEURON};
    let q = |k: &str| al.get(k).map(|q| q.0.clone()).unwrap_or_default();
    let count = |k: &str| crate::kube::quantity::bytes(&serde_json::Value::String(q(k))).unwrap_or(0);
    let mut a = Amount::new(
        crate::federation::fanout::cpu_millis(&q("cpu")).unwrap_or(0),
        crate::federation::fanout::mem_bytes(&q("memory")).unwrap_or(0),
        q("pods").parse().unwrap_or(0),
    );
    if let Some(p) = product {
        a.set(Resource::of_flavor(p), count(GPU));
    }
    a.set(Resource::Neuron, count(NEURON));
    a
}

impl Service {
    /// Reads every member's allocatable (Ready nodes); a member that cannot
    /// be reached keeps its last figures and is marked.
    pub async fn refresh_members(&self) {
        let mut out = Vec::new();
        let before = self.member_views.read().await.clone();
        for m in &self.members {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(m.client.clone());
            let last = before.iter().find(|v| v.name == m.name).cloned();
            match tokio::time::timeout(Duration::from_secs(5), nodes.list(&ListParams::default())).await {
                Ok(Ok(list)) => {
                    let mut a = Amount::default();
                    let mut tainted = Amount::default();
                    let mut nodes = Vec::new();
                    let mut node_meta = Vec::new();
                    for n in list.items {
                        let ready = n
                            .status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
                        let unschedulable = n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
                        if !ready || unschedulable {
                            continue;
                        }
                        let product = n
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(crate::workloads::demand::PRODUCT_LABEL))
                            .and_then(|v| crate::workloads::demand::Flavor::labelled(v));
                        let al = n.status.and_then(|s| s.allocatable).unwrap_or_default();
                        let offers = node_allocatable(&al, product);
                        a = a.plus(offers);
                        let keeps_off = n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|ts| {
                            ts.iter().any(|t| matches!(t.effect.as_str(), "NoSchedule" | "NoExecute"))
                        });
                        if keeps_off {
                            tainted = tainted.plus(Amount::new(offers.cpu, offers.memory, offers.pods));
                        }
                        node_meta.push(serde_json::json!({"metadata": {
                            "name": n.metadata.name.clone().unwrap_or_default(),
                            "labels": n.metadata.labels.clone().unwrap_or_default(),
                        }}));
                        nodes.push((
                            n.metadata.name.clone().unwrap_or_default(),
                            crate::gateway::packing::Node { free: offers, tainted: keeps_off },
                        ));
                    }
                    let (minor, profiles, overheads) =
                        match tokio::time::timeout(Duration::from_secs(5), describe_member(&m.client)).await {
                            Ok(d) => d,
                            Err(_) => (None, None, None),
                        };
                    out.push(MemberView {
                        name: m.name.clone(),
                        reachable: true,
                        allocatable: a,
                        seen: Some(Utc::now()),
                        error: None,
                        minor: minor.or(last.as_ref().and_then(|l| l.minor)),
                        profiles: profiles.or(last.as_ref().and_then(|l| l.profiles.clone())),
                        overheads: overheads.or(last.as_ref().and_then(|l| l.overheads.clone())),
                        nodes,
                        node_meta,
                        tainted,
                    });
                }
                Ok(Err(e)) => out.push(MemberView {
                    name: m.name.clone(),
                    reachable: false,
                    allocatable: last.as_ref().map(|l| l.allocatable).unwrap_or_default(),
                    seen: last.as_ref().and_then(|l| l.seen),
                    error: Some(e.to_string()),
                    minor: last.as_ref().and_then(|l| l.minor),
                    profiles: last.as_ref().and_then(|l| l.profiles.clone()),
                    nodes: last.as_ref().map(|l| l.nodes.clone()).unwrap_or_default(),
                    node_meta: last.as_ref().map(|l| l.node_meta.clone()).unwrap_or_default(),
                    tainted: last.as_ref().map(|l| l.tainted).unwrap_or_default(),
                    overheads: last.and_then(|l| l.overheads),
                }),
                Err(_) => out.push(MemberView {
                    name: m.name.clone(),
                    reachable: false,
                    allocatable: last.as_ref().map(|l| l.allocatable).unwrap_or_default(),
                    seen: last.as_ref().and_then(|l| l.seen),
                    error: Some("no answer within 5 s".into()),
                    minor: last.as_ref().and_then(|l| l.minor),
                    profiles: last.as_ref().and_then(|l| l.profiles.clone()),
                    nodes: last.as_ref().map(|l| l.nodes.clone()).unwrap_or_default(),
                    node_meta: last.as_ref().map(|l| l.node_meta.clone()).unwrap_or_default(),
                    tainted: last.as_ref().map(|l| l.tainted).unwrap_or_default(),
                    overheads: last.and_then(|l| l.overheads),
                }),
            }
        }
        *self.member_views.write().await = out;
    }

    pub async fn member_views(&self) -> Vec<MemberView> {
        self.member_views.read().await.clone()
    }

    /// The fleet's capacity: every member's allocatable, reachable or last seen.
    pub async fn fleet(&self) -> Amount {
        self.member_views.read().await.iter().fold(Amount::default(), |a, m| a.plus(m.allocatable))
    }
}

pub(super) fn workload_api(client: &kube::Client, kind: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = kube::api::GroupVersionKind::gvk(crate::workloads::GROUP, crate::workloads::VERSION, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::namespaced_with(client.clone(), ns, &ar)
}

/// Writes a workload into its team's namespace on a member. The namespace
/// carries the team's Pod Security level (`enforce`, `warn` and `audit`):
/// the member's own Pod Security admission is the second line behind the
/// gateway's check, and refuses what the gateway would.
pub(super) async fn write_to_member(
    m: &MemberCluster,
    team: &str,
    level: crate::kube::podsecurity::Level,
    submission: &str,
    workload: &Value,
) -> Result<()> {
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(m.client.clone());
    let pp = PatchParams::apply(MANAGER).force();
    let mut labels = serde_json::Map::new();
    for mode in ["enforce", "warn", "audit"] {
        labels.insert(format!("pod-security.kubernetes.io/{mode}"), json!(level.as_str()));
        labels.insert(format!("pod-security.kubernetes.io/{mode}-version"), json!("latest"));
    }
    nss.patch(
        team,
        &pp,
        &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team, "labels": labels}})),
    )
    .await?;
    let kind = workload.get("kind").and_then(Value::as_str).unwrap_or_default();
    let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let mut w = workload.clone();
    w["metadata"]["namespace"] = json!(team);
    w["metadata"]["labels"][records::SUBMISSION_LABEL] = json!(submission);
    w["metadata"]["labels"][records::TEAM_LABEL] = json!(team);
    if let Some(m) = w.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("uid");
        m.remove("creationTimestamp");
    }
    workload_api(&m.client, kind, team).patch(name, &pp, &Patch::Apply(&w)).await?;
    Ok(())
}
