//! Delivery end to end: three member clusters (sims running the workload
//! controller), the workload placed on each, a real Prometheus on loopback
//! with backfilled request counters for each version on each cluster, the
//! record and the line in S3 (moto). A healthy version goes out in waves;
//! a bad one fails its canary's analysis and every touched cluster goes
//! back at once, the version marked bad; an alert rolls a version back
//! mid-bake; an inconclusive analysis holds its wave for a person; a
//! stopped line keeps everything still but an audited hotfix; `apply
//! --no-wait` stops at the first wait (a revision coming up Ready, the
//! bake) and the next `apply` goes on from there. The SLO's rules pass
//! `promtool test rules`.

#[path = "support/gateway.rs"]
mod gateway_support;
#[path = "support/prometheus.rs"]
mod prom;
#[allow(dead_code)]
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gateway_support::{member, Member};
use pinfleet::delivery::run::{self, Ended, Event, Options};
use pinfleet::delivery::{book, members, status, DeliverySpec};
use serde_json::{json, Value};

fn digest(c: char) -> String {
    format!("registry.example/feeds/web@sha256:{}", c.to_string().repeat(64))
}

const SLO: &str = r#"slo:
  name: web-availability
  objective: 99
  errors: 'sum(rate(http_requests_total{cluster=~"{{cluster}}",namespace="{{namespace}}",workload="{{workload}}",version=~"{{version}}",code=~"5.."}[{{range}}]))'
  total: 'sum(rate(http_requests_total{cluster=~"{{cluster}}",namespace="{{namespace}}",workload="{{workload}}",version=~"{{version}}"}[{{range}}]))'
"#;

struct Fleet {
    members: Vec<Member>,
    prometheus: prom::Prometheus,
    store: String,
    aws: pinfleet::cloud::aws::Aws,
    dir: tempfile::TempDir,
    world: support::World,
}

async fn image_on(m: &Member) -> String {
    let client = pinfleet::kube::apply::connect(&m.kubeconfig).await.unwrap();
    let obj = members::workload_api(&client, "PinterestService", "feeds").get("web").await.unwrap();
    members::images_of(&serde_json::to_value(obj).unwrap())["app"].clone()
}

/// north (the canary), south and east, each running v1 Ready; Prometheus
/// with v2 healthy everywhere, v3 failing on north, v4 healthy, v5 silent.
async fn fleet() -> Fleet {
    let members = vec![member("north", 2, "8", true), member("south", 2, "8", true), member("east", 2, "8", true)];
    for m in &members {
        gateway_support::place_web(m, &digest('1'), 2).await;
    }
    let mut series = String::new();
    for c in ["north", "south", "east"] {
        prom::requests(&mut series, c, "v2", 0.001);
        prom::requests(&mut series, c, "v3", if c == "north" { 0.2 } else { 0.001 });
        prom::requests(&mut series, c, "v4", 0.001);
    }
    let prometheus = prom::Prometheus::start(&prom::openmetrics(&series));
    let world = support::World::new("delivery", 0);
    let aws = world.aws().await;
    let store = format!("s3://deliveries-{}/fleet", world.account);
    Fleet { members, prometheus, store, aws, dir: tempfile::tempdir().unwrap(), world }
}

impl Fleet {
    fn file(&self, version: &str, image: &str, extra: &str) -> DeliverySpec {
        let clusters: String = self
            .members
            .iter()
            .map(|m| {
                let canary = if m.name == "north" { ", labels: {canary: \"true\"}" } else { "" };
                format!("  {}: {{kubeconfig: {}, region: us-east-1{canary}}}\n", m.name, m.kubeconfig.display())
            })
            .collect();
        let text = format!(
            "workload: {{namespace: feeds, name: web}}\nversion: {version}\nimages: {{app: \"{image}\"}}\nstateStore: {}\nclusters:\n{clusters}waves:\n  stages:\n    - {{name: canary, selector: canary=true, soak: 0s}}\n    - {{name: rest, selector: \"!canary\", soak: 0s}}\nanalysis:\n  prometheus: {}\n  bake: 1s\n  interval: 1s\n  count: 2\n  readyTimeout: 60s\n{SLO}{extra}",
            self.store, self.prometheus.url
        );
        let path = self.dir.path().join(format!("{version}.yaml"));
        std::fs::write(&path, &text).unwrap();
        DeliverySpec::load(&path).unwrap()
    }

