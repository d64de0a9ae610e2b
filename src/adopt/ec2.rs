//! A cluster made by hand with kubeadm on EC2 (no kops state), as a
//! pinfleet cluster file (pure): what EC2 shows of the machines carrying
//! the operator's tag, what the cluster's API shows of its Nodes, and
//! kubeadm's own `ClusterConfiguration` (kube-system/kubeadm-config).
//!
//! ```text
//! EC2 (tag:KEY=VALUE: machines, their VPC, subnets, route tables)  ─┐
//! the API (kubeadm-config, Nodes by providerID)                     ─┤ read by cli::import
//!     ▼                                                               │
//! Seen ──▶ import (here): the file, the settings it cannot carry (located), or a refusal
//! ```
//!
//! Machines are grouped as kubeadm left them: the control plane (the
//! Nodes labelled `node-role.kubernetes.io/control-plane`) in one group;
//! workers by their Auto Scaling group, or else by machine type. The file
//! records which machine went to which group
//! ([`MACHINES_ANNOTATION`]), and the tag that found them
//! ([`TAG_ANNOTATION`]): `pinfleet adopt` claims exactly those.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

use super::kops::{Finding, Imported, Options, UNASSIGNED_OWNER};

/// The tag (`KEY=VALUE`) a kubeadm cluster's machines were found by.
pub const TAG_ANNOTATION: &str = "pinfleet.dev/adopt-tag";
/// Which machine went to which group: `GROUP=i-1,i-2 GROUP2=i-3`.
pub const MACHINES_ANNOTATION: &str = "pinfleet.dev/adopt-machines";
/// kubeadm's `clusterName` (the name the AWS cloud provider tags with).
pub const KUBEADM_NAME_ANNOTATION: &str = "pinfleet.dev/kubeadm-cluster-name";
/// The Node label kubeadm puts on its control plane.
pub const CONTROL_PLANE_LABEL: &str = "node-role.kubernetes.io/control-plane";
/// The group name of the control plane in the file.
pub const CONTROL_PLANE_GROUP: &str = "control-plane";

/// What was read: EC2's machines, their network, and the cluster's API.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// The tag the machines carry.
    pub tag: (String, String),
    pub region: String,
    /// Where the API was read (the kubeconfig's server), for messages.
    pub api: String,
    pub machines: Vec<Machine>,
    /// Each VPC the machines are in: id and CIDR.
    pub vpcs: Vec<(String, String)>,
    /// Every subnet of the machines' VPC.
    pub subnets: Vec<Subnet>,
    pub nodes: Vec<Node>,
    /// kube-system/kubeadm-config's `ClusterConfiguration` (None: absent).
    pub kubeadm: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Machine {
    pub id: String,
    pub instance_type: String,
    pub image: String,
    pub vpc: String,
    pub subnet: String,
    /// The Auto Scaling group it is in (`aws:autoscaling:groupName`).
    pub asg: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Subnet {
    pub id: String,
    pub cidr: String,
    pub zone: String,
    /// Its route table sends 0.0.0.0/0 to an internet gateway.
    pub public: bool,
}

#[derive(Debug, Clone, Default)]
pub struct Node {
    pub name: String,
    /// The machine its `spec.providerID` names (`aws:///ZONE/i-…`).
    pub instance: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// (key, value, effect)
    pub taints: Vec<(String, Option<String>, String)>,
}

impl Node {
    fn control_plane(&self) -> bool {
        self.labels.contains_key(CONTROL_PLANE_LABEL) || self.labels.contains_key("node-role.kubernetes.io/master")
    }
}

/// The instance id in a Node's `spec.providerID` (`aws:///us-east-1a/i-0abc`).
pub fn instance_of(provider_id: &str) -> Option<String> {
    let rest = provider_id.strip_prefix("aws://")?;
    let id = rest.rsplit('/').next()?;
    (id.starts_with("i-") && id.len() > 2).then(|| id.to_string())
}

/// `KEY=VALUE` → (KEY, VALUE); a key is needed, the value may be empty.
pub fn parse_tag(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(format!("--tag `{s}`: give the machines' tag as KEY=VALUE (such as cluster=lab)")),
    }
}

