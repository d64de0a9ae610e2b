//! Per-node fit of a gang's accelerators (pure): whether a member's nodes
//! can each hold whole pods, not only whether the member's total can.
//!
//! ```text
//! member views (each Ready node's allocatable accelerators)
//!   + what placed gangs already hold there (packed the same way)
//!     │ pack: first-fit decreasing, pods onto nodes
//!     ▼
//! an assignment (pod → node), or why not (the flavor, a pod's ask, the
//! nodes' free amounts)
//! ```
//!
//! The scheduler binds a pod to one node: two pods of 8 GPUs do not run on
//! four nodes of 4 though the member has 16. Placement asks [`pack`] before
//! it writes a gang to a member; submission asks [`never`] whether any
//! member, empty, could ever hold it. Only accelerators are packed here
//! (cpu and memory are counted per member as before): a device is whole,
//! and a node offers a handful.

use super::quota::{Amount, Resource, FLAVORS};

/// Pods of one shape: how many, and what each asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub pods: u64,
    pub per_pod: Amount,
}

/// Why a gang's pods do not fit a member's nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unfit {
    pub resource: Resource,
    /// What one pod that found no node asks.
    pub asks: u64,
    /// How many pods of that ask the gang has.
    pub pods: u64,
    /// Each node's free amount of the resource, largest first.
    pub free: Vec<u64>,
}

impl Unfit {
    /// `2 pods of 8 nvidia.com/gpu A100 fit on no node (free per node: 4, 4, 4, 4)`.
    pub fn message(&self) -> String {
        let free: Vec<String> = self.free.iter().map(u64::to_string).collect();
        format!(
            "{} pod{} of {} {} fit on no node (free per node: {})",
            self.pods,
            if self.pods == 1 { "" } else { "s" },
            self.asks,
            self.resource.long(),
            if free.is_empty() { "no node offers it".to_string() } else { free.join(", ") }
        )
    }
}

/// At most this many pods are packed one by one; a gang past it is
/// refused by the count (a member's nodes hold a few devices each).
pub const MAX_PACKED: u64 = 100_000;

fn asks_accelerators(a: &Amount) -> bool {
    FLAVORS.iter().any(|r| a.get(*r) > 0)
}

fn fits(pod: &Amount, free: &Amount) -> bool {
    FLAVORS.iter().all(|r| pod.get(*r) <= free.get(*r))
}

/// The pods of `shapes` that ask accelerators, one entry each, largest
/// first (by their total devices, then by shape order: deterministic).
fn pods_of(shapes: &[Shape]) -> Result<Vec<Amount>, Unfit> {
    let mut pods: Vec<Amount> = Vec::new();
    let mut total: u64 = 0;
    for s in shapes.iter().filter(|s| asks_accelerators(&s.per_pod)) {
        total = total.saturating_add(s.pods);
        if total > MAX_PACKED {
            let r = FLAVORS.into_iter().find(|r| s.per_pod.get(*r) > 0).unwrap_or(Resource::GpuA100);
            return Err(Unfit { resource: r, asks: s.per_pod.get(r), pods: s.pods, free: vec![] });
        }
        pods.extend(std::iter::repeat_n(s.per_pod, usize::try_from(s.pods).unwrap_or(0)));
    }
    let size = |a: &Amount| FLAVORS.iter().fold(0u64, |n, r| n.saturating_add(a.get(*r)));
    pods.sort_by_key(|a| std::cmp::Reverse(size(a)));
    Ok(pods)
}

