//! The control plane's stacked etcd, read and changed through the API
//! server: an `etcdctl` pod on a surviving control-plane node (host
//! network, the node's etcd certificates, the image of that node's etcd
//! static pod), its output read from the pod's log. A roll calls
//! [`remove_member`] after draining a control-plane machine and before
//! terminating it, so members never outlive their machines; [`plan_removal`]
//! (pure) refuses a removal that would leave etcd without a quorum.
//!
//! ```text
//! leaving node ─▶ pick a Ready control-plane peer ─▶ etcdctl pod:
//!   member list + endpoint health ─▶ plan_removal ─▶ etcdctl pod: member remove
//! ```

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use kube::Client;
use serde::Deserialize;
use serde_json::json;

/// The etcd clusters kops's etcd-manager runs: the API's objects, and its events.
pub const ETCD_MANAGER_CLUSTERS: [&str; 2] = ["main", "events"];
/// Their client ports ([`ETCD_MANAGER_CLUSTERS`] order), as kops configures them.
pub const ETCD_MANAGER_CLIENT_PORTS: [u16; 2] = [4001, 4002];
/// Where kube-apiserver's etcd client files sit on a kops control-plane machine.
pub const KOPS_APISERVER_DIR: &str = "/srv/kubernetes/kube-apiserver";

/// Where kubeadm keeps etcd's certificates on a control-plane machine.
const PKI: &str = "/etc/kubernetes/pki/etcd";
const NAMESPACE: &str = "kube-system";

/// One member, with its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub name: String,
    pub client_urls: Vec<String>,
    pub healthy: bool,
}

#[derive(Deserialize)]
struct MemberList {
    #[serde(default)]
    members: Vec<RawMember>,
}

#[derive(Deserialize)]
struct RawMember {
    #[serde(rename = "ID")]
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(rename = "clientURLs", default)]
    client_urls: Vec<String>,
}

#[derive(Deserialize)]
struct Health {
    endpoint: String,
    health: bool,
}

/// The first JSON value in an etcdctl log (it may be followed by an `Error:` line).
fn first_json<T: serde::de::DeserializeOwned>(log: &str) -> Result<T> {
    let mut it = serde_json::Deserializer::from_str(log.trim_start()).into_iter::<T>();
    it.next().ok_or_else(|| anyhow!("no output"))?.map_err(|e| anyhow!("{e}: {}", log.trim()))
}

/// Members from `etcdctl member list -w json` and `endpoint health --cluster -w json`.
pub fn parse_members(list: &str, health: &str) -> Result<Vec<Member>> {
    let list: MemberList = first_json(list).context("reading etcd's member list")?;
    let health: Vec<Health> = first_json(health).context("reading etcd's endpoint health")?;
    Ok(list
        .members
        .into_iter()
        .map(|m| {
            let healthy = health.iter().any(|h| h.health && m.client_urls.contains(&h.endpoint));
            Member { id: m.id, name: m.name, client_urls: m.client_urls, healthy }
        })
        .collect())
}

/// What removing `node`'s member means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The node runs no member (already removed, or never joined).
    NotAMember,
    Remove {
        id: u64,
    },
}

/// Whether `node`'s member can go: the members left must keep a healthy
/// majority, or etcd (and with it the API server) stops. `Err` is the refusal.
pub fn plan_removal(members: &[Member], node: &str) -> Result<Removal, String> {
    let Some(leaving) = members.iter().find(|m| m.name == node) else { return Ok(Removal::NotAMember) };
    let left: Vec<&Member> = members.iter().filter(|m| m.id != leaving.id).collect();
    let healthy = left.iter().filter(|m| m.healthy).count();
    let need = left.len() / 2 + 1;
    if healthy < need {
        let unhealthy: Vec<&str> = left.iter().filter(|m| !m.healthy).map(|m| m.name.as_str()).collect();
        return Err(format!(
            "removing etcd member {node} would leave {} members of which {healthy} healthy; etcd needs {need} for a quorum (unhealthy: {}). Replace or remove the unhealthy members first",
            left.len(),
            if unhealthy.is_empty() { "none".to_string() } else { unhealthy.join(", ") }
        ));
    }
    Ok(Removal::Remove { id: leaving.id })
}

