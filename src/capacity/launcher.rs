//! The capacity launcher's decisions (pure): how a group's new machines
//! are batched, which offering each batch tries next, what a refusal
//! means, when the per-minute cap stops a launch, how a Mixed group splits
//! its machines between the markets, and what the ledger records.
//!
//! ```text
//! Launcher::new(request, ledger) ──next()──▶ Step::Fleet / Step::Run
//!        ▲                                      │ CreateFleet / RunInstances
//!        └── fleet_answered / run_launched / ───┘ (cloud::aws::ops::launch)
//!            run_refused
//!     next() ──▶ Step::Record ── the ledger store ──▶ recorded(ledger)
//!     next() ──▶ Step::Blocked (why) | Step::Done
//! ```
//!
//! The EC2 calls and the ledger's store are at the edge
//! (`cloud::aws::ops::launch`); this room only decides, so a whole
//! multi-batch, multi-zone launch, with the Spot fleet's partial answers,
//! is tested here without AWS. Each batch starts from the ledger the last
//! one wrote: what one batch was refused, the next does not ask again.

use std::collections::{BTreeMap, VecDeque};

use chrono::{DateTime, Utc};

use super::{
    blocked_reason, capped_reason, offerings, on_demand_needed, usable, Attempts, Blocked, GroupCapacity, Launch,
    Ledger, Market, Offering,
};

/// What a launch is asked to do, from the cluster's facts.
#[derive(Debug, Clone)]
pub struct Request {
    /// The group's name.
    pub group: String,
    /// Who launches, as the ledger names it: `cluster/group`.
    pub by: String,
    /// The group's offerings, when it names more than one.
    pub capacity: Option<GroupCapacity>,
    /// The group's subnets, in its file's order.
    pub subnets: Vec<String>,
    /// Each subnet's zone.
    pub zone_of: BTreeMap<String, String>,
    /// One subnet per new machine (see `cloud::aws::ops::spread`).
    pub placement: Vec<String>,
    /// The first machine is the cluster's first control plane, launched
    /// alone (its user data runs `kubeadm init`).
    pub first_is_init: bool,
    /// The group's live machines by market, for a Mixed group's split.
    pub live_on_demand: u32,
    pub live_spot: u32,
    /// The sequence number of the first new machine (client tokens).
    pub seq: usize,
}

/// One batch: a subnet, how many machines, whether it is the init machine,
/// and the markets it is held to (a Mixed group's On-Demand share).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub subnet: String,
    pub count: i32,
    pub init: bool,
    pub markets: Option<Vec<Market>>,
}

/// What the edge does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// One instant Spot fleet over these offerings (each with its subnet)
    /// for `count` machines; answer with [`Launcher::fleet_answered`].
    Fleet { offerings: Vec<(Offering, String)>, count: i32, seq: usize },
    /// One RunInstances of `count` machines (on `offering`, or the launch
    /// template's own type when the group names none); answer with
    /// [`Launcher::run_launched`] or [`Launcher::run_refused`].
    Run { offering: Option<Offering>, subnet: String, count: i32, init: bool, seq: usize },
    /// Write these to the ledger; answer with [`Launcher::recorded`].
    Record { refusals: Vec<(Offering, String, String)>, launches: Vec<Launch> },
    /// The launch stops here: what is launched so far stays.
    Blocked(Blocked),
    /// Every batch launched.
    Done,
}

/// The batch being launched.
#[derive(Debug, Clone)]
struct Current {
    count: i32,
    init: bool,
    /// Every offering the batch may use, and those it asked for.
    offered: Vec<Offering>,
    asked: Vec<Offering>,
    /// The Spot offerings for one fleet call, until it is made.
    fleet: Vec<(Offering, String)>,
    /// What is left to try one call at a time.
    rest: VecDeque<(Option<Offering>, String)>,
    /// The offering of the RunInstances awaiting its answer.
    asking: Option<Offering>,
    launched: bool,
    capped: Option<String>,
    /// The batch's record for the ledger, once made.
    recording: Option<(Vec<(Offering, String, String)>, Vec<Launch>)>,
    recorded: bool,
}

/// A launch, one decision at a time.
#[derive(Debug)]
pub struct Launcher {
    request: Request,
    ledger: Ledger,
    tries: Option<Attempts>,
    batches: VecDeque<Batch>,
    current: Option<Current>,
    seq: usize,
    stopped: bool,
}

