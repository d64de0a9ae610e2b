//! Admission (pure): which queued submissions start now, which running
//! ones yield, and for every one still waiting its place in line, when it
//! is expected to start and why it has not.
//!
//! ```text
//! Quotas + fleet capacity + Ledger + queued submissions
//!     │ decide: one pass over the whole queue (priority, then age),
//!     │         admitting every one that fits, not one per cycle
//!     ▼
//! Batch { admitted (reservations), preempted, waiting (structured why) }
//!     │ explain: positions and a forward simulation of the ledger
//!     ▼
//! Waiting { position, estimated start (earliest–latest), why }
//! ```
//!
//! A submission fits when, for every resource: its team stays within the
//! tier's maximum; what it takes beyond the team's guarantee is unused
//! guarantee of its cohort; the fleet holds it; the team's admitted
//! workloads stay under its cap; and the pods admitted for the team in the
//! last minute stay under its creation rate. Reserved work that the fleet
//! cannot hold takes the place of Preemptible work; a team within its
//! guarantee reclaims what other teams of its cohort borrowed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::quota::{tier_name, Amount, Ledger, Quota, Reservation, Resource, RESOURCES};
use crate::workloads::Tier;

/// `t + d`, or the latest time there is: an expected end past the calendar
/// (a duration of a million years) is "never" for every estimate, never a
/// panic in the pass that every team's admission waits on.
pub fn later(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_add_signed(d).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A submission waiting for admission.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub name: String,
    pub team: String,
    pub tier: Tier,
    pub priority: i32,
    pub created: DateTime<Utc>,
    /// Requests × replicas (or parallelism), and its pods.
    pub demand: Amount,
    /// How long it runs once started, when the submitter said (batch work).
    pub expected_duration: Option<Duration>,
    /// Evicted (its pods not all ready in time, [`super::gang`]) and
    /// requeued: not admitted before the backoff ends.
    pub backoff: Option<Backoff>,
}

/// A requeued gang's backoff: how often it was evicted, and until when it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub evictions: u32,
    pub until: DateTime<Utc>,
}

