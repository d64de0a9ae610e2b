//! Delivery's figures. (1) Deciding the next step of many deliveries over
//! 500 clusters each, in one pass (target < 1 s): the fleet engine's
//! `decide` with maintenance and freeze windows, clusters in every state.
//! (2) On a sim fleet with a real Prometheus (scripts/test's, unpacked
//! from Debian): a wave of half the members fails its analysis on one
//! cluster; from that failure to every touched cluster asked to roll back
//! (target < 30 s), and to all of them back Ready. Prints figures and
//! ratios; asserts only that the rollback happened.

#[path = "../tests/support/gateway.rs"]
mod gateway_support;
#[path = "../tests/support/prometheus.rs"]
mod prom;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use pinfleet::delivery::run::{self, Ended, Event, Freeze};
use pinfleet::delivery::DeliverySpec;
use pinfleet::fleet::rollout::{decide, ClusterState};
use pinfleet::fleet::run::Note;

fn digest(c: char) -> String {
    format!("registry.example/feeds/web@sha256:{}", c.to_string().repeat(64))
}

/// A freeze window that is never now: six hours on the day three days
/// from today (a fixed day would hold every delivery on that day, and
/// the rollback half of this benchmark would wait out the freeze).
fn freeze_elsewhere() -> String {
    format!("{} 00:00-06:00 UTC", (Utc::now() + chrono::Duration::days(3)).format("%a"))
}

fn spec_text(clusters: &str, waves: &str, prometheus: &str, store: &str) -> String {
    let freeze = freeze_elsewhere();
    format!(
        "workload: {{namespace: feeds, name: web}}\nversion: v9\nimages: {{app: \"{}\"}}\nstateStore: {store}\nclusters:\n{clusters}waves:\n{waves}freeze: [\"{freeze}\"]\nanalysis:\n  prometheus: {prometheus}\n  bake: 0s\n  interval: 1s\n  count: 1\n  readyTimeout: 120s\n  metrics:\n    - name: error-ratio\n      query: 'sum(rate(http_requests_total{{cluster=\"{{{{cluster}}}}\",version=\"{{{{version}}}}\",code=\"500\"}}[1m])) / sum(rate(http_requests_total{{cluster=\"{{{{cluster}}}}\",version=\"{{{{version}}}}\"}}[1m]))'\n      successCondition: \"< 0.01\"\n      failureCondition: \">= 0.05\"\n",
        digest('9')
    )
}

fn decide_pass() {
    let deliveries: usize = std::env::var("PINFLEET_BENCH_DELIVERIES").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let n = 500;
    let clusters: String = (0..n)
        .map(|i| format!("  c{i:03}: {{kubeconfig: k, region: r{}, labels: {{ring: \"{}\"}}}}\n", i % 7, i % 5))
        .collect();
    let waves = "  stages:\n    - {name: canary, selector: ring=0, soak: 0s, maxParallel: 1}\n    - {name: r1, selector: ring=1, soak: 10m}\n    - {name: r2, selector: ring=2, soak: 10m, approval: true}\n    - {name: rest, selector: \"\", soak: 0s, maxFailures: \"5%\"}\n  windows:\n    - {selector: ring=4, window: \"Mon-Fri 09:00-17:00 UTC\"}\n";
    let spec = DeliverySpec::parse(
        &spec_text(&clusters, waves, "http://127.0.0.1:1", "file:///nowhere"),
        std::path::Path::new("/"),
    )
    .unwrap();
    let members = spec.members();
    let now = Utc::now();
    // Deliveries at every point: the first waves done, the next rolling, some failed.
    let records: Vec<_> = (0..deliveries)
        .map(|d| {
            let mut r = run::record(&spec, d as u64 + 1, "bench", now);
            let upto = d % r.stages.len();
            for (i, s) in r.stages.iter_mut().enumerate() {
                if i < upto {
                    s.rolled_at = Some(now);
                    s.passed_at = Some(now);
                    s.clusters.iter_mut().for_each(|c| c.state = ClusterState::Done);
                } else if i == upto {
                    for (k, c) in s.clusters.iter_mut().enumerate() {
                        c.state = match k % 4 {
                            0 => ClusterState::Done,
                            1 => ClusterState::Rolling,
                            _ => ClusterState::Pending,
                        };
                    }
                }
            }
            r
        })
        .collect();
    let windows = Freeze { waves: &spec.waves, members: &members, freeze: &spec.freeze, hotfix: false };
    let approved: BTreeSet<String> = ["r2".to_string()].into();
    let rounds = 5;
    let t = Instant::now();
    let mut starts = 0;
    for _ in 0..rounds {
        for r in &records {
            let d = decide(r, &windows, &approved, now);
            starts += d.start.len() + d.why.len();
        }
    }
    let pass = t.elapsed().as_secs_f64() / rounds as f64;
    println!(
        "decide: one pass over {deliveries} deliveries x {n} clusters: {:.1} ms ({:.1} us per delivery; target < 1 s: {:.0}x under) [{starts} answers]",
        pass * 1e3,
        pass * 1e6 / deliveries as f64,
        1.0 / pass
    );
}

