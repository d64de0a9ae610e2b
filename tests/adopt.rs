//! `pinfleet adopt`, the real binary against a kops cluster as kops leaves
//! it on AWS (moto): its VPC, subnets, gateways, route tables, security
//! groups, machines, launch templates and etcd volumes, every one tagged
//! `KubernetesCluster=prod.k8s.example.com`, and the file `import kops`
//! wrote of it. A dry run writes nothing; a resource another tool manages
//! refuses the whole adopt until named; `--yes` records the claims in
//! pinfleet's state store and tags each resource (nothing replaced); a
//! second adopt is a no-op.

mod support;

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

const KOPS_NAME: &str = "prod.k8s.example.com";

fn kops_tags(rt: ResourceType, name: &str, extra: &[(&str, &str)]) -> TagSpecification {
    let mut b = TagSpecification::builder()
        .resource_type(rt)
        .tags(Tag::builder().key("KubernetesCluster").value(KOPS_NAME).build())
        .tags(Tag::builder().key(format!("kubernetes.io/cluster/{KOPS_NAME}")).value("owned").build())
        .tags(Tag::builder().key("Name").value(name).build());
    for (k, v) in extra {
        b = b.tags(Tag::builder().key(*k).value(*v).build());
    }
    b.build()
}

async fn tags_of(ec2: &aws_sdk_ec2::Client, id: &str) -> BTreeMap<String, String> {
    let f = aws_sdk_ec2::types::Filter::builder().name("resource-id").values(id).build();
    let out = ec2.describe_tags().filters(f).send().await.unwrap();
    out.tags().iter().map(|t| (t.key().unwrap().to_string(), t.value().unwrap_or_default().to_string())).collect()
}

/// What kops made: ids by role.
struct Kops {
    vpc: String,
    subnets: BTreeMap<String, String>,
    public_rt: String,
    private_rt: String,
    masters_sg: String,
    managed_sg: String,
    machines: Vec<String>,
    /// kops's Auto Scaling groups.
    groups: Vec<String>,
    /// The API's load balancer and target group (ARNs).
    lb: String,
    api_tg: String,
}

