//! What `pinfleet adopt` claims of a running cluster (pure): the resources
//! kops tagged as the cluster's (or, for a kubeadm cluster on EC2, the
//! machines carrying the operator's tag and the network around them),
//! each matched to the resource the imported cluster file describes, or
//! refused, or left for the roll ([`Source`] says which).
//!
//! ```text
//! found: every resource tagged KubernetesCluster=<kops name>, or the tagged machines'
//!        VPC, subnets, gateways, route tables, security groups (adopt::aws)
//!   + desired: the imported file's network and security groups (cloud::model)
//!     │ judge: owner checks first, then a match per kind
//!     ▼
//! Claims { claim (id → pinfleet's key), roll (machines not on pinfleet's
//!          launch templates), left (kops's, gone with the roll), refused }
//! ```
//!
//! A claim replaces nothing: it is the tags pinfleet reads a resource by
//! (`pinfleet.dev/cluster`, `pinfleet.dev/resource`) added to what exists.
//! A resource another tool owns is refused unless the operator names it:
//! one tagged for another pinfleet cluster, one Terraform manages (its
//! tags say so), one shared with another Kubernetes cluster
//! (`kubernetes.io/cluster/<other>`).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::cloud::key::ResourceKey;
use crate::cloud::model::Desired;
use crate::cloud::tags;

/// kops's cluster tag (every resource it makes carries it).
pub const KOPS_CLUSTER_TAG: &str = tags::KOPS_CLUSTER;
/// kops's instance group tag on machines and their groups.
pub const KOPS_GROUP_TAG: &str = tags::KOPS_INSTANCE_GROUP;

/// Where a cluster is taken over from, and how its machines are grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// kops: every resource tagged `KubernetesCluster=<name>`; a machine's
    /// group is kops's instance group (its tag), mapped by the import.
    Kops { name: String, groups: BTreeMap<String, String> },
    /// A cluster made by hand with kubeadm on EC2: the machines carrying
    /// `tag` and the network around them; a machine's group is the one
    /// the import recorded for it (id → group). `kubernetes`: kubeadm's
    /// clusterName (what the AWS cloud provider tags with).
    Ec2 { tag: String, machines: BTreeMap<String, String>, kubernetes: String },
}

impl Source {
    /// What the VPC records of it (`pinfleet.dev/adopted-from`).
    pub fn from_tag(&self) -> String {
        match self {
            Source::Kops { name, .. } => format!("kops:{name}"),
            Source::Ec2 { tag, .. } => format!("ec2:{tag}"),
        }
    }

    /// The Kubernetes cluster name its resources may carry
    /// (`kubernetes.io/cluster/<name>`) without being another cluster's.
    fn kubernetes_name(&self) -> &str {
        match self {
            Source::Kops { name, .. } => name,
            Source::Ec2 { kubernetes, .. } => kubernetes,
        }
    }

    /// The pinfleet group a machine goes to, with the other tool's name
    /// for it; Err: why it has none.
    fn group_of(&self, f: &Found) -> Result<(String, String), String> {
        match self {
            Source::Kops { groups, .. } => {
                let kops_group = f.tags.get(KOPS_GROUP_TAG).cloned().unwrap_or_default();
                match groups.get(&kops_group) {
                    Some(g) => Ok((g.clone(), kops_group)),
                    None => Err(format!(
                        "its instance group {kops_group:?} ({KOPS_GROUP_TAG}) is not one the import mapped"
                    )),
                }
            }
            Source::Ec2 { machines, .. } => match machines.get(&f.id) {
                Some(g) => Ok((g.clone(), f.tags.get("aws:autoscaling:groupName").cloned().unwrap_or("-".into()))),
                None => Err(String::new()),
            },
        }
    }
}

/// A resource found by kops's tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Found {
    /// `vpc`, `subnet`, `internet-gateway`, `nat-gateway`, `elastic-ip`,
    /// `route-table`, `security-group`, `instance`, `launch-template`,
    /// `volume`, `auto-scaling-group`.
    pub kind: String,
    pub id: String,
    pub tags: BTreeMap<String, String>,
    /// A VPC's or subnet's CIDR.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,
    /// A subnet's or NAT gateway's zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// A route table's subnets, a NAT gateway's subnet, an address's
    /// NAT gateway, a load balancer's listeners' target groups (ids).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// A load balancer's or target group's name (their id is an ARN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A target group's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
}

