//! What to do next in one group's roll (pure). The driver observes the
//! group (machines and their nodes), asks [`step`], does what it says, and
//! asks again when something changes; a killed roll re-run observes the
//! same facts and carries on (cordoned nodes are drained first, replacements
//! that are still booting are counted, not launched again).
//!
//! Limits: at most `desired + surge` machines exist; at least `floor`
//! machines are Ready and schedulable (for node groups `max(desired -
//! maxUnavailable, min)`, for control planes a quorum). With a canary, one
//! replacement must be Ready before anything old is drained.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::spec::IntOrPercent;

/// One machine of the group as observed now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Member {
    pub id: String,
    /// Runs the group's current launch-template version and needs nothing.
    pub current: bool,
    /// Its node is Ready.
    pub ready: bool,
    /// Its node is cordoned (a drain started, maybe by a killed run).
    pub cordoned: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub desired: u32,
    /// Machines beyond `desired` allowed while rolling.
    pub surge: u32,
    /// Ready, schedulable machines never fewer than this.
    pub floor: u32,
    /// One replacement Ready before anything old is drained.
    pub canary: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Step {
    /// Every machine is current and Ready.
    Done,
    /// Launch this many replacements, and drain (then terminate) these.
    Act { launch: u32, drain: Vec<String> },
    /// Nothing can move until a replacement turns Ready or a drain ends.
    Wait,
}

/// Limits for a node group from its rollout settings.
pub fn node_group_limits(
    desired: u32,
    min: u32,
    surge: &IntOrPercent,
    unavailable: &IntOrPercent,
    canary: bool,
) -> Limits {
    let surge = surge.resolve_up(desired);
    let unavailable = unavailable.resolve_down(desired);
    // Neither may be zero with the other: nothing could move.
    let surge = if surge == 0 && unavailable == 0 { 1 } else { surge };
    Limits { desired, surge, floor: desired.saturating_sub(unavailable).max(min.min(desired)), canary }
}

/// Limits for a control plane: one machine at a time, never surged, quorum
/// kept. A single control-plane machine can't be removed first without
/// losing the cluster, so it alone is replaced before it is removed.
pub fn control_plane_limits(desired: u32) -> Limits {
    if desired < 3 {
        Limits { desired, surge: 1, floor: desired, canary: false }
    } else {
        Limits { desired, surge: 0, floor: desired - 1, canary: false }
    }
}

/// The next step, given the members and the ids already being drained.
pub fn step(members: &[Member], draining: &BTreeSet<String>, l: &Limits) -> Step {
    let outdated: Vec<&Member> = members.iter().filter(|m| !m.current).collect();
    let current = members.iter().filter(|m| m.current).count() as u32;
    let current_ready = members.iter().filter(|m| m.current && m.ready && !m.cordoned).count() as u32;
    if outdated.is_empty() && current_ready >= l.desired.min(current) && current >= l.desired {
        return if draining.is_empty() { Step::Done } else { Step::Wait };
    }
    let total = members.len() as u32;
    let booting = members.iter().filter(|m| m.current && !m.ready).count() as u32;
    let mut launch = l.desired.saturating_sub(current).min((l.desired + l.surge).saturating_sub(total));
    let canary_pending = l.canary && current_ready == 0 && !outdated.is_empty();
    if canary_pending {
        launch = launch.min(1u32.saturating_sub(booting));
    }
    // A canary with no slot to launch into (the group holds more machines
    // than `desired + surge`, as a taken-over group can) makes room first:
    // only the excess is drained, within the floor.
    let drain_cap = if !canary_pending {
        u32::MAX
    } else if booting == 0 && launch == 0 {
        (total + 1).saturating_sub(l.desired + l.surge)
    } else {
        0
    };
    let mut drain = Vec::new();
    if drain_cap > 0 {
        let available = members.iter().filter(|m| m.ready && !m.cordoned && !draining.contains(&m.id)).count() as u32;
        let mut budget = available.saturating_sub(l.floor);
        // Resume cordoned ones first (already unavailable), then NotReady
        // ones (free), then Ready ones (each costs one from the budget).
        let mut candidates: Vec<&&Member> = outdated.iter().filter(|m| !draining.contains(&m.id)).collect();
        candidates.sort_by_key(|m| (!m.cordoned, m.ready, m.id.clone()));
        // Never drain below what surge alone can refill: without spare
        // capacity (surge 0), draining waits for a slot to free up.
        for m in candidates.into_iter().take(drain_cap as usize) {
            let cost = u32::from(m.ready && !m.cordoned);
            if cost > budget {
                continue;
            }
            budget -= cost;
            drain.push(m.id.clone());
        }
    }
    if launch == 0 && drain.is_empty() {
        Step::Wait
    } else {
        Step::Act { launch, drain }
    }
}

