//! The effectful half of federation: what each member reports (health,
//! free capacity in replicas of this app, replicas it runs), and the
//! fan-out of a placement as server-side applied PinterestServices.
//! Members that lose replicas are scaled down only after the members that
//! gain are Ready.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::placement::{Member, Policy, Share};
use crate::spec::Cluster;
use crate::workloads::PinterestService;

pub const FIELD_MANAGER: &str = "pinfleet-federation";
pub const FEDERATION_LABEL: &str = "pinfleet.dev/federation";

/// `clusters/federations/APP.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FederatedService {
    pub api_version: String,
    pub kind: String,
    pub metadata: FedMeta,
    pub spec: FedSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FedMeta {
    pub name: String,
    #[serde(default = "default_ns")]
    pub namespace: String,
}

fn default_ns() -> String {
    "default".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FedSpec {
    /// The federation whose members run it (their `spec.federation.name`).
    pub federation: String,
    pub total_replicas: u32,
    /// A PinterestService spec (its `replicas` is set per member).
    pub template: Value,
    #[serde(default)]
    pub placement: Policy,
}

/// Loads and checks a FederatedService file (errors carry file and line).
pub fn load(path: &Path) -> Result<FederatedService> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let node = crate::spec::yaml::parse_single(&text, path)?;
    let fs: FederatedService = serde_path_to_error::deserialize(node.to_json()).map_err(|e| {
        let p = e.path().to_string();
        anyhow::anyhow!("{}: {p}: {}", node.locate(&p), e.into_inner())
    })?;
    if fs.kind != "FederatedService" {
        bail!("{}: kind is {}, expected FederatedService", path.display(), fs.kind);
    }
    // The template must be a valid PinterestService spec.
    let mut spec = fs.spec.template.clone();
    spec["replicas"] = json!(1);
    let cr = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": fs.metadata.name}, "spec": spec});
    serde_path_to_error::deserialize::<_, PinterestService>(cr).map_err(|e| {
        let p = e.path().to_string().replacen("spec.", "spec.template.", 1);
        anyhow::anyhow!("{}: {p}: {}", node.locate(&p), e.into_inner())
    })?;
    Ok(fs)
}

/// CPU in millicores and memory in bytes from Kubernetes quantities, by
/// the project's one quantity parser ([`crate::kube::quantity`]: every
/// suffix and exponent, rounded up as Kubernetes rounds); None for what
/// Kubernetes would not read.
pub fn cpu_millis(q: &str) -> Option<u64> {
    crate::kube::quantity::cpu_millis(&Value::String(q.to_string())).ok()
}

pub fn mem_bytes(q: &str) -> Option<u64> {
    crate::kube::quantity::bytes(&Value::String(q.to_string())).ok()
}

/// (cpu millis, memory bytes) one replica asks for: the template's
/// requests, or the runtime-support defaults where it gives none.
pub fn replica_requests(template: &Value) -> (u64, u64) {
    let mut cpu = 0;
    let mut mem = 0;
    for c in template["template"]["spec"]["containers"].as_array().into_iter().flatten() {
        let r = &c["resources"]["requests"];
        cpu += r["cpu"].as_str().and_then(cpu_millis).unwrap_or(100);
        mem += r["memory"].as_str().and_then(mem_bytes).unwrap_or(128 << 20);
    }
    (cpu.max(1), mem.max(1))
}

/// What one member reports.
#[derive(Debug, Clone, Serialize)]
pub struct Observed {
    pub reachable: bool,
    pub ready_nodes: usize,
    /// Replicas of this app that fit on Ready, schedulable nodes.
    pub free_replicas: u32,
    pub desired: u32,
    pub ready: u32,
    pub error: Option<String>,
}

impl Observed {
    /// A member that could not be asked, and why.
    pub fn unreachable(why: String) -> Observed {
        Observed { reachable: false, ready_nodes: 0, free_replicas: 0, desired: 0, ready: 0, error: Some(why) }
    }
}

pub async fn observe(client: &Client, fs: &FederatedService) -> Observed {
    match tokio::time::timeout(Duration::from_secs(10), observe_inner(client, fs)).await {
        Ok(Ok(o)) => o,
        Ok(Err(e)) => Observed::unreachable(format!("{e:#}")),
        Err(_) => Observed::unreachable("no answer within 10s".into()),
    }
}

