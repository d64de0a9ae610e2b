//! The diff's effects: reads a cluster's AWS side (through
//! `apply::prepare`, the same observation `plan` makes) and its API (nodes,
//! kubeadm's configuration, addons by dry run, platform workloads'
//! children) and hands them to the pure functions of [`super`]. Reads only.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::{Child, Fingerprint, Layer, LayerState, NodeFacts, Report};
use crate::cloud::aws::Aws;
use crate::spec::Cluster;

/// One cluster to look at: its definition as its target runs it, where its
/// API is, and its AWS connection (none on a local target).
pub struct Target {
    pub cluster: Cluster,
    pub kubeconfig: PathBuf,
    pub aws: Option<Aws>,
    /// Why there is no AWS side, when there is none.
    pub no_aws: String,
    /// The AWS side exists but its account refused the connection (the
    /// role could not be assumed, or landed elsewhere): unreachable, as an
    /// AWS that refuses a call is.
    pub aws_refused: bool,
}

/// The drift of one cluster in the layers asked for. A layer that cannot
/// be read is reported unreachable, never fatal.
pub async fn report(t: &Target, layers: &[Layer], addons_dir: &Path) -> Report {
    let name = t.cluster.metadata.name.clone();
    let mut out = BTreeMap::new();
    let wants = |l: Layer| layers.contains(&l);
    if wants(Layer::Aws) || wants(Layer::Machines) {
        let (aws, machines) = match &t.aws {
            None if t.aws_refused => {
                let s = LayerState::Unreachable { why: t.no_aws.clone() };
                (s.clone(), s)
            }
            None => {
                let s = LayerState::Skipped { why: t.no_aws.clone() };
                (s.clone(), s)
            }
            Some(aws) => match crate::apply::prepare::prepare(aws, &t.cluster).await {
                Err(e) => {
                    let s = LayerState::Unreachable { why: format!("{e:#}") };
                    (s.clone(), s)
                }
                Ok(p) => {
                    let groups: Vec<String> = t.cluster.spec.instance_groups.iter().map(|g| g.name.clone()).collect();
                    let latest: BTreeMap<String, i64> =
                        p.observed.launch_templates.iter().map(|l| (l.group.clone(), l.latest_version)).collect();
                    let images = p.images.iter().map(|(g, i)| (g.clone(), (i.id.clone(), i.name.clone()))).collect();
                    (
                        super::aws(&name, &p.plan),
                        super::machines(&name, &groups, &p.observed.instances, &latest, &images),
                    )
                }
            },
        };
        for (l, s) in [(Layer::Aws, aws), (Layer::Machines, machines)] {
            if wants(l) {
                out.insert(l, s);
            }
        }
    }
    let kube_layers: Vec<Layer> =
        [Layer::Kubernetes, Layer::Addons, Layer::Workloads].into_iter().filter(|l| wants(*l)).collect();
    if !kube_layers.is_empty() {
        match crate::kube::apply::connect(&t.kubeconfig).await {
            Err(e) => {
                for l in kube_layers {
                    out.insert(l, LayerState::Unreachable { why: format!("{e:#}") });
                }
            }
            Ok(client) => {
                for l in kube_layers {
                    let s = match l {
                        Layer::Kubernetes => kubernetes(&client, &t.cluster).await,
                        Layer::Addons => addons(&client, &t.cluster, addons_dir).await,
                        _ => workloads(&client).await,
                    };
                    out.insert(l, s.unwrap_or_else(|e| LayerState::Unreachable { why: format!("{e:#}") }));
                }
            }
        }
    }
    Report { cluster: name, layers: out }
}

async fn kubernetes(client: &kube::Client, cluster: &Cluster) -> Result<LayerState> {
    let configured = crate::kube::kubeadm::running(client).await?.map(|r| r.control_plane.to_string());
    let nodes = node_facts(client).await?;
    Ok(super::kubernetes(&cluster.metadata.name, &cluster.spec.kubernetes_version, configured.as_deref(), &nodes))
}

async fn addons(client: &kube::Client, cluster: &Cluster, addons_dir: &Path) -> Result<LayerState> {
    let set = crate::addons::rendered(addons_dir, cluster)?;
    let diffs = crate::addons::Installer::new(client.clone()).diff(&set, false).await?;
    Ok(super::addons(&cluster.metadata.name, &diffs))
}

