//! Observation: everything tagged for a cluster, found with tag-filtered,
//! paginated Describe* calls (largest page sizes), run in parallel per
//! resource type. The number of calls grows with pages, never with
//! instances or groups.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{Filter, Tag};

use super::{sdk, Aws};
use crate::cloud::key::ResourceKey;
use crate::cloud::observed::*;
use crate::cloud::tags;

pub fn tag_filter(key: &str, value: &str) -> Filter {
    Filter::builder().name(format!("tag:{key}")).values(value).build()
}

fn tag_map(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter().filter_map(|t| Some((t.key()?.to_string(), t.value().unwrap_or_default().to_string()))).collect()
}

/// Every page of a paginated EC2 read, as one list (errors named by `$what`).
macro_rules! all_pages {
    ($what:expr, $request:expr) => {
        sdk($what, $request.into_paginator().items().send().try_collect().await)
    };
}

/// The resource key a tag names (`pinfleet.dev/resource`), if it is one.
fn resource_key(tags: &BTreeMap<String, String>) -> Option<ResourceKey> {
    tags.get(tags::RESOURCE)?.parse().ok()
}

/// Security groups matching `filter`, every page.
async fn security_groups(aws: &Aws, filter: Filter) -> anyhow::Result<Vec<aws_sdk_ec2::types::SecurityGroup>> {
    all_pages!("DescribeSecurityGroups", aws.ec2.describe_security_groups().filters(filter).max_results(1000))
}

/// Launch templates matching `filter`, every page.
async fn launch_templates(aws: &Aws, filter: Filter) -> anyhow::Result<Vec<aws_sdk_ec2::types::LaunchTemplate>> {
    all_pages!("DescribeLaunchTemplates", aws.ec2.describe_launch_templates().filters(filter).max_results(200))
}

/// A cluster's launch templates, their latest versions, and the autoscaler's sizes by template id.
type Templates =
    (Vec<aws_sdk_ec2::types::LaunchTemplate>, Vec<aws_sdk_ec2::types::LaunchTemplateVersion>, BTreeMap<String, u32>);