/// What admission decides against.
#[derive(Debug, Clone)]
pub struct World {
    pub quotas: BTreeMap<String, Quota>,
    /// The fleet's allocatable, all member clusters together.
    pub fleet: Amount,
    cohort_guaranteed: HashMap<(String, &'static str), Amount>,
}

impl World {
    pub fn new(quotas: BTreeMap<String, Quota>, fleet: Amount) -> World {
        let mut cohort_guaranteed: HashMap<(String, &'static str), Amount> = HashMap::new();
        for q in quotas.values() {
            for (tier, l) in &q.tiers {
                let e = cohort_guaranteed.entry((q.cohort.clone(), tier)).or_default();
                *e = e.plus(l.guaranteed);
            }
        }
        World { quotas, fleet, cohort_guaranteed }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// The team's maximum for the tier.
    Quota,
    /// Borrowing: the cohort has no unused guarantee left.
    Cohort,
    /// The team is within its guarantee but others of its cohort borrowed it.
    Reclaim,
    /// The fleet's capacity.
    Fleet,
    /// The team's cap on admitted workloads.
    Workloads,
    /// The team's creation rate (pods per minute).
    Rate,
    /// A gang evicted for pods not ready in time waits out its backoff.
    Backoff,
}

/// Why a submission is not admitted: which limit, which resource, by how
/// much, and what would unblock it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub kind: Kind,
    /// The limit that holds it: `search/OnDemand max`, `cohort ads/OnDemand`, `fleet`.
    pub quota: String,
    pub tier: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    pub requested: String,
    pub used: String,
    pub limit: String,
    /// How much is missing.
    pub short: String,
    pub message: String,
    pub unblock: String,
    /// For the rate limit: when the window has room.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<DateTime<Utc>>,
}

/// Running usage over one pass, kept in step with the ledger.
#[derive(Debug, Clone, Default)]
struct Tally {
    usage: HashMap<(String, &'static str), Amount>,
    cohort: HashMap<(String, &'static str), Amount>,
    workloads: HashMap<String, u64>,
    total: Amount,
}

impl Tally {
    fn of(world: &World, l: &Ledger) -> Tally {
        let mut t = Tally::default();
        for r in l.reservations.values() {
            t.add(world, r);
        }
        t
    }

    fn cohort_of<'a>(world: &'a World, team: &'a str) -> &'a str {
        world.quotas.get(team).map(|q| q.cohort.as_str()).unwrap_or(team)
    }

    fn add(&mut self, world: &World, r: &Reservation) {
        let tier = tier_name(r.tier);
        let u = self.usage.entry((r.team.clone(), tier)).or_default();
        *u = u.plus(r.amount);
        let c = self.cohort.entry((Self::cohort_of(world, &r.team).to_string(), tier)).or_default();
        *c = c.plus(r.amount);
        let n = self.workloads.entry(r.team.clone()).or_default();
        *n = n.saturating_add(1);
        self.total = self.total.plus(r.amount);
    }

    fn remove(&mut self, world: &World, r: &Reservation) {
        let tier = tier_name(r.tier);
        if let Some(u) = self.usage.get_mut(&(r.team.clone(), tier)) {
            *u = u.minus(r.amount);
        }
        if let Some(c) = self.cohort.get_mut(&(Self::cohort_of(world, &r.team).to_string(), tier)) {
            *c = c.minus(r.amount);
        }
        if let Some(w) = self.workloads.get_mut(&r.team) {
            *w = w.saturating_sub(1);
        }
        self.total = self.total.minus(r.amount);
    }

    fn usage(&self, team: &str, tier: &'static str) -> Amount {
        self.usage.get(&(team.to_string(), tier)).copied().unwrap_or_default()
    }
}

/// Why a submission can never be admitted as written (checked when it is
/// submitted): no quota, no quota for its tier, more than the team's
/// maximum or the whole fleet.
pub fn never(world: &World, team: &str, tier: Tier, demand: &Amount) -> Option<String> {
    let tn = tier_name(tier);
    let Some(q) = world.quotas.get(team) else {
        return Some(format!("team {team} has no quota: ask the platform team for one"));
    };
    let Some(l) = q.limits(tier) else {
        let has: Vec<&str> = q.tiers.keys().copied().collect();
        return Some(format!(
            "team {team} has no {tn} quota (it has: {})",
            if has.is_empty() { "none".into() } else { has.join(", ") }
        ));
    };
    if let Some(r) = demand.over(&l.max) {
        if r.is_accelerator() && l.max.get(r) == 0 {
            return Some(format!(
                "asks {} {} ({}), not in team {team}'s {tn} quota: it can never be admitted (ask the platform team for {} quota)",
                demand.get(r),
                r.long(),
                r.name(),
                r.name()
            ));
        }
        return Some(format!(
            "asks {} {}, more than team {team}'s {tn} maximum of {}: it can never be admitted",
            r.show(demand.get(r)),
            r.long(),
            r.show(l.max.get(r))
        ));
    }
    if let Some(r) = demand.over(&world.fleet) {
        return Some(format!(
            "asks {} {}, more than the whole fleet's {}: it can never be admitted",
            r.show(demand.get(r)),
            r.long(),
            r.show(world.fleet.get(r))
        ));
    }
    None
}

fn short_of(after: &Amount, limit: &Amount) -> Option<(Resource, u64)> {
    RESOURCES
        .into_iter()
        .find(|r| after.get(*r) > limit.get(*r))
        .map(|r| (r, after.get(r).saturating_sub(limit.get(r))))
}

fn amount_blocker(
    kind: Kind,
    quota: String,
    p: &Pending,
    r: Resource,
    used: u64,
    limit: u64,
    short: u64,
    message: String,
    unblock: String,
) -> Blocker {
    Blocker {
        kind,
        quota,
        tier: tier_name(p.tier).to_string(),
        resource: Some(r.name().to_string()),
        requested: r.show(p.demand.get(r)),
        used: r.show(used),
        limit: r.show(limit),
        short: r.show(short),
        message,
        unblock,
        retry_at: None,
    }
}

/// The first limit that holds `p` back given what is admitted now.
fn blocker(world: &World, l: &Ledger, t: &Tally, p: &Pending, now: DateTime<Utc>) -> Option<Blocker> {
    let q = world.quotas.get(&p.team)?;
    let tn = tier_name(p.tier);
    let lim = q.limits(p.tier)?;
    if let Some(m) = q.max_workloads {
        let n = t.workloads.get(&p.team).copied().unwrap_or(0);
        if n >= m {
            return Some(Blocker {
                kind: Kind::Workloads,
                quota: format!("{}/workloads", p.team),
                tier: tn.to_string(),
                resource: None,
                requested: "1".into(),
                used: n.to_string(),
                limit: m.to_string(),
                short: n.saturating_add(1).saturating_sub(m).to_string(),
                message: format!("team {} runs {n} workloads, its cap is {m}", p.team),
                unblock: format!("one of team {}'s admitted workloads finishing or being cancelled", p.team),
                retry_at: None,
            });
        }
    }
    let used = t.usage(&p.team, tn);
    let after = used.plus(p.demand);
    if let Some((r, short)) = short_of(&after, &lim.max) {
        return Some(amount_blocker(
            Kind::Quota,
            format!("{}/{tn} max", p.team),
            p,
            r,
            used.get(r),
            lim.max.get(r),
            short,
            format!(
                "team {}'s {tn} maximum: {} of {} {} in use, this asks {} ({} over)",
                p.team,
                r.show(used.get(r)),
                r.show(lim.max.get(r)),
                r.long(),
                r.show(p.demand.get(r)),
                r.show(short)
            ),
            format!(
                "{} {} freed by team {}'s {tn} work finishing, or a higher maximum",
                r.show(short),
                r.long(),
                p.team
            ),
        ));
    }
    let cohort_key = (q.cohort.clone(), tn);
    let cg = world.cohort_guaranteed.get(&cohort_key).copied().unwrap_or_default();
    let cu = t.cohort.get(&cohort_key).copied().unwrap_or_default();
    let within = after.over(&lim.guaranteed).is_none();
    if let Some((r, short)) = short_of(&cu.plus(p.demand), &cg) {
        let (kind, message, unblock) = if within {
            (
                Kind::Reclaim,
                format!(
                    "team {} is within its {tn} guarantee, but cohort {} has lent it out: {} of {} {} in use",
                    p.team,
                    q.cohort,
                    r.show(cu.get(r)),
                    r.show(cg.get(r)),
                    r.long()
                ),
                format!("borrowed {tn} work of cohort {} yielding {} {}", q.cohort, r.show(short), r.long()),
            )
        } else {
            (
                Kind::Cohort,
                format!(
                    "team {} would borrow {} {} beyond its {tn} guarantee, cohort {} has {} unused",
                    p.team,
                    r.show(after.get(r).saturating_sub(lim.guaranteed.get(r))),
                    r.long(),
                    q.cohort,
                    r.show(cg.get(r).saturating_sub(cu.get(r)))
                ),
                format!(
                    "{} {} of cohort {}'s {tn} guarantees left unused, or team {}'s own work finishing",
                    r.show(short),
                    r.long(),
                    q.cohort,
                    p.team
                ),
            )
        };
        return Some(amount_blocker(
            kind,
            format!("cohort {}/{tn}", q.cohort),
            p,
            r,
            cu.get(r),
            cg.get(r),
            short,
            message,
            unblock,
        ));
    }
    if let Some((r, short)) = short_of(&t.total.plus(p.demand), &world.fleet) {
        let unblock = if p.tier == Tier::Reserved {
            format!(
                "{} {} of Preemptible work yielding, or work finishing anywhere in the fleet",
                r.show(short),
                r.long()
            )
        } else {
            format!("{} {} freed by work finishing anywhere in the fleet, or more machines", r.show(short), r.long())
        };
        return Some(amount_blocker(
            Kind::Fleet,
            "fleet".into(),
            p,
            r,
            t.total.get(r),
            world.fleet.get(r),
            short,
            format!(
                "the fleet is full: {} of {} {} admitted, this asks {}",
                r.show(t.total.get(r)),
                r.show(world.fleet.get(r)),
                r.long(),
                r.show(p.demand.get(r))
            ),
            unblock,
        ));
    }
    rate_blocker(world, l, p, now)
}

/// The team's creation rate: checked last, so a submission held by a
/// quota is told about the quota (the rate clears by itself).
fn rate_blocker(world: &World, l: &Ledger, p: &Pending, now: DateTime<Utc>) -> Option<Blocker> {
    let q = world.quotas.get(&p.team)?;
    let tn = tier_name(p.tier);
    if let Some(rate) = q.pods_per_minute {
        let used = l.pods_last_minute(&p.team, now);
        if used > 0 && used.saturating_add(p.demand.pods) > rate {
            let at = l.rate_room_at(&p.team, p.demand.pods, rate, now);
            return Some(Blocker {
                kind: Kind::Rate,
                quota: format!("{}/podsPerMinute", p.team),
                tier: tn.to_string(),
                resource: Some("pods".into()),
                requested: p.demand.pods.to_string(),
                used: used.to_string(),
                limit: rate.to_string(),
                short: used.saturating_add(p.demand.pods).saturating_sub(rate).to_string(),
                message: format!(
                    "team {} was admitted {used} pods in the last minute, its creation rate is {rate} per minute",
                    p.team
                ),
                unblock: format!("time: the window has room at {}", at.format("%H:%M:%S")),
                retry_at: Some(at),
            });
        }
    }
    None
}

/// An evicted gang in its backoff: when it may be admitted again, and why it waits.
fn backoff_blocker(p: &Pending, b: &Backoff) -> Blocker {
    let at = b.until.format("%H:%M:%S");
    Blocker {
        kind: Kind::Backoff,
        quota: format!("{}/backoff", p.team),
        tier: tier_name(p.tier).to_string(),
        resource: None,
        requested: "1".into(),
        used: b.evictions.to_string(),
        limit: b.evictions.to_string(),
        short: "0".into(),
        message: format!(
            "evicted {} time{}: its pods were not all ready in time (waitForPodsReady); requeued with backoff, it may be admitted again from {at}",
            b.evictions,
            if b.evictions == 1 { "" } else { "s" }
        ),
        unblock: format!("time: the backoff ends at {at}"),
        retry_at: Some(b.until),
    }
}

/// Running work that yields so that `need` fits: lowest priority first,
/// then the most recently admitted (it has done the least).
fn victims<'a>(l: &'a Ledger, pick: impl Fn(&Reservation) -> bool, need: Amount) -> Option<Vec<&'a str>> {
    let mut c: Vec<(&str, &Reservation)> =
        l.reservations.iter().filter(|(_, r)| pick(r)).map(|(n, r)| (n.as_str(), r)).collect();
    c.sort_by(|a, b| a.1.priority.cmp(&b.1.priority).then(b.1.admitted_at.cmp(&a.1.admitted_at)).then(a.0.cmp(b.0)));
    let mut freed = Amount::default();
    let mut out = Vec::new();
    for (n, r) in c {
        if need.over(&freed).is_none() {
            break;
        }
        // Only what helps with a resource still short.
        if RESOURCES.iter().all(|x| need.get(*x) <= freed.get(*x) || r.amount.get(*x) == 0) {
            continue;
        }
        freed = freed.plus(r.amount);
        out.push(n);
    }
    if need.over(&freed).is_some() {
        return None;
    }
    // Spare whoever is not needed after all (the earliest picked first:
    // they are the ones that have run longest).
    let mut i = 0;
    while i < out.len() {
        let without = freed.minus(l.reservations[out[i]].amount);
        if need.over(&without).is_none() {
            freed = without;
            out.remove(i);
        } else {
            i = i.saturating_add(1);
        }
    }
    Some(out)
}

/// The global order: priority (higher first), then age, then name.
pub fn order(queue: &mut [Pending]) {
    queue.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.created.cmp(&b.created)).then(a.name.cmp(&b.name)));
}