fn etcdctl(args: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "etcdctl".into(),
        "--endpoints=https://127.0.0.1:2379".into(),
        format!("--cacert={PKI}/ca.crt"),
        format!("--cert={PKI}/healthcheck-client.crt"),
        format!("--key={PKI}/healthcheck-client.key"),
        "--command-timeout=10s".into(),
        "--write-out=json".into(),
    ];
    v.extend(args.iter().map(|a| a.to_string()));
    v
}

/// The pod that runs `commands` (container name → etcdctl arguments) on `node`.
pub fn etcdctl_pod(name: &str, node: &str, image: &str, commands: &[(&str, Vec<String>)]) -> Pod {
    let containers: Vec<_> = commands
        .iter()
        .map(|(c, args)| {
            json!({"name": c, "image": image, "imagePullPolicy": "IfNotPresent", "command": etcdctl(&args.iter().map(String::as_str).collect::<Vec<_>>()),
                "volumeMounts": [{"name": "etcd-certs", "mountPath": PKI, "readOnly": true}]})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "pinfleet", "pinfleet.dev/etcdctl": "true"}},
        "spec": {
            "nodeName": node, "hostNetwork": true, "restartPolicy": "Never",
            "activeDeadlineSeconds": 120, "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}],
            "containers": containers,
            "volumes": [{"name": "etcd-certs", "hostPath": {"path": PKI, "type": "Directory"}}],
        },
    }))
    .expect("a Pod")
}

/// A Ready control-plane node other than `leaving`, and its etcd image.
async fn peer(client: &Client, leaving: &str) -> Result<(String, String)> {
    let nodes: Api<Node> = Api::all(client.clone());
    let lp = ListParams::default().labels("node-role.kubernetes.io/control-plane");
    let mut names: Vec<String> = nodes
        .list(&lp)
        .await
        .context("listing control-plane nodes")?
        .items
        .into_iter()
        .filter(|n| super::drain::node_ready(n) && !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false))
        .filter_map(|n| n.metadata.name)
        .filter(|n| n != leaving)
        .collect();
    names.sort();
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    for name in names {
        if let Some(p) = pods.get_opt(&format!("etcd-{name}")).await? {
            let image = p.spec.and_then(|s| s.containers.into_iter().next()).and_then(|c| c.image);
            if let Some(image) = image {
                return Ok((name, image));
            }
        }
    }
    bail!("no Ready control-plane node besides {leaving} runs an etcd static pod (etcd-NODE in kube-system) to reach etcd through")
}

/// Runs etcdctl commands in one pod on `node`: each container's exit code and log.
async fn run(client: &Client, node: &str, image: &str, commands: &[(&str, Vec<String>)]) -> Result<Vec<(i32, String)>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let name = format!("pinfleet-etcdctl-{:08x}", rand::random::<u32>());
    pods.create(&PostParams::default(), &etcdctl_pod(&name, node, image, commands))
        .await
        .with_context(|| format!("creating pod {NAMESPACE}/{name} to reach etcd on {node}"))?;
    let result = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(150);
        let pod = loop {
            let p = pods.get(&name).await?;
            let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
            if phase == "Succeeded" || phase == "Failed" {
                break p;
            }
            if tokio::time::Instant::now() > deadline {
                bail!("pod {NAMESPACE}/{name} on {node} did not finish in 150s (phase {phase:?})");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let statuses = pod.status.and_then(|s| s.container_statuses).unwrap_or_default();
        let mut out = Vec::new();
        for (c, _) in commands {
            let code = statuses
                .iter()
                .find(|s| s.name == *c)
                .and_then(|s| s.state.as_ref()?.terminated.as_ref().map(|t| t.exit_code))
                .unwrap_or(-1);
            let log = pods
                .logs(&name, &LogParams { container: Some(c.to_string()), ..Default::default() })
                .await
                .with_context(|| format!("reading the log of {NAMESPACE}/{name} (etcdctl on {node}); the kubelet must be able to serve logs (an approved serving certificate)"))?;
            out.push((code, log));
        }
        Ok(out)
    }
    .await;
    let _ = pods.delete(&name, &DeleteParams::default()).await;
    result
}

