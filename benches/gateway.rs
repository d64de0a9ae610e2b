//! The submission gateway's figures. Measures; asserts nothing about time.
//!
//! 1. Admission with quota checks at 10,000 queued workloads of 20 teams:
//!    the pure pass alone, and the leader's pass on the sim (ledger and
//!    status writes included), in admissions per second.
//! 2. Submit latency through the service on the sim (p50 / p99).
//! 3. The estimate's error over a simulated day of submissions: each
//!    submission's estimated start (when it was queued) against its actual
//!    start, with durations that differ from what the submitter said.
//!
//! 4. Admission with accelerators (issue 59): the pure pass over gangs of
//!    A100 and A10G pods beside CPU work, and gang placement over 100
//!    members (each gang whole on one member with room for all of it).
//!
//! PINFLEET_BENCH_QUEUED (10,000) and PINFLEET_BENCH_SUBMITS (500) override the sizes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use kube::api::{Api, Patch, PatchParams};
use pinfleet::gateway::admission::{self, Pending, World};
use pinfleet::gateway::quota::{Amount, Ledger, Limits, Quota, Resource, RESOURCES};
use pinfleet::workloads::Tier;
use serde_json::json;

fn env(name: &str, d: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn quotas(teams: usize, g: u64, m: u64) -> BTreeMap<String, Quota> {
    (0..teams)
        .map(|i| {
            let t = format!("team-{i:02}");
            let lim = Limits {
                guaranteed: Amount::new(g * 1000, g << 30, g * 10),
                max: Amount::new(m * 1000, m << 30, m * 10),
            };
            (
                t.clone(),
                Quota {
                    team: t,
                    cohort: format!("c{}", i % 4),
                    tiers: [("OnDemand", lim), ("Preemptible", lim)].into_iter().collect(),
                    max_workloads: None,
                    pods_per_minute: None,
                },
            )
        })
        .collect()
}

/// A small random generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn unit(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1_000_000.0
    }
}

fn pure_admission(queued: usize) {
    let world = World::new(quotas(20, 200, 400), Amount::new(200_000_000, 1 << 50, 1 << 30));
    let t0: DateTime<Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
    let mut q: Vec<Pending> = (0..queued)
        .map(|i| Pending {
            name: format!("w{i}"),
            team: format!("team-{:02}", i % 20),
            tier: if i % 3 == 0 { Tier::Preemptible } else { Tier::OnDemand },
            priority: (i % 5) as i32,
            created: t0 + chrono::Duration::milliseconds(i as i64),
            demand: Amount::new(1000, 1 << 30, 1),
            expected_duration: Some(chrono::Duration::minutes(30)),
            backoff: None,
        })
        .collect();
    admission::order(&mut q);
    let mut ledger = Ledger::default();
    let start = Instant::now();
    let batch = admission::decide(&world, &mut ledger, &q, t0);
    let took = start.elapsed().as_secs_f64();
    println!(
        "admission, pure: {} queued, {} admitted in one pass in {:.3} s = {:.0} admissions/s ({:.0} queued workloads checked/s; goal ≥ 1,000 admissions/s)",
        queued,
        batch.admitted.len(),
        took,
        batch.admitted.len() as f64 / took,
        queued as f64 / took
    );
    let start = Instant::now();
    let ex = admission::explain(&world, &ledger, &q, &batch.waiting, t0);
    println!("  positions, estimates and reasons for {} waiting: {:.3} s", ex.len(), start.elapsed().as_secs_f64());
}