/// One admission pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Batch {
    pub admitted: Vec<(String, Reservation)>,
    /// (victim, why).
    pub preempted: Vec<(String, String)>,
    pub waiting: Vec<(String, Blocker)>,
}

/// Admits every queued submission that fits, in order, updating `ledger`
/// (the caller persists it before telling anyone). `queue` must be in
/// [`order`]; submissions that can [`never`] fit are the caller's to refuse.
pub fn decide(world: &World, ledger: &mut Ledger, queue: &[Pending], now: DateTime<Utc>) -> Batch {
    ledger.prune(now);
    let mut tally = Tally::of(world, ledger);
    let mut batch = Batch::default();
    for p in queue {
        if never(world, &p.team, p.tier, &p.demand).is_some() {
            continue;
        }
        if let Some(bo) = p.backoff.as_ref().filter(|b| b.until > now) {
            batch.waiting.push((p.name.clone(), backoff_blocker(p, bo)));
            continue;
        }
        let mut b = blocker(world, ledger, &tally, p, now);
        // Nobody yields for work the creation rate would hold anyway.
        let rate_held = b.is_some() && rate_blocker(world, ledger, p, now).is_some();
        let pick: Option<(Box<dyn Fn(&Reservation) -> bool>, Amount, String)> = match &b {
            _ if rate_held => None,
            Some(bl) if bl.kind == Kind::Fleet && p.tier == Tier::Reserved => Some((
                Box::new(|r: &Reservation| r.tier == Tier::Preemptible),
                tally.total.plus(p.demand).minus(world.fleet),
                format!("preempted: the fleet was full and {} ({} Reserved) needed the room", p.name, p.team),
            )),
            Some(bl) if bl.kind == Kind::Reclaim => {
                let cohort = world.quotas[&p.team].cohort.clone();
                let tn = tier_name(p.tier);
                let cg = world.cohort_guaranteed.get(&(cohort.clone(), tn)).copied().unwrap_or_default();
                let cu = tally.cohort.get(&(cohort.clone(), tn)).copied().unwrap_or_default();
                let borrowing: Vec<String> = world
                    .quotas
                    .values()
                    .filter(|q| q.cohort == cohort && q.team != p.team)
                    .filter(|q| {
                        q.limits(p.tier).is_some_and(|l| tally.usage(&q.team, tn).over(&l.guaranteed).is_some())
                    })
                    .map(|q| q.team.clone())
                    .collect();
                let tier = p.tier;
                Some((
                    Box::new(move |r: &Reservation| r.tier == tier && borrowing.contains(&r.team)),
                    cu.plus(p.demand).minus(cg),
                    format!("preempted: team {} reclaimed its {tn} guarantee for {}", p.team, p.name),
                ))
            }
            _ => None,
        };
        if let Some((pick, need, why)) = pick {
            if let Some(vs) = victims(ledger, pick, need) {
                let vs: Vec<String> = vs.into_iter().map(str::to_string).collect();
                for v in vs {
                    if let Some(r) = ledger.release(&v, &why) {
                        tally.remove(world, &r);
                    }
                    batch.preempted.push((v, why.clone()));
                }
                b = blocker(world, ledger, &tally, p, now);
            }
        }
        match b {
            None => {
                let r = Reservation {
                    team: p.team.clone(),
                    tier: p.tier,
                    priority: p.priority,
                    amount: p.demand,
                    admitted_at: now,
                    expected_end: p.expected_duration.map(|d| later(now, d)),
                };
                tally.add(world, &r);
                ledger.reserve(&p.name, r.clone());
                batch.admitted.push((p.name.clone(), r));
            }
            Some(b) => batch.waiting.push((p.name.clone(), b)),
        }
    }
    batch
}

