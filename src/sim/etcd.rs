//! Stacked etcd as kubeadm runs it on the sim's control-plane machines:
//! the first control-plane kubelet to start initialises a one-member
//! cluster, each later one joins as a member (a join needs a quorum, as
//! `etcdctl member add` does); a member is healthy while its machine's Node
//! is there and booted, and nothing removes a member but `member remove`.
//!
//! It is read and changed the way the real path does ([`crate::kube::etcd`]):
//! an `etcdctl` pod on a control-plane node, its output in the pod's log.
//! The kubelet pass ([`super::controllers`]) runs such pods' commands here.
//! Without a quorum the API server itself fails every request with etcd's
//! `etcdserver: request timed out` (see [`super::server`]), and `/readyz`
//! reports `[-]etcd failed`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

/// One etcd member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// kubeadm names a member after its node.
    pub name: String,
    pub ip: String,
}

/// The etcd cluster of the sim's control plane (empty: no kubeadm control plane).
#[derive(Debug, Clone, Default)]
pub struct Etcd {
    pub members: Vec<Member>,
    cluster_id: u64,
    /// Members' names whose machine is up, as of the last kubelet pass.
    alive: BTreeSet<String>,
    /// The output of `etcdctl` containers: (namespace, pod, container) → (exit code, log).
    outputs: BTreeMap<(String, String, String), (i32, String)>,
    /// Joins refused for want of a quorum (logged once each).
    refused: BTreeSet<String>,
    /// Machines whose member was removed: their etcd has stopped for good
    /// ("the member has been permanently removed from the cluster").
    removed: BTreeSet<String>,
}

/// The static pod image kubeadm 1.33 runs etcd from.
pub const IMAGE: &str = "registry.k8s.io/etcd:3.5.21-0";

fn random_id() -> u64 {
    rand::random::<u64>() | 1
}

impl Etcd {
    pub fn healthy(&self) -> usize {
        self.members.iter().filter(|m| self.alive.contains(&m.name)).count()
    }

    /// A majority of the members is healthy (trivially, with no members).
    pub fn has_quorum(&self) -> bool {
        self.members.is_empty() || self.healthy() * 2 > self.members.len()
    }

    fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }

    /// One pass over the control-plane machines: which are up, and members
    /// for those that started without one (init for the first, join after).
    /// `machines`: (node name, InternalIP, booted).
    pub fn observe(&mut self, machines: &[(String, String, bool)]) {
        self.alive = machines.iter().filter(|(_, _, up)| *up).map(|(n, _, _)| n.clone()).collect();
        for (name, ip, up) in machines {
            if !up || self.member(name).is_some() || self.removed.contains(name) {
                continue;
            }
            if self.members.is_empty() {
                self.cluster_id = random_id();
            } else if !self.has_quorum() {
                if self.refused.insert(name.clone()) {
                    tracing::warn!(
                        "sim: etcd: control-plane machine {name} cannot join: etcdserver: re-configuration failed due to not enough started members"
                    );
                }
                continue;
            }
            self.members.push(Member { id: random_id(), name: name.clone(), ip: ip.clone() });
        }
    }

    pub fn is_member(&self, node: &str) -> bool {
        self.member(node).is_some()
    }

    /// `etcdctl` run on `node` with these arguments: (exit code, output).
    pub fn run(&mut self, node: &str, args: &[String]) -> (i32, String) {
        let words: Vec<&str> = {
            let mut out = Vec::new();
            let mut it = args.iter().skip_while(|a| a.as_str() != "etcdctl").skip(1);
            while let Some(a) = it.next() {
                if a == "-w" {
                    it.next();
                } else if !a.starts_with('-') {
                    out.push(a.as_str());
                }
            }
            out
        };
        if !self.alive.contains(node) || self.member(node).is_none() || self.removed.contains(node) {
            return (1, "Error: dial tcp 127.0.0.1:2379: connect: connection refused\n".into());
        }
        if !self.has_quorum() {
            return (1, "Error: context deadline exceeded\n".into());
        }
        match words.as_slice() {
            ["member", "list"] => {
                let members: Vec<Value> = self
                    .members
                    .iter()
                    .map(|m| {
                        json!({"ID": m.id, "name": m.name,
                            "peerURLs": [format!("https://{}:2380", m.ip)],
                            "clientURLs": [format!("https://{}:2379", m.ip)]})
                    })
                    .collect();
                let local = self.member(node).map(|m| m.id).unwrap_or_default();
                let out = json!({"header": {"cluster_id": self.cluster_id, "member_id": local, "raft_term": 2}, "members": members});
                (0, format!("{out}\n"))
            }
            ["endpoint", "health"] => {
                let rows: Vec<Value> = self
                    .members
                    .iter()
                    .map(|m| {
                        let endpoint = format!("https://{}:2379", m.ip);
                        if self.alive.contains(&m.name) {
                            json!({"endpoint": endpoint, "health": true, "took": "2.1ms"})
                        } else {
                            json!({"endpoint": endpoint, "health": false, "took": "5.0s", "error": "context deadline exceeded"})
                        }
                    })
                    .collect();
                let all = self.healthy() == self.members.len();
                let tail = if all { "" } else { "Error: unhealthy cluster\n" };
                (i32::from(!all), format!("{}\n{tail}", Value::Array(rows)))
            }
            ["member", "remove", hex] => {
                let Ok(id) = u64::from_str_radix(hex, 16) else {
                    return (1, format!("Error: bad member ID arg (strconv.ParseUint: parsing \"{hex}\": invalid syntax), expecting ID in Hex\n"));
                };
                let Some(pos) = self.members.iter().position(|m| m.id == id) else {
                    return (1, "Error: etcdserver: member not found\n".into());
                };
                // etcd's strict reconfiguration check: the members left must
                // still have a started majority.
                let left: Vec<&Member> = self.members.iter().filter(|m| m.id != id).collect();
                let started = left.iter().filter(|m| self.alive.contains(&m.name)).count();
                if started * 2 <= left.len() {
                    return (
                        1,
                        "Error: etcdserver: re-configuration failed due to not enough started members\n".into(),
                    );
                }
                let gone = self.members.remove(pos);
                self.removed.insert(gone.name);
                (0, format!("Member {id:x} removed from cluster {:x}\n", self.cluster_id))
            }
            other => (1, format!("Error: unknown command {:?} for \"etcdctl\"\n", other.join(" "))),
        }
    }

    pub fn record(&mut self, ns: &str, pod: &str, container: &str, result: (i32, String)) {
        self.outputs.insert((ns.into(), pod.into(), container.into()), result);
    }

    pub fn output(&self, ns: &str, pod: &str, container: &str) -> Option<&(i32, String)> {
        self.outputs.get(&(ns.into(), pod.into(), container.into()))
    }

    /// Forgets the outputs of pods that are gone.
    pub fn forget_except(&mut self, pods: &BTreeSet<(String, String)>) {
        self.outputs.retain(|(ns, p, _), _| pods.contains(&(ns.clone(), p.clone())));
    }
}