/// The batches for `placement`: the init machine alone, the rest one
/// batch per subnet (in placement order).
pub fn batches(placement: &[String], first_is_init: bool) -> Vec<(String, i32, bool)> {
    let mut out: Vec<(String, i32, bool)> = Vec::new();
    for (n, subnet) in placement.iter().enumerate() {
        let init = first_is_init && n == 0;
        match out.iter_mut().find(|(s, _, i)| s == subnet && !*i && !init) {
            Some(b) => b.1 = b.1.saturating_add(1),
            None => out.push((subnet.clone(), 1, init)),
        }
    }
    out
}

/// A Mixed group's batches split into the machines that must be
/// On-Demand (its base, and the share above it) and those that go to Spot
/// first; other groups' batches as they are.
pub fn split(batches: Vec<(String, i32, bool)>, mixed: Option<(u32, u32)>, on_demand: u32, spot: u32) -> Vec<Batch> {
    let (mut on_demand, mut spot) = (on_demand, spot);
    let mut out = Vec::new();
    for (subnet, n, init) in batches {
        let Some((base, percent)) = mixed else {
            out.push(Batch { subnet, count: n, init, markets: None });
            continue;
        };
        let wanted = u32::try_from(n).unwrap_or(0);
        let k = on_demand_needed(base, percent, on_demand, spot, wanted);
        on_demand = on_demand.saturating_add(k);
        spot = spot.saturating_add(wanted - k);
        let k = i32::try_from(k).unwrap_or(n);
        if k > 0 {
            out.push(Batch { subnet: subnet.clone(), count: k, init, markets: Some(vec![Market::OnDemand]) });
        }
        if n - k > 0 {
            out.push(Batch { subnet, count: n - k, init: init && k == 0, markets: None });
        }
    }
    out
}

impl Launcher {
    /// A launch starting from `ledger` (the fleet-wide one, just read).
    pub fn new(request: Request, ledger: Ledger, now: DateTime<Utc>) -> Launcher {
        let tries = request.capacity.as_ref().map(|c| Attempts::new(&request.by, c.launches_per_minute, &ledger, now));
        let mixed = request.capacity.as_ref().and_then(|c| c.mixed);
        let batches =
            split(batches(&request.placement, request.first_is_init), mixed, request.live_on_demand, request.live_spot);
        let seq = request.seq;
        Launcher { request, ledger, tries, batches: batches.into(), current: None, seq, stopped: false }
    }

    /// The ledger as the launch last saw it.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// What to do next.
    pub fn next(&mut self, now: DateTime<Utc>) -> Step {
        if self.stopped {
            return Step::Done;
        }
        loop {
            let Some(cur) = self.current.as_mut() else {
                let Some(batch) = self.batches.pop_front() else { return Step::Done };
                match self.start(batch, now) {
                    Ok(cur) => self.current = Some(cur),
                    Err(blocked) => return self.stop(blocked),
                }
                continue;
            };
            if !cur.fleet.is_empty() {
                let fleet = std::mem::take(&mut cur.fleet);
                if let Some(Err(why)) = self.tries.as_mut().map(Attempts::call) {
                    cur.capped = Some(why);
                    continue;
                }
                cur.asked.extend(fleet.iter().map(|(o, _)| o.clone()));
                return Step::Fleet { offerings: fleet, count: cur.count, seq: self.seq };
            }
            if !cur.launched && cur.capped.is_none() {
                if let Some((offering, subnet)) = cur.rest.pop_front() {
                    if let Some(Err(why)) = self.tries.as_mut().map(Attempts::call) {
                        cur.capped = Some(why);
                        continue;
                    }
                    cur.asked.extend(offering.clone());
                    cur.asking = offering.clone();
                    return Step::Run { offering, subnet, count: cur.count, init: cur.init, seq: self.seq };
                }
            }
            if let Some(step) = self.finish(now) {
                return step;
            }
        }
    }

    /// The fleet call's answer: how many machines it launched, and the
    /// offerings it could not serve now (an unfulfillable code each);
    /// `errors` counts every error the answer carried.
    pub fn fleet_answered(&mut self, launched: usize, refused: &[(Offering, String)], errors: usize) {
        let Some(cur) = self.current.as_mut() else { return };
        if let Some(t) = self.tries.as_mut() {
            for (o, code) in refused {
                t.refused_override(o, code);
            }
            if launched == 0 && errors > 0 {
                t.fleet_refused();
            }
        }
        let k = i32::try_from(launched).unwrap_or(i32::MAX).min(cur.count);
        self.seq = self.seq.saturating_add(launched);
        cur.count -= k;
        if cur.count == 0 {
            cur.launched = true;
        }
    }