/// Everything tagged for `cluster` (and the API load balancer by name).
///
/// `lb_name`: the API load balancer to look for; None makes no ELBv2 call
/// (a cluster without one, or a caller that does not need it).
pub async fn observe(aws: &Aws, cluster: &str, lb_name: Option<&str>) -> anyhow::Result<Observed> {
    let f = || tag_filter(tags::CLUSTER, cluster);
    let ec2 = &aws.ec2;
    let vpcs = async { sdk("DescribeVpcs", ec2.describe_vpcs().filters(f()).send().await) };
    let subnets = async { all_pages!("DescribeSubnets", ec2.describe_subnets().filters(f()).max_results(1000)) };
    let igws = async {
        all_pages!("DescribeInternetGateways", ec2.describe_internet_gateways().filters(f()).max_results(1000))
    };
    let addresses = async { sdk("DescribeAddresses", ec2.describe_addresses().filters(f()).send().await) };
    let nats = async { all_pages!("DescribeNatGateways", ec2.describe_nat_gateways().filter(f()).max_results(1000)) };
    let rts = async { all_pages!("DescribeRouteTables", ec2.describe_route_tables().filters(f()).max_results(100)) };
    let sgs = security_groups(aws, f());
    let lts = templates_with_versions(aws, f());
    let instances = async { all_pages!("DescribeInstances", ec2.describe_instances().filters(f()).max_results(1000)) };
    let lb = async {
        match lb_name {
            Some(name) => observe_load_balancer(aws, name, name).await,
            None => Ok(((None, None, None), None)),
        }
    };
    let iam = super::iam::observe(aws, cluster);
    let events = super::events::observe(aws, cluster);
    let (
        vpcs,
        subnets,
        igws,
        addresses,
        nats,
        rts,
        sgs,
        (templates, versions, sizes),
        reservations,
        (lb, unavailable),
        iam,
        events,
    ) = futures::try_join!(vpcs, subnets, igws, addresses, nats, rts, sgs, lts, instances, lb, iam, events)?;

    let mut o = Observed::default();
    o.adopted = vpcs.vpcs().first().and_then(|v| adopted(v.tags()));
    // An adopted cluster's API load balancer has the other tool's names.
    let (lb, unavailable) = match (&o.adopted, lb_name) {
        (Some(a), Some(_)) if a.load_balancer.is_some() => {
            let lb_name = a.load_balancer.as_deref().unwrap_or_default();
            observe_load_balancer(aws, lb_name, a.target_group.as_deref().unwrap_or(lb_name)).await?
        }
        _ => (lb, unavailable),
    };
    (o.iam_roles, o.instance_profiles) = iam;
    (o.events_queue, o.event_rules) = events;
    o.vpc = vpcs.vpcs().iter().find_map(|v| {
        Some(ObservedVpc { id: v.vpc_id()?.to_string(), cidr: v.cidr_block().unwrap_or_default().to_string() })
    });
    o.subnets = subnets.iter().filter_map(subnet).collect();
    o.internet_gateway = igws.iter().find_map(|g| {
        Some(ObservedIgw {
            id: g.internet_gateway_id()?.to_string(),
            attached_vpc: g.attachments().iter().find_map(|a| a.vpc_id().map(str::to_string)),
        })
    });
    o.addresses = addresses.addresses().iter().filter_map(address).collect();
    o.nat_gateways = nats
        .iter()
        .filter(|n| !matches!(n.state().map(|s| s.as_str()), Some("deleted" | "deleting" | "failed")))
        // Ownership checked on the resource itself, not only by the call's
        // filter: an endpoint that ignores a `tag:` filter (moto's
        // DescribeNatGateways does) would hand one cluster another's NATs,
        // and its destroy would delete them.
        .filter(|n| tag_map(n.tags()).get(tags::CLUSTER).map(String::as_str) == Some(cluster))
        .filter_map(nat)
        .collect();
    o.route_tables = rts.iter().filter_map(route_table).collect();
    o.security_groups = sgs.iter().filter_map(security_group).collect();
    let latest: BTreeMap<String, &aws_sdk_ec2::types::LaunchTemplateVersion> =
        versions.iter().filter_map(|v| Some((v.launch_template_id()?.to_string(), v))).collect();
    o.launch_templates = templates
        .iter()
        .filter_map(|t| {
            let id = t.launch_template_id()?.to_string();
            let data = latest.get(&id).and_then(|v| v.launch_template_data()).map(template_data);
            let t_tags = tag_map(t.tags());
            Some(ObservedLaunchTemplate {
                name: t.launch_template_name().unwrap_or_default().to_string(),
                group: t_tags.get(tags::INSTANCE_GROUP)?.clone(),
                scaled_size: sizes.get(&id).copied(),
                latest_version: t.latest_version_number().unwrap_or(0),
                latest: data,
                id,
            })
        })
        .collect();
    o.instances = reservations.iter().flat_map(|r| r.instances()).map(instance).collect();
    o.instances.sort_by(|a, b| a.id.cmp(&b.id));
    (o.load_balancer, o.target_group, o.listener) = lb;
    o.elbv2_unavailable = unavailable;
    Ok(o)
}

/// The cluster's launch templates, the latest version of each (one call
/// for all), and the autoscaler's size of each by template id.
async fn templates_with_versions(aws: &Aws, filter: Filter) -> anyhow::Result<Templates> {
    let ec2 = &aws.ec2;
    let templates = launch_templates(aws, filter).await?;
    if templates.is_empty() {
        return Ok((templates, Vec::new(), BTreeMap::new()));
    }
    // One call for the latest version of every template (no per-template calls).
    let versions = async {
        all_pages!(
            "DescribeLaunchTemplateVersions",
            ec2.describe_launch_template_versions().versions("$Latest").max_results(200)
        )
    };
    // The autoscaler's sizes, read where AWS keeps tags (moto's
    // DescribeLaunchTemplates shows a template's tags as created).
    let ids: Vec<String> = templates.iter().filter_map(|t| t.launch_template_id().map(str::to_string)).collect();
    let sizes = async {
        let name = |n: &str, v: Vec<String>| Filter::builder().name(n).set_values(Some(v)).build();
        all_pages!(
            "DescribeTags",
            ec2.describe_tags()
                .filters(name("resource-type", vec!["launch-template".into()]))
                .filters(name("key", vec![tags::AUTOSCALER_SIZE.into()]))
                .filters(name("resource-id", ids))
                .max_results(1000)
        )
    };
    let (versions, sizes) = futures::try_join!(versions, sizes)?;
    let sizes: BTreeMap<String, u32> =
        sizes.iter().filter_map(|t| Some((t.resource_id()?.to_string(), t.value()?.parse().ok()?))).collect();
    Ok((templates, versions, sizes))
}

