//! Per-node fit of a workload's pods (pure): whether a member's nodes can
//! each hold whole pods — all a pod asks, cpu, memory, a pod's slot and
//! its devices, on one node — not only whether the member's total can.
//!
//! ```text
//! member views (each Ready node's allocatable, and whether it is tainted)
//!   + what placed work already holds there (packed the same way)
//!     │ pack: first-fit decreasing, pods onto nodes
//!     ▼
//! an assignment (pod → node), or why not (the resource, a pod's ask, the
//! nodes' free amounts)
//! ```
//!
//! The scheduler binds a pod to one node: two pods of 8 GPUs do not run on
//! four nodes of 4 though the member has 16, and a worker of 6 cpu and an
//! A10G does not run on A10G nodes of 4 cpu however many cpus the member's
//! other nodes have. [`fits`] is that one rule (kube-scheduler's
//! NodeResourcesFit and TaintToleration, as far as the gateway sees a
//! node); placement asks [`pack`] and [`count`] before it writes work to a
//! member, and submission asks [`never`] whether any member, empty, could
//! ever hold it.

use super::quota::{Amount, Resource, FLAVORS, RESOURCES};

/// Pods of one shape: how many, and what each asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub pods: u64,
    pub per_pod: Amount,
}

/// A node as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Node {
    /// What it offers: its allocatable, or what placed work leaves of it.
    pub free: Amount,
    /// Tainted NoSchedule or NoExecute (a GPU group's nodes): work that
    /// asks for no accelerator does not tolerate it (a pod given devices
    /// is given their toleration).
    pub tainted: bool,
}

impl Node {
    /// An untainted node offering `free`.
    pub fn new(free: Amount) -> Node {
        Node { free, tainted: false }
    }

    /// A tainted node offering `free`.
    pub fn tainted(free: Amount) -> Node {
        Node { free, tainted: true }
    }
}

/// Why a workload's pods do not fit a member's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub resource: Resource,
    /// What one pod that found no node asks.
    pub asks: u64,
    /// How many pods of that ask the workload has.
    pub pods: u64,
    /// Each node's free amount of the resource, largest first (the nodes
    /// the pod may land on).
    pub free: Vec<u64>,
    /// No node's labels let the pod land there (its node selector or
    /// required node affinity): whatever the nodes have free.
    pub unmatched: bool,
}

impl Unfit {
    /// `2 pods of 8 nvidia.com/gpu A100 fit on no node (free per node: 4, 4, 4, 4)`.
    pub fn message(&self) -> String {
        let r = self.resource;
        let plural = if self.pods == 1 { "" } else { "s" };
        if self.unmatched {
            return format!(
                "{} pod{plural} of {} {} match no node's labels (their nodeSelector or node affinity)",
                self.pods,
                r.show(self.asks),
                r.long()
            );
        }
        let free: Vec<String> = self.free.iter().map(|v| r.show(*v)).collect();
        format!(
            "{} pod{plural} of {} {} fit on no node (free per node: {})",
            self.pods,
            r.show(self.asks),
            r.long(),
            if free.is_empty() { "no node offers it".to_string() } else { free.join(", ") }
        )
    }
}

/// At most this many pods are packed one by one; work past it is refused
/// by the count (a member's nodes hold a few hundred pods each).
pub const MAX_PACKED: u64 = 100_000;

fn asks_accelerators(a: &Amount) -> bool {
    FLAVORS.iter().any(|r| a.get(*r) > 0)
}

/// Whether the node takes the pod at all, whatever it has left: work that
/// asks for no accelerator stays off tainted nodes (TaintToleration: its
/// pods do not tolerate a GPU group's taint).
fn admits(pod: &Amount, node: &Node) -> bool {
    asks_accelerators(pod) || !node.tainted
}

/// Whether a pod lands on a node, as kube-scheduler's filters would let
/// it: the node admits it, and everything it asks — cpu, memory, a pod's
/// slot, its devices (of the product the node offers) — fits what the
/// node has left, together (NodeResourcesFit).
pub fn fits(pod: &Amount, node: &Node) -> bool {
    admits(pod, node) && RESOURCES.iter().all(|r| pod.get(*r) <= node.free.get(*r))
}