    async fn open(&self, spec: &DeliverySpec) -> run::Opened {
        run::open(spec, Some(&self.aws as &dyn pinfleet::state::S3Access)).await.unwrap()
    }

    async fn apply(
        &self,
        spec: &DeliverySpec,
        opts: &Options,
    ) -> (anyhow::Result<(pinfleet::fleet::rollout::FleetRollout, Ended)>, Vec<String>) {
        let (_tx, alert) = tokio::sync::watch::channel(None);
        self.apply_with(spec, opts, alert).await
    }

    async fn apply_with(
        &self,
        spec: &DeliverySpec,
        opts: &Options,
        alert: tokio::sync::watch::Receiver<Option<String>>,
    ) -> (anyhow::Result<(pinfleet::fleet::rollout::FleetRollout, Ended)>, Vec<String>) {
        let opened = self.open(spec).await;
        let clients = run::connect(spec).await.unwrap();
        let said = Arc::new(Mutex::new(Vec::new()));
        let s = said.clone();
        let on = move |e: Event| s.lock().unwrap().push(format!("{e:?}"));
        let r = run::apply(spec, &opened, clients, opts, alert, "test", &on).await;
        let said = said.lock().unwrap().clone();
        (r, said)
    }

    /// Applies without waiting, again at the time each run names (as a
    /// person would, sooner for a readiness), until a run ends on something
    /// else than a wait with an end: what that run said.
    async fn apply_until_it_stops(
        &self,
        spec: &DeliverySpec,
        opts: &Options,
    ) -> (anyhow::Result<(pinfleet::fleet::rollout::FleetRollout, Ended)>, Vec<String>) {
        for _ in 0..60 {
            let (r, said) = self.apply(spec, opts).await;
            let until = match &r {
                Ok((_, Ended::Waiting { until: Some(t), .. })) => Some(*t),
                _ => None,
            };
            let Some(t) = until else { return (r, said) };
            let left = (t - chrono::Utc::now()).to_std().unwrap_or_default();
            tokio::time::sleep(left.min(Duration::from_secs(1))).await;
        }
        panic!("the delivery still waits after 60 runs");
    }