/// One resource claimed: pinfleet's key for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    pub kind: String,
    pub id: String,
    pub key: ResourceKey,
    /// Claimed by an earlier adopt already (nothing to do).
    pub already: bool,
}

/// A machine kops runs, to be replaced by the roll.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Roll {
    pub id: String,
    /// The pinfleet group it belongs to.
    pub group: String,
    /// kops's instance group.
    pub kops_group: String,
    pub already: bool,
}

/// Something found and not claimed: kops's own, or refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    pub kind: String,
    pub id: String,
    pub why: String,
}

/// What an adopt would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Claims {
    pub claim: Vec<Claim>,
    pub roll: Vec<Roll>,
    /// kops's own (its launch templates and Auto Scaling groups, its
    /// etcd volumes): left as they are until the roll replaces them.
    pub left: Vec<Note>,
    /// Owned by another tool, or not what the file says: nothing is
    /// written while any is here (name it with `--take ID` to claim it anyway).
    pub refused: Vec<Note>,
    /// What the claimed VPC says of the adoption (`plan` reads it): where
    /// the cluster came from, and its API load balancer's and target
    /// group's names.
    pub vpc_tags: Vec<(String, String)>,
    /// The cluster's trust: kops's CAs and service-account key taken over
    /// into pinfleet's state (`None`: not looked at).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pki: Option<PkiTakeOver>,
    /// kops's etcd-manager (its CAs and manifests) taken over so that its
    /// control plane rolls (`None`: not kops's, or not looked at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_manager: Option<EtcdManagerTakeOver>,
}

/// kops's etcd-manager and what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EtcdManagerTakeOver {
    /// What was read, or why it could not be (then the control plane is not rolled).
    pub said: String,
    /// Read and checked: the control plane can roll once it is written.
    pub taken: bool,
    /// pinfleet's state holds it already.
    pub already: bool,
}

/// kops's keysets and what becomes of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PkiTakeOver {
    /// Whose: `kops` (its keysets) or `kubeadm` (its pki folder).
    pub by: String,
    /// The keysets read (`kubernetes-ca`, …), from where.
    pub keysets: Vec<String>,
    pub from: String,
    /// pinfleet's state holds them already.
    pub already: bool,
}

impl Claims {
    /// Nothing to write: every claim and machine was tagged before.
    pub fn is_noop(&self) -> bool {
        self.claim.iter().all(|c| c.already)
            && self.roll.iter().all(|r| r.already)
            && self.pki.as_ref().is_none_or(|p| p.already)
            && self.etcd_manager.as_ref().is_none_or(|e| e.already || !e.taken)
    }
}

/// Whose a resource is, when not only kops's: another pinfleet cluster's,
/// Terraform's, or another Kubernetes cluster's too.
fn other_owner(f: &Found, cluster: &str, kubernetes: &str) -> Option<String> {
    if let Some(c) = f.tags.get(tags::CLUSTER).filter(|c| c.as_str() != cluster) {
        return Some(format!("pinfleet cluster {c} owns it ({}={c})", tags::CLUSTER));
    }
    let terraform = f.tags.iter().find(|(k, v)| {
        let (k, v) = (k.to_ascii_lowercase(), v.to_ascii_lowercase());
        k.contains("terraform")
            || (matches!(k.as_str(), "managedby" | "managed-by" | "managed_by") && v.contains("terraform"))
    });
    if let Some((k, v)) = terraform {
        return Some(format!("Terraform manages it ({k}={v}): a change here would be undone by its next apply"));
    }
    let others: Vec<&str> =
        f.tags.keys().filter_map(|k| k.strip_prefix("kubernetes.io/cluster/")).filter(|c| *c != kubernetes).collect();
    if let Some(c) = others.first() {
        return Some(format!("shared with Kubernetes cluster {c} (kubernetes.io/cluster/{c})"));
    }
    None
}