/// Every pod of `shapes`, one entry each with its shape's index, largest
/// first (its devices, then its cpu, then its memory; then by shape
/// order: deterministic).
fn pods_of(shapes: &[Shape]) -> Result<Vec<(usize, Amount)>, Unfit> {
    let mut pods: Vec<(usize, Amount)> = Vec::new();
    let mut total: u64 = 0;
    for (i, s) in shapes.iter().enumerate() {
        total = total.saturating_add(s.pods);
        if total > MAX_PACKED {
            let r = FLAVORS.into_iter().find(|r| s.per_pod.get(*r) > 0).unwrap_or(Resource::Pods);
            return Err(Unfit { resource: r, asks: s.per_pod.get(r), pods: s.pods, free: vec![], unmatched: false });
        }
        pods.extend(std::iter::repeat_n((i, s.per_pod), usize::try_from(s.pods).unwrap_or(0)));
    }
    let devices = |a: &Amount| FLAVORS.iter().fold(0u64, |n, r| n.saturating_add(a.get(*r)));
    pods.sort_by_key(|(_, a)| std::cmp::Reverse((devices(a), a.cpu, a.memory)));
    Ok(pods)
}

/// The resource that keeps `pod` off every node it may land on: among
/// the nodes that offer each device it asks, the first resource none has
/// enough of (its devices first), else the one most of them lack.
fn blame(pod: &Amount, nodes: &[Node]) -> Resource {
    let flavors: Vec<Resource> = FLAVORS.into_iter().filter(|r| pod.get(*r) > 0).collect();
    let candidates: Vec<&Node> =
        nodes.iter().filter(|n| admits(pod, n) && flavors.iter().all(|r| n.free.get(*r) > 0)).collect();
    let asked =
        || FLAVORS.into_iter().chain([Resource::Cpu, Resource::Memory, Resource::Pods]).filter(|r| pod.get(*r) > 0);
    if candidates.is_empty() {
        return flavors.first().copied().or_else(|| asked().next()).unwrap_or(Resource::Pods);
    }
    let short = |r: Resource| candidates.iter().filter(|n| pod.get(r) > n.free.get(r)).count();
    asked()
        .find(|r| short(*r) == candidates.len())
        .or_else(|| asked().max_by_key(|r| short(*r)))
        .unwrap_or(Resource::Pods)
}

/// Which nodes a shape's pods may land on by their labels: `may(shape,
/// node)`, indices into the shapes and nodes given.
pub type Reach<'a> = &'a dyn Fn(usize, usize) -> bool;

/// Every shape reaches every node.
pub fn anywhere(_: usize, _: usize) -> bool {
    true
}

/// Packs the pods of `shapes` onto the nodes' free amounts, first-fit
/// decreasing: each pod, largest first, on the first node it [`fits`]. On
/// success the nodes' amounts are what is left and the result is the node
/// of each pod (largest first); on failure the nodes are untouched.
/// First-fit decreasing may miss a packing that exists (never the
/// reverse): for pods of one shape it finds one whenever one exists.
pub fn pack(nodes: &mut [Node], shapes: &[Shape]) -> Result<Vec<usize>, Unfit> {
    pack_where(nodes, shapes, &anywhere)
}