/// When a waiting submission is expected to start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Estimate {
    pub earliest: DateTime<Utc>,
    pub latest: DateTime<Utc>,
}

/// A waiting submission as its owner sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// 1-based, in its team's queue.
    pub position: usize,
    /// Ahead of it in the whole fleet's order.
    pub ahead_in_fleet: usize,
    /// None: it waits on work with no expected end (services), or is
    /// beyond what the estimate looks at.
    pub estimate: Option<Estimate>,
    pub why: Blocker,
}

/// How far the estimate looks: the first this many in line, over at most
/// this many events.
const SIMULATED: usize = 2000;
const EVENTS: usize = 4000;

/// Starts of the queue's submissions if everything ahead of them runs for
/// `factor` × its expected duration (no new submissions arrive).
fn simulate(
    world: &World,
    ledger: &Ledger,
    queue: &[Pending],
    now: DateTime<Utc>,
    factor: f64,
) -> HashMap<String, DateTime<Utc>> {
    // A float scaled back to milliseconds saturates at the ends of i64.
    let scale = |d: Duration| {
        Duration::try_milliseconds((d.num_milliseconds() as f64 * factor) as i64).unwrap_or(Duration::MAX)
    };
    let mut l = ledger.clone();
    let mut ends: BinaryHeap<Reverse<(DateTime<Utc>, String)>> = l
        .reservations
        .iter()
        .filter_map(|(n, r)| {
            r.expected_end.map(|e| (n, later(r.admitted_at, scale(e.signed_duration_since(r.admitted_at)))))
        })
        .map(|(n, e)| Reverse((e.max(now), n.clone())))
        .collect();
    let mut left: Vec<Pending> = queue.iter().take(SIMULATED).cloned().collect();
    let mut starts = HashMap::new();
    let mut t = now;
    for _ in 0..EVENTS {
        let batch = decide(world, &mut l, &left, t);
        let admitted: std::collections::HashSet<&str> = batch.admitted.iter().map(|(n, _)| n.as_str()).collect();
        for p in &left {
            if admitted.contains(p.name.as_str()) {
                starts.insert(p.name.clone(), t);
                if let Some(d) = p.expected_duration {
                    ends.push(Reverse((later(t, scale(d)), p.name.clone())));
                }
            }
        }
        left.retain(|p| !admitted.contains(p.name.as_str()));
        if left.is_empty() {
            break;
        }
        let retry = batch.waiting.iter().filter_map(|(_, b)| b.retry_at).filter(|r| *r > t).min();
        let next_end = ends.peek().map(|Reverse((e, _))| *e);
        let next = match (retry, next_end) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(x) => x,
                None => break,
            },
        };
        t = next.max(t);
        while ends.peek().is_some_and(|Reverse((e, _))| *e <= t) {
            let Reverse((_, n)) = ends.pop().expect("peeked");
            l.release(&n, "finished");
        }
    }
    starts
}