/// Issue 59's figures: admission of gangs with accelerators (pure), and
/// placing each admitted gang whole over 100 members as the leader does.
fn accelerated_admission(queued: usize) {
    let mut quotas = quotas(20, 200, 400);
    for q in quotas.values_mut() {
        for l in q.tiers.values_mut() {
            l.guaranteed = l.guaranteed.with(Resource::GpuA100, 32).with(Resource::GpuA10g, 16);
            l.max = l.max.with(Resource::GpuA100, 64).with(Resource::GpuA10g, 32);
        }
    }
    let fleet = Amount::new(200_000_000, 1 << 50, 1 << 30).with(Resource::GpuA100, 800).with(Resource::GpuA10g, 400);
    let world = World::new(quotas, fleet);
    let t0: DateTime<Utc> = "2026-11-24T10:00:00Z".parse().unwrap();
    let mut q: Vec<Pending> = (0..queued)
        .map(|i| {
            // A third CPU work, a third 2–4 workers × 8 A100, a third 1–4 × 1 A10G.
            let workers = (i % 3 + 2) as u64;
            let demand = match i % 3 {
                0 => Amount::new(1000, 1 << 30, 1),
                1 => Amount::new(4000 * workers, (16 << 30) * workers, workers).with(Resource::GpuA100, 8 * workers),
                _ => Amount::new(2000 * workers, (8 << 30) * workers, workers).with(Resource::GpuA10g, workers),
            };
            Pending {
                name: format!("w{i}"),
                team: format!("team-{:02}", i % 20),
                tier: Tier::OnDemand,
                priority: (i % 5) as i32,
                created: t0 + chrono::Duration::milliseconds(i as i64),
                demand,
                expected_duration: Some(chrono::Duration::minutes(30)),
                backoff: None,
            }
        })
        .collect();
    admission::order(&mut q);
    let mut ledger = Ledger::default();
    let start = Instant::now();
    let batch = admission::decide(&world, &mut ledger, &q, t0);
    let took = start.elapsed().as_secs_f64();
    let gpus = ledger.total();
    println!(
        "admission with accelerators, pure: {queued} queued (two thirds gangs of A100 or A10G pods), {} admitted in one pass in {:.3} s = {:.0} admissions/s ({:.0} queued checked/s); {} A100 and {} A10G of {} and {} admitted",
        batch.admitted.len(),
        took,
        batch.admitted.len() as f64 / took,
        queued as f64 / took,
        gpus.gpu_a100,
        gpus.gpu_a10g,
        fleet.gpu_a100,
        fleet.gpu_a10g
    );
    // Placement: 100 members, each of 2–16 nodes of 8 A100 or 1 A10G, and
    // CPUs; each admitted gang goes whole to a member with room for all of
    // it, as the leader's place pass computes room (every resource).
    use pinfleet::federation::placement::{self, Division, Member, Policy};
    let mut rng = Rng(0x5eed);
    let mut free: Vec<Amount> = (0..100)
        .map(|i| {
            let nodes = 2 + rng.next() % 15;
            let a = Amount::new(96_000 * nodes, (768 << 30) * nodes, 110 * nodes);
            if i % 2 == 0 {
                a.with(Resource::GpuA100, 8 * nodes)
            } else {
                a.with(Resource::GpuA10g, nodes)
            }
        })
        .collect();
    let policy = Policy { division: Division::Aggregated, ..Default::default() };
    let start = Instant::now();
    let (mut placed, mut waiting) = (0usize, 0usize);
    for (name, r) in &batch.admitted {
        let unit = r.amount;
        let members: Vec<Member> = free
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let fits = RESOURCES
                    .iter()
                    .filter(|x| unit.get(**x) > 0)
                    .map(|x| f.get(*x).checked_div(unit.get(*x)).unwrap_or(u64::MAX))
                    .min()
                    .unwrap_or(u64::from(u32::MAX));
                Member {
                    name: format!("m{i:03}"),
                    weight: 1,
                    labels: Default::default(),
                    taints: vec![],
                    max_share: None,
                    capacity: Some(fits.min(u64::from(u32::MAX)) as u32),
                    healthy: true,
                    current: 0,
                }
            })
            .collect();
        match placement::place(name, 1, &policy, &members) {
            Ok(shares) => {
                if let Some(sh) = shares.iter().find(|s| s.replicas > 0) {
                    let i: usize = sh.cluster[1..].parse().unwrap();
                    free[i] = free[i].minus(unit);
                    placed += 1;
                }
            }
            Err(_) => waiting += 1,
        }
    }
    let took = start.elapsed().as_secs_f64();
    println!(
        "  gang placement over 100 members: {} gangs in {:.3} s = {:.0} placements/s ({placed} placed whole, {waiting} wait for room)",
        batch.admitted.len(),
        took,
        batch.admitted.len() as f64 / took
    );
}