/// The file's record of its groups' machines, parsed back (adopt reads it).
pub fn parse_machines(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for part in s.split_whitespace() {
        if let Some((group, ids)) = part.split_once('=') {
            for id in ids.split(',').filter(|i| !i.is_empty()) {
                out.insert(id.to_string(), group.to_string());
            }
        }
    }
    out
}

/// kubeadm's `ClusterConfiguration` settings the file carries; any other
/// set field is named as not carried over.
const CARRIED: &[&str] = &[
    "apiVersion",
    "kind",
    "kubernetesVersion",
    "controlPlaneEndpoint",
    "clusterName",
    "networking.podSubnet",
    "networking.serviceSubnet",
];

/// Set to kubeadm's defaults, these need nothing.
const DEFAULTS: &[(&str, &str)] = &[
    ("networking.dnsDomain", "cluster.local"),
    ("certificatesDir", "/etc/kubernetes/pki"),
    ("imageRepository", "registry.k8s.io"),
    ("etcd.local.dataDir", "/var/lib/etcd"),
];

/// Why a setting of kubeadm's is not carried, by its path's start.
fn why_not(path: &str) -> &'static str {
    if path.starts_with("etcd.external") {
        "an etcd outside the control plane: pinfleet runs the control plane's own etcd (kubeadm's stacked etcd), and cannot take over one it does not run"
    } else if path.starts_with("apiServer.certSANs") {
        "pinfleet's API certificate names the load balancer, spec.api.dnsName and the machine: another name must be spec.api.dnsName"
    } else if path.ends_with("extraArgs") || path.contains("extraArgs") {
        "pinfleet runs kubeadm's flags for the Kubernetes minor; a component's extra flag is not carried"
    } else if path.starts_with("featureGates") {
        "pinfleet runs the Kubernetes minor's default feature gates"
    } else if path.starts_with("dns") || path.starts_with("imageRepository") {
        "pinfleet's components come from its own addon packages and the Kubernetes minor's images"
    } else if path.starts_with("networking.dnsDomain") {
        "pinfleet's clusters use the DNS domain cluster.local"
    } else {
        "pinfleet's cluster file has no counterpart for it"
    }
}

/// Every leaf of a YAML value, as `a.b[0].c` paths.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                leaves(x, p, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, x) in a.iter().enumerate() {
                leaves(x, format!("{path}[{i}]"), out);
            }
        }
        Value::Null => {}
        other => out.push((path, other.clone())),
    }
}

/// A name for a group from an Auto Scaling group's or a machine type's.
fn group_name(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out: String = out.trim_matches('-').chars().take(40).collect();
    out.trim_end_matches('-').to_string()
}

/// The most common value, first in order on a tie.
fn most_common<'a>(values: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in values {
        *counts.entry(v).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, c)| *c == best).map(|(v, _)| v)
}

/// Labels pinfleet or Kubernetes set itself (not carried as a group's).
fn system_label(k: &str) -> bool {
    let domain = k.split_once('/').map(|(d, _)| d).unwrap_or("");
    domain.ends_with("kubernetes.io") || domain.ends_with("k8s.io") || domain.starts_with("pinfleet.dev")
}

/// kubeadm's ClusterConfiguration as read, and where it was read.
struct Kubeadm {
    config: Value,
    at: String,
}