/// Judges what was found against the file (see the module doc), for a
/// cluster from `source`. `taken`: ids the operator named to claim
/// despite another owner.
pub fn judge(found: &[Found], desired: &Desired, source: &Source, taken: &[String]) -> Claims {
    let cluster = desired.cluster.as_str();
    let control_planes = &control_planes(desired)[..];
    let mut out = Claims::default();
    // Subnet ids → pinfleet's subnet names, for route tables and NATs.
    let mut subnet_names: BTreeMap<String, String> = BTreeMap::new();
    let mut nat_zone: BTreeMap<String, String> = BTreeMap::new();
    let mut ordered: Vec<&Found> = found.iter().collect();
    let rank = |k: &str| match k {
        "vpc" => 0,
        "subnet" => 1,
        "nat-gateway" => 2,
        _ => 3,
    };
    ordered.sort_by(|a, b| rank(&a.kind).cmp(&rank(&b.kind)).then(a.id.cmp(&b.id)));
    for f in ordered {
        let note = |why: String| Note { kind: f.kind.clone(), id: f.id.clone(), why };
        // Another owner refuses only what would be claimed, rolled or
        // deleted; what is left as it is needs no --take.
        let owner = other_owner(f, cluster, source.kubernetes_name()).filter(|_| !taken.contains(&f.id));
        let already_key = f.tags.get(tags::RESOURCE).and_then(|k| k.parse::<ResourceKey>().ok());
        let mine = f.tags.get(tags::CLUSTER).map(String::as_str) == Some(cluster);
        let key = match f.kind.as_str() {
            "vpc" => match f.cidr.as_deref() {
                Some(c) if c == desired.vpc_cidr => Some(ResourceKey::Vpc),
                other => {
                    out.refused.push(note(format!(
                        "its CIDR {} is not the file's spec.network.cidr {}",
                        other.unwrap_or("?"),
                        desired.vpc_cidr
                    )));
                    continue;
                }
            },
            "subnet" => match desired.subnets.iter().find(|s| Some(&s.cidr) == f.cidr.as_ref()) {
                Some(s) => {
                    subnet_names.insert(f.id.clone(), s.name.clone());
                    Some(ResourceKey::Subnet(s.name.clone()))
                }
                None => {
                    out.refused.push(note(format!(
                        "no subnet of the file has its CIDR {} (spec.network.subnets)",
                        f.cidr.as_deref().unwrap_or("?")
                    )));
                    continue;
                }
            },
            "internet-gateway" => desired.internet_gateway.then_some(ResourceKey::Igw),
            "nat-gateway" => {
                let zone = f.zone.clone().or_else(|| {
                    f.links
                        .first()
                        .and_then(|s| desired.subnets.iter().find(|d| Some(&d.name) == subnet_names.get(s)))
                        .map(|d| d.zone.clone())
                });
                match zone.filter(|z| desired.nat_gateways.iter().any(|n| &n.zone == z)) {
                    Some(z) => {
                        nat_zone.insert(f.id.clone(), z.clone());
                        Some(ResourceKey::Nat(z))
                    }
                    None => None,
                }
            }
            "elastic-ip" => f.links.iter().find_map(|n| nat_zone.get(n)).map(|z| ResourceKey::Eip(z.clone())),
            "route-table" => {
                let mut names: Vec<&String> = f.links.iter().filter_map(|s| subnet_names.get(s)).collect();
                names.sort();
                desired
                    .route_tables
                    .iter()
                    .find(|rt| {
                        let mut want: Vec<&String> = rt.subnets.iter().collect();
                        want.sort();
                        !want.is_empty() && want == names
                    })
                    .map(|rt| ResourceKey::RouteTable(rt.name.clone()))
            }
            "security-group" => match sg_role(f, source, control_planes) {
                Ok(role) => role
                    .filter(|r| desired.security_groups.iter().any(|s| s.name == *r))
                    .map(|r| ResourceKey::SecurityGroup(r.to_string())),
                Err(why) => {
                    out.left.push(note(why.into()));
                    continue;
                }
            },
            "instance" => {
                machine(f, source, owner, mine, &mut out);
                continue;
            }
            "load-balancer" if desired.api_address => None,
            "load-balancer" => Some(ResourceKey::LoadBalancer),
            // kops's API target group (its port the API's); kops-controller's
            // on 3988 stays kops's, left as it is.
            "target-group" if f.port == Some(i32::from(desired.load_balancer.port)) && !desired.api_address => {
                Some(ResourceKey::TargetGroup)
            }
            "target-group" => {
                out.left.push(note("kops's (kops-controller's, behind its own listener): serves only kops's own machines; left as it is, with its listener, for you to delete once they are gone".into()));
                continue;
            }
            "launch-template" | "auto-scaling-group" => {
                let why = match source {
                    // The roll deletes kops's emptied groups: not one another tool manages.
                    Source::Kops { .. } if owner.is_some() => {
                        out.refused.push(note(owner.clone().unwrap_or_default()));
                        continue;
                    }
                    Source::Kops { groups, .. } => kops_group_fate(f, groups, control_planes),
                    Source::Ec2 { .. } => "yours: its machines leave it as the roll replaces them (its size going down with them); the group itself is left to you".into(),
                };
                out.left.push(note(why));
                continue;
            }
            "volume" => {
                out.left.push(note(
                    "etcd-manager's data: as the roll replaces its machine, etcd-manager on the new machine in its zone takes it over (found by kops's tags, left untagged)"
                        .into(),
                ));
                continue;
            }
            _ => None,
        };
        // Claimed for this cluster already (named with --take then): not
        // refused again.
        let owner = owner.filter(|_| !(mine && key.is_some() && already_key == key));
        match (key, owner) {
            (Some(_), Some(owner)) => out.refused.push(note(owner)),
            (Some(key), None) => {
                let already = mine && already_key.as_ref() == Some(&key);
                out.claim.push(Claim { kind: f.kind.clone(), id: f.id.clone(), key, already });
            }
            // pinfleet's own (made for this cluster since the adopt): not the other tool's.
            (None, _) if mine && f.tags.get(tags::MANAGED_BY).map(String::as_str) == Some(tags::MANAGED_BY_VALUE) => {}
            (None, Some(owner)) => {
                out.left.push(note(format!("{owner}; nothing in the file matches it: left as it is")))
            }
            (None, None) => out.left.push(note("nothing in the file matches it: left as it is".into())),
        }
    }
    one_claim_per_key(&mut out);
    say_where_from(found, source, &mut out);
    out
}

