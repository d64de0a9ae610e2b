//! The AWS side of `pinfleet adopt`: every resource kops tagged as the
//! cluster's, read with tag-filtered Describe* calls (ownership checked
//! on each resource's own tags, as `cloud::aws::observe` does), or a
//! kubeadm cluster's tagged machines and the network around them
//! ([`find_ec2`], [`seen_by_tag`] for `import aws`); and the claim
//! written as tags. The judging is [`super::claim`]'s.
//!
//! ```text
//! EC2 (tag:KubernetesCluster=<kops name>) ──▶ found ──▶ claim::judge
//! claim::Claims ──▶ CreateTags (claimed resources, machines to roll)
//! ```

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Tag};

use super::claim::{Found, KOPS_CLUSTER_TAG};
use crate::cloud::aws::{sdk, Aws};

fn tag_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

fn found(kind: &str, id: &str, tags: &[Tag]) -> Found {
    Found {
        kind: kind.into(),
        id: id.into(),
        tags: tag_map(tags),
        cidr: None,
        zone: None,
        links: Vec::new(),
        name: None,
        port: None,
    }
}

/// NAT gateways not gone or going, each linked to its subnet and zone;
/// returns each address's allocation id → its NAT gateway's id.
fn nat_gateways(
    nats: &[&aws_sdk_ec2::types::NatGateway],
    zone_of: &BTreeMap<String, String>,
    out: &mut Vec<Found>,
) -> BTreeMap<String, String> {
    let mut nat_of_allocation = BTreeMap::new();
    for n in nats.iter().filter(|n| !matches!(n.state().map(|s| s.as_str()), Some("deleted" | "deleting" | "failed"))) {
        let id = n.nat_gateway_id().unwrap_or_default();
        let mut x = found("nat-gateway", id, n.tags());
        x.links = n.subnet_id().map(str::to_string).into_iter().collect();
        x.zone = n.subnet_id().and_then(|s| zone_of.get(s)).cloned();
        for a in n.nat_gateway_addresses() {
            if let Some(alloc) = a.allocation_id() {
                nat_of_allocation.insert(alloc.to_string(), id.to_string());
            }
        }
        out.push(x);
    }
    nat_of_allocation
}

macro_rules! all_pages {
    ($what:expr, $request:expr) => {
        sdk($what, $request.into_paginator().items().send().try_collect().await)
    };
}

