//! Places 10,000 apps over 100 clusters (weighted, capacity and aggregated
//! division, with spread and per-cluster limits) and prints the time.
//! Measures; asserts nothing about time.

use std::collections::BTreeMap;
use std::time::Instant;

use pinfleet::federation::placement::{place, Division, Limit, Member, Policy, Spread};

fn main() {
    let members: Vec<Member> = (0..100)
        .map(|i| Member {
            name: format!("cluster-{i:03}"),
            weight: 1 + (i % 4),
            labels: BTreeMap::from([
                ("region".to_string(), format!("region-{}", i % 5)),
                ("zone".to_string(), format!("zone-{}", i % 15)),
            ]),
            taints: vec![],
            max_share: None,
            capacity: Some(200 + (i * 37) % 800),
            healthy: i % 17 != 0,
            current: 0,
        })
        .collect();
    let policies: Vec<Policy> = [Division::Weighted, Division::Capacity, Division::Aggregated]
        .into_iter()
        .map(|division| Policy {
            division,
            spread: vec![Spread { by: "region".into(), min_groups: Some(2), max_groups: None }],
            clusters: BTreeMap::from([("cluster-001".to_string(), Limit { min: 1, max: Some(50) })]),
            ..Default::default()
        })
        .collect();
    let start = Instant::now();
    let mut placed = 0u64;
    for app in 0..10_000u32 {
        let p = &policies[(app % 3) as usize];
        let shares = place(&format!("app-{app}"), 10 + app % 500, p, &members).expect("placeable");
        placed += shares.iter().map(|s| u64::from(s.replicas)).sum::<u64>();
    }
    let t = start.elapsed().as_secs_f64();
    println!(
        "placed 10,000 apps ({placed} replicas) over 100 clusters in {t:.3} s ({:.1} µs per app; target 0.5 s)",
        t * 1e6 / 10_000.0
    );
}