/// Packs the gang's pods onto the nodes' free amounts, first-fit
/// decreasing: each pod, largest first, on the first node with room for
/// all it asks. On success the nodes' amounts are what is left and the
/// result is the node of each packed pod (largest first); on failure the
/// nodes are untouched. First-fit decreasing may miss a packing that
/// exists (never the reverse): for pods of one shape it finds one
/// whenever one exists.
pub fn pack(nodes: &mut [Amount], shapes: &[Shape]) -> Result<Vec<usize>, Unfit> {
    let pods = pods_of(shapes)?;
    let mut free: Vec<Amount> = nodes.to_vec();
    let mut at = Vec::with_capacity(pods.len());
    for p in &pods {
        match free.iter().position(|f| fits(p, f)) {
            Some(i) => {
                if let Some(f) = free.get_mut(i) {
                    *f = f.minus(*p);
                }
                at.push(i);
            }
            None => {
                let r = FLAVORS
                    .into_iter()
                    .find(|r| free.iter().all(|f| p.get(*r) > f.get(*r)))
                    .or_else(|| FLAVORS.into_iter().find(|r| p.get(*r) > 0))
                    .unwrap_or(Resource::GpuA100);
                let same = pods.iter().filter(|q| q.get(r) == p.get(r)).count() as u64;
                let mut left: Vec<u64> = nodes.iter().map(|n| n.get(r)).collect();
                left.sort_by_key(|v| std::cmp::Reverse(*v));
                return Err(Unfit { resource: r, asks: p.get(r), pods: same, free: left });
            }
        }
    }
    nodes.copy_from_slice(&free);
    Ok(at)
}

/// Takes what placed work holds from the nodes, as [`pack`] would have
/// put it; what no longer fits (a node gone since) is taken pod by pod
/// where it fits, and the rest left out (the member's total still counts it).
pub fn occupy(nodes: &mut [Amount], shapes: &[Shape]) {
    if pack(nodes, shapes).is_ok() {
        return;
    }
    for p in pods_of(shapes).unwrap_or_default() {
        if let Some(f) = nodes.iter_mut().find(|f| fits(&p, f)) {
            *f = f.minus(p);
        }
    }
}

/// How many pods of one shape the nodes hold (a divided workload's
/// capacity on a member); every pod without accelerators: unbounded.
pub fn count(nodes: &[Amount], per_pod: &Amount) -> u64 {
    if !asks_accelerators(per_pod) {
        return u64::MAX;
    }
    nodes
        .iter()
        .map(|n| {
            FLAVORS
                .iter()
                .filter(|r| per_pod.get(**r) > 0)
                .map(|r| n.get(*r).checked_div(per_pod.get(*r)).unwrap_or(u64::MAX))
                .min()
                .unwrap_or(u64::MAX)
        })
        .fold(0u64, u64::saturating_add)
}

/// A member as submission sees it: its name and each Ready node's
/// (name, allocatable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub nodes: Vec<(String, Amount)>,
}