impl Kubeadm {
    fn read(seen: &Seen) -> anyhow::Result<Kubeadm> {
        let at = format!("{} kube-system/kubeadm-config", seen.api);
        let Some(text) = &seen.kubeadm else {
            anyhow::bail!(
                "{at}: no such ConfigMap: the cluster was not made by kubeadm (import aws reads kubeadm's ClusterConfiguration; for kops, `pinfleet import kops`)"
            );
        };
        let config: Value = serde_saphyr::from_str(text)
            .map_err(|e| anyhow::anyhow!("{at}: ClusterConfiguration is not YAML pinfleet can read: {e}"))?;
        if config.get("kind").and_then(Value::as_str) != Some("ClusterConfiguration") {
            anyhow::bail!("{at}: ClusterConfiguration holds no kind: ClusterConfiguration");
        }
        Ok(Kubeadm { config, at })
    }

    fn get(&self, path: &str) -> Option<String> {
        let mut v = &self.config;
        for part in path.split('.') {
            v = v.get(part)?;
        }
        v.as_str().map(str::to_string)
    }

    fn finding(&self, path: &str, why: &str) -> Finding {
        Finding {
            path: format!("ClusterConfiguration.{path}"),
            why: why.to_string(),
            object: "kubeadm-config".into(),
            at: self.at.clone(),
        }
    }

    /// Every set field the file does not carry, named once (a list or map
    /// of one setting by its own path); `etcd.external` refused.
    fn settings(&self, found: &mut Findings) {
        let mut all = Vec::new();
        leaves(&self.config, String::new(), &mut all);
        for (path, v) in &all {
            if CARRIED.contains(&path.as_str()) || DEFAULTS.iter().any(|(p, d)| p == path && v.as_str() == Some(*d)) {
                continue;
            }
            let path = ["extraArgs", "certSANs", "featureGates", "extraVolumes", "etcd.external"]
                .iter()
                .find_map(|k| path.find(k).map(|i| &path[..i + k.len()]))
                .unwrap_or(path);
            let f = self.finding(path, why_not(path));
            let list = if path == "etcd.external" { &mut found.refused } else { &mut found.unmapped };
            if !list.contains(&f) {
                list.push(f);
            }
        }
    }

    /// The version kubeadm installed, as pinfleet spells it.
    fn version(&self) -> anyhow::Result<String> {
        let version = self.get("kubernetesVersion").unwrap_or_default();
        let version = version.trim_start_matches('v').to_string();
        if crate::spec::versions::parse_kubernetes_version(&version).is_none() {
            anyhow::bail!(
                "{}: ClusterConfiguration.kubernetesVersion `{version}` is not a Kubernetes version",
                self.at
            );
        }
        Ok(version)
    }

    /// `spec.api` from `controlPlaneEndpoint`.
    fn api(&self, unmapped: &mut Vec<Finding>) -> Map<String, Value> {
        let mut api = Map::new();
        let Some(ep) = self.get("controlPlaneEndpoint") else {
            unmapped.push(self.finding(
                "controlPlaneEndpoint",
                "unset: the control plane has no shared endpoint (one machine's address); pinfleet puts a load balancer in front of it",
            ));
            return api;
        };
        let (host, port) = match ep.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse::<u16>().ok()),
            _ => (ep.clone(), None),
        };
        api.insert("port".into(), json!(port.unwrap_or(6443)));
        if host.parse::<std::net::IpAddr>().is_err() {
            api.insert("dnsName".into(), json!(host));
        } else {
            unmapped.push(self.finding(
                "controlPlaneEndpoint",
                "an IP address: pinfleet's endpoint is its load balancer (spec.api.dnsName names a DNS record to point at it)",
            ));
        }
        api
    }
}

/// What the import says it did not carry, and what stops it.
#[derive(Default)]
struct Findings {
    unmapped: Vec<Finding>,
    refused: Vec<Finding>,
}

impl Findings {
    fn refuse_if_any(&self) -> anyhow::Result<()> {
        if self.refused.is_empty() {
            return Ok(());
        }
        let mut s = format!(
            "{} setting(s) pinfleet cannot honour without changing what the cluster does; nothing was written:",
            self.refused.len()
        );
        for f in &self.refused {
            s.push_str("\n  ");
            s.push_str(&f.to_string());
        }
        anyhow::bail!(s)
    }

