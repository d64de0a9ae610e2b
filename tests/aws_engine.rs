//! The AWS engine against moto, through the real `pinfleet` binary:
//! bootstrap, idempotent re-plan, scaling, instance-type changes, removing
//! a group, destroy, the cluster lock, kill -9 in the middle of an apply,
//! bad credentials, an unreachable endpoint, and injected throttling/5xx.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::{stderr, stdout, World};

/// Resources still tagged for the cluster, found with tag-filtered
/// Describe calls per type (moto keeps the tags of deleted resources in
/// DescribeTags, so that call cannot tell).
fn tagged_resources(w: &World) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        let aws = w.aws().await;
        let f = || aws_sdk_ec2::types::Filter::builder().name("tag:pinfleet.dev/cluster").values(&w.cluster).build();
        let ec2 = &aws.ec2;
        let mut out = Vec::new();
        for v in ec2.describe_vpcs().filters(f()).send().await.unwrap().vpcs() {
            out.push(format!("vpc:{}", v.vpc_id().unwrap()));
        }
        for s in ec2.describe_subnets().filters(f()).send().await.unwrap().subnets() {
            out.push(format!("subnet:{}", s.subnet_id().unwrap()));
        }
        for g in ec2.describe_internet_gateways().filters(f()).send().await.unwrap().internet_gateways() {
            out.push(format!("internet-gateway:{}", g.internet_gateway_id().unwrap()));
        }
        for a in ec2.describe_addresses().filters(f()).send().await.unwrap().addresses() {
            out.push(format!("elastic-ip:{}", a.allocation_id().unwrap()));
        }
        for n in ec2.describe_nat_gateways().filter(f()).send().await.unwrap().nat_gateways() {
            if !matches!(n.state().map(|s| s.as_str()), Some("deleted" | "deleting")) {
                out.push(format!("nat-gateway:{}", n.nat_gateway_id().unwrap()));
            }
        }
        for r in ec2.describe_route_tables().filters(f()).send().await.unwrap().route_tables() {
            out.push(format!("route-table:{}", r.route_table_id().unwrap()));
        }
        for g in ec2.describe_security_groups().filters(f()).send().await.unwrap().security_groups() {
            out.push(format!("security-group:{}", g.group_id().unwrap()));
        }
        for t in ec2.describe_launch_templates().filters(f()).send().await.unwrap().launch_templates() {
            let id = t.launch_template_id().unwrap();
            out.push(format!("launch-template:{id}:{}", t.launch_template_name().unwrap_or_default()));
            // Which instance profile its latest version names.
            let v = ec2
                .describe_launch_template_versions()
                .launch_template_id(id)
                .versions("$Latest")
                .send()
                .await
                .unwrap();
            for d in v.launch_template_versions().iter().filter_map(|v| v.launch_template_data()) {
                if let Some(p) = d.iam_instance_profile().and_then(|p| p.name()) {
                    out.push(format!("profile-of:{}:{p}", t.launch_template_name().unwrap_or_default()));
                }
            }
        }
        for i in pinfleet::cli::get::list_instances(&aws, Some(&w.cluster), false)
            .await
            .unwrap()
            .iter()
            .filter(|i| i.is_live())
        {
            out.push(format!("instance:{}", i.id));
        }
        // IAM has no tag filter: the cluster's roles and profiles by name.
        for role in [pinfleet::spec::Role::ControlPlane, pinfleet::spec::Role::Node] {
            let name = pinfleet::cloud::iam::role_name(&w.cluster, role);
            if aws.iam.get_role().role_name(&name).send().await.is_ok() {
                out.push(format!("iam-role:{name}"));
            }
            if aws.iam.get_instance_profile().instance_profile_name(&name).send().await.is_ok() {
                out.push(format!("instance-profile:{name}"));
            }
        }
        match aws
            .elb
            .describe_load_balancers()
            .names(pinfleet::cloud::model::load_balancer_name(&w.cluster))
            .send()
            .await
        {
            Ok(r) if !r.load_balancers().is_empty() => out.push("load-balancer".into()),
            _ => {}
        }
        out
    })
}

/// Runs `f` with this process's AWS environment pointed at the shared moto
/// (every test sets the same values, so parallel tests agree).
fn with_aws_env<T>(w: &World, f: impl FnOnce() -> T) -> T {
    std::env::set_var("AWS_ENDPOINT_URL", support::moto_url());
    std::env::set_var("AWS_REGION", "us-east-1");
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let _ = w;
    f()
}