/// A container that runs `etcdctl` (its command or its args start with it).
pub fn etcdctl_args(container: &Value) -> Option<Vec<String>> {
    let words: Vec<String> = ["/command", "/args"]
        .iter()
        .filter_map(|p| container.pointer(p).and_then(Value::as_array))
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (words.first().map(|w| w.rsplit('/').next().unwrap_or(w)) == Some("etcdctl")).then(|| {
        let mut w = words;
        w[0] = "etcdctl".into();
        w
    })
}

/// The mirror pod kubelet posts for etcd's static pod on a control-plane node.
pub fn mirror_pod(node: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("etcd-{node}"), "namespace": "kube-system",
            "labels": {"component": "etcd", "tier": "control-plane"},
            "annotations": {
                "kubernetes.io/config.mirror": "sim",
                "kubernetes.io/config.source": "file",
                "kubeadm.kubernetes.io/etcd.advertise-client-urls": format!("https://{ip}:2379"),
            },
        },
        "spec": {
            "nodeName": node, "hostNetwork": true, "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
            "containers": [{"name": "etcd", "image": IMAGE, "command": ["etcd", "--name", node]}],
            "volumes": [{"name": "etcd-certs", "hostPath": {"path": "/etc/kubernetes/pki/etcd", "type": "DirectoryOrCreate"}}],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machines(up: &[(&str, bool)]) -> Vec<(String, String, bool)> {
        up.iter().enumerate().map(|(i, (n, u))| (n.to_string(), format!("10.0.0.{}", i + 1), *u)).collect()
    }

    fn run(e: &mut Etcd, node: &str, cmd: &str) -> (i32, String) {
        let args: Vec<String> = ["etcdctl", "--endpoints=https://127.0.0.1:2379", "-w", "json"]
            .into_iter()
            .map(str::to_string)
            .chain(cmd.split(' ').map(str::to_string))
            .collect();
        e.run(node, &args)
    }

    #[test]
    fn members_join_and_quorum_follows_the_machines() {
        let mut e = Etcd::default();
        e.observe(&machines(&[("a", true), ("b", true), ("c", true)]));
        assert_eq!(e.members.len(), 3);
        assert!(e.has_quorum());
        // A machine gone without `member remove`: its member stays, unhealthy.
        e.observe(&machines(&[("a", true), ("b", true), ("d", true)]));
        assert_eq!((e.members.len(), e.healthy()), (4, 3));
        e.observe(&machines(&[("a", true), ("d", true), ("e", false)]));
        assert_eq!((e.members.len(), e.healthy()), (4, 2));
        assert!(!e.has_quorum(), "2 of 4 is no majority");
        // Without a quorum nobody joins, and etcdctl times out.
        e.observe(&machines(&[("a", true), ("d", true), ("e", true)]));
        assert_eq!(e.members.len(), 4);
        assert_eq!(run(&mut e, "a", "member list").0, 1);
    }

    #[test]
    fn remove_checks_what_is_left() {
        let mut e = Etcd::default();
        e.observe(&machines(&[("a", true), ("b", true), ("c", true)]));
        let (code, out) = run(&mut e, "a", "member list");
        assert_eq!(code, 0);
        let list: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(list["members"].as_array().unwrap().len(), 3);
        let c = e.members[2].id;
        // c's machine dies; removing b would leave a and c with one started.
        e.observe(&machines(&[("a", true), ("b", true)]));
        let b = e.members[1].id;
        let (code, out) = run(&mut e, "a", &format!("member remove {b:x}"));
        assert_eq!(
            (code, out.as_str()),
            (1, "Error: etcdserver: re-configuration failed due to not enough started members\n")
        );
        let (code, out) = run(&mut e, "a", &format!("member remove {c:x}"));
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with(&format!("Member {c:x} removed from cluster ")));
        assert_eq!(run(&mut e, "a", &format!("member remove {c:x}")).1, "Error: etcdserver: member not found\n");
        let (code, health) = run(&mut e, "b", "endpoint health --cluster");
        assert_eq!(code, 0, "{health}");
    }
}