    fn ec2(&mut self, tag: &str, path: String, why: String) {
        self.unmapped.push(Finding { path, why, object: "EC2".into(), at: format!("EC2 (tag {tag})") });
    }
}

/// The machines' one VPC (id, CIDR), or why there is none to import.
fn one_vpc<'a>(seen: &'a Seen, tag: &str) -> anyhow::Result<&'a (String, String)> {
    if seen.machines.is_empty() {
        anyhow::bail!(
            "no machine (pending, running or stopped) is tagged {tag} in {}: nothing to import (is the tag or the region right?)",
            seen.region
        );
    }
    if seen.vpcs.len() != 1 {
        let ids: Vec<&str> = seen.vpcs.iter().map(|(id, _)| id.as_str()).collect();
        anyhow::bail!(
            "the machines tagged {tag} are in {} VPCs ({}): a pinfleet cluster lives in one; tag one cluster's machines only",
            ids.len(),
            ids.join(", ")
        );
    }
    Ok(&seen.vpcs[0])
}

/// Each tagged machine's Node; a machine no Node runs on is named, a
/// worker Node on an untagged machine too, a control-plane one refused.
fn match_nodes<'a>(seen: &'a Seen, tag: &str, found: &mut Findings) -> BTreeMap<&'a str, &'a Node> {
    let node_of: BTreeMap<&str, &Node> = seen.nodes.iter().filter_map(|n| Some((n.instance.as_deref()?, n))).collect();
    let tagged: BTreeSet<&str> = seen.machines.iter().map(|m| m.id.as_str()).collect();
    for m in seen.machines.iter().filter(|m| !node_of.contains_key(m.id.as_str())) {
        let why = "no Node of the cluster runs on it (no spec.providerID names it): left out of the file, and adopt leaves it";
        found.ec2(tag, m.id.clone(), why.into());
    }
    for n in seen.nodes.iter().filter(|n| !n.instance.as_deref().is_some_and(|i| tagged.contains(i))) {
        let why = match &n.instance {
            Some(i) => format!("its machine {i} is not tagged {tag}"),
            None => "it names no EC2 machine".into(),
        };
        let at = format!("{} Node {}", seen.api, n.name);
        let (path, object) = ("spec.providerID".to_string(), "Node".to_string());
        if n.control_plane() {
            let why = format!("{why}: the control plane is taken over whole (tag it and import again)");
            found.refused.push(Finding { path, why, object, at });
        } else {
            let why = format!("{why}: left out (tag it and import again to bring it along)");
            found.unmapped.push(Finding { path, why, object, at });
        }
    }
    node_of
}

/// Every subnet's name in the file: `public-<zone>`, `private-<zone>`
/// (`-2`, `-3` … for more in one zone), public ones first.
fn name_subnets(subnets: &[Subnet]) -> (Vec<&Subnet>, BTreeMap<&str, String>) {
    let mut sorted: Vec<&Subnet> = subnets.iter().collect();
    sorted.sort_by(|a, b| (!a.public, &a.zone, &a.cidr).cmp(&(!b.public, &b.zone, &b.cidr)));
    let mut names: BTreeMap<&str, String> = BTreeMap::new();
    let mut taken: BTreeSet<String> = BTreeSet::new();
    for s in &sorted {
        let base = format!("{}-{}", if s.public { "public" } else { "private" }, s.zone);
        let mut n = base.clone();
        let mut i = 2;
        while !taken.insert(n.clone()) {
            n = format!("{base}-{i}");
            i += 1;
        }
        names.insert(s.id.as_str(), n);
    }
    (sorted, names)
}

/// The mapped groups: their file values, the record of their machines
/// (`GROUP=i-1,i-2`), and the zones they run in.
struct Groups {
    values: Vec<Value>,
    record: Vec<String>,
    zones: BTreeSet<String>,
}