/// etcd's members and their health, read through `node`.
pub async fn members_via(client: &Client, node: &str, image: &str) -> Result<Vec<Member>> {
    let out = run(
        client,
        node,
        image,
        &[
            ("members", vec!["member".into(), "list".into()]),
            ("health", vec!["endpoint".into(), "health".into(), "--cluster".into()]),
        ],
    )
    .await?;
    if out[0].0 != 0 {
        bail!("etcdctl member list on {node}: {}", out[0].1.trim());
    }
    parse_members(&out[0].1, &out[1].1)
}

/// etcd's members, read through any Ready control-plane node.
pub async fn members(client: &Client) -> Result<Vec<Member>> {
    let (node, image) = peer(client, "").await?;
    members_via(client, &node, &image).await
}

/// Removes `leaving`'s etcd member through another control-plane node,
/// unless that would cost etcd its quorum. Nothing to do when the node has
/// no member. Re-running after a removal finds no member and does nothing.
pub async fn remove_member(client: &Client, leaving: &str) -> Result<()> {
    let (node, image) = peer(client, leaving).await?;
    let members = members_via(client, &node, &image).await?;
    match plan_removal(&members, leaving).map_err(|e| anyhow!(e))? {
        Removal::NotAMember => Ok(()),
        Removal::Remove { id } => {
            let out =
                run(client, &node, &image, &[("remove", vec!["member".into(), "remove".into(), format!("{id:x}")])])
                    .await?;
            if out[0].0 != 0 {
                bail!("etcdctl member remove {id:x} ({leaving}) on {node}: {}", out[0].1.trim());
            }
            tracing::info!("removed etcd member {id:x} ({leaving})");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: u64, name: &str, healthy: bool) -> Member {
        Member { id, name: name.into(), client_urls: vec![], healthy }
    }

    #[test]
    fn removal_keeps_a_quorum_or_refuses() {
        let three = [m(1, "a", true), m(2, "b", true), m(3, "c", true)];
        assert_eq!(plan_removal(&three, "a"), Ok(Removal::Remove { id: 1 }));
        assert_eq!(plan_removal(&three, "z"), Ok(Removal::NotAMember));
        let one_down = [m(1, "a", true), m(2, "b", true), m(3, "c", false)];
        let refusal = plan_removal(&one_down, "a").unwrap_err();
        assert!(refusal.contains("would leave 2 members of which 1 healthy; etcd needs 2"), "{refusal}");
        assert!(refusal.contains("unhealthy: c"), "{refusal}");
        // Removing the dead member itself is what heals it.
        assert_eq!(plan_removal(&one_down, "c"), Ok(Removal::Remove { id: 3 }));
        // A lone member can go only when another is up (a surged replacement).
        assert_eq!(plan_removal(&[m(1, "a", true), m(2, "b", true)], "a"), Ok(Removal::Remove { id: 1 }));
    }

    #[test]
    fn parses_etcdctl_json() {
        let list = r#"{"header":{"cluster_id":14841639068965178418,"member_id":10276657743932975437,"raft_term":2},"members":[{"ID":10276657743932975437,"name":"ip-10-0-1-5","peerURLs":["https://10.0.1.5:2380"],"clientURLs":["https://10.0.1.5:2379"]},{"ID":2,"name":"ip-10-0-1-6","peerURLs":["https://10.0.1.6:2380"],"clientURLs":["https://10.0.1.6:2379"]}]}"#;
        let health = "[{\"endpoint\":\"https://10.0.1.5:2379\",\"health\":true,\"took\":\"2ms\"},{\"endpoint\":\"https://10.0.1.6:2379\",\"health\":false,\"took\":\"5s\",\"error\":\"context deadline exceeded\"}]\nError: unhealthy cluster\n";
        let ms = parse_members(list, health).unwrap();
        assert_eq!(ms.len(), 2);
        assert_eq!(ms[0].id, 10276657743932975437, "uint64 ids kept exactly");
        assert!(ms[0].healthy && !ms[1].healthy);
        assert!(parse_members("Error: context deadline exceeded", "[]").is_err());
    }
}

/// kops's etcd-manager (a control plane taken over from kops), seen
/// through its static pods' mirror pods `etcd-manager-<cluster>-<node>`:
/// every member of each etcd cluster healthy (`leaving` None), or a
/// quorum of `members` without `leaving`. Err says what is short.
pub async fn etcd_manager_health(client: &Client, members: usize, leaving: Option<&str>) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let list = pods.list(&ListParams::default()).await.map_err(|e| format!("listing kube-system's pods: {e}"))?;
    // A member counts on a Ready node only (a mirror pod outlives its machine a while).
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await;
    let nodes = nodes.map_err(|e| format!("listing Nodes: {e}"))?;
    let nodes_ready: std::collections::BTreeSet<String> =
        nodes.items.iter().filter(|n| super::drain::node_ready(n)).filter_map(|n| n.metadata.name.clone()).collect();
    let seen: Vec<(String, String, bool)> = list
        .items
        .iter()
        .filter_map(|p| {
            let name = p.metadata.name.clone()?;
            let node = p.spec.as_ref()?.node_name.clone()?;
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            Some((name, node.clone(), ready && nodes_ready.contains(&node)))
        })
        .collect();
    etcd_manager_shortfall(&seen, members, leaving)
}