fn estimate_error() {
    // A day: 20 teams submit jobs (uniformly over the day, one every 15
    // minutes each on average), of 1–4 CPUs, saying 10–120 minutes; they
    // actually run 0.6–1.6 × that. Admission passes every minute.
    let world = World::new(quotas(20, 12, 24), Amount::new(800_000, 1 << 45, 100_000));
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let t0: DateTime<Utc> = "2026-11-24T00:00:00Z".parse().unwrap();
    let mut arrivals = Vec::new();
    for i in 0..20 * 24 * 4 {
        let at = t0 + chrono::Duration::seconds((rng.unit() * 86_400.0) as i64);
        let said = 10 + rng.next() % 111;
        let actual = (said as f64 * (0.6 + rng.unit())) as i64;
        let cpu = 1 + rng.next() % 4;
        arrivals.push((at, format!("w{i}"), format!("team-{:02}", i % 20), cpu, said as i64, actual));
    }
    arrivals.sort();
    let mut ledger = Ledger::default();
    let mut queue: Vec<Pending> = Vec::new();
    let mut ends: Vec<(DateTime<Utc>, String)> = Vec::new();
    let mut estimated: BTreeMap<String, (DateTime<Utc>, DateTime<Utc>, DateTime<Utc>)> = BTreeMap::new();
    let mut actual_len: BTreeMap<String, i64> = BTreeMap::new();
    let mut errors: Vec<f64> = Vec::new();
    let mut within = 0usize;
    let mut immediate = 0usize;
    let mut next = 0;
    let step = chrono::Duration::seconds(60);
    let mut t = t0;
    let wall = Instant::now();
    while t < t0 + chrono::Duration::hours(24) {
        ends.retain(|(e, n)| {
            if *e <= t {
                ledger.release(n, "finished");
                false
            } else {
                true
            }
        });
        let mut fresh = Vec::new();
        while next < arrivals.len() && arrivals[next].0 <= t {
            let (at, name, team, cpu, said, actual) = arrivals[next].clone();
            queue.push(Pending {
                name: name.clone(),
                team,
                tier: Tier::OnDemand,
                priority: 0,
                created: at,
                demand: Amount::new(cpu * 1000, cpu << 30, 1),
                expected_duration: Some(chrono::Duration::minutes(said)),
                backoff: None,
            });
            actual_len.insert(name.clone(), actual);
            fresh.push(name);
            next += 1;
        }
        admission::order(&mut queue);
        let before = ledger.clone();
        let batch = admission::decide(&world, &mut ledger, &queue, t);
        // What the submitter is told when it is queued.
        if !fresh.is_empty() {
            let ex = admission::explain(&world, &before, &queue, &batch.waiting, t);
            for n in &fresh {
                if let Some(e) = ex.get(n).and_then(|w| w.estimate) {
                    estimated.insert(n.clone(), (e.earliest, e.latest, t));
                } else if batch.admitted.iter().any(|(a, _)| a == n) {
                    immediate += 1;
                }
            }
        }
        for (n, _) in &batch.admitted {
            if let Some((a, b, _)) = estimated.get(n) {
                let err = (t - *a).num_seconds().abs() as f64 / 60.0;
                errors.push(err);
                if t >= *a - step && t <= *b + step {
                    within += 1;
                }
            }
            ends.push((t + chrono::Duration::minutes(actual_len[n]), n.clone()));
        }
        let admitted: std::collections::HashSet<&str> = batch.admitted.iter().map(|(n, _)| n.as_str()).collect();
        queue.retain(|p| !admitted.contains(p.name.as_str()));
        t += step;
    }
    errors.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| {
        errors.get(((errors.len() as f64 * p) as usize).min(errors.len().saturating_sub(1))).copied().unwrap_or(0.0)
    };
    println!(
        "estimate over a simulated day: {} submissions, {} started at once, {} waited with an estimate; |actual − estimated start| median {:.1} min, p90 {:.1} min; {:.0}% started within the estimated range (durations 0.6–1.6 × what was said); {:.1} s to simulate",
        arrivals.len(),
        immediate,
        errors.len(),
        pct(0.5),
        pct(0.9),
        if errors.is_empty() { 0.0 } else { within as f64 * 100.0 / errors.len() as f64 },
        wall.elapsed().as_secs_f64()
    );
}