    /// The RunInstances launched the batch.
    pub fn run_launched(&mut self) {
        if let Some(cur) = self.current.as_mut() {
            cur.launched = true;
            cur.asking = None;
        }
    }

    /// EC2 refused the RunInstances' offering with an unfulfillable code:
    /// the next offering is tried.
    pub fn run_refused(&mut self, code: &str) {
        let Some(cur) = self.current.as_mut() else { return };
        if let (Some(o), Some(t)) = (cur.asking.take(), self.tries.as_mut()) {
            t.refused(&o, code);
        }
    }

    /// The ledger as the store wrote it (None: no store, the launch keeps
    /// its own copy).
    pub fn recorded(&mut self, written: Option<Ledger>, now: DateTime<Utc>) {
        let Some(cur) = self.current.as_mut() else { return };
        match written {
            Some(l) => self.ledger = l,
            None => {
                let (refusals, launches) = cur.recording.clone().unwrap_or_default();
                for (o, code, by) in &refusals {
                    self.ledger.mark(o, code, by, now);
                }
                self.ledger.launches.extend(launches);
            }
        }
        cur.recorded = true;
    }

    /// A batch's offerings in the order to try, each with its subnet; or
    /// why none may be tried.
    fn start(&mut self, batch: Batch, now: DateTime<Utc>) -> Result<Current, Blocked> {
        if let Some(t) = self.tries.as_mut() {
            t.next_batch();
        }
        let r = &self.request;
        let attempts: Vec<(Option<Offering>, String)> = match &r.capacity {
            None => vec![(None, batch.subnet.clone())],
            Some(c) => {
                let own = r.zone_of.get(&batch.subnet).cloned().unwrap_or_default();
                let mut zones = vec![own.clone()];
                for z in r.subnets.iter().filter_map(|s| r.zone_of.get(s)) {
                    if !zones.contains(z) {
                        zones.push(z.clone());
                    }
                }
                let all = offerings(batch.markets.as_ref().unwrap_or(&c.markets), &c.types, &zones, &c.fallback);
                let usable = usable(&all, &self.ledger, now);
                if usable.is_empty() {
                    let first = all.iter().find_map(|o| self.ledger.out(o, now));
                    let reason = first
                        .map(|e| blocked_reason(e, None))
                        .unwrap_or_else(|| "blocked on capacity: the group names no offering".into());
                    return Err(Blocked { group: r.group.clone(), reason, churn: self.ledger.churn(&r.by) });
                }
                usable
                    .into_iter()
                    .map(|o| {
                        let s = if o.zone == own {
                            batch.subnet.clone()
                        } else {
                            r.subnets
                                .iter()
                                .find(|s| r.zone_of.get(*s) == Some(&o.zone))
                                .cloned()
                                .unwrap_or(batch.subnet.clone())
                        };
                        (Some(o.clone()), s)
                    })
                    .collect()
            }
        };
        let offered: Vec<Offering> = attempts.iter().filter_map(|(o, _)| o.clone()).collect();
        let is_spot = |o: &Option<Offering>| o.as_ref().is_some_and(|o| o.market == Market::Spot);
        // Spot first, all its offerings in one fleet call (EC2 picks the
        // pools least likely to be interrupted); the init machine alone,
        // one offering at a time.
        let (fleet, rest): (Vec<(Offering, String)>, VecDeque<(Option<Offering>, String)>) = if batch.init {
            (Vec::new(), attempts.into())
        } else {
            let fleet = attempts.iter().filter(|(o, _)| is_spot(o)).filter_map(|(o, s)| Some((o.clone()?, s.clone())));
            (fleet.collect(), attempts.iter().filter(|(o, _)| !is_spot(o)).cloned().collect())
        };
        Ok(Current {
            count: batch.count,
            init: batch.init,
            offered,
            asked: Vec::new(),
            fleet,
            rest,
            asking: None,
            launched: false,
            capped: None,
            recording: None,
            recorded: false,
        })
    }

