//! The image pipeline on moto, through the real `pinfleet` binary: a bake
//! killed while its builder works and then stopped mid-copy resumes
//! without a second builder or image; promotion and rollback move every
//! `channel:` group; GC keeps an image a launch template still names and
//! removes the rest with their snapshots; bad input stops before a write.
//!
//! moto boots nothing: no machine runs the builder's user-data, so a
//! thread here plays the builder's last step — it tags the builder with
//! the report the script would write (`pinfleet:bake-status`,
//! `pinfleet:bake-report`). Every other step is pinfleet's, through the
//! SDK. moto's snapshots are never encrypted, so the recipes here say
//! `encrypted: false`; a recipe that wants encryption is refused by the
//! static check (tested below).

mod support;

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use support::{stderr, stdout, World};

const REPORT: &str = "kernel=6.8.0-1015-aws;osImage=Ubuntu 24.04.1 LTS;kubelet=v1.36.2;containerd=2.1.4;cgroup=v2;machineId=0;sshHostKeys=0;freeGiB=11;failedUnits=";

fn recipe(packages: &str, encrypted: bool) -> String {
    format!(
        r#"# The node image.
base:
  owners: ["099720109477"]
  name: "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*"
kubernetesVersion: "1.36.2"
components:
  containerd: "2.1.4"
packages: [{packages}]
script: |
  echo baked > /etc/motd
regions: [us-east-1, eu-west-1]
encrypted: {encrypted}
builder:
  instanceType: t3.large
"#
    )
}

fn images_dir(w: &World) -> std::path::PathBuf {
    let d = w.dir.path().join("images");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cmd(w: &World, args: &[&str]) -> std::process::Command {
    let mut c = w.command(args);
    c.env("PINFLEET_IMAGES_DIR", images_dir(w));
    c
}

fn run(w: &World, args: &[&str]) -> std::process::Output {
    cmd(w, args).output().unwrap()
}

fn ok(w: &World, args: &[&str]) -> String {
    let o = run(w, args);
    assert!(o.status.success(), "pinfleet {args:?} failed:\n{}\n{}", stdout(&o), stderr(&o));
    stdout(&o)
}

async fn client(w: &World, region: &str) -> pinfleet::cloud::aws::Aws {
    let _ = w.aws().await; // sets this process's AWS environment to moto
    pinfleet::cloud::aws::Aws::connect(&pinfleet::cloud::aws::AwsOptions {
        region: Some(region.into()),
        moto_account: Some(w.account.clone()),
        ..Default::default()
    })
    .await
    .unwrap()
}

fn filter(name: &str, value: &str) -> aws_sdk_ec2::types::Filter {
    aws_sdk_ec2::types::Filter::builder().name(name).values(value).build()
}

/// Builders (any state) and this account's images named like the recipe's.
async fn census(w: &World) -> (Vec<(String, String)>, usize, usize, usize) {
    let home = client(w, "us-east-1").await;
    let eu = client(w, "eu-west-1").await;
    let out = home.ec2.describe_instances().filters(filter("tag:pinfleet:role", "builder")).send().await.unwrap();
    let builders: Vec<(String, String)> = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| (i.instance_id().unwrap().to_string(), i.state().unwrap().name().unwrap().as_str().to_string()))
        .collect();
    let count = |aws: pinfleet::cloud::aws::Aws| async move {
        aws.ec2
            .describe_images()
            .owners("self")
            .filters(filter("name", "pinfleet/node/*"))
            .send()
            .await
            .unwrap()
            .images()
            .len()
    };
    let sgs = home
        .ec2
        .describe_security_groups()
        .filters(filter("group-name", "pinfleet-bake-*"))
        .send()
        .await
        .unwrap()
        .security_groups()
        .len();
    (builders, count(home).await, count(eu).await, sgs)
}

/// Plays the builder's last step: once `go`, tags every running builder
/// that has not reported with `report`.
fn builder_stand_in(
    w: &World,
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    report: &'static str,
) -> std::thread::JoinHandle<()> {
    builder_reporting(w, go, stop, Arc::new(std::sync::Mutex::new(report.to_string())))
}

