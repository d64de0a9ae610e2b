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
use support::{stderr, stdout, World};

/// Copies one of moto's x86_64 images under `name` into the world's account.
fn register_image(w: &World, name: &str) -> String {
    tokio::runtime::Runtime::new().unwrap().block_on(async move {
        let aws = w.aws().await;
        let base = support::canonical_image(&aws).await;
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

fn sim(w: &World, cluster: &str, kubeconfig: &std::path::Path) -> std::process::Child {
    w.node_sim(cluster, kubeconfig)
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

/// A fleet rollout of a new image across a dev and a staging cluster (two
/// node simulators on moto): a second writer refused with the holder's
/// name; kill -9 in the middle of dev's roll, and the next run rolls it
/// again from where it stopped; kill -9 during dev's soak, and the next
/// run goes on without rolling dev again, staging after dev's soak and
/// gate; then revert puts the old image back.
#[test]
fn a_fleet_rollout_resumes_after_kill_9_stages_dev_before_staging_and_reverts() {
    use std::io::BufRead;
    let w = World::new("fdev", 1);
    select_own_images(&w);
    let staging =
        w.cluster_yaml(1, "t3.large").replace("name: fdev", "name: fstage").replace("env: dev", "env: staging");
    std::fs::write(w.clusters_dir().join("fstage.yaml"), staging).unwrap();
    std::fs::write(
        w.clusters_dir().join("fleet.yaml"),
        "stages:\n  - {name: dev, selector: env=dev, soak: 5s}\n  - {name: staging, selector: env=staging, soak: 0s}\n",
    )
    .unwrap();
    let old = register_image(&w, "pinfleet-node-2026.10.1");
    w.ok(&["bootstrap", "fdev", "--yes"]);
    w.ok(&["bootstrap", "fstage", "--yes"]);
    let kc = w.dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&kc).unwrap();
    /// Killed (and reaped) on drop, also when an assertion fails.
    struct Sims(Vec<std::process::Child>);
    impl Drop for Sims {
        fn drop(&mut self) {
            for s in &mut self.0 {
                let _ = s.kill();
                let _ = s.wait();
            }
        }
    }
    let _sims = Sims(["fdev", "fstage"].iter().map(|c| sim(&w, c, &kc.join(format!("{c}.yaml")))).collect());
    std::thread::sleep(Duration::from_millis(1500));
    let new = register_image(&w, "pinfleet-node-2026.11.1");
    let images = |c: &str| -> Vec<String> {
        w.json(&["get", "instances", c])
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] == "running" || i["state"] == "pending")
            .map(|i| i["image"].as_str().unwrap().to_string())
            .collect()
    };

    let plan = w.ok(&["fleet", "rollout", "plan", "--ami", "newest"]);
    assert!(plan.contains("fdev") && plan.contains("fstage") && plan.contains(&new) && plan.contains(&old), "{plan}");
    // An id is checked in each cluster's region before anything is written.
    let missing = w.run(&["fleet", "rollout", "apply", "--ami", "ami-0123456789abcdef0", "--yes"]);
    assert!(
        stderr(&missing).contains("image ami-0123456789abcdef0 does not exist in us-east-1"),
        "{}",
        stderr(&missing)
    );

    let kcd = kc.to_str().unwrap();
    let args = [
        "fleet",
        "rollout",
        "apply",
        "--ami",
        "newest",
        "--yes",
        "-o",
        "json",
        "--kubeconfig-dir",
        kcd,
        "--validate-interval",
        "200ms",
    ];
    // Runs apply until `stop` says so of a note, then kill -9; the notes it printed.
    let run_until_killed = |stop: &dyn Fn(&serde_json::Value) -> bool, during: &dyn Fn()| {
        let mut child = w.command(&args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
        let reader = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut notes = Vec::new();
        for line in reader.lines() {
            // One JSON object per line, each with its type.
            let line = line.unwrap();
            let n: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let kind = n["type"].as_str().unwrap_or_else(|| panic!("no type: {line}")).to_string();
            assert!(["plan", "note", "cluster", "outcome"].contains(&kind.as_str()), "{line}");
            if kind != "note" {
                continue;
            }
            notes.push(n.clone());
            if stop(&n) {
                break;
            }
        }
        during();
        child.kill().unwrap();
        child.wait().unwrap();
        notes
    };
    // The first run is killed in the middle of dev's roll; a second writer is refused meanwhile.
    run_until_killed(&|n| n["event"] == "started" && n["cluster"] == "fdev", &|| {
        let second = w.run(&args);
        assert!(!second.status.success());
        let err = stderr(&second);
        assert!(err.contains("the fleet is locked by") && err.contains("fleet rollout apply"), "{err}");
        // Refused before it says anything else.
        assert!(!err.contains("picking up") && stdout(&second).is_empty(), "{err}");
        std::thread::sleep(Duration::from_millis(1500));
    });
    // The second picks up: dev rolled again (its roll resumes), killed during dev's soak.
    let notes = run_until_killed(&|n| n["event"] == "soaking" && n["stage"] == "dev", &|| {});
    assert_eq!(notes[0]["event"], "resumed", "{notes:?}");
    assert_eq!(notes[0]["clusters"], serde_json::json!(["fdev"]));
    assert!(notes.iter().any(|n| n["event"] == "started" && n["attempt"] == 2), "{notes:?}");
    assert!(notes.iter().any(|n| n["event"] == "done" && n["cluster"] == "fdev"), "{notes:?}");
    assert!(images("fdev").iter().all(|i| *i == new));
    assert_eq!(images("fdev").len(), 2, "one control-plane machine and one node, no surplus left");

    // Status says why staging is not moving, including another run holding its lock (from another host).
    let bucket = w.bucket();
    let lock = |put: bool| {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let aws = w.aws().await;
            let store = pinfleet::state::Store::open(&format!("s3://{bucket}/clusters"), "fstage", Some(&aws)).await.unwrap();
            if put {
                let info = serde_json::json!({"id": "x", "holder": "ops", "host": "elsewhere", "pid": 7, "command": "pinfleet upgrade fstage --yes",
                    "acquired_at": "2026-11-23T00:00:00Z", "expires_at": "2099-01-01T00:00:00Z"});
                store.put_json(pinfleet::state::lock::LOCK_KEY, &info).await.unwrap();
            } else {
                store.delete(pinfleet::state::lock::LOCK_KEY).await.unwrap();
            }
        })
    };
    lock(true);
    let status = w.ok(&["fleet", "rollout", "status"]);
    assert!(
        status.contains("stage gate: dev soaking until")
            && status.contains("lock is held by ops on elsewhere (pid 7, `pinfleet upgrade fstage --yes`)"),
        "{status}"
    );
    // The killed run's fleet lock: its process is gone, and status says what happens next.
    assert!(status.contains("that process is gone from this host; the next apply takes the lock over"), "{status}");
    console_shows_the_rollout(&w, &kc.join("fdev.yaml"));
    lock(false);

    // Meanwhile staging's own scheduled AMI job leaves it to the fleet.
    let own = w.run(&["ami", "rollout", "fstage", "--yes", "--kubeconfig", kc.join("fstage.yaml").to_str().unwrap()]);
    assert!(own.status.success(), "{}", stderr(&own));
    assert!(
        stderr(&own).contains("cluster fstage is in fleet rollout #1 (AMI newest), stage staging, pending"),
        "{}",
        stderr(&own)
    );
    assert!(images("fstage").iter().all(|i| *i == old));

    // The next run takes the dead run's locks over and finishes the job.
    let out = w.run(&args);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}\n{}", support::stdout(&out));
    assert!(err.contains("the fleet was locked by pid") && err.contains("picking up fleet rollout #1"), "{err}");
    let notes: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let at = |f: &dyn Fn(&serde_json::Value) -> bool| notes.iter().position(f).unwrap_or_else(|| panic!("{notes:?}"));
    assert!(
        !notes.iter().any(|n| n["event"] == "started" && n["cluster"] == "fdev"),
        "dev is not rolled again: {notes:?}"
    );
    let dev_passed = at(&|n| n["event"] == "passed" && n["stage"] == "dev");
    let staging_started = at(&|n| n["event"] == "started" && n["cluster"] == "fstage");
    assert!(dev_passed < staging_started, "staging waits for dev's gate: {notes:?}");
    assert!(images("fdev").iter().all(|i| *i == new) && images("fstage").iter().all(|i| *i == new));
    let status = w.json(&["fleet", "rollout", "status"]);
    assert_eq!(status["state"], "done", "{status}");
    assert!(status["stages"][0]["clusters"][0]["from"].as_str().unwrap().starts_with(&old), "{status}");

    // Revert: both back on the image they ran.
    let out = w.run(&["fleet", "rollout", "revert", "--yes", "--kubeconfig-dir", kcd, "--validate-interval", "200ms"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(images("fdev").iter().all(|i| *i == old) && images("fstage").iter().all(|i| *i == old));
    assert_eq!(w.json(&["fleet", "rollout", "status"])["state"], "reverted");
}

/// The console's fleet page reads the same rollout from the fleet's state
/// store (`gateway serve --fleet-rollouts`): each stage, each cluster and
/// why it waits, here the lock another run holds on staging.
fn console_shows_the_rollout(w: &World, fdev_kubeconfig: &std::path::Path) {
    let url_file = w.dir.path().join("gateway-url");
    let mut gw = w
        .command(&[
            "gateway",
            "serve",
            "--fleet-rollouts",
            "--target",
            "aws",
            "--listen",
            "127.0.0.1:0",
            "--url-file",
            url_file.to_str().unwrap(),
            "--anonymous-as",
            "ops:platform",
            "--member-refresh",
            "1s",
            "--member",
            &format!("fdev={}", fdev_kubeconfig.display()),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ended = |gw: &mut std::process::Child| {
        // SIGTERM: the gateway stops its embedded host sim and its streams.
        unsafe { libc::kill(gw.id() as i32, libc::SIGTERM) };
        gw.wait().unwrap();
    };
    let mut url = None;
    for _ in 0..300 {
        if let Ok(u) = std::fs::read_to_string(&url_file) {
            url = Some(u);
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(url) = url else {
        ended(&mut gw);
        let mut err = String::new();
        std::io::Read::read_to_string(gw.stderr.as_mut().unwrap(), &mut err).unwrap();
        panic!("the gateway did not start: {err}");
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = pinfleet::gateway::client::Client::new(&url, &Default::default()).unwrap();
    let mut view = serde_json::Value::Null;
    for _ in 0..100 {
        view = rt.block_on(client.call("GET", "/v1/views/fleet", None)).unwrap().body;
        if !view["rollout"].is_null() {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A cluster of the fleet: its applied revisions, read from its state store.
    let mut cluster = serde_json::Value::Null;
    for _ in 0..100 {
        cluster = rt.block_on(client.call("GET", "/v1/views/clusters/fdev", None)).unwrap().body;
        if cluster["machines"].as_array().is_some_and(|m| !m.is_empty()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let page = rt.block_on(async {
        let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http::<http_body_util::Full<bytes::Bytes>>();
        let res = http.get(format!("{url}/").parse().unwrap()).await.unwrap();
        let body = http_body_util::BodyExt::collect(res.into_body()).await.unwrap().to_bytes();
        String::from_utf8_lossy(&body).into_owned()
    });
    ended(&mut gw);
    let r = &view["rollout"];
    assert_eq!(r["number"], 1, "{view}");
    let staging = r["stages"].as_array().unwrap().iter().find(|s| s["name"] == "staging").expect("a staging stage");
    let why = staging["clusters"][0]["why"].as_str().unwrap();
    assert!(why.contains("lock is held by ops on elsewhere"), "the console says why staging waits: {why}");
    assert!(
        page.contains("Fleet rollout #1") && page.contains("lock is held by ops on elsewhere"),
        "the page shows it: {page}"
    );
    let revisions = cluster["revisions"].as_array().unwrap_or_else(|| panic!("fdev's revisions: {cluster}"));
    assert!(!revisions.is_empty() && revisions[0]["revision"] == 1, "fdev's history starts at revision 1: {cluster}");
    assert!(revisions[0]["command"].as_str().unwrap().contains("fdev"), "{cluster}");
    // Its etcd backups, read from the same store: the sim runs no etcd, so none.
    let backup = &cluster["etcdBackup"];
    assert_eq!(backup["count"], 0, "fdev's etcd backups were read: {cluster}");
    assert!(backup["note"].is_null() && backup["intervalSeconds"] == 900, "{backup}");
    // Each machine with the image and launch-template version EC2 has for it.
    let machines = cluster["machines"].as_array().unwrap_or_else(|| panic!("fdev's machines: {cluster}"));
    assert!(!machines.is_empty(), "{cluster}");
    for m in machines {
        assert!(m["image"].as_str().unwrap().starts_with("ami-"), "the machine's AMI: {m}");
        assert!(m["launchTemplateVersion"].as_str().is_some(), "the machine's template version: {m}");
    }
}

/// `diff` on AWS: in sync after bootstrap; a launch template edited in EC2
/// is AWS drift (and leaves the machines on an old version); an image newer
/// than the machines is drift of both, each with the command that fixes it.
#[test]
fn diff_sees_a_launch_template_edited_in_ec2_and_an_image_newer_than_the_machines() {
    let w = World::new("drift", 1);
    select_own_images(&w);
    let old = register_image(&w, "pinfleet-node-2026.10.1");
    w.ok(&["bootstrap", "drift", "--yes"]);
    let kubeconfig = w.dir.path().join("sim.yaml");
    let _sim = Stopped(sim(&w, "drift", &kubeconfig));
    let kc = kubeconfig.to_str().unwrap();
    let diff = |w: &World| {
        let out = w.run(&["diff", "drift", "--kubeconfig", kc, "--layer", "aws,machines", "-o", "json"]);
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        (out.status.code(), v[0]["layers"].clone())
    };
    let (code, layers) = diff(&w);
    assert_eq!(code, Some(0), "{layers:#}");
    assert_eq!(
        (layers["aws"]["state"].as_str(), layers["machines"]["state"].as_str()),
        (Some("inSync"), Some("inSync"))
    );

    // Someone gives the node group's launch template a new version by hand.
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use aws_sdk_ec2::types::{Filter, InstanceType, RequestLaunchTemplateData};
        let aws = w.aws().await;
        let lts = aws
            .ec2
            .describe_launch_templates()
            .filters(Filter::builder().name("tag:pinfleet.dev/cluster").values("drift").build())
            .send()
            .await
            .unwrap();
        let lt = lts
            .launch_templates()
            .iter()
            .find(|t| t.launch_template_name().unwrap_or_default().contains("general"))
            .expect("the general group's launch template");
        aws.ec2
            .create_launch_template_version()
            .launch_template_id(lt.launch_template_id().unwrap())
            .source_version("$Latest")
            .launch_template_data(RequestLaunchTemplateData::builder().instance_type(InstanceType::T3Xlarge).build())
            .send()
            .await
            .unwrap();
    });
    let (code, layers) = diff(&w);
    assert_eq!(code, Some(2), "{layers:#}");
    let aws = &layers["aws"]["findings"];
    assert!(
        aws.as_array().unwrap().iter().any(|f| f["subject"].as_str().unwrap().contains("general")
            && f["detail"].as_str().unwrap().contains("instanceType t3.xlarge → t3.large")
            && f["fix"] == "pinfleet apply drift"),
        "{aws:#}"
    );
    let machines = &layers["machines"]["findings"][0];
    assert_eq!(machines["subject"], "group/general", "{layers:#}");
    assert!(
        machines["what"].as_str().unwrap().contains("not on the launch template's current version v2"),
        "{machines}"
    );
    assert_eq!(machines["fix"], "pinfleet upgrade drift --instance-group general --yes");

    // The template put right (the machines still on their old version),
    // then a newer image for the selector: the machines run the old one.
    w.ok(&["apply", "drift", "--yes"]);
    std::thread::sleep(Duration::from_millis(1100));
    let new = register_image(&w, "pinfleet-node-2026.11.1");
    let (code, layers) = diff(&w);
    assert_eq!(code, Some(2), "{layers:#}");
    let text: Vec<String> = layers["machines"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["what"].as_str().unwrap().to_string())
        .collect();
    assert!(
        text.iter().any(|t| t.contains("another image than the selector resolves to now")
            && t.contains(&new)
            && t.contains(&old)),
        "{text:#?}"
    );
}

/// A child process stopped when the test ends, passed or failed.
struct Stopped(std::process::Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