/// The floor of a roll, for comparisons: waves of `surge` machines, each
/// taking a boot and a drain.
pub fn floor_seconds(n: u32, surge: u32, boot: f64, drain: f64) -> f64 {
    f64::from(n.div_ceil(surge.max(1))) * (boot + drain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, current: bool, ready: bool) -> Member {
        Member { id: id.into(), current, ready, cordoned: false }
    }

    fn none() -> BTreeSet<String> {
        BTreeSet::new()
    }

    #[test]
    fn surge_launches_first_and_drains_only_what_replacements_cover() {
        let l = node_group_limits(4, 4, &IntOrPercent::Int(2), &IntOrPercent::Int(0), false);
        let old: Vec<Member> = (0..4).map(|i| m(&format!("o{i}"), false, true)).collect();
        assert_eq!(step(&old, &none(), &l), Step::Act { launch: 2, drain: vec![] });
        let mut g = old.clone();
        g.push(m("n0", true, false));
        g.push(m("n1", true, false));
        assert_eq!(step(&g, &none(), &l), Step::Wait, "booting replacements: nothing to drain yet");
        g[4].ready = true;
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 0, drain: vec!["o0".into()] });
        g[5].ready = true;
        let draining: BTreeSet<String> = ["o0".to_string()].into();
        assert_eq!(step(&g, &draining, &l), Step::Act { launch: 0, drain: vec!["o1".into()] });
    }

    #[test]
    fn unavailability_drains_ahead_but_never_below_min() {
        let l = node_group_limits(4, 3, &IntOrPercent::Int(0), &IntOrPercent::Int(2), false);
        assert_eq!(l.floor, 3, "min wins over desired - unavailable");
        let old: Vec<Member> = (0..4).map(|i| m(&format!("o{i}"), false, true)).collect();
        assert_eq!(step(&old, &none(), &l), Step::Act { launch: 0, drain: vec!["o0".into()] });
    }

    #[test]
    fn a_canary_goes_first_and_cordoned_nodes_are_resumed() {
        let l = node_group_limits(3, 3, &IntOrPercent::Int(2), &IntOrPercent::Int(0), true);
        let mut g: Vec<Member> = (0..3).map(|i| m(&format!("o{i}"), false, true)).collect();
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 1, drain: vec![] });
        g.push(m("n0", true, false));
        assert_eq!(step(&g, &none(), &l), Step::Wait, "the canary is booting");
        g[3].ready = true;
        // Canary Ready: the rest surge; a node cordoned by a killed run is
        // drained first, at no cost to availability, and nothing Ready is
        // drained while only 3 are available (the floor).
        g[2].cordoned = true;
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 1, drain: vec!["o2".into()] });
    }

    #[test]
    fn a_canary_in_a_group_already_past_its_surge_makes_room_by_draining_the_excess_first() {
        // A taken-over group of 4 whose file says 3 with a surge of 1: no
        // slot for the canary until one old machine goes.
        let l = node_group_limits(3, 3, &IntOrPercent::Int(1), &IntOrPercent::Int(0), true);
        let mut g: Vec<Member> = (0..4).map(|i| m(&format!("o{i}"), false, true)).collect();
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 0, drain: vec!["o0".into()] });
        let draining: BTreeSet<String> = ["o0".to_string()].into();
        assert_eq!(step(&g, &draining, &l), Step::Wait, "one is enough to make room");
        g.remove(0);
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 1, drain: vec![] }, "then the canary");
        // Never below the floor to make room: 5 machines, only 3 Ready.
        let mut g: Vec<Member> = (0..5).map(|i| m(&format!("o{i}"), false, i < 3)).collect();
        g[0].ready = true;
        let drained = match step(&g, &none(), &l) {
            Step::Act { launch: 0, drain } => drain,
            other => panic!("{other:?}"),
        };
        assert_eq!(drained, vec!["o3".to_string(), "o4".to_string()], "the NotReady ones go first, free");
    }

    #[test]
    fn control_planes_go_one_at_a_time() {
        let l = control_plane_limits(3);
        let g: Vec<Member> = (0..3).map(|i| m(&format!("c{i}"), false, true)).collect();
        assert_eq!(step(&g, &none(), &l), Step::Act { launch: 0, drain: vec!["c0".into()] });
        let draining: BTreeSet<String> = ["c0".to_string()].into();
        assert_eq!(step(&g, &draining, &l), Step::Wait, "quorum: one at a time");
        let one = control_plane_limits(1);
        assert_eq!(step(&[m("c0", false, true)], &none(), &one), Step::Act { launch: 1, drain: vec![] });
    }

    #[test]
    fn done_when_everything_is_current_and_ready() {
        let l = node_group_limits(2, 1, &IntOrPercent::Int(1), &IntOrPercent::Int(0), false);
        assert_eq!(step(&[m("a", true, true), m("b", true, true)], &none(), &l), Step::Done);
        assert_eq!(
            step(&[m("a", true, true)], &none(), &l),
            Step::Act { launch: 1, drain: vec![] },
            "a lost machine is refilled"
        );
        assert_eq!(IntOrPercent::Percent(10).resolve_up(1000), 100);
        assert_eq!(floor_seconds(1000, 100, 2.0, 0.5), 25.0);
    }
}