async fn kops_on_moto(aws: &pinfleet::cloud::aws::Aws) -> Kops {
    let (ec2, asg, elb) = (&aws.ec2, &aws.autoscaling, &aws.elb);
    use ResourceType as R;
    let vpc = ec2
        .create_vpc()
        .cidr_block("172.20.0.0/16")
        .tag_specifications(kops_tags(R::Vpc, KOPS_NAME, &[]))
        .send()
        .await
        .unwrap()
        .vpc()
        .unwrap()
        .vpc_id()
        .unwrap()
        .to_string();
    let mut subnets = BTreeMap::new();
    for (name, zone, cidr) in [
        ("us-east-1a", "us-east-1a", "172.20.32.0/19"),
        ("us-east-1b", "us-east-1b", "172.20.64.0/19"),
        ("us-east-1c", "us-east-1c", "172.20.96.0/19"),
        ("utility-us-east-1a", "us-east-1a", "172.20.0.0/22"),
        ("utility-us-east-1b", "us-east-1b", "172.20.4.0/22"),
        ("utility-us-east-1c", "us-east-1c", "172.20.8.0/22"),
    ] {
        let s = ec2
            .create_subnet()
            .vpc_id(&vpc)
            .cidr_block(cidr)
            .availability_zone(zone)
            .tag_specifications(kops_tags(R::Subnet, &format!("{name}.{KOPS_NAME}"), &[("SubnetType", "Private")]))
            .send()
            .await
            .unwrap();
        subnets.insert(name.to_string(), s.subnet().unwrap().subnet_id().unwrap().to_string());
    }
    let igw = ec2
        .create_internet_gateway()
        .tag_specifications(kops_tags(R::InternetGateway, KOPS_NAME, &[]))
        .send()
        .await
        .unwrap()
        .internet_gateway()
        .unwrap()
        .internet_gateway_id()
        .unwrap()
        .to_string();
    ec2.attach_internet_gateway().internet_gateway_id(&igw).vpc_id(&vpc).send().await.unwrap();
    let rt = |name: String| {
        let vpc = vpc.clone();
        async move {
            ec2.create_route_table()
                .vpc_id(vpc)
                .tag_specifications(kops_tags(R::RouteTable, &name, &[]))
                .send()
                .await
                .unwrap()
                .route_table()
                .unwrap()
                .route_table_id()
                .unwrap()
                .to_string()
        }
    };
    let public_rt = rt(KOPS_NAME.to_string()).await;
    for z in ["a", "b", "c"] {
        let s = &subnets[&format!("utility-us-east-1{z}")];
        ec2.associate_route_table().route_table_id(&public_rt).subnet_id(s).send().await.unwrap();
    }
    ec2.create_route()
        .route_table_id(&public_rt)
        .destination_cidr_block("0.0.0.0/0")
        .gateway_id(&igw)
        .send()
        .await
        .unwrap();
    // A NAT gateway and its address in each zone's utility subnet, and each
    // zone's private route table through it.
    let mut private_rts = Vec::new();
    for z in ["a", "b", "c"] {
        let zone = format!("us-east-1{z}");
        let eip = ec2
            .allocate_address()
            .domain(aws_sdk_ec2::types::DomainType::Vpc)
            .tag_specifications(kops_tags(R::ElasticIp, &format!("{zone}.{KOPS_NAME}"), &[]))
            .send()
            .await
            .unwrap()
            .allocation_id()
            .unwrap()
            .to_string();
        let nat = ec2
            .create_nat_gateway()
            .subnet_id(&subnets[&format!("utility-{zone}")])
            .allocation_id(&eip)
            .tag_specifications(kops_tags(R::Natgateway, &format!("{zone}.{KOPS_NAME}"), &[]))
            .send()
            .await
            .unwrap()
            .nat_gateway()
            .unwrap()
            .nat_gateway_id()
            .unwrap()
            .to_string();
        let private = rt(format!("private-{zone}.{KOPS_NAME}")).await;
        ec2.associate_route_table().route_table_id(&private).subnet_id(&subnets[&zone]).send().await.unwrap();
        ec2.create_route()
            .route_table_id(&private)
            .destination_cidr_block("0.0.0.0/0")
            .nat_gateway_id(&nat)
            .send()
            .await
            .unwrap();
        private_rts.push(private);
    }
    let private_rt = private_rts[0].clone();
    let sg = |name: String, extra: Vec<(&'static str, &'static str)>| {
        let vpc = vpc.clone();
        async move {
            ec2.create_security_group()
                .group_name(&name)
                .description(format!("Security group for {name}"))
                .vpc_id(vpc)
                .tag_specifications(kops_tags(R::SecurityGroup, &name, &extra))
                .send()
                .await
                .unwrap()
                .group_id()
                .unwrap()
                .to_string()
        }
    };
    let masters_sg = sg(format!("masters.{KOPS_NAME}"), vec![]).await;
    let nodes_sg = sg(format!("nodes.{KOPS_NAME}"), vec![]).await;
    // kops's rules (its docs/security_groups.md): all traffic among the
    // control plane, from it to the nodes and among the nodes; the nodes to
    // the control plane on every port but etcd's and etcd-manager's; the
    // API from anywhere and from the VPC (the load balancer's checks).
    let from_group = |proto: &str, from: i32, to: i32, group: &str| {
        aws_sdk_ec2::types::IpPermission::builder()
            .ip_protocol(proto)
            .from_port(from)
            .to_port(to)
            .user_id_group_pairs(aws_sdk_ec2::types::UserIdGroupPair::builder().group_id(group).build())
            .build()
    };
    let from_cidr = |proto: &str, from: i32, to: i32, cidr: &str| {
        aws_sdk_ec2::types::IpPermission::builder()
            .ip_protocol(proto)
            .from_port(from)
            .to_port(to)
            .ip_ranges(aws_sdk_ec2::types::IpRange::builder().cidr_ip(cidr).build())
            .build()
    };
    for (group, rules) in [
        (
            &masters_sg,
            vec![
                from_group("-1", -1, -1, &masters_sg),
                from_group("tcp", 1, 2379, &nodes_sg),
                from_group("tcp", 2382, 4000, &nodes_sg),
                from_group("tcp", 4003, 65535, &nodes_sg),
                from_group("udp", 1, 65535, &nodes_sg),
                from_cidr("tcp", 443, 443, "0.0.0.0/0"),
                from_cidr("tcp", 443, 443, "172.20.0.0/16"),
                from_cidr("tcp", 22, 22, "0.0.0.0/0"),
            ],
        ),
        (
            &nodes_sg,
            vec![
                from_group("-1", -1, -1, &masters_sg),
                from_group("-1", -1, -1, &nodes_sg),
                from_cidr("tcp", 22, 22, "0.0.0.0/0"),
            ],
        ),
    ] {
        ec2.authorize_security_group_ingress().group_id(group).set_ip_permissions(Some(rules)).send().await.unwrap();
    }
    // A group a Terraform module added to the cluster (its tags say so).
    let managed_sg = sg(format!("bastion.{KOPS_NAME}"), vec![("terraform", "true")]).await;
    let image =
        ec2.describe_images().owners("amazon").send().await.unwrap().images()[0].image_id().unwrap().to_string();
    // kops's groups: a launch template and an Auto Scaling group each,
    // the group's tags carried to its machines.
    let mut groups = Vec::new();
    for (group, subnets_of, size) in [
        ("control-plane-us-east-1a", vec!["us-east-1a"], 1),
        ("control-plane-us-east-1b", vec!["us-east-1b"], 1),
        ("control-plane-us-east-1c", vec!["us-east-1c"], 1),
        ("nodes", vec!["us-east-1a", "us-east-1b", "us-east-1c"], 3),
        ("batch", vec!["us-east-1a", "us-east-1b", "us-east-1c"], 0),
    ] {
        let name = format!("{group}.{KOPS_NAME}");
        let lt = ec2
            .create_launch_template()
            .launch_template_name(&name)
            .launch_template_data(
                aws_sdk_ec2::types::RequestLaunchTemplateData::builder()
                    .image_id(&image)
                    .instance_type(aws_sdk_ec2::types::InstanceType::T3Large)
                    .build(),
            )
            .tag_specifications(kops_tags(R::LaunchTemplate, &name, &[("kops.k8s.io/instancegroup", group)]))
            .send()
            .await
            .unwrap()
            .launch_template()
            .unwrap()
            .launch_template_id()
            .unwrap()
            .to_string();
        let tag = |k: &str, v: &str| {
            aws_sdk_autoscaling::types::Tag::builder()
                .key(k)
                .value(v)
                .propagate_at_launch(true)
                .resource_id(&name)
                .resource_type("auto-scaling-group")
                .build()
        };
        let zones: Vec<String> = subnets_of.iter().map(|z| subnets[*z].clone()).collect();
        asg.create_auto_scaling_group()
            .auto_scaling_group_name(&name)
            .launch_template(
                aws_sdk_autoscaling::types::LaunchTemplateSpecification::builder()
                    .launch_template_id(&lt)
                    .version("$Latest")
                    .build(),
            )
            .min_size(size)
            .max_size(size)
            .desired_capacity(size)
            .vpc_zone_identifier(zones.join(","))
            .tags(tag("KubernetesCluster", KOPS_NAME))
            .tags(tag(&format!("kubernetes.io/cluster/{KOPS_NAME}"), "owned"))
            .tags(tag("Name", &name))
            .tags(tag("kops.k8s.io/instancegroup", group))
            .send()
            .await
            .unwrap();
        groups.push(name);
    }
    let mut machines = Vec::new();
    for name in &groups {
        let g = asg.describe_auto_scaling_groups().auto_scaling_group_names(name).send().await.unwrap();
        let mut ids: Vec<String> =
            g.auto_scaling_groups()[0].instances().iter().map(|i| i.instance_id().unwrap().to_string()).collect();
        ids.sort();
        machines.extend(ids);
    }
    assert_eq!(machines.len(), 6, "kops's groups run six machines");
    ec2.create_volume()
        .availability_zone("us-east-1a")
        .size(20)
        .tag_specifications(kops_tags(
            R::Volume,
            &format!("a.etcd-main.{KOPS_NAME}"),
            &[("k8s.io/etcd/main", "a/a,b,c")],
        ))
        .send()
        .await
        .unwrap();
    // The API's network load balancer in the utility subnets: the API's
    // target group (the control plane registered) and kops-controller's.
    use aws_sdk_elasticloadbalancingv2::types as elbt;
    let elb_tag = |k: &str, v: &str| elbt::Tag::builder().key(k).value(v).build();
    let lb = elb
        .create_load_balancer()
        .name("api-prod-k8s-example-com-5nursn")
        .r#type(elbt::LoadBalancerTypeEnum::Network)
        .scheme(elbt::LoadBalancerSchemeEnum::InternetFacing)
        .set_subnets(Some(["a", "b", "c"].map(|z| subnets[&format!("utility-us-east-1{z}")].clone()).to_vec()))
        .tags(elb_tag("KubernetesCluster", KOPS_NAME))
        .tags(elb_tag(&format!("kubernetes.io/cluster/{KOPS_NAME}"), "owned"))
        .tags(elb_tag("Name", &format!("api.{KOPS_NAME}")))
        .send()
        .await
        .unwrap();
    let lb = lb.load_balancers()[0].load_balancer_arn().unwrap().to_string();
    let mut tgs = Vec::new();
    for (name, port) in [("tcp-prod-k8s-example-com-vpjolq", 443), ("kops-controller-prod-k8s-fjk2ko", 3988)] {
        let tg = elb
            .create_target_group()
            .name(name)
            .protocol(elbt::ProtocolEnum::Tcp)
            .port(port)
            .vpc_id(&vpc)
            .target_type(elbt::TargetTypeEnum::Instance)
            .tags(elb_tag("KubernetesCluster", KOPS_NAME))
            .send()
            .await
            .unwrap();
        let tg = tg.target_groups()[0].target_group_arn().unwrap().to_string();
        elb.create_listener()
            .load_balancer_arn(&lb)
            .protocol(elbt::ProtocolEnum::Tcp)
            .port(port)
            .default_actions(
                elbt::Action::builder().r#type(elbt::ActionTypeEnum::Forward).target_group_arn(&tg).build(),
            )
            .send()
            .await
            .unwrap();
        elb.register_targets()
            .target_group_arn(&tg)
            .set_targets(Some(
                machines[..3].iter().map(|id| elbt::TargetDescription::builder().id(id).build()).collect(),
            ))
            .send()
            .await
            .unwrap();
        tgs.push(tg);
    }
    Kops { vpc, subnets, public_rt, private_rt, masters_sg, managed_sg, machines, groups, lb, api_tg: tgs[0].clone() }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_kops_cluster_is_claimed_in_place_and_a_second_adopt_changes_nothing() {
    let w = support::World::new("kops-adopt", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let kops = kops_on_moto(&aws).await;
    import_prod(&w, &aws, &bucket).await;

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
        "nothing was written",
        "etcd-manager's data",
        &kops.groups[1],
        "trust: kops's kubernetes-ca, apiserver-aggregator-ca, service-account from",
    ] {
        assert!(out.contains(want), "`{want}` not in:\n{out}");
    }
    assert!(!tags_of(&aws.ec2, &kops.vpc).await.contains_key("pinfleet.dev/cluster"), "a dry run tags nothing");
    assert!(aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.is_err());

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
    let record = aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.unwrap();
    let record: serde_json::Value = serde_json::from_slice(&record.body.collect().await.unwrap().to_vec()).unwrap();
    assert_eq!(record["kopsName"], KOPS_NAME);
    assert_eq!(record["claims"]["roll"].as_array().unwrap().len(), 6, "{record:#}");
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
    assert_eq!(states, ["running"; 6]);

    // After the adopt, the plan: nothing replaced, the machines to roll.
    // Only what kops never made is created (pinfleet's launch templates,
    // IAM roles, interruption queue): nothing that exists is changed,
    // replaced or deleted — not the load balancer, not kops's rules.
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
    for (group, n) in [("control-plane-us-east-1a", 1), ("nodes", 3)] {
        assert!(text.contains(&format!("  {group}: {n} instance(s) on an older launch-template version")), "{text}");
    }

    let lb = aws.elb.describe_tags().resource_arns(&kops.lb).resource_arns(&kops.api_tg).send().await.unwrap();
    for d in lb.tag_descriptions() {
        let has = |k: &str, v: &str| d.tags().iter().any(|t| t.key() == Some(k) && t.value() == Some(v));
        assert!(has("pinfleet.dev/cluster", "prod"), "{d:?}");
    }

    // The roll of an adopted cluster is not built: refused before any write.
    let o = w.run(&["upgrade", "prod", "--yes"]);
    assert_eq!(o.status.code(), Some(1));
    let err = support::stderr(&o);
    assert!(err.contains(&format!("prod was adopted from kops ({KOPS_NAME})")), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");

    // A second adopt: nothing to do.
    let out = w.ok(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    assert!(out.contains("prod is adopted already: nothing to do"), "{out}");

    // A file that names no kops cluster is refused before any call.
    let o = w.run(&["adopt", "kops-adopt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("pinfleet.dev/kops-name"), "{}", support::stderr(&o));
}

/// The file `import kops` writes of the fixture's state store, at
/// `clusters/prod.yaml`, with pinfleet's own state beside it in `bucket`.
async fn import_prod(w: &support::World, aws: &pinfleet::cloud::aws::Aws, bucket: &str) -> std::path::PathBuf {
    let store = format!("file://{}/tests/fixtures/kops/{KOPS_NAME}", env!("CARGO_MANIFEST_DIR"));
    let file = w.clusters_dir().join("prod.yaml");
    let state = format!("s3://{bucket}/pinfleet");
    let file_arg = file.to_str().unwrap();
    w.ok(&["import", "kops", "--state", &store, "--owner", "platform", "--state-store", &state, "--out", file_arg]);
    // moto has no image of that name: the file names one of moto's own
    // Canonical images, as the operator would name today's.
    let canonical = aws.ec2.describe_images().image_ids(support::canonical_image(aws).await).send().await.unwrap();
    let canonical = canonical.images()[0].name().unwrap().to_string();
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text.replace("ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20250610", &canonical);
    std::fs::write(&file, text).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread")]
async fn kops_s_node_groups_roll_onto_pinfleet_machines_and_their_auto_scaling_groups_go() {
    let w = support::World::new("kops-roll", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let kops = kops_on_moto(&aws).await;
    import_prod(&w, &aws, &bucket).await;
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
    let roll = |extra: &[&str]| {
        let mut a = vec!["upgrade", "prod", "--yes", "--kubeconfig", kc, "--validate-interval", "200ms", "--skip-e2e"];
        a.extend_from_slice(extra);
        w.run(&a)
    };

    // The control plane is not rolled (etcd would come over by restore):
    // refused before anything is written, naming the node groups' way.
    let o = roll(&[]);
    assert_eq!(o.status.code(), Some(1));
    let err = support::stderr(&o);
    assert!(err.contains(&format!("prod was adopted from kops ({KOPS_NAME}): its control plane")), "{err}");
    assert!(err.contains("--instance-group batch --instance-group nodes"), "{err}");

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
    let client = pinfleet::kube::client_from_kubeconfig(&kubeconfig, pinfleet::kube::Retry::Default).await.unwrap();
    let cm = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "kube-public");
    let info = cm.get("cluster-info").await.unwrap();
    let data = info.data.unwrap();
    assert!(data.keys().any(|k| k.starts_with("jws-kubeconfig-")), "{data:?}");
    assert!(data["kubeconfig"].contains("server: https://api.prod.k8s.example.com:443"), "{data:?}");

    // Again: nothing left to roll, nothing of kops's node groups to delete.
    let o = roll(&["--instance-group", "nodes", "--instance-group", "batch"]);
    assert!(o.status.success(), "{}", support::stderr(&o));
    assert!(!support::stderr(&o).contains("is empty: deleted"), "{}", support::stderr(&o));
}

/// A child process killed (and reaped) on drop.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