/// The control plane, then workers by Auto Scaling group or machine type.
fn map_groups(
    seen: &Seen,
    node_of: &BTreeMap<&str, &Node>,
    subnet_name: &BTreeMap<&str, String>,
    tag: &str,
    found: &mut Findings,
) -> anyhow::Result<Groups> {
    let mut groups: BTreeMap<(bool, String), Vec<&Machine>> = BTreeMap::new();
    for m in seen.machines.iter().filter(|m| node_of.contains_key(m.id.as_str())) {
        let key = if node_of[m.id.as_str()].control_plane() {
            (false, CONTROL_PLANE_GROUP.to_string())
        } else {
            (true, m.asg.clone().unwrap_or_else(|| m.instance_type.clone()))
        };
        groups.entry(key).or_default().push(m);
    }
    if !groups.keys().any(|(worker, _)| !worker) {
        anyhow::bail!(
            "no machine tagged {tag} runs a Node labelled {CONTROL_PLANE_LABEL}: the control plane's machines must carry the tag too"
        );
    }
    let workers = groups.keys().filter(|(w, _)| *w).count();
    if workers == 0 {
        anyhow::bail!("no machine tagged {tag} runs a worker Node: workloads would have nowhere to run");
    }
    let zone_of: BTreeMap<&str, &str> = seen.subnets.iter().map(|s| (s.id.as_str(), s.zone.as_str())).collect();
    let mut out = Groups { values: Vec::new(), record: Vec::new(), zones: BTreeSet::new() };
    let mut names: BTreeSet<String> = BTreeSet::new();
    for ((worker, by), machines) in &groups {
        let name = if !worker {
            CONTROL_PLANE_GROUP.to_string()
        } else if workers == 1 {
            "nodes".to_string()
        } else {
            let n = group_name(by);
            let n = if n.is_empty() || n == CONTROL_PLANE_GROUP { format!("nodes-{n}") } else { n };
            if names.contains(&n) {
                format!("{n}-{}", names.len())
            } else {
                n
            }
        };
        names.insert(name.clone());
        let nodes: Vec<&Node> = machines.iter().map(|m| node_of[m.id.as_str()]).collect();
        out.values.push(group_value(&name, *worker, machines, &nodes, subnet_name, tag, found));
        out.zones.extend(machines.iter().filter_map(|m| zone_of.get(m.subnet.as_str()).map(|z| z.to_string())));
        let mut ids: Vec<&str> = machines.iter().map(|m| m.id.as_str()).collect();
        ids.sort();
        out.record.push(format!("{name}={}", ids.join(",")));
    }
    Ok(out)
}

