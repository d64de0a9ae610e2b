//! Placement properties over arbitrary members and policies: shares sum to
//! the total, limits hold, the same inputs give the same split, and scaling
//! moves only the delta.

use std::collections::BTreeMap;

use pinfleet::federation::placement::{place, Division, Limit, Member, PlacementError, Policy};
use proptest::prelude::*;

fn members() -> impl Strategy<Value = Vec<Member>> {
    proptest::collection::vec((1u32..5, proptest::option::of(0u32..60), any::<bool>()), 1..8).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (weight, capacity, healthy))| Member {
                name: format!("c{i}"),
                weight,
                labels: BTreeMap::new(),
                taints: vec![],
                max_share: None,
                capacity,
                healthy: healthy || i == 0,
                current: 0,
            })
            .collect()
    })
}

fn division() -> impl Strategy<Value = Division> {
    prop_oneof![Just(Division::Weighted), Just(Division::Capacity), Just(Division::Aggregated)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn shares_sum_to_the_total_within_limits(ms in members(), total in 0u32..200, d in division(), max in proptest::option::of(1u32..40), min in 0u32..5) {
        let mut p = Policy { division: d, ..Default::default() };
        p.clusters.insert("c0".into(), Limit { min, max: max.map(|m| m.max(min)) });
        let placed = place("app", total, &p, &ms);
        // c0 is always healthy and nothing spreads: the only refusals are
        // minimums above the total and too little room, and they must be true.
        if let Err(e) = &placed {
            match e {
                PlacementError::Minimums { mins, .. } => prop_assert!(*mins > total),
                PlacementError::NoRoom { room, .. } => prop_assert!(*room < u64::from(total)),
                other => prop_assert!(false, "unexpected refusal: {}", other),
            }
        }
        if let Ok(shares) = placed {
            prop_assert_eq!(shares.iter().map(|s| s.replicas).sum::<u32>(), total);
            for s in &shares {
                let m = ms.iter().find(|m| m.name == s.cluster).unwrap();
                if !m.healthy { prop_assert_eq!(s.replicas, 0); }
                if d != Division::Weighted { if let Some(c) = m.capacity { prop_assert!(s.replicas <= c, "{:?}", shares); } }
                if s.cluster == "c0" { if let Some(mx) = max { prop_assert!(s.replicas <= mx.max(min)); } }
            }
            // Deterministic.
            prop_assert_eq!(place("app", total, &p, &ms).unwrap(), shares);
        }
    }

    #[test]
    fn scaling_moves_only_the_delta(ms in members(), total in 1u32..100, step in -50i32..50) {
        let ms: Vec<Member> = ms.into_iter().map(|m| Member { healthy: true, capacity: None, ..m }).collect();
        let p = Policy::default();
        let first = place("app", total, &p, &ms).unwrap();
        let running: Vec<Member> = ms.iter().map(|m| Member { current: first.iter().find(|s| s.cluster == m.name).unwrap().replicas, ..m.clone() }).collect();
        let next = (total as i32 + step).max(0) as u32;
        let second = place("app", next, &p, &running).unwrap();
        prop_assert_eq!(second.iter().map(|s| s.replicas).sum::<u32>(), next);
        for (a, b) in first.iter().zip(&second) {
            if next >= total { prop_assert!(b.replicas >= a.replicas, "{:?} -> {:?}", first, second); }
            else { prop_assert!(b.replicas <= a.replicas, "{:?} -> {:?}", first, second); }
        }
    }
}