    /// The batch has nothing left to try: its record for the ledger, then
    /// whether the launch goes on. None: the next batch.
    fn finish(&mut self, now: DateTime<Utc>) -> Option<Step> {
        let cur = self.current.as_mut()?;
        if cur.recording.is_none() {
            let (refusals, launches) = match &self.tries {
                Some(t) => (t.refusals.clone(), t.launch(cur.launched, now).into_iter().collect::<Vec<_>>()),
                None => (Vec::new(), Vec::new()),
            };
            cur.recording = Some((refusals.clone(), launches.clone()));
            if !refusals.is_empty() || !launches.is_empty() {
                return Some(Step::Record { refusals, launches });
            }
        }
        let (by, group) = (self.request.by.clone(), self.request.group.clone());
        if !cur.launched {
            let refusals = cur.recording.clone().map(|r| r.0).unwrap_or_default();
            if cur.recorded {
                let reason = match (&cur.capped, refusals.first()) {
                    (Some(c), _) => capped_reason(c, &cur.offered, &cur.asked),
                    (None, Some(r)) => self.ledger.out(&r.0, now).map(|e| blocked_reason(e, None)).unwrap_or_default(),
                    (None, None) => "blocked on capacity".into(),
                };
                let churn = self.ledger.churn(&by);
                return Some(self.stop(Blocked { group, reason, churn }));
            }
            if let Some(c) = &cur.capped {
                let reason = capped_reason(c, &cur.offered, &cur.asked);
                return Some(self.stop(Blocked { group, reason, churn: None }));
            }
        }
        let left = usize::try_from(cur.count).unwrap_or(0);
        self.seq = self.seq.saturating_add(left);
        self.current = None;
        None
    }

