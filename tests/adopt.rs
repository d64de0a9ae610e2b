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
}

async fn kops_on_moto(ec2: &aws_sdk_ec2::Client) -> Kops {
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
    let private_rt = rt(format!("private-us-east-1a.{KOPS_NAME}")).await;
    ec2.associate_route_table().route_table_id(&private_rt).subnet_id(&subnets["us-east-1a"]).send().await.unwrap();
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
    sg(format!("nodes.{KOPS_NAME}"), vec![]).await;
    // A group a Terraform module added to the cluster (its tags say so).
    let managed_sg = sg(format!("bastion.{KOPS_NAME}"), vec![("terraform", "true")]).await;
    let image =
        ec2.describe_images().owners("amazon").send().await.unwrap().images()[0].image_id().unwrap().to_string();
    let mut machines = Vec::new();
    for (group, subnet) in
        [("control-plane-us-east-1a", "us-east-1a"), ("nodes", "us-east-1b"), ("nodes", "us-east-1c")]
    {
        let out = ec2
            .run_instances()
            .image_id(&image)
            .instance_type(aws_sdk_ec2::types::InstanceType::T3Large)
            .min_count(1)
            .max_count(1)
            .subnet_id(&subnets[subnet])
            .tag_specifications(kops_tags(
                R::Instance,
                &format!("{group}.{KOPS_NAME}"),
                &[("kops.k8s.io/instancegroup", group), ("aws:autoscaling:groupName", group)],
            ))
            .send()
            .await
            .unwrap();
        machines.push(out.instances()[0].instance_id().unwrap().to_string());
    }
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
    Kops { vpc, subnets, public_rt, private_rt, masters_sg, managed_sg, machines }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_kops_cluster_is_claimed_in_place_and_a_second_adopt_changes_nothing() {
    let w = support::World::new("kops-adopt", 1);
    let aws = w.aws().await;
    let bucket = w.bucket();
    aws.s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let kops = kops_on_moto(&aws.ec2).await;
    // The file, as `import kops` writes it (from kops's state store).
    let store = format!("file://{}/tests/fixtures/kops/{KOPS_NAME}", env!("CARGO_MANIFEST_DIR"));
    let file = w.clusters_dir().join("prod.yaml");
    let state = format!("s3://{bucket}/pinfleet");
    w.ok(&[
        "import",
        "kops",
        "--state",
        &store,
        "--owner",
        "platform",
        "--state-store",
        &state,
        "--out",
        file.to_str().unwrap(),
    ]);

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
    for want in ["Terraform manages it (terraform=true)", "nothing was written", "etcd-manager's data"] {
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
    for (id, group) in kops.machines.iter().zip(["control-plane-us-east-1a", "nodes", "nodes"]) {
        let t = tags_of(&aws.ec2, id).await;
        assert_eq!(t.get("pinfleet.dev/instance-group").map(String::as_str), Some(group), "{id}: {t:?}");
    }
    let record = aws.s3.get_object().bucket(&bucket).key("pinfleet/prod/adopt/claims.json").send().await.unwrap();
    let record: serde_json::Value = serde_json::from_slice(&record.body.collect().await.unwrap().to_vec()).unwrap();
    assert_eq!(record["kopsName"], KOPS_NAME);
    assert_eq!(record["claims"]["roll"].as_array().unwrap().len(), 3, "{record:#}");
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
    assert_eq!(states, ["running", "running", "running"]);

    // A second adopt: nothing to do.
    let out = w.ok(&["adopt", "prod", "--yes", "--take", &kops.managed_sg]);
    assert!(out.contains("prod is adopted already: nothing to do"), "{out}");

    // A file that names no kops cluster is refused before any call.
    let o = w.run(&["adopt", "kops-adopt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(support::stderr(&o).contains("pinfleet.dev/kops-name"), "{}", support::stderr(&o));
}