/// The kinds a platform workload's children come as, with a spec to edit.
const CHILD_KINDS: &[(&str, &str, &str, &str)] = &[
    ("apps", "v1", "Deployment", "deployments"),
    ("apps", "v1", "StatefulSet", "statefulsets"),
    ("apps", "v1", "DaemonSet", "daemonsets"),
    ("batch", "v1", "Job", "jobs"),
    ("batch", "v1", "CronJob", "cronjobs"),
    ("", "v1", "Service", "services"),
    ("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets"),
];

/// The workloads layer of the cluster behind `client` (also run by e2e's
/// scheduled job, which records drift as metrics).
pub async fn workloads(client: &kube::Client) -> Result<LayerState> {
    let mut children = Vec::new();
    // Only what the platform made: its children carry these labels.
    let lp = ListParams::default().labels("app.kubernetes.io/managed-by=pinfleet,pinfleet.dev/kind");
    for (group, version, kind, plural) in CHILD_KINDS {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let list = api.list(&lp).await.with_context(|| format!("listing {plural}"))?;
        for o in list {
            let Some(owner) = o
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|r| r.kind.starts_with("Pinterest") && r.api_version.starts_with(crate::workloads::GROUP))
            else {
                continue;
            };
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            let name = o.metadata.name.clone().unwrap_or_default();
            children.push(Child {
                name: format!("{kind} {ns}/{name}"),
                owner: format!("{} {ns}/{}", owner.kind, owner.name),
                managed_fields: serde_json::to_value(o.metadata.managed_fields.clone().unwrap_or_default())?,
            });
        }
    }
    Ok(super::workloads(&children, crate::controller::MANAGER))
}

/// Every node's facts: `status.nodeInfo` and allocatable resources.
pub async fn node_facts(client: &kube::Client) -> Result<Vec<NodeFacts>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut out = Vec::new();
    for n in nodes.list(&ListParams::default()).await.context("listing nodes")? {
        let v = serde_json::to_value(&n)?;
        let mut facts = BTreeMap::new();
        if let Some(info) = v.pointer("/status/nodeInfo").and_then(Value::as_object) {
            for k in ["kernelVersion", "osImage", "containerRuntimeVersion", "kubeletVersion", "architecture"] {
                if let Some(s) = info.get(k).and_then(Value::as_str).filter(|s| !s.is_empty()) {
                    facts.insert(k.to_string(), s.to_string());
                }
            }
        }
        for r in ["cpu", "memory", "pods"] {
            if let Some(q) = v.pointer(&format!("/status/allocatable/{r}")).and_then(Value::as_str) {
                facts.insert(format!("allocatable.{r}"), q.to_string());
            }
        }
        let group = n
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::kube::kubeadm::GROUP_LABEL))
            .cloned()
            .unwrap_or_else(|| "-".into());
        out.push(NodeFacts { name: n.metadata.name.unwrap_or_default(), group, facts });
    }
    Ok(out)
}

/// What a cluster runs, for comparing it with others. Errors when its API
/// cannot be reached (a comparison with a cluster one cannot see is none).
pub async fn fingerprint(t: &Target, stage_labels: &BTreeSet<String>) -> Result<Fingerprint> {
    let client = crate::kube::apply::connect(&t.kubeconfig).await?;
    let server = tokio::time::timeout(Duration::from_secs(20), client.apiserver_version())
        .await
        .context("the API server did not answer")??
        .git_version;
    let nodes = node_facts(&client).await?;
    let inventory = crate::addons::Installer::new(client.clone()).inventory().await?;
    let addon_versions = inventory.addons.iter().map(|(n, a)| (n.clone(), a.version.clone())).collect();
    let mut images: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    if let Some(aws) = &t.aws {
        let instances = crate::cloud::aws::observe::list_instances(aws, Some(&t.cluster.metadata.name), false).await?;
        for i in instances.iter().filter(|i| i.is_live()) {
            if let Some(g) = &i.group {
                images.entry(g.clone()).or_default().insert(i.image_id.clone());
            }
        }
    }
    let definition = serde_json::to_value(&t.cluster)?;
    Ok(super::fingerprint(
        &t.cluster.metadata.name,
        &definition,
        stage_labels,
        Some(&server),
        &images,
        &addon_versions,
        &nodes,
    ))
}