async fn observe_inner(client: &Client, fs: &FederatedService) -> Result<Observed> {
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default();
    let (nodes, pods) = futures::try_join!(nodes.list(&lp), pods.list(&lp))?;
    let mut used: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for p in &pods.items {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        let e = used.entry(node).or_default();
        for c in p.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default() {
            let r = c.resources.as_ref().and_then(|r| r.requests.as_ref());
            e.0 += r.and_then(|r| r.get("cpu")).and_then(|q| cpu_millis(&q.0)).unwrap_or(0);
            e.1 += r.and_then(|r| r.get("memory")).and_then(|q| mem_bytes(&q.0)).unwrap_or(0);
        }
    }
    let (cpu, mem) = replica_requests(&fs.spec.template);
    let mut ready_nodes = 0;
    let mut free = 0u64;
    for n in &nodes.items {
        let schedulable = !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false);
        if !crate::kube::drain::node_ready(n) || !schedulable {
            continue;
        }
        ready_nodes += 1;
        let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let acpu = alloc.and_then(|a| a.get("cpu")).and_then(|q| cpu_millis(&q.0)).unwrap_or(0);
        let amem = alloc.and_then(|a| a.get("memory")).and_then(|q| mem_bytes(&q.0)).unwrap_or(0);
        let (ucpu, umem) = used.get(n.metadata.name.as_deref().unwrap_or_default()).copied().unwrap_or_default();
        free += (acpu.saturating_sub(ucpu) / cpu).min(amem.saturating_sub(umem) / mem);
    }
    let svcs: Api<PinterestService> = Api::namespaced(client.clone(), &fs.metadata.namespace);
    let (desired, ready) = match svcs.get_opt(&fs.metadata.name).await {
        Ok(Some(s)) => (
            s.spec.replicas.max(0) as u32,
            s.status.as_ref().and_then(|st| st.ready_replicas).unwrap_or(0).max(0) as u32,
        ),
        Ok(None) => (0, 0),
        // The CRD is not installed: the member runs none of it.
        Err(kube::Error::Api(e)) if e.code == 404 => (0, 0),
        Err(e) => return Err(e.into()),
    };
    Ok(Observed {
        reachable: true,
        ready_nodes,
        free_replicas: free.min(u32::MAX as u64) as u32,
        desired,
        ready,
        error: None,
    })
}

/// The placement input for a member.
pub fn member(cluster: &Cluster, o: &Observed, healthy: bool) -> Member {
    let f = cluster.spec.federation.as_ref();
    Member {
        name: cluster.metadata.name.clone(),
        weight: f.map_or(1, |f| f.weight),
        labels: f.map(|f| f.labels.clone()).unwrap_or_default(),
        taints: f.map(|f| f.taints.clone()).unwrap_or_default(),
        max_share: f.and_then(|f| f.max_share.clone()),
        capacity: Some(o.free_replicas),
        healthy,
        current: o.desired,
    }
}

fn service(fs: &FederatedService, replicas: u32) -> Value {
    let mut spec = fs.spec.template.clone();
    spec["replicas"] = json!(replicas);
    json!({
        "apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService",
        "metadata": {"name": fs.metadata.name, "namespace": fs.metadata.namespace,
                     "labels": {FEDERATION_LABEL: fs.metadata.name}},
        "spec": spec,
    })
}

async fn set(client: &Client, fs: &FederatedService, replicas: u32) -> Result<()> {
    let mut a = crate::kube::apply::Applier::new(client.clone(), FIELD_MANAGER);
    let ns = &fs.metadata.namespace;
    if a.get("v1", "Namespace", "", ns).await?.is_none() {
        a.apply("v1", "Namespace", "", ns, &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}))
            .await?;
    }
    a.apply("pinfleet.dev/v1alpha1", "PinterestService", ns, &fs.metadata.name, &service(fs, replicas)).await?;
    Ok(())
}