async fn rollback_on_sims() {
    let n: usize = std::env::var("PINFLEET_BENCH_MEMBERS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let ms: Vec<_> = (0..n).map(|i| gateway_support::member(&format!("m{i}"), 1, "8", true)).collect();
    for m in &ms {
        gateway_support::place_web(m, &digest('1'), 1).await;
    }
    let mut series = String::new();
    for i in 0..n {
        prom::requests(&mut series, &format!("m{i}"), "v9", if i == n / 2 - 1 { 0.3 } else { 0.001 });
    }
    let prometheus = prom::Prometheus::start(&prom::openmetrics(&series));
    let dir = tempfile::tempdir().unwrap();
    let clusters: String = ms
        .iter()
        .enumerate()
        .map(|(i, m)| {
            format!(
                "  {}: {{kubeconfig: {}, region: r, labels: {{half: \"{}\"}}}}\n",
                m.name,
                m.kubeconfig.display(),
                i < n / 2
            )
        })
        .collect();
    let waves = "  stages:\n    - {name: first, selector: half=true, soak: 0s}\n    - {name: second, selector: half=false, soak: 0s}\n";
    let spec = DeliverySpec::parse(
        &spec_text(&clusters, waves, &prometheus.url, &format!("file://{}", dir.path().display())),
        std::path::Path::new("/"),
    )
    .unwrap();
    let opened = run::open(&spec, None).await.unwrap();
    let clients = run::connect(&spec).await.unwrap();
    let times: Arc<Mutex<Vec<(chrono::DateTime<Utc>, String)>>> = Arc::default();
    let t = times.clone();
    let on = move |e: Event| {
        let what = match &e {
            Event::Engine(Note::Failed { .. }) => "failed",
            Event::RollingBack { .. } => "asked",
            Event::Engine(Note::Reverted { .. }) => "back",
            _ => return,
        };
        t.lock().unwrap().push((Utc::now(), what.to_string()));
    };
    let (_tx, alert) = tokio::sync::watch::channel(None);
    let (r, ended) = run::apply(&spec, &opened, clients, &run::Options::default(), alert, "bench", &on).await.unwrap();
    assert!(matches!(ended, Ended::RolledBack { .. }), "{ended:?}");
    let touched = r.clusters().filter(|(_, c)| c.state == ClusterState::Reverted).count();
    let times = times.lock().unwrap();
    let at = |w: &str| times.iter().filter(|(_, x)| x == w).map(|(t, _)| *t).collect::<Vec<_>>();
    // From the failing measurement itself (its time in the delivery's record).
    let analyses = pinfleet::delivery::book::analyses(&opened.book.store, r.number).await.unwrap();
    let failed = analyses
        .values()
        .flat_map(|a| a.measurements.iter())
        .filter(|m| m.phase == pinfleet::delivery::analysis::Phase::Failed)
        .map(|m| m.at)
        .min()
        .unwrap();
    let secs = |t: chrono::DateTime<Utc>| (t - failed).to_std().unwrap_or_default();
    let asked = secs(at("asked")[0]);
    let back = secs(*at("back").iter().max().unwrap());
    println!(
        "rollback on {n} sims: {touched} touched; failed analysis -> all asked to roll back {:.3} s (target < 30 s: {:.0}x under); -> all back Ready {:.2} s",
        asked.as_secs_f64(),
        30.0 / asked.as_secs_f64().max(1e-6),
        back.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    decide_pass();
    rollback_on_sims().await;
}
