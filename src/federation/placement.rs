//! Placement of one app's replicas over the members of a federation (pure
//! and deterministic): the same inputs give the same split.
//!
//! Filter (healthy, cluster affinity, taints tolerated) → spread
//! constraints (groups by region, zone or a label, between min and max
//! groups) → split: Duplicated (every member runs all replicas) or Divided
//! by static weights, by live free capacity, or Aggregated (as few members
//! as capacity allows); per-member minimums first, then the rest by weight
//! under maximums and capacity, rounded by largest remainder with ties
//! broken by a hash of member and app. When only the total changes, only
//! the delta moves.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::spec::{IntOrPercent, Taint, TaintEffect};

/// A member as placement sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Member {
    pub name: String,
    pub weight: u32,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    pub max_share: Option<IntOrPercent>,
    /// How many more replicas of this app fit (None: unknown, unlimited).
    pub capacity: Option<u32>,
    /// Reachable, with Ready nodes, within its grace period.
    pub healthy: bool,
    /// Replicas it runs now.
    pub current: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Mode {
    Duplicated,
    #[default]
    Divided,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub enum Division {
    /// By the members' static weights.
    #[default]
    Weighted,
    /// By free capacity (allocatable minus requested), in replicas of this app.
    Capacity,
    /// As few members as capacity allows.
    Aggregated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spread {
    /// `region`, `zone`, or any member label key.
    pub by: String,
    #[serde(default)]
    pub min_groups: Option<u32>,
    #[serde(default)]
    pub max_groups: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limit {
    #[serde(default)]
    pub min: u32,
    #[serde(default)]
    pub max: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Toleration {
    pub key: String,
    #[serde(default)]
    pub effect: Option<TaintEffect>,
}

/// The placement policy of a FederatedService.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub division: Division,
    /// Members whose labels match all of these.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cluster_affinity: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<Spread>,
    /// Per-member minimum and maximum replicas.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, Limit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
}

/// One member's share and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Share {
    pub cluster: String,
    pub replicas: u32,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("no member can run {0}: {1}")]
    NoMembers(String, String),
    #[error("{app}: spread by {by} needs {min} groups, only {have} are eligible")]
    Spread { app: String, by: String, min: u32, have: usize },
    #[error("{app}: the per-cluster minimums add up to {mins}, more than the {total} replicas")]
    Minimums { app: String, mins: u32, total: u32 },
    #[error("{app}: {total} replicas do not fit: the eligible members take at most {room}")]
    NoRoom { app: String, total: u32, room: u64 },
}

/// FNV-1a of `app/cluster`: a stable, cheap tie-breaker.
fn tie(app: &str, cluster: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in app.bytes().chain(std::iter::once(b'/')).chain(cluster.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn spread_key(m: &Member, by: &str) -> String {
    let key = match by {
        "region" => "region",
        "zone" => "zone",
        other => other,
    };
    m.labels.get(key).cloned().unwrap_or_default()
}

/// Splits `total` by `weights` under `caps` (largest remainder, ties by
/// `order`): each gets at most its cap; what a capped member can't take
/// goes to the others.
fn split(total: u32, weights: &[f64], caps: &[u64], order: &[u64]) -> Vec<u32> {
    let n = weights.len();
    let mut out = vec![0u32; n];
    let mut left = total as u64;
    let mut open: Vec<usize> = (0..n).filter(|&i| caps[i] > 0).collect();
    while left > 0 && !open.is_empty() {
        let wsum: f64 = open.iter().map(|&i| weights[i].max(0.0)).sum();
        let quotas: Vec<(usize, f64)> = open
            .iter()
            .map(|&i| {
                let w = if wsum > 0.0 { weights[i].max(0.0) / wsum } else { 1.0 / open.len() as f64 };
                (i, w * left as f64)
            })
            .collect();
        let mut give: BTreeMap<usize, u64> = quotas.iter().map(|&(i, q)| (i, q.floor() as u64)).collect();
        let given: u64 = give.values().sum();
        let mut rest: Vec<(usize, f64)> = quotas.iter().map(|&(i, q)| (i, q - q.floor())).collect();
        rest.sort_by(|a, b| {
            b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(order[a.0].cmp(&order[b.0]))
        });
        for (i, _) in rest.iter().take((left - given) as usize) {
            *give.get_mut(i).expect("open member") += 1;
        }
        let mut capped = false;
        for (i, g) in give {
            let room = caps[i] - out[i] as u64;
            let g = g.min(room);
            out[i] += g as u32;
            left -= g;
            if out[i] as u64 >= caps[i] {
                capped = true;
            }
        }
        open.retain(|&i| (out[i] as u64) < caps[i]);
        if !capped {
            break;
        }
    }
    out
}

/// Places `total` replicas of `app`.
pub fn place(app: &str, total: u32, policy: &Policy, members: &[Member]) -> Result<Vec<Share>, PlacementError> {
    let mut why: BTreeMap<String, String> = BTreeMap::new();
    let mut eligible = eligible(policy, members, &mut why);
    spread(app, policy, &mut eligible, &mut why)?;
    if eligible.is_empty() {
        let detail: Vec<String> = why.iter().map(|(c, r)| format!("{c} {r}")).collect();
        return Err(PlacementError::NoMembers(app.into(), detail.join("; ")));
    }
    let mut shares: Vec<Share> = Vec::new();
    if policy.mode == Mode::Duplicated {
        for m in &eligible {
            let n = (total as u64).min(cap(policy, total, m)) as u32;
            shares.push(Share {
                cluster: m.name.clone(),
                replicas: n,
                reason: format!("duplicated: all {total} replicas"),
            });
        }
    } else {
        shares = divided(app, total, policy, &eligible, members)?;
    }
    for m in members {
        if !shares.iter().any(|s| s.cluster == m.name) {
            shares.push(Share {
                cluster: m.name.clone(),
                replicas: 0,
                reason: why.remove(&m.name).unwrap_or_default(),
            });
        }
    }
    shares.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    Ok(shares)
}

/// The members the app may run on: healthy, matching its affinity, every
/// NoSchedule/NoExecute taint tolerated; why each other one is not.
fn eligible<'a>(policy: &Policy, members: &'a [Member], why: &mut BTreeMap<String, String>) -> Vec<&'a Member> {
    let mut eligible: Vec<&Member> = Vec::new();
    for m in members {
        let untolerated = m.taints.iter().find(|t| {
            matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
                && !policy.tolerations.iter().any(|tol| tol.key == t.key && tol.effect.is_none_or(|e| e == t.effect))
        });
        let reason = if !m.healthy {
            Some("excluded: unreachable or NotReady".to_string())
        } else if let Some((k, v)) = policy.cluster_affinity.iter().find(|(k, v)| m.labels.get(*k) != Some(v)) {
            Some(format!("excluded: affinity wants {k}={v}"))
        } else {
            untolerated.map(|t| format!("excluded: taint {}:{} not tolerated", t.key, t.effect.as_str()))
        };
        match reason {
            Some(r) => {
                why.insert(m.name.clone(), r);
            }
            None => eligible.push(m),
        }
    }
    eligible
}

/// Spread: keep at most max groups (the heaviest), need at least min.
fn spread(
    app: &str,
    policy: &Policy,
    eligible: &mut Vec<&Member>,
    why: &mut BTreeMap<String, String>,
) -> Result<(), PlacementError> {
    for s in &policy.spread {
        let mut groups: BTreeMap<String, f64> = BTreeMap::new();
        for m in eligible.iter() {
            *groups.entry(spread_key(m, &s.by)).or_default() +=
                f64::from(m.weight) + f64::from(m.capacity.unwrap_or(0)) / 1e6;
        }
        if let Some(min) = s.min_groups {
            if (groups.len() as u32) < min {
                return Err(PlacementError::Spread { app: app.into(), by: s.by.clone(), min, have: groups.len() });
            }
        }
        if let Some(max) = s.max_groups {
            let mut ranked: Vec<(String, f64)> = groups.into_iter().collect();
            ranked.sort_by(|a, b| {
                b.1.partial_cmp(&a.1).unwrap_or(std::cmp::Ordering::Equal).then(tie(app, &a.0).cmp(&tie(app, &b.0)))
            });
            let keep: BTreeSet<String> = ranked.into_iter().take(max as usize).map(|(k, _)| k).collect();
            eligible.retain(|m| {
                let k = spread_key(m, &s.by);
                let ok = keep.contains(&k);
                if !ok {
                    why.insert(m.name.clone(), format!("excluded: spread by {} keeps {max} group(s)", s.by));
                }
                ok
            });
        }
    }
    Ok(())
}

/// A member's minimum and maximum from the policy.
fn limit(policy: &Policy, m: &Member) -> Limit {
    policy.clusters.get(&m.name).cloned().unwrap_or(Limit { min: 0, max: None })
}

/// The most replicas a member may hold: its maximum, its share of the
/// total, and (dividing by capacity) its free room plus what it runs.
fn cap(policy: &Policy, total: u32, m: &Member) -> u64 {
    let mut c = limit(policy, m).max.map_or(u64::MAX, u64::from);
    if let Some(share) = &m.max_share {
        c = c.min(match share {
            IntOrPercent::Int(n) => *n as u64,
            IntOrPercent::Percent(p) => (u64::from(*p) * u64::from(total)) / 100,
        });
    }
    if matches!(policy.division, Division::Capacity | Division::Aggregated) && policy.mode == Mode::Divided {
        if let Some(free) = m.capacity {
            c = c.min(u64::from(free) + u64::from(m.current));
        }
    }
    c
}

/// The total divided among the eligible members by the policy's division,
/// each minimum a floor, each share's reason said.
fn divided(
    app: &str,
    total: u32,
    policy: &Policy,
    eligible: &[&Member],
    members: &[Member],
) -> Result<Vec<Share>, PlacementError> {
    let mut shares: Vec<Share> = Vec::new();
    let order: Vec<u64> = eligible.iter().map(|m| tie(app, &m.name)).collect();
    let caps: Vec<u64> = eligible.iter().map(|m| cap(policy, total, m)).collect();
    let room: u64 = caps.iter().fold(0u64, |a, c| a.saturating_add(*c));
    if room < total as u64 {
        return Err(PlacementError::NoRoom { app: app.into(), total, room });
    }
    // A minimum is a floor, as KubeFed documents and Karmada does: a
    // member gets the larger of its minimum and its share; the members
    // held at their floor leave the division, and the rest is divided
    // again among the others, until no share falls below its floor.
    let mins: Vec<u32> =
        eligible.iter().zip(&caps).map(|(m, c)| (limit(policy, m).min as u64).min(*c) as u32).collect();
    let min_sum: u32 = mins.iter().sum();
    if min_sum > total {
        return Err(PlacementError::Minimums { app: app.into(), mins: min_sum, total });
    }
    let divide = |rest: u32, pool: &[bool]| -> Vec<u32> {
        let caps_in: Vec<u64> = caps.iter().zip(pool).map(|(c, &p)| if p { *c } else { 0 }).collect();
        match policy.division {
            Division::Weighted => {
                let w: Vec<f64> = eligible.iter().map(|m| f64::from(m.weight)).collect();
                split(rest, &w, &caps_in, &order)
            }
            Division::Capacity => {
                let w: Vec<f64> = eligible.iter().map(|m| f64::from(m.capacity.unwrap_or(0) + m.current)).collect();
                split(rest, &w, &caps_in, &order)
            }
            Division::Aggregated => {
                // Fill the roomiest first (ties by hash) until all fit.
                let mut idx: Vec<usize> = (0..eligible.len()).filter(|&i| pool[i]).collect();
                idx.sort_by(|&a, &b| caps_in[b].cmp(&caps_in[a]).then(order[a].cmp(&order[b])));
                let mut out = vec![0u32; eligible.len()];
                let mut left = rest as u64;
                for i in idx {
                    let g = left.min(caps_in[i]);
                    out[i] = g as u32;
                    left -= g;
                }
                out
            }
        }
    };
    let mut floored = vec![false; eligible.len()];
    let extra = loop {
        let pool: Vec<bool> = floored.iter().map(|f| !f).collect();
        let held: u32 = mins.iter().zip(&floored).filter(|(_, f)| **f).map(|(m, _)| *m).sum();
        let shares = divide(total - held, &pool);
        let below: Vec<usize> = (0..eligible.len()).filter(|&i| pool[i] && shares[i] < mins[i]).collect();
        if below.is_empty() {
            break shares;
        }
        for i in below {
            floored[i] = true;
        }
    };
    let wsum: u32 = eligible.iter().map(|m| m.weight).sum();
    for (i, m) in eligible.iter().enumerate() {
        let n = if floored[i] { mins[i] } else { extra[i] };
        let mut reason = match policy.division {
            Division::Weighted => format!("weight {}/{wsum}", m.weight),
            Division::Capacity => format!("free capacity {} replicas", m.capacity.unwrap_or(0) + m.current),
            Division::Aggregated => format!("aggregated: room for {}", caps[i].min(u64::from(u32::MAX))),
        };
        if floored[i] {
            reason.push_str(&format!(", held at its min {}", mins[i]));
        } else if mins[i] > 0 {
            reason.push_str(&format!(", above its min {}", mins[i]));
        }
        if caps[i] != u64::MAX && n as u64 == caps[i] {
            reason.push_str(", at its maximum");
        }
        shares.push(Share { cluster: m.name.clone(), replicas: n, reason });
    }
    minimal_movement(&mut shares, members, total, &caps, eligible);
    Ok(shares)
}

/// When only the total changed (same eligible members, all of them running
/// their share now), move only the delta: growing never takes replicas
/// from a member, shrinking never adds any.
fn minimal_movement(shares: &mut [Share], members: &[Member], total: u32, caps: &[u64], eligible: &[&Member]) {
    let current: Vec<u32> = eligible.iter().map(|m| m.current).collect();
    let running: u32 = current.iter().sum();
    let others: u32 = members.iter().filter(|m| !eligible.iter().any(|e| e.name == m.name)).map(|m| m.current).sum();
    if running == 0 || others > 0 || running == total || current.iter().zip(caps).any(|(c, cap)| *c as u64 > *cap) {
        return;
    }
    let ideal: Vec<u32> = shares.iter().map(|s| s.replicas).collect();
    let grow = total > running;
    // What each member is off from its ideal, in the direction of travel.
    let gaps: Vec<u64> = ideal
        .iter()
        .zip(&current)
        .map(|(i, c)| if grow { i.saturating_sub(*c) as u64 } else { c.saturating_sub(*i) as u64 })
        .collect();
    let delta = if grow { total - running } else { running - total };
    let weights: Vec<f64> = gaps.iter().map(|g| *g as f64).collect();
    let order: Vec<u64> = (0..eligible.len() as u64).collect();
    let moved = split(delta, &weights, &gaps, &order);
    if moved.iter().sum::<u32>() != delta {
        return;
    }
    for (i, s) in shares.iter_mut().enumerate() {
        s.replicas = if grow { current[i] + moved[i] } else { current[i] - moved[i] };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn member(name: &str, weight: u32, capacity: Option<u32>) -> Member {
        Member {
            name: name.into(),
            weight,
            labels: BTreeMap::new(),
            taints: vec![],
            max_share: None,
            capacity,
            healthy: true,
            current: 0,
        }
    }

    fn counts(s: &[Share]) -> Vec<u32> {
        s.iter().map(|x| x.replicas).collect()
    }

    #[test]
    fn known_answers() {
        let cap = Policy { division: Division::Capacity, ..Default::default() };
        let ms = [member("a", 1, Some(6)), member("b", 1, Some(12)), member("c", 1, Some(18))];
        assert_eq!(counts(&place("app", 12, &cap, &ms).unwrap()), vec![2, 4, 6]);
        let ms = [member("a", 1, None), member("b", 2, None)];
        assert_eq!(counts(&place("app", 9, &Policy::default(), &ms).unwrap()), vec![3, 6]);
        let dup = Policy { mode: Mode::Duplicated, ..Default::default() };
        assert_eq!(counts(&place("app", 5, &dup, &ms).unwrap()), vec![5, 5]);
        let agg = Policy { division: Division::Aggregated, ..Default::default() };
        let ms = [member("a", 1, Some(6)), member("b", 1, Some(12)), member("c", 1, Some(18))];
        assert_eq!(counts(&place("app", 20, &agg, &ms).unwrap()), vec![0, 2, 18]);
    }

    /// KubeFed's documented answers (its user guide's weighted placement
    /// examples): a minimum is a floor, a maximum a ceiling, and an offline
    /// member's share goes to the others within their maximums.
    #[test]
    fn kubefed_documented_answers() {
        let two = [member("a", 1, None), member("b", 2, None)];
        assert_eq!(counts(&place("app", 9, &Policy::default(), &two).unwrap()), vec![3, 6]);
        let mut floor = Policy::default();
        floor.clusters.insert("a".into(), Limit { min: 4, max: None });
        let s = place("app", 9, &floor, &two).unwrap();
        assert_eq!(counts(&s), vec![4, 5], "a minimum is a floor, not extra replicas: {s:?}");
        assert!(s[0].reason.contains("held at its min 4"), "{s:?}");
        let mut capped = Policy::default();
        capped.clusters.insert("c".into(), Limit { min: 0, max: Some(20) });
        let three = [member("a", 1, None), member("b", 1, None), member("c", 1, None)];
        let mut got = counts(&place("app", 50, &capped, &three).unwrap());
        // Which equal member takes the odd replica is a hash in KubeFed and here.
        got.sort_unstable();
        assert_eq!(got, vec![16, 17, 17]);
        let mut offline = three.to_vec();
        offline[1].healthy = false;
        assert_eq!(counts(&place("app", 50, &capped, &offline).unwrap()), vec![30, 0, 20]);
        // Once a member is held at its floor, the rest divides by weight
        // among the others: 10 over 1:1:8 with a floor of 3 on a.
        let mut held = Policy::default();
        held.clusters.insert("a".into(), Limit { min: 3, max: None });
        let ms = [member("a", 1, None), member("b", 1, None), member("c", 8, None)];
        assert_eq!(counts(&place("app", 10, &held, &ms).unwrap()), vec![3, 1, 6]);
    }

    #[test]
    fn minimums_maximums_and_spread() {
        let ms = [member("a", 1, None), member("b", 1, None), member("c", 1, None)];
        let mut p = Policy::default();
        p.clusters.insert("a".into(), Limit { min: 0, max: Some(1) });
        p.clusters.insert("c".into(), Limit { min: 5, max: None });
        let s = place("app", 9, &p, &ms).unwrap();
        // An even split (3 each, a capped at 1) leaves c below its floor of
        // 5: c is held at 5, and the other 4 go to a (at most 1) and b.
        assert_eq!(counts(&s), vec![1, 3, 5]);
        assert!(s[0].reason.contains("at its maximum"), "{s:?}");
        let mut ms = ms.to_vec();
        for (m, r) in ms.iter_mut().zip(["us-east-1", "us-east-1", "us-west-2"]) {
            m.labels.insert("region".into(), r.into());
        }
        let p = Policy {
            spread: vec![Spread { by: "region".into(), min_groups: Some(3), max_groups: None }],
            ..Default::default()
        };
        assert!(matches!(place("app", 9, &p, &ms), Err(PlacementError::Spread { min: 3, have: 2, .. })));
        let p = Policy {
            spread: vec![Spread { by: "region".into(), min_groups: None, max_groups: Some(1) }],
            ..Default::default()
        };
        let s = place("app", 8, &p, &ms).unwrap();
        assert_eq!(s.iter().filter(|x| x.replicas > 0).count(), 2, "one region: {s:?}");
    }

    #[test]
    fn unhealthy_and_tainted_members_are_excluded_with_a_reason() {
        let mut ms = vec![member("a", 1, None), member("b", 1, None), member("c", 1, None)];
        ms[0].healthy = false;
        ms[1].taints.push(Taint { key: "dedicated".into(), value: String::new(), effect: TaintEffect::NoSchedule });
        let s = place("app", 6, &Policy::default(), &ms).unwrap();
        assert_eq!(counts(&s), vec![0, 0, 6]);
        assert!(s[0].reason.contains("unreachable") && s[1].reason.contains("taint dedicated"));
        let tol =
            Policy { tolerations: vec![Toleration { key: "dedicated".into(), effect: None }], ..Default::default() };
        assert_eq!(counts(&place("app", 6, &tol, &ms).unwrap()), vec![0, 3, 3]);
    }
}