    fn stop(&mut self, blocked: Blocked) -> Step {
        self.stopped = true;
        self.current = None;
        Step::Blocked(blocked)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Fallback;
    use super::*;
    use std::collections::BTreeSet;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn od(t: &str, z: &str) -> Offering {
        Offering { market: Market::OnDemand, instance_type: t.into(), zone: z.into() }
    }

    fn spot(t: &str, z: &str) -> Offering {
        Offering { market: Market::Spot, instance_type: t.into(), zone: z.into() }
    }

    /// Two subnets in two zones; the group names `types` and `markets`.
    fn request(markets: Vec<Market>, types: &[&str], placement: &[&str], cap: u32) -> Request {
        Request {
            group: "workers".into(),
            by: "c/workers".into(),
            capacity: Some(GroupCapacity {
                types: types.iter().map(|t| t.to_string()).collect(),
                markets,
                fallback: vec![Fallback::Zone, Fallback::Type],
                launches_per_minute: cap,
                mixed: None,
            }),
            subnets: vec!["a".into(), "b".into()],
            zone_of: BTreeMap::from([("a".into(), "us-east-1a".into()), ("b".into(), "us-east-1b".into())]),
            placement: placement.iter().map(|s| s.to_string()).collect(),
            first_is_init: false,
            live_on_demand: 0,
            live_spot: 0,
            seq: 0,
        }
    }

    /// EC2 as a table of what is out; a fleet launches `spot_room` machines
    /// at most. Drives the launch to its end: each step taken, the ledger
    /// kept as a store would.
    fn drive(l: &mut Launcher, out: &BTreeSet<Offering>, spot_room: usize, now: DateTime<Utc>) -> Vec<Step> {
        let mut steps = Vec::new();
        let mut store = l.ledger().clone();
        for _ in 0..100 {
            let step = l.next(now);
            steps.push(step.clone());
            match step {
                Step::Done | Step::Blocked(_) => return steps,
                Step::Record { refusals, launches } => {
                    for (o, code, by) in &refusals {
                        store.mark(o, code, by, now);
                    }
                    store.launches.extend(launches);
                    l.recorded(Some(store.clone()), now);
                }
                Step::Fleet { offerings, count, .. } => {
                    let refused: Vec<(Offering, String)> = offerings
                        .iter()
                        .filter(|(o, _)| out.contains(o))
                        .map(|(o, _)| (o.clone(), "InsufficientInstanceCapacity".to_string()))
                        .collect();
                    let served = offerings.len() > refused.len();
                    let got = if served { spot_room.min(usize::try_from(count).unwrap()) } else { 0 };
                    l.fleet_answered(got, &refused, refused.len());
                }
                Step::Run { offering, .. } => match offering {
                    Some(o) if out.contains(&o) => l.run_refused("InsufficientInstanceCapacity"),
                    _ => l.run_launched(),
                },
            }
        }
        panic!("the launch did not end: {steps:?}");
    }

    fn runs(steps: &[Step]) -> Vec<(Offering, String, i32)> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Run { offering: Some(o), subnet, count, .. } => Some((o.clone(), subnet.clone(), *count)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn batches_put_the_init_machine_alone_and_the_rest_one_per_subnet() {
        let p: Vec<String> = ["a", "b", "a", "b", "a"].map(String::from).to_vec();
        assert_eq!(batches(&p, true), [("a".into(), 1, true), ("b".into(), 2, false), ("a".into(), 2, false)]);
        assert_eq!(batches(&p, false), [("a".into(), 3, false), ("b".into(), 2, false)]);
    }

    #[test]
    fn a_mixed_group_keeps_its_base_on_demand_and_spots_its_share() {
        // Base 2, 50% Spot above it: of 6 new machines, 2 + 2 On-Demand, 2 Spot.
        let b = split(vec![("a".into(), 6, false)], Some((2, 50)), 0, 0);
        assert_eq!(b[0], Batch { subnet: "a".into(), count: 4, init: false, markets: Some(vec![Market::OnDemand]) });
        assert_eq!(b[1], Batch { subnet: "a".into(), count: 2, init: false, markets: None });
        // Already over its base: the next two go half and half.
        let b = split(vec![("b".into(), 2, false)], Some((2, 50)), 4, 2);
        assert_eq!(b.iter().map(|b| b.count).collect::<Vec<_>>(), [1, 1]);
    }

    /// Two batches over two zones, the first type out in zone a: the
    /// first batch is refused it once and falls back to zone b; the later
    /// batches never ask for it again (the ledger the first one wrote).
    #[test]
    fn a_multi_batch_multi_zone_launch_asks_for_a_refused_offering_once() {
        let now = at("2026-11-27T10:00:00Z");
        let out = BTreeSet::from([od("m6i.large", "us-east-1a")]);
        let req = request(vec![Market::OnDemand], &["m6i.large", "m6a.large"], &["a", "b", "a", "b", "a"], 6);
        let mut l = Launcher::new(req, Ledger::default(), now);
        let steps = drive(&mut l, &out, 0, now);
        assert_eq!(steps.last(), Some(&Step::Done));
        assert_eq!(
            runs(&steps),
            [
                (od("m6i.large", "us-east-1a"), "a".into(), 3),
                (od("m6i.large", "us-east-1b"), "b".into(), 3),
                (od("m6i.large", "us-east-1b"), "b".into(), 2),
            ]
        );
        let e = l.ledger().out(&od("m6i.large", "us-east-1a"), now).expect("the refusal is in the ledger");
        assert_eq!(e.strikes, 1);
        let calls: Vec<u32> = l.ledger().launches.iter().map(|x| x.calls).collect();
        assert_eq!(calls, [2, 1], "one record per batch that called");
    }

    /// A group asking for one A10G or L4 by requirements: EC2 out of g5
    /// in both zones, the launch falls back to g6 through the ledger as a
    /// group of cpu/memory requirements does, and never asks for g5 again.
    #[test]
    fn an_accelerated_group_falls_back_from_g5_to_g6_when_ec2_refuses_g5() {
        let now = at("2026-11-27T10:00:00Z");
        let r: crate::capacity::Requirements = serde_json::from_value(serde_json::json!({
            "vcpu": {"max": 4}, "accelerators": {"count": {"max": 1}, "products": ["A10G", "L4"]}
        }))
        .unwrap();
        let types = crate::capacity::matching(&r, crate::capacity::Arch::X86_64);
        assert_eq!(types, ["g5.xlarge", "g6.xlarge"]);
        let types: Vec<&str> = types.iter().map(String::as_str).collect();
        let out = BTreeSet::from([od("g5.xlarge", "us-east-1a"), od("g5.xlarge", "us-east-1b")]);
        let mut l = Launcher::new(request(vec![Market::OnDemand], &types, &["a", "b", "a"], 6), Ledger::default(), now);
        let steps = drive(&mut l, &out, 0, now);
        assert_eq!(steps.last(), Some(&Step::Done), "{steps:?}");
        let asked = runs(&steps);
        let (refused, served): (Vec<_>, Vec<_>) = asked.iter().partition(|(o, _, _)| out.contains(o));
        assert_eq!(refused.len(), 2, "each g5 offering asked once: {asked:?}");
        assert!(served.iter().all(|(o, _, _)| o.instance_type == "g6.xlarge"), "{asked:?}");
        assert_eq!(served.iter().map(|(_, _, n)| n).sum::<i32>(), 3);
        for z in ["us-east-1a", "us-east-1b"] {
            assert!(l.ledger().out(&od("g5.xlarge", z), now).is_some(), "g5 in {z} is held back");
        }
    }

    /// A Spot fleet serves part of the batch and refuses one pool: the
    /// rest goes On-Demand, and the refused pool is not asked for again.
    #[test]
    fn a_spot_fleets_partial_answer_sends_the_rest_on_demand() {
        let now = at("2026-11-27T10:00:00Z");
        let out = BTreeSet::from([spot("m6i.large", "us-east-1a")]);
        let req = request(vec![Market::Spot, Market::OnDemand], &["m6i.large"], &["a", "a", "a", "a", "b"], 6);
        let mut l = Launcher::new(req, Ledger::default(), now);
        let steps = drive(&mut l, &out, 1, now);
        assert_eq!(steps.last(), Some(&Step::Done));
        let fleets: Vec<(Vec<Offering>, i32, usize)> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Fleet { offerings, count, seq } => {
                    Some((offerings.iter().map(|(o, _)| o.clone()).collect(), *count, *seq))
                }
                _ => None,
            })
            .collect();
        assert_eq!(fleets[0], (vec![spot("m6i.large", "us-east-1a"), spot("m6i.large", "us-east-1b")], 4, 0));
        // The second batch's fleet leaves out what the first was refused.
        assert_eq!(fleets[1], (vec![spot("m6i.large", "us-east-1b")], 1, 4));
        // Three of the first batch's four on On-Demand, after the fleet's one.
        assert_eq!(runs(&steps), [(od("m6i.large", "us-east-1a"), "a".into(), 3)]);
    }