/// One group's value in the file: the type and image most of its machines
/// run (the others named), its subnets, size, and the labels and taints
/// every Node of it has.
fn group_value(
    name: &str,
    worker: bool,
    machines: &[&Machine],
    nodes: &[&Node],
    subnet_name: &BTreeMap<&str, String>,
    tag: &str,
    found: &mut Findings,
) -> Value {
    let types: BTreeSet<&str> = machines.iter().map(|m| m.instance_type.as_str()).collect();
    let machine_type = most_common(machines.iter().map(|m| m.instance_type.as_str())).unwrap_or_default();
    if types.len() > 1 {
        let all: Vec<&str> = types.into_iter().collect();
        let why = format!(
            "its machines run several types ({}): the group is {machine_type}, and the roll replaces the others with it",
            all.join(", ")
        );
        found.ec2(tag, format!("{name}.machineType"), why);
    }
    let image = most_common(machines.iter().map(|m| m.image.as_str())).unwrap_or_default();
    if machines.iter().any(|m| m.image != image) {
        let why = format!("its machines run several images: the group pins {image}, the one most of them run");
        found.ec2(tag, format!("{name}.image"), why);
    }
    let mut subnets: Vec<String> =
        machines.iter().filter_map(|m| subnet_name.get(m.subnet.as_str()).cloned()).collect();
    subnets.sort();
    subnets.dedup();
    let labels: BTreeMap<&String, &String> = nodes[0]
        .labels
        .iter()
        .filter(|(k, _)| !system_label(k))
        .filter(|(k, v)| nodes.iter().all(|n| n.labels.get(*k) == Some(*v)))
        .collect();
    let taints: Vec<Value> = nodes[0]
        .taints
        .iter()
        .filter(|t| !t.0.starts_with("node-role.kubernetes.io/") && !t.0.starts_with("node.kubernetes.io/"))
        .filter(|t| nodes.iter().all(|n| n.taints.contains(t)))
        .map(|(k, v, e)| match v {
            Some(v) => json!({"key": k, "value": v, "effect": e}),
            None => json!({"key": k, "effect": e}),
        })
        .collect();
    // Machines that already run Pods on their accelerators run an image
    // with the driver: said so of the pinned image (and named).
    let mut image_value = json!({"id": image});
    if let Some(a) = crate::accelerated::of_instance_type(machine_type) {
        let stack = if a.flavor == crate::accelerated::Flavor::Neuron { "neuron" } else { "nvidia" };
        image_value["accelerator"] = json!(stack);
        let why = format!(
            "{machine_type} machines run {image}: taken to carry the {stack} driver stack their Nodes use now (check it before the roll)"
        );
        found.ec2(tag, format!("{name}.image"), why);
    }
    let count = machines.len() as u32;
    let mut g = Map::new();
    g.insert("name".into(), json!(name));
    g.insert("role".into(), json!(if worker { "node" } else { "control-plane" }));
    g.insert("machineType".into(), json!(machine_type));
    g.insert("minSize".into(), json!(count));
    g.insert("maxSize".into(), json!(count));
    g.insert("image".into(), image_value);
    g.insert("subnets".into(), json!(subnets));
    if !labels.is_empty() {
        g.insert("labels".into(), json!(labels));
    }
    if !taints.is_empty() {
        g.insert("taints".into(), Value::Array(taints));
    }
    if !worker {
        g.insert("rollout".into(), json!({"maxSurge": 0, "maxUnavailable": 1}));
    }
    Value::Object(g)
}

