//! Rehearses a fleet rollout at scale through the real fleet driver and
//! the real roll driver, on tokio's paused clock: 20 clusters of 1,000
//! machines and one of 5,000 (surge 10%, boot 90 s, drain 30 s) in three
//! stages (dev 1 h soak, staging 4 h, production 24 h). Prints the
//! simulated total against the floor (the sum over stages of soak plus the
//! slowest cluster's roll floor), with production's canary cluster rolled
//! first, and against rolling the clusters one at a time. Measures;
//! asserts only that every machine was rolled.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::TimeZone;
use pinfleet::fleet::rehearsal::{self, Rehearsal};
use pinfleet::fleet::rollout::{FleetRollout, Snapshot};
use pinfleet::fleet::run::{self, Book, Clock, Outcome};
use pinfleet::fleet::{plan, FleetSpec, Member, Target};
use pinfleet::spec::IntOrPercent;

const BOOT: Duration = Duration::from_secs(90);
const DRAIN: Duration = Duration::from_secs(30);

fn clusters() -> Vec<(String, &'static str, u32)> {
    let mut v = Vec::new();
    for i in 1..=2 {
        v.push((format!("dev-{i}"), "dev", 1_000));
    }
    for i in 1..=5 {
        v.push((format!("staging-{i}"), "staging", 1_000));
    }
    for i in 1..=13 {
        v.push((format!("prod-{i:02}"), "production", 1_000));
    }
    v.push(("prod-big".into(), "production", 5_000));
    v
}

#[derive(Clone, Copy)]
enum Variant {
    /// Each stage's clusters at once.
    Parallel,
    /// Production's canary cluster first, then the rest at once.
    Canary,
    /// maxParallel: 1 everywhere.
    OneAtATime,
}

fn spec(v: Variant) -> FleetSpec {
    let p = if matches!(v, Variant::OneAtATime) { ", maxParallel: 1" } else { "" };
    let c = if matches!(v, Variant::Canary) { ", canary: true" } else { "" };
    FleetSpec::parse(&format!(
        "stages:\n  - {{name: dev, selector: env=dev, soak: 1h{p}}}\n  - {{name: staging, selector: env=staging, soak: 4h{p}}}\n  - {{name: production, selector: env=production, soak: 24h{p}{c}}}\n"
    ))
    .unwrap()
}

/// (simulated seconds, real seconds, machines on the new image).
async fn rehearse(v: Variant) -> (f64, f64, usize) {
    let cs = clusters();
    let sizes: Vec<(&str, u32)> = cs.iter().map(|(n, _, s)| (n.as_str(), *s)).collect();
    let fleet = Rehearsal::new(&sizes, "ami-old", IntOrPercent::Percent(10), BOOT, DRAIN);
    let members: Vec<Member> = cs
        .iter()
        .map(|(n, env, _)| Member {
            name: n.clone(),
            labels: [("env".to_string(), env.to_string())].into(),
            region: "us-east-1".into(),
        })
        .collect();
    let spec = spec(v);
    let start = chrono::Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap();
    let target = Target::Ami("ami-new".into());
    let p = plan(&spec, &members, &target, &BTreeMap::new(), start);
    let to: BTreeMap<String, Snapshot> = cs
        .iter()
        .map(|(n, _, _)| {
            (n.clone(), Snapshot { images: [(rehearsal::GROUP.into(), "ami-new".into())].into(), ..Default::default() })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let book = Book::open(&format!("file://{}", dir.path().display()), None).await.unwrap();
    let record = FleetRollout::new(1, &p, &spec, &to, "bench", start);
    let wall = std::time::Instant::now();
    let t0 = tokio::time::Instant::now();
    let (_, outcome) = run::apply(
        &fleet,
        &book,
        record,
        &pinfleet::fleet::rollout::Always,
        Clock::starting(start),
        run::Options::default(),
        "bench",
        &|_| {},
    )
    .await
    .unwrap();
    assert_eq!(outcome, Outcome::Finished);
    let moved = cs
        .iter()
        .map(|(n, _, _)| {
            let (image, all, current) = fleet.image(n);
            assert_eq!((image.as_str(), all), ("ami-new", current));
            current
        })
        .sum();
    (t0.elapsed().as_secs_f64(), wall.elapsed().as_secs_f64(), moved)
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
    let cs = clusters();
    let sp = spec(Variant::Parallel);
    let mut floor = 0.0;
    for s in &sp.stages {
        let slowest = cs
            .iter()
            .filter(|(_, env, _)| s.name == *env)
            .map(|(_, _, n)| rehearsal::roll_floor(*n, &IntOrPercent::Percent(10), BOOT, DRAIN))
            .fold(0.0, f64::max);
        floor += s.soak.as_secs_f64() + slowest;
    }
    let (t, real, moved) = rt.block_on(rehearse(Variant::Parallel));
    let (canary, _, _) = rt.block_on(rehearse(Variant::Canary));
    let (serial, real_serial, _) = rt.block_on(rehearse(Variant::OneAtATime));
    let h = |s: f64| s / 3600.0;
    println!(
        "fleet rollout of {} clusters ({} machines; 20 x 1,000 + 1 x 5,000), three stages (soak 1h, 4h, 24h), surge 10%, boot {}s, drain {}s (simulated clock)",
        cs.len(),
        moved,
        BOOT.as_secs(),
        DRAIN.as_secs()
    );
    println!("  floor: sum over stages of soak + slowest cluster's roll floor  {floor:>8.0} s ({:.2} h)", h(floor));
    println!(
        "  pinfleet fleet rollout apply (stages' clusters at once)         {t:>8.0} s ({:.2} h; {:.3} x floor; {real:.1} s real)",
        h(t),
        t / floor
    );
    println!(
        "  with production's canary cluster first                          {canary:>8.0} s ({:.2} h; {:.3} x floor)",
        h(canary),
        canary / floor
    );
    println!(
        "  one cluster at a time (maxParallel: 1)                          {serial:>8.0} s ({:.2} h; {:.3} x floor; {:.2} x pinfleet; {real_serial:.1} s real)",
        h(serial),
        serial / floor,
        serial / t
    );
}
