//! Rolls 1,000 machines (surge 10%, fixed boot and drain times) through the
//! real roll driver on an in-memory fleet, on tokio's paused clock, and
//! prints the simulated time against the floor ceil(N / surge) × (boot +
//! drain); then rolls the same fleet with kops's default cadence (one node
//! at a time, 5 s after each drain, two validations 30 s apart, 15 s
//! between nodes). Measures; asserts nothing about time.

use std::collections::BTreeSet;
use std::time::Duration;

use pinfleet::rollout::driver::{self, GroupRoll, Machines, Nodes};
use pinfleet::rollout::policy;
use pinfleet::rollout::simfleet::SimFleet;
use tokio::time::Instant;

const N: u32 = 1_000;
const BOOT: Duration = Duration::from_secs(90);
const DRAIN: Duration = Duration::from_secs(30);

fn roll_cfg(canary: bool) -> GroupRoll {
    GroupRoll {
        group: "general".into(),
        limits: policy::node_group_limits(
            N,
            N,
            &pinfleet::spec::IntOrPercent::Percent(10),
            &pinfleet::spec::IntOrPercent::Int(0),
            canary,
        ),
        drain_timeout: Duration::from_secs(900),
        force_drain: false,
        boot_timeout: Duration::from_secs(900),
        validate_count: 1,
        validate_interval: Duration::from_secs(0),
        validation_timeout: Duration::from_secs(900),
        force_ids: BTreeSet::new(),
        etcd_members: false,
        etcd_manager: None,
    }
}

async fn pinfleet_roll(canary: bool) -> (f64, usize) {
    let fleet = SimFleet::new(&[("general", N)], BOOT, DRAIN);
    fleet.bump("general");
    let start = Instant::now();
    let report = driver::roll_group(&fleet, &fleet, &roll_cfg(canary), &|_| {}).await.unwrap();
    assert_eq!(fleet.count("general"), (N as usize, N as usize));
    (start.elapsed().as_secs_f64(), report.replaced)
}

/// kops rolling-update defaults: serial; drain, 5 s post-drain delay,
/// terminate (the ASG starts a replacement), validate until the new node
/// is Ready, validate again 30 s later, then wait the 15 s node interval.
async fn kops_roll() -> f64 {
    let fleet = SimFleet::new(&[("general", N)], BOOT, DRAIN);
    fleet.bump("general");
    let start = Instant::now();
    let old: Vec<String> =
        Machines::list(&fleet, "general").await.unwrap().into_iter().filter(|m| !m.current).map(|m| m.id).collect();
    for id in old {
        fleet.cordon(&id).await.unwrap();
        fleet.drain(&id, Duration::from_secs(900), false).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        fleet.terminate(&id).await.unwrap();
        let new = fleet.launch("general", 1).await.unwrap().remove(0);
        while !Nodes::list(&fleet).await.unwrap()[&new].ready {
            fleet.changed(Duration::from_secs(10)).await;
        }
        tokio::time::sleep(Duration::from_secs(30)).await;
        tokio::time::sleep(Duration::from_secs(15)).await;
    }
    start.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    let surge = pinfleet::spec::IntOrPercent::Percent(10).resolve_up(N);
    let floor = policy::floor_seconds(N, surge, BOOT.as_secs_f64(), DRAIN.as_secs_f64());
    let wall = std::time::Instant::now();
    let (t, replaced) = rt.block_on(pinfleet_roll(false));
    let wall_roll = wall.elapsed().as_secs_f64();
    let (tc, _) = rt.block_on(pinfleet_roll(true));
    let wall = std::time::Instant::now();
    let kops = rt.block_on(kops_roll());
    let wall_kops = wall.elapsed().as_secs_f64();
    println!(
        "roll of {N} machines, surge {surge} (10%), boot {}s, drain {}s (simulated clock)",
        BOOT.as_secs(),
        DRAIN.as_secs()
    );
    println!("  floor ceil(N/surge) x (boot + drain)  {floor:>9.0} s");
    println!("  pinfleet upgrade                     {t:>9.0} s  ({:.3} x floor; {replaced} replaced; {wall_roll:.2} s real)", t / floor);
    println!("  pinfleet upgrade with a canary wave  {tc:>9.0} s  ({:.3} x floor)", tc / floor);
    println!(
        "  kops default cadence (serial)        {kops:>9.0} s  ({:.1} h; {:.1} x pinfleet; {wall_kops:.2} s real)",
        kops / 3600.0,
        kops / t
    );
}