#[test]
fn bootstrap_creates_the_cluster_and_a_second_plan_has_no_changes() {
    let w = World::new("boot", 3);
    // Without --yes: the plan, and nothing changes.
    let preview = w.run(&["bootstrap", "boot"]);
    assert!(preview.status.success(), "{}", stderr(&preview));
    assert!(stdout(&preview).contains("+ vpc"), "{}", stdout(&preview));
    assert!(stderr(&preview).contains("Nothing changed"));
    assert!(w.instances().is_empty());

    w.ok(&["bootstrap", "boot", "--yes"]);
    let cp = w.instances_in("control-plane");
    let nodes = w.instances_in("general");
    assert_eq!((cp.len(), nodes.len()), (1, 3));
    for i in cp.iter().chain(&nodes) {
        assert_eq!(i["owner"], "cloud-platform");
        assert_eq!(i["cluster"], "boot");
        assert_eq!(i["launch_template_version"], "1");
        assert_eq!(i["instance_type"], if i["group"] == "general" { "t3.large" } else { "t3.medium" });
    }
    // Spread over the group's two subnets (two zones).
    let zones: BTreeSet<String> = nodes.iter().map(|i| i["zone"].as_str().unwrap().to_string()).collect();
    assert_eq!(zones.len(), 2, "{zones:?}");

    // The kubeconfig points at the load balancer and carries the admin cert.
    let kc = std::fs::read_to_string(w.dir.path().join("home/kubeconfig/boot.yaml")).unwrap();
    assert!(kc.contains("server: \"https://boot-api-") && kc.contains(":6443\""), "{kc}");
    assert!(kc.contains("client-certificate-data"));

    // A second plan: no changes, exit 0 under --detailed-exitcode.
    let plan = w.run(&["plan", "boot", "--detailed-exitcode"]);
    assert_eq!(plan.status.code(), Some(0), "{}\n{}", stdout(&plan), stderr(&plan));
    assert!(stdout(&plan).contains("No changes"));

    // Plan as data, with the AWS calls counted.
    let p = w.json(&["plan", "boot"]);
    assert_eq!(p["changes"].as_array().unwrap().len(), 0);
    assert!(p["aws_calls"]["ec2:DescribeInstances"].as_u64().unwrap() >= 1);

    // --all: every pinfleet machine in the regions of the clusters folder.
    let all = w.json(&["get", "instances", "--all"]);
    assert_eq!(all.as_array().unwrap().len(), 4, "{all:#}");
    assert!(all.as_array().unwrap().iter().all(|i| i["cluster"] == "boot" && i["region"] == "us-east-1"));

    // History records the revision.
    let h = w.json(&["history", "boot"]);
    assert_eq!(h.as_array().unwrap().len(), 1);
    assert_eq!(h[0]["revision"], 1);
    // Who: the AWS caller (moto answers GetCallerIdentity for its account),
    // and a real local user and host, never "unknown".
    let identity = h[0]["identity"].as_str().unwrap_or_default();
    assert!(identity.starts_with("arn:aws:") && identity.contains(&w.account), "{h:#}");
    assert_ne!(h[0]["by"], "unknown", "{h:#}");
    assert_ne!(h[0]["host"], "unknown", "{h:#}");
    let w_nouser = w.command(&["history", "boot"]).env_remove("USER").env_remove("LOGNAME").output().unwrap();
    assert!(!stdout(&w_nouser).contains("unknown@"), "{}", stdout(&w_nouser));
    assert!(stdout(&w_nouser).contains(" as arn:aws:"), "{}", stdout(&w_nouser));

    // The state bucket was created versioned, private and encrypted.
    with_aws_env(&w, || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let aws = w.aws().await;
            let b = w.bucket();
            // moto 5.2.5 answers GetBucketVersioning under a root element the
            // SDK rejects; its body still says whether versioning is on.
            match aws.s3.get_bucket_versioning().bucket(&b).send().await {
                Ok(v) => assert_eq!(v.status().map(|s| s.as_str()), Some("Enabled")),
                Err(e) => {
                    let body = e
                        .raw_response()
                        .and_then(|r| r.body().bytes())
                        .map(|b| String::from_utf8_lossy(b).into_owned())
                        .unwrap_or_default();
                    assert!(body.contains("<Status>Enabled</Status>"), "{body}");
                }
            }
            let pab = aws.s3.get_public_access_block().bucket(&b).send().await.unwrap();
            let c = pab.public_access_block_configuration().unwrap();
            assert_eq!(
                (c.block_public_acls(), c.block_public_policy(), c.ignore_public_acls(), c.restrict_public_buckets()),
                (Some(true), Some(true), Some(true), Some(true))
            );
            let enc = aws.s3.get_bucket_encryption().bucket(&b).send().await.unwrap();
            let rule = &enc.server_side_encryption_configuration().unwrap().rules()[0];
            let default = rule.apply_server_side_encryption_by_default().unwrap();
            assert_eq!(default.sse_algorithm().as_str(), "aws:kms", "the bucket encrypts with KMS by default");
            // The PKI (with the Secrets' encryption keys) and what machines
            // fetch are encrypted by KMS, under the bucket's key.
            for key in ["clusters/boot/pki/bundle.json", "clusters/boot/machine/pki/encryption-config.yaml"] {
                let o = aws.s3.head_object().bucket(&b).key(key).send().await.unwrap();
                assert_eq!(o.server_side_encryption().map(|s| s.as_str()), Some("aws:kms"), "{key}");
            }
        });
    });

    // The PKI never reaches the output.
    let all = format!("{}{}", stdout(&w.run(&["plan", "boot", "-v"])), stderr(&w.run(&["plan", "boot", "-v"])));
    assert!(!all.contains("PRIVATE KEY"));
}

#[test]
fn scaling_a_group_up_and_down() {
    let w = World::new("scale", 2);
    w.ok(&["bootstrap", "scale", "--yes"]);
    assert_eq!(w.instances_in("general").len(), 2);

    w.write_cluster(&w.cluster_yaml(5, "t3.large"));
    let plan = w.run(&["plan", "scale", "--detailed-exitcode"]);
    assert_eq!(plan.status.code(), Some(2));
    assert!(stdout(&plan).contains("launch 3 (2 → 5)"), "{}", stdout(&plan));
    w.ok(&["apply", "scale", "--yes"]);
    assert_eq!(w.instances_in("general").len(), 5);

    w.write_cluster(&w.cluster_yaml(1, "t3.large"));
    let plan = w.ok(&["plan", "scale"]);
    assert!(plan.contains("terminate 4 (5 → 1)"), "{plan}");
    w.ok(&["apply", "scale", "--yes"]);
    assert_eq!(w.instances_in("general").len(), 1);
    assert_eq!(w.instances_in("control-plane").len(), 1);
    assert_eq!(w.run(&["plan", "scale", "--detailed-exitcode"]).status.code(), Some(0));
}

#[test]
fn changing_the_instance_type_makes_a_new_template_version_and_flags_the_machines() {
    let w = World::new("itype", 2);
    w.ok(&["bootstrap", "itype", "--yes"]);
    w.write_cluster(&w.cluster_yaml(2, "t3.xlarge"));
    let plan = w.json(&["plan", "itype"]);
    let changes = plan["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{plan:#}");
    assert_eq!(changes[0]["key"], "lt/general");
    assert_eq!(changes[0]["action"], "update");
    let fields = changes[0]["fields"].as_array().unwrap();
    // The instance type alone: the user-data labels the node by the type
    // the machine was launched as, read from its metadata (a group that
    // falls back to another type is labelled by what runs).
    let names: Vec<&str> = fields.iter().map(|f| f["field"].as_str().unwrap()).collect();
    assert_eq!(names, ["instanceType"], "{fields:#?}");
    assert_eq!((fields[0]["before"].as_str(), fields[0]["after"].as_str()), (Some("t3.large"), Some("t3.xlarge")));
    assert!(changes[0]["reason"].as_str().unwrap().contains("machineType"));
    let rollout = plan["needs_rollout"].as_array().unwrap();
    assert_eq!(rollout.len(), 1);
    assert_eq!(rollout[0]["group"], "general");
    assert_eq!(rollout[0]["instances"].as_array().unwrap().len(), 2);

    let text = w.ok(&["plan", "itype"]);
    assert!(text.contains("~ lt/general") && text.contains("instanceType: \"t3.large\" → \"t3.xlarge\""), "{text}");

    w.ok(&["apply", "itype", "--yes"]);
    // The template has version 2; the old machines still run version 1 and
    // stay listed as needing a rollout until an upgrade replaces them.
    let after = w.json(&["plan", "itype"]);
    assert_eq!(after["changes"].as_array().unwrap().len(), 0, "{after:#}");
    assert_eq!(after["needs_rollout"][0]["instances"].as_array().unwrap().len(), 2);
    assert_eq!(after["needs_rollout"][0]["current_version"], "2");
    assert!(w.instances_in("general").iter().all(|i| i["launch_template_version"] == "1"));
}