/// [`pack`], each pod only onto a node its shape reaches (`may`: its node
/// selector and required node affinity against the node's labels).
pub fn pack_where(nodes: &mut [Node], shapes: &[Shape], may: Reach<'_>) -> Result<Vec<usize>, Unfit> {
    let pods = pods_of(shapes)?;
    let mut free: Vec<Node> = nodes.to_vec();
    let mut at = Vec::with_capacity(pods.len());
    for (si, p) in &pods {
        match free.iter().enumerate().position(|(ni, n)| may(*si, ni) && fits(p, n)) {
            Some(i) => {
                if let Some(n) = free.get_mut(i) {
                    n.free = n.free.minus(*p);
                }
                at.push(i);
            }
            None => {
                let same = pods.iter().filter(|(sj, _)| sj == si).count() as u64;
                let reached: Vec<Node> =
                    free.iter().enumerate().filter(|(ni, _)| may(*si, *ni)).map(|(_, n)| *n).collect();
                if reached.is_empty() {
                    let r = FLAVORS.into_iter().find(|r| p.get(*r) > 0).unwrap_or(Resource::Pods);
                    return Err(Unfit { resource: r, asks: p.get(r), pods: same, free: vec![], unmatched: true });
                }
                let r = blame(p, &reached);
                let same = pods.iter().filter(|(_, q)| q.get(r) == p.get(r)).count() as u64;
                let mut left: Vec<u64> = nodes
                    .iter()
                    .enumerate()
                    .filter(|(ni, n)| may(*si, *ni) && admits(p, n))
                    .map(|(_, n)| n.free.get(r))
                    .collect();
                left.sort_by_key(|v| std::cmp::Reverse(*v));
                return Err(Unfit { resource: r, asks: p.get(r), pods: same, free: left, unmatched: false });
            }
        }
    }
    nodes.copy_from_slice(&free);
    Ok(at)
}

/// Takes what placed work holds from the nodes, as [`pack`] would have
/// put it; what no longer fits (a node gone since) is taken pod by pod
/// where it fits, and the rest left out (the member's total still counts it).
pub fn occupy(nodes: &mut [Node], shapes: &[Shape]) {
    occupy_where(nodes, shapes, &anywhere)
}

/// [`occupy`] where each shape reaches only the nodes `may` says.
pub fn occupy_where(nodes: &mut [Node], shapes: &[Shape], may: Reach<'_>) {
    if pack_where(nodes, shapes, may).is_ok() {
        return;
    }
    for (si, p) in pods_of(shapes).unwrap_or_default() {
        if let Some(n) = nodes.iter_mut().enumerate().find(|(ni, n)| may(si, *ni) && fits(&p, n)).map(|(_, n)| n) {
            n.free = n.free.minus(p);
        }
    }
}

/// How many pods of one shape the nodes hold (a divided workload's
/// capacity on a member): on each node it may land on, as many as all
/// it asks fits, together.
pub fn count(nodes: &[Node], per_pod: &Amount) -> u64 {
    count_where(nodes, per_pod, &|_| true)
}

/// [`count`] on the nodes `may` lets the pods reach.
pub fn count_where(nodes: &[Node], per_pod: &Amount, may: &dyn Fn(usize) -> bool) -> u64 {
    nodes
        .iter()
        .enumerate()
        .filter(|(i, n)| may(*i) && admits(per_pod, n))
        .map(|(_, n)| {
            RESOURCES
                .iter()
                .filter(|r| per_pod.get(**r) > 0)
                .map(|r| n.free.get(*r).checked_div(per_pod.get(*r)).unwrap_or(u64::MAX))
                .min()
                .unwrap_or(u64::MAX)
        })
        .fold(0u64, u64::saturating_add)
}

/// A member as submission sees it: its name and each Ready node's
/// (name, allocatable and taint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub nodes: Vec<(String, Node)>,
}

/// Why a workload can never run on the fleet as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Never {
    /// The resource no node (or member) has enough of.
    pub resource: Resource,
    /// The shape (its index in the shapes given) whose pods fit no node,
    /// when it is one shape's pods together (not a flavor's count).
    pub shape: Option<usize>,
    pub message: String,
}