/// What the claimed VPC says of the adoption ([`Claims::vpc_tags`]); the
/// VPC is claimed already only when it says all of it.
fn say_where_from(found: &[Found], source: &Source, out: &mut Claims) {
    let name_of = |key: ResourceKey| {
        let id = out.claim.iter().find(|c| c.key == key).map(|c| c.id.clone())?;
        found.iter().find(|f| f.id == id)?.name.clone()
    };
    let mut vpc_tags = vec![(tags::ADOPTED_FROM.to_string(), source.from_tag())];
    if let Some(n) = name_of(ResourceKey::LoadBalancer) {
        vpc_tags.push((tags::API_LOAD_BALANCER.to_string(), n));
    }
    if let Some(n) = name_of(ResourceKey::TargetGroup) {
        vpc_tags.push((tags::API_TARGET_GROUP.to_string(), n));
    }
    // The VPC is claimed already only when it says all of that too.
    if let Some(c) = out.claim.iter_mut().find(|c| c.key == ResourceKey::Vpc) {
        let vpc = found.iter().find(|f| f.id == c.id);
        c.already &= vpc.is_some_and(|v| vpc_tags.iter().all(|(k, val)| v.tags.get(k) == Some(val)));
    }
    out.vpc_tags = vpc_tags;
}

/// A machine: to roll in the group it goes to, or left (not recorded by
/// the import), or refused (another owner's, or a group the import did
/// not map).
fn machine(f: &Found, source: &Source, owner: Option<String>, mine: bool, out: &mut Claims) {
    let note = |why: String| Note { kind: f.kind.clone(), id: f.id.clone(), why };
    let owner = owner.filter(|_| !(mine && f.tags.contains_key(tags::INSTANCE_GROUP)));
    match source.group_of(f) {
        Ok(_) if owner.is_some() => out.refused.push(note(owner.unwrap_or_default())),
        Ok((g, kops_group)) => out.roll.push(Roll {
            id: f.id.clone(),
            already: mine && f.tags.get(tags::INSTANCE_GROUP) == Some(&g),
            group: g,
            kops_group,
        }),
        Err(why) if why.is_empty() => out.left.push(note(
            "not among the machines the import recorded (no Node ran on it then): left as it is; import again to bring it along".into(),
        )),
        Err(why) => out.refused.push(note(why)),
    }
}