#[test]
fn removing_a_group_deletes_its_instances_and_template() {
    let w = World::new("rmgroup", 1);
    let extra = w.cluster_yaml(1, "t3.large").replace(
        "      rollout:\n        maxSurge: 1\n",
        "      rollout:\n        maxSurge: 1\n    - name: batch\n      role: node\n      machineType: c5.large\n      minSize: 0\n      maxSize: 5\n      desired: 2\n      image: {selector: {owners: [\"099720109477\"], name: \"ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*\"}}\n      subnets: [private-b]\n",
    );
    w.write_cluster(&extra);
    w.ok(&["bootstrap", "rmgroup", "--yes"]);
    assert_eq!(w.instances_in("batch").len(), 2);
    w.write_cluster(&w.cluster_yaml(1, "t3.large"));
    let plan = w.json(&["plan", "rmgroup"]);
    let keys: Vec<&str> = plan["changes"].as_array().unwrap().iter().map(|c| c["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["instances/batch", "lt/batch"]);
    w.ok(&["apply", "rmgroup", "--yes"]);
    assert!(w.instances_in("batch").is_empty());
    let left = with_aws_env(&w, || tagged_resources(&w));
    assert!(!left.iter().any(|r| r.starts_with("launch-template") && r.contains("batch")), "{left:?}");
    assert!(left.iter().any(|r| r.starts_with("launch-template") && r.contains("general")), "{left:?}");
    assert_eq!(w.run(&["plan", "rmgroup", "--detailed-exitcode"]).status.code(), Some(0));
}

#[test]
fn destroy_leaves_nothing_tagged() {
    let w = World::new("gone", 2);
    w.ok(&["bootstrap", "gone", "--yes"]);
    let before = with_aws_env(&w, || tagged_resources(&w));
    assert!(before.len() > 20, "{before:?}");
    // The machines' IAM: a role and an instance profile per machine role.
    for r in ["control-plane", "nodes"] {
        assert!(before.contains(&format!("iam-role:pinfleet-gone-{r}")), "{before:?}");
        assert!(before.contains(&format!("instance-profile:pinfleet-gone-{r}")), "{before:?}");
    }
    // And the launch templates name them.
    assert!(before.contains(&"profile-of:gone-control-plane:pinfleet-gone-control-plane".to_string()), "{before:?}");
    assert!(before.contains(&"profile-of:gone-general:pinfleet-gone-nodes".to_string()), "{before:?}");
    let preview = w.ok(&["destroy", "gone"]);
    assert!(preview.contains("- vpc"), "{preview}");
    let out = w.run(&["destroy", "gone", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("removed"), "{}", stderr(&out));
    let left = with_aws_env(&w, || tagged_resources(&w));
    assert!(left.is_empty(), "still tagged: {left:?}");
    // Nor do the CA keys and the join token machines fetched stay in the bucket.
    let machine = with_aws_env(&w, || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let aws = w.aws().await;
            let store = pinfleet::state::Store::open(&format!("s3://{}/clusters", w.bucket()), "gone", Some(&aws))
                .await
                .unwrap();
            let mut left = Vec::new();
            for k in ["machine/pki/ca.key", "machine/pki/etcd-ca.key", pinfleet::state::join::TOKEN_KEY] {
                if store.get(k).await.unwrap().is_some() {
                    left.push(k);
                }
            }
            left
        })
    });
    assert!(machine.is_empty(), "left in the state store: {machine:?}");
    assert!(w.instances().is_empty());
    // Destroying again finds nothing to do.
    assert!(w.ok(&["destroy", "gone"]).contains("No changes"));
}

#[test]
fn a_second_concurrent_apply_is_refused_naming_the_holder() {
    let w = World::new("locked", 2);
    let mut slow = w.command(&["bootstrap", "locked", "--yes"]);
    slow.env("PINFLEET_TEST_STEP_DELAY_MS", "300").env("USER", "alice");
    let child = slow.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    // Wait until the first run holds the lock.
    let mut held = false;
    for _ in 0..200 {
        let s = w.ok(&["state", "lock", "locked"]);
        if s.contains("locked by alice") {
            held = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held, "the first run never took the lock");
    let mut second = w.command(&["apply", "locked", "--yes"]);
    second.env("USER", "bob");
    let out = second.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("cluster locked is locked by alice on ") && err.contains("pinfleet state unlock locked --force"),
        "{err}"
    );
    let first = child.wait_with_output().unwrap();
    assert!(first.status.success(), "{}", stderr(&first));
    // Released at the end: another run goes through.
    w.ok(&["apply", "locked", "--yes"]);
}

#[test]
fn kill_9_in_the_middle_of_an_apply_then_a_rerun_converges() {
    let w = World::new("killed", 6);
    let mut cmd = w.command(&["bootstrap", "killed", "--yes"]);
    cmd.env("PINFLEET_TEST_STEP_DELAY_MS", "250");
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
    // Let it get part of the way (some resources exist), then kill -9.
    let mut partial = false;
    for _ in 0..400 {
        if with_aws_env(&w, || tagged_resources(&w)).len() >= 5 {
            partial = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(partial, "the apply never got started");
    // The dead run's lock is taken over (its process is gone from this host), saying so.
    let out = w.run(&["bootstrap", "killed", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("cluster killed was locked by pid"), "{}", stderr(&out));
    assert_eq!(w.instances_in("general").len(), 6);
    assert_eq!(w.instances_in("control-plane").len(), 1);
    assert_eq!(w.run(&["plan", "killed", "--detailed-exitcode"]).status.code(), Some(0));
    // Exactly one of each network resource: nothing was created twice.
    let tagged = with_aws_env(&w, || tagged_resources(&w));
    assert_eq!(tagged.iter().filter(|r| r.starts_with("vpc:")).count(), 1, "{tagged:?}");
    assert_eq!(tagged.iter().filter(|r| r.starts_with("security-group:")).count(), 2, "{tagged:?}");
    assert_eq!(tagged.iter().filter(|r| r.starts_with("subnet:")).count(), 4, "{tagged:?}");
    assert_eq!(tagged.iter().filter(|r| r.starts_with("nat-gateway:")).count(), 2, "{tagged:?}");
    assert_eq!(tagged.iter().filter(|r| r.starts_with("launch-template:")).count(), 2, "{tagged:?}");
}

#[test]
fn injected_throttling_and_server_errors_are_retried() {
    let mut w = World::new("flaky", 2);
    w.extra_env.push(("PINFLEET_FAULTS".into(), "throttle=4,5xx=3".into()));
    let out = w.run(&["bootstrap", "flaky", "--yes", "-v"]);
    assert!(out.status.success(), "{}", stderr(&out));
    w.extra_env.clear();
    assert_eq!(w.instances_in("general").len(), 2);
    assert_eq!(w.run(&["plan", "flaky", "--detailed-exitcode"]).status.code(), Some(0));
}

#[test]
fn an_unreachable_endpoint_is_a_clear_error() {
    let mut w = World::new("unreach", 1);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    w.endpoint = format!("http://127.0.0.1:{port}");
    let out = w.run(&["plan", "unreach"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot reach the AWS endpoint"), "{err}");
    assert!(!err.contains("panicked"));
}

#[test]
fn missing_and_bad_credentials_are_clear_errors() {
    let w = World::new("creds", 1);
    // No credentials anywhere.
    let out = w
        .command(&["plan", "creds"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).to_lowercase().contains("credentials"), "{}", stderr(&out));

    // Credentials the service rejects: a moto that checks them.
    let (url, _child) = support::start_moto(&[("INITIAL_NO_AUTH_ACTION_COUNT", "0")]);
    let mut strict = World::new("creds2", 1);
    strict.endpoint = url;
    let out = strict.run(&["plan", "creds2"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("AuthFailure") || err.contains("InvalidClientTokenId") || err.contains("not valid"), "{err}");
}

#[test]
fn orphans_are_resources_whose_cluster_is_gone_and_machines_nobody_owns() {
    let w = World::new("orphaned", 1);
    w.ok(&["bootstrap", "orphaned", "--yes"]);
    assert!(w.ok(&["orphans"]).contains("No orphans."));

    // Someone starts a machine by hand inside the cluster's VPC, untagged.
    let stray = with_aws_env(&w, || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let aws = w.aws().await;
            let subnet = aws
                .ec2
                .describe_subnets()
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("tag:pinfleet.dev/resource")
                        .values("subnet/private-a")
                        .build(),
                )
                .send()
                .await
                .unwrap()
                .subnets()[0]
                .subnet_id()
                .unwrap()
                .to_string();
            let out = aws
                .ec2
                .run_instances()
                .image_id("ami-785db401")
                .instance_type("t3.micro".into())
                .min_count(1)
                .max_count(1)
                .subnet_id(subnet)
                .send()
                .await
                .unwrap();
            out.instances()[0].instance_id().unwrap().to_string()
        })
    });
    let report = w.json(&["orphans"]);
    let rows = report.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report:#}");
    assert_eq!(rows[0]["id"], stray.as_str());
    assert!(rows[0]["why"].as_str().unwrap().contains("no pinfleet.dev/owner tag"));

    // The cluster's definition disappears: everything it left is an orphan.
    std::fs::remove_file(w.cluster_file()).unwrap();
    let report = w.json(&["orphans", "--region", "us-east-1"]);
    let kinds: BTreeSet<String> =
        report.as_array().unwrap().iter().map(|r| r["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "instance".into(),
            "vpc".into(),
            "security-group".into(),
            "launch-template".into(),
            "iam-role".into()
        ]),
        "{report:#}"
    );
    assert!(report
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["cluster"] == "orphaned")
        .all(|r| r["why"].as_str().unwrap().contains("no cluster `orphaned`")));
}