async fn on_the_sim(queued: usize, submits: usize) {
    let sim = pinfleet::sim::Sim::start_with(0, pinfleet::sim::Inner::new(), pinfleet::sim::Controllers::none())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc.yaml");
    sim.write_kubeconfig(&kc).unwrap();
    let host = pinfleet::kube::client_from_kubeconfig(&kc, pinfleet::kube::Retry::Default).await.unwrap();
    let ns = "pinfleet-gateway";
    pinfleet::gateway::service::install(&host, ns).await.unwrap();
    let api: Api<pinfleet::gateway::records::TeamQuota> = Api::namespaced(host.clone(), ns);
    for i in 0..20 {
        let t = format!("team-{i:02}");
        let obj = json!({"apiVersion": "gateway.pinfleet.dev/v1alpha1", "kind": "TeamQuota", "metadata": {"name": t, "namespace": ns},
            "spec": {"cohort": format!("c{}", i % 4), "tiers": {"OnDemand": {"guaranteed": {"cpu": 100, "memory": "1Ti", "pods": 1000}}}}});
        api.patch(&t, &PatchParams::apply("bench").force(), &Patch::Apply(&obj)).await.unwrap();
    }
    // A member with room for everything (a sim with one big node).
    let member = pinfleet::sim::Sim::start_with(0, pinfleet::sim::Inner::new(), pinfleet::sim::Controllers::none())
        .await
        .unwrap();
    let mkc = dir.path().join("member.yaml");
    member.write_kubeconfig(&mkc).unwrap();
    let mc = pinfleet::kube::client_from_kubeconfig(&mkc, pinfleet::kube::Retry::Default).await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(mc.clone());
    nodes
        .patch(
            "big",
            &PatchParams::apply("bench"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "big"}})),
        )
        .await
        .unwrap();
    nodes
        .patch_status("big", &PatchParams::default(), &Patch::Merge(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"cpu": "100000", "memory": "100Ti", "pods": "1000000"}}})))
        .await
        .unwrap();
    let settings = pinfleet::gateway::identity::Settings {
        oidc: None,
        token_review: false,
        team_prefix: "team:".into(),
        admin_group: "admins".into(),
        anonymous: None,
    };
    let svc = pinfleet::gateway::service::Service::start(
        host.clone(),
        vec![pinfleet::gateway::service::MemberCluster {
            name: "m".into(),
            client: mc,
            labels: Default::default(),
            weight: 1,
        }],
        pinfleet::gateway::identity::Identity::new(settings, None),
        pinfleet::gateway::service::Config {
            namespace: ns.into(),
            identity: "bench".into(),
            policy: Default::default(),
            interval: Duration::from_secs(1),
            lease_duration: Duration::from_secs(15),
            member_refresh: Duration::from_secs(60),
            api: pinfleet::kube::budget::Budget::GATEWAY,
            // A line per submission would be the benchmark's output.
            audit_log: Some("/dev/null".into()),
        },
    )
    .await
    .unwrap();
    let admin =
        pinfleet::gateway::intake::Caller { user: "bench".into(), teams: vec![], admin: true, via: "bench".into() };
    let job = |team: &str, i: usize| {
        json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestJobSet", "metadata": {"name": format!("j{i}")},
            "spec": {"owner": {"team": team, "project": "p"}, "shards": 1,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "app:1", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}})
    };
    // Submit latency, one at a time (what one developer waits).
    let mut lat = Vec::new();
    for i in 0..submits {
        let team = format!("team-{:02}", i % 20);
        let s = Instant::now();
        let (code, _) = svc.submit(&admin, &format!("s{i}"), &job(&team, i), None, false).await.unwrap();
        assert_eq!(code, 201);
        lat.push(s.elapsed().as_secs_f64() * 1000.0);
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "submit latency on the sim, {} submissions one after another: p50 {:.1} ms, p99 {:.1} ms",
        submits,
        lat[lat.len() / 2],
        lat[(lat.len() * 99 / 100).min(lat.len() - 1)]
    );
    // The queue: the rest of the records written straight to the host.
    use futures::StreamExt;
    futures::stream::iter(submits..queued)
        .map(|i| {
            let svc = svc.clone();
            let admin = admin.clone();
            async move {
                let team = format!("team-{:02}", i % 20);
                svc.submit(&admin, &format!("s{i}"), &job(&team, i), None, false).await.unwrap();
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    for _ in 0..100 {
        if svc.all().len() >= queued {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let start = Instant::now();
    let (admitted, _) = svc.admit_once().await.unwrap();
    let took = start.elapsed().as_secs_f64();
    println!(
        "admission on the sim: {} queued, {} admitted in one leader pass (ledger + every status written) in {:.2} s = {:.0} admissions/s (goal ≥ 1,000/s)",
        queued, admitted, took, admitted as f64 / took
    );
    // The floor: the host's own rate for the same writes — a status write
    // per admitted record, as many in flight as the pass keeps, nothing
    // read or decided. The pass is measured as a share of it.
    let names: Vec<String> = svc
        .all()
        .iter()
        .filter(|s| s.status.as_ref().is_some_and(|st| st.phase == pinfleet::gateway::records::Phase::Admitted))
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    let records: Api<pinfleet::gateway::records::Submission> = Api::namespaced(host.clone(), ns);
    let start = Instant::now();
    let written = futures::stream::iter(names.iter())
        .map(|n| {
            let records = records.clone();
            async move {
                records
                    .patch_status(n, &PatchParams::default(), &Patch::Merge(json!({"status": {"message": "floor"}})))
                    .await
                    .is_ok()
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<bool>>()
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
    let floor = written as f64 / start.elapsed().as_secs_f64();
    let pass = admitted as f64 / took;
    println!(
        "host write rate (the floor): {written} status writes, 32 in flight, at {floor:.0}/s; the leader's pass runs at {:.2}× of it (goal ≥ 0.5×)",
        pass / floor
    );
    drop(svc);
    member.stop().await;
    sim.stop().await;
}

fn main() {
    let queued = env("PINFLEET_BENCH_QUEUED", 10_000);
    let submits = env("PINFLEET_BENCH_SUBMITS", 500);
    pure_admission(queued);
    accelerated_admission(queued);
    estimate_error();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(on_the_sim(queued, submits));
}