async fn wait_ready(client: &Client, fs: &FederatedService, replicas: u32, timeout: Duration) -> Result<()> {
    let api: Api<PinterestService> = Api::namespaced(client.clone(), &fs.metadata.namespace);
    let deadline = Instant::now() + timeout;
    loop {
        let s = api.get_opt(&fs.metadata.name).await?;
        let ready = s.as_ref().and_then(|s| s.status.as_ref()).and_then(|st| st.ready_replicas).unwrap_or(0);
        if ready >= replicas as i32 {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("{ready}/{replicas} ready after {}", humantime::format_duration(timeout));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One step of the fan-out, for progress output.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub cluster: String,
    pub from: u32,
    pub to: u32,
    pub action: String,
}

/// Applies the placement: members that gain (or keep) first, waiting until
/// they are Ready; then members that lose are scaled down, and members
/// with no share have the service removed. Unreachable members are skipped.
pub async fn apply(
    fs: &FederatedService,
    shares: &[Share],
    clients: &BTreeMap<String, Client>,
    observed: &BTreeMap<String, Observed>,
    timeout: Duration,
) -> Result<Vec<Applied>> {
    let mut done = Vec::new();
    let from = |c: &str| observed.get(c).map_or(0, |o| o.desired);
    let reachable = |c: &str| observed.get(c).is_some_and(|o| o.reachable);
    let gains: Vec<&Share> =
        shares.iter().filter(|s| s.replicas > 0 && s.replicas >= from(&s.cluster) && reachable(&s.cluster)).collect();
    for s in &gains {
        set(&clients[&s.cluster], fs, s.replicas).await.with_context(|| format!("member {}", s.cluster))?;
    }
    for s in &gains {
        wait_ready(&clients[&s.cluster], fs, s.replicas, timeout).await.with_context(|| {
            format!("member {} did not become Ready; members losing replicas were left as they are", s.cluster)
        })?;
        let action = if from(&s.cluster) == s.replicas { "unchanged" } else { "scaled up" };
        done.push(Applied {
            cluster: s.cluster.clone(),
            from: from(&s.cluster),
            to: s.replicas,
            action: action.into(),
        });
    }
    for s in shares.iter().filter(|s| s.replicas < from(&s.cluster) || !reachable(&s.cluster)) {
        if !reachable(&s.cluster) {
            done.push(Applied {
                cluster: s.cluster.clone(),
                from: from(&s.cluster),
                to: s.replicas,
                action: "unreachable: left alone".into(),
            });
            continue;
        }
        let client = &clients[&s.cluster];
        if s.replicas == 0 {
            let api: Api<PinterestService> = Api::namespaced(client.clone(), &fs.metadata.namespace);
            api.delete(&fs.metadata.name, &DeleteParams::background())
                .await
                .with_context(|| format!("member {}", s.cluster))?;
        } else {
            set(client, fs, s.replicas).await.with_context(|| format!("member {}", s.cluster))?;
        }
        done.push(Applied {
            cluster: s.cluster.clone(),
            from: from(&s.cluster),
            to: s.replicas,
            action: "scaled down".into(),
        });
    }
    Ok(done)
}

/// A federated app and its members as observed now: the app's file, the
/// member clusters (those whose `spec.federation.name` is its federation),
/// a client for each reachable one, and what each runs.
pub struct World {
    pub fs: FederatedService,
    pub members: Vec<Cluster>,
    pub clients: std::collections::BTreeMap<String, Client>,
    pub observed: std::collections::BTreeMap<String, Observed>,
}

impl World {
    /// Loads the app at `path` and the clusters under `clusters_dir`, and
    /// observes every member through the kubeconfig `kubeconfig` names for it
    /// (all at once; an unreachable member is observed as such).
    pub async fn observe(
        path: &Path,
        clusters_dir: &Path,
        kubeconfig: &(dyn Fn(&str) -> std::path::PathBuf + Sync),
    ) -> Result<World> {
        let fs = load(path)?;
        let (loaded, diags) =
            crate::spec::load_paths(std::slice::from_ref(&clusters_dir.to_path_buf()), &Default::default());
        if !diags.0.is_empty() {
            anyhow::bail!("{diags}");
        }
        let members: Vec<Cluster> = loaded
            .into_iter()
            .map(|l| l.cluster)
            .filter(|c| c.spec.federation.as_ref().is_some_and(|f| f.name == fs.spec.federation))
            .collect();
        if members.is_empty() {
            anyhow::bail!("no cluster in {} is a member of federation {}", clusters_dir.display(), fs.spec.federation);
        }
        let results = futures::future::join_all(members.iter().map(|c| {
            let kc = kubeconfig(&c.metadata.name);
            let fs = &fs;
            async move {
                match crate::kube::client_from_kubeconfig(&kc, crate::kube::Retry::Never).await {
                    Ok(client) => {
                        let o = observe(&client, fs).await;
                        (Some(client), o)
                    }
                    Err(e) => (None, Observed::unreachable(format!("{e:#}"))),
                }
            }
        }))
        .await;
        let mut clients = std::collections::BTreeMap::new();
        let mut observed = std::collections::BTreeMap::new();
        for (c, (client, o)) in members.iter().zip(results) {
            if let Some(client) = client {
                clients.insert(c.metadata.name.clone(), client);
            }
            observed.insert(c.metadata.name.clone(), o);
        }
        Ok(World { fs, members, clients, observed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_are_read_as_kubernetes_reads_them() {
        assert_eq!(cpu_millis("500m"), Some(500));
        assert_eq!(cpu_millis("2"), Some(2000));
        assert_eq!(cpu_millis("0.1k"), Some(100_000));
        assert_eq!(cpu_millis("1e3"), Some(1_000_000));
        assert_eq!(cpu_millis("0.0001"), Some(1), "rounded up, as Kubernetes rounds");
        assert_eq!(mem_bytes("1Gi"), Some(1 << 30));
        assert_eq!(mem_bytes("4e9"), Some(4_000_000_000));
        assert_eq!(mem_bytes("128974848"), Some(128_974_848));
        // An exa-CPU is past what millicores can count; an exabyte is not.
        assert_eq!(cpu_millis("1E"), None);
        assert_eq!(mem_bytes("1E"), Some(1_000_000_000_000_000_000));
        for bad in ["lots", "", "-1", "1.5.5", "Gi"] {
            assert_eq!(cpu_millis(bad), None, "{bad:?}");
            assert_eq!(mem_bytes(bad), None, "{bad:?}");
        }
    }
}