/// Why a gang can never run on the fleet as it is, whatever finishes: a
/// pod asks more of a flavor than any one node offers, or (`whole`: placed
/// on one member) the gang asks more than any member's nodes hold, or its
/// pods of one shape fit on no member's empty nodes. The resource and the
/// message, or None (it may wait for room).
pub fn never(members: &[Member], shapes: &[Shape], whole: bool) -> Option<(Resource, String)> {
    for r in FLAVORS {
        let Some(ask) = shapes.iter().filter(|s| s.pods > 0).map(|s| s.per_pod.get(r)).max().filter(|a| *a > 0) else {
            continue;
        };
        let largest_node = members
            .iter()
            .flat_map(|m| m.nodes.iter().map(move |(n, a)| (a.get(r), n.as_str(), m.name.as_str())))
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(a.1)));
        let Some((node_has, node, member)) = largest_node.filter(|(v, _, _)| *v > 0) else {
            // No node offers it: the fleet's total says so (admission::never).
            continue;
        };
        if ask > node_has {
            return Some((
                r,
                format!(
                    "a pod asks {ask} {}, more than any node offers (the largest, {node} on member {member}, has {node_has}): it can never be scheduled",
                    r.long()
                ),
            ));
        }
        if !whole {
            continue;
        }
        let total = shapes.iter().fold(0u64, |t, s| t.saturating_add(s.per_pod.get(r).saturating_mul(s.pods)));
        let member_total = |m: &Member| m.nodes.iter().fold(0u64, |t, (_, a)| t.saturating_add(a.get(r)));
        let Some(biggest) =
            members.iter().max_by(|a, b| member_total(a).cmp(&member_total(b)).then(b.name.cmp(&a.name)))
        else {
            continue;
        };
        let nodes_of = |m: &Member| m.nodes.iter().filter(|(_, a)| a.get(r) > 0).count();
        let has = member_total(biggest);
        if total > has {
            let n = nodes_of(biggest);
            return Some((
                r,
                format!(
                    "the gang asks {total} {} at once, more than any member holds (the largest, {}, has {has} on {n} node{}): a gang is placed whole on one member, it can never be placed",
                    r.long(),
                    biggest.name,
                    if n == 1 { "" } else { "s" }
                ),
            ));
        }
    }
    // Pods of one shape: first-fit finds a packing whenever one exists, so
    // none on any empty member is never.
    let asking: Vec<&Shape> = shapes.iter().filter(|s| s.pods > 0 && asks_accelerators(&s.per_pod)).collect();
    let offered = |r: Resource| members.iter().any(|m| m.nodes.iter().any(|(_, a)| a.get(r) > 0));
    let all_offered = asking.iter().all(|s| FLAVORS.iter().all(|r| s.per_pod.get(*r) == 0 || offered(*r)));
    if whole && asking.len() == 1 && all_offered {
        let mut best: Option<(&Member, Unfit)> = None;
        for m in members {
            let mut nodes: Vec<Amount> = m.nodes.iter().map(|(_, a)| *a).collect();
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
            return Some((
                u.resource,
                format!(
                    "its {} pod{} of {} {} fit on no member's nodes (the largest, {}, has {}): a gang is placed whole on one member, it can never be placed",
                    u.pods,
                    if u.pods == 1 { "" } else { "s" },
                    u.asks,
                    u.resource.long(),
                    m.name,
                    node_list(&u.free)
                ),
            ));
        }
    }
    None
}