/// Why a workload can never run on the fleet as it is, whatever
/// finishes: a pod asks more of a flavor than any one node offers; a pod
/// that asks devices fits no node with them (all it asks, together); or
/// (`whole`: placed on one member) the gang asks more than any member's
/// nodes hold, or its pods of one shape fit on no member's empty nodes.
/// None: it may wait for room.
pub fn never(members: &[Member], shapes: &[Shape], whole: bool) -> Option<Never> {
    let all = || members.iter().flat_map(|m| m.nodes.iter().map(move |(n, a)| (n.as_str(), m.name.as_str(), a)));
    for r in FLAVORS {
        let Some(ask) = shapes.iter().filter(|s| s.pods > 0).map(|s| s.per_pod.get(r)).max().filter(|a| *a > 0) else {
            continue;
        };
        let largest = all().map(|(n, m, a)| (a.free.get(r), n, m)).max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
        let Some((node_has, node, member)) = largest.filter(|(v, _, _)| *v > 0) else {
            // No node offers it: the fleet's total says so (admission::never).
            continue;
        };
        if ask > node_has {
            return Some(Never {
                resource: r,
                shape: None,
                message: format!(
                    "a pod asks {ask} {}, more than any node offers (the largest, {node} on member {member}, has {node_has}): it can never be scheduled",
                    r.long()
                ),
            });
        }
    }
    if let Some(n) = plain_pod_never(members, shapes) {
        return Some(n);
    }
    // A pod that asks devices lands only on a node that has them and room
    // for the rest of what it asks: its cpu beside its GPU.
    for (i, s) in shapes.iter().enumerate().filter(|(_, s)| s.pods > 0 && asks_accelerators(&s.per_pod)) {
        let p = &s.per_pod;
        if all().any(|(_, _, n)| fits(p, n)) {
            continue;
        }
        let flavors: Vec<Resource> = FLAVORS.into_iter().filter(|r| p.get(*r) > 0).collect();
        let devices = flavors.iter().map(|r| format!("{} {}", r.show(p.get(*r)), r.long())).collect::<Vec<_>>();
        let with = flavors.iter().map(|r| r.long()).collect::<Vec<_>>().join(" and ");
        let candidates: Vec<(&str, &str, &Node)> =
            all().filter(|(_, _, n)| flavors.iter().all(|r| n.free.get(*r) > 0)).collect();
        if candidates.is_empty() {
            if !flavors.iter().all(|r| all().any(|(_, _, n)| n.free.get(*r) > 0)) {
                // A flavor no node offers: the fleet's total says so.
                continue;
            }
            return Some(Never {
                resource: flavors.first().copied().unwrap_or(Resource::Pods),
                shape: Some(i),
                message: format!(
                    "a pod asks {} together: no node offers them all: it can never be scheduled",
                    devices.join(" and ")
                ),
            });
        }
        let short = [Resource::Cpu, Resource::Memory, Resource::Pods]
            .into_iter()
            .filter(|r| p.get(*r) > 0)
            .find(|r| candidates.iter().all(|(_, _, n)| p.get(*r) > n.free.get(*r)));
        let message = match short {
            Some(r) => {
                let (has, node, member) = candidates
                    .iter()
                    .map(|(n, m, a)| (a.free.get(r), *n, *m))
                    .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
                    .unwrap_or((0, "", ""));
                format!(
                    "a pod asks {} {} beside {}, more than any node with {with} offers (the largest, {node} on member {member}, has {}): it can never be scheduled",
                    r.show(p.get(r)),
                    r.long(),
                    devices.join(" and "),
                    r.show(has)
                )
            }
            None => format!(
                "a pod asks {} together: no node with {with} offers all of it at once: it can never be scheduled",
                p.show()
            ),
        };
        return Some(Never { resource: short.unwrap_or(Resource::Cpu), shape: Some(i), message });
    }
    if !whole {
        return None;
    }
    for r in FLAVORS {
        if !shapes.iter().any(|s| s.pods > 0 && s.per_pod.get(r) > 0) {
            continue;
        }
        let total = shapes.iter().fold(0u64, |t, s| t.saturating_add(s.per_pod.get(r).saturating_mul(s.pods)));
        let member_total = |m: &Member| m.nodes.iter().fold(0u64, |t, (_, a)| t.saturating_add(a.free.get(r)));
        let Some(biggest) =
            members.iter().max_by(|a, b| member_total(a).cmp(&member_total(b)).then(b.name.cmp(&a.name)))
        else {
            continue;
        };
        let has = member_total(biggest);
        if has == 0 {
            // No member offers it: the fleet's total says so.
            continue;
        }
        let nodes_of = |m: &Member| m.nodes.iter().filter(|(_, a)| a.free.get(r) > 0).count();
        if total > has {
            let n = nodes_of(biggest);
            return Some(Never {
                resource: r,
                shape: None,
                message: format!(
                    "the gang asks {total} {} at once, more than any member holds (the largest, {}, has {has} on {n} node{}): a gang is placed whole on one member, it can never be placed",
                    r.long(),
                    biggest.name,
                    if n == 1 { "" } else { "s" }
                ),
            });
        }
    }
    gang_never(members, shapes)
}

