//! The console's pages at scale in a real browser (headless Chromium): the
//! fleet page with 1,000 clusters and the team page with 5,000 workloads,
//! drawn by the same views the console serves (long tables in pages of 200
//! rows, the fleet's clusters that need a look first; counts over all).
//! Prints the server's time to draw each page from its view, the page's
//! size, and the browser's time to first paint (FCP), until the page's rows
//! are in the document (DOMContentLoaded) and until the largest content is
//! painted (LCP), against the goal of 1 s. Measures; asserts nothing about
//! time.
//!
//! PINFLEET_BENCH_CLUSTERS (1,000) and PINFLEET_BENCH_WORKLOADS (5,000) override the sizes.

#[path = "../tests/support/browser.rs"]
mod browser;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use axum::response::IntoResponse;
use axum::routing::get;
use chrono::Utc;
use pinfleet::views::fleet::{ClusterRow, FleetView, GroupImages};
use pinfleet::views::team::{Queued, TeamView, TierRow, Why, WorkloadRow};
use pinfleet::views::{html, Reach, Status, Tone, Viewer};

fn env(name: &str, d: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(d)
}

fn viewer() -> Viewer {
    Viewer {
        user: "alice@example.com".into(),
        teams: vec!["search".into()],
        via: "oidc".into(),
        admin: false,
        csrf: String::new(),
    }
}

fn fleet(n: usize) -> FleetView {
    let now = Utc::now();
    let clusters = (0..n)
        .map(|i| ClusterRow {
            name: format!("k8s-{:04}-{}", i, ["use1", "usw2", "euw1"][i % 3]),
            labels: BTreeMap::from([
                ("stage".into(), ["dev", "staging", "prod"][i % 3].into()),
                ("region".into(), "us-east-1".into()),
            ]),
            reach: if i % 97 == 0 {
                Reach::Stale { since: Some(now - chrono::Duration::minutes(4)), error: "connection refused".into() }
            } else {
                Reach::Live { seen: now }
            },
            version: Some("v1.36.2".into()),
            groups: vec![
                GroupImages { group: "control-plane".into(), images: BTreeMap::from([("ami-0a1b2c3d4e5f".into(), 3)]) },
                GroupImages {
                    group: "nodes".into(),
                    images: BTreeMap::from([("ami-0a1b2c3d4e5f".into(), 40), ("ami-09f8e7d6c5b4".into(), 2)]),
                },
            ],
            nodes: 45,
            ready: 45 - (i % 5 == 0) as usize,
            e2e: Status::new(if i % 50 == 0 { Tone::Bad } else { Tone::Ok }, "passed")
                .because("ran at 11:02 UTC")
                .at(format!("/clusters/k8s-{i:04}#e2e")),
            drift: Status::new(Tone::Ok, "in sync"),
            workloads: i % 40,
        })
        .collect();
    FleetView { viewer: viewer(), at: now, clusters, rollout: None, rollout_error: None }
}