/// The pure judgement of [`etcd_manager_health`]: `pods` are (name, node,
/// Ready) of kube-system's pods.
pub fn etcd_manager_shortfall(
    pods: &[(String, String, bool)],
    members: usize,
    leaving: Option<&str>,
) -> Result<(), String> {
    let mut short = Vec::new();
    for c in ETCD_MANAGER_CLUSTERS {
        let prefix = format!("etcd-manager-{c}-");
        let healthy: std::collections::BTreeSet<&str> = pods
            .iter()
            .filter(|(name, node, ready)| *ready && name.starts_with(&prefix) && Some(node.as_str()) != leaving)
            .map(|(_, node, _)| node.as_str())
            .collect();
        let need = match leaving {
            Some(_) => members / 2 + 1,
            None => members,
        };
        if healthy.len() < need {
            let why = match leaving {
                Some(node) => format!(
                    "etcd {c}: {} of {members} members healthy without {node}'s, and a quorum is {need}",
                    healthy.len()
                ),
                None => format!("etcd {c}: {} of {members} members healthy", healthy.len()),
            };
            short.push(why);
        }
    }
    if short.is_empty() {
        Ok(())
    } else {
        Err(short.join("; "))
    }
}

#[cfg(test)]
mod etcd_manager_tests {
    use super::etcd_manager_shortfall;

    fn pods(ready: &[(&str, bool)]) -> Vec<(String, String, bool)> {
        ready
            .iter()
            .flat_map(|(node, r)| {
                ["main", "events"].map(|c| (format!("etcd-manager-{c}-{node}"), node.to_string(), *r))
            })
            .collect()
    }

    #[test]
    fn a_machine_goes_only_while_the_others_hold_a_quorum_and_its_replacement_counts_once_healthy() {
        let all = pods(&[("a", true), ("b", true), ("c", true)]);
        assert_eq!(etcd_manager_shortfall(&all, 3, None), Ok(()));
        assert_eq!(etcd_manager_shortfall(&all, 3, Some("a")), Ok(()));
        let one_down = pods(&[("a", true), ("b", false), ("c", true)]);
        assert_eq!(
            etcd_manager_shortfall(&one_down, 3, Some("a")),
            Err("etcd main: 1 of 3 members healthy without a's, and a quorum is 2; etcd events: 1 of 3 members healthy without a's, and a quorum is 2".into())
        );
        // A replacement whose member has not started yet.
        let replacing = pods(&[("b", true), ("c", true)]);
        assert_eq!(
            etcd_manager_shortfall(&replacing, 3, None),
            Err("etcd main: 2 of 3 members healthy; etcd events: 2 of 3 members healthy".into())
        );
    }
}