/// Everything tagged `KubernetesCluster=<kops_name>` that adoption reads:
/// the VPC, subnets, internet gateway, NAT gateways and their addresses,
/// route tables, security groups, machines (not terminated), launch
/// templates and volumes.
pub async fn find(aws: &Aws, kops_name: &str) -> anyhow::Result<Vec<Found>> {
    let f = || Filter::builder().name(format!("tag:{KOPS_CLUSTER_TAG}")).values(kops_name).build();
    let ec2 = &aws.ec2;
    let vpcs = async { sdk("DescribeVpcs", ec2.describe_vpcs().filters(f()).send().await) };
    let subnets = async { all_pages!("DescribeSubnets", ec2.describe_subnets().filters(f()).max_results(1000)) };
    let igws = async {
        all_pages!("DescribeInternetGateways", ec2.describe_internet_gateways().filters(f()).max_results(1000))
    };
    let nats = async { all_pages!("DescribeNatGateways", ec2.describe_nat_gateways().filter(f()).max_results(1000)) };
    let addresses = async { sdk("DescribeAddresses", ec2.describe_addresses().filters(f()).send().await) };
    let rts = async { all_pages!("DescribeRouteTables", ec2.describe_route_tables().filters(f()).max_results(100)) };
    let sgs =
        async { all_pages!("DescribeSecurityGroups", ec2.describe_security_groups().filters(f()).max_results(1000)) };
    let instances = async { all_pages!("DescribeInstances", ec2.describe_instances().filters(f()).max_results(1000)) };
    let lts =
        async { all_pages!("DescribeLaunchTemplates", ec2.describe_launch_templates().filters(f()).max_results(200)) };
    let volumes = async { all_pages!("DescribeVolumes", ec2.describe_volumes().filters(f()).max_results(1000)) };
    let (vpcs, subnets, igws, nats, addresses, rts, sgs, reservations, lts, volumes) =
        futures::try_join!(vpcs, subnets, igws, nats, addresses, rts, sgs, instances, lts, volumes)?;
    // Kept only when the resource itself says so (an endpoint may ignore a filter).
    let ours = |tags: &[Tag]| tags.iter().any(|t| t.key() == Some(KOPS_CLUSTER_TAG) && t.value() == Some(kops_name));
    let mut out = Vec::new();
    for v in vpcs.vpcs().iter().filter(|v| ours(v.tags())) {
        let mut x = found("vpc", v.vpc_id().unwrap_or_default(), v.tags());
        x.cidr = v.cidr_block().map(str::to_string);
        out.push(x);
    }
    for s in subnets.iter().filter(|s| ours(s.tags())) {
        let mut x = found("subnet", s.subnet_id().unwrap_or_default(), s.tags());
        x.cidr = s.cidr_block().map(str::to_string);
        x.zone = s.availability_zone().map(str::to_string);
        out.push(x);
    }
    for g in igws.iter().filter(|g| ours(g.tags())) {
        out.push(found("internet-gateway", g.internet_gateway_id().unwrap_or_default(), g.tags()));
    }
    let zone_of: BTreeMap<String, String> =
        subnets.iter().filter_map(|s| Some((s.subnet_id()?.to_string(), s.availability_zone()?.to_string()))).collect();
    let kept: Vec<&aws_sdk_ec2::types::NatGateway> = nats.iter().filter(|n| ours(n.tags())).collect();
    let nat_of_allocation = nat_gateways(&kept, &zone_of, &mut out);
    for a in addresses.addresses().iter().filter(|a| ours(a.tags())) {
        let id = a.allocation_id().unwrap_or_default();
        let mut x = found("elastic-ip", id, a.tags());
        x.links = nat_of_allocation.get(id).cloned().into_iter().collect();
        out.push(x);
    }
    for r in rts.iter().filter(|r| ours(r.tags())) {
        let mut x = found("route-table", r.route_table_id().unwrap_or_default(), r.tags());
        x.links = r.associations().iter().filter_map(|a| a.subnet_id().map(str::to_string)).collect();
        out.push(x);
    }
    for g in sgs.iter().filter(|g| ours(g.tags())) {
        let mut x = found("security-group", g.group_id().unwrap_or_default(), g.tags());
        // kops names its groups `masters.<cluster>` and `nodes.<cluster>`.
        x.tags.entry("Name".into()).or_insert_with(|| g.group_name().unwrap_or_default().to_string());
        out.push(x);
    }
    for i in reservations.iter().flat_map(|r| r.instances()).filter(|i| ours(i.tags())) {
        if matches!(i.state().and_then(|s| s.name()).map(|s| s.as_str()), Some("terminated" | "shutting-down")) {
            continue;
        }
        out.push(found("instance", i.instance_id().unwrap_or_default(), i.tags()));
    }
    for t in lts.iter().filter(|t| ours(t.tags())) {
        out.push(found("launch-template", t.launch_template_id().unwrap_or_default(), t.tags()));
    }
    for v in volumes.iter().filter(|v| ours(v.tags())) {
        out.push(found("volume", v.volume_id().unwrap_or_default(), v.tags()));
    }
    out.extend(groups(aws, kops_name).await?);
    out.extend(load_balancers(aws, kops_name).await?);
    Ok(out)
}

fn elb_tags(tags: &[aws_sdk_elasticloadbalancingv2::types::Tag]) -> BTreeMap<String, String> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

/// kops's API load balancer and its target groups (ELBv2 cannot filter by
/// tag: every load balancer's tags are read, 20 at a time).
async fn load_balancers(aws: &Aws, kops_name: &str) -> anyhow::Result<Vec<Found>> {
    let lbs: Vec<aws_sdk_elasticloadbalancingv2::types::LoadBalancer> = sdk(
        "DescribeLoadBalancers",
        aws.elb.describe_load_balancers().into_paginator().items().send().try_collect().await,
    )?;
    let arns: Vec<String> = lbs.iter().filter_map(|l| l.load_balancer_arn().map(str::to_string)).collect();
    let mut out = Vec::new();
    for chunk in arns.chunks(20) {
        let described =
            sdk("DescribeTags", aws.elb.describe_tags().set_resource_arns(Some(chunk.to_vec())).send().await)?;
        for d in described.tag_descriptions() {
            let tags = elb_tags(d.tags());
            if tags.get(KOPS_CLUSTER_TAG).map(String::as_str) != Some(kops_name) {
                continue;
            }
            let arn = d.resource_arn().unwrap_or_default();
            let lb = lbs.iter().find(|l| l.load_balancer_arn() == Some(arn));
            let mut x = found("load-balancer", arn, &[]);
            x.tags = tags;
            x.name = lb.and_then(|l| l.load_balancer_name()).map(str::to_string);
            let tgs =
                sdk("DescribeTargetGroups", aws.elb.describe_target_groups().load_balancer_arn(arn).send().await)?;
            let tg_arns: Vec<String> =
                tgs.target_groups().iter().filter_map(|t| t.target_group_arn().map(str::to_string)).collect();
            let mut tg_tags: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for c in tg_arns.chunks(20) {
                let d = sdk("DescribeTags", aws.elb.describe_tags().set_resource_arns(Some(c.to_vec())).send().await)?;
                for t in d.tag_descriptions() {
                    tg_tags.insert(t.resource_arn().unwrap_or_default().to_string(), elb_tags(t.tags()));
                }
            }
            for t in tgs.target_groups() {
                let tg_arn = t.target_group_arn().unwrap_or_default();
                let mut g = found("target-group", tg_arn, &[]);
                // The load balancer's tags say whose it is; its own, whether claimed.
                g.tags = tg_tags.remove(tg_arn).unwrap_or_default();
                g.tags.insert(KOPS_CLUSTER_TAG.into(), kops_name.into());
                g.name = t.target_group_name().map(str::to_string);
                g.port = t.port();
                x.links.push(g.id.clone());
                out.push(g);
            }
            out.push(x);
        }
    }
    Ok(out)
}