/// Maps what was seen to a pinfleet cluster file, or refuses with why.
pub fn import(seen: &Seen, opts: &Options) -> anyhow::Result<Imported> {
    let (key, value) = &seen.tag;
    let tag = format!("{key}={value}");
    let (vpc_id, vpc_cidr) = one_vpc(seen, &tag)?;
    let kubeadm = Kubeadm::read(seen)?;
    let mut found = Findings::default();
    kubeadm.settings(&mut found);
    let version = kubeadm.version()?;
    let name = opts.name.clone().unwrap_or_else(|| value.clone());
    if !crate::spec::validate::is_dns_label(&name) {
        anyhow::bail!(match &opts.name {
            Some(_) => format!("--name `{name}` is not a DNS label (lowercase letters, digits and '-')"),
            None =>
                format!("the tag's value `{value}` is not a DNS label pinfleet can name a cluster by: pass --name NAME"),
        });
    }
    let node_of = match_nodes(seen, &tag, &mut found);
    found.refuse_if_any()?;
    let (subnets, subnet_name) = name_subnets(&seen.subnets);
    let groups = map_groups(seen, &node_of, &subnet_name, &tag, &mut found)?;
    let mut unmapped = found.unmapped;
    let mut api = kubeadm.api(&mut unmapped);
    // The API reachable from the VPC (kubeadm's own rules are kept as they are).
    api.insert("allowedCidrs".into(), json!([vpc_cidr]));

    let mut notes = Vec::new();
    let owner = opts.owner.clone().unwrap_or_else(|| {
        notes.push(format!(
            "spec.owner: kubeadm names no owning team, so `{UNASSIGNED_OWNER}`: give --owner TEAM (every resource is tagged with it)"
        ));
        UNASSIGNED_OWNER.to_string()
    });
    notes.push(format!("spec.stateStore: pinfleet keeps the cluster's state at {}", opts.state_store));
    notes.push(format!(
        "spec.api.allowedCidrs: the VPC's {vpc_cidr}, so no security group of the running cluster is opened wider; the rules it has stay"
    ));
    let subnet_values: Vec<Value> = subnets
        .iter()
        .map(|s| {
            json!({"name": subnet_name[s.id.as_str()], "zone": s.zone, "cidr": s.cidr,
                "type": if s.public { "public" } else { "private" }})
        })
        .collect();
    let mut network = Map::new();
    network.insert("vpcCidr".into(), json!(vpc_cidr));
    network.insert("subnets".into(), Value::Array(subnet_values));
    if let Some(pod) = kubeadm.get("networking.podSubnet") {
        network.insert("podCidr".into(), json!(pod));
    }
    let service = kubeadm.get("networking.serviceSubnet").unwrap_or("10.96.0.0/12".into());
    network.insert("serviceCidr".into(), json!(service));
    let file = json!({
        "apiVersion": crate::spec::API_VERSION,
        "kind": "Cluster",
        "metadata": {"name": name, "annotations": {
            TAG_ANNOTATION: tag,
            MACHINES_ANNOTATION: groups.record.join(" "),
            KUBEADM_NAME_ANNOTATION: kubeadm.get("clusterName").unwrap_or_else(|| "kubernetes".into()),
            "pinfleet.dev/imported-from": format!("ec2:{tag} {vpc_id}; {}", seen.api),
        }},
        "spec": {
            "owner": owner,
            "cloud": {"region": seen.region, "zones": groups.zones},
            "stateStore": opts.state_store,
            "kubernetesVersion": version,
            "network": network,
            "api": api,
            "instanceGroups": groups.values,
        }
    });
    let text = render(&file, &name, &tag, &unmapped, &notes)?;
    crate::spec::load_source(&opts.file, &text, &opts.validation).map_err(|d| {
        anyhow::anyhow!(
            "the cluster file the import made does not pass pinfleet's validation, so it was not written (the places below are in the file as it would have been written):\n{d}"
        )
    })?;
    Ok(Imported { name, text, unmapped, notes })
}