    async fn status(&self, spec: &DeliverySpec) -> String {
        let opened = self.open(spec).await;
        let r = opened.book.latest().await.unwrap().unwrap();
        let analyses = book::analyses(&opened.book.store, r.number).await.unwrap();
        let bad = opened.line.bad().await.unwrap().into_values().collect();
        let mut s = status::Status::new(
            r,
            analyses,
            None,
            bad,
            &pinfleet::fleet::rollout::Always,
            &Default::default(),
            chrono::Utc::now(),
        );
        s.judged_by = Some(spec.analysis.clone());
        status::text(&s)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_healthy_version_goes_out_in_waves_and_a_bad_one_rolls_back_by_its_own_metrics() {
    let f = fleet().await;
    let opts = Options::default();
    // v2: the canary first, judged by its own SLI, then the rest.
    let v2 = f.file("v2", &digest('2'), "");
    let (r, said) = f.apply(&v2, &opts).await;
    let (record, ended) = r.unwrap();
    assert_eq!(ended, Ended::Finished, "{said:#?}");
    for m in &f.members {
        assert_eq!(image_on(m).await, digest('2'), "{} runs v2", m.name);
    }
    let started: Vec<&String> = said.iter().filter(|s| s.contains("Started")).collect();
    assert!(started[0].contains("north"), "the canary first: {started:?}");
    let text = f.status(&v2).await;
    println!("{text}");
    assert!(
        text.contains("wave canary (1 cluster(s)): passed")
            && text.contains("successful: web-availability-error-ratio ["),
        "{text}"
    );
    // What it was judged by: a 99% SLO's budget (1% of requests failing) at maxBurnRate 1.
    assert!(text.contains("web-availability-error-ratio: ok <= 0.01, FAILED > 0.01"), "{text}");
    assert_eq!(record.number, 1);
    // The SLO's error budget left, from the same Prometheus (what status and the console show).
    let rec = book::slo(&f.open(&v2).await.book.store).await.unwrap().expect("the delivery keeps its SLO");
    let budget = book::budget_text(&rec, "feeds", "web").await;
    println!("{budget}");
    assert!(budget.starts_with("SLO web-availability (99% availability over 30days): error budget "), "{budget}");
    assert!(budget.contains("(error ratio 2.31"), "v3's errors on north count: {budget}");

    // v3 fails on north: north goes back to v2; south and east were never touched.
    let v3 = f.file("v3", &digest('3'), "");
    let t = Instant::now();
    let (r, said) = f.apply(&v3, &opts).await;
    let (record, ended) = r.unwrap();
    let Ended::RolledBack { reason } = &ended else { panic!("{ended:?}\n{said:#?}") };
    assert!(reason.contains("analysis failed on north") && reason.contains("web-availability-error-ratio"), "{reason}");
    println!("v3 delivered, judged and rolled back in {:.1}s", t.elapsed().as_secs_f64());
    assert_eq!(record.state, pinfleet::fleet::rollout::RolloutState::Reverted);
    for m in &f.members {
        assert_eq!(image_on(m).await, digest('2'), "{} runs v2 again", m.name);
    }
    let text = f.status(&v3).await;
    println!("{text}");
    assert!(text.contains("BAD: ") && text.contains("feeds/web v3") && text.contains("FAILED"), "{text}");
    // Marked bad: the same version is refused before anything is written.
    let (r, _) = f.apply(&v3, &opts).await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("images.app:")
            && e.contains("is marked bad (delivery #2 of feeds/web v3:")
            && e.contains("analysis failed on north"),
        "{e}"
    );
    let opened = f.open(&v3).await;
    assert_eq!(opened.book.latest().await.unwrap().unwrap().number, 2, "no new delivery was recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alert_rolls_a_version_back_mid_bake_and_strangers_cannot() {
    let f = fleet().await;
    let v4 = f.file("v4", &digest('4'), "").clone();
    let mut v4 = v4;
    v4.analysis.bake = Duration::from_secs(120);
    let (tx, alert) = tokio::sync::watch::channel(None);
    let token = "s3cret-token".to_string();
    let (addr, server) =
        pinfleet::delivery::alerts::serve("127.0.0.1:0", token.clone(), "feeds", "web", tx, None).await.unwrap();
    let url = format!("http://{addr}/alerts");
    let opts = Options::default();
    let run = f.apply_with(&v4, &opts, alert);
    let poke = async {
        // Wait until the canary bakes on v4.
        for _ in 0..600 {
            if image_on(&f.members[0]).await == digest('4') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let http = reqwest::Client::new();
        let firing = json!({"version": "4", "status": "firing", "alerts": [{"status": "firing",
            "labels": {"alertname": "SLOErrorBudgetBurnFast", "namespace": "feeds", "workload": "web", "cluster": "north"},
            "annotations": {"summary": "feeds/web burns its budget 14.4x too fast"}}]});
        // A stranger: no token, a wrong one, junk, an oversized body.
        let code = |r: reqwest::Response| r.status().as_u16();
        assert_eq!(code(http.post(&url).json(&firing).send().await.unwrap()), 401);
        assert_eq!(code(http.post(&url).bearer_auth("guess").json(&firing).send().await.unwrap()), 401);
        assert_eq!(code(http.post(&url).bearer_auth(&token).body("{\"alerts\": 7}").send().await.unwrap()), 400);
        assert_eq!(code(http.post(&url).bearer_auth(&token).body(vec![b' '; 300 * 1024]).send().await.unwrap()), 413);
        let other = json!({"alerts": [{"status": "firing", "labels": {"namespace": "ads", "workload": "web"}}]});
        let answer: Value =
            http.post(&url).bearer_auth(&token).json(&other).send().await.unwrap().json().await.unwrap();
        assert_eq!(answer["rollback"], false);
        assert_eq!(image_on(&f.members[0]).await, digest('4'), "nothing a stranger sent moved anything");
        let sent = Instant::now();
        let answer: Value =
            http.post(&url).bearer_auth(&token).json(&firing).send().await.unwrap().json().await.unwrap();
        assert_eq!(answer["rollback"], true);
        sent
    };
    let ((r, said), sent) = tokio::join!(run, poke);
    let back = sent.elapsed();
    server.abort();
    let (_, ended) = r.unwrap();
    let Ended::RolledBack { reason } = &ended else { panic!("{ended:?}\n{said:#?}") };
    assert!(reason.contains("alert SLOErrorBudgetBurnFast firing on north"), "{reason}");
    println!("from the alert to the canary back on v1: {:.2}s", back.as_secs_f64());
    assert_eq!(image_on(&f.members[0]).await, digest('1'));
    assert_eq!(image_on(&f.members[1]).await, digest('1'), "south was never touched");
    let opened = f.open(&v4).await;
    assert!(opened.line.bad().await.unwrap().values().any(|b| b.digest == format!("sha256:{}", "4".repeat(64))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_data_holds_the_wave_for_a_person_and_the_line_holds_everything_but_a_hotfix() {
    let f = fleet().await;
    // v5 exports nothing: the canary's analysis is inconclusive, the wave waits.
    let v5 = f.file("v5", &digest('5'), "");
    let opts = Options { wait: false, ..Default::default() };
    let (r, said) = f.apply_until_it_stops(&v5, &opts).await;
    let (record, ended) = r.unwrap();
    let Ended::Waiting { until: None, why } = &ended else { panic!("{ended:?}\n{said:#?}") };
    assert!(why["south"].contains("gate was inconclusive") && why["south"].contains("no data"), "{why:?}");
    assert!(record.stages[0].held.is_some());
    assert_eq!(image_on(&f.members[0]).await, digest('5'), "held, not rolled back");
    assert_eq!(image_on(&f.members[1]).await, digest('1'));
    // A person approves the gate: the rest goes on (and is held again: v5 has no data anywhere).
    let opened = f.open(&v5).await;
    opened.book.approve(record.number, "canary.gate", "lead@example", chrono::Utc::now()).await.unwrap();
    let (r, said) = f.apply_until_it_stops(&v5, &opts).await;
    let (record, _) = r.unwrap();
    assert!(record.stages[0].passed_at.is_some() && record.stages[1].held.is_some(), "{said:#?}");
    assert_eq!(image_on(&f.members[1]).await, digest('5'));

    // The line stops: v2 is refused before anything is written; a hotfix goes, audited.
    let v2 = f.file("v2", &digest('2'), "");
    let line = f.open(&v2).await.line;
    line.stop(&book::Stopped { by: "sre@example".into(), at: chrono::Utc::now(), reason: "incident 4711".into() })
        .await
        .unwrap();
    let (r, _) = f.apply(&v2, &opts).await;
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("the line is stopped by sre@example") && e.contains("incident 4711") && e.contains("--hotfix"),
        "{e}"
    );
    assert_eq!(f.open(&v2).await.book.latest().await.unwrap().unwrap().number, 1, "nothing recorded");
    // v5's delivery still runs: the new one is refused as long as it does.
    let hot = Options { hotfix: Some("fix for incident 4711".into()), ..Default::default() };
    let (r, _) = f.apply(&v2, &hot).await;
    assert!(format!("{:#}", r.unwrap_err()).contains("is in progress"), "one delivery at a time");
    let opened = f.open(&v5).await;
    let clients = run::connect(&v5).await.unwrap();
    run::rollback_by_hand(&v5, &opened, clients, None, "test", &|_| {}).await.unwrap();
    let (r, said) = f.apply(&v2, &hot).await;
    assert_eq!(r.unwrap().1, Ended::Finished, "{said:#?}");
    assert!(said.iter().any(|s| s.contains("Hotfix")));
    let audits = line.audits().await.unwrap();
    let acts: Vec<(&str, &str)> = audits.iter().map(|a| (a.act.as_str(), a.reason.as_str())).collect();
    assert_eq!(acts, [("stop", "incident 4711"), ("hotfix", "fix for incident 4711")]);
    for m in &f.members {
        assert_eq!(image_on(m).await, digest('2'));
    }
}

/// `pinfleet delivery apply FILE --no-wait`, as a person runs it: its
/// stderr, once it ended by itself (a run that sleeps through a wait is
/// killed after 2 minutes, and fails the test).
async fn apply_no_wait(world: &support::World, file: &Path) -> String {
    let mut cmd =
        tokio::process::Command::from(world.command(&["delivery", "apply", file.to_str().unwrap(), "--no-wait"]));
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(120), cmd.output())
        .await
        .expect("`delivery apply --no-wait` ended by itself within 2 minutes")
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    said
}

/// `--no-wait` returns at the first wait of any kind. The bake runs inside
/// the wave's gate (a member's call), where the engine's own `--no-wait`
/// (soaks, windows) never looked: the command slept through it. Now each
/// run says what it waits for and until when, and the next goes on from
/// there: the same bake, not a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_wait_returns_at_the_bake_and_the_next_apply_goes_on_from_there() {
    let f = fleet().await;
    f.file("v2", &digest('2'), "");
    // A bake far longer than the test: a run that sleeps through it never ends in time.
    let file = f.dir.path().join("v2-baking.yaml");
    let text = std::fs::read_to_string(f.dir.path().join("v2.yaml")).unwrap();
    std::fs::write(&file, text.replace("  bake: 1s\n", "  bake: 1h\n")).unwrap();
    let spec = DeliverySpec::load(&file).unwrap();
    assert_eq!(spec.analysis.bake, Duration::from_secs(3600));
    // The first run may stop sooner: at the canary's new revision coming up Ready.
    let mut said = apply_no_wait(&f.world, &file).await;
    for _ in 0..10 {
        if said.contains("north: baking") {
            break;
        }
        assert!(said.contains("waits until ") && said.contains("north: for its new revision to run Ready"), "{said}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        said = apply_no_wait(&f.world, &file).await;
    }
    println!("{said}");
    assert!(
        said.contains("waits until ") && said.contains("north: baking v2 until ") && said.contains("analysis.bake 1h"),
        "{said}"
    );
    // Still baking: the canary runs v2, the rest waits for its wave.
    let text = f.status(&spec).await;
    println!("{text}");
    assert!(text.contains("wave canary (1 cluster(s)): in progress") && text.contains("baking until "), "{text}");
    assert_eq!(image_on(&f.members[0]).await, digest('2'));
    assert_eq!(image_on(&f.members[1]).await, digest('1'));
    let opened = f.open(&spec).await;
    let number = opened.book.latest().await.unwrap().unwrap().number;
    let bake_until = |a: std::collections::BTreeMap<String, book::ClusterAnalysis>| a["north"].bake_until;
    let until = bake_until(book::analyses(&opened.book.store, number).await.unwrap()).expect("the bake's end is kept");
    assert!(until > chrono::Utc::now() + chrono::Duration::minutes(50), "{until}");
    // The next run picks the bake up where it is: the same end.
    let again = apply_no_wait(&f.world, &file).await;
    let end = until.format("north: baking v2 until %H:%M:%S UTC").to_string();
    assert!(again.contains(&end), "{end}\n{again}");
    assert_eq!(bake_until(book::analyses(&opened.book.store, number).await.unwrap()), Some(until));
    assert_eq!(opened.book.latest().await.unwrap().unwrap().number, number, "the same delivery");
}

#[test]
fn the_slos_rules_pass_promtools_checks_and_tests() {
    let spec = DeliverySpec::parse(
        &format!(
            "workload: {{namespace: feeds, name: web}}\nversion: v1\nimages: {{app: \"{}\"}}\nstateStore: file:///tmp/x\nclusters: {{north: {{kubeconfig: k}}}}\nanalysis: {{prometheus: \"http://127.0.0.1:1\"}}\n{}",
            digest('1'),
            SLO.replace("objective: 99", "objective: 99.9")
        ),
        Path::new("/"),
    )
    .unwrap();
    let rules = pinfleet::delivery::slo::rules(spec.slo.as_ref().unwrap(), "feeds", "web");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rules.yml"), &rules).unwrap();
    let check = std::process::Command::new(prom::bin("promtool"))
        .args(["check", "rules"])
        .arg(dir.path().join("rules.yml"))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    // 2% errors burns a 99.9% budget 20x: both pages and the ticket fire; 0.05% fires nothing.
    let series = |code: &str, per_min: u32, cluster: &str| {
        format!("      - series: 'http_requests_total{{cluster=\"{cluster}\",namespace=\"feeds\",workload=\"web\",version=\"v1\",code=\"{code}\"}}'\n        values: '0+{per_min}x400'\n")
    };
    let labels = |alert: &str, severity: &str, burn: &str| {
        let summary = format!(
            "feeds/web burns its web-availability error budget {burn}x too fast ({} over {})",
            match alert {
                "SLOErrorBudgetBurnFast" => "1h and 5m",
                "SLOErrorBudgetBurnMedium" => "6h and 30m",
                _ => "3d and 6h",
            },
            match alert {
                "SLOErrorBudgetBurnFast" => "0.0144",
                "SLOErrorBudgetBurnMedium" => "0.006",
                _ => "0.001",
            }
        );
        format!("          - exp_labels: {{severity: {severity}, burn: \"{burn}\", slo: web-availability, namespace: feeds, workload: web}}\n            exp_annotations: {{summary: \"{summary}\"}}\n")
    };
    let mut test = String::from("rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n");
    test.push_str("  - interval: 1m\n    input_series:\n");
    test.push_str(&series("200", 980, "north"));
    test.push_str(&series("500", 20, "north"));
    test.push_str("    alert_rule_test:\n");
    for (alert, severity, burn) in [
        ("SLOErrorBudgetBurnFast", "page", "14.4"),
        ("SLOErrorBudgetBurnMedium", "page", "6"),
        ("SLOErrorBudgetBurnSlow", "ticket", "1"),
    ] {
        test.push_str(&format!(
            "      - eval_time: 2h\n        alertname: {alert}\n        exp_alerts:\n{}",
            labels(alert, severity, burn)
        ));
    }
    test.push_str("  - interval: 1m\n    input_series:\n");
    test.push_str(&series("200", 19990, "north"));
    test.push_str(&series("500", 10, "north"));
    test.push_str("    alert_rule_test:\n");
    for alert in ["SLOErrorBudgetBurnFast", "SLOErrorBudgetBurnMedium", "SLOErrorBudgetBurnSlow"] {
        test.push_str(&format!("      - eval_time: 2h\n        alertname: {alert}\n        exp_alerts: []\n"));
    }
    std::fs::write(dir.path().join("test.yml"), &test).unwrap();
    let out = std::process::Command::new(prom::bin("promtool"))
        .args(["test", "rules", "test.yml"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}\n{}{}",
        test,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