/// A subnet the cluster tagged as one of its own.
fn subnet(s: &aws_sdk_ec2::types::Subnet) -> Option<ObservedSubnet> {
    let t = tag_map(s.tags());
    Some(ObservedSubnet {
        id: s.subnet_id()?.to_string(),
        name: match resource_key(&t)? {
            ResourceKey::Subnet(n) => n,
            _ => return None,
        },
        zone: s.availability_zone().unwrap_or_default().to_string(),
        cidr: s.cidr_block().unwrap_or_default().to_string(),
    })
}

/// An Elastic IP the cluster tagged as one of its own.
fn address(a: &aws_sdk_ec2::types::Address) -> Option<ObservedAddress> {
    Some(ObservedAddress {
        allocation_id: a.allocation_id()?.to_string(),
        zone: match resource_key(&tag_map(a.tags()))? {
            ResourceKey::Eip(z) => z,
            _ => return None,
        },
        public_ip: a.public_ip().map(str::to_string),
        instance: a.instance_id().map(str::to_string),
    })
}

/// A NAT gateway of the cluster.
fn nat(n: &aws_sdk_ec2::types::NatGateway) -> Option<ObservedNat> {
    Some(ObservedNat {
        id: n.nat_gateway_id()?.to_string(),
        zone: match resource_key(&tag_map(n.tags()))? {
            ResourceKey::Nat(z) => z,
            _ => return None,
        },
        subnet_id: n.subnet_id().unwrap_or_default().to_string(),
        state: n.state().map(|s| s.as_str().to_string()).unwrap_or_default(),
    })
}

/// A route table of the cluster: its default route and subnets.
fn route_table(r: &aws_sdk_ec2::types::RouteTable) -> Option<ObservedRouteTable> {
    let default_route = r
        .routes()
        .iter()
        .find(|x| x.destination_cidr_block() == Some("0.0.0.0/0"))
        .and_then(|x| x.gateway_id().or(x.nat_gateway_id()).map(str::to_string));
    Some(ObservedRouteTable {
        id: r.route_table_id()?.to_string(),
        name: match resource_key(&tag_map(r.tags()))? {
            ResourceKey::RouteTable(n) => n,
            _ => return None,
        },
        default_route,
        associations: r
            .associations()
            .iter()
            .filter_map(|a| Some((a.route_table_association_id()?.to_string(), a.subnet_id()?.to_string())))
            .collect(),
    })
}

/// A security group of the cluster and its ingress rules, sorted.
fn security_group(g: &aws_sdk_ec2::types::SecurityGroup) -> Option<ObservedSecurityGroup> {
    let mut ingress = Vec::new();
    for p in g.ip_permissions() {
        let protocol = p.ip_protocol().unwrap_or_default().to_string();
        let (from, to) = (p.from_port().unwrap_or(-1), p.to_port().unwrap_or(-1));
        for r in p.ip_ranges() {
            if let Some(c) = r.cidr_ip() {
                ingress.push(ObservedRule {
                    protocol: protocol.clone(),
                    from_port: from,
                    to_port: to,
                    source: ObservedSource::Cidr(c.to_string()),
                });
            }
        }
        for u in p.user_id_group_pairs() {
            if let Some(id) = u.group_id() {
                ingress.push(ObservedRule {
                    protocol: protocol.clone(),
                    from_port: from,
                    to_port: to,
                    source: ObservedSource::GroupId(id.to_string()),
                });
            }
        }
    }
    ingress.sort();
    Some(ObservedSecurityGroup {
        id: g.group_id()?.to_string(),
        name: match resource_key(&tag_map(g.tags()))? {
            ResourceKey::SecurityGroup(n) => n,
            _ => return None,
        },
        ingress,
    })
}