fn team(n: usize) -> TeamView {
    let now = Utc::now();
    let why = Why {
        kind: "quota".into(),
        quota: "search/OnDemand max".into(),
        resource: Some("cpu".into()),
        requested: "2".into(),
        used: "96".into(),
        limit: "100".into(),
        short: "2".into(),
        message: "search/OnDemand max: cpu 2 requested, 96 of 100 used, 2 short".into(),
        unblock: "when search's admitted OnDemand work releases 2 cpu (or the quota is raised)".into(),
    };
    let queued = n / 2;
    TeamView {
        accelerators: vec![],
        viewer: viewer(),
        at: now,
        team: "search".into(),
        cohort: "discovery".into(),
        quota_problem: None,
        drift: None,
        tiers: ["Reserved", "OnDemand", "Preemptible"]
            .iter()
            .map(|t| TierRow {
                tier: t.to_string(),
                guaranteed: "cpu 100, memory 400Gi, pods 1000".into(),
                max: "cpu 150, memory 600Gi, pods 1500".into(),
                used: "cpu 96, memory 300Gi, pods 900".into(),
                borrowed: "cpu 0, memory 0, pods 0".into(),
                borrowing: false,
            })
            .collect(),
        workloads: (n - queued) as u64,
        max_workloads: Some(10_000),
        pods_per_minute: Some(600),
        queue: (0..queued)
            .map(|i| Queued {
                id: format!("job-{i:05}"),
                workload: format!("job-{i:05}"),
                kind: "PinterestJobSet".into(),
                tier: "OnDemand".into(),
                priority: (i % 3) as i32,
                demand: "cpu 2, memory 4Gi, pods 2".into(),
                position: i + 1,
                ahead_in_fleet: i,
                estimate: Some((
                    now + chrono::Duration::seconds(30 * i as i64),
                    now + chrono::Duration::seconds(45 * i as i64),
                )),
                why: why.clone(),
            })
            .collect(),
        admitted: (queued..n)
            .map(|i| WorkloadRow {
                id: format!("svc-{i:05}"),
                workload: format!("svc-{i:05}"),
                kind: "PinterestService".into(),
                tier: "OnDemand".into(),
                demand: "cpu 500m, memory 1Gi, pods 2".into(),
                phase: Status::new(Tone::Ok, "Running").at(format!("/workloads/search/svc-{i:05}#placement")),
                clusters: vec![format!("k8s-{:04}", i % 1000), format!("k8s-{:04}", (i + 1) % 1000)],
                since: Some(now - chrono::Duration::minutes((i % 600) as i64)),
            })
            .collect(),
        history: Vec::new(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let clusters = env("PINFLEET_BENCH_CLUSTERS", 1000);
    let workloads = env("PINFLEET_BENCH_WORKLOADS", 5000);
    let f = fleet(clusters);
    let t = team(workloads);
    // The server's part: drawing each page from its view.
    let mut draw = Vec::new();
    for (name, render) in
        [("fleet", Box::new(|| f.html(1)) as Box<dyn Fn() -> String>), ("team", Box::new(|| t.html(1)))]
    {
        let runs: Vec<f64> = (0..5)
            .map(|_| {
                let s = Instant::now();
                let h = render();
                std::hint::black_box(h.len());
                s.elapsed().as_secs_f64() * 1000.0
            })
            .collect();
        draw.push((name, median(runs), render().len()));
    }
    let fleet_html = f.html(1);
    let team_html = t.html(1);
    let app = axum::Router::new()
        .route(
            "/",
            get(move || {
                let h = fleet_html.clone();
                async move { axum::response::Html(h) }
            }),
        )
        .route(
            "/teams/search",
            get(move || {
                let h = team_html.clone();
                async move { axum::response::Html(h) }
            }),
        )
        .route("/ui/console.css", get(|| async { ([("content-type", "text/css")], html::CSS).into_response() }))
        .route("/ui/console.js", get(|| async { ([("content-type", "text/javascript")], html::JS).into_response() }))
        .route(
            "/ui/events",
            get(|| async {
                axum::response::sse::Sse::new(futures::stream::pending::<
                    Result<axum::response::sse::Event, std::convert::Infallible>,
                >())
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let b = browser::Browser::start(1280, 900).await;
    println!("console pages in headless Chromium ({clusters} clusters, {workloads} workloads; goal: under 1 s each)");
    println!(
        "{:<6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10}",
        "page", "rows", "draw ms", "KiB", "FCP ms", "DCL ms", "LCP ms", "vs 1 s"
    );
    for (i, (page, path, rows)) in
        [("fleet", "/", clusters), ("team", "/teams/search", workloads)].into_iter().enumerate()
    {
        let mut fcp = Vec::new();
        let mut dcl = Vec::new();
        let mut lcp = Vec::new();
        for _ in 0..3 {
            b.client.goto("about:blank").await.unwrap();
            b.client.goto(&format!("{url}{path}")).await.unwrap();
            let m = b
                .client
                .execute_async(
                    "const done = arguments[arguments.length - 1];\
                     const nav = performance.getEntriesByType('navigation')[0];\
                     let fcp = null, lcp = null;\
                     const finish = () => { if (fcp !== null && lcp !== null) done([fcp, nav.domContentLoadedEventEnd, lcp, document.querySelectorAll('tbody tr').length]); };\
                     new PerformanceObserver(l => { for (const e of l.getEntries()) if (e.name === 'first-contentful-paint') fcp = e.startTime; finish(); }).observe({type: 'paint', buffered: true});\
                     new PerformanceObserver(l => { const e = l.getEntries(); lcp = e[e.length - 1].startTime; finish(); }).observe({type: 'largest-contentful-paint', buffered: true});",
                    vec![],
                )
                .await
                .unwrap();
            fcp.push(m[0].as_f64().unwrap());
            dcl.push(m[1].as_f64().unwrap());
            lcp.push(m[2].as_f64().unwrap());
            // Long tables are paged: the first page's rows (and the summary over all of them).
            assert!(
                m[3].as_u64().unwrap() as usize >= rows.min(pinfleet::views::html::PAGE),
                "the first page's rows are in the page: {m}"
            );
        }
        let (_, draw_ms, bytes) = draw[i];
        let shown = median(dcl.clone()).max(median(lcp.clone()));
        println!(
            "{:<6} {:>10} {:>9.1} {:>9} {:>9.0} {:>9.0} {:>8.0} {:>9.2}x",
            page,
            rows,
            draw_ms,
            bytes / 1024,
            median(fcp),
            median(dcl),
            median(lcp),
            (shown + draw_ms) / 1000.0
        );
    }
    println!("(draw: the server drawing the page from its view, median of 5; FCP/DCL/LCP: median of 3 loads; vs 1 s: (draw + max(DCL, LCP)) / 1 s)");
    b.stop().await;
    server.abort();
    tokio::time::sleep(Duration::from_millis(50)).await;
}