/// kops's Auto Scaling groups (tagged as its machines are), each with its
/// machines' ids as links.
async fn groups(aws: &Aws, kops_name: &str) -> anyhow::Result<Vec<Found>> {
    use aws_sdk_autoscaling::types::Filter as AsgFilter;
    let f = AsgFilter::builder().name(format!("tag:{KOPS_CLUSTER_TAG}")).values(kops_name).build();
    let all: Vec<aws_sdk_autoscaling::types::AutoScalingGroup> = sdk(
        "DescribeAutoScalingGroups",
        aws.autoscaling.describe_auto_scaling_groups().filters(f).into_paginator().items().send().try_collect().await,
    )?;
    let mut out = Vec::new();
    for g in all {
        let tags: BTreeMap<String, String> = g
            .tags()
            .iter()
            .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
            .collect();
        if tags.get(KOPS_CLUSTER_TAG).map(String::as_str) != Some(kops_name) {
            continue;
        }
        let name = g.auto_scaling_group_name().unwrap_or_default();
        let links = g.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect();
        let mut x = found("auto-scaling-group", name, &[]);
        (x.tags, x.links) = (tags, links);
        out.push(x);
    }
    Ok(out)
}

/// What a kubeadm cluster on EC2 is made of: the machines tagged
/// `key=value` (not terminated), their VPC and, in it, every subnet,
/// internet gateway, NAT gateway (with its address), route table; the
/// security groups the machines use (linked to them), and the Auto
/// Scaling groups they are in.
pub async fn find_ec2(aws: &Aws, key: &str, value: &str) -> anyhow::Result<Vec<Found>> {
    let ec2 = &aws.ec2;
    let f = Filter::builder().name(format!("tag:{key}")).values(value).build();
    let reservations: Vec<aws_sdk_ec2::types::Reservation> =
        all_pages!("DescribeInstances", ec2.describe_instances().filters(f).max_results(1000))?;
    let mut out = Vec::new();
    let mut vpc_ids = std::collections::BTreeSet::new();
    let mut sg_users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut ids = Vec::new();
    for i in reservations.iter().flat_map(|r| r.instances()) {
        let ours = i.tags().iter().any(|t| t.key() == Some(key) && t.value().unwrap_or_default() == value);
        let gone = matches!(i.state().and_then(|s| s.name()).map(|s| s.as_str()), Some("terminated" | "shutting-down"));
        if !ours || gone {
            continue;
        }
        let id = i.instance_id().unwrap_or_default().to_string();
        vpc_ids.extend(i.vpc_id().map(str::to_string));
        for g in i.security_groups() {
            sg_users.entry(g.group_id().unwrap_or_default().to_string()).or_default().push(id.clone());
        }
        out.push(found("instance", &id, i.tags()));
        ids.push(id);
    }
    if vpc_ids.is_empty() {
        return Ok(out);
    }
    let vpc_list: Vec<String> = vpc_ids.into_iter().collect();
    let in_vpc = || Filter::builder().name("vpc-id").set_values(Some(vpc_list.clone())).build();
    let attached = Filter::builder().name("attachment.vpc-id").set_values(Some(vpc_list.clone())).build();
    let sg_ids: Vec<String> = sg_users.keys().cloned().collect();
    let vpcs = async { sdk("DescribeVpcs", ec2.describe_vpcs().set_vpc_ids(Some(vpc_list.clone())).send().await) };
    let subnets = async { all_pages!("DescribeSubnets", ec2.describe_subnets().filters(in_vpc()).max_results(1000)) };
    let igws = async {
        all_pages!("DescribeInternetGateways", ec2.describe_internet_gateways().filters(attached).max_results(1000))
    };
    let nats =
        async { all_pages!("DescribeNatGateways", ec2.describe_nat_gateways().filter(in_vpc()).max_results(1000)) };
    let rts =
        async { all_pages!("DescribeRouteTables", ec2.describe_route_tables().filters(in_vpc()).max_results(100)) };
    let sgs = async {
        sdk("DescribeSecurityGroups", ec2.describe_security_groups().set_group_ids(Some(sg_ids.clone())).send().await)
    };
    let (vpcs, subnets, igws, nats, rts, sgs) = futures::try_join!(vpcs, subnets, igws, nats, rts, sgs)?;
    for v in vpcs.vpcs() {
        let mut x = found("vpc", v.vpc_id().unwrap_or_default(), v.tags());
        x.cidr = v.cidr_block().map(str::to_string);
        out.push(x);
    }
    let zone_of: BTreeMap<String, String> =
        subnets.iter().filter_map(|s| Some((s.subnet_id()?.to_string(), s.availability_zone()?.to_string()))).collect();
    for s in &subnets {
        let mut x = found("subnet", s.subnet_id().unwrap_or_default(), s.tags());
        x.cidr = s.cidr_block().map(str::to_string);
        x.zone = s.availability_zone().map(str::to_string);
        out.push(x);
    }
    for g in &igws {
        out.push(found("internet-gateway", g.internet_gateway_id().unwrap_or_default(), g.tags()));
    }
    let nat_of_allocation = nat_gateways(&nats.iter().collect::<Vec<_>>(), &zone_of, &mut out);
    if !nat_of_allocation.is_empty() {
        let allocations: Vec<String> = nat_of_allocation.keys().cloned().collect();
        let addresses =
            sdk("DescribeAddresses", ec2.describe_addresses().set_allocation_ids(Some(allocations)).send().await)?;
        for a in addresses.addresses() {
            let id = a.allocation_id().unwrap_or_default();
            let mut x = found("elastic-ip", id, a.tags());
            x.links = nat_of_allocation.get(id).cloned().into_iter().collect();
            out.push(x);
        }
    }
    for r in &rts {
        let mut x = found("route-table", r.route_table_id().unwrap_or_default(), r.tags());
        x.links = r.associations().iter().filter_map(|a| a.subnet_id().map(str::to_string)).collect();
        out.push(x);
    }
    for g in sgs.security_groups() {
        let id = g.group_id().unwrap_or_default();
        let mut x = found("security-group", id, g.tags());
        x.links = sg_users.remove(id).unwrap_or_default();
        out.push(x);
    }
    // The Auto Scaling groups the machines are in (none: machines run by hand).
    let mut asgs = std::collections::BTreeSet::new();
    for chunk in ids.chunks(50) {
        let inst = sdk(
            "DescribeAutoScalingInstances",
            aws.autoscaling.describe_auto_scaling_instances().set_instance_ids(Some(chunk.to_vec())).send().await,
        )?;
        asgs.extend(
            inst.auto_scaling_instances().iter().filter_map(|i| i.auto_scaling_group_name().map(str::to_string)),
        );
    }
    if !asgs.is_empty() {
        let names: Vec<String> = asgs.into_iter().collect();
        let groups = sdk(
            "DescribeAutoScalingGroups",
            aws.autoscaling.describe_auto_scaling_groups().set_auto_scaling_group_names(Some(names)).send().await,
        )?;
        for g in groups.auto_scaling_groups() {
            let mut x = found("auto-scaling-group", g.auto_scaling_group_name().unwrap_or_default(), &[]);
            x.tags = g
                .tags()
                .iter()
                .filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string())))
                .collect();
            x.links = g.instances().iter().filter_map(|i| i.instance_id().map(str::to_string)).collect();
            out.push(x);
        }
    }
    Ok(out)
}