/// `4 nodes of 4` or `nodes of 8, 4`.
fn node_list(free: &[u64]) -> String {
    match free {
        [] => "no node".into(),
        [one] => format!("1 node of {one}"),
        [first, rest @ ..] if rest.iter().all(|v| v == first) => format!("{} nodes of {first}", free.len()),
        _ => format!("nodes of {}", free.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u64) -> Amount {
        Amount::default().with(Resource::GpuA100, n)
    }

    fn shape(pods: u64, g: u64) -> Shape {
        Shape { pods, per_pod: Amount::new(1000, 1 << 30, 1).with(Resource::GpuA100, g) }
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
        assert_eq!(nodes, vec![gpus(0), gpus(0)]);
    }

    #[test]
    fn the_largest_pods_go_first_and_pods_without_devices_are_not_packed() {
        // First fit in submission order would put the 2 on node 0 (8) and
        // leave no node for the 8; decreasing order packs both.
        let mut nodes = vec![gpus(8), gpus(2)];
        let at = pack(&mut nodes, &[shape(1, 2), shape(1, 8), shape(5, 0)]).unwrap();
        assert_eq!(at, vec![0, 1]);
        assert_eq!(nodes, vec![gpus(0), gpus(0)]);
    }

    #[test]
    fn placed_work_takes_its_nodes_first() {
        let mut nodes = vec![gpus(8), gpus(8)];
        occupy(&mut nodes, &[shape(1, 4)]);
        assert_eq!(nodes, vec![gpus(4), gpus(8)]);
        assert!(pack(&mut nodes.clone(), &[shape(2, 8)]).is_err(), "8 + 8 no longer fit 4 + 8");
        assert_eq!(count(&nodes, &gpus(4)), 3);
        assert_eq!(count(&nodes, &Amount::new(1000, 0, 1)), u64::MAX);
    }

    #[test]
    fn flavors_are_packed_apart() {
        let mut nodes = vec![gpus(8), Amount::default().with(Resource::Neuron, 16)];
        let neuron = Shape { pods: 1, per_pod: Amount::default().with(Resource::Neuron, 16) };
        assert_eq!(pack(&mut nodes, &[shape(1, 8), neuron]).unwrap().len(), 2);
        let e = pack(&mut vec![gpus(8)], &[neuron]).unwrap_err();
        assert_eq!(e.resource, Resource::Neuron);
        assert_eq!(e.message(), "1 pod of 16 aws.amazon.com/neuron fit on no node (free per node: 0)");
    }

    fn members() -> Vec<Member> {
        vec![
            Member { name: "cpu".into(), nodes: vec![("cpu-node-0".into(), Amount::new(16000, 64 << 30, 110))] },
            Member { name: "gpu".into(), nodes: (0..4).map(|i| (format!("gpu-node-{i}"), gpus(4))).collect() },
            Member { name: "small".into(), nodes: vec![("small-node-0".into(), gpus(2))] },
        ]
    }

    #[test]
    fn what_no_member_can_ever_hold_is_named_with_the_largest() {
        let m = members();
        assert_eq!(
            never(&m, &[shape(1, 8)], true),
            Some((
                Resource::GpuA100,
                "a pod asks 8 nvidia.com/gpu A100, more than any node offers (the largest, gpu-node-0 on member gpu, has 4): it can never be scheduled".into()
            ))
        );
        assert_eq!(
            never(&m, &[shape(5, 4)], true),
            Some((
                Resource::GpuA100,
                "the gang asks 20 nvidia.com/gpu A100 at once, more than any member holds (the largest, gpu, has 16 on 4 nodes): a gang is placed whole on one member, it can never be placed".into()
            ))
        );
        // 5 pods of 3: 15 ≤ 16, but a node of 4 holds one pod of 3.
        assert_eq!(
            never(&m, &[shape(5, 3)], true),
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
        assert_eq!(never(&m, &[Shape { pods: 1, per_pod: Amount::default().with(Resource::Neuron, 1) }], true), None);
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
                nodes in proptest::collection::vec((0u64..10, 0u64..6), 0..6),
                shapes in proptest::collection::vec((0u64..5, 0u64..9, 0u64..4), 0..4),
            ) {
                let nodes: Vec<Amount> = nodes.iter().map(|(g, n)| gpus(*g).with(Resource::Neuron, *n)).collect();
                let shapes: Vec<Shape> = shapes
                    .iter()
                    .map(|(p, g, n)| Shape { pods: *p, per_pod: gpus(*g).with(Resource::Neuron, *n) })
                    .collect();
                let mut left = nodes.clone();
                if let Ok(at) = pack(&mut left, &shapes) {
                    let pods = pods_of(&shapes).unwrap();
                    prop_assert_eq!(at.len(), pods.len());
                    let mut held = vec![Amount::default(); nodes.len()];
                    for (p, i) in pods.iter().zip(&at) {
                        held[*i] = held[*i].plus(*p);
                    }
                    for i in 0..nodes.len() {
                        for r in FLAVORS {
                            prop_assert!(held[i].get(r) <= nodes[i].get(r), "node {i} over in {r:?}");
                            prop_assert_eq!(left[i].get(r), nodes[i].get(r) - held[i].get(r));
                        }
                    }
                } else {
                    prop_assert_eq!(&left, &nodes);
                }
                // One shape: a fit exists iff the nodes hold as many pods.
                if let [s] = shapes.as_slice() {
                    if asks_accelerators(&s.per_pod) {
                        prop_assert_eq!(pack(&mut nodes.clone(), &shapes).is_ok(), count(&nodes, &s.per_pod) >= s.pods);
                    }
                }
            }
        }
    }
}