/// The file's text: what it is, what was not carried over, the notes.
fn render(file: &Value, name: &str, tag: &str, unmapped: &[Finding], notes: &[String]) -> anyhow::Result<String> {
    let body = serde_saphyr::to_string(file).map_err(|e| anyhow::anyhow!("writing the file: {e}"))?;
    let mut text = String::new();
    let mut line = |s: &str| {
        text.push_str("# ");
        text.push_str(&crate::escape::escaped(s, false));
        text.push('\n');
    };
    line(&format!("{name}: the kubeadm cluster on the machines tagged {tag}, as `pinfleet import aws` maps it."));
    if unmapped.is_empty() {
        line("Everything kubeadm and EC2 show is carried over.");
    } else {
        line("Not carried over:");
        for f in unmapped {
            line(&format!("  {f}"));
        }
    }
    for n in notes {
        line(n);
    }
    text.push_str(&body);
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBEADM: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.33.4\nclusterName: lab\ncontrolPlaneEndpoint: api.lab.example.com:6443\ncertificatesDir: /etc/kubernetes/pki\nimageRepository: registry.k8s.io\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\napiServer:\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"30\"\n";

    pub fn seen() -> Seen {
        let m = |id: &str, t: &str, subnet: &str, asg: Option<&str>| Machine {
            id: id.into(),
            instance_type: t.into(),
            image: "ami-0123456789abcdef0".into(),
            vpc: "vpc-1".into(),
            subnet: subnet.into(),
            asg: asg.map(str::to_string),
        };
        let n = |name: &str, id: &str, cp: bool| Node {
            name: name.into(),
            instance: Some(id.into()),
            labels: if cp {
                [(CONTROL_PLANE_LABEL.to_string(), String::new())].into()
            } else {
                [("example.com/pool".to_string(), "general".to_string())].into()
            },
            taints: vec![],
        };
        Seen {
            tag: ("cluster".into(), "lab".into()),
            region: "us-east-1".into(),
            api: "https://api.lab.example.com:6443".into(),
            machines: vec![
                m("i-c1", "m6i.large", "subnet-a", None),
                m("i-w1", "m6i.xlarge", "subnet-a", None),
                m("i-w2", "m6i.xlarge", "subnet-b", None),
                m("i-g1", "g5.xlarge", "subnet-b", Some("lab-gpu")),
            ],
            vpcs: vec![("vpc-1".into(), "10.0.0.0/16".into())],
            subnets: vec![
                Subnet { id: "subnet-a".into(), cidr: "10.0.1.0/24".into(), zone: "us-east-1a".into(), public: false },
                Subnet { id: "subnet-b".into(), cidr: "10.0.2.0/24".into(), zone: "us-east-1b".into(), public: false },
                Subnet { id: "subnet-p".into(), cidr: "10.0.0.0/24".into(), zone: "us-east-1a".into(), public: true },
            ],
            nodes: vec![
                n("ip-10-0-1-10", "i-c1", true),
                n("ip-10-0-1-11", "i-w1", false),
                n("ip-10-0-2-12", "i-w2", false),
                n("ip-10-0-2-13", "i-g1", false),
            ],
            kubeadm: Some(KUBEADM.into()),
        }
    }

    fn opts() -> Options {
        Options {
            owner: Some("platform".into()),
            state_store: "s3://lab-state/pinfleet".into(),
            file: "lab.yaml".into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_kubeadm_cluster_maps_its_machines_by_role_and_group_and_names_what_it_cannot_carry() {
        let got = import(&seen(), &opts()).unwrap();
        insta::assert_snapshot!("kubeadm_on_ec2", got.text);
        let cluster =
            crate::spec::load_source(std::path::Path::new("lab.yaml"), &got.text, &Default::default()).unwrap().cluster;
        let record = parse_machines(&cluster.metadata.annotations[MACHINES_ANNOTATION]);
        assert_eq!(record["i-c1"], "control-plane");
        assert_eq!(record["i-g1"], "lab-gpu", "an Auto Scaling group names its group");
        assert_eq!(record["i-w1"], "m6i-xlarge");
        assert!(got.unmapped.iter().any(|f| f.path == "ClusterConfiguration.apiServer.extraArgs"));
    }

    #[test]
    fn what_cannot_come_along_is_refused_before_anything_is_written() {
        let mut s = seen();
        s.kubeadm = None;
        let e = import(&s, &opts()).unwrap_err().to_string();
        assert!(e.contains("kube-system/kubeadm-config: no such ConfigMap"), "{e}");
        let mut s = seen();
        s.kubeadm = Some(
            KUBEADM.replace("networking:", "etcd:\n  external:\n    endpoints: [https://10.0.9.9:2379]\nnetworking:"),
        );
        let e = import(&s, &opts()).unwrap_err().to_string();
        assert!(e.contains("ClusterConfiguration.etcd.external: an etcd outside the control plane"), "{e}");
        let mut s = seen();
        s.machines.remove(0);
        let e = import(&s, &opts()).unwrap_err().to_string();
        assert!(e.contains("Node ip-10-0-1-10: spec.providerID: its machine i-c1 is not tagged cluster=lab"), "{e}");
        let mut s = seen();
        s.vpcs.push(("vpc-2".into(), "10.1.0.0/16".into()));
        assert!(import(&s, &opts()).unwrap_err().to_string().contains("2 VPCs (vpc-1, vpc-2)"));
        assert_eq!(instance_of("aws:///us-east-1a/i-0abc"), Some("i-0abc".into()));
        assert_eq!(instance_of("gce://p/z/n"), None);
        assert!(parse_tag("=x").is_err() && parse_tag("k=").is_ok());
    }
}