pub fn instance(i: &aws_sdk_ec2::types::Instance) -> ObservedInstance {
    let t = tag_map(i.tags());
    ObservedInstance {
        id: i.instance_id().unwrap_or_default().to_string(),
        cluster: t.get(tags::CLUSTER).cloned(),
        group: t.get(tags::INSTANCE_GROUP).cloned(),
        owner: t.get(tags::OWNER).cloned(),
        state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
        image_id: i.image_id().unwrap_or_default().to_string(),
        instance_type: i.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        subnet_id: i.subnet_id().map(str::to_string),
        zone: i.placement().and_then(|p| p.availability_zone()).map(str::to_string),
        vpc_id: i.vpc_id().map(str::to_string),
        private_ip: i.private_ip_address().map(str::to_string),
        launch_template_version: t.get(tags::LT_VERSION).and_then(|v| v.parse().ok()),
        revision: t.get(tags::REVISION).and_then(|v| v.parse().ok()),
        kubernetes_version: t.get(tags::KUBERNETES_VERSION).cloned(),
        launch_time: i.launch_time().map(|d| d.secs()),
        spot: i.instance_lifecycle() == Some(&aws_sdk_ec2::types::InstanceLifecycleType::Spot),
        etcd_manager: t.get(tags::ETCD).is_some_and(|v| v == tags::ETCD_MANAGER)
            || ["k8s.io/role/control-plane", "k8s.io/role/master"].iter().any(|k| t.get(*k).is_some_and(|v| v == "1")),
    }
}