/// [`builder_stand_in`] with a report the test may change between bakes.
fn builder_reporting(
    w: &World,
    go: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    report: Arc<std::sync::Mutex<String>>,
) -> std::thread::JoinHandle<()> {
    let (endpoint, account) = (w.endpoint.clone(), w.account.clone());
    rt().block_on(w.aws()); // this process's AWS environment, pointed at moto
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            std::env::set_var("AWS_ENDPOINT_URL", &endpoint);
            let aws = pinfleet::cloud::aws::Aws::connect(&pinfleet::cloud::aws::AwsOptions {
                region: Some("us-east-1".into()),
                moto_account: Some(account),
                ..Default::default()
            })
            .await
            .unwrap();
            while !stop.load(Ordering::SeqCst) {
                if go.load(Ordering::SeqCst) {
                    let out = aws
                        .ec2
                        .describe_instances()
                        .filters(filter("tag:pinfleet:role", "builder"))
                        .filters(filter("instance-state-name", "running"))
                        .send()
                        .await
                        .unwrap();
                    for i in out.reservations().iter().flat_map(|r| r.instances()) {
                        if i.tags().iter().any(|t| t.key() == Some("pinfleet:bake-status")) {
                            continue;
                        }
                        aws.ec2
                            .create_tags()
                            .resources(i.instance_id().unwrap())
                            .tags(aws_sdk_ec2::types::Tag::builder().key("pinfleet:bake-status").value("done").build())
                            .tags(
                                aws_sdk_ec2::types::Tag::builder()
                                    .key("pinfleet:bake-report")
                                    .value(report.lock().unwrap().clone())
                                    .build(),
                            )
                            .send()
                            .await
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    })
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

#[test]
fn a_bake_killed_then_stopped_mid_copy_resumes_without_a_second_builder_or_image() {
    let w = World::new("bake", 1);
    std::fs::write(images_dir(&w).join("node.yaml"), recipe("conntrack", false)).unwrap();
    let (go, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let stand_in = builder_stand_in(&w, go.clone(), stop.clone(), REPORT);

    // 1. Killed (SIGKILL) while the builder works: the builder is left.
    let mut child = cmd(&w, &["ami", "bake", "node", "--poll", "200ms"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let rtm = rt();
    let mut launched = false;
    for _ in 0..200 {
        if !rtm.block_on(census(&w)).0.is_empty() {
            launched = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(launched, "the bake launched no builder");
    child.kill().unwrap();
    child.wait().unwrap();
    let (builders, ..) = rtm.block_on(census(&w));
    assert_eq!(builders.len(), 1, "{builders:?}");
    let first = builders[0].0.clone();

    // 2. Resumed with the same builder; then EC2 refuses the copy to eu-west-1.
    go.store(true, Ordering::SeqCst);
    let o = cmd(&w, &["ami", "bake", "node", "--poll", "200ms"])
        .env("PINFLEET_FAULTS", "copy-limit=eu-west-1")
        .output()
        .unwrap();
    assert!(!o.status.success(), "{}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("ResourceLimitExceeded") && err.contains("run the bake again"), "{err}");
    assert!(!err.contains("launched the builder"), "a second builder was launched:\n{err}");
    let (builders, home, eu, sgs) = rtm.block_on(census(&w));
    assert_eq!(builders, vec![(first.clone(), "terminated".to_string())], "the builder goes however the bake ends");
    assert_eq!((home, eu, sgs), (1, 0, 0), "one image at home, no copy, no security group left");

    // 3. Run again: only the copy is made.
    let o = cmd(&w, &["ami", "bake", "node", "--poll", "200ms"]).output().unwrap();
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("steps this run: copy"), "{out}");
    assert!(out.contains("eu-west-1") && out.contains("no machine identity"), "{out}");
    let (builders, home, eu, _) = rtm.block_on(census(&w));
    assert_eq!((builders.len(), home, eu), (1, 1, 1));

    // Every image and snapshot of the build carries its tags, copies too.
    let tagged = |region: &'static str| {
        let w = &w;
        async move {
            let aws = client(w, region).await;
            let out = aws.ec2.describe_images().owners("self").filters(filter("name", "pinfleet/node/*")).send().await;
            let img = out.unwrap().images()[0].clone();
            let snaps: Vec<String> = img
                .block_device_mappings()
                .iter()
                .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()).map(str::to_string))
                .collect();
            let has = |t: &[aws_sdk_ec2::types::Tag]| t.iter().any(|t| t.key() == Some("pinfleet:build-id"));
            let out = aws.ec2.describe_snapshots().set_snapshot_ids(Some(snaps.clone())).send().await.unwrap();
            let snaps_tagged = !snaps.is_empty() && out.snapshots().iter().all(|s| has(s.tags()));
            (img.image_id().unwrap().to_string(), snaps, has(img.tags()), snaps_tagged)
        }
    };
    for region in ["us-east-1", "eu-west-1"] {
        let (id, _, image, snaps) = rtm.block_on(tagged(region));
        assert!(image && snaps, "{region}: {id} and its snapshots carry the build's tags");
    }

    // A run killed between CopyImage and its tags (issue 47): the copy is
    // found by its name with no tag at all. A run again tags it, image and
    // snapshots, so that promote and gc find it.
    let (copy, snaps, ..) = rtm.block_on(tagged("eu-west-1"));
    rtm.block_on(async {
        let eu = client(&w, "eu-west-1").await;
        let mut resources = snaps.clone();
        resources.push(copy.clone());
        // Every tag the image and its snapshots carry, by key.
        let img = eu.ec2.describe_images().image_ids(&copy).send().await.unwrap();
        let snap = eu.ec2.describe_snapshots().set_snapshot_ids(Some(snaps.clone())).send().await.unwrap();
        let mut keys: Vec<String> = img.images()[0].tags().iter().filter_map(|t| t.key().map(str::to_string)).collect();
        keys.extend(snap.snapshots().iter().flat_map(|s| s.tags()).filter_map(|t| t.key().map(str::to_string)));
        keys.sort();
        keys.dedup();
        let tags: Vec<aws_sdk_ec2::types::Tag> =
            keys.iter().map(|k| aws_sdk_ec2::types::Tag::builder().key(k).build()).collect();
        eu.ec2.delete_tags().set_resources(Some(resources)).set_tags(Some(tags)).send().await.unwrap();
    });
    assert_eq!(rtm.block_on(tagged("eu-west-1")).2, false);

    // 4. And again: found complete, the copy's tags mended.
    let o = run(&w, &["ami", "bake", "node"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("found complete, nothing to do"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!("eu-west-1: tagged {copy}, which a run had left without its tags")),
        "{}",
        stderr(&o)
    );
    let (_, _, image, snaps) = rtm.block_on(tagged("eu-west-1"));
    assert!(image && snaps, "the untagged copy was tagged again");
    let o = run(&w, &["ami", "bake", "node"]);
    let err = stderr(&o);
    assert!(
        !err.contains("left without its tags") && !err.contains("tagged the snapshot"),
        "nothing left to tag: {err}"
    );
    stop.store(true, Ordering::SeqCst);
    stand_in.join().unwrap();
}

/// An accelerated recipe on moto: a builder whose report lacks the NVIDIA
/// stack (the driver the recipe pins, containerd's nvidia runtime) fails
/// the bake before an image is made; one reporting it bakes an image
/// tagged with the stack, and the checks say what they saw.
#[test]
fn an_accelerated_recipe_is_judged_by_its_stack_and_its_image_records_it() {
    let w = World::new("gpubake", 1);
    let gpu = recipe("conntrack", false).replace("regions: [us-east-1, eu-west-1]", "regions: [us-east-1]")
        + "accelerator:\n  kind: nvidia\n  driverVersion: \"570.172.08\"\n  runtimeVersion: \"1.17.8\"\n";
    std::fs::write(images_dir(&w).join("gpu-node.yaml"), gpu).unwrap();
    let report =
        Arc::new(std::sync::Mutex::new(REPORT.replace(
            "failedUnits=",
            "nvidiaDriver=550.90.07;nvidiaToolkit=1.17.8;containerdRuntime=runc:;failedUnits=",
        )));
    let (go, stop) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let stand_in = builder_reporting(&w, go, stop.clone(), report.clone());
    let o = run(&w, &["ami", "bake", "gpu-node", "--poll", "200ms", "--report-timeout", "30s"]);
    // The progress and the checks are on stderr.
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("FAIL NVIDIA driver version: 550.90.07, the recipe names 570.172.08"), "{err}");
    assert!(err.contains("FAIL containerd runs the nvidia runtime: default runtime `runc`"), "{err}");
    assert!(err.contains("FAIL the runtime ignores a container's NVIDIA_VISIBLE_DEVICES: not reported"), "{err}");
    assert!(err.contains("no image was made"), "{err}");
    assert_eq!(rt().block_on(census(&w)).1, 0, "no image of a builder that failed its checks");
    *report.lock().unwrap() = REPORT.replace(
        "failedUnits=",
        "nvidiaDriver=570.172.08;nvidiaToolkit=1.17.8;containerdRuntime=nvidia:/usr/bin/nvidia-container-runtime;nvidiaEnvGuard=false:true;failedUnits=",
    );
    let o = run(&w, &["ami", "bake", "gpu-node", "--poll", "200ms", "--report-timeout", "30s"]);
    let out = stderr(&o);
    assert!(o.status.success(), "{out}");
    for check in [
        "ok   NVIDIA driver version: 570.172.08",
        "ok   nvidia-container-toolkit version: 1.17.8",
        "ok   containerd runs the nvidia runtime: default runtime nvidia (/usr/bin/nvidia-container-runtime)",
        "ok   the runtime ignores a container's NVIDIA_VISIBLE_DEVICES: envvar when unprivileged: false; volume mounts: true",
        "ok   accelerator recorded: nvidia 570.172.08/1.17.8",
    ] {
        assert!(out.contains(check), "{check}: {out}");
    }
    let tag = rt().block_on(async {
        let aws = client(&w, "us-east-1").await;
        let out = aws.ec2.describe_images().owners("self").filters(filter("name", "pinfleet/gpu-node/*")).send().await;
        let img = out.unwrap().images()[0].clone();
        img.tags().iter().find(|t| t.key() == Some("pinfleet:accelerator")).and_then(|t| t.value().map(str::to_string))
    });
    assert_eq!(tag.as_deref(), Some("nvidia 570.172.08/1.17.8"));
    stop.store(true, Ordering::SeqCst);
    stand_in.join().unwrap();
}

fn baked_id(json: &str) -> (String, String) {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    (v["images"]["us-east-1"].as_str().unwrap().to_string(), v["images"]["eu-west-1"].as_str().unwrap().to_string())
}

/// The cluster's groups follow `node`'s `candidate` channel.
fn follow_channel(w: &World) {
    let base = w.clusters_dir().join("bases/aws-standard.yaml");
    let text = std::fs::read_to_string(&base).unwrap().replace(
        "        selector:\n          owners: [\"099720109477\"]\n          name: \"ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*\"\n          architecture: x86_64\n",
        "        channel: candidate\n        recipe: node\n",
    );
    assert!(text.contains("channel: candidate"));
    std::fs::write(&base, text).unwrap();
}

fn resolved(w: &World) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(&ok(w, &["ami", "resolve", &w.cluster, "-o", "json"])).unwrap();
    v.as_array().unwrap().iter().map(|g| g["resolved"].as_str().unwrap().to_string()).collect()
}

#[test]
fn channels_move_groups_rollback_is_one_write_and_gc_goes_by_reference() {
    let w = World::new("chan", 1);
    std::fs::write(images_dir(&w).join("node.yaml"), recipe("conntrack", false)).unwrap();
    let (go, stop) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let stand_in = builder_stand_in(&w, go, stop.clone(), REPORT);
    let rtm = rt();

    // Bad input first: nothing is written by any of these.
    std::fs::write(images_dir(&w).join("typo.yaml"), recipe("conntrack", false).replace("packages:", "pakages:"))
        .unwrap();
    let o = run(&w, &["ami", "bake", "typo"]);
    assert!(
        !o.status.success() && stderr(&o).contains("typo.yaml:") && stderr(&o).contains("pakages"),
        "{}",
        stderr(&o)
    );
    std::fs::write(
        images_dir(&w).join("nobase.yaml"),
        recipe("conntrack", false).replace("ubuntu/images", "nothing-like-this"),
    )
    .unwrap();
    let o = run(&w, &["ami", "bake", "nobase"]);
    assert!(!o.status.success() && stderr(&o).contains("base: no available x86_64 image named"), "{}", stderr(&o));
    let o = run(&w, &["ami", "rollback", "node", "stable", "--yes"]);
    assert!(!o.status.success() && stderr(&o).contains("never been written"), "{}", stderr(&o));
    assert!(rtm.block_on(census(&w)).0.is_empty(), "no builder was launched by bad input");

    // A recipe that wants encryption is refused by the static check (moto's snapshots are plain).
    std::fs::write(images_dir(&w).join("sealed.yaml"), recipe("conntrack", true)).unwrap();
    let o = run(&w, &["ami", "bake", "sealed", "--poll", "200ms"]);
    assert!(
        !o.status.success() && stderr(&o).contains("failed its checks: failed: encrypted volumes"),
        "{}",
        stderr(&o)
    );
    let o = run(&w, &["ami", "promote", "sealed", "--from", "candidate", "--yes"]);
    assert!(!o.status.success(), "{}", stdout(&o));

    // Two bakes of `node`: the recipe changes, so the build does.
    let (a_home, a_eu) = baked_id(&ok(&w, &["ami", "bake", "node", "--poll", "200ms", "-o", "json"]));
    std::fs::write(images_dir(&w).join("node.yaml"), recipe("conntrack, socat", false)).unwrap();
    let (b_home, b_eu) = baked_id(&ok(&w, &["ami", "bake", "node", "--poll", "200ms", "-o", "json"]));
    assert_ne!(a_home, b_home);

    // Promote a to candidate: without --yes nothing is written.
    let out = ok(&w, &["ami", "promote", "node", "--image", &a_home, "--to", "candidate"]);
    assert!(out.contains("would write") && out.contains(&a_eu), "each region gets its own copy's id: {out}");
    let o = run(&w, &["ami", "rollback", "node", "candidate"]);
    assert!(stderr(&o).contains("never been written"), "{}", stderr(&o));
    ok(&w, &["ami", "promote", "node", "--image", &a_home, "--to", "candidate", "--reason", "first", "--yes"]);
    let o = run(&w, &["ami", "rollback", "node", "candidate", "--yes"]);
    assert!(!o.status.success() && stderr(&o).contains("no previous image"), "{}", stderr(&o));

    // The cluster's groups follow candidate.
    follow_channel(&w);
    assert!(resolved(&w).iter().all(|i| *i == a_home));
    let o = run(&w, &["ami", "promote", "node", "--image", &b_home, "--to", "candidate", "--yes"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The superseded image is deprecated a week on (moto has no such call, and it says so).
    let said = stderr(&o);
    assert!(
        said.contains(&format!("{a_home} in us-east-1: not deprecated, the endpoint refused EnableImageDeprecation")),
        "{said}"
    );
    assert!(resolved(&w).iter().all(|i| *i == b_home), "promotion moves every channel group");
    // candidate → stable, the recipe's next channel.
    let out = ok(&w, &["ami", "promote", "node", "--from", "candidate", "--yes"]);
    assert!(out.contains("/pinfleet/images/node/stable") && out.contains(&b_eu), "{out}");
    // Rollback: one write per region, and every group follows.
    let out = ok(&w, &["ami", "rollback", "node", "candidate", "--reason", "bad kernel", "--yes"]);
    assert!(out.contains("written") && out.contains(&a_home) && out.contains(&a_eu), "{out}");
    assert!(resolved(&w).iter().all(|i| *i == a_home), "rollback moves every channel group");
    let out = ok(&w, &["ami", "channels", "node"]);
    assert!(out.contains("rolled back by") && out.contains("bad kernel"), "{out}");
    let out = ok(&w, &["ami", "channels", "node", "--history", "candidate"]);
    let held = out.lines().filter(|l| l.split_whitespace().nth(1) == Some(a_home.as_str())).count();
    assert_eq!(held, 2, "a, b, then a again: {out}");

    // GC. A third bake, c, goes to stable (b leaves every channel); one
    // cluster's launch template still runs b in us-east-1, none in
    // eu-west-1; `sealed` failed its checks and was never promoted.
    std::fs::write(images_dir(&w).join("node.yaml"), recipe("conntrack, ebtables", false)).unwrap();
    let (c_home, c_eu) = baked_id(&ok(&w, &["ami", "bake", "node", "--poll", "200ms", "-o", "json"]));
    ok(&w, &["ami", "promote", "node", "--image", &c_home, "--to", "stable", "--yes"]);
    rtm.block_on(async {
        let aws = client(&w, "us-east-1").await;
        aws.ec2
            .create_launch_template()
            .launch_template_name("other-cluster-nodes")
            .launch_template_data(aws_sdk_ec2::types::RequestLaunchTemplateData::builder().image_id(&b_home).build())
            .send()
            .await
            .unwrap();
    });
    let out = ok(&w, &["ami", "gc", "--dry-run", "--retention", "0s", "--disable-after", "0s"]);
    assert!(out.starts_with("dry run"), "{out}");
    let line = |id: &str| out.lines().filter(|l| l.contains(id)).collect::<Vec<_>>().join("\n");
    assert!(line(&b_home).contains("launch template -/other-cluster-nodes v1 names it"), "{out}");
    assert!(line(&a_home).contains("channel node/candidate holds it"), "{out}");
    assert!(line(&c_eu).contains("channel node/stable holds it"), "{out}");
    assert!(line(&b_eu).contains("deregister"), "{out}");
    let b_eu_snaps = rtm.block_on(async {
        let aws = client(&w, "eu-west-1").await;
        let imgs = aws.ec2.describe_images().image_ids(&b_eu).send().await.unwrap();
        imgs.images()[0]
            .block_device_mappings()
            .iter()
            .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()))
            .map(str::to_string)
            .collect::<Vec<_>>()
    });
    assert!(!b_eu_snaps.is_empty());
    // Without --yes, gc shows its plan and changes nothing (issue 47).
    let out = ok(&w, &["ami", "gc", "--retention", "0s", "--disable-after", "0s"]);
    assert!(out.starts_with("dry run: nothing changed (run with --yes"), "{out}");
    let still = rtm.block_on(async {
        let aws = client(&w, "eu-west-1").await;
        aws.ec2.describe_images().image_ids(&b_eu).send().await.unwrap().images().len()
    });
    assert_eq!(still, 1, "gc without --yes deregistered {b_eu}");
    let out = ok(&w, &["ami", "gc", "--retention", "0s", "--disable-after", "0s", "--yes"]);
    assert!(out.contains(&format!("eu-west-1 {b_eu}: deregistered; deleted")), "{out}");
    rtm.block_on(async {
        let names = |aws: pinfleet::cloud::aws::Aws| async move {
            aws.ec2
                .describe_images()
                .owners("self")
                .filters(filter("name", "pinfleet/*"))
                .send()
                .await
                .unwrap()
                .images()
                .iter()
                .map(|i| i.image_id().unwrap().to_string())
                .collect::<Vec<_>>()
        };
        let mut home = names(client(&w, "us-east-1").await).await;
        home.sort();
        let mut want = vec![a_home.clone(), b_home.clone(), c_home.clone()];
        want.sort();
        assert_eq!(home, want, "kept: candidate's, the launch template's, stable's; the failed bake's is gone");
        let mut eu = names(client(&w, "eu-west-1").await).await;
        eu.sort();
        let mut want = vec![a_eu.clone(), c_eu.clone()];
        want.sort();
        assert_eq!(eu, want);
        let aws = client(&w, "eu-west-1").await;
        let snaps = aws.ec2.describe_snapshots().owner_ids("self").send().await.unwrap();
        let ids: Vec<&str> = snaps.snapshots().iter().filter_map(|s| s.snapshot_id()).collect();
        assert!(b_eu_snaps.iter().all(|s| !ids.contains(&s.as_str())), "b's snapshots are deleted with it");
    });
    stop.store(true, Ordering::SeqCst);
    stand_in.join().unwrap();
}

#[test]
fn a_gate_stops_on_a_failed_unit_and_promotes_what_differs_only_where_allowed() {
    let w = World::new("gate", 1);
    let report = Arc::new(std::sync::Mutex::new(REPORT.to_string()));
    let (go, stop) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let stand_in = builder_reporting(&w, go, stop.clone(), report.clone());
    let write_recipe = |packages: &str| {
        let r = recipe(packages, false).replace("regions: [us-east-1, eu-west-1]", "regions: [us-east-1]");
        std::fs::write(images_dir(&w).join("node.yaml"), format!("{r}allowDifferences: [kernel]\n")).unwrap();
    };
    // a: the cluster's image, through candidate.
    write_recipe("conntrack");
    let bake = |w: &World| -> String {
        let v: serde_json::Value = serde_json::from_str(&ok(
            w,
            &["ami", "bake", "node", "--poll", "200ms", "--report-timeout", "30s", "-o", "json"],
        ))
        .unwrap();
        v["images"]["us-east-1"].as_str().unwrap().to_string()
    };
    let a = bake(&w);
    ok(&w, &["ami", "promote", "node", "--image", &a, "--to", "candidate", "--yes"]);
    follow_channel(&w);
    ok(&w, &["bootstrap", &w.cluster, "--yes"]);
    let kubeconfig = w.dir.path().join("sim.yaml");
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _sim = Kill(w.node_sim(&w.cluster, &kubeconfig));
    let kc = kubeconfig.to_str().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let gate = |w: &World| {
        run(
            w,
            &[
                "ami",
                "gate",
                "node",
                "--cluster",
                &w.cluster,
                "--canary-group",
                "general",
                "--soak",
                "1s",
                "--e2e-phases",
                "preflight,cluster",
                "--kubeconfig",
                kc,
                "--validate-interval",
                "200ms",
                "--yes",
            ],
        )
    };

    // b: a unit that fails on its nodes. The gate stops; candidate stays, stable is never written.
    *report.lock().unwrap() = REPORT.replace("failedUnits=", "failedUnits=fwupd-refresh.service");
    write_recipe("conntrack, socat");
    let b = bake(&w);
    ok(&w, &["ami", "promote", "node", "--image", &b, "--to", "candidate", "--yes"]);
    let o = gate(&w);
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("gate stopped") && out.contains("failedUnits") && out.contains("fwupd-refresh.service failed on"),
        "{out}"
    );
    assert!(stderr(&o).contains("rolling general back to"), "{}", stderr(&o));
    let o = run(&w, &["ami", "channels", "node", "--history", "stable"]);
    assert!(!o.status.success() && stderr(&o).contains("never been written"), "{}", stderr(&o));
    // The downgrade left the canary on the previous image.
    assert!(w.instances_in("general").iter().all(|i| i["image"] == a.as_str()), "{:?}", w.instances_in("general"));

    // c: only the kernel differs, which the recipe allows: promoted to stable.
    *report.lock().unwrap() = REPORT.replace("6.8.0-1015-aws", "6.8.0-1021-aws");
    write_recipe("conntrack, ebtables");
    let c = bake(&w);
    ok(&w, &["ami", "promote", "node", "--image", &c, "--to", "candidate", "--yes"]);
    let o = gate(&w);
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("gate passed") && stdout(&o).contains("/pinfleet/images/node/stable"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("kernel differs (allowed): 6.8.0-1015-aws → 6.8.0-1021-aws"), "{}", stderr(&o));
    let out = ok(&w, &["ami", "channels", "node"]);
    assert!(
        out.lines().any(|l| l.contains("stable") && l.contains(&c) && l.contains("gate passed on gate (general)")),
        "{out}"
    );
    // Both gates are recorded in the cluster's state store, each with its verdict and reason.
    rt().block_on(async {
        let aws = w.aws().await;
        let url = format!("s3://{}/clusters", w.bucket());
        let store = pinfleet::state::Store::open(&url, &w.cluster, Some(&aws)).await.unwrap();
        let get = |id: String| {
            let store = store.clone();
            async move {
                let key = pinfleet::imaging::gating::record_key("node", &id);
                let r: Option<pinfleet::imaging::gating::Record> = store.get_json(&key).await.unwrap();
                r.unwrap_or_else(|| panic!("no gate record at {key}"))
            }
        };
        let stopped = get(b.clone()).await;
        assert!(
            matches!(&stopped.outcome.verdict, pinfleet::ami::gate::Verdict::Stop { reason } if reason.contains("fwupd-refresh.service")),
            "{:?}",
            stopped.outcome.verdict
        );
        assert_eq!((stopped.outcome.previous.as_str(), stopped.outcome.group.as_str()), (a.as_str(), "general"));
        let passed = get(c.clone()).await;
        assert!(matches!(passed.outcome.verdict, pinfleet::ami::gate::Verdict::Promote { .. }));
    });

    // The channel reaches the fleet through a fleet rollout in waves: the
    // plan names the waves and what candidate holds; apply rolls the
    // groups that follow it and stops at the wave's soak.
    let bad = run(&w, &["fleet", "rollout", "plan", "--channel", "node/nowhere"]);
    assert!(
        !bad.status.success() && stderr(&bad).contains("no instance group of the fleet follows channel node/nowhere"),
        "{}",
        stderr(&bad)
    );
    let bad = run(&w, &["fleet", "rollout", "plan", "--channel", "node"]);
    assert!(!bad.status.success() && stderr(&bad).contains("RECIPE/CHANNEL"), "{}", stderr(&bad));
    let plan: serde_json::Value = serde_json::from_str(&ok(
        &w,
        &["fleet", "rollout", "plan", "--channel", "node/candidate", "--waves", "urgent", "-o", "json"],
    ))
    .unwrap();
    assert_eq!(plan["target"], serde_json::json!({"kind": "channel", "value": "node/candidate"}));
    assert_eq!(plan["stages"][0]["name"], "wave-1");
    assert_eq!(plan["stages"][0]["soak"], "1h");
    assert!(plan["stages"][0]["clusters"][0]["to"].as_str().unwrap().contains(&c), "{plan}");
    let kcd = w.dir.path().join("kubeconfigs");
    std::fs::create_dir_all(&kcd).unwrap();
    std::fs::copy(&kubeconfig, kcd.join(format!("{}.yaml", w.cluster))).unwrap();
    let o = run(
        &w,
        &[
            "fleet",
            "rollout",
            "apply",
            "--channel",
            "node/candidate",
            "--waves",
            "urgent",
            "--yes",
            "--no-wait",
            "--skip-e2e",
            "--kubeconfig-dir",
            kcd.to_str().unwrap(),
            "--validate-interval",
            "200ms",
        ],
    );
    assert!(o.status.success(), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("waits") || stderr(&o).contains("waits"), "{}\n{}", stdout(&o), stderr(&o));
    assert!(w.instances_in("general").iter().all(|i| i["image"] == c.as_str()), "{:?}", w.instances_in("general"));
    let status = ok(&w, &["fleet", "rollout", "status"]);
    assert!(status.contains("image channel node/candidate") && status.contains("wave-1"), "{status}");
    stop.store(true, Ordering::SeqCst);
    stand_in.join().unwrap();
}
