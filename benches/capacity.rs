//! A 1,000-node group scaling up while two of its three zones are out of
//! its first three instance types, on a simulated clock. The launch
//! decisions are the library's — the offerings in the group's fallback
//! order (`capacity::offerings`), the ledger's skips and time to live
//! (`Ledger::mark`, `capacity::usable`), the per-launch rate cap and its
//! record (`capacity::Attempts`) — and EC2 is a table of what is out:
//! every call takes a second, a machine is Ready 90 s after its launch, the
//! launcher reconciles every 30 s in batches of up to 100 per subnet.
//!
//! Prints, per variant, the time to all Ready against the floor (the same
//! launches with nothing out), the launch calls, the refused (wasted) ones
//! and the most calls in any minute:
//! - pinfleet: the fleet-wide ledger and the cap of refused calls (6/min);
//! - no memory: the same cap, but every launch starts from an empty
//!   ledger (each launch a process of its own — the health loop, a
//!   rollout, the next reconcile — with nothing shared, as an in-memory
//!   cache per process gives);
//! - ledger, no cap: what the cap costs when EC2 keeps refusing.
//! Measures; asserts only that every variant brings all 1,000 up.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use pinfleet::capacity::{offerings, usable, Attempts, Fallback, Ledger, Market, Offering};

const NODES: u32 = 1_000;
const BATCH: u32 = 100;
const CALL: i64 = 1; // seconds a RunInstances call takes
const BOOT: i64 = 90; // seconds from launch to Ready
const RECONCILE: i64 = 30; // seconds between the launcher's passes
const CAP: u32 = 6; // capacity.launchesPerMinute's default

struct Run {
    ready_at: i64,
    calls: u32,
    refused: u32,
    max_per_minute: u32,
}

fn zones() -> Vec<String> {
    ["us-east-1a", "us-east-1b", "us-east-1c"].map(String::from).to_vec()
}

fn types() -> Vec<String> {
    ["m6i.large", "m6a.large", "m5.large", "m7i.large"].map(String::from).to_vec()
}

/// Two zones out of the first three types; `none` for the floor.
fn out(none: bool) -> BTreeSet<(String, String)> {
    if none {
        return BTreeSet::new();
    }
    let mut s = BTreeSet::new();
    for t in &types()[..3] {
        for z in &zones()[..2] {
            s.insert((t.clone(), z.clone()));
        }
    }
    s
}

fn simulate(nothing_out: bool, memory: bool, cap: u32) -> Run {
    let t0: DateTime<Utc> = DateTime::parse_from_rfc3339("2026-11-26T10:00:00Z").unwrap().with_timezone(&Utc);
    let out = out(nothing_out);
    let zones = zones();
    let mut ledger = Ledger::default();
    let mut clock: i64 = 0; // seconds since t0
    let mut credited = [0u32; 3]; // machines launched for each subnet's share (wherever they landed)
    let mut last_launch = 0i64;
    let mut calls_at: Vec<i64> = Vec::new();
    let mut refused = 0u32;
    let by = "bench/general";
    while credited.iter().sum::<u32>() < NODES {
        let pass_start = clock;
        'subnets: for (zi, own) in zones.iter().enumerate() {
            let share = NODES / 3 + u32::from((zi as u32) < NODES % 3);
            while credited[zi] < share {
                if !memory {
                    // Each launch its own process, with nothing shared:
                    // what EC2 refused is forgotten; the cap's record kept.
                    ledger = Ledger { launches: ledger.launches.clone(), ..Default::default() };
                }
                let n = (share - credited[zi]).min(BATCH);
                let now = t0 + Duration::seconds(clock);
                // The subnet's own zone first, then the others (as the launcher orders them).
                let mut order = vec![own.clone()];
                order.extend(zones.iter().filter(|z| *z != own).cloned());
                let all = offerings(&[Market::OnDemand], &types(), &order, &[Fallback::Zone, Fallback::Type]);
                let candidates: Vec<Offering> = usable(&all, &ledger, now).into_iter().cloned().collect();
                let mut tries = Attempts::new(by, cap, &ledger, now);
                let mut ok = false;
                for o in &candidates {
                    if tries.call().is_err() {
                        break;
                    }
                    calls_at.push(clock);
                    clock += CALL;
                    if out.contains(&(o.instance_type.clone(), o.zone.clone())) {
                        refused += 1;
                        tries.refused(o, "InsufficientInstanceCapacity");
                        continue;
                    }
                    ok = true;
                    break;
                }
                let now = t0 + Duration::seconds(clock);
                for (o, code, who) in &tries.refusals {
                    ledger.mark(o, code, who, now);
                }
                if let Some(l) = tries.launch(ok, now) {
                    ledger.launches.push(l);
                }
                if !ok {
                    // Capped or every offering out: the next pass tries again.
                    break 'subnets;
                }
                credited[zi] += n;
                last_launch = clock;
            }
        }
        clock = clock.max(pass_start + RECONCILE);
    }
    let max_per_minute = calls_at
        .iter()
        .map(|t| calls_at.iter().filter(|u| **u >= *t && **u < t + 60).count() as u32)
        .max()
        .unwrap_or(0);
    Run { ready_at: last_launch + BOOT, calls: calls_at.len() as u32, refused, max_per_minute }
}

fn main() {
    let floor = simulate(true, true, CAP);
    let variants = [
        ("pinfleet (ledger, cap 6/min)", true, CAP),
        ("no memory (cap 6/min)", false, CAP),
        ("no memory, no cap", false, u32::MAX),
        ("ledger, no cap", true, u32::MAX),
    ];
    println!("bench-capacity: {NODES} nodes, batches of {BATCH} per subnet, two of three zones out of the first three of four types");
    println!("floor (nothing out): all Ready at {} s, {} calls", floor.ready_at, floor.calls);
    println!(
        "{:<30} {:>10} {:>8} {:>7} {:>8} {:>9} {:>12}",
        "variant", "all Ready", "× floor", "calls", "refused", "wasted %", "max calls/min"
    );
    for (name, memory, cap) in variants {
        let r = simulate(false, memory, cap);
        println!(
            "{:<30} {:>8} s {:>8.2} {:>7} {:>8} {:>8.0}% {:>12}",
            name,
            r.ready_at,
            r.ready_at as f64 / floor.ready_at as f64,
            r.calls,
            r.refused,
            100.0 * r.refused as f64 / r.calls.max(1) as f64,
            r.max_per_minute
        );
    }
}
