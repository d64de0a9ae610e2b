//! `pinfleet ami` on moto with the node simulator: a newer image registered
//! in the account is found by the groups' selector, and `ami rollout` rolls
//! the canary group first, soaks, then the others; outside its window it
//! does nothing; the rollout is recorded and listed by `ami history`.
//! (moto cannot mark images deprecated: unit tests of the selection logic
//! cover deprecated and too-old images.)

mod support;

use std::process::Stdio;
use std::time::Duration;

use chrono::Datelike;
use support::{stderr, World};

/// Copies one of moto's x86_64 images under `name` into the world's account.
fn register_image(w: &World, name: &str) -> String {
    tokio::runtime::Runtime::new().unwrap().block_on(async move {
        let aws = w.aws().await;
        let images = aws.ec2.describe_images().owners("099720109477").send().await.unwrap();
        let base = images
            .images()
            .iter()
            .find(|i| i.architecture().map(|a| a.as_str()) == Some("x86_64"))
            .and_then(|i| i.image_id())
            .unwrap()
            .to_string();
        let out =
            aws.ec2.copy_image().source_image_id(base).source_region("us-east-1").name(name).send().await.unwrap();
        out.image_id().unwrap().to_string()
    })
}

/// Both groups select this account's own images (`pinfleet-node-*`).
fn select_own_images(w: &World) {
    let base = w.clusters_dir().join("bases/aws-standard.yaml");
    let text = std::fs::read_to_string(&base)
        .unwrap()
        .replace("owners: [\"099720109477\"]", "owners: [\"self\"]")
        .replace("ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*", "pinfleet-node-*");
    std::fs::write(&base, text).unwrap();
}

/// The cluster's node simulator, Nodes for its machines (with a pod network
/// already: no addons are installed here), and the serving-certificate approver.
fn sim(w: &World, cluster: &str, kubeconfig: &std::path::Path) -> std::process::Child {
    let kc = kubeconfig.to_str().unwrap();
    let child = w
        .command(&["sim", "--cluster", cluster, "--kubeconfig", kc, "--boot-delay", "1s", "--network", "preinstalled"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Control-plane rolls read etcd through a pod's log (see support::approver).
    support::approver(kubeconfig);
    child
}

#[test]
fn a_newer_image_rolls_canary_first_then_the_rest() {
    let w = World::new("amiroll", 3);
    // Both groups select this account's own images.
    select_own_images(&w);
    let old = register_image(&w, "pinfleet-node-2026.10.1");
    w.ok(&["bootstrap", "amiroll", "--yes"]);
    assert!(w.instances().iter().all(|i| i["image"] == old.as_str()));
    let kubeconfig = w.dir.path().join("sim.yaml");
    let mut sim = sim(&w, "amiroll", &kubeconfig);
    let kc = kubeconfig.to_str().unwrap();

    // Nothing newer: nothing to do.
    std::thread::sleep(Duration::from_millis(1500));
    let out = w.run(&["ami", "rollout", "amiroll", "--yes", "--kubeconfig", kc]);
    assert!(out.status.success() && stderr(&out).contains("nothing to do"), "{}", stderr(&out));

    std::thread::sleep(Duration::from_millis(1100));
    let new = register_image(&w, "pinfleet-node-2026.11.1");
    let resolved = w.json(&["ami", "resolve", "amiroll"]);
    for g in resolved.as_array().unwrap() {
        assert_eq!(g["resolved"], new.as_str(), "{resolved}");
        assert_eq!(g["current"], old.as_str());
        assert_eq!(g["newer"], true);
    }
    // Outside the window: exit 0, nothing done.
    let later = (chrono::Utc::now().weekday().succ().succ()).to_string();
    let window = format!("{later} 00:00-00:01 UTC");
    let out = w.run(&["ami", "rollout", "amiroll", "--yes", "--window", &window, "--kubeconfig", kc]);
    assert!(out.status.success() && stderr(&out).contains("outside the maintenance window"), "{}", stderr(&out));
    assert!(w.instances().iter().all(|i| i["image"] == old.as_str()));

    let out = w.run(&[
        "ami",
        "rollout",
        "amiroll",
        "--yes",
        "--soak",
        "2s",
        "--kubeconfig",
        kc,
        "--validate-interval",
        "200ms",
        "-o",
        "json",
    ]);
    let _ = sim.kill();
    let _ = sim.wait();
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let pos = |ev: &str, g: &str| {
        events
            .iter()
            .position(|e| e["event"] == ev && e["group"] == g)
            .unwrap_or_else(|| panic!("no {ev} for {g}: {events:?}"))
    };
    assert!(pos("finished", "general") < pos("started", "control-plane"), "the canary group rolls first: {events:?}");
    assert!(stderr(&out).contains("soaking for 2s"), "{}", stderr(&out));
    let instances = w.instances();
    assert_eq!(instances.len(), 4);
    assert!(instances.iter().all(|i| i["image"] == new.as_str()), "{instances:?}");

    let history = w.json(&["ami", "history", "amiroll"]);
    let h = history.as_array().unwrap();
    assert_eq!(h.len(), 1, "{history}");
    assert_eq!(h[0]["status"], "done");
    assert_eq!(h[0]["canaryGroup"], "general");
}

/// Two scheduled jobs started at the same moment: each writes its own
/// record (numbered by a conditional create, not a listing), one rolls, the
/// other is refused by the cluster lock and says so in its record.
#[test]
fn two_rollout_jobs_started_at_once_write_distinct_records() {
    let w = World::new("amitwo", 1);
    select_own_images(&w);
    register_image(&w, "pinfleet-node-2026.10.1");
    w.ok(&["bootstrap", "amitwo", "--yes"]);
    let kubeconfig = w.dir.path().join("sim.yaml");
    let mut sim = sim(&w, "amitwo", &kubeconfig);
    std::thread::sleep(Duration::from_millis(1500));
    let new = register_image(&w, "pinfleet-node-2026.11.1");
    let kc = kubeconfig.to_str().unwrap();
    let args =
        ["ami", "rollout", "amitwo", "--yes", "--soak", "1s", "--kubeconfig", kc, "--validate-interval", "200ms"];
    let jobs: Vec<std::process::Child> =
        (0..2).map(|_| w.command(&args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap()).collect();
    let outcomes: Vec<std::process::Output> = jobs.into_iter().map(|j| j.wait_with_output().unwrap()).collect();
    let _ = sim.kill();
    let _ = sim.wait();
    let ok = outcomes.iter().filter(|o| o.status.success()).count();
    assert_eq!(ok, 1, "one job rolls, the other is refused: {:?}", outcomes.iter().map(stderr).collect::<Vec<_>>());
    let history = w.json(&["ami", "history", "amitwo"]);
    let h = history.as_array().unwrap();
    let numbers: Vec<u64> = h.iter().map(|r| r["number"].as_u64().unwrap()).collect();
    assert_eq!(numbers, vec![1, 2], "{history:#}");
    let statuses: Vec<&str> = h.iter().map(|r| r["status"].as_str().unwrap()).collect();
    assert!(statuses.contains(&"done"), "{statuses:?}");
    assert!(statuses.iter().any(|s| s.starts_with("halted:") && s.contains("locked")), "{statuses:?}");
    assert!(w.instances().iter().all(|i| i["image"] == new.as_str()));
}
