//! `pinfleet adopt`, the real binary against a kops cluster as kops leaves
//! it on AWS (moto, [`kops`]), and the file `import kops` wrote of it. A dry
//! run writes nothing; a resource another tool manages refuses the whole
//! adopt until named; `--yes` takes over the PKI, records the claims in
//! pinfleet's state store and tags each resource (nothing replaced); the
//! plan after it creates only what kops never made; a second adopt is a
//! no-op. Then the node groups roll onto pinfleet's machines (killed mid-roll
//! and run again), kops's Auto Scaling groups going as they empty.

#[path = "support/kops.rs"]
mod kops_fixture;
mod support;

use std::collections::BTreeMap;

use kops_fixture::{kops_on_moto, tags_of, KOPS_NAME};
use support::import_kops_prod as import_prod;

#[tokio::test(flavor = "multi_thread")]
async fn a_running_kops_cluster_is_claimed_in_place_and_a_second_adopt_changes_nothing() {
    let w = support::World::new("kops-adopt", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    // kops's nodes group runs 4 (its autoscaler's doing); the file says 3.
    let kops = kops_on_moto(&aws, 4).await;
    import_prod(&w, &aws, &bucket, 3).await;

    // A dry run: what it would claim, the group Terraform manages refused,
    // nothing written.
    let o = w.run(&["adopt", "prod"]);
    let out = support::stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}\n{}", support::stderr(&o));
    let row = |id: &str, key: &str| out.lines().any(|l| l.contains(id) && l.split_whitespace().any(|w| w == key));
    for (id, key) in [
        (kops.vpc.as_str(), "vpc"),
        (kops.subnets["us-east-1a"].as_str(), "subnet/us-east-1a"),
        (kops.public_rt.as_str(), "rt/public"),
        (kops.private_rt.as_str(), "rt/private-us-east-1a"),
        (kops.masters_sg.as_str(), "sg/control-plane"),
    ] {
        assert!(row(id, key), "{id} is not claimed as {key}:\n{out}");
    }
    for want in [
        "Terraform manages it (terraform=true)",
        "Terraform manages it (terraform=true): a change here would be undone by its next apply; nothing in the file matches it: left as it is",
        "nothing was written",
        "etcd-manager's data",
        &kops.groups[1],
        "trust: kops's kubernetes-ca, apiserver-aggregator-ca, service-account, secrets/encryptionconfig from",
        "the Secrets' encryption keys key1 (aescbc) from secrets/encryptionconfig, kops's writing key first",
    ] {
        assert!(out.contains(want), "`{want}` not in:\n{out}");
    }
    assert!(!tags_of(&aws.ec2, &kops.vpc).await.contains_key("pinfleet.dev/cluster"), "a dry run tags nothing");
    assert!(aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.is_err());

    // kops's keysets are read before anything is written: one missing
    // stops the adopt, naming where kops keeps it.
    let file = w.clusters_dir().join("prod.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let copy = w.dir.path().join("kops-copy");
    let fixture = format!("{}/tests/fixtures/kops/{KOPS_NAME}", env!("CARGO_MANIFEST_DIR"));
    let status = std::process::Command::new("cp").args(["-r", &fixture, copy.to_str().unwrap()]).status().unwrap();
    assert!(status.success());
    std::fs::remove_dir_all(copy.join("pki/private/service-account")).unwrap();
    let imported_from = format!("pinfleet.dev/imported-from: file://{fixture}");
    assert!(text.contains(&imported_from), "{text}");
    let elsewhere =
        format!("pinfleet.dev/imported-from: file://{}", copy.to_str().unwrap().replace("kops-copy", KOPS_NAME));
    std::fs::rename(&copy, w.dir.path().join(KOPS_NAME)).unwrap();
    std::fs::write(&file, text.replace(&imported_from, &elsewhere)).unwrap();
    let o = w.run(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("pki/private/service-account/keyset.yaml: missing"), "{err}");
    assert!(aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.is_err());
    assert!(!tags_of(&aws.ec2, &kops.vpc).await.contains_key("pinfleet.dev/cluster"), "nothing tagged");
    // A state of prod holding another CA is another cluster: refused.
    std::fs::write(&file, &text).unwrap();
    let mut bundle = serde_json::json!({"ca_cert": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"});
    for k in ["ca_key", "front_proxy_ca_cert", "front_proxy_ca_key", "sa_key", "sa_pub", "admin_cert", "admin_key"]
        .into_iter()
        .chain(["join_token", "certificate_key", "ca_cert_hash"])
    {
        bundle[k] = "".into();
    }
    let put =
        |body: Vec<u8>| aws.s3.put_object().bucket(&bucket).key("pinfleet/prod/pki/bundle.json").body(body.into());
    put(serde_json::to_vec(&bundle).unwrap()).send().await.unwrap();
    let o = w.run(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("holds another cluster CA than kops's"), "{err}");
    assert!(!tags_of(&aws.ec2, &kops.vpc).await.contains_key("pinfleet.dev/cluster"), "nothing tagged");
    aws.s3.delete_object().bucket(&bucket).key("pinfleet/prod/pki/bundle.json").send().await.unwrap();

    // Killed after its first tag (as a machine losing power would), the
    // adopt is run again and finishes: the tag already there is no change,
    // the PKI it wrote is this cluster's own.
    let killed = w
        .command(&["adopt", "prod", "--yes", "--take", &kops.managed_sg])
        .env(pinfleet::etcd::FAILPOINT_VAR, "adopt:tagging")
        .output()
        .unwrap();
    assert_eq!(killed.status.code(), Some(pinfleet::etcd::FAILPOINT_EXIT), "{}", support::stderr(&killed));
    assert!(aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/pki/bundle.json").send().await.is_ok());

    // Named, the managed group is claimed too; --yes records and tags.
    let json = w.json(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    assert!(json["refused"].as_array().unwrap().is_empty(), "{json:#}");
    let vpc = tags_of(&aws.ec2, &kops.vpc).await;
    assert_eq!(vpc.get("pinfleet.dev/cluster").map(String::as_str), Some("prod"), "{vpc:?}");
    assert_eq!(vpc.get("pinfleet.dev/resource").map(String::as_str), Some("vpc"), "{vpc:?}");
    assert_eq!(vpc.get("KubernetesCluster").map(String::as_str), Some(KOPS_NAME), "kops's tags stay: {vpc:?}");
    let sub = tags_of(&aws.ec2, &kops.subnets["utility-us-east-1b"]).await;
    assert_eq!(sub.get("pinfleet.dev/resource").map(String::as_str), Some("subnet/utility-us-east-1b"));
    let rt = tags_of(&aws.ec2, &kops.private_rt).await;
    assert_eq!(rt.get("pinfleet.dev/resource").map(String::as_str), Some("rt/private-us-east-1a"));
    for (id, group) in kops.machines.iter().zip([
        "control-plane-us-east-1a",
        "control-plane-us-east-1b",
        "control-plane-us-east-1c",
        "nodes",
        "nodes",
        "nodes",
        "nodes",
    ]) {
        let t = tags_of(&aws.ec2, id).await;
        assert_eq!(t.get("pinfleet.dev/instance-group").map(String::as_str), Some(group), "{id}: {t:?}");
    }
    // The trust came along: pinfleet's PKI for prod is kops's CA.
    let pki = aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/pki/bundle.json").send().await.unwrap();
    let pki: serde_json::Value = serde_json::from_slice(&pki.body.collect().await.unwrap().to_vec()).unwrap();
    let keyset = std::fs::read_to_string(format!(
        "{}/tests/fixtures/kops/{KOPS_NAME}/pki/private/kubernetes-ca/keyset.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let kops_ca = pki["ca_cert"].as_str().unwrap();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(kops_ca);
    assert!(keyset.contains(&format!("publicMaterial: {encoded}")), "pinfleet's CA is not kops's");
    // kops's Secrets' key came along, ahead of pinfleet's own: the new API
    // servers write with kops's key and read every Secret kops's wrote.
    let keys = pki["encryption_keys"].as_array().unwrap();
    assert_eq!((keys.len(), &keys[0]["name"], &keys[0]["provider"]), (2, &"key1".into(), &"aescbc".into()), "{keys:?}");
    assert!(keys[1].get("provider").is_none(), "pinfleet's own, secretbox, reads: {keys:?}");
    let record = aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.unwrap();
    let record: serde_json::Value = serde_json::from_slice(&record.body.collect().await.unwrap().to_vec()).unwrap();
    assert_eq!(record["kopsName"], KOPS_NAME);
    assert_eq!(record["claims"]["roll"].as_array().unwrap().len(), 7, "{record:#}");
    // Nothing was replaced: the same VPC, subnets and machines, all running.
    let vpcs = aws.ec2.describe_vpcs().vpc_ids(&kops.vpc).send().await.unwrap();
    assert_eq!(vpcs.vpcs().len(), 1);
    let live = aws.ec2.describe_instances().set_instance_ids(Some(kops.machines.clone())).send().await.unwrap();
    let states: Vec<_> = live
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| i.state().unwrap().name().unwrap().as_str().to_string())
        .collect();
    assert_eq!(states, ["running"; 7]);

    // After the adopt, the plan: nothing replaced, the machines to roll.
    // Only what kops never made is created (pinfleet's launch templates,
    // IAM roles, interruption queue): nothing that exists is changed,
    // replaced or deleted — not the load balancer, not kops's rules, not
    // the machine beyond the file's size (the roll leaves 3 of pinfleet's).
    let plan = w.json(&["plan", "prod"]);
    for c in plan["changes"].as_array().unwrap() {
        let key = c["key"].as_str().unwrap();
        assert_eq!(c["action"], "create", "{key} is changed after the adopt: {c:#}");
        assert!(
            ["lt/", "iam-role/", "instance-profile/", "role-policy/", "events/"].iter().any(|p| key.starts_with(p)),
            "{key} is created though kops's exists: {c:#}"
        );
    }
    let text = w.ok(&["plan", "prod"]);
    for (group, n) in [("control-plane-us-east-1a", 1), ("nodes", 4)] {
        assert!(text.contains(&format!("  {group}: {n} instance(s) on an older launch-template version")), "{text}");
    }

    let lb = aws.elb.describe_tags().resource_arns(&kops.lb).resource_arns(&kops.api_tg).send().await.unwrap();
    for d in lb.tag_descriptions() {
        let has = |k: &str, v: &str| d.tags().iter().any(|t| t.key() == Some(k) && t.value() == Some(v));
        assert!(has("pinfleet.dev/cluster", "prod"), "{d:?}");
    }

    // A second adopt: nothing to do (the group Terraform manages too was
    // named the first time: it is this cluster's now, and needs no --take).
    let out = w.ok(&["adopt", "prod", "--yes"]);
    assert!(out.contains("prod is adopted already: nothing to do"), "{out}");

    // A kops etcd of fewer than 3 members (a control plane of one) is not
    // rolled: its one volume moving would stop the API. Refused before
    // the first call that changes anything, naming the node groups' way.
    let key = "pinfleet/prod/adopt/etcd-manager.json";
    let got = aws.s3.get_object().bucket(&bucket).key(key).send().await.unwrap();
    let taken = got.body.collect().await.unwrap().to_vec();
    let mut one: serde_json::Value = serde_json::from_slice(&taken).unwrap();
    assert_eq!(one["members"]["main"].as_array().map(Vec::len), Some(3), "{one:#}");
    for c in ["main", "events"] {
        one["members"][c] = serde_json::json!(["control-plane-us-east-1a"]);
    }
    put_json(&aws, &bucket, key, &one).await;
    let err = refused(&w, &["upgrade", "prod", "--yes"]);
    assert!(err.contains("its etcd main has 1 member(s)"), "{err}");
    assert!(
        err.contains(
            "roll the node groups: `pinfleet upgrade prod --yes --instance-group batch --instance-group nodes`"
        ),
        "{err}"
    );
    assert!(err.contains("Nothing was changed"), "{err}");
    let live = aws.ec2.describe_instances().set_instance_ids(Some(kops.machines.clone())).send().await.unwrap();
    let running = live
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .filter(|i| i.state().and_then(|s| s.name()) == Some(&aws_sdk_ec2::types::InstanceStateName::Running));
    assert_eq!(running.count(), 7, "nothing was stopped");
    // A record whose events cluster is short, or that names a member twice,
    // is refused as well.
    for (c, members) in [
        ("events", serde_json::json!(["control-plane-us-east-1a"])),
        (
            "main",
            serde_json::json!(["control-plane-us-east-1a", "control-plane-us-east-1a", "control-plane-us-east-1b"]),
        ),
    ] {
        let mut bad: serde_json::Value = serde_json::from_slice(&taken).unwrap();
        bad["members"][c] = members;
        put_json(&aws, &bucket, key, &bad).await;
        let err = refused(&w, &["upgrade", "prod", "--yes"]);
        assert!(err.contains(&format!("its etcd {c} ")) && err.contains("Nothing was changed"), "{err}");
    }
    // A group the file does not have: refused, not a roll of nothing.
    let o = w.run(&["upgrade", "prod", "--yes", "--instance-group", "nosuch"]);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("prod: no instance group nosuch (its groups: "), "{err}");
    aws.s3.put_object().bucket(&bucket).key(key).body(taken.clone().into()).send().await.unwrap();

    // A PKI without kops's Secrets' key (as an older adopt left it): the
    // control plane is refused, naming the key; the next adopt takes it.
    let bundle = "pinfleet/prod/pki/bundle.json";
    let mut without = get_json(&aws, &bucket, bundle).await;
    without["encryption_keys"].as_array_mut().unwrap().remove(0);
    put_json(&aws, &bucket, bundle, &without).await;
    let err = refused(&w, &["upgrade", "prod", "--yes"]);
    assert!(err.contains("lacks kops's Secrets' encryption key(s) key1, so its new API servers could not read the Secrets; `pinfleet adopt prod --yes` takes them"), "{err}");
    let out = w.ok(&["adopt", "prod", "--yes"]);
    assert!(
        out.contains("secrets/encryptionconfig from") && out.contains("(taken over now, into pinfleet's state)"),
        "{out}"
    );
    let back = get_json(&aws, &bucket, bundle).await;
    assert_eq!(back["encryption_keys"][0]["name"], "key1", "{}", back["encryption_keys"]);
    assert_eq!(back["encryption_keys"].as_array().unwrap().len(), 2);

    // kops rotates its Secrets' key after the adopt (a new key first): the
    // control plane's roll is refused, naming it, until an adopt takes it
    // (kops's new writing key first, then its old one, then pinfleet's).
    let rotated = w.dir.path().join("kops-rotated");
    std::fs::create_dir_all(&rotated).unwrap();
    let status = std::process::Command::new("cp").args(["-r", &fixture, rotated.to_str().unwrap()]).status().unwrap();
    assert!(status.success());
    let secret = rotated.join(KOPS_NAME).join("secrets/encryptionconfig");
    let held: serde_json::Value = serde_json::from_slice(&std::fs::read(&secret).unwrap()).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let config = String::from_utf8(b64.decode(held["Data"].as_str().unwrap()).unwrap()).unwrap();
    let fresh = b64.encode([7u8; 32]);
    let config =
        config.replace("        keys:\n", &format!("        keys:\n        - name: key2\n          secret: {fresh}\n"));
    std::fs::write(&secret, serde_json::json!({"Data": b64.encode(&config)}).to_string()).unwrap();
    let mut record: serde_json::Value = serde_json::from_slice(&taken).unwrap();
    record["from"] = format!("file://{}", rotated.join(KOPS_NAME).display()).into();
    put_json(&aws, &bucket, key, &record).await;
    let err = refused(&w, &["upgrade", "prod", "--yes"]);
    assert!(
        err.contains("kops's Secrets' keys changed since prod was adopted")
            && err.contains("now holds key2 (aescbc), which the PKI lacks"),
        "{err}"
    );
    assert!(!err.contains(&fresh), "no key shown: {err}");
    let out = w.ok(&["adopt", "prod", "--yes"]);
    assert!(out.contains("kops's Secrets' keys are now key2 (aescbc), key1 (aescbc)"), "{out}");
    let back = get_json(&aws, &bucket, bundle).await;
    let names: Vec<&str> =
        back["encryption_keys"].as_array().unwrap().iter().map(|k| k["name"].as_str().unwrap()).collect();
    assert_eq!(&names[..2], ["key2", "key1"], "{names:?}");
    assert_eq!(names.len(), 3);

    // A file that names no kops cluster is refused before any call.
    let o = w.run(&["adopt", "kops-adopt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("pinfleet.dev/kops-name"), "{}", support::stderr(&o));
}

#[tokio::test(flavor = "multi_thread")]
async fn kops_s_node_groups_roll_onto_pinfleet_machines_and_their_auto_scaling_groups_go() {
    let w = support::World::new("kops-roll", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let kops = kops_on_moto(&aws, 3).await;
    import_prod(&w, &aws, &bucket, 3).await;
    w.ok(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    // The running cluster: a Node for each of kops's machines.
    let kubeconfig = w.dir.path().join("prod-kubeconfig.yaml");
    let sim = w.node_sim("prod", &kubeconfig);
    let _sim = Killed(sim);
    for _ in 0..1200 {
        if kubeconfig.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let kc = kubeconfig.to_str().unwrap();
    // A service with a budget on kops's nodes: it stays available through the roll.
    let client = pinfleet::kube::client_from_kubeconfig(&kubeconfig, pinfleet::kube::Retry::Default).await.unwrap();
    let web = web(&client).await;
    let placed = |client: kube::Client| async move {
        let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, "default");
        let lp = kube::api::ListParams::default().labels("app=web");
        let list = pods.list(&lp).await.unwrap().items;
        list.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect::<Vec<String>>()
    };
    let before = placed(client.clone()).await;
    assert!(before.iter().all(|n| kops.machines[3..].contains(n)), "web is not on kops's nodes: {before:?}");
    let roll = |extra: &[&str]| {
        let mut a = vec!["upgrade", "prod", "--yes", "--kubeconfig", kc, "--validate-interval", "200ms", "--skip-e2e"];
        a.extend_from_slice(extra);
        w.run(&a)
    };

    // Without --yes: kops's nodes need the roll, and the way is said.
    let preview = w.run(&["upgrade", "prod", "--kubeconfig", kc, "-g", "nodes", "-o", "json"]);
    let groups: serde_json::Value = serde_json::from_slice(&preview.stdout).unwrap();
    assert_eq!(groups["groups"][0]["needsUpdate"], 3, "{groups:#}");
    // The node groups roll: kops's machines leave their Auto Scaling group
    // as they go, and the emptied groups and their launch templates are
    // deleted. Killed (-9) while it drains its second machine, and run again.
    let mut args = vec!["upgrade", "prod", "--yes", "--kubeconfig", kc, "--validate-interval", "200ms", "--skip-e2e"];
    args.extend(["--instance-group", "nodes", "--instance-group", "batch", "-o", "json"]);
    let mut child =
        w.command(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::null()).spawn().unwrap();
    use std::io::BufRead as _;
    let mut first = String::new();
    let mut draining = 0;
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        first.push_str(&line);
        first.push('\n');
        let e: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        draining += usize::from(e["event"] == "draining");
        if draining == 2 {
            break;
        }
    }
    assert_eq!(draining, 2, "the first run ended before its second drain:\n{first}");
    child.kill().unwrap();
    child.wait().unwrap();
    let o = roll(&["--instance-group", "nodes", "--instance-group", "batch"]);
    let err = support::stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(err.contains("which is no longer running"), "the killed run's lock is taken over:\n{err}");
    let on = placed(client.clone()).await;
    assert_eq!(on.len(), 3, "{on:?}");
    assert!(on.iter().all(|n| !kops.machines[3..].contains(n)), "web still on a node of kops's: {on:?}");
    let both = format!("{first}{err}");
    for want in [
        "kube-public/cluster-info created",
        "kube-system/kubelet-config created",
        "ClusterRoleBinding kubeadm:node-autoapprove-bootstrap created",
        &format!("Auto Scaling group nodes.{KOPS_NAME} is empty: deleted"),
        &format!("Auto Scaling group batch.{KOPS_NAME} is empty: deleted"),
    ] {
        assert!(both.contains(want), "`{want}` in neither run:\n{both}");
    }
    let live = aws.ec2.describe_instances().set_instance_ids(Some(kops.machines.clone())).send().await.unwrap();
    let states: Vec<String> = live
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| i.state().unwrap().name().unwrap().as_str().to_string())
        .collect();
    assert_eq!(&states[..3], ["running"; 3], "the control plane stays: {states:?}");
    assert!(states[3..].iter().all(|s| s == "terminated" || s == "shutting-down"), "kops's nodes: {states:?}");
    let nodes = w.json(&["get", "instances", "prod"]);
    let pinfleet_nodes: Vec<&serde_json::Value> =
        nodes.as_array().unwrap().iter().filter(|i| i["group"] == "nodes" && i["state"] == "running").collect();
    assert_eq!(pinfleet_nodes.len(), 3, "{nodes:#}");
    assert!(pinfleet_nodes.iter().all(|i| !kops.machines.contains(&i["id"].as_str().unwrap().to_string())));
    let groups = aws.autoscaling.describe_auto_scaling_groups().send().await.unwrap();
    let mut left: Vec<&str> = groups.auto_scaling_groups().iter().filter_map(|g| g.auto_scaling_group_name()).collect();
    left.sort();
    assert_eq!(
        left,
        [
            format!("control-plane-us-east-1a.{KOPS_NAME}"),
            format!("control-plane-us-east-1b.{KOPS_NAME}"),
            format!("control-plane-us-east-1c.{KOPS_NAME}")
        ],
        "only the control plane's groups are left"
    );
    // What kubeadm's joins read is in the cluster, cluster-info signed for the roll's token.
    let cm = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kube-public");
    let info = cm.get("cluster-info").await.unwrap();
    let data = info.data.unwrap();
    assert!(data.keys().any(|k| k.starts_with("jws-kubeconfig-")), "{data:?}");
    assert!(data["kubeconfig"].contains("server: https://api.prod.k8s.example.com:443"), "{data:?}");

    // Again: nothing left to roll, nothing of kops's node groups to delete.
    let o = roll(&["--instance-group", "nodes", "--instance-group", "batch"]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!(!support::stderr(&o).contains("is empty: deleted"), "{}", support::stderr(&o));

    // A member down (kops's machine in us-east-1b stopped): no machine of
    // the control plane is touched, and the roll says why.
    aws.ec2.stop_instances().instance_ids(&kops.machines[1]).send().await.unwrap();
    let o = roll(&[]);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is not taken down: etcd main: 1 of 3 members healthy without"), "{err}");
    assert!(err.contains("nothing of it was changed"), "{err}");
    let masters = aws.ec2.describe_instances().set_instance_ids(Some(kops.machines[..3].to_vec())).send().await;
    let states: Vec<String> = masters
        .unwrap()
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| i.state().unwrap().name().unwrap().as_str().to_string())
        .collect();
    assert!(!states.iter().any(|s| s == "terminated" || s == "shutting-down"), "{states:?}");
    aws.ec2.start_instances().instance_ids(&kops.machines[1]).send().await.unwrap();
    let pods = kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), "kube-system");
    let back = format!("etcd-manager-events-{}", kops.machines[1]);
    let nodes = kube::Api::<k8s_openapi::api::core::v1::Node>::all(client.clone());
    let ready = |n: Option<k8s_openapi::api::core::v1::Node>| {
        n.and_then(|n| n.status?.conditions).is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    for _ in 0..600 {
        let node = nodes.get_opt(&kops.machines[1]).await.ok().flatten();
        if pods.get_opt(&back).await.ok().flatten().is_some() && ready(node) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(pods.get_opt(&back).await.unwrap().is_some(), "{back} never came back");

    // The control plane: kops's machines go one at a time, and etcd-manager
    // on each replacement takes over the etcd volumes its machine let go
    // (main's and events'), in that zone; etcd keeps its quorum throughout.
    let o = roll(&[]);
    let err = support::stderr(&o);
    assert!(o.status.success(), "{err}");
    let (least, polls) = web.stop().await;
    assert!(polls > 20, "the service was hardly looked at ({polls} polls)");
    assert!(least >= 2, "the budget keeps 2 of web's 3 pods ready, and the API answers; {least} were at one time");
    for z in ["a", "b", "c"] {
        assert!(
            err.contains(&format!("Auto Scaling group control-plane-us-east-1{z}.{KOPS_NAME} is empty: deleted")),
            "{err}"
        );
    }
    let groups = aws.autoscaling.describe_auto_scaling_groups().send().await.unwrap();
    assert!(groups.auto_scaling_groups().is_empty(), "nothing of kops's groups is left");
    let live = aws.ec2.describe_instances().set_instance_ids(Some(kops.machines[..3].to_vec())).send().await.unwrap();
    for i in live.reservations().iter().flat_map(|r| r.instances()) {
        let state = i.state().unwrap().name().unwrap().as_str();
        assert!(state == "terminated" || state == "shutting-down", "kops's control plane: {state}");
    }
    let nodes = w.json(&["get", "instances", "prod"]);
    let control_plane: Vec<(String, String)> = nodes
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["group"].as_str().unwrap_or_default().starts_with("control-plane") && i["state"] == "running")
        .map(|i| (i["id"].as_str().unwrap().to_string(), i["zone"].as_str().unwrap_or_default().to_string()))
        .collect();
    assert_eq!(control_plane.len(), 3, "{nodes:#}");
    let volumes = aws
        .ec2
        .describe_volumes()
        .filters(aws_sdk_ec2::types::Filter::builder().name("tag:k8s.io/role/control-plane").values("1").build())
        .send()
        .await
        .unwrap();
    assert_eq!(volumes.volumes().len(), 6, "main's and events' three members each");
    for v in volumes.volumes() {
        let on = v.attachments().first().and_then(|a| a.instance_id()).unwrap_or_default().to_string();
        let zone = v.availability_zone().unwrap();
        assert!(
            control_plane.iter().any(|(id, z)| *id == on && (z.is_empty() || z == zone)),
            "{} is on {on}, none of pinfleet's control plane in {zone}: {control_plane:?}",
            v.volume_id().unwrap()
        );
    }
    // The joins ran kubeadm's configuration with etcd-manager's etcd.
    let cm = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kube-system");
    let config = cm.get("kubeadm-config").await.unwrap().data.unwrap()["ClusterConfiguration"].clone();
    assert!(config.contains("- https://127.0.0.1:4001"), "{config}");
    assert!(config.contains("/events#https://127.0.0.1:4002"), "{config}");
    // The new API servers were given kops's Secrets' key first (it writes),
    // pinfleet's own after it.
    let got = aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/machine/pki/encryption-config.yaml").send().await;
    let enc = String::from_utf8(got.unwrap().body.collect().await.unwrap().to_vec()).unwrap();
    let providers = enc.split_once("    providers:\n").unwrap().1;
    assert!(providers.starts_with("      - aescbc:\n          keys:\n            - name: key1\n"), "{enc}");
    assert!(providers.contains("      - secretbox:\n") && providers.ends_with("      - identity: {}\n"), "{enc}");
    // Again: nothing to roll, and a second adopt changes nothing.
    let o = roll(&[]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!(!support::stderr(&o).contains("is empty: deleted"), "{}", support::stderr(&o));
}

/// A Deployment of 3 (`web`) with a budget of 2 available, its pods' Ready
/// count polled every 50 ms from then on.
struct Web {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(usize, usize)>,
}

impl Web {
    /// The fewest Ready pods seen, and how many polls saw them.
    async fn stop(self) -> (usize, usize) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.unwrap()
    }
}

async fn web(client: &kube::Client) -> Web {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::Pod, policy::v1::PodDisruptionBudget};
    let pp = Default::default();
    let deploy: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
    }))
    .unwrap();
    kube::Api::<Deployment>::namespaced(client.clone(), "default").create(&pp, &deploy).await.unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .unwrap();
    kube::Api::<PodDisruptionBudget>::namespaced(client.clone(), "default").create(&pp, &pdb).await.unwrap();
    let pods = kube::Api::<Pod>::namespaced(client.clone(), "default");
    let ready = move |pods: kube::Api<Pod>| async move {
        let lp = kube::api::ListParams::default().labels("app=web");
        let list = pods.list(&lp).await.map(|l| l.items).unwrap_or_default();
        list.iter()
            .filter(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count()
    };
    for _ in 0..600 {
        if ready(pods.clone()).await == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(ready(pods.clone()).await, 3, "web never had 3 ready pods");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let (mut least, mut polls) = (usize::MAX, 0);
        while !flag.load(std::sync::atomic::Ordering::SeqCst) {
            least = least.min(ready(pods.clone()).await);
            polls += 1;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        (least, polls)
    });
    Web { stop, task }
}

/// A child process killed (and reaped) on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A cluster made by hand with kubeadm on EC2, on moto: a VPC with a public
/// and two private subnets, a NAT gateway, security groups of its own for
/// the control plane and the workers, and machines tagged `cluster=lab`
/// (one control plane, two workers, and a tagged machine that is no Node).
struct Lab {
    vpc: String,
    control_plane: String,
    workers: Vec<String>,
    stray: String,
}

async fn kubeadm_on_moto(aws: &pinfleet::cloud::aws::Aws) -> Lab {
    use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};
    let ec2 = &aws.ec2;
    let named = |rt: ResourceType, name: &str| {
        TagSpecification::builder().resource_type(rt).tags(Tag::builder().key("Name").value(name).build()).build()
    };
    let vpc = ec2.create_vpc().cidr_block("10.0.0.0/16").tag_specifications(named(ResourceType::Vpc, "lab")).send();
    let vpc = vpc.await.unwrap().vpc().unwrap().vpc_id().unwrap().to_string();
    let subnet = |cidr: &'static str, zone: &'static str| {
        let vpc = vpc.clone();
        async move {
            let s = ec2.create_subnet().vpc_id(vpc).cidr_block(cidr).availability_zone(zone).send().await.unwrap();
            s.subnet().unwrap().subnet_id().unwrap().to_string()
        }
    };
    let public = subnet("10.0.0.0/24", "us-east-1a").await;
    let private_a = subnet("10.0.1.0/24", "us-east-1a").await;
    let private_b = subnet("10.0.2.0/24", "us-east-1b").await;
    let igw = ec2.create_internet_gateway().send().await.unwrap();
    let igw = igw.internet_gateway().unwrap().internet_gateway_id().unwrap().to_string();
    ec2.attach_internet_gateway().internet_gateway_id(&igw).vpc_id(&vpc).send().await.unwrap();
    let rt = ec2.create_route_table().vpc_id(&vpc).send().await.unwrap();
    let rt = rt.route_table().unwrap().route_table_id().unwrap().to_string();
    ec2.create_route().route_table_id(&rt).destination_cidr_block("0.0.0.0/0").gateway_id(&igw).send().await.unwrap();
    ec2.associate_route_table().route_table_id(&rt).subnet_id(&public).send().await.unwrap();
    let eip = ec2.allocate_address().domain(aws_sdk_ec2::types::DomainType::Vpc).send().await.unwrap();
    let nat = ec2.create_nat_gateway().subnet_id(&public).allocation_id(eip.allocation_id().unwrap()).send();
    let nat = nat.await.unwrap().nat_gateway().unwrap().nat_gateway_id().unwrap().to_string();
    let private_rt = ec2.create_route_table().vpc_id(&vpc).send().await.unwrap();
    let private_rt = private_rt.route_table().unwrap().route_table_id().unwrap().to_string();
    let route = ec2.create_route().route_table_id(&private_rt).destination_cidr_block("0.0.0.0/0");
    route.nat_gateway_id(&nat).send().await.unwrap();
    for s in [&private_a, &private_b] {
        ec2.associate_route_table().route_table_id(&private_rt).subnet_id(s).send().await.unwrap();
    }
    let sg = |name: &'static str| {
        let vpc = vpc.clone();
        async move {
            let g = ec2.create_security_group().group_name(name).description(name).vpc_id(vpc).send().await.unwrap();
            g.group_id().unwrap().to_string()
        }
    };
    let (cp_sg, workers_sg) = (sg("lab-control-plane").await, sg("lab-workers").await);
    // What a hand-made cluster tends to allow: everything inside the VPC,
    // and the API from anywhere.
    use aws_sdk_ec2::types::{IpPermission, IpRange};
    let all_from_vpc =
        IpPermission::builder().ip_protocol("-1").ip_ranges(IpRange::builder().cidr_ip("10.0.0.0/16").build()).build();
    let api = IpPermission::builder()
        .ip_protocol("tcp")
        .from_port(6443)
        .to_port(6443)
        .ip_ranges(IpRange::builder().cidr_ip("0.0.0.0/0").build())
        .build();
    let ingress = |g: &String, rules: Vec<IpPermission>| {
        ec2.authorize_security_group_ingress().group_id(g).set_ip_permissions(Some(rules)).send()
    };
    ingress(&cp_sg, vec![all_from_vpc.clone(), api]).await.unwrap();
    ingress(&workers_sg, vec![all_from_vpc]).await.unwrap();
    let image = support::canonical_image(aws).await;
    let launch = |t: &'static str, subnet: String, sg: String, name: &'static str| {
        let image = image.clone();
        async move {
            let tags = TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(Tag::builder().key("cluster").value("lab").build())
                .tags(Tag::builder().key("Name").value(name).build())
                .build();
            let out = ec2
                .run_instances()
                .image_id(image)
                .instance_type(t.into())
                .min_count(1)
                .max_count(1)
                .subnet_id(subnet)
                .security_group_ids(sg)
                .tag_specifications(tags)
                .send()
                .await
                .unwrap();
            out.instances()[0].instance_id().unwrap().to_string()
        }
    };
    let control_plane = launch("m6i.large", private_a.clone(), cp_sg.clone(), "lab-cp-0").await;
    let workers = vec![
        launch("m6i.xlarge", private_a.clone(), workers_sg.clone(), "lab-worker-0").await,
        launch("m6i.xlarge", private_b.clone(), workers_sg.clone(), "lab-worker-1").await,
    ];
    let stray = launch("t3.micro", public.clone(), workers_sg.clone(), "lab-jumpbox").await;
    Lab { vpc, control_plane, workers, stray }
}

/// The lab's kubeadm ClusterConfiguration, as `kubeadm init` left it.
const LAB_KUBEADM: &str = "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nkubernetesVersion: v1.33.4\nclusterName: lab\ncontrolPlaneEndpoint: api.lab.example.com:6443\nnetworking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\napiServer:\n  extraArgs:\n  - name: audit-log-maxage\n    value: \"30\"\n";

/// What the running cluster's API shows: kubeadm's ClusterConfiguration
/// and a Node per machine kubeadm joined (named by its private DNS name,
/// its providerID the machine's).
async fn kubeadm_api(client: &kube::Client, lab: &Lab) {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    let pp = Default::default();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": LAB_KUBEADM}
    }))
    .unwrap();
    kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system").create(&pp, &cm).await.unwrap();
    let nodes = kube::Api::<Node>::all(client.clone());
    let mut machines = vec![(&lab.control_plane, "us-east-1a", true)];
    machines.extend(lab.workers.iter().zip(["us-east-1a", "us-east-1b"]).map(|(id, z)| (id, z, false)));
    for (i, (id, zone, cp)) in machines.into_iter().enumerate() {
        let mut labels = serde_json::json!({"kubernetes.io/os": "linux", "example.com/pool": "general"});
        if cp {
            labels["node-role.kubernetes.io/control-plane"] = "".into();
        }
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("ip-10-0-1-{}.ec2.internal", 10 + i), "labels": labels},
            "spec": {"providerID": format!("aws:///{zone}/{id}")}
        }))
        .unwrap();
        nodes.create(&pp, &node).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_made_with_kubeadm_on_ec2_is_imported_from_ec2_and_its_api_then_adopted_in_place() {
    let w = support::World::new("kubeadm-lab", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let lab = kubeadm_on_moto(&aws).await;
    // The running cluster's API (a sim holding what kubeadm left there).
    let kubeconfig = w.dir.path().join("lab-kubeconfig.yaml");
    let kc = kubeconfig.to_str().unwrap();
    let _api = Killed(w.command(&["sim", "--kubeconfig", kc]).stdout(std::process::Stdio::null()).spawn().unwrap());
    for _ in 0..1200 {
        if kubeconfig.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let client = pinfleet::kube::client_from_kubeconfig(&kubeconfig, pinfleet::kube::Retry::Default).await.unwrap();

    // Not a kubeadm cluster (yet): refused, nothing written.
    let file = w.clusters_dir().join("lab.yaml");
    let file_arg = file.to_str().unwrap();
    let state = format!("s3://{bucket}/pinfleet");
    let import = |extra: &[&str]| {
        let mut a = vec!["import", "aws", "--tag", "cluster=lab", "--kubeconfig", kc, "--state-store", &state];
        a.extend_from_slice(&["--owner", "platform", "--out", file_arg]);
        a.extend_from_slice(extra);
        w.run(&a)
    };
    let o = import(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("kube-system/kubeadm-config: no such ConfigMap"), "{}", support::stderr(&o));
    assert!(!file.exists());
    let o = w.run(&["import", "aws", "--tag", "cluster", "--kubeconfig", kc, "--state-store", &state]);
    assert!(support::stderr(&o).contains("give the machines' tag as KEY=VALUE"), "{}", support::stderr(&o));

    kubeadm_api(&client, &lab).await;
    let o = import(&[]);
    let err = support::stderr(&o);
    assert!(o.status.success(), "{err}");
    for want in [
        "ClusterConfiguration.apiServer.extraArgs: pinfleet runs kubeadm's flags",
        &format!("EC2 (tag cluster=lab): {}: no Node of the cluster runs on it", lab.stray),
        "2 kubeadm or EC2 setting(s) not carried over",
    ] {
        assert!(err.contains(want), "`{want}` not said:\n{err}");
    }
    w.ok(&["validate", file_arg]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("dnsName: api.lab.example.com"), "{text}");
    let mut workers = lab.workers.clone();
    workers.sort();
    assert!(text.contains(&format!("control-plane={} nodes={}", lab.control_plane, workers.join(","))), "{text}");

    // adopt: kubeadm's PKI is needed (it lives on the control plane's disk).
    let o = w.run(&["adopt", "lab"]);
    assert!(support::stderr(&o).contains("--pki DIR is needed"), "{}", support::stderr(&o));
    let pki = format!("{}/tests/fixtures/kubeadm/pki", env!("CARGO_MANIFEST_DIR"));
    let dry = w.json(&["adopt", "lab", "--pki", &pki]);
    assert!(dry["refused"].as_array().unwrap().is_empty(), "{dry:#}");
    let keys: Vec<&str> = dry["claim"].as_array().unwrap().iter().map(|c| c["key"].as_str().unwrap()).collect();
    for want in ["vpc", "subnet/public-us-east-1a", "subnet/private-us-east-1b", "igw", "sg/control-plane", "sg/nodes"]
    {
        assert!(keys.contains(&want), "{want} not claimed: {keys:?}");
    }
    let roll: Vec<&str> = dry["roll"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(roll.len(), 3, "{dry:#}");
    let left = dry["left"].to_string();
    assert!(left.contains(&lab.stray) && left.contains("not among the machines the import recorded"), "{left}");
    let vpc = tags_of(&aws.ec2, &lab.vpc).await;
    assert!(!vpc.contains_key("pinfleet.dev/cluster"), "a dry run tagged the VPC: {vpc:?}");

    w.ok(&["adopt", "lab", "--yes", "--pki", &pki]);
    let vpc = tags_of(&aws.ec2, &lab.vpc).await;
    assert_eq!(vpc.get("pinfleet.dev/adopted-from").map(String::as_str), Some("ec2:cluster=lab"), "{vpc:?}");
    let stray = tags_of(&aws.ec2, &lab.stray).await;
    assert!(!stray.contains_key("pinfleet.dev/cluster"), "the machine that is no Node was claimed: {stray:?}");
    let bundle = aws.s3.get_object().bucket(&bucket).key("pinfleet/lab/pki/bundle.json").send().await.unwrap();
    let bundle: serde_json::Value = serde_json::from_slice(&bundle.body.collect().await.unwrap().to_vec()).unwrap();
    let ca = std::fs::read_to_string(format!("{pki}/ca.crt")).unwrap();
    assert_eq!(bundle["ca_cert"].as_str().unwrap().trim(), ca.trim(), "pinfleet's CA is not kubeadm's");

    // plan: nothing that exists is changed (kubeadm's rules already allow
    // what pinfleet's groups need); the API gets a load balancer of its
    // own, new, with the running control plane behind it; the three
    // machines need the roll.
    let plan = w.json(&["plan", "lab"]);
    let changes = plan["changes"].as_array().unwrap();
    for c in changes {
        if c["key"] == "targets" {
            let tg = changes.iter().find(|x| x["key"] == "tg").unwrap();
            assert_eq!(tg["action"], "create", "the target group it registers with is new: {tg:#}");
            continue;
        }
        assert_eq!(c["action"], "create", "{} is changed after the adopt: {c:#}", c["key"]);
        // The private subnets share a table the file does not describe:
        // their routing stays, and no NAT gateway is made for nothing.
        let key = c["key"].as_str().unwrap();
        assert!(!["rt/", "nat/", "eip/"].iter().any(|p| key.starts_with(p)), "{key}: the routing is changed");
    }
    let text = w.ok(&["plan", "lab"]);
    assert!(text.contains("  nodes: 2 instance(s) on an older launch-template version"), "{text}");
    // Again: nothing to do, and no --pki needed now.
    let out = w.ok(&["adopt", "lab"]);
    assert!(out.contains("lab is adopted already: nothing to do"), "{out}");
    // etcd's CA came along (kubeadm's, so new control-plane machines join
    // its members). Without it in pinfleet's PKI (an older adopt), the
    // control plane's roll is refused by name, before any write.
    let etcd_ca = std::fs::read_to_string(format!("{pki}/etcd/ca.crt")).unwrap();
    assert_eq!(bundle["etcd_ca_cert"].as_str().unwrap().trim(), etcd_ca.trim(), "etcd's CA is not kubeadm's");
    let key = "pinfleet/lab/pki/bundle.json";
    // (An older adopt's PKI: etcd's CA pinfleet's own, any other CA here.)
    let mut without = bundle.clone();
    without.as_object_mut().unwrap().remove("etcd_ca_from");
    without["etcd_ca_cert"] = bundle["front_proxy_ca_cert"].clone();
    without["etcd_ca_key"] = bundle["front_proxy_ca_key"].clone();
    let put = |v: &serde_json::Value| {
        aws.s3.put_object().bucket(&bucket).key(key).body(serde_json::to_vec(v).unwrap().into()).send()
    };
    put(&without).await.unwrap();
    let o = w.run(&["upgrade", "lab", "--yes", "--kubeconfig", kc, "--skip-e2e"]);
    let err = support::stderr(&o);
    assert!(
        err.contains("lab was adopted from kubeadm on EC2 (machines tagged cluster=lab) without its etcd CA"),
        "{err}"
    );
    assert!(err.contains("--instance-group nodes"), "{err}");
    // A second adopt without --pki says only what the state holds.
    let out = w.ok(&["adopt", "lab"]);
    assert!(out.contains("trust: kubeadm's ca, front-proxy-ca, sa from"), "{out}");
    // The adopt the refusal names takes it now (and nothing else).
    let out = w.ok(&["adopt", "lab", "--yes", "--pki", &pki]);
    assert!(out.contains("trust: kubeadm's etcd/ca from"), "{out}");
    let got = get_json(&aws, &bucket, key).await;
    assert_eq!(got, bundle, "the PKI is not the first adopt's (etcd's CA kubeadm's, the rest kept)");
    // Once taken, another etcd CA in --pki is another cluster's: refused.
    let other = w.dir.path().join("other-pki");
    let status = std::process::Command::new("cp").args(["-r", &pki, other.to_str().unwrap()]).status().unwrap();
    assert!(status.success());
    for (from, to) in [("front-proxy-ca.crt", "etcd/ca.crt"), ("front-proxy-ca.key", "etcd/ca.key")] {
        std::fs::copy(other.join(from), other.join(to)).unwrap();
    }
    // Its members' peer certificate is not that CA's: refused for it.
    let o = w.run(&["adopt", "lab", "--yes", "--pki", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("etcd/peer.crt checked against etcd/ca.crt"), "{}", support::stderr(&o));
    // A whole other etcd (a CA and the peer certificate it signed).
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    std::fs::write(other.join("etcd/ca.crt"), params.self_signed(&ca_key).unwrap().pem()).unwrap();
    std::fs::write(other.join("etcd/ca.key"), ca_key.serialize_pem()).unwrap();
    let issuer = rcgen::Issuer::new(params, ca_key);
    let peer_key = rcgen::KeyPair::generate().unwrap();
    let peer = rcgen::CertificateParams::new(vec!["lab-cp-0".to_string()]).unwrap();
    std::fs::write(other.join("etcd/peer.crt"), peer.signed_by(&peer_key, &issuer).unwrap().pem()).unwrap();
    let o = w.run(&["adopt", "lab", "--yes", "--pki", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("holds another etcd CA than"), "{}", support::stderr(&o));

    // Its machines join by its own API name, the one its certificates
    // carry: without spec.api.dnsName nothing is planned, and another name
    // than kubeadm's controlPlaneEndpoint refuses the roll, nothing written.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("dnsName: api.lab.example.com", "")).unwrap();
    let o = w.run(&["plan", "lab"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("spec.api.dnsName is needed"), "{}", support::stderr(&o));
    std::fs::write(&file, text.replace("dnsName: api.lab.example.com", "dnsName: api.elsewhere.example.com")).unwrap();
    let o = w.run(&["upgrade", "lab", "--yes", "-g", "nodes", "--kubeconfig", kc, "--skip-e2e"]);
    assert_eq!(o.status.code(), Some(1));
    let err = support::stderr(&o);
    assert!(err.contains("spec.api.dnsName api.elsewhere.example.com is not the API name in kube-system/kubeadm-config (controlPlaneEndpoint api.lab.example.com:6443)"), "{err}");
    std::fs::write(&file, &text).unwrap();

    // The workers roll onto pinfleet's machines (a sim whose Nodes are the
    // machines, standing in for the cluster from here on); the control
    // plane and the machine that is no Node stay as they are.
    let nodes_kc = w.dir.path().join("lab-nodes-kubeconfig.yaml");
    let _nodes = Killed(w.node_sim("lab", &nodes_kc));
    for _ in 0..1200 {
        if nodes_kc.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let nkc = nodes_kc.to_str().unwrap();
    let o = w.run(&[
        "upgrade",
        "lab",
        "--yes",
        "--kubeconfig",
        nkc,
        "--validate-interval",
        "200ms",
        "--skip-e2e",
        "-g",
        "nodes",
    ]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    let mut ids = lab.workers.clone();
    ids.extend([lab.control_plane.clone(), lab.stray.clone()]);
    let live = aws.ec2.describe_instances().set_instance_ids(Some(ids.clone())).send().await.unwrap();
    let state: BTreeMap<String, String> = live
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| (i.instance_id().unwrap().to_string(), i.state().unwrap().name().unwrap().as_str().to_string()))
        .collect();
    for id in &lab.workers {
        assert!(matches!(state[id].as_str(), "terminated" | "shutting-down"), "worker {id}: {state:?}");
    }
    assert_eq!(state[&lab.control_plane], "running", "{state:?}");
    assert_eq!(state[&lab.stray], "running", "{state:?}");
    let now = w.json(&["get", "instances", "lab"]);
    let running: Vec<&serde_json::Value> =
        now.as_array().unwrap().iter().filter(|i| i["group"] == "nodes" && i["state"] == "running").collect();
    assert_eq!(running.len(), 2, "{now:#}");
    // The new machines join by the name kubeadm's certificates carry
    // (controlPlaneEndpoint), not by the load balancer pinfleet made.
    let lts = aws.ec2.describe_launch_templates().send().await.unwrap();
    let mut checked = 0;
    for lt in lts.launch_templates() {
        let lab = lt.tags().iter().any(|t| t.key() == Some("pinfleet.dev/cluster") && t.value() == Some("lab"));
        if !lab {
            continue;
        }
        let v = aws.ec2.describe_launch_template_versions().launch_template_id(lt.launch_template_id().unwrap());
        let v = v.versions("$Latest").send().await.unwrap();
        let data = v.launch_template_versions()[0].launch_template_data().unwrap();
        use base64::Engine as _;
        let ud = base64::engine::general_purpose::STANDARD.decode(data.user_data().unwrap()).unwrap();
        let ud = String::from_utf8_lossy(&ud);
        assert!(ud.contains("api.lab.example.com:6443") && !ud.contains("elb.amazonaws.com"), "{ud}");
        checked += 1;
    }
    assert_eq!(checked, 2, "the control plane's and the nodes' launch templates");

    // The control plane: new machines join the running one's etcd (the
    // adopted CAs), the old member is removed once they are in, then its
    // machine goes. First, a ClusterConfiguration naming a file only the
    // running machine holds (its Secrets' keys) refuses it, nothing changed.
    let nodes_client = pinfleet::kube::client_from_kubeconfig(&nodes_kc, pinfleet::kube::Retry::Default).await.unwrap();
    let cms = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(nodes_client.clone(), "kube-system");
    // (The sim standing in for the cluster holds kubeadm's configuration as the lab's was.)
    let doc = LAB_KUBEADM.to_string();
    let with_keys = doc.replacen(
        "  extraArgs:",
        "  extraArgs:\n  - name: encryption-provider-config\n    value: /etc/kubernetes/enc/enc.yaml",
        1,
    );
    assert_ne!(with_keys, doc, "{doc}");
    let set = |d: &str| {
        let patch = serde_json::json!({"data": {"ClusterConfiguration": d}});
        let cms = cms.clone();
        async move { cms.patch("kubeadm-config", &Default::default(), &kube::api::Patch::Merge(patch)).await.unwrap() }
    };
    set(&with_keys).await;
    let cp_roll = ["upgrade", "lab", "--yes", "--kubeconfig", nkc, "--validate-interval", "200ms", "--skip-e2e"];
    let o = w.run(&cp_roll);
    let err = support::stderr(&o);
    assert!(err.contains("encryption-provider-config=/etc/kubernetes/enc/enc.yaml"), "{err}");
    let live = aws.ec2.describe_instances().instance_ids(&lab.control_plane).send().await.unwrap();
    let cp_state = live.reservations()[0].instances()[0].state().unwrap().name().unwrap().as_str().to_string();
    assert_eq!(cp_state, "running", "a refused roll changed the control plane");
    set(&doc).await;
    // The preview says what `--yes` stands on: a verified etcd backup, and
    // where none runs, how to take one.
    let o = w.command(&["upgrade", "lab", "--kubeconfig", nkc]).env_remove("PINFLEET_SKIP_BACKUP").output().unwrap();
    let said = support::stderr(&o);
    assert!(said.contains("needs a verified etcd backup younger than"), "{said}");
    assert!(said.contains("`pinfleet etcd backup lab`"), "{said}");
    // (The sim runs no etcd to back up: the roll says it skips the backup.)
    let o = w.run(&cp_roll);
    let out = format!("{}{}", support::stdout(&o), support::stderr(&o));
    assert!(o.status.success(), "{out}");
    let live = aws.ec2.describe_instances().instance_ids(&lab.control_plane).send().await.unwrap();
    let cp_state = live.reservations()[0].instances()[0].state().unwrap().name().unwrap().as_str().to_string();
    assert!(matches!(cp_state.as_str(), "terminated" | "shutting-down"), "kubeadm's control plane: {cp_state}");
    let now = w.json(&["get", "instances", "lab"]);
    let cp: Vec<&serde_json::Value> =
        now.as_array().unwrap().iter().filter(|i| i["group"] == "control-plane" && i["state"] == "running").collect();
    assert_eq!(cp.len(), 1, "{now:#}");
    // etcd's members are the new machine's alone, read as the roll reads them.
    let members = pinfleet::kube::etcd::members(&nodes_client).await.unwrap();
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names.len(), 1, "{members:?}");
    assert!(members[0].healthy, "{members:?}");
    // Nothing of the tagged machines is left but the one that is no Node.
    let o = w.json(&["adopt", "lab"]);
    let roll = o["roll"].as_array().unwrap();
    assert!(roll.iter().all(|r| r["id"] != lab.control_plane.as_str()), "{o:#}");
}

/// A JSON object of the state bucket.
async fn get_json(aws: &pinfleet::cloud::aws::Aws, bucket: &str, key: &str) -> serde_json::Value {
    let got = aws.s3.get_object().bucket(bucket).key(key).send().await.unwrap();
    serde_json::from_slice(&got.body.collect().await.unwrap().to_vec()).unwrap()
}

/// Writes a JSON object of the state bucket (an operator's or a fault's edit).
async fn put_json(aws: &pinfleet::cloud::aws::Aws, bucket: &str, key: &str, v: &serde_json::Value) {
    aws.s3.put_object().bucket(bucket).key(key).body(serde_json::to_vec(v).unwrap().into()).send().await.unwrap();
}

/// A command that is refused (exit 1): its stderr.
fn refused(w: &support::World, args: &[&str]) -> String {
    let o = w.run(args);
    let err = support::stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    err
}