#[test]
fn the_node_simulator_registers_a_node_per_running_instance() {
    let w = World::new("nodesim", 4);
    w.ok(&["bootstrap", "nodesim", "--yes"]);
    let cluster = pinfleet::spec::load_cluster(&w.cluster_file(), &Default::default()).unwrap().cluster;
    with_aws_env(&w, || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let aws = w.aws().await;
            let instances = pinfleet::cli::get::list_instances(&aws, Some("nodesim"), false).await.unwrap();
            assert_eq!(instances.len(), 5);
            let cfg = pinfleet::sim::nodes::Ec2Nodes {
                cluster: cluster.clone(),
                boot_delay: Duration::from_secs(60),
                fail_fraction: 0.0,
                poll: Duration::from_secs(1),
                needs_cni: false,
                image_facts: Default::default(),
            };
            let mut inner = pinfleet::sim::Inner::new();
            let nodes_t = inner.registry.get("", "v1", "nodes").cloned().unwrap();
            let launched = instances.iter().filter_map(|i| i.launch_time).max().unwrap();
            let list = |inner: &pinfleet::sim::Inner| {
                inner.list(&nodes_t, None, &Default::default(), &Default::default(), None, None).unwrap().items
            };
            // Registered at once, Ready only after the boot delay.
            pinfleet::sim::nodes::sync(&mut inner, &cfg, &instances, launched);
            let nodes = list(&inner);
            assert_eq!(nodes.len(), 5);
            assert!(nodes.iter().all(|n| n["status"]["conditions"][0]["status"] == "False"));
            let cp = nodes
                .iter()
                .find(|n| n["metadata"]["labels"]["pinfleet.dev/instance-group"] == "control-plane")
                .unwrap();
            assert!(cp["spec"]["providerID"].as_str().unwrap().starts_with("aws:///us-east-1"));
            assert_eq!(cp["spec"]["taints"][0]["key"], "node-role.kubernetes.io/control-plane");
            assert_eq!(cp["status"]["allocatable"]["cpu"], "2");
            pinfleet::sim::nodes::sync(&mut inner, &cfg, &instances, launched + 61);
            assert!(list(&inner).iter().all(|n| n["status"]["conditions"][0]["status"] == "True"));
            // A fraction that never comes up, chosen per machine.
            let flaky = pinfleet::sim::nodes::Ec2Nodes { fail_fraction: 1.0, ..cfg.clone() };
            let mut other = pinfleet::sim::Inner::new();
            pinfleet::sim::nodes::sync(&mut other, &flaky, &instances, launched + 600);
            assert!(list(&other).iter().all(|n| n["status"]["conditions"][0]["status"] == "False"));
            // Terminated machines lose their Node.
            w.write_cluster(&w.cluster_yaml(2, "t3.large"));
            w.ok(&["apply", "nodesim", "--yes"]);
            let instances = pinfleet::cli::get::list_instances(&aws, Some("nodesim"), false).await.unwrap();
            pinfleet::sim::nodes::sync(&mut inner, &cfg, &instances, launched + 120);
            assert_eq!(list(&inner).len(), 3);
        });
    });
}

#[test]
fn ctrl_c_releases_the_lock() {
    let w = World::new("interrupted", 4);
    let mut cmd = w.command(&["bootstrap", "interrupted", "--yes"]);
    cmd.env("PINFLEET_TEST_STEP_DELAY_MS", "300");
    let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut held = false;
    for _ in 0..200 {
        if w.ok(&["state", "lock", "interrupted"]).contains("locked by") {
            held = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held, "the run never took the lock");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(stderr(&out).contains("interrupted"), "{}", stderr(&out));
    assert!(w.ok(&["state", "lock", "interrupted"]).contains("is not locked"));
    // And the next run finishes the job.
    w.ok(&["bootstrap", "interrupted", "--yes"]);
    assert_eq!(w.instances_in("general").len(), 4);
}

/// On moto no API server ever answers: the wait says what it waits for and
/// its limit on one line, keeps connection errors out of the output, and
/// stops at `--api-timeout` with the next step.
#[test]
fn waiting_for_the_api_server_is_one_line_and_bounded() {
    let w = World::new("apiwait", 1);
    let started = std::time::Instant::now();
    let out = w
        .command(&["bootstrap", "apiwait", "--yes", "--api-timeout", "3s"])
        .env_remove("PINFLEET_SKIP_ADDONS")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(300), "bounded by --api-timeout: {:?}", started.elapsed());
    assert_eq!(err.matches("waiting for the API server at https://").count(), 1, "{err}");
    assert!(err.contains("of 3s"), "the limit is shown: {err}");
    assert!(!err.contains("ERROR"), "connection errors stay at debug level: {err}");
    assert!(err.matches("dns error").count() <= 1, "the last error once, in the final message: {err}");
    assert!(err.contains("did not answer within 3s"), "{err}");
    assert!(err.contains("pinfleet addons apply apiwait"), "the next step: {err}");
}

