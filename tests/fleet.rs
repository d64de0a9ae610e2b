//! The fleet driver on in-memory clusters (rolled by the real roll driver)
//! and a real state store on disk, on tokio's paused clock: stages in the
//! order their labels give, the failure budget halting everything, revert
//! to the images each cluster had, and a second writer refused with the
//! holder's name. (Resuming after kill -9, on moto with the sim, is in
//! tests/fleet_aws.rs.)

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use pinfleet::fleet::rehearsal::{Rehearsal, GROUP};
use pinfleet::fleet::rollout::{Always, ClusterState, FleetRollout, RolloutState, Snapshot};
use pinfleet::fleet::run::{self, Book, Clock, Note, Outcome};
use pinfleet::fleet::{plan, FleetSpec, Member, Target};
use pinfleet::spec::IntOrPercent;
use pinfleet::state::lock::Lock;

const FLEET: &[(&str, &str)] = &[
    ("prod-b", "production"),
    ("dev-a", "dev"),
    ("prod-a", "production"),
    ("staging-a", "staging"),
    ("prod-c", "production"),
    ("lab", "lab"),
];

/// The fleet's clusters, labelled by their `env`, all in us-east-1.
fn members() -> Vec<Member> {
    FLEET
        .iter()
        .map(|(n, env)| Member {
            name: n.to_string(),
            labels: [("env".to_string(), env.to_string())].into(),
            region: "us-east-1".into(),
        })
        .collect()
}

fn start() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap()
}

struct Setup {
    fleet: Rehearsal,
    book: Book,
    record: FleetRollout,
    spec: FleetSpec,
    members: Vec<Member>,
    _dir: tempfile::TempDir,
}

async fn setup(fleet_yaml: &str) -> Setup {
    setup_with(FleetSpec::parse(fleet_yaml).unwrap()).await
}