/// A gang that asks devices, every role's pods together (a gang runs
/// whole or not at all): placement packs it so on one member's nodes, so
/// a gang that packs on no empty member is never placed.
fn gang_never(members: &[Member], shapes: &[Shape]) -> Option<Never> {
    let asking: Vec<(usize, &Shape)> =
        shapes.iter().enumerate().filter(|(_, s)| s.pods > 0 && asks_accelerators(&s.per_pod)).collect();
    let offered = |r: Resource| members.iter().any(|m| m.nodes.iter().any(|(_, a)| a.free.get(r) > 0));
    let all_offered = asking.iter().all(|(_, s)| FLAVORS.iter().all(|r| s.per_pod.get(*r) == 0 || offered(*r)));
    if !asking.is_empty() && all_offered {
        let mut best: Option<(&Member, Unfit)> = None;
        for m in members {
            let mut nodes: Vec<Node> = m.nodes.iter().map(|(_, a)| *a).collect();
            match pack(&mut nodes, shapes) {
                Ok(_) => return None,
                Err(u) => {
                    let held = |u: &Unfit| u.free.iter().fold(0u64, |t, v| t.saturating_add(*v));
                    if best.as_ref().is_none_or(|(_, b)| held(&u) > held(b)) {
                        best = Some((m, u));
                    }
                }
            }
        }
        if let Some((m, u)) = best {
            // The shape of the pod that found no node.
            let i = shapes.iter().position(|s| s.pods > 0 && s.per_pod.get(u.resource) == u.asks);
            return Some(Never {
                resource: u.resource,
                shape: if u.resource.is_accelerator() { None } else { i },
                message: format!(
                    "its {} pod{} of {} {} fit on no member's nodes (the largest, {}, has {}): a gang is placed whole on one member, it can never be placed",
                    u.pods,
                    if u.pods == 1 { "" } else { "s" },
                    u.resource.show(u.asks),
                    u.resource.long(),
                    m.name,
                    node_list(u.resource, &u.free)
                ),
            });
        }
    }
    None
}

/// A pod that asks no device lands only on an untainted node with room
/// for all it asks (the fleet's total counts GPU nodes' cpu too): why
/// one never does, if one never does.
fn plain_pod_never(members: &[Member], shapes: &[Shape]) -> Option<Never> {
    let all = || members.iter().flat_map(|m| m.nodes.iter().map(move |(n, a)| (n.as_str(), m.name.as_str(), a)));
    for (i, s) in shapes.iter().enumerate().filter(|(_, s)| s.pods > 0 && !asks_accelerators(&s.per_pod)) {
        let p = &s.per_pod;
        let open: Vec<(&str, &str, &Node)> = all().filter(|(_, _, n)| admits(p, n)).collect();
        if open.is_empty() || open.iter().any(|(_, _, n)| fits(p, n)) {
            // No node without a taint: the fleet's total says so.
            continue;
        }
        let r = [Resource::Cpu, Resource::Memory, Resource::Pods]
            .into_iter()
            .filter(|r| p.get(*r) > 0)
            .find(|r| open.iter().all(|(_, _, n)| p.get(*r) > n.free.get(*r)))
            .unwrap_or(Resource::Cpu);
        let (has, node, member) = open
            .iter()
            .map(|(n, m, a)| (a.free.get(r), *n, *m))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)))
            .unwrap_or((0, "", ""));
        return Some(Never {
            resource: r,
            shape: Some(i),
            message: format!(
                "a pod asks {} {}, more than any node it may run on offers (nodes without a taint; the largest, {node} on member {member}, has {}): it can never be scheduled",
                r.show(p.get(r)),
                r.long(),
                r.show(has)
            ),
        });
    }
    None
}