fn template_data(d: &aws_sdk_ec2::types::ResponseLaunchTemplateData) -> ObservedTemplateData {
    use base64::Engine;
    let bdm = d.block_device_mappings().first();
    let ebs = bdm.and_then(|b| b.ebs());
    let user_data = d
        .user_data()
        .and_then(|u| base64::engine::general_purpose::STANDARD.decode(u).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let tags = d
        .tag_specifications()
        .iter()
        .find(|s| s.resource_type().map(|r| r.as_str()) == Some("instance"))
        .map(|s| tag_map(s.tags()))
        .unwrap_or_default();
    ObservedTemplateData {
        image_id: d.image_id().unwrap_or_default().to_string(),
        instance_type: d.instance_type().map(|t| t.as_str().to_string()).unwrap_or_default(),
        root_device: bdm.and_then(|b| b.device_name()).unwrap_or_default().to_string(),
        root_volume_gib: ebs.and_then(|e| e.volume_size()).unwrap_or(0),
        root_volume_type: ebs.and_then(|e| e.volume_type()).map(|v| v.as_str().to_string()).unwrap_or_default(),
        encrypted: ebs.and_then(|e| e.encrypted()).unwrap_or(false),
        instance_profile: d.iam_instance_profile().and_then(|p| p.name()).map(str::to_string),
        key_name: d.key_name().map(str::to_string),
        security_group_ids: d.security_group_ids().to_vec(),
        imds_tokens_required: d.metadata_options().and_then(|m| m.http_tokens()).map(|t| t.as_str())
            == Some("required"),
        user_data,
        tags,
        capacity_reservation: d.capacity_reservation_specification().and_then(|c| {
            use crate::capacity::{Reservation, ReservationPreference};
            let target = c.capacity_reservation_target();
            if let Some(id) = target.and_then(|t| t.capacity_reservation_id()) {
                return Some(Reservation::Id(id.to_string()));
            }
            if let Some(arn) = target.and_then(|t| t.capacity_reservation_resource_group_arn()) {
                return Some(Reservation::ResourceGroup(arn.to_string()));
            }
            let p = match c.capacity_reservation_preference()?.as_str() {
                "open" => ReservationPreference::Open,
                "none" => ReservationPreference::None,
                "capacity-reservations-only" => ReservationPreference::CapacityReservationsOnly,
                _ => return None,
            };
            Some(Reservation::Preference(p))
        }),
    }
}

/// What an adopted cluster's VPC tags say (None: not adopted).
fn adopted(vpc_tags: &[Tag]) -> Option<crate::cloud::observed::Adopted> {
    let t = tag_map(vpc_tags);
    Some(crate::cloud::observed::Adopted {
        from: t.get(tags::ADOPTED_FROM)?.clone(),
        load_balancer: t.get(tags::API_LOAD_BALANCER).cloned(),
        target_group: t.get(tags::API_TARGET_GROUP).cloned(),
    })
}

type LbParts = (Option<ObservedLoadBalancer>, Option<ObservedTargetGroup>, Option<String>);

/// The API load balancer, its target group (with registered targets) and
/// listener, found by name (ELBv2 cannot filter by tag).
/// An endpoint without ELBv2 has no load balancer to find: that is
/// returned (with what it said), and the caller decides whether the cluster
/// needs one.
async fn observe_load_balancer(aws: &Aws, name: &str, tg_name: &str) -> anyhow::Result<(LbParts, Option<String>)> {
    let lbs = match aws.elb.describe_load_balancers().names(name).send().await {
        Ok(r) => r.load_balancers().to_vec(),
        Err(e) if super::error_code(&e) == Some("LoadBalancerNotFound") => Vec::new(),
        Err(e) if super::service_unavailable(&e) => {
            let said = format!("DescribeLoadBalancers: {}", super::client::describe_sdk_error(&e));
            return Ok(((None, None, None), Some(said)));
        }
        Err(e) => return sdk("DescribeLoadBalancers", Err(e)),
    };
    let tgs = match aws.elb.describe_target_groups().names(tg_name).send().await {
        Ok(r) => r.target_groups().to_vec(),
        Err(e) if super::error_code(&e) == Some("TargetGroupNotFound") => Vec::new(),
        Err(e) => return sdk("DescribeTargetGroups", Err(e)),
    };
    let lb = lbs.first().and_then(|l| {
        Some(ObservedLoadBalancer {
            arn: l.load_balancer_arn()?.to_string(),
            dns_name: l.dns_name().unwrap_or_default().to_string(),
            internal: l.scheme().map(|s| s.as_str()) == Some("internal"),
            subnet_ids: l.availability_zones().iter().filter_map(|z| z.subnet_id().map(str::to_string)).collect(),
        })
    });
    let mut tg = tgs.first().and_then(|t| {
        Some(ObservedTargetGroup {
            arn: t.target_group_arn()?.to_string(),
            port: t.port().unwrap_or(0),
            targets: Vec::new(),
        })
    });
    let mut listener = None;
    if let Some(lb) = &lb {
        let ls = sdk("DescribeListeners", aws.elb.describe_listeners().load_balancer_arn(&lb.arn).send().await)?;
        listener = ls.listeners().first().and_then(|l| l.listener_arn().map(str::to_string));
    }
    if let Some(tg) = &mut tg {
        let health =
            sdk("DescribeTargetHealth", aws.elb.describe_target_health().target_group_arn(&tg.arn).send().await)?;
        tg.targets = health
            .target_health_descriptions()
            .iter()
            .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_string))
            .collect();
        tg.targets.sort();
    }
    Ok(((lb, tg, listener), None))
}

pub async fn list_instances(
    aws: &Aws,
    cluster: Option<&str>,
    include_terminated: bool,
) -> anyhow::Result<Vec<crate::cloud::observed::ObservedInstance>> {
    let mut req = aws.ec2.describe_instances().max_results(1000);
    req = match cluster {
        Some(c) => req.filters(Filter::builder().name(format!("tag:{}", tags::CLUSTER)).values(c).build()),
        None => req.filters(
            Filter::builder().name(format!("tag:{}", tags::MANAGED_BY)).values(tags::MANAGED_BY_VALUE).build(),
        ),
    };
    let reservations = all_pages!("DescribeInstances", req)?;
    Ok(reservations
        .iter()
        .flat_map(|r| r.instances())
        .map(instance)
        .filter(|i| include_terminated || i.state != "terminated")
        .collect())
}