/// Positions and reasons only (cheap: every pass), estimates left empty.
pub fn explain_positions(queue: &[Pending], waiting: &[(String, Blocker)]) -> BTreeMap<String, Waiting> {
    let why: HashMap<&str, &Blocker> = waiting.iter().map(|(n, b)| (n.as_str(), b)).collect();
    let mut per_team: HashMap<&str, usize> = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, p) in queue.iter().filter(|p| why.contains_key(p.name.as_str())).enumerate() {
        let pos = per_team.entry(p.team.as_str()).or_default();
        *pos = pos.saturating_add(1);
        out.insert(
            p.name.clone(),
            Waiting { position: *pos, ahead_in_fleet: i, estimate: None, why: why[p.name.as_str()].clone() },
        );
    }
    out
}

/// Position, estimate and reason of every waiting submission. `queue` in
/// [`order`]; `waiting` from the last [`decide`] on the same ledger.
pub fn explain(
    world: &World,
    ledger: &Ledger,
    queue: &[Pending],
    waiting: &[(String, Blocker)],
    now: DateTime<Utc>,
) -> BTreeMap<String, Waiting> {
    let why: HashMap<&str, &Blocker> = waiting.iter().map(|(n, b)| (n.as_str(), b)).collect();
    let waiting_queue: Vec<Pending> = queue.iter().filter(|p| why.contains_key(p.name.as_str())).cloned().collect();
    let expected = simulate(world, ledger, &waiting_queue, now, 1.0);
    let slow = simulate(world, ledger, &waiting_queue, now, 1.5);
    let mut per_team: HashMap<&str, usize> = HashMap::new();
    let mut out = BTreeMap::new();
    for (i, p) in waiting_queue.iter().enumerate() {
        let pos = per_team.entry(p.team.as_str()).or_default();
        *pos = pos.saturating_add(1);
        let estimate = match (expected.get(&p.name), slow.get(&p.name)) {
            (Some(a), Some(b)) => Some(Estimate { earliest: *a.min(b), latest: *a.max(b) }),
            (Some(a), None) => Some(Estimate { earliest: *a, latest: *a }),
            _ => None,
        };
        out.insert(
            p.name.clone(),
            Waiting { position: *pos, ahead_in_fleet: i, estimate, why: why[p.name.as_str()].clone() },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::quota::Limits;

    fn t(s: &str) -> DateTime<Utc> {
        format!("2026-11-24T{s}Z").parse().unwrap()
    }

    fn cpu(c: u64) -> Amount {
        Amount::new(c * 1000, c << 30, c)
    }

    fn quota(team: &str, cohort: &str, tiers: &[(Tier, u64, u64)]) -> Quota {
        Quota {
            team: team.into(),
            cohort: cohort.into(),
            tiers: tiers
                .iter()
                .map(|(t, g, m)| (tier_name(*t), Limits { guaranteed: cpu(*g), max: cpu(*m) }))
                .collect(),
            max_workloads: None,
            pods_per_minute: None,
        }
    }

    fn pending(name: &str, team: &str, tier: Tier, c: u64, created: &str) -> Pending {
        Pending {
            name: name.into(),
            team: team.into(),
            tier,
            priority: 0,
            created: t(created),
            demand: cpu(c),
            expected_duration: Some(Duration::minutes(30)),
            backoff: None,
        }
    }

    fn world(qs: Vec<Quota>, fleet: u64) -> World {
        World::new(qs.into_iter().map(|q| (q.team.clone(), q)).collect(), cpu(fleet))
    }

    #[test]
    fn a_team_borrows_what_its_cohort_leaves_unused_up_to_its_maximum() {
        let w =
            world(vec![quota("a", "c", &[(Tier::OnDemand, 4, 10)]), quota("b", "c", &[(Tier::OnDemand, 4, 4)])], 100);
        let mut l = Ledger::default();
        let mut q =
            vec![pending("a1", "a", Tier::OnDemand, 6, "10:00:00"), pending("a2", "a", Tier::OnDemand, 3, "10:00:01")];
        order(&mut q);
        let b = decide(&w, &mut l, &q, t("10:00:05"));
        assert_eq!(b.admitted.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["a1"]);
        let (n, why) = &b.waiting[0];
        assert_eq!(n, "a2");
        assert_eq!(why.kind, Kind::Cohort);
        assert_eq!(why.resource.as_deref(), Some("cpu"));
        assert_eq!(why.short, "1");
        assert_eq!(why.message, "team a would borrow 5 cpu beyond its OnDemand guarantee, cohort c has 2 unused");
    }

    #[test]
    fn the_team_maximum_is_named_with_what_would_unblock_it() {
        let w = world(vec![quota("a", "a", &[(Tier::OnDemand, 8, 8)])], 100);
        let mut l = Ledger::default();
        let q =
            vec![pending("a1", "a", Tier::OnDemand, 6, "10:00:00"), pending("a2", "a", Tier::OnDemand, 4, "10:00:01")];
        let b = decide(&w, &mut l, &q, t("10:00:05"));
        let why = &b.waiting[0].1;
        assert_eq!(why.kind, Kind::Quota);
        assert_eq!(why.message, "team a's OnDemand maximum: 6 of 8 cpu in use, this asks 4 (2 over)");
        assert_eq!(why.unblock, "2 cpu freed by team a's OnDemand work finishing, or a higher maximum");
        // The estimate: a1 ends 30 minutes after its admission, then a2
        // starts; if a1 runs 1.5 × as long, 15 minutes later.
        let ex = explain(&w, &l, &q, &b.waiting, t("10:00:05"));
        let e = ex["a2"].estimate.unwrap();
        assert_eq!((e.earliest, e.latest), (t("10:30:05"), t("10:45:05")));
        assert_eq!(ex["a2"].position, 1);
    }

    #[test]
    fn reserved_work_takes_the_place_of_preemptible_work_when_the_fleet_is_full() {
        let w = world(
            vec![quota("a", "a", &[(Tier::Reserved, 8, 8)]), quota("b", "b", &[(Tier::Preemptible, 10, 10)])],
            10,
        );
        let mut l = Ledger::default();
        decide(
            &w,
            &mut l,
            &[
                pending("b1", "b", Tier::Preemptible, 4, "09:00:00"),
                pending("b2", "b", Tier::Preemptible, 6, "09:00:01"),
            ],
            t("09:00:02"),
        );
        assert_eq!(l.total(), cpu(10));
        let b = decide(&w, &mut l, &[pending("a1", "a", Tier::Reserved, 5, "10:00:00")], t("10:00:05"));
        // The lowest priority, most recently admitted first: b2 (6) is enough.
        assert_eq!(b.preempted.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b2"]);
        assert_eq!(b.admitted[0].0, "a1");
        assert!(l.released["b2"].contains("fleet was full"));
        // Preemptible work never takes Reserved work's place.
        let b = decide(&w, &mut l, &[pending("b3", "b", Tier::Preemptible, 2, "10:00:06")], t("10:00:07"));
        assert!(b.preempted.is_empty());
        assert_eq!(b.waiting[0].1.kind, Kind::Fleet);
    }

    #[test]
    fn a_team_within_its_guarantee_reclaims_what_others_borrowed() {
        let w =
            world(vec![quota("a", "c", &[(Tier::OnDemand, 5, 5)]), quota("b", "c", &[(Tier::OnDemand, 5, 10)])], 100);
        let mut l = Ledger::default();
        decide(
            &w,
            &mut l,
            &[pending("b1", "b", Tier::OnDemand, 5, "09:00:00"), pending("b2", "b", Tier::OnDemand, 5, "09:00:01")],
            t("09:00:02"),
        );
        let b = decide(&w, &mut l, &[pending("a1", "a", Tier::OnDemand, 3, "10:00:00")], t("10:00:05"));
        assert_eq!(b.preempted.len(), 1);
        assert_eq!(b.admitted[0].0, "a1");
        assert!(l.usage("b", Tier::OnDemand).cpu >= 5000, "b keeps its own guarantee");
    }

    #[test]
    fn the_creation_rate_holds_a_spike_and_says_when_it_has_room() {
        let mut qa = quota("a", "a", &[(Tier::OnDemand, 100, 100)]);
        qa.pods_per_minute = Some(10);
        qa.max_workloads = Some(3);
        let w = world(vec![qa], 1000);
        let mut l = Ledger::default();
        let q: Vec<Pending> =
            (0..4).map(|i| pending(&format!("a{i}"), "a", Tier::OnDemand, 4, &format!("10:00:0{i}"))).collect();
        let b = decide(&w, &mut l, &q, t("10:00:10"));
        assert_eq!(b.admitted.len(), 2, "8 pods, a third would make 12 > 10");
        let why = &b.waiting[0].1;
        assert_eq!(why.kind, Kind::Rate);
        assert_eq!(why.retry_at, Some(t("10:01:10")));
        let b = decide(&w, &mut l, &q[2..], t("10:01:11"));
        assert_eq!(b.admitted.len(), 1);
        assert_eq!(b.waiting[0].1.kind, Kind::Workloads);
    }

    /// Quota with A100s: each tier's (guaranteed, max) of cpu and of GPUs.
    fn gpu_quota(team: &str, cohort: &str, tiers: &[(Tier, u64, u64, u64, u64)]) -> Quota {
        let mut q = quota(team, cohort, &[]);
        for (t, g, m, gg, gm) in tiers {
            q.tiers.insert(
                tier_name(*t),
                Limits { guaranteed: cpu(*g).with(Resource::GpuA100, *gg), max: cpu(*m).with(Resource::GpuA100, *gm) },
            );
        }
        q
    }

    fn gang(name: &str, team: &str, c: u64, gpus: u64, created: &str) -> Pending {
        let mut p = pending(name, team, Tier::OnDemand, c, created);
        p.demand = p.demand.with(Resource::GpuA100, gpus);
        p
    }

    #[test]
    fn gpus_borrow_wait_and_are_named_by_their_flavor() {
        let mut fleet = cpu(100).with(Resource::GpuA100, 16);
        fleet.pods = 100;
        let w = World::new(
            [
                gpu_quota("a", "ml", &[(Tier::OnDemand, 10, 20, 8, 16)]),
                gpu_quota("b", "ml", &[(Tier::OnDemand, 10, 20, 8, 8)]),
            ]
            .into_iter()
            .map(|q| (q.team.clone(), q))
            .collect(),
            fleet,
        );
        let mut l = Ledger::default();
        // b takes its own 8 A100s; a's gang of 16 would borrow 8 the cohort
        // no longer has: it waits whole, and a's gang of 8 (its own) runs.
        let q = vec![
            gang("b1", "b", 2, 8, "10:00:00"),
            gang("a1", "a", 2, 16, "10:00:01"),
            gang("a2", "a", 2, 8, "10:00:02"),
        ];
        let b = decide(&w, &mut l, &q, t("10:00:05"));
        assert_eq!(b.admitted.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b1", "a2"]);
        assert!(b.preempted.is_empty());
        assert_eq!((l.usage("a", Tier::OnDemand).gpu_a100, l.usage("b", Tier::OnDemand).gpu_a100), (8, 8));
        let (n, why) = &b.waiting[0];
        assert_eq!((n.as_str(), why.kind, why.resource.as_deref()), ("a1", Kind::Cohort, Some("gpu-a100")));
        assert!(why.message.contains("nvidia.com/gpu A100"), "{}", why.message);
        // Alone, a's gang borrows b's unused guarantee, whole; b within its
        // guarantee then takes it back by preempting the gang whole.
        let mut l = Ledger::default();
        let b = decide(&w, &mut l, &[gang("a1", "a", 2, 16, "10:00:00")], t("10:00:05"));
        assert_eq!(b.admitted.len(), 1);
        let b = decide(&w, &mut l, &[gang("b1", "b", 2, 8, "10:01:00")], t("10:01:05"));
        assert_eq!((b.admitted[0].0.as_str(), b.preempted.len()), ("b1", 1));
        assert_eq!((l.usage("a", Tier::OnDemand).gpu_a100, l.usage("b", Tier::OnDemand).gpu_a100), (0, 8));
        // A team without A100s in its quota can never be admitted, said at once.
        let none = never(&w, "b", Tier::OnDemand, &cpu(1).with(Resource::GpuA100, 9));
        assert_eq!(
            none.as_deref(),
            Some("asks 9 nvidia.com/gpu A100, more than team b's OnDemand maximum of 8: it can never be admitted")
        );
        let w0 = World::new([("z".to_string(), gpu_quota("z", "z", &[(Tier::OnDemand, 10, 10, 0, 0)]))].into(), fleet);
        assert_eq!(
            never(&w0, "z", Tier::OnDemand, &cpu(1).with(Resource::GpuH100, 1)).as_deref(),
            Some("asks 1 nvidia.com/gpu H100 (gpu-h100), not in team z's OnDemand quota: it can never be admitted (ask the platform team for gpu-h100 quota)")
        );
    }

    #[test]
    fn what_can_never_fit_is_said_at_once() {
        let w = world(vec![quota("a", "a", &[(Tier::OnDemand, 4, 8)])], 100);
        assert_eq!(
            never(&w, "x", Tier::OnDemand, &cpu(1)).unwrap(),
            "team x has no quota: ask the platform team for one"
        );
        assert_eq!(never(&w, "a", Tier::Reserved, &cpu(1)).unwrap(), "team a has no Reserved quota (it has: OnDemand)");
        assert_eq!(
            never(&w, "a", Tier::OnDemand, &cpu(9)).unwrap(),
            "asks 9 cpu, more than team a's OnDemand maximum of 8: it can never be admitted"
        );
    }

    #[test]
    fn an_evicted_gang_waits_out_its_backoff_and_the_estimate_says_when() {
        let w = world(vec![quota("a", "a", &[(Tier::OnDemand, 8, 8)])], 100);
        let mut l = Ledger::default();
        let mut g = pending("g", "a", Tier::OnDemand, 4, "10:00:00");
        g.backoff = Some(Backoff { evictions: 1, until: t("10:06:00") });
        let q = vec![g.clone(), pending("h", "a", Tier::OnDemand, 2, "10:00:01")];
        let b = decide(&w, &mut l, &q, t("10:05:10"));
        assert_eq!(b.admitted.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["h"], "the rest goes on");
        let why = &b.waiting[0].1;
        assert_eq!((b.waiting[0].0.as_str(), why.kind, why.retry_at), ("g", Kind::Backoff, Some(t("10:06:00"))));
        assert_eq!(why.message, "evicted 1 time: its pods were not all ready in time (waitForPodsReady); requeued with backoff, it may be admitted again from 10:06:00");
        assert_eq!(why.unblock, "time: the backoff ends at 10:06:00");
        let ex = explain(&w, &l, &q, &b.waiting, t("10:05:10"));
        assert_eq!(ex["g"].estimate.map(|e| e.earliest), Some(t("10:06:00")));
        // Once the backoff ends it is admitted as any other.
        let b = decide(&w, &mut l, &[g], t("10:06:00"));
        assert_eq!(b.admitted.len(), 1);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Whatever arrives in whatever order, no pass leaves a team over
            /// its maximum, a cohort over its guarantees or the fleet over
            /// its capacity.
            #[test]
            fn no_pass_over_admits(
                jobs in proptest::collection::vec((0usize..4, 0usize..3, 1u64..6, -2i32..3, 0u64..9), 1..60),
                fleet in 5u64..60,
                gpus in 0u64..40,
            ) {
                // Every flavor as cpu is: A100s in the quotas, the fleet and the demands.
                let with_gpus = |q: Quota| {
                    let mut q = q;
                    for l in q.tiers.values_mut() {
                        l.guaranteed = l.guaranteed.with(Resource::GpuA100, l.guaranteed.cpu / 1000);
                        l.max = l.max.with(Resource::GpuA100, l.max.cpu / 1000);
                    }
                    q
                };
                let qs = vec![
                    quota("a", "c", &[(Tier::Reserved, 6, 12), (Tier::OnDemand, 4, 10), (Tier::Preemptible, 2, 20)]),
                    quota("b", "c", &[(Tier::Reserved, 3, 3), (Tier::OnDemand, 6, 8), (Tier::Preemptible, 2, 20)]),
                    quota("d", "d", &[(Tier::OnDemand, 5, 5), (Tier::Preemptible, 5, 30)]),
                    quota("e", "e", &[(Tier::Reserved, 10, 10)]),
                ];
                let w = World::new(
                    qs.into_iter().map(with_gpus).map(|q| (q.team.clone(), q)).collect(),
                    cpu(fleet).with(Resource::GpuA100, gpus),
                );
                let teams = ["a", "b", "d", "e"];
                let tiers = [Tier::Reserved, Tier::OnDemand, Tier::Preemptible];
                let mut l = Ledger::default();
                for (i, chunk) in jobs.chunks(7).enumerate() {
                    let mut q: Vec<Pending> = chunk.iter().enumerate().map(|(j, (team, tier, c, prio, g))| {
                        let mut p = pending(&format!("w{i}-{j}"), teams[*team], tiers[*tier], *c, "10:00:00");
                        p.demand = p.demand.with(Resource::GpuA100, *g);
                        p.priority = *prio;
                        p
                    }).collect();
                    order(&mut q);
                    decide(&w, &mut l, &q, t("10:00:00") + Duration::seconds(i as i64));
                    prop_assert!(l.total().over(&w.fleet).is_none(), "fleet over: {:?}", l.total());
                    for q in w.quotas.values() {
                        for tier in tiers {
                            if let Some(lim) = q.limits(tier) {
                                prop_assert!(l.usage(&q.team, tier).over(&lim.max).is_none());
                            }
                        }
                    }
                    for tier in tiers {
                        for cohort in ["c", "d", "e"] {
                            let g = w.cohort_guaranteed.get(&(cohort.to_string(), tier_name(tier))).copied().unwrap_or_default();
                            let u = w.quotas.values().filter(|q| q.cohort == cohort).fold(Amount::default(), |a, q| a.plus(l.usage(&q.team, tier)));
                            prop_assert!(u.over(&g).is_none(), "cohort {cohort} over");
                        }
                    }
                }
            }
        }
    }

    /// Issue 48: no record stops the pass. Whatever a record holds (a
    /// demand of u64::MAX, a run of a million years, a quota of u64::MAX),
    /// deciding and explaining the queue completes, and a saturated count
    /// is never admitted past a finite maximum.
    mod hostile {
        use super::*;
        use proptest::prelude::*;

        fn extreme() -> impl Strategy<Value = u64> {
            prop_oneof![Just(0u64), Just(1), Just(u64::MAX), Just(u64::MAX / 2), Just(1u64 << 40), 0u64..10_000]
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]
            #[test]
            fn deciding_and_explaining_never_panic(
                demands in proptest::collection::vec((extreme(), extreme(), extreme()), 1..6),
                seconds in proptest::collection::vec(prop_oneof![Just(i64::MAX / 1000), Just(0i64), Just(-1i64), 0i64..1_000_000, Just(366 * 86_400)], 1..6),
                guaranteed in extreme(),
                max in extreme(),
            ) {
                let mut q = quota("a", "c", &[(Tier::OnDemand, 0, 0)]);
                q.tiers.insert(tier_name(Tier::OnDemand), Limits {
                    guaranteed: Amount::new(guaranteed, guaranteed, guaranteed),
                    max: Amount::new(max, max, max),
                });
                let w = World::new([("a".to_string(), q)].into_iter().collect(), Amount::new(u64::MAX, u64::MAX, u64::MAX));
                let queue: Vec<Pending> = demands
                    .iter()
                    .zip(seconds.iter().cycle())
                    .enumerate()
                    .map(|(i, ((c, m, p), s))| Pending {
                        name: format!("p{i}"),
                        team: "a".into(),
                        tier: Tier::OnDemand,
                        priority: 0,
                        created: t("10:00:00"),
                        demand: Amount::new(*c, *m, *p),
                        expected_duration: Duration::try_seconds(*s),
                        backoff: None,
                    })
                    .collect();
                let mut l = Ledger::default();
                let now = t("10:00:05");
                let b = decide(&w, &mut l, &queue, now);
                let _ = explain(&w, &l, &queue, &b.waiting, now);
                // Whatever was admitted fits the team's maximum.
                let mut used = Amount::default();
                for (_, r) in &b.admitted {
                    used = used.plus(r.amount);
                }
                prop_assert!(used.over(&Amount::new(max, max, max)).is_none() || max == u64::MAX, "{used:?} over {max}");
            }
        }
    }
}