/// Adds `tags` to each resource (EC2 ids, or ELBv2 ARNs; CreateTags takes
/// many at once, and adding a tag it has already is no change).
pub async fn tag(aws: &Aws, ids: &[String], tags: &[(String, String)]) -> anyhow::Result<()> {
    let (arns, ids): (Vec<String>, Vec<String>) = ids.iter().cloned().partition(|i| i.starts_with("arn:"));
    for arn in &arns {
        let t: Vec<aws_sdk_elasticloadbalancingv2::types::Tag> = tags
            .iter()
            .map(|(k, v)| aws_sdk_elasticloadbalancingv2::types::Tag::builder().key(k).value(v).build())
            .collect();
        sdk("AddTags", aws.elb.add_tags().resource_arns(arn).set_tags(Some(t)).send().await)?;
    }
    for chunk in ids.chunks(500) {
        let t: Vec<Tag> = tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
        sdk("CreateTags", aws.ec2.create_tags().set_resources(Some(chunk.to_vec())).set_tags(Some(t)).send().await)?;
    }
    Ok(())
}

/// What EC2 shows of a cluster made by hand (`pinfleet import aws`): the
/// machines tagged `key=value` (not terminated), each VPC they are in, and
/// every subnet of those VPCs (public when its route table, or the VPC's
/// main one, sends 0.0.0.0/0 to an internet gateway).
pub async fn seen_by_tag(
    aws: &Aws,
    key: &str,
    value: &str,
) -> anyhow::Result<(Vec<super::ec2::Machine>, Vec<(String, String)>, Vec<super::ec2::Subnet>)> {
    let ec2 = &aws.ec2;
    let f = Filter::builder().name(format!("tag:{key}")).values(value).build();
    let live = Filter::builder()
        .name("instance-state-name")
        .values("pending")
        .values("running")
        .values("stopping")
        .values("stopped")
        .build();
    let reservations: Vec<aws_sdk_ec2::types::Reservation> =
        all_pages!("DescribeInstances", ec2.describe_instances().filters(f).filters(live).max_results(1000))?;
    let mut machines = Vec::new();
    for i in reservations.iter().flat_map(|r| r.instances()) {
        // Kept only when the machine itself says so.
        if !i.tags().iter().any(|t| t.key() == Some(key) && t.value().unwrap_or_default() == value) {
            continue;
        }
        let tags = tag_map(i.tags());
        machines.push(super::ec2::Machine {
            id: i.instance_id().unwrap_or_default().to_string(),
            instance_type: i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
            image: i.image_id().unwrap_or_default().to_string(),
            vpc: i.vpc_id().unwrap_or_default().to_string(),
            subnet: i.subnet_id().unwrap_or_default().to_string(),
            asg: tags.get("aws:autoscaling:groupName").cloned(),
        });
    }
    machines.sort_by(|a, b| a.id.cmp(&b.id));
    let vpc_ids: std::collections::BTreeSet<String> = machines.iter().map(|m| m.vpc.clone()).collect();
    if vpc_ids.is_empty() {
        return Ok((machines, Vec::new(), Vec::new()));
    }
    let ids: Vec<String> = vpc_ids.into_iter().collect();
    let vpcs = sdk("DescribeVpcs", ec2.describe_vpcs().set_vpc_ids(Some(ids.clone())).send().await)?;
    let vpcs: Vec<(String, String)> = vpcs
        .vpcs()
        .iter()
        .map(|v| (v.vpc_id().unwrap_or_default().to_string(), v.cidr_block().unwrap_or_default().to_string()))
        .collect();
    let in_vpcs = || Filter::builder().name("vpc-id").set_values(Some(ids.clone())).build();
    let subnets: Vec<aws_sdk_ec2::types::Subnet> =
        all_pages!("DescribeSubnets", ec2.describe_subnets().filters(in_vpcs()).max_results(1000))?;
    let rts: Vec<aws_sdk_ec2::types::RouteTable> =
        all_pages!("DescribeRouteTables", ec2.describe_route_tables().filters(in_vpcs()).max_results(100))?;
    let to_igw = |rt: &aws_sdk_ec2::types::RouteTable| {
        rt.routes().iter().any(|r| {
            r.destination_cidr_block() == Some("0.0.0.0/0") && r.gateway_id().is_some_and(|g| g.starts_with("igw-"))
        })
    };
    let main_public: std::collections::BTreeSet<String> = rts
        .iter()
        .filter(|rt| rt.associations().iter().any(|a| a.main() == Some(true)) && to_igw(rt))
        .filter_map(|rt| rt.vpc_id().map(str::to_string))
        .collect();
    let mut out = Vec::new();
    for s in &subnets {
        let id = s.subnet_id().unwrap_or_default();
        let own = rts.iter().find(|rt| rt.associations().iter().any(|a| a.subnet_id() == Some(id)));
        let public = match own {
            Some(rt) => to_igw(rt),
            None => s.vpc_id().is_some_and(|v| main_public.contains(v)),
        };
        out.push(super::ec2::Subnet {
            id: id.to_string(),
            cidr: s.cidr_block().unwrap_or_default().to_string(),
            zone: s.availability_zone().unwrap_or_default().to_string(),
            public,
        });
    }
    Ok((machines, vpcs, out))
}