#[test]
fn user_data_says_where_to_look_and_carries_no_key_material() {
    let w = World::new("secrets", 2);
    w.ok(&["bootstrap", "secrets", "--yes"]);
    with_aws_env(&w, || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let aws = w.aws().await;
            let url = format!("s3://{}/clusters", w.bucket());
            let store = pinfleet::state::Store::open(&url, "secrets", Some(&aws)).await.unwrap();
            let pki = pinfleet::state::pki::Pki::load(&store).await.unwrap().unwrap();
            let token = pinfleet::state::join::current(&store).await.unwrap().expect("a published token");
            // A bootstrap token with a TTL, not one that never expires.
            let left = token.expires - chrono::Utc::now();
            assert!(left > chrono::Duration::hours(23) && left <= chrono::Duration::hours(24), "{left}");
            // What machines fetch is where user-data says.
            let machine = |k: &str| {
                let store = &store;
                let k = k.to_string();
                async move { String::from_utf8(store.get(&k).await.unwrap().expect(&k).0).unwrap() }
            };
            assert_eq!(machine("machine/join/token").await, token.token);
            assert_eq!(machine("machine/join/ca-cert-hash").await, pki.ca_cert_hash);
            assert_eq!(machine("machine/pki/ca.key").await, pki.ca_key);
            assert!(machine("machine/pki/etcd-ca.key").await.contains("PRIVATE KEY"));

            // Every version of every launch template, and the first machine's own user-data.
            let ec2 = &aws.ec2;
            let f = aws_sdk_ec2::types::Filter::builder().name("tag:pinfleet.dev/cluster").values("secrets").build();
            let mut texts = Vec::new();
            for t in ec2.describe_launch_templates().filters(f).send().await.unwrap().launch_templates() {
                let v = ec2
                    .describe_launch_template_versions()
                    .launch_template_id(t.launch_template_id().unwrap())
                    .send()
                    .await
                    .unwrap();
                for d in v.launch_template_versions().iter().filter_map(|v| v.launch_template_data()) {
                    texts.push(d.user_data().unwrap_or_default().to_string());
                }
            }
            for i in w.instances() {
                let a = ec2
                    .describe_instance_attribute()
                    .instance_id(i["id"].as_str().unwrap())
                    .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
                    .send()
                    .await
                    .unwrap();
                texts.push(a.user_data().and_then(|u| u.value()).unwrap_or_default().to_string());
            }
            assert!(texts.len() >= 4, "{}", texts.len());
            use base64::Engine as _;
            for t in texts {
                let plain = String::from_utf8(base64::engine::general_purpose::STANDARD.decode(t).unwrap()).unwrap();
                assert!(plain.contains("#cloud-config"));
                assert!(!plain.contains("PRIVATE KEY"), "key material in user-data");
                assert!(!plain.contains(&token.token) && !plain.contains(&pki.join_token), "a join token in user-data");
                assert!(!plain.contains(&pki.ca_cert_hash), "the CA hash in user-data");
                assert!(!plain.contains(&pki.certificate_key), "the certificate key in user-data");
                assert!(
                    plain.contains("/machine/$1") && plain.contains("STATE_BUCKET="),
                    "user-data says where to look"
                );
            }
        })
    });
}

#[test]
fn the_approver_reads_a_machines_names_from_ec2() {
    use pinfleet::controller::serving::AddressSource as _;
    let w = World::new("names", 1);
    w.ok(&["bootstrap", "names", "--yes"]);
    let machine = w.instances_in("general")[0]["id"].as_str().unwrap().to_string();
    with_aws_env(&w, || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let aws = w.aws().await;
            let instances = pinfleet::cli::get::list_instances(&aws, Some("names"), false).await.unwrap();
            let i = instances.iter().find(|i| i.id == machine).unwrap();
            let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(serde_json::json!({
                "metadata": {"name": machine},
                "spec": {"providerID": format!("aws:///{}/{}", i.zone.clone().unwrap(), machine)},
            }))
            .unwrap();
            let got = pinfleet::controller::serving::FromEc2(aws).addresses(&node).await.unwrap();
            let ip: std::net::IpAddr = i.private_ip.as_deref().unwrap().parse().unwrap();
            assert!(got.ips.contains(&ip), "{got:?}");
            assert!(got.dns_names.iter().any(|d| d.ends_with(".ec2.internal")), "{got:?}");
            // A node without an AWS provider ID has no machine to check against.
            let bare: k8s_openapi::api::core::v1::Node =
                serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
            let aws = w.aws().await;
            let err = pinfleet::controller::serving::FromEc2(aws).addresses(&bare).await.unwrap_err().to_string();
            assert!(err.contains("no AWS provider ID"), "{err}");
        })
    });
}