async fn setup_with(spec: FleetSpec) -> Setup {
    let sizes: Vec<(&str, u32)> = FLEET.iter().map(|(n, _)| (*n, 10)).collect();
    let fleet =
        Rehearsal::new(&sizes, "ami-old", IntOrPercent::Int(2), Duration::from_secs(60), Duration::from_secs(10));
    let members = members();
    let p = plan(&spec, &members, &Target::Ami("ami-new".into()), &BTreeMap::new(), start());
    let to: BTreeMap<String, Snapshot> = FLEET
        .iter()
        .map(|(n, _)| {
            (n.to_string(), Snapshot { images: [(GROUP.into(), "ami-new".into())].into(), ..Default::default() })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let book = Book::open(&format!("file://{}", dir.path().display()), None).await.unwrap();
    let record = FleetRollout::new(1, &p, &spec, &to, "test", start());
    Setup { fleet, book, record, spec, members, _dir: dir }
}

const STAGES: &str = "stages:\n  - {name: dev, selector: env=dev, soak: 1h}\n  - {name: staging, selector: env=staging, soak: 2h}\n  - {name: production, selector: env=production, soak: 0s, canary: true, maxFailures: 0}\n";

/// One run of apply on the setup's record: what it returned and printed.
async fn try_apply(
    s: &Setup,
    command: &str,
    windows: &dyn pinfleet::fleet::rollout::Windows,
) -> anyhow::Result<(FleetRollout, Outcome, Vec<Note>)> {
    let notes = std::sync::Mutex::new(Vec::new());
    let clock = Clock::starting(start());
    let on = |n| notes.lock().unwrap().push(n);
    let (r, o) =
        run::apply(&s.fleet, &s.book, s.record.clone(), windows, clock, run::Options::default(), command, &on).await?;
    Ok((r, o, notes.into_inner().unwrap()))
}

async fn apply(s: &Setup) -> (FleetRollout, Outcome, Vec<Note>) {
    try_apply(s, "pinfleet fleet rollout apply --ami ami-new", &Always).await.unwrap()
}

#[tokio::test(start_paused = true)]
async fn stages_roll_in_label_order_each_after_the_last_ones_soak_and_gate() {
    let s = setup(STAGES).await;
    let (r, outcome, notes) = apply(&s).await;
    assert_eq!(outcome, Outcome::Finished);
    assert_eq!(r.state, RolloutState::Done);
    // The order rolls started in: dev, staging, then production's canary (first by region and name) alone, then the rest.
    let order: Vec<String> = s.fleet.rolls.lock().unwrap().iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(order, ["dev-a", "staging-a", "prod-a", "prod-b", "prod-c"]);
    // Nobody outside a stage is touched.
    assert_eq!(s.fleet.image("lab").0, "ami-old");
    for (n, _) in FLEET.iter().filter(|(n, _)| *n != "lab") {
        let (image, all, current) = s.fleet.image(n);
        assert_eq!((image.as_str(), all, current), ("ami-new", 10, 10), "{n}");
    }
    // Staging started only after dev's soak (1h) and its gate passed.
    let dev = &r.stages[0];
    let staging = &r.stages[1];
    assert!(staging.clusters[0].started_at.unwrap() >= dev.rolled_at.unwrap() + chrono::Duration::hours(1));
    assert!(staging.clusters[0].started_at.unwrap() >= dev.passed_at.unwrap());
    let prod_b = r.stages[2].clusters.iter().find(|c| c.name == "prod-b").unwrap();
    let canary = &r.stages[2].clusters[0];
    assert!(canary.canary && prod_b.started_at.unwrap() >= canary.finished_at.unwrap());
    // What each cluster ran before is kept with the decision.
    assert_eq!(canary.from.images[GROUP], "ami-old");
    assert_eq!(canary.from.launch_template_versions[GROUP], 1);
    assert!(notes.iter().any(|n| matches!(n, Note::Passed { stage } if stage == "staging")));
    // What a run prints, line by line.
    let lines: Vec<String> = notes.iter().map(pinfleet::fleet::text::fleet_note).collect();
    insta::assert_snapshot!("fleet_apply_notes", lines.join("\n"));
    // The record in the store is the one returned.
    assert_eq!(s.book.latest().await.unwrap().unwrap(), r);
}

#[tokio::test(start_paused = true)]
async fn failures_beyond_max_failures_halt_the_rollout_then_revert_restores_the_images() {
    let yaml = "stages:\n  - {name: dev, selector: env=dev, soak: 10m}\n  - {name: production, selector: env=production, soak: 0s, maxFailures: 1}\n  - {name: staging, selector: env=staging}\n";
    let s = setup(yaml).await;
    // Two of production's three fail: one roll, one stage gate (with a budget of 1).
    s.fleet.fail_roll.lock().unwrap().insert("prod-b".into());
    s.fleet.fail_gate.lock().unwrap().insert("prod-c".into());
    let (r, outcome, _) = apply(&s).await;
    let Outcome::Halted(reason) = outcome else { panic!("{outcome:?}") };
    assert!(
        reason.contains("stage production: 2 of 3 clusters failed (maxFailures 1 allows 1): prod-b, prod-c"),
        "{reason}"
    );
    assert!(matches!(r.state, RolloutState::Halted(_)));
    // The stage after it never started.
    assert_eq!(s.fleet.image("staging-a").0, "ami-old");
    assert!(!s.fleet.rolls.lock().unwrap().iter().any(|(c, _)| c == "staging-a"));
    // What status says of it: the failures with their reasons, the stage after it halted.
    let view = pinfleet::views::fleet::FleetStatusView::new(
        &r,
        &Always,
        &Default::default(),
        None,
        Default::default(),
        &Default::default(),
        start() + chrono::Duration::hours(2),
    );
    insta::assert_snapshot!("fleet_status_halted", view.text());
    // A second apply of a halted rollout does nothing more.
    let (_, again, _) = apply(&s).await;
    assert!(matches!(again, Outcome::Halted(_)));

    // Revert (the fault is gone): every touched cluster back on the image it had (a new launch-template version naming it).
    s.fleet.fail_roll.lock().unwrap().clear();
    let reverted = run::revert(&s.fleet, &s.book, r, Clock::starting(start()), "revert", &|_| {}).await.unwrap();
    assert_eq!(reverted.state, RolloutState::Reverted);
    for n in ["dev-a", "prod-a", "prod-b", "prod-c"] {
        let (image, all, current) = s.fleet.image(n);
        assert_eq!((image.as_str(), all, current), ("ami-old", 10, 10), "{n}");
    }
    let states: BTreeMap<String, ClusterState> =
        reverted.clusters().map(|(_, c)| (c.name.clone(), c.state.clone())).collect();
    assert_eq!(states["prod-b"], ClusterState::Reverted);
    assert_eq!(states["staging-a"], ClusterState::Pending);
    // Reverts went latest stage first.
    let rolls = s.fleet.rolls.lock().unwrap().clone();
    let back: Vec<&str> = rolls.iter().filter(|(_, i)| i == "ami-old").map(|(c, _)| c.as_str()).collect();
    assert_eq!(back.last(), Some(&"dev-a"), "{back:?}");
}

#[tokio::test(start_paused = true)]
async fn a_second_writer_is_refused_with_the_holders_name() {
    let s = setup(STAGES).await;
    let held = Lock::acquire(&s.book.store, "pinfleet fleet rollout apply --ami ami-new").await.unwrap();
    let err = try_apply(&s, "second", &Always).await.unwrap_err().to_string();
    let me = pinfleet::state::whoami().0;
    assert!(err.starts_with(&format!("the fleet is locked by {me} on")), "{err}");
    assert!(
        err.contains("`pinfleet fleet rollout apply --ami ami-new`") && err.contains("fleet rollout unlock --force"),
        "{err}"
    );
    // Nothing moved.
    assert!(s.fleet.rolls.lock().unwrap().is_empty());
    held.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn without_wait_a_run_stops_at_the_soak_and_the_next_run_goes_on() {
    let s = setup(STAGES).await;
    let opts = run::Options { wait: false, ..Default::default() };
    let clock = Clock::starting(start());
    let (fleet, book) = (&s.fleet, &s.book);
    let run = |record: FleetRollout| async move {
        run::apply(fleet, book, record, &Always, clock, opts, "cron", &|_| {}).await.unwrap()
    };
    let (r, outcome) = run(s.record.clone()).await;
    let Outcome::Waiting { until, why } = outcome else { panic!("{outcome:?}") };
    assert_eq!(until, Some(r.stages[0].soak_until().unwrap()));
    assert_eq!(
        why["staging-a"].to_string(),
        format!("stage gate: dev soaking until {}", until.unwrap().format("%a %Y-%m-%d %H:%M UTC"))
    );
    tokio::time::advance(Duration::from_secs(3700)).await;
    let (_, outcome) = run(r).await;
    assert!(matches!(outcome, Outcome::Waiting { .. }), "{outcome:?}");
    assert_eq!(s.fleet.image("staging-a").0, "ami-new");
}

/// `status` while a cluster rolls: its groups from its roll progress record.
#[test]
fn status_shows_a_rolling_clusters_groups_and_why_the_rest_wait() {
    use pinfleet::rollout::progress::RollProgress;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let s = rt.block_on(setup(STAGES));
    let mut r = s.record.clone();
    r.cluster_mut("dev-a").unwrap().state = ClusterState::Rolling;
    r.cluster_mut("dev-a").unwrap().started_at = Some(start());
    r.cluster_mut("dev-a").unwrap().from =
        Snapshot { images: [(GROUP.into(), "ami-old".into())].into(), ..Default::default() };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml");
    let opts = pinfleet::spec::LoadOptions::default();
    let (loaded, diags) = pinfleet::spec::load_paths(&[path], &opts);
    assert!(diags.0.is_empty(), "{diags}");
    let cluster = &loaded[0].cluster;
    let mut progress = RollProgress::new("fleet rollout (stage dev)", start());
    use pinfleet::rollout::driver::Event;
    let _ = progress.record(&Event::Started { group: "control-plane".into(), outdated: 1, machines: 1 }, start());
    let _ = progress.record(&Event::Finished { group: "control-plane".into(), replaced: 1, seconds: 90.0 }, start());
    let _ = progress.record(&Event::Started { group: "general".into(), outdated: 3, machines: 3 }, start());
    let _ = progress
        .record(&Event::Replaced { group: "general".into(), instance: "i-1".into(), done: 1, total: 3 }, start());
    let groups = [("dev-a".to_string(), pinfleet::fleet::status::group_rows(cluster, Some(&progress)))].into();
    let lock = pinfleet::state::lock::LockInfo {
        id: "1".into(),
        holder: "ops".into(),
        host: "jobs-1".into(),
        pid: 4242,
        command: "pinfleet fleet rollout apply --ami newest --yes".into(),
        acquired_at: start(),
        expires_at: start() + chrono::Duration::minutes(15),
    };
    let view = pinfleet::views::fleet::FleetStatusView::new(
        &r,
        &Always,
        &Default::default(),
        Some(&lock),
        groups,
        // Someone's upgrade holds a production cluster's own lock.
        &[(
            "prod-b".to_string(),
            pinfleet::state::lock::LockInfo {
                pid: 77,
                command: "pinfleet upgrade prod-b --yes".into(),
                ..lock.clone()
            },
        )]
        .into(),
        start() + chrono::Duration::minutes(3),
    );
    insta::assert_snapshot!("fleet_status_rolling", view.text());
    // Before its roll reports anything, every group waits for the start.
    let rows = pinfleet::fleet::status::group_rows(cluster, None);
    assert_eq!(rows[0].why, "the roll is starting (applying new launch-template versions)");
}

/// Nothing starts outside a cluster's windows: a production cluster whose
/// window is Tuesday 02:00-05:00 in Los Angeles starts at 10:00 UTC on
/// Tuesday (PST), though its stage was ready on Monday; the others go at once.
#[tokio::test(start_paused = true)]
async fn a_closed_window_holds_a_cluster_until_it_opens() {
    let yaml = "stages:\n  - {name: production, selector: env=production, soak: 0s}\nwindows:\n  - {cluster: prod-b, window: \"Tue 02:00-05:00 America/Los_Angeles\"}\n";
    let s = setup(yaml).await;
    let (r, outcome, _) = try_apply(&s, "apply", &(&s.spec, &s.members[..])).await.unwrap();
    assert_eq!(outcome, Outcome::Finished);
    let started = |n: &str| r.clusters().find(|(_, c)| c.name == n).unwrap().1.started_at.unwrap();
    assert_eq!(started("prod-a"), start());
    assert_eq!(started("prod-b"), Utc.with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap());
}

/// A Kubernetes version is not rolled back: revert refuses, naming the
/// clusters that moved, and changes nothing.
#[tokio::test(start_paused = true)]
async fn revert_refuses_a_kubernetes_version() {
    let s = setup(STAGES).await;
    let mut r = s.record.clone();
    r.target = Target::KubernetesVersion("1.34.0".into());
    r.cluster_mut("dev-a").unwrap().state = ClusterState::Done;
    let err = run::revert(&s.fleet, &s.book, r, Clock::starting(start()), "revert", &|_| {}).await.unwrap_err();
    assert!(
        err.to_string().contains("kubeadm does not downgrade a control plane, and dev-a already moved towards 1.34.0"),
        "{err}"
    );
    assert!(s.fleet.rolls.lock().unwrap().is_empty());
}

/// A stage with `approval: true` waits for `approve STAGE` (an object of
/// its own in the store): the run ends saying so, and the next one, after
/// the approval, rolls it.
#[tokio::test(start_paused = true)]
async fn a_stage_that_needs_approval_waits_for_it() {
    let yaml = "stages:\n  - {name: dev, selector: env=dev, soak: 0s}\n  - {name: production, selector: env=production, soak: 0s, approval: true}\n";
    let s = setup(yaml).await;
    let (r, outcome, _) = apply(&s).await;
    let Outcome::Waiting { until: None, why } = outcome else { panic!("{outcome:?}") };
    assert_eq!(why["prod-a"].to_string(), "approval missing: pinfleet fleet rollout approve production");
    assert_eq!(s.fleet.image("dev-a").0, "ami-new");
    assert_eq!(s.fleet.image("prod-a").0, "ami-old");
    s.book.approve(r.number, "production", "ops@laptop", start()).await.unwrap();
    assert_eq!(s.book.approvals(r.number).await.unwrap(), ["production".to_string()].into());
    let (r, outcome, _) = apply(&s).await;
    assert_eq!(outcome, Outcome::Finished);
    assert_eq!(r.state, RolloutState::Done);
    assert_eq!(s.fleet.image("prod-c").0, "ami-new");
}

/// Waves instead of stages: the staged clusters in their order (dev,
/// staging, production's canary first), split by share; each wave soaks
/// until the next one's start; one failure in a wave halts the rest.
#[tokio::test(start_paused = true)]
async fn waves_roll_by_share_with_their_soaks_and_a_failed_gate_halts_the_rest() {
    let stages = FleetSpec::parse(STAGES).unwrap();
    let members = members();
    let order: Vec<String> =
        pinfleet::fleet::stage_members(&stages, &members).into_iter().flatten().map(|m| m.name.clone()).collect();
    assert_eq!(order, ["dev-a", "staging-a", "prod-a", "prod-b", "prod-c"]);
    let waves = stages.in_waves(pinfleet::ami::waves::Profile::Standard, &order);
    // Five clusters: a wave each (every wave takes at least one more), soaking 3 h, 20 h, 2 d, 3 d, then an hour.
    let soaks: Vec<u64> = waves.stages.iter().map(|s| s.soak.as_secs() / 3600).collect();
    assert_eq!(soaks, [3, 20, 48, 72, 1]);

    // All well: the waves in order, each after the last one's soak and gate.
    let s = setup_with(waves.clone()).await;
    let (r, outcome, _) = apply(&s).await;
    assert_eq!(outcome, Outcome::Finished);
    let order_rolled: Vec<String> = s.fleet.rolls.lock().unwrap().iter().map(|(c, _)| c.clone()).collect();
    assert_eq!(order_rolled, order);
    let names: Vec<&str> = r.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["wave-1", "wave-2", "wave-3", "wave-4", "wave-5"]);
    for pair in r.stages.windows(2) {
        let soak =
            chrono::Duration::from_std(waves.stages.iter().find(|s| s.name == pair[0].name).unwrap().soak).unwrap();
        assert!(
            pair[1].clusters[0].started_at.unwrap() >= pair[0].rolled_at.unwrap() + soak,
            "{} after {}",
            pair[1].name,
            pair[0].name
        );
    }

    // Wave 2's gate fails: the rollout halts there; production never moves.
    let s = setup_with(waves).await;
    s.fleet.fail_gate.lock().unwrap().insert("staging-a".into());
    let (r, outcome, _) = apply(&s).await;
    let Outcome::Halted(reason) = outcome else { panic!("{outcome:?}") };
    assert!(reason.contains("wave-2") && reason.contains("staging-a"), "{reason}");
    assert!(matches!(r.state, RolloutState::Halted(_)));
    for n in ["prod-a", "prod-b", "prod-c"] {
        assert_eq!(s.fleet.image(n).0, "ami-old", "{n}");
    }
    assert_eq!(s.fleet.image("dev-a").0, "ami-new");
}

/// A failure budget lets a rollout go on; it never makes a failed cluster a
/// success. Two of production's three fail their rolls within a budget of
/// two: every stage goes through, and the last word, the exit status and
/// the status name each failed cluster, why, and what it runs now.
#[tokio::test(start_paused = true)]
async fn failures_within_the_budget_finish_the_rollout_but_never_as_done() {
    let yaml = "stages:\n  - {name: dev, selector: env=dev, soak: 0s}\n  - {name: production, selector: env=production, soak: 0s, maxFailures: 2}\n";
    let s = setup(yaml).await;
    s.fleet.fail_roll.lock().unwrap().insert("prod-b".into());
    s.fleet.fail_roll.lock().unwrap().insert("prod-c".into());
    let (r, outcome, notes) = apply(&s).await;
    let Outcome::FinishedWithFailures(failures) = &outcome else { panic!("not finished with failures: {outcome:?}") };
    for name in ["prod-b", "prod-c"] {
        assert!(failures.contains(&format!("{name} (failed: replacement")), "{failures}");
        assert_eq!(s.fleet.image(name).0, "ami-old", "{name} failed its roll");
    }
    assert!(failures.contains("its machines run ami-old"), "what each failed cluster runs now: {failures}");
    assert!(!failures.contains("prod-a"), "prod-a rolled: {failures}");
    assert!(matches!(&r.state, RolloutState::FinishedWithFailures(w) if w == failures), "{:?}", r.state);
    assert!(r.is_finished(), "nothing left to run");
    // The last word and the exit status.
    let (line, state, code) = pinfleet::fleet::text::fleet_outcome(r.number, &r.target.to_string(), &outcome);
    assert_eq!((state, code), ("finishedWithFailures", 1), "{line}");
    assert!(!line.contains("is done") && line.contains("prod-b") && line.contains("prod-c"), "{line}");
    let last: Vec<String> = notes.iter().map(pinfleet::fleet::text::fleet_note).collect();
    assert!(last.last().unwrap().contains("NOT every cluster"), "{last:?}");
    // The status: the rollout's state and each failed cluster's row.
    let view = pinfleet::views::fleet::FleetStatusView::new(
        &r,
        &Always,
        &Default::default(),
        None,
        Default::default(),
        &Default::default(),
        start() + chrono::Duration::hours(2),
    );
    assert!(view.state.starts_with("finished with failures: 2 clusters failed"), "{}", view.state);
    let rows: Vec<_> = view.stages.iter().flat_map(|s| &s.clusters).collect();
    for name in ["prod-b", "prod-c"] {
        let row = rows.iter().find(|c| c.cluster == name).unwrap();
        assert_eq!(row.state, "failed");
        assert!(row.why.contains("its machines run ami-old"), "{row:?}");
    }
    // The record in the store says the same.
    assert_eq!(s.book.latest().await.unwrap().unwrap(), r);
    // A clean rollout's last word is still "done", exit 0.
    let (line, _, code) = pinfleet::fleet::text::fleet_outcome(2, "ami-new", &Outcome::Finished);
    assert_eq!(code, 0, "{line}");
}