/// Which of the file's security groups a found one is: kops names its
/// groups `masters.<cluster>` and `nodes.<cluster>`; a kubeadm cluster's
/// is known by the machines that use it (the control plane's only, or the
/// workers' only). Err: why it is left.
fn sg_role(f: &Found, source: &Source, control_planes: &[String]) -> Result<Option<&'static str>, &'static str> {
    match source {
        Source::Kops { .. } => {
            let name = f.tags.get("Name").map(String::as_str).unwrap_or_default();
            Ok(if name.starts_with("masters.") {
                Some("control-plane")
            } else if name.starts_with("nodes.") {
                Some("nodes")
            } else {
                None
            })
        }
        Source::Ec2 { machines, .. } => {
            let cp = |id: &String| machines.get(id).is_some_and(|g| control_planes.contains(g));
            if f.links.is_empty() {
                Ok(None)
            } else if f.links.iter().all(cp) {
                Ok(Some("control-plane"))
            } else if !f.links.iter().any(cp) {
                Ok(Some("nodes"))
            } else {
                Err("used by the control plane and the workers alike: left as it is (pinfleet's machines get groups of their own)")
            }
        }
    }
}

/// The file's control-plane groups.
fn control_planes(desired: &Desired) -> Vec<String> {
    let cp = desired.groups.iter().filter(|g| g.role == crate::spec::Role::ControlPlane);
    cp.map(|g| g.name.clone()).collect()
}

/// What becomes of one of kops's Auto Scaling groups or launch templates:
/// a node group's goes with the roll; the control plane's stays kops's.
fn kops_group_fate(f: &Found, groups: &BTreeMap<String, String>, control_planes: &[String]) -> String {
    let kops_group = f.tags.get(KOPS_GROUP_TAG).map(String::as_str).unwrap_or_default();
    match groups.get(kops_group) {
        Some(g) if control_planes.contains(g) => {
            "kops's control plane's: scaled down as the roll replaces its machines one at a time (etcd-manager on each replacement takes over its member's volumes), deleted once empty".into()
        }
        _ => "kops's: scaled down as the roll replaces its machines, deleted once empty".into(),
    }
}

/// Two resources claimed as one key: the second is refused.
fn one_claim_per_key(out: &mut Claims) {
    let mut seen: BTreeMap<ResourceKey, String> = BTreeMap::new();
    let mut kept = Vec::new();
    for c in std::mem::take(&mut out.claim) {
        match seen.get(&c.key) {
            Some(first) => out.refused.push(Note {
                kind: c.kind.clone(),
                id: c.id.clone(),
                why: format!("{} is claimed by {first} already", c.key),
            }),
            None => {
                seen.insert(c.key.clone(), c.id.clone());
                kept.push(c);
            }
        }
    }
    out.claim = kept;
}

/// The tags a claim adds (what pinfleet reads a resource by).
pub fn claim_tags(cluster: &str, key: &ResourceKey) -> Vec<(String, String)> {
    vec![
        (tags::CLUSTER.to_string(), cluster.to_string()),
        (tags::RESOURCE.to_string(), key.to_string()),
        (tags::MANAGED_BY.to_string(), tags::MANAGED_BY_VALUE.to_string()),
    ]
}

/// The tags a machine to roll gets: its cluster and group (so `plan`
/// lists it as one of the group's, not yet on its launch template).
pub fn roll_tags(cluster: &str, group: &str) -> Vec<(String, String)> {
    vec![(tags::CLUSTER.to_string(), cluster.to_string()), (tags::INSTANCE_GROUP.to_string(), group.to_string())]
}