/// A group with several types: `t3.large` refused in us-east-1a falls back
/// to us-east-1b, then (both zones out) to the next type; the refusals land
/// in the fleet-wide ledger, which a second cluster on the same state store
/// reads and skips, and `pinfleet capacity` shows.
#[test]
fn capacity_refusals_fall_back_across_zones_then_types_and_the_ledger_is_shared() {
    let mut w = World::new("ice", 2);
    let with_capacity = |yaml: String| {
        yaml.replace(
            "      rollout:\n        maxSurge: 1\n",
            "      rollout:\n        maxSurge: 1\n      capacity:\n        types: [m6i.large, m6a.large]\n        fallback: [zone, type]\n",
        )
    };
    w.write_cluster(&with_capacity(w.cluster_yaml(2, "t3.large")));
    w.extra_env.push(("PINFLEET_CAPACITY_FAULTS".into(), "InsufficientInstanceCapacity@*/t3.large/us-east-1a".into()));
    let out = w.run(&["bootstrap", "ice", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let general = w.instances_in("general");
    assert_eq!(general.len(), 2);
    for i in &general {
        assert_eq!((i["instance_type"].as_str(), i["zone"].as_str()), (Some("t3.large"), Some("us-east-1b")), "{i}");
    }
    let ledger = w.json(&["capacity", "ice"]);
    let entries = ledger["ledgers"][0]["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 1, "{ledger}");
    assert_eq!(entries[0]["offering"]["zone"], "us-east-1a");
    assert_eq!(entries[0]["code"], "InsufficientInstanceCapacity");
    assert_eq!(entries[0]["by"], "ice/general");
    // Both zones out of t3.large: the next type.
    w.extra_env = vec![(
        "PINFLEET_CAPACITY_FAULTS".into(),
        "InsufficientInstanceCapacity@*/t3.large/us-east-1a;Unsupported@*/t3.large/us-east-1b".into(),
    )];
    w.write_cluster(&with_capacity(w.cluster_yaml(4, "t3.large")));
    let out = w.run(&["apply", "ice", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let types: Vec<String> =
        w.instances_in("general").iter().map(|i| i["instance_type"].as_str().unwrap().to_string()).collect();
    assert_eq!(types.iter().filter(|t| *t == "m6i.large").count(), 2, "{types:?}");
    let text = String::from_utf8_lossy(&w.run(&["capacity", "ice"]).stdout).to_string();
    assert!(text.contains("t3.large") && text.contains("Unsupported"), "{text}");
    // A second cluster on the same state store skips what the ledger holds:
    // it never asks for t3.large in us-east-1a, even with the fault lifted.
    let first = w.cluster.clone();
    w.cluster = "ice2".into();
    let yaml = with_capacity(w.cluster_yaml(1, "t3.large"))
        .replace("name: ice2", "name: ice2")
        .replace(
            &format!("s3://pf-test-{}-ice2/clusters", w.account),
            &format!("s3://pf-test-{}-{first}/clusters", w.account),
        )
        .replace("10.10.", "10.20.");
    w.write_cluster(&yaml);
    w.extra_env.clear();
    let out = w.run(&["bootstrap", "ice2", "--yes", "-v"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let ice2 = w.instances_in("general");
    assert_eq!(ice2.len(), 1);
    assert_eq!(ice2[0]["instance_type"], "m6i.large", "t3.large is held back in both zones: {ice2:?}");
}

/// A GPU group whose types come from accelerator requirements (one A10G
/// or L4): EC2 refusing g5 in every zone, it launches g6 and the ledger
/// holds g5 back. A group targeting a Capacity Reservation has it in its
/// launch template as EC2 stores it (DescribeLaunchTemplateVersions).
#[test]
fn a_gpu_group_falls_back_from_g5_to_g6_and_a_reservation_is_in_the_launch_template() {
    let mut w = World::new("gpus", 2);
    let yaml = w
        .cluster_yaml(2, "g5.xlarge")
        .replace(
            "      rollout:\n        maxSurge: 1\n",
            "      rollout:\n        maxSurge: 1\n      image:\n        accelerator: nvidia\n      capacity:\n        requirements:\n          vcpu: {max: 4}\n          accelerators: {count: {max: 1}, products: [A10G, L4]}\n",
        )
        .replace(
            "      maxSize: 1\n      subnets: [private-a]\n",
            "      maxSize: 1\n      subnets: [private-a]\n      capacity:\n        reservation:\n          id: cr-0123456789abcdef0\n",
        );
    assert!(yaml.contains("cr-0123456789abcdef0") && yaml.contains("products: [A10G, L4]"), "{yaml}");
    w.write_cluster(&yaml);
    w.extra_env.push(("PINFLEET_CAPACITY_FAULTS".into(), "InsufficientInstanceCapacity@*/g5.xlarge/*".into()));
    let out = w.run(&["bootstrap", "gpus", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let general = w.instances_in("general");
    assert_eq!(general.len(), 2, "{general:?}");
    assert!(general.iter().all(|i| i["instance_type"] == "g6.xlarge"), "{general:?}");
    let ledger = w.json(&["capacity", "gpus"]);
    let held: Vec<&str> = ledger["ledgers"][0]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["offering"]["instanceType"].as_str().unwrap())
        .collect();
    assert!(!held.is_empty() && held.iter().all(|t| *t == "g5.xlarge"), "{ledger}");
    with_aws_env(&w, || {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            let aws = w.aws().await;
            let got = aws
                .ec2
                .describe_launch_template_versions()
                .launch_template_name("gpus-control-plane")
                .versions("$Latest")
                .send()
                .await
                .unwrap();
            let data = got.launch_template_versions()[0].launch_template_data().unwrap();
            let spec = data.capacity_reservation_specification().expect("the template carries the reservation");
            assert_eq!(
                spec.capacity_reservation_target().and_then(|t| t.capacity_reservation_id()),
                Some("cr-0123456789abcdef0")
            );
            let got = aws
                .ec2
                .describe_launch_template_versions()
                .launch_template_name("gpus-general")
                .versions("$Latest")
                .send()
                .await
                .unwrap();
            let data = got.launch_template_versions()[0].launch_template_data().unwrap();
            assert!(data.capacity_reservation_specification().is_none(), "{data:?}");
        })
    });
    // Read back as written: a second plan has nothing to change.
    let plan = w.run(&["plan", "gpus", "--detailed-exitcode"]);
    assert_eq!(plan.status.code(), Some(0), "{}{}", stdout(&plan), stderr(&plan));
}

/// Issue 47: a launch of several batches (one per subnet) never asks again
/// for an offering an earlier batch of the same launch was just refused:
/// with the first type out in every zone, the first batch learns it and
/// the second goes straight to the next type, inside the per-minute cap.
#[test]
fn a_later_batch_does_not_ask_again_what_an_earlier_one_was_refused() {
    let mut w = World::new("reask", 2);
    let yaml = w.cluster_yaml(2, "t3.large").replace(
        "      rollout:\n        maxSurge: 1\n",
        "      rollout:\n        maxSurge: 1\n      capacity:\n        types: [m6i.large, m6a.large]\n        fallback: [zone, type]\n        launchesPerMinute: 3\n",
    );
    w.write_cluster(&yaml);
    w.extra_env.push(("PINFLEET_CAPACITY_FAULTS".into(), "InsufficientInstanceCapacity@*/t3.large/*".into()));
    let out = w.run(&["bootstrap", "reask", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let general = w.instances_in("general");
    assert_eq!(general.len(), 2, "{general:?}");
    let mut zones: Vec<&str> = general.iter().map(|i| i["zone"].as_str().unwrap()).collect();
    zones.sort();
    assert_eq!(zones, ["us-east-1a", "us-east-1b"], "still spread over both subnets");
    assert!(general.iter().all(|i| i["instance_type"] == "m6i.large"), "{general:?}");
    let ledger = w.json(&["capacity", "reask"]);
    let l = &ledger["ledgers"][0];
    let entries = l["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "t3.large in each zone: {ledger}");
    for e in entries {
        assert_eq!(e["strikes"], 1, "asked once, not again by the next batch: {ledger}");
    }
    let refused: u64 = l["launches"].as_array().unwrap().iter().map(|x| x["refused"].as_u64().unwrap()).sum();
    assert_eq!(refused, 2, "{ledger}");
}

/// Stopped by the per-minute cap, a launch says so and names the offerings
/// it has not tried yet (they are not "out"); and the apply's summary
/// counts the machines an earlier batch of the stopped change launched.
#[test]
fn a_launch_stopped_by_the_cap_names_what_is_untried_and_counts_what_it_launched() {
    let mut w = World::new("capped", 2);
    let yaml = w.cluster_yaml(2, "t3.large").replace(
        "      rollout:\n        maxSurge: 1\n",
        "      rollout:\n        maxSurge: 1\n      capacity:\n        types: [m6i.large, m6a.large]\n        fallback: [zone, type]\n        launchesPerMinute: 3\n",
    );
    w.write_cluster(&yaml);
    // The first batch (subnet a): t3.large refused in both zones, m6i.large
    // in us-east-1a launches. The second (subnet b) skips t3.large, is
    // refused m6i.large in us-east-1b and meets the cap (3 refused calls).
    w.extra_env.push((
        "PINFLEET_CAPACITY_FAULTS".into(),
        "InsufficientInstanceCapacity@*/t3.large/*;InsufficientInstanceCapacity@*/m6i.large/us-east-1b".into(),
    ));
    let out = w.run(&["bootstrap", "capped", "--yes"]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("3 refused launch calls in the last minute"), "{err}");
    assert!(
        err.contains("not yet tried: on-demand m6i.large in us-east-1a, on-demand m6a.large in us-east-1b, on-demand m6a.large in us-east-1a"),
        "{err}"
    );
    assert!(!err.contains("every offering of the group is out"), "{err}");
    assert!(err.contains("1 machine(s) launched by a change partly served"), "{err}");
    assert_eq!(w.instances_in("general").len(), 1);
}

/// Bounded churn: with every offering of the group out, a launch makes at
/// most `launchesPerMinute` refused calls, the next run within the minute makes
/// none, and the failed launches are in the ledger (where two of the last
/// four halt the group's rollouts; see `capacity::Ledger::churn`).
#[test]
fn under_total_ice_launch_calls_are_capped_per_minute() {
    let mut w = World::new("churn", 2);
    let yaml = w.cluster_yaml(2, "t3.large").replace(
        "      rollout:\n        maxSurge: 1\n",
        "      rollout:\n        maxSurge: 1\n      capacity:\n        types: [m6i.large, m6a.large]\n        fallback: [zone, type]\n        launchesPerMinute: 3\n",
    );
    assert!(yaml.contains("launchesPerMinute: 3"));
    w.write_cluster(&yaml);
    w.extra_env.push((
        "PINFLEET_CAPACITY_FAULTS".into(),
        "InsufficientInstanceCapacity@*/t3.large/*;InsufficientInstanceCapacity@*/m6i.large/*;InsufficientInstanceCapacity@*/m6a.large/*".into(),
    ));
    let out = w.run(&["bootstrap", "churn", "--yes"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("blocked on capacity"), "{}", stderr(&out));
    let ledger = w.json(&["capacity", "churn"]);
    let l = &ledger["ledgers"][0];
    assert_eq!(l["entries"].as_array().unwrap().len(), 3, "three offerings tried, then the cap: {ledger}");
    let launches = l["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 1, "{ledger}");
    assert_eq!((launches[0]["ok"].as_bool(), launches[0]["calls"].as_u64()), (Some(false), Some(3)));
    // Within the minute: the three offerings left are not asked for.
    let out = w.run(&["apply", "churn", "--yes"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("3 refused launch calls in the last minute"), "{}", stderr(&out));
    let ledger = w.json(&["capacity", "churn"]);
    assert_eq!(ledger["ledgers"][0]["entries"].as_array().unwrap().len(), 3, "no call was made: {ledger}");
    assert!(w.instances_in("general").is_empty());
    // Said where people look: plan and get instances name the group and why.
    for args in [&["plan", "churn"][..], &["get", "instances", "churn"][..]] {
        let out = String::from_utf8_lossy(&w.run(args).stdout).to_string();
        assert!(
            out.contains("group general: 3 of 6 offerings out; blocked on capacity: t3.large in us-east-1a, InsufficientInstanceCapacity since"),
            "{args:?}: {out}"
        );
    }
}

/// The injector answers CreateFleet `instant` as EC2 does when offerings
/// are out: HTTP 200, an `errorSet` item per refused override, the rest
/// launched (or no instance at all) — a launcher that reads the status
/// alone would see success.
#[test]
fn create_fleet_answers_200_with_an_error_per_refused_override() {
    use pinfleet::cloud::aws::inject::{CapacityFaults, Rule};
    let w = World::new("fleetice", 1);
    w.ok(&["bootstrap", "fleetice", "--yes"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    with_aws_env(&w, || {
        rt.block_on(async {
            let faults =
                CapacityFaults::new(vec![Rule::parse("InsufficientInstanceCapacity@*/t3.large/us-east-1a").unwrap()]);
            let aws = pinfleet::cloud::aws::Aws::connect(&pinfleet::cloud::aws::AwsOptions {
                region: Some("us-east-1".into()),
                moto_account: Some(w.account.clone()),
                capacity_faults: Some(faults.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            use aws_sdk_ec2::types::*;
            let fleet = |overrides: Vec<(&'static str, &'static str)>| {
                let aws = aws.clone();
                async move {
                    let config = FleetLaunchTemplateConfigRequest::builder()
                        .launch_template_specification(
                            FleetLaunchTemplateSpecificationRequest::builder()
                                .launch_template_name("fleetice-general")
                                .version("$Latest")
                                .build(),
                        )
                        .set_overrides(Some(
                            overrides
                                .iter()
                                .map(|(t, z)| {
                                    FleetLaunchTemplateOverridesRequest::builder()
                                        .instance_type(InstanceType::from(*t))
                                        .availability_zone(*z)
                                        .build()
                                })
                                .collect(),
                        ))
                        .build();
                    aws.ec2
                        .create_fleet()
                        .r#type(FleetType::Instant)
                        .launch_template_configs(config)
                        .target_capacity_specification(
                            TargetCapacitySpecificationRequest::builder()
                                .total_target_capacity(1)
                                .default_target_capacity_type(DefaultTargetCapacityType::OnDemand)
                                .build(),
                        )
                        .send()
                        .await
                }
            };
            // Every override out: 200, no instance, one error each.
            let out = fleet(vec![("t3.large", "us-east-1a")]).await.expect("CreateFleet answers 200");
            assert!(out.instances().iter().all(|i| i.instance_ids().is_empty()), "{out:?}");
            let errors: Vec<(String, String)> = out
                .errors()
                .iter()
                .map(|e| {
                    (e.error_code().unwrap_or_default().to_string(), e.error_message().unwrap_or_default().to_string())
                })
                .collect();
            assert_eq!(errors.len(), 1, "{out:?}");
            assert_eq!(errors[0].0, "InsufficientInstanceCapacity");
            assert!(errors[0]
                .1
                .contains("sufficient t3.large capacity in the Availability Zone you requested (us-east-1a)"));
            // One out, one not: 200, the refused override in errorSet, the other to moto.
            let out = fleet(vec![("t3.large", "us-east-1a"), ("m6i.large", "us-east-1b")])
                .await
                .expect("CreateFleet answers 200");
            let codes: Vec<&str> = out.errors().iter().filter_map(|e| e.error_code()).collect();
            assert_eq!(codes, ["InsufficientInstanceCapacity"], "{out:?}");
            let refused = out.errors()[0].launch_template_and_overrides().and_then(|l| l.overrides()).cloned();
            assert_eq!(refused.and_then(|o| o.availability_zone().map(str::to_string)).as_deref(), Some("us-east-1a"));
            assert_eq!(faults.answered().len(), 2);
        })
    });
}

/// A Mixed group keeps its On-Demand base and Spot's share above it as it
/// grows. Its Spot machines come from one CreateFleet (instant,
/// price-capacity-optimized): the pools the fleet's 200 answer refuses go to
/// the ledger and the rest serve; Spot refused everywhere
/// (MaxSpotInstanceCountExceeded, a 200 with no instance), the Spot share
/// falls back to On-Demand rather than not launching.
#[test]
fn a_mixed_group_keeps_its_on_demand_base_and_spot_share() {
    let mut w = World::new("mixed", 3);
    let mixed = |yaml: String| {
        yaml.replace(
            "      rollout:\n        maxSurge: 1\n",
            "      rollout:\n        maxSurge: 1\n      capacity:\n        types: [t3a.large, m5.large, m5a.large, m6i.large]\n        market: Mixed\n        onDemandBase: 1\n        spotPercent: 50\n",
        )
    };
    w.write_cluster(&mixed(w.cluster_yaml(3, "t3.large")));
    w.ok(&["bootstrap", "mixed", "--yes"]);
    let markets = |w: &World| {
        let g = w.instances_in("general");
        (g.iter().filter(|i| i["market"] == "on-demand").count(), g.iter().filter(|i| i["market"] == "spot").count())
    };
    // 3 machines: 1 base, 2 above it, half of those on Spot.
    assert_eq!(markets(&w), (2, 1));
    // t3.large's Spot pools out in both zones: the fleet serves from the others.
    let before: Vec<serde_json::Value> = w.instances_in("general").iter().map(|i| i["id"].clone()).collect();
    w.extra_env.push(("PINFLEET_CAPACITY_FAULTS".into(), "InsufficientInstanceCapacity@spot/t3.large/*".into()));
    w.write_cluster(&mixed(w.cluster_yaml(7, "t3.large")));
    w.ok(&["apply", "mixed", "--yes"]);
    // 7: 1 base, 6 above, 3 on Spot.
    assert_eq!(markets(&w), (4, 3));
    let spot_types: Vec<String> = w
        .instances_in("general")
        .iter()
        .filter(|i| i["market"] == "spot" && !before.contains(&i["id"]))
        .map(|i| i["instance_type"].as_str().unwrap().to_string())
        .collect();
    assert!(spot_types.iter().all(|t| t != "t3.large"), "{spot_types:?}");
    let ledger = w.json(&["capacity", "mixed"]).to_string();
    assert!(ledger.contains("\"market\":\"Spot\"") && ledger.contains("InsufficientInstanceCapacity"), "{ledger}");
    w.extra_env.pop();
    // No Spot anywhere: what would have been Spot is On-Demand.
    w.extra_env.push(("PINFLEET_CAPACITY_FAULTS".into(), "MaxSpotInstanceCountExceeded@spot/*/*".into()));
    w.write_cluster(&mixed(w.cluster_yaml(9, "t3.large")));
    w.ok(&["apply", "mixed", "--yes"]);
    assert_eq!(markets(&w), (6, 3));
}

/// Ownership is checked on each resource: two clusters in one account
/// and region, and destroying one leaves the other's NAT gateways (moto's
/// DescribeNatGateways ignores `tag:` filters: a destroy that trusted the
/// filter alone deleted the other cluster's NATs).
#[test]
fn destroying_one_cluster_leaves_anothers_nat_gateways() {
    let mut w = World::new("keepnat", 2);
    w.write_cluster(&w.cluster_yaml(1, "t3.large"));
    w.ok(&["bootstrap", "keepnat", "--yes"]);
    let first = w.cluster.clone();
    w.cluster = "othernat".into();
    let yaml = w
        .cluster_yaml(1, "t3.large")
        .replace(
            &format!("s3://pf-test-{}-othernat/clusters", w.account),
            &format!("s3://pf-test-{}-{first}/clusters", w.account),
        )
        .replace("10.10.", "10.20.");
    w.write_cluster(&yaml);
    w.ok(&["bootstrap", "othernat", "--yes"]);
    w.ok(&["destroy", "othernat", "--yes"]);
    w.cluster = first;
    let out = w.run(&["plan", "keepnat", "--detailed-exitcode"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "the other cluster's destroy changed this one:\n{text}\n{}", stderr(&out));
}

/// The accelerated types' facts are EC2's own: every type pinfleet chooses
/// from has, in DescribeInstanceTypes (moto serves EC2's data), the vCPUs,
/// memory, device count, device name and each device's memory in MiB the
/// table holds (an A10G's 22,888 MiB, not "24 GB").
#[test]
fn the_accelerated_types_are_as_describe_instance_types_lists_them() {
    let w = World::new("gpufacts", 1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let aws = rt.block_on(w.aws());
    for s in pinfleet::accelerated::SHAPES {
        let out = rt
            .block_on(
                aws.ec2
                    .describe_instance_types()
                    .instance_types(aws_sdk_ec2::types::InstanceType::from(s.instance_type))
                    .send(),
            )
            .unwrap();
        let t = out.instance_types().first().unwrap_or_else(|| panic!("EC2 lists no {}", s.instance_type));
        let vcpu = t.v_cpu_info().and_then(|v| v.default_v_cpus()).unwrap_or_default();
        let mib = t.memory_info().and_then(|m| m.size_in_mib()).unwrap_or_default();
        assert_eq!((vcpu as u32, (mib / 1024) as u32), (s.vcpu, s.memory_gib), "{}: vCPUs and memory", s.instance_type);
        let (count, name, device) = match (t.gpu_info(), t.neuron_info()) {
            (Some(g), _) => {
                let d = g.gpus().first().unwrap();
                (
                    d.count().unwrap_or_default(),
                    d.name().unwrap_or_default().to_string(),
                    d.memory_info().and_then(|m| m.size_in_mib()).unwrap_or_default(),
                )
            }
            (None, Some(n)) => {
                let d = n.neuron_devices().first().unwrap();
                (
                    d.count().unwrap_or_default(),
                    d.name().unwrap_or_default().to_string(),
                    d.memory_info().and_then(|m| m.size_in_mib()).unwrap_or_default(),
                )
            }
            (None, None) => panic!("{}: EC2 lists no accelerator", s.instance_type),
        };
        assert_eq!(
            (count as u32, name.as_str(), device as u32),
            (s.count, s.product.as_str(), s.device_memory_mib),
            "{}: devices, their name and each one's memory in MiB",
            s.instance_type
        );
    }
}