/// `4 nodes of 4` or `nodes of 8, 4`.
fn node_list(r: Resource, free: &[u64]) -> String {
    match free {
        [] => "no node".into(),
        [one] => format!("1 node of {}", r.show(*one)),
        [first, rest @ ..] if rest.iter().all(|v| v == first) => format!("{} nodes of {}", free.len(), r.show(*first)),
        _ => format!("nodes of {}", free.iter().map(|v| r.show(*v)).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GPU node: `n` A100s, 96 cpu, 1 TiB, 110 pods, tainted.
    fn gpus(n: u64) -> Node {
        Node::tainted(Amount::new(96_000, 1 << 40, 110).with(Resource::GpuA100, n))
    }

    fn shape(pods: u64, g: u64) -> Shape {
        Shape { pods, per_pod: Amount::new(1000, 1 << 30, 1).with(Resource::GpuA100, g) }
    }

    fn left(nodes: &[Node], r: Resource) -> Vec<u64> {
        nodes.iter().map(|n| n.free.get(r)).collect()
    }

    #[test]
    fn two_pods_of_eight_do_not_fit_four_nodes_of_four() {
        let mut nodes = vec![gpus(4); 4];
        let e = pack(&mut nodes, &[shape(2, 8)]).unwrap_err();
        assert_eq!(e.message(), "2 pods of 8 nvidia.com/gpu A100 fit on no node (free per node: 4, 4, 4, 4)");
        assert_eq!(nodes, vec![gpus(4); 4], "a failed pack takes nothing");
        // The member's total (16) would have said yes; two nodes of 8 do.
        let mut nodes = vec![gpus(8), gpus(8)];
        assert_eq!(pack(&mut nodes, &[shape(2, 8)]).unwrap(), vec![0, 1]);
        assert_eq!(left(&nodes, Resource::GpuA100), [0, 0]);
        assert_eq!(left(&nodes, Resource::Cpu), [95_000, 95_000], "each pod's cpu on its node");
    }

    #[test]
    fn the_largest_pods_go_first_and_pods_without_devices_stay_off_tainted_nodes() {
        // First fit in submission order would put the 2 on node 0 (8) and
        // leave no node for the 8; decreasing order packs both.
        let cpu_node = Node::new(Amount::new(16_000, 64 << 30, 110));
        let mut nodes = vec![gpus(8), gpus(2), cpu_node];
        let at = pack(&mut nodes, &[shape(1, 2), shape(1, 8), shape(5, 0)]).unwrap();
        assert_eq!(at, vec![0, 1, 2, 2, 2, 2, 2], "the pods without devices on the untainted node");
        assert_eq!(left(&nodes, Resource::GpuA100), [0, 0, 0]);
        assert_eq!(nodes[2].free.cpu, 11_000);
        // Without an untainted node they fit nowhere.
        let e = pack(&mut vec![gpus(8)], &[shape(1, 0)]).unwrap_err();
        assert_eq!(e.message(), "1 pod of 1 cpu fit on no node (free per node: no node offers it)");
    }

    /// Issue: a worker of 1 A10G and 6 cpu was placed on a member whose
    /// A10G nodes have 4 cpu (its other nodes many): its pod stayed Pending.
    #[test]
    fn a_pod_fits_a_node_only_when_all_it_asks_fits_that_node() {
        let a10g = Node::tainted(Amount::new(4_000, 16 << 30, 110).with(Resource::GpuA10g, 1));
        let big = Node::new(Amount::new(64_000, 256 << 30, 110));
        let worker = Amount::new(6_000, 8 << 30, 1).with(Resource::GpuA10g, 1);
        assert!(!fits(&worker, &a10g) && !fits(&worker, &big));
        let e = pack(&mut vec![a10g, a10g, big], &[Shape { pods: 1, per_pod: worker }]).unwrap_err();
        assert_eq!(e.message(), "1 pod of 6 cpu fit on no node (free per node: 64, 4, 4)");
        assert_eq!(count(&[a10g, a10g, big], &worker), 0);
        assert_eq!(count(&[a10g, a10g, big], &worker.with(Resource::Cpu, 2_000)), 2);
        let m = vec![Member { name: "g".into(), nodes: vec![("g-0".into(), a10g), ("g-1".into(), big)] }];
        let n = never(&m, &[Shape { pods: 1, per_pod: worker }], true).unwrap();
        assert_eq!((n.resource, n.shape), (Resource::Cpu, Some(0)));
        assert_eq!(
            n.message,
            "a pod asks 6 cpu beside 1 nvidia.com/gpu A10G, more than any node with nvidia.com/gpu A10G offers (the largest, g-0 on member g, has 4): it can never be scheduled"
        );
        // A pod without devices: its cpu on one node too.
        let plain = Amount::new(20_000, 1 << 30, 1);
        assert_eq!(count(&[big, big], &plain), 6);
        assert_eq!(count(&[Node::new(Amount::new(16_000, 64 << 30, 110))], &plain), 0);
    }

    #[test]
    fn placed_work_takes_its_nodes_first() {
        let mut nodes = vec![gpus(8), gpus(8)];
        occupy(&mut nodes, &[shape(1, 4)]);
        assert_eq!(left(&nodes, Resource::GpuA100), [4, 8]);
        assert!(pack(&mut nodes.clone(), &[shape(2, 8)]).is_err(), "8 + 8 no longer fit 4 + 8");
        assert_eq!(count(&nodes, &Amount::new(1000, 0, 1).with(Resource::GpuA100, 4)), 3);
        assert_eq!(count(&nodes, &Amount::new(1000, 0, 1)), 0, "tainted: no room for work without devices");
    }

    #[test]
    fn flavors_are_packed_apart() {
        let neuron_node = Node::tainted(Amount::new(128_000, 512 << 30, 110).with(Resource::Neuron, 16));
        let mut nodes = vec![gpus(8), neuron_node];
        let neuron = Shape { pods: 1, per_pod: Amount::new(0, 0, 1).with(Resource::Neuron, 16) };
        assert_eq!(pack(&mut nodes, &[shape(1, 8), neuron]).unwrap().len(), 2);
        let e = pack(&mut vec![gpus(8)], &[neuron]).unwrap_err();
        assert_eq!(e.resource, Resource::Neuron);
        assert_eq!(e.message(), "1 pod of 16 aws.amazon.com/neuron fit on no node (free per node: 0)");
    }

    fn members() -> Vec<Member> {
        vec![
            Member {
                name: "cpu".into(),
                nodes: vec![("cpu-node-0".into(), Node::new(Amount::new(16000, 64 << 30, 110)))],
            },
            Member { name: "gpu".into(), nodes: (0..4).map(|i| (format!("gpu-node-{i}"), gpus(4))).collect() },
            Member { name: "small".into(), nodes: vec![("small-node-0".into(), gpus(2))] },
        ]
    }

    fn message(n: Option<Never>) -> Option<(Resource, String)> {
        n.map(|n| (n.resource, n.message))
    }

    #[test]
    fn what_no_member_can_ever_hold_is_named_with_the_largest() {
        let m = members();
        assert_eq!(
            message(never(&m, &[shape(1, 8)], true)),
            Some((
                Resource::GpuA100,
                "a pod asks 8 nvidia.com/gpu A100, more than any node offers (the largest, gpu-node-0 on member gpu, has 4): it can never be scheduled".into()
            ))
        );
        assert_eq!(
            message(never(&m, &[shape(5, 4)], true)),
            Some((
                Resource::GpuA100,
                "the gang asks 20 nvidia.com/gpu A100 at once, more than any member holds (the largest, gpu, has 16 on 4 nodes): a gang is placed whole on one member, it can never be placed".into()
            ))
        );
        // 5 pods of 3: 15 ≤ 16, but a node of 4 holds one pod of 3.
        assert_eq!(
            message(never(&m, &[shape(5, 3)], true)),
            Some((
                Resource::GpuA100,
                "its 5 pods of 3 nvidia.com/gpu A100 fit on no member's nodes (the largest, gpu, has 4 nodes of 4): a gang is placed whole on one member, it can never be placed".into()
            ))
        );
        // A gang's roles together: a master of 3 and 4 workers of 3 each
        // fit alone, but 5 pods of 3 do not fit 4 nodes of 4.
        assert_eq!(never(&m, &[shape(1, 3)], true), None);
        assert_eq!(never(&m, &[shape(4, 3)], true), None);
        assert_eq!(
            message(never(&m, &[shape(1, 3), shape(4, 3)], true)),
            Some((
                Resource::GpuA100,
                "its 5 pods of 3 nvidia.com/gpu A100 fit on no member's nodes (the largest, gpu, has 4 nodes of 4): a gang is placed whole on one member, it can never be placed".into()
            ))
        );
        // A divided workload's pods need only fit a node each.
        assert_eq!(never(&m, &[shape(5, 4)], false), None);
        // What fits an empty member waits for room, it is not refused.
        assert_eq!(never(&m, &[shape(4, 4)], true), None);
        // A flavor no node offers is the fleet's total's to refuse.
        assert_eq!(
            never(&m, &[Shape { pods: 1, per_pod: Amount::new(0, 0, 1).with(Resource::Neuron, 1) }], true),
            None
        );
        assert_eq!(never(&m, &[shape(3, 0)], true), None);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// A fit reported is a real assignment: every packed pod is on
            /// a node, no node gives more than it had, and what is left is
            /// what it had less what it holds. One shape that a brute force
            /// can pack is packed.
            #[test]
            fn a_fit_is_never_reported_that_no_assignment_achieves(
                nodes in proptest::collection::vec((0u64..10, 0u64..6, 0u64..5, any::<bool>()), 0..6),
                shapes in proptest::collection::vec((0u64..5, 0u64..9, 0u64..4, 0u64..3), 0..4),
            ) {
                let nodes: Vec<Node> = nodes
                    .iter()
                    .map(|(g, n, c, t)| Node {
                        free: Amount::new(c * 1000, 1 << 30, 110).with(Resource::GpuA100, *g).with(Resource::Neuron, *n),
                        tainted: *t,
                    })
                    .collect();
                let shapes: Vec<Shape> = shapes
                    .iter()
                    .map(|(p, g, n, c)| Shape {
                        pods: *p,
                        per_pod: Amount::new(c * 1000, 0, 1).with(Resource::GpuA100, *g).with(Resource::Neuron, *n),
                    })
                    .collect();
                let mut left = nodes.clone();
                if let Ok(at) = pack(&mut left, &shapes) {
                    let pods = pods_of(&shapes).unwrap();
                    prop_assert_eq!(at.len(), pods.len());
                    let mut held = vec![Amount::default(); nodes.len()];
                    for ((_, p), i) in pods.iter().zip(&at) {
                        prop_assert!(admits(p, &nodes[*i]), "pod on a node that does not admit it");
                        held[*i] = held[*i].plus(*p);
                    }
                    for i in 0..nodes.len() {
                        for r in RESOURCES {
                            prop_assert!(held[i].get(r) <= nodes[i].free.get(r), "node {i} over in {r:?}");
                            prop_assert_eq!(left[i].free.get(r), nodes[i].free.get(r) - held[i].get(r));
                        }
                    }
                } else {
                    prop_assert_eq!(&left, &nodes);
                }
                // One shape: a fit exists iff the nodes hold as many pods.
                if let [s] = shapes.as_slice() {
                    prop_assert_eq!(pack(&mut nodes.clone(), &shapes).is_ok(), count(&nodes, &s.per_pod) >= s.pods);
                }
            }
        }
    }
}