/// Everything pinfleet made in the connected region, found by its
/// `managed-by` tag (instances, VPCs, security groups, launch templates),
/// and the live machines inside those VPCs: what `orphans` judges.
pub async fn fleet(aws: &Aws) -> anyhow::Result<crate::cloud::orphans::Fleet> {
    use crate::cloud::orphans::{Fleet, Tagged};
    let managed = || tag_filter(tags::MANAGED_BY, tags::MANAGED_BY_VALUE);
    let ec2 = &aws.ec2;
    let (instances, vpcs, sgs, lts) = futures::try_join!(
        list_instances(aws, None, false),
        async { sdk("DescribeVpcs", ec2.describe_vpcs().filters(managed()).send().await) },
        security_groups(aws, managed()),
        launch_templates(aws, managed()),
    )?;
    let mut fleet = Fleet::default();
    for i in instances.iter().filter(|i| i.is_live()) {
        fleet.tagged.push(Tagged {
            kind: "instance".into(),
            id: i.id.clone(),
            cluster: i.cluster.clone(),
            owner: i.owner.clone(),
        });
    }
    let mut tagged = |kind: &str, id: Option<&str>, t: &[aws_sdk_ec2::types::Tag]| {
        let m = tag_map(t);
        fleet.tagged.push(Tagged {
            kind: kind.into(),
            id: id.unwrap_or_default().into(),
            cluster: m.get(tags::CLUSTER).cloned(),
            owner: m.get(tags::OWNER).cloned(),
        });
    };
    for v in vpcs.vpcs() {
        tagged("vpc", v.vpc_id(), v.tags());
    }
    for s in &sgs {
        tagged("security-group", s.group_id(), s.tags());
    }
    for t in &lts {
        tagged("launch-template", t.launch_template_id(), t.tags());
    }
    // IAM is global: every region's scan sees the same roles.
    let roles: Vec<aws_sdk_iam::types::Role> = aws
        .iam
        .list_roles()
        .path_prefix(crate::cloud::iam::PATH)
        .into_paginator()
        .items()
        .send()
        .try_collect()
        .await
        .map_err(|e| anyhow::anyhow!("ListRoles: {}", super::client::describe_sdk_error(&e)))?;
    for r in roles {
        let t = aws
            .iam
            .list_role_tags()
            .role_name(r.role_name())
            .send()
            .await
            .map_err(|e| anyhow::anyhow!("ListRoleTags: {}", super::client::describe_sdk_error(&e)))?;
        let m: BTreeMap<&str, &str> = t.tags().iter().map(|t| (t.key(), t.value())).collect();
        if m.get(tags::MANAGED_BY) == Some(&tags::MANAGED_BY_VALUE) {
            fleet.tagged.push(Tagged {
                kind: "iam-role".into(),
                id: r.role_name().to_string(),
                cluster: m.get(tags::CLUSTER).map(|s| s.to_string()),
                owner: m.get(tags::OWNER).map(|s| s.to_string()),
            });
        }
    }
    let vpc_ids: Vec<String> = vpcs.vpcs().iter().filter_map(|v| v.vpc_id().map(str::to_string)).collect();
    if !vpc_ids.is_empty() {
        let inside = all_pages!(
            "DescribeInstances",
            ec2.describe_instances()
                .filters(aws_sdk_ec2::types::Filter::builder().name("vpc-id").set_values(Some(vpc_ids)).build())
                .max_results(1000)
        )?;
        fleet.in_vpcs = inside.iter().flat_map(|r| r.instances()).map(instance).filter(|i| i.is_live()).collect();
    }
    Ok(fleet)
}

/// The private IPs and DNS names of one instance (every interface's, and its
/// public IP): the names a machine may put in its serving certificate.
pub async fn instance_addresses(
    aws: &Aws,
    id: &str,
) -> anyhow::Result<(std::collections::BTreeSet<std::net::IpAddr>, std::collections::BTreeSet<String>)> {
    let out = sdk("DescribeInstances", aws.ec2.describe_instances().instance_ids(id).send().await)?;
    let (mut ips, mut names) = (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for i in out.reservations().iter().flat_map(|r| r.instances()) {
        let private = i.network_interfaces().iter().flat_map(|e| e.private_ip_addresses());
        let pairs = private
            .map(|p| (p.private_ip_address(), p.private_dns_name()))
            .chain([(i.private_ip_address(), i.private_dns_name()), (i.public_ip_address(), None)]);
        for (ip, dns) in pairs {
            ips.extend(ip.and_then(|a| a.parse::<std::net::IpAddr>().ok()));
            names.extend(dns.filter(|d| !d.is_empty()).map(str::to_string));
        }
    }
    Ok((ips, names))
}
