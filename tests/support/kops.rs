//! A kops cluster as kops leaves it on AWS (moto), for `pinfleet adopt`'s
//! tests and bench-adopt: its VPC, subnets, gateways, NAT gateways, route
//! tables, security groups with kops's rules, the API's load balancer and
//! target groups, launch templates and Auto Scaling groups running its
//! machines, and an etcd volume, every one tagged
//! `KubernetesCluster=prod.k8s.example.com`; the state store kops keeps of
//! it is tests/fixtures/kops. Also the demo's kops cluster
//! (examples/kops_cluster.rs).

#![allow(dead_code)]

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{ResourceType, Tag, TagSpecification};

pub const KOPS_NAME: &str = "prod.k8s.example.com";

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

pub async fn tags_of(ec2: &aws_sdk_ec2::Client, id: &str) -> BTreeMap<String, String> {
    let f = aws_sdk_ec2::types::Filter::builder().name("resource-id").values(id).build();
    let out = ec2.describe_tags().filters(f).send().await.unwrap();
    out.tags().iter().map(|t| (t.key().unwrap().to_string(), t.value().unwrap_or_default().to_string())).collect()
}

/// What kops made: ids by role. `nodes`: the `nodes` group's machines.
pub struct Kops {
    pub vpc: String,
    pub subnets: BTreeMap<String, String>,
    pub public_rt: String,
    pub private_rt: String,
    pub masters_sg: String,
    /// kops's nodes' group, Terraform's too.
    pub managed_sg: String,
    pub machines: Vec<String>,
    /// kops's Auto Scaling groups.
    pub groups: Vec<String>,
    /// The API's load balancer and target group (ARNs).
    pub lb: String,
    pub api_tg: String,
}

pub async fn kops_on_moto(aws: &pinfleet::cloud::aws::Aws, nodes: i32) -> Kops {
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
    // The nodes' group, which a Terraform module also manages (its tags say
    // so): adopt refuses it until named.
    let nodes_sg = sg(format!("nodes.{KOPS_NAME}"), vec![("terraform", "true")]).await;
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
    // A group a Terraform module added beside kops's: nothing claims it, so
    // nothing needs naming for it.
    sg(format!("bastion.{KOPS_NAME}"), vec![("terraform", "true")]).await;
    let managed_sg = nodes_sg.clone();
    let image =
        ec2.describe_images().owners("amazon").send().await.unwrap().images()[0].image_id().unwrap().to_string();
    // kops's groups: a launch template and an Auto Scaling group each,
    // the group's tags carried to its machines.
    let mut groups = Vec::new();
    for (group, subnets_of, size) in [
        ("control-plane-us-east-1a", vec!["us-east-1a"], 1),
        ("control-plane-us-east-1b", vec!["us-east-1b"], 1),
        ("control-plane-us-east-1c", vec!["us-east-1c"], 1),
        ("nodes", vec!["us-east-1a", "us-east-1b", "us-east-1c"], nodes),
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
        let mut create = asg
            .create_auto_scaling_group()
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
            .tags(tag("kops.k8s.io/instancegroup", group));
        if group.starts_with("control-plane") {
            create = create.tags(tag("k8s.io/role/control-plane", "1")).tags(tag("k8s.io/role/master", "1"));
        }
        create.send().await.unwrap();
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
    assert_eq!(machines.len(), 3 + nodes as usize, "kops's groups run their machines");
    // etcd-manager's volumes: one per member of each etcd cluster, in its
    // control-plane machine's zone and attached to it (kops's tags,
    // pkg/model/master_volumes.go).
    for (i, z) in ["a", "b", "c"].into_iter().enumerate() {
        for (c, device) in [("main", "/dev/xvdu"), ("events", "/dev/xvdv")] {
            let member = format!("{z}/a,b,c");
            let v = ec2
                .create_volume()
                .availability_zone(format!("us-east-1{z}"))
                .size(20)
                .tag_specifications(kops_tags(
                    R::Volume,
                    &format!("{z}.etcd-{c}.{KOPS_NAME}"),
                    &[
                        (format!("k8s.io/etcd/{c}").as_str(), member.as_str()),
                        ("k8s.io/role/control-plane", "1"),
                        ("k8s.io/role/master", "1"),
                    ],
                ))
                .send()
                .await
                .unwrap();
            let id = v.volume_id().unwrap();
            ec2.attach_volume().volume_id(id).instance_id(&machines[i]).device(device).send().await.unwrap();
        }
    }
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