    /// The cap of refused calls a minute stops the launch before it asks
    /// again, and says what it never tried.
    #[test]
    fn the_per_minute_cap_stops_the_launch_and_names_what_is_untried() {
        let now = at("2026-11-27T10:00:00Z");
        let out = BTreeSet::from([od("m6i.large", "us-east-1a"), od("m6i.large", "us-east-1b")]);
        let req = request(vec![Market::OnDemand], &["m6i.large", "m6a.large"], &["a"], 2);
        let mut l = Launcher::new(req, Ledger::default(), now);
        let steps = drive(&mut l, &out, 0, now);
        let Some(Step::Blocked(b)) = steps.last() else { panic!("not blocked: {steps:?}") };
        assert!(b.reason.contains("capacity.launchesPerMinute: 2"), "{}", b.reason);
        assert!(b.reason.contains("not yet tried: on-demand m6a.large in us-east-1a"), "{}", b.reason);
        assert_eq!(runs(&steps).len(), 2);
        assert_eq!(l.next(now), Step::Done, "a stopped launch stays stopped");
    }

    /// Every offering held back by the ledger: blocked before any call.
    #[test]
    fn a_launch_whose_offerings_are_all_out_stops_before_its_first_call() {
        let now = at("2026-11-27T10:00:00Z");
        let mut ledger = Ledger::default();
        for z in ["us-east-1a", "us-east-1b"] {
            ledger.mark(&od("m6i.large", z), "InsufficientInstanceCapacity", "other/group", now);
        }
        let req = request(vec![Market::OnDemand], &["m6i.large"], &["a", "b"], 6);
        let mut l = Launcher::new(req, ledger, now);
        let Step::Blocked(b) = l.next(now) else { panic!("expected blocked") };
        assert!(b.reason.contains("every offering of the group is out"), "{}", b.reason);
    }

    /// Without a store the launcher keeps its own copy of the ledger.
    #[test]
    fn without_a_store_the_ledger_is_kept_in_the_launch() {
        let now = at("2026-11-27T10:00:00Z");
        let mut l = Launcher::new(
            request(vec![Market::OnDemand], &["m6i.large", "m6a.large"], &["a", "a"], 6),
            Ledger::default(),
            now,
        );
        assert!(matches!(l.next(now), Step::Run { .. }));
        l.run_refused("InsufficientInstanceCapacity");
        assert!(matches!(l.next(now), Step::Run { .. }));
        l.run_launched();
        assert!(matches!(l.next(now), Step::Record { .. }));
        l.recorded(None, now);
        assert_eq!(l.next(now), Step::Done);
        assert!(l.ledger().out(&od("m6i.large", "us-east-1a"), now).is_some());
        assert_eq!(l.ledger().launches.len(), 1);
    }
}
