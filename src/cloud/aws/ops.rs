//! The operations behind each plan change, against EC2 and ELBv2. Each is
//! idempotent where AWS allows it (duplicates and not-founds are treated as
//! done) and says whether a failure is worth retrying (eventual
//! consistency, dependencies still draining).

use crate::cloud::key::ResourceKey as K;
use std::collections::BTreeMap;
use std::time::Duration;

use aws_sdk_ec2::types::{
    AttributeBooleanValue, DomainType, Filter, IpPermission, IpRange, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateSpecification, LaunchTemplateTagSpecificationRequest,
    RequestLaunchTemplateData, ResourceType, Tag, UserIdGroupPair, VolumeType,
};
use aws_sdk_elasticloadbalancingv2::types as elb;
use base64::Engine;

use crate::cloud::model::{LaunchTemplateData, RouteTarget, Rule, Source};
use crate::cloud::observed::ObservedSource;
use crate::cloud::ops::{with_api_host, ObservedRuleRef, Op};
use crate::cloud::tags;
use crate::spec::Role;

pub use super::context::OpContext;
use super::context::{call, call_ok_if, R};
pub use crate::cloud::ops::OpError;

impl crate::cloud::ops::Operations for OpContext {
    fn run<'a>(&'a self, key: &'a K, op: &'a Op) -> futures::future::BoxFuture<'a, Result<String, OpError>> {
        Box::pin(run(self, key, op))
    }
}

fn filter(name: &str, values: impl IntoIterator<Item = impl Into<String>>) -> Filter {
    Filter::builder().name(name).set_values(Some(values.into_iter().map(Into::into).collect())).build()
}

/// Polling interval while waiting on AWS state (NAT gateways, terminations).
const POLL: Duration = Duration::from_secs(2);
/// How long to wait for a NAT gateway or termination before giving up this attempt.
const WAIT_LIMIT: Duration = Duration::from_secs(600);

fn permission(protocol: &str, from: i32, to: i32, source: &ObservedSource) -> IpPermission {
    let b = IpPermission::builder().ip_protocol(protocol).from_port(from).to_port(to);
    match source {
        ObservedSource::Cidr(c) => b.ip_ranges(IpRange::builder().cidr_ip(c).build()),
        ObservedSource::GroupId(g) => b.user_id_group_pairs(UserIdGroupPair::builder().group_id(g).build()),
    }
    .build()
}

async fn rule_source(ctx: &OpContext, r: &Rule) -> R<ObservedSource> {
    Ok(match &r.source {
        Source::Cidr(c) => ObservedSource::Cidr(c.clone()),
        Source::Group(g) => ObservedSource::GroupId(ctx.id(&K::SecurityGroup(g.to_string())).await?),
    })
}

async fn template_data(ctx: &OpContext, d: &LaunchTemplateData, group: &str) -> R<RequestLaunchTemplateData> {
    let host = ctx
        .lb_dns
        .lock()
        .await
        .clone()
        .ok_or_else(|| OpError::fatal(anyhow::anyhow!("the API load balancer has no DNS name yet")))?;
    let user_data = base64::engine::general_purpose::STANDARD.encode(with_api_host(&d.user_data, &host));
    let sg = ctx.id(&K::SecurityGroup(d.security_group.to_string())).await?;
    let tag_list: Vec<Tag> = d.tags.iter().map(|(k, v)| Tag::builder().key(k).value(v).build()).collect();
    let mut b = RequestLaunchTemplateData::builder()
        .image_id(&d.image_id)
        .instance_type(d.instance_type.as_str().into())
        .user_data(user_data)
        .security_group_ids(sg)
        .block_device_mappings(
            LaunchTemplateBlockDeviceMappingRequest::builder()
                .device_name(&d.root_device)
                .ebs(
                    LaunchTemplateEbsBlockDeviceRequest::builder()
                        .volume_size(d.root_volume_gib)
                        .volume_type(VolumeType::from(d.root_volume_type.as_str()))
                        .encrypted(d.encrypted)
                        .delete_on_termination(true)
                        .build(),
                )
                .build(),
        )
        .metadata_options(
            LaunchTemplateInstanceMetadataOptionsRequest::builder()
                .http_tokens(if d.imds_tokens_required {
                    LaunchTemplateHttpTokensState::Required
                } else {
                    LaunchTemplateHttpTokensState::Optional
                })
                .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::Enabled)
                .http_put_response_hop_limit(2)
                .build(),
        )
        .tag_specifications(
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ResourceType::Instance)
                .set_tags(Some(tag_list.clone()))
                .build(),
        )
        .tag_specifications(
            LaunchTemplateTagSpecificationRequest::builder()
                .resource_type(ResourceType::Volume)
                .set_tags(Some(tag_list))
                .build(),
        );
    if let Some(p) = &d.instance_profile {
        b = b.iam_instance_profile(LaunchTemplateIamInstanceProfileSpecificationRequest::builder().name(p).build());
    }
    if let Some(k) = &d.key_name {
        b = b.key_name(k);
    }
    let _ = group;
    Ok(b.build())
}

/// Runs one operation.
/// Keeps the API endpoint's Elastic IP on a live control-plane machine: where
/// it is when that machine lives, else on the newest one (a replacement in a
/// roll takes the address before its predecessor goes).
async fn associate_api_address(ctx: &OpContext, live: &[String]) -> Result<String, OpError> {
    let ec2 = &ctx.aws.ec2;
    let key = K::Eip(crate::cloud::model::API_ADDRESS.to_string());
    let alloc = ctx.id(&key).await?;
    let current = call("DescribeAddresses", ec2.describe_addresses().allocation_ids(&alloc).send().await)?
        .addresses()
        .first()
        .and_then(|a| a.instance_id().map(str::to_string));
    match (current, live.last()) {
        (Some(on), _) if live.contains(&on) => Ok(format!("on {on}")),
        (_, None) => Ok("no live control-plane machine yet".into()),
        (_, Some(newest)) => {
            call(
                "AssociateAddress",
                ec2.associate_address()
                    .allocation_id(&alloc)
                    .instance_id(newest)
                    .allow_reassociation(true)
                    .send()
                    .await,
            )?;
            Ok(format!("on {newest}"))
        }
    }
}

pub async fn run(ctx: &OpContext, key: &K, op: &Op) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let cluster = ctx.desired.cluster.clone();
    match op {
        Op::CreateRole { .. }
        | Op::PutRolePolicy { .. }
        | Op::CreateInstanceProfile { .. }
        | Op::DeleteInstanceProfile { .. }
        | Op::DeleteRole { .. } => super::iam::run(ctx, key, op).await,
        Op::CreateEventQueue { .. }
        | Op::PutEventRule { .. }
        | Op::DeleteEventRule { .. }
        | Op::DeleteEventQueue { .. } => super::events::run(ctx, key, op).await,
        Op::CreateVpc { cidr } => {
            let out = call(
                "CreateVpc",
                ec2.create_vpc()
                    .cidr_block(cidr)
                    .tag_specifications(ctx.spec(ResourceType::Vpc, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.vpc().and_then(|v| v.vpc_id()).unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            // Kubernetes nodes need DNS hostnames and resolution inside the VPC.
            call(
                "ModifyVpcAttribute",
                ec2.modify_vpc_attribute()
                    .vpc_id(&id)
                    .enable_dns_support(AttributeBooleanValue::builder().value(true).build())
                    .send()
                    .await,
            )?;
            call(
                "ModifyVpcAttribute",
                ec2.modify_vpc_attribute()
                    .vpc_id(&id)
                    .enable_dns_hostnames(AttributeBooleanValue::builder().value(true).build())
                    .send()
                    .await,
            )?;
            Ok(id)
        }
        Op::CreateSubnet { zone, cidr, public, .. } => {
            let vpc = ctx.id(&K::Vpc).await?;
            let out = call(
                "CreateSubnet",
                ec2.create_subnet()
                    .vpc_id(vpc)
                    .cidr_block(cidr)
                    .availability_zone(zone)
                    .tag_specifications(ctx.spec(ResourceType::Subnet, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.subnet().and_then(|s| s.subnet_id()).unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            if *public {
                call(
                    "ModifySubnetAttribute",
                    ec2.modify_subnet_attribute()
                        .subnet_id(&id)
                        .map_public_ip_on_launch(AttributeBooleanValue::builder().value(true).build())
                        .send()
                        .await,
                )?;
            }
            Ok(id)
        }
        Op::CreateInternetGateway => {
            let vpc = ctx.id(&K::Vpc).await?;
            let out = call(
                "CreateInternetGateway",
                ec2.create_internet_gateway()
                    .tag_specifications(ctx.spec(ResourceType::InternetGateway, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.internet_gateway().and_then(|g| g.internet_gateway_id()).unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            call(
                "AttachInternetGateway",
                ec2.attach_internet_gateway().internet_gateway_id(&id).vpc_id(vpc).send().await,
            )?;
            Ok(id)
        }
        Op::AllocateAddress { zone } => {
            let out = call(
                "AllocateAddress",
                ec2.allocate_address()
                    .domain(DomainType::Vpc)
                    .tag_specifications(ctx.spec(ResourceType::ElasticIp, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.allocation_id().unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            if zone == crate::cloud::model::API_ADDRESS {
                // The API endpoint every machine's user-data names.
                *ctx.lb_dns.lock().await = out.public_ip().map(str::to_string);
                return Ok(format!("{id} ({})", out.public_ip().unwrap_or("no public IP")));
            }
            Ok(id)
        }
        Op::CreateNatGateway { zone, subnet } => {
            let subnet_id = ctx.id(&K::Subnet(subnet.to_string())).await?;
            let alloc = ctx.id(&K::Eip(zone.to_string())).await?;
            let out = call(
                "CreateNatGateway",
                ec2.create_nat_gateway()
                    .subnet_id(subnet_id)
                    .allocation_id(alloc)
                    .client_token(format!("{cluster}-nat-{zone}"))
                    .tag_specifications(ctx.spec(ResourceType::Natgateway, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.nat_gateway().and_then(|n| n.nat_gateway_id()).unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            let start = std::time::Instant::now();
            loop {
                let d = call("DescribeNatGateways", ec2.describe_nat_gateways().nat_gateway_ids(&id).send().await)?;
                match d.nat_gateways().first().and_then(|n| n.state()).map(|s| s.as_str().to_string()).as_deref() {
                    Some("available") => break,
                    Some("failed") => return Err(OpError::fatal(anyhow::anyhow!("NAT gateway {id} failed to start"))),
                    _ if start.elapsed() > WAIT_LIMIT => {
                        return Err(OpError {
                            retriable: true,
                            error: anyhow::anyhow!("NAT gateway {id} is not available yet"),
                        })
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            }
            Ok(id)
        }
        Op::CreateRouteTable { .. } => {
            let vpc = ctx.id(&K::Vpc).await?;
            let out = call(
                "CreateRouteTable",
                ec2.create_route_table()
                    .vpc_id(vpc)
                    .tag_specifications(ctx.spec(ResourceType::RouteTable, key, &[]))
                    .send()
                    .await,
            )?;
            let id = out.route_table().and_then(|r| r.route_table_id()).unwrap_or_default().to_string();
            ctx.set(key, &id).await;
            Ok(id)
        }
        Op::SyncRouteTable { name, default_route, subnets } => {
            let rt = ctx.id(&K::RouteTable(name.to_string())).await?;
            let d = call("DescribeRouteTables", ec2.describe_route_tables().route_table_ids(&rt).send().await)?;
            let table = d.route_tables().first().cloned().ok_or_else(|| OpError {
                retriable: true,
                error: anyhow::anyhow!("route table {rt} not visible yet"),
            })?;
            if let Some(target) = default_route {
                let target_id = match target {
                    RouteTarget::InternetGateway => ctx.id(&K::Igw).await?,
                    RouteTarget::Nat { zone } => ctx.id(&K::Nat(zone.to_string())).await?,
                };
                let current = table.routes().iter().find(|r| r.destination_cidr_block() == Some("0.0.0.0/0"));
                let current_target = current.and_then(|r| r.gateway_id().or(r.nat_gateway_id()));
                if current_target != Some(target_id.as_str()) {
                    let is_nat = matches!(target, RouteTarget::Nat { .. });
                    if current.is_some() {
                        let mut req = ec2.replace_route().route_table_id(&rt).destination_cidr_block("0.0.0.0/0");
                        req = if is_nat { req.nat_gateway_id(&target_id) } else { req.gateway_id(&target_id) };
                        call("ReplaceRoute", req.send().await)?;
                    } else {
                        let mut req = ec2.create_route().route_table_id(&rt).destination_cidr_block("0.0.0.0/0");
                        req = if is_nat { req.nat_gateway_id(&target_id) } else { req.gateway_id(&target_id) };
                        call("CreateRoute", req.send().await)?;
                    }
                }
            }
            let mut want = Vec::new();
            for s in subnets {
                want.push(ctx.id(&K::Subnet(s.to_string())).await?);
            }
            for a in table.associations() {
                if let (Some(aid), Some(sid)) = (a.route_table_association_id(), a.subnet_id()) {
                    if !want.iter().any(|w| w == sid) {
                        call(
                            "DisassociateRouteTable",
                            ec2.disassociate_route_table().association_id(aid).send().await,
                        )?;
                    }
                }
            }
            for sid in &want {
                if !table.associations().iter().any(|a| a.subnet_id() == Some(sid.as_str())) {
                    // A subnet can be associated with one table: move it if needed.
                    let other = call(
                        "DescribeRouteTables",
                        ec2.describe_route_tables()
                            .filters(filter("association.subnet-id", [sid.clone()]))
                            .send()
                            .await,
                    )?;
                    let existing = other
                        .route_tables()
                        .iter()
                        .flat_map(|t| t.associations())
                        .find(|a| a.subnet_id() == Some(sid.as_str()))
                        .and_then(|a| a.route_table_association_id().map(str::to_string));
                    match existing {
                        Some(aid) => call(
                            "ReplaceRouteTableAssociation",
                            ec2.replace_route_table_association().association_id(aid).route_table_id(&rt).send().await,
                        )
                        .map(|_| ())?,
                        None => call(
                            "AssociateRouteTable",
                            ec2.associate_route_table().route_table_id(&rt).subnet_id(sid).send().await,
                        )
                        .map(|_| ())?,
                    }
                }
            }
            Ok(rt)
        }
        Op::CreateSecurityGroup { name, description } => {
            let vpc = ctx.id(&K::Vpc).await?;
            let out = call_ok_if(
                "CreateSecurityGroup",
                &["InvalidGroup.Duplicate"],
                ec2.create_security_group()
                    .group_name(format!("{cluster}-{name}"))
                    .description(description)
                    .vpc_id(&vpc)
                    .tag_specifications(ctx.spec(ResourceType::SecurityGroup, key, &[]))
                    .send()
                    .await,
            )?;
            let id = match out {
                Some(o) => o.group_id().unwrap_or_default().to_string(),
                None => {
                    let d = call(
                        "DescribeSecurityGroups",
                        ec2.describe_security_groups()
                            .filters(filter("vpc-id", [vpc]))
                            .filters(filter("group-name", [format!("{cluster}-{name}")]))
                            .send()
                            .await,
                    )?;
                    d.security_groups().first().and_then(|g| g.group_id()).unwrap_or_default().to_string()
                }
            };
            ctx.set(key, &id).await;
            Ok(id)
        }
        Op::SyncSecurityGroupRules { name, add, remove } => {
            let sg = ctx.id(&K::SecurityGroup(name.to_string())).await?;
            for r in remove {
                let ObservedRuleRef { protocol, from_port, to_port, source } = r;
                call_ok_if(
                    "RevokeSecurityGroupIngress",
                    &["InvalidPermission.NotFound"],
                    ec2.revoke_security_group_ingress()
                        .group_id(&sg)
                        .ip_permissions(permission(protocol, *from_port, *to_port, source))
                        .send()
                        .await,
                )?;
            }
            for r in add {
                let src = rule_source(ctx, r).await?;
                call_ok_if(
                    "AuthorizeSecurityGroupIngress",
                    &["InvalidPermission.Duplicate"],
                    ec2.authorize_security_group_ingress()
                        .group_id(&sg)
                        .ip_permissions(permission(&r.protocol, r.from_port, r.to_port, &src))
                        .send()
                        .await,
                )?;
            }
            Ok(sg)
        }
        Op::CreateLoadBalancer { name, internal, subnets } => {
            let mut ids = Vec::new();
            for s in subnets {
                ids.push(ctx.id(&K::Subnet(s.to_string())).await?);
            }
            let tag_list: Vec<elb::Tag> = ctx
                .tags_for(key, &[])
                .into_iter()
                .map(|t| {
                    elb::Tag::builder().key(t.key().unwrap_or_default()).value(t.value().unwrap_or_default()).build()
                })
                .collect();
            let out = call(
                "CreateLoadBalancer",
                ctx.aws
                    .elb
                    .create_load_balancer()
                    .name(name)
                    .r#type(elb::LoadBalancerTypeEnum::Network)
                    .scheme(if *internal {
                        elb::LoadBalancerSchemeEnum::Internal
                    } else {
                        elb::LoadBalancerSchemeEnum::InternetFacing
                    })
                    .set_subnets(Some(ids))
                    .set_tags(Some(tag_list))
                    .send()
                    .await,
            )?;
            let lb = out
                .load_balancers()
                .first()
                .ok_or_else(|| OpError::fatal(anyhow::anyhow!("CreateLoadBalancer returned nothing")))?;
            let arn = lb.load_balancer_arn().unwrap_or_default().to_string();
            *ctx.lb_dns.lock().await = lb.dns_name().map(str::to_string);
            ctx.set(key, &arn).await;
            Ok(arn)
        }
        Op::CreateTargetGroup { name, port } => {
            let vpc = ctx.id(&K::Vpc).await?;
            let tag_list: Vec<elb::Tag> = ctx
                .tags_for(key, &[])
                .into_iter()
                .map(|t| {
                    elb::Tag::builder().key(t.key().unwrap_or_default()).value(t.value().unwrap_or_default()).build()
                })
                .collect();
            let out = call(
                "CreateTargetGroup",
                ctx.aws
                    .elb
                    .create_target_group()
                    .name(name)
                    .protocol(elb::ProtocolEnum::Tcp)
                    .port(i32::from(*port))
                    .vpc_id(vpc)
                    .target_type(elb::TargetTypeEnum::Instance)
                    .health_check_protocol(elb::ProtocolEnum::Tcp)
                    .set_tags(Some(tag_list))
                    .send()
                    .await,
            )?;
            let arn = out.target_groups().first().and_then(|t| t.target_group_arn()).unwrap_or_default().to_string();
            ctx.set(key, &arn).await;
            Ok(arn)
        }
        Op::CreateListener { port } => {
            let lb = ctx.id(&K::LoadBalancer).await?;
            let tg = ctx.id(&K::TargetGroup).await?;
            let action = elb::Action::builder().r#type(elb::ActionTypeEnum::Forward).target_group_arn(tg).build();
            let out = call(
                "CreateListener",
                ctx.aws
                    .elb
                    .create_listener()
                    .load_balancer_arn(lb)
                    .protocol(elb::ProtocolEnum::Tcp)
                    .port(i32::from(*port))
                    .default_actions(action)
                    .send()
                    .await,
            )?;
            let arn = out.listeners().first().and_then(|l| l.listener_arn()).unwrap_or_default().to_string();
            ctx.set(key, &arn).await;
            Ok(arn)
        }
        Op::SyncTargets => {
            let cp_groups: Vec<String> =
                ctx.desired.groups.iter().filter(|g| g.role == Role::ControlPlane).map(|g| g.name.clone()).collect();
            // Live control-plane machines, newest last.
            let mut live: Vec<(String, i64)> = Vec::new();
            if !cp_groups.is_empty() {
                let mut pages = ec2
                    .describe_instances()
                    .filters(filter(&format!("tag:{}", tags::CLUSTER), [cluster.clone()]))
                    .filters(filter(&format!("tag:{}", tags::INSTANCE_GROUP), cp_groups))
                    .filters(filter("instance-state-name", ["pending", "running"]))
                    .into_paginator()
                    .items()
                    .send();
                while let Some(r) = pages.next().await {
                    let r = call("DescribeInstances", r)?;
                    live.extend(r.instances().iter().filter_map(|i| {
                        Some((i.instance_id()?.to_string(), i.launch_time().map(|t| t.secs()).unwrap_or(0)))
                    }));
                }
            }
            live.sort_by_key(|(id, t)| (*t, id.clone()));
            let live: Vec<String> = live.into_iter().map(|(id, _)| id).collect();
            if ctx.desired.api_address {
                return associate_api_address(ctx, &live).await;
            }
            let tg = ctx.id(&K::TargetGroup).await?;
            let health =
                call("DescribeTargetHealth", ctx.aws.elb.describe_target_health().target_group_arn(&tg).send().await)?;
            let registered: Vec<String> = health
                .target_health_descriptions()
                .iter()
                .filter_map(|d| d.target().and_then(|t| t.id()).map(str::to_string))
                .collect();
            let port = i32::from(ctx.desired.load_balancer.port);
            let desc = |id: &String| elb::TargetDescription::builder().id(id).port(port).build();
            let to_add: Vec<_> = live.iter().filter(|i| !registered.contains(i)).map(desc).collect();
            let to_remove: Vec<_> = registered.iter().filter(|i| !live.contains(i)).map(desc).collect();
            if !to_add.is_empty() {
                call(
                    "RegisterTargets",
                    ctx.aws.elb.register_targets().target_group_arn(&tg).set_targets(Some(to_add)).send().await,
                )?;
            }
            if !to_remove.is_empty() {
                call(
                    "DeregisterTargets",
                    ctx.aws.elb.deregister_targets().target_group_arn(&tg).set_targets(Some(to_remove)).send().await,
                )?;
            }
            Ok(format!("{} target(s)", live.len()))
        }
        Op::CreateLaunchTemplate { group, name, data } => {
            let d = template_data(ctx, data, group).await?;
            let out = call_ok_if(
                "CreateLaunchTemplate",
                &["InvalidLaunchTemplateName.AlreadyExistsException"],
                ec2.create_launch_template()
                    .launch_template_name(name)
                    .launch_template_data(d)
                    .tag_specifications(ctx.spec(ResourceType::LaunchTemplate, key, &[(tags::INSTANCE_GROUP, group)]))
                    .send()
                    .await,
            )?;
            let (id, version) = match out {
                Some(o) => {
                    let t = o.launch_template();
                    (
                        t.and_then(|t| t.launch_template_id()).unwrap_or_default().to_string(),
                        t.and_then(|t| t.latest_version_number()).unwrap_or(1),
                    )
                }
                None => {
                    let d = call(
                        "DescribeLaunchTemplates",
                        ec2.describe_launch_templates().launch_template_names(name).send().await,
                    )?;
                    let t = d.launch_templates().first();
                    (
                        t.and_then(|t| t.launch_template_id()).unwrap_or_default().to_string(),
                        t.and_then(|t| t.latest_version_number()).unwrap_or(1),
                    )
                }
            };
            ctx.set(key, &id).await;
            ctx.versions.lock().await.insert(group.clone(), version);
            Ok(format!("{id} v{version}"))
        }
        Op::CreateLaunchTemplateVersion { group, data } => {
            let id = ctx.id(key).await?;
            // moto ignores SourceVersion; we always send the full data anyway.
            let d = template_data(ctx, data, group).await?;
            let out = call(
                "CreateLaunchTemplateVersion",
                ec2.create_launch_template_version()
                    .launch_template_id(&id)
                    .launch_template_data(d)
                    .version_description(format!("pinfleet revision {}", ctx.revision))
                    .send()
                    .await,
            )?;
            let version = out.launch_template_version().and_then(|v| v.version_number()).unwrap_or_default();
            call(
                "ModifyLaunchTemplate",
                ec2.modify_launch_template().launch_template_id(&id).default_version(version.to_string()).send().await,
            )?;
            ctx.versions.lock().await.insert(group.clone(), version);
            Ok(format!("{id} v{version}"))
        }
        Op::LaunchInstances { group, role, count, subnets } => launch(ctx, group, *role, *count, subnets).await,
        Op::TerminateInstances { ids, wait, .. } => {
            if ids.is_empty() {
                return Ok(String::new());
            }
            call_ok_if(
                "TerminateInstances",
                &["InvalidInstanceID.NotFound"],
                ec2.terminate_instances().set_instance_ids(Some(ids.clone())).send().await,
            )?;
            if *wait {
                let start = std::time::Instant::now();
                loop {
                    let d = call(
                        "DescribeInstances",
                        ec2.describe_instances().set_instance_ids(Some(ids.clone())).send().await,
                    )?;
                    let pending = d
                        .reservations()
                        .iter()
                        .flat_map(|r| r.instances())
                        .filter(|i| i.state().and_then(|s| s.name()).map(|n| n.as_str()) != Some("terminated"))
                        .count();
                    if pending == 0 {
                        break;
                    }
                    if start.elapsed() > WAIT_LIMIT {
                        return Err(OpError {
                            retriable: true,
                            error: anyhow::anyhow!("{pending} instance(s) still shutting down"),
                        });
                    }
                    tokio::time::sleep(POLL).await;
                }
            }
            Ok(format!("{} instance(s)", ids.len()))
        }
        Op::DeleteLaunchTemplate { id, .. } => {
            call_ok_if(
                "DeleteLaunchTemplate",
                &["InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.Malformed"],
                ec2.delete_launch_template().launch_template_id(id).send().await,
            )?;
            Ok(id.clone())
        }
        Op::DeleteListener { arn } => {
            call_ok_if(
                "DeleteListener",
                &["ListenerNotFound"],
                ctx.aws.elb.delete_listener().listener_arn(arn).send().await,
            )?;
            Ok(arn.clone())
        }
        Op::DeleteLoadBalancer { arn } => {
            call_ok_if(
                "DeleteLoadBalancer",
                &["LoadBalancerNotFound"],
                ctx.aws.elb.delete_load_balancer().load_balancer_arn(arn).send().await,
            )?;
            Ok(arn.clone())
        }
        Op::DeleteTargetGroup { arn } => {
            call_ok_if(
                "DeleteTargetGroup",
                &["TargetGroupNotFound"],
                ctx.aws.elb.delete_target_group().target_group_arn(arn).send().await,
            )?;
            Ok(arn.clone())
        }
        Op::DeleteNatGateway { id } => {
            call_ok_if(
                "DeleteNatGateway",
                &["NatGatewayNotFound", "InvalidNatGatewayID.NotFound"],
                ec2.delete_nat_gateway().nat_gateway_id(id).send().await,
            )?;
            let start = std::time::Instant::now();
            loop {
                let d = call_ok_if(
                    "DescribeNatGateways",
                    &["NatGatewayNotFound"],
                    ec2.describe_nat_gateways().nat_gateway_ids(id).send().await,
                )?;
                let state = d
                    .as_ref()
                    .and_then(|d| d.nat_gateways().first().and_then(|n| n.state()).map(|s| s.as_str().to_string()));
                match state.as_deref() {
                    None | Some("deleted") => break,
                    _ if start.elapsed() > WAIT_LIMIT => {
                        return Err(OpError {
                            retriable: true,
                            error: anyhow::anyhow!("NAT gateway {id} is still deleting"),
                        })
                    }
                    _ => tokio::time::sleep(POLL).await,
                }
            }
            Ok(id.clone())
        }
        Op::ReleaseAddress { allocation_id } => {
            call_ok_if(
                "ReleaseAddress",
                &["InvalidAllocationID.NotFound"],
                ec2.release_address().allocation_id(allocation_id).send().await,
            )?;
            Ok(allocation_id.clone())
        }
        Op::DeleteRouteTable { id, associations } => {
            for a in associations {
                call_ok_if(
                    "DisassociateRouteTable",
                    &["InvalidAssociationID.NotFound"],
                    ec2.disassociate_route_table().association_id(a).send().await,
                )?;
            }
            call_ok_if(
                "DeleteRouteTable",
                &["InvalidRouteTableID.NotFound"],
                ec2.delete_route_table().route_table_id(id).send().await,
            )?;
            Ok(id.clone())
        }
        Op::DeleteInternetGateway { id, vpc } => {
            if let Some(vpc) = vpc {
                call_ok_if(
                    "DetachInternetGateway",
                    &["Gateway.NotAttached", "InvalidInternetGatewayID.NotFound"],
                    ec2.detach_internet_gateway().internet_gateway_id(id).vpc_id(vpc).send().await,
                )?;
            }
            call_ok_if(
                "DeleteInternetGateway",
                &["InvalidInternetGatewayID.NotFound"],
                ec2.delete_internet_gateway().internet_gateway_id(id).send().await,
            )?;
            Ok(id.clone())
        }
        Op::DeleteSubnet { id } => {
            call_ok_if("DeleteSubnet", &["InvalidSubnetID.NotFound"], ec2.delete_subnet().subnet_id(id).send().await)?;
            Ok(id.clone())
        }
        Op::DeleteSecurityGroup { id } => {
            call_ok_if(
                "DeleteSecurityGroup",
                &["InvalidGroup.NotFound"],
                ec2.delete_security_group().group_id(id).send().await,
            )?;
            Ok(id.clone())
        }
        Op::DeleteVpc { id } => {
            call_ok_if("DeleteVpc", &["InvalidVpcID.NotFound"], ec2.delete_vpc().vpc_id(id).send().await)?;
            Ok(id.clone())
        }
    }
}

/// Client token for a RunInstances call: the same (cluster, group,
/// revision, sequence) always gives the same token, so a retried call after
/// a lost response returns the first call's instances instead of new ones.
pub fn client_token(cluster: &str, group: &str, revision: u64, seq: usize) -> String {
    use sha2::Digest;
    let h = hex::encode(sha2::Sha256::digest(format!("{cluster}/{group}/{revision}/{seq}")));
    format!("pf-{}", &h[..40])
}

/// Which subnets new machines go to: each to the subnet with the fewest of
/// the group's machines so far (ties by the spec's order).
pub fn spread(existing: &BTreeMap<String, usize>, subnets: &[String], count: u32) -> Vec<String> {
    let mut counts: Vec<(String, usize)> =
        subnets.iter().map(|s| (s.clone(), existing.get(s).copied().unwrap_or(0))).collect();
    let mut out = Vec::new();
    for _ in 0..count {
        if let Some(min) = counts.iter_mut().min_by_key(|(_, n)| *n) {
            min.1 += 1;
            out.push(min.0.clone());
        }
    }
    out
}

async fn launch(ctx: &OpContext, group: &str, role: Role, count: u32, subnets: &[String]) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let cluster = &ctx.desired.cluster;
    let lt_id = ctx.id(&K::LaunchTemplate(group.to_string())).await?;
    let version = ctx
        .versions
        .lock()
        .await
        .get(group)
        .copied()
        .ok_or_else(|| OpError::fatal(anyhow::anyhow!("no launch-template version known for {group}")))?;
    // Instances this revision already started (a re-run after a crash) keep
    // their sequence numbers, so tokens never repeat for new machines.
    let seq_start = ctx
        .observed_instances
        .iter()
        .filter(|i| i.group.as_deref() == Some(group) && i.revision == Some(ctx.revision))
        .count();
    let mut subnet_ids = BTreeMap::new();
    for s in subnets {
        subnet_ids.insert(ctx.id(&K::Subnet(s.to_string())).await?, s.clone());
    }
    let mut existing: BTreeMap<String, usize> = BTreeMap::new();
    for i in ctx.observed_instances.iter().filter(|i| i.is_live() && i.group.as_deref() == Some(group)) {
        if let Some(name) = i.subnet_id.as_ref().and_then(|s| subnet_ids.get(s)) {
            *existing.entry(name.clone()).or_default() += 1;
        }
    }
    let placement = spread(&existing, subnets, count);
    // The first control-plane machine of a new cluster runs `kubeadm init`
    // (its own call, with user-data that carries the CA); the rest are
    // launched in one call per subnet.
    let cluster_has_control_plane = ctx.observed_instances.iter().any(|i| {
        i.is_live()
            && ctx
                .desired
                .groups
                .iter()
                .any(|g| g.role == Role::ControlPlane && i.group.as_deref() == Some(g.name.as_str()))
    });
    let mut batches: Vec<(String, i32, bool)> = Vec::new();
    for (n, subnet) in placement.iter().enumerate() {
        let init = role == Role::ControlPlane
            && !cluster_has_control_plane
            && n == 0
            && seq_start == 0
            && ctx.init_user_data.is_some();
        match batches.iter_mut().find(|(s, _, i)| s == subnet && !*i && !init) {
            Some(b) => b.1 += 1,
            None => batches.push((subnet.clone(), 1, init)),
        }
    }
    let kubernetes_version = ctx
        .desired
        .launch_templates
        .iter()
        .find(|t| t.group == group)
        .and_then(|t| t.data.tags.get(tags::KUBERNETES_VERSION))
        .map(String::as_str)
        .unwrap_or_default();
    // The tags every machine of this launch carries, by RunInstances or CreateFleet.
    let instance_tags = ctx.spec(
        ResourceType::Instance,
        &K::Instance(group.to_string()),
        &[
            (tags::INSTANCE_GROUP, group),
            (tags::KUBERNETES_VERSION, kubernetes_version),
            (tags::LT_VERSION, &version.to_string()),
            (tags::REVISION, &ctx.revision.to_string()),
            (tags::NAME, &format!("{cluster}-{group}")),
        ],
    );
    let mut ids = Vec::new();
    let mut seq = seq_start;
    // A group with several offerings tries them in its file's order, each
    // refused one recorded in the fleet-wide ledger (and skipped while it
    // is there): see cloud::capacity.
    let capacity = ctx.desired.groups.iter().find(|g| g.name == group).and_then(|g| g.capacity.clone());
    let zone_of: BTreeMap<String, String> =
        ctx.desired.subnets.iter().map(|s| (s.name.clone(), s.zone.clone())).collect();
    // Kept current through the launch: what one batch was refused, the
    // next batch does not ask again (the ledger's answer after each write).
    let mut ledger = match (&capacity, &ctx.ledger) {
        (Some(_), Some(store)) => store
            .load()
            .await
            .map_err(|e| OpError { retriable: true, error: e.context("reading the capacity ledger") })?,
        _ => Default::default(),
    };
    let by = format!("{cluster}/{group}");
    // Bounded churn: a group whose last launches failed halts the rollouts
    // that need it (the reason carries "blocked on capacity" and "halting",
    // which the rollout driver reads), and its calls a minute are capped.
    let mut tries = capacity
        .as_ref()
        .map(|c| crate::capacity::Attempts::new(&by, c.launches_per_minute, &ledger, chrono::Utc::now()));
    // A Mixed group: each batch split into the machines that must be
    // On-Demand (its base, and the share above it) and those that go to
    // Spot first.
    let mut split: Vec<(String, i32, bool, Option<Vec<crate::capacity::Market>>)> = Vec::new();
    let live = || ctx.observed_instances.iter().filter(|i| i.is_live() && i.group.as_deref() == Some(group));
    let (mut on_demand, mut spot) =
        (live().filter(|i| !i.spot).count() as u32, live().filter(|i| i.spot).count() as u32);
    for (subnet, n, init) in batches {
        match capacity.as_ref().and_then(|c| c.mixed) {
            Some((base, percent)) => {
                let k = crate::capacity::on_demand_needed(base, percent, on_demand, spot, n as u32) as i32;
                on_demand += k as u32;
                spot += (n - k) as u32;
                if k > 0 {
                    split.push((subnet.clone(), k, init, Some(vec![crate::capacity::Market::OnDemand])));
                }
                if n - k > 0 {
                    split.push((subnet, n - k, init && k == 0, None));
                }
            }
            None => split.push((subnet, n, init, None)),
        }
    }
    for (subnet, n, init, markets) in split {
        if let Some(t) = tries.as_mut() {
            t.next_batch();
        }
        // (offering, subnet) in the order to try; one plain launch without capacity.
        let attempts: Vec<(Option<crate::capacity::Offering>, String)> = match &capacity {
            None => vec![(None, subnet.clone())],
            Some(c) => {
                let own = zone_of.get(&subnet).cloned().unwrap_or_default();
                let mut zones = vec![own.clone()];
                for s in subnets {
                    if let Some(z) = zone_of.get(s) {
                        if !zones.contains(z) {
                            zones.push(z.clone());
                        }
                    }
                }
                let all =
                    crate::capacity::offerings(markets.as_ref().unwrap_or(&c.markets), &c.types, &zones, &c.fallback);
                let now = chrono::Utc::now();
                let usable = crate::capacity::usable(&all, &ledger, now);
                if usable.is_empty() {
                    let first = all.iter().find_map(|o| ledger.out(o, now));
                    let why = first
                        .map(|e| crate::capacity::blocked_reason(e, None))
                        .unwrap_or_else(|| "blocked on capacity: the group names no offering".into());
                    let blocked =
                        crate::capacity::Blocked { group: group.to_string(), reason: why, churn: ledger.churn(&by) };
                    return Err(partly(ctx, &ids, blocked).await);
                }
                usable
                    .into_iter()
                    .map(|o| {
                        let s = if o.zone == own {
                            subnet.clone()
                        } else {
                            subnets.iter().find(|s| zone_of.get(*s) == Some(&o.zone)).cloned().unwrap_or(subnet.clone())
                        };
                        (Some(o.clone()), s)
                    })
                    .collect()
            }
        };
        let mut launched = false;
        let mut capped = None;
        // Every offering this batch may use, and those it asked for: a
        // stop by the per-minute cap names what is still untried.
        let offered: Vec<crate::capacity::Offering> = attempts.iter().filter_map(|(o, _)| o.clone()).collect();
        let mut asked: Vec<crate::capacity::Offering> = Vec::new();
        // Spot first, all its offerings in one CreateFleet (instant,
        // price-capacity-optimized): EC2 picks the pools least likely to be
        // interrupted and answers 200 with an error per override it could
        // not serve; what it could not launch goes on to the next offerings.
        let mut n = n;
        let spot: Vec<(crate::capacity::Offering, String)> = attempts
            .iter()
            .filter_map(|(o, s)| {
                o.clone().filter(|o| o.market == crate::capacity::Market::Spot).map(|o| (o, s.clone()))
            })
            .collect();
        let attempts: Vec<(Option<crate::capacity::Offering>, String)> = if spot.is_empty() || init {
            attempts
        } else {
            let mut called = true;
            if let Some(t) = tries.as_mut() {
                if let Err(why) = t.call() {
                    capped = Some(why);
                    called = false;
                }
            }
            if called {
                asked.extend(spot.iter().map(|(o, _)| o.clone()));
                let mut overrides = Vec::new();
                for (o, s) in &spot {
                    overrides.push(
                        aws_sdk_ec2::types::FleetLaunchTemplateOverridesRequest::builder()
                            .instance_type(aws_sdk_ec2::types::InstanceType::from(o.instance_type.as_str()))
                            .subnet_id(ctx.id(&K::Subnet(s.to_string())).await?)
                            .availability_zone(&o.zone)
                            .build(),
                    );
                }
                let out = call(
                    "CreateFleet",
                    ec2.create_fleet()
                        .r#type(aws_sdk_ec2::types::FleetType::Instant)
                        .client_token(client_token(cluster, &format!("{group}/spot-fleet"), ctx.revision, seq))
                        .launch_template_configs(
                            aws_sdk_ec2::types::FleetLaunchTemplateConfigRequest::builder()
                                .launch_template_specification(
                                    aws_sdk_ec2::types::FleetLaunchTemplateSpecificationRequest::builder()
                                        .launch_template_id(&lt_id)
                                        .version(version.to_string())
                                        .build(),
                                )
                                .set_overrides(Some(overrides))
                                .build(),
                        )
                        .target_capacity_specification(
                            aws_sdk_ec2::types::TargetCapacitySpecificationRequest::builder()
                                .total_target_capacity(n)
                                .spot_target_capacity(n)
                                .default_target_capacity_type(aws_sdk_ec2::types::DefaultTargetCapacityType::Spot)
                                .build(),
                        )
                        .spot_options(
                            aws_sdk_ec2::types::SpotOptionsRequest::builder()
                                .allocation_strategy(aws_sdk_ec2::types::SpotAllocationStrategy::PriceCapacityOptimized)
                                .build(),
                        )
                        .tag_specifications(instance_tags.clone())
                        .send()
                        .await,
                )?;
                // The 200 may carry errors and no instance: each override it
                // names is an offering EC2 could not serve now.
                let zone_by_subnet_id: BTreeMap<&String, &String> =
                    subnet_ids.iter().filter_map(|(id, name)| zone_of.get(name).map(|z| (id, z))).collect();
                for e in out.errors() {
                    let Some(code) = e.error_code().filter(|c| crate::capacity::unfulfillable(c)) else {
                        tracing::warn!(
                            "{by}: CreateFleet: {}: {}",
                            e.error_code().unwrap_or("?"),
                            e.error_message().unwrap_or_default()
                        );
                        continue;
                    };
                    let ov = e.launch_template_and_overrides().and_then(|l| l.overrides());
                    let o = crate::capacity::Offering {
                        market: crate::capacity::Market::Spot,
                        instance_type: ov
                            .and_then(|o| o.instance_type())
                            .map(|t| t.as_str().to_string())
                            .unwrap_or_default(),
                        zone: ov
                            .and_then(|o| o.availability_zone().map(str::to_string))
                            .or_else(|| {
                                ov.and_then(|o| o.subnet_id())
                                    .and_then(|s| zone_by_subnet_id.get(&s.to_string()).map(|z| z.to_string()))
                            })
                            .unwrap_or_default(),
                    };
                    tracing::warn!("{by}: {o}: {code}; the next offering is tried");
                    if let Some(t) = tries.as_mut() {
                        t.refused_override(&o, code);
                    }
                }
                let got: Vec<String> = out.instances().iter().flat_map(|i| i.instance_ids().iter().cloned()).collect();
                let k = got.len() as i32;
                if k == 0 && !out.errors().is_empty() {
                    if let Some(t) = tries.as_mut() {
                        t.fleet_refused();
                    }
                }
                ids.extend(got);
                seq += k as usize;
                n -= k.min(n);
            }
            if n == 0 {
                launched = true;
            }
            // What the fleet did not launch: the other markets' offerings, one at a time.
            attempts
                .into_iter()
                .filter(|(o, _)| o.as_ref().is_none_or(|o| o.market != crate::capacity::Market::Spot))
                .collect()
        };
        for (offering, subnet) in attempts {
            if launched || capped.is_some() {
                break;
            }
            if let Some(t) = tries.as_mut() {
                if let Err(why) = t.call() {
                    capped = Some(why);
                    break;
                }
            }
            asked.extend(offering.clone());
            let subnet_id = ctx.id(&K::Subnet(subnet.to_string())).await?;
            let key = K::Instance(group.to_string());
            // Each offering has its own token: a retried call of the same
            // offering returns its instances, another offering is a new call.
            let token_group = match &offering {
                Some(o) => format!("{group}/{o}"),
                None => group.to_string(),
            };
            let mut req = ec2
                .run_instances()
                // All or nothing (moto launches MinCount, AWS up to MaxCount):
                // a failed batch is retried or re-planned by the next run.
                .min_count(n)
                .max_count(n)
                .client_token(client_token(cluster, &token_group, ctx.revision, seq))
                .launch_template(
                    LaunchTemplateSpecification::builder()
                        .launch_template_id(&lt_id)
                        .version(version.to_string())
                        .build(),
                )
                .subnet_id(subnet_id)
                .tag_specifications(instance_tags.clone())
                .tag_specifications(ctx.spec(ResourceType::Volume, &key, &[(tags::INSTANCE_GROUP, group)]));
            if let Some(o) = &offering {
                req = req
                    .instance_type(aws_sdk_ec2::types::InstanceType::from(o.instance_type.as_str()))
                    .placement(aws_sdk_ec2::types::Placement::builder().availability_zone(&o.zone).build());
                if o.market == crate::capacity::Market::Spot {
                    req = req.instance_market_options(
                        aws_sdk_ec2::types::InstanceMarketOptionsRequest::builder()
                            .market_type(aws_sdk_ec2::types::MarketType::Spot)
                            .build(),
                    );
                }
            }
            if init {
                if let Some(user_data) = &ctx.init_user_data {
                    let host = ctx.lb_dns.lock().await.clone().unwrap_or_default();
                    req = req
                        .user_data(base64::engine::general_purpose::STANDARD.encode(with_api_host(user_data, &host)));
                }
            }
            let sent = req.send().await;
            if let (Err(e), Some(o)) = (&sent, &offering) {
                if let Some(code) = super::error_code(e).filter(|c| crate::capacity::unfulfillable(c)) {
                    tracing::warn!("{by}: {o}: {code}; trying the next offering");
                    if let Some(t) = tries.as_mut() {
                        t.refused(o, code);
                    }
                    continue;
                }
            }
            // A profile IAM made seconds ago is not yet visible to EC2: retry.
            let out = call("RunInstances", sent).map_err(|mut e| {
                e.retriable |= format!("{:#}", e.error).contains("Invalid IAM Instance Profile");
                e
            })?;
            for i in out.instances() {
                if let Some(id) = i.instance_id() {
                    ids.push(id.to_string());
                }
            }
            launched = true;
            break;
        }
        let now = chrono::Utc::now();
        let (refusals, launches) = match &tries {
            Some(t) => (t.refusals.clone(), t.launch(launched, now).into_iter().collect::<Vec<_>>()),
            None => (Vec::new(), Vec::new()),
        };
        if !refusals.is_empty() || !launches.is_empty() {
            let written = match &ctx.ledger {
                Some(store) => store
                    .record(&refusals, &launches, now)
                    .await
                    .map_err(|e| OpError { retriable: true, error: e.context("writing the capacity ledger") })?,
                None => {
                    let mut l = ledger.clone();
                    for (o, code, by) in &refusals {
                        l.mark(o, code, by, now);
                    }
                    l.launches.extend(launches);
                    l
                }
            };
            ledger = written;
            if !launched {
                let why = match (&capped, refusals.first()) {
                    (Some(c), _) => crate::capacity::capped_reason(c, &offered, &asked),
                    (None, Some(r)) => {
                        ledger.out(&r.0, now).map(|e| crate::capacity::blocked_reason(e, None)).unwrap_or_default()
                    }
                    (None, None) => "blocked on capacity".into(),
                };
                let blocked =
                    crate::capacity::Blocked { group: group.to_string(), reason: why, churn: ledger.churn(&by) };
                return Err(partly(ctx, &ids, blocked).await);
            }
        }
        if let (Some(c), false) = (&capped, launched) {
            let why = crate::capacity::capped_reason(c, &offered, &asked);
            let blocked = crate::capacity::Blocked { group: group.to_string(), reason: why, churn: None };
            return Err(partly(ctx, &ids, blocked).await);
        }
        seq += n as usize;
    }
    ctx.launched.lock().await.extend(ids.iter().cloned());
    const SHOWN: usize = 4;
    if ids.len() > SHOWN {
        return Ok(format!("{} launched: {}, … (+{} more)", ids.len(), ids[..SHOWN].join(","), ids.len() - SHOWN));
    }
    Ok(ids.join(","))
}

/// A launch that stopped on capacity after some of its batches launched:
/// the machines it started are recorded as launched (the rollout waits for
/// them) and the error says how many, so the apply's summary counts them.
async fn partly(ctx: &OpContext, ids: &[String], blocked: crate::capacity::Blocked) -> OpError {
    if ids.is_empty() {
        return OpError { retriable: false, error: blocked.into() };
    }
    ctx.launched.lock().await.extend(ids.iter().cloned());
    let error = anyhow::Error::new(blocked).context(crate::capacity::PartlyLaunched { ids: ids.to_vec() });
    OpError { retriable: false, error }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_fills_the_emptiest_subnets_first() {
        let subnets = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let existing = BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 0)]);
        assert_eq!(spread(&existing, &subnets, 4), ["b", "c", "b", "c"]);
        assert_eq!(spread(&BTreeMap::new(), &subnets, 2), ["a", "b"]);
    }

    #[test]
    fn client_tokens_are_stable_and_distinct() {
        assert_eq!(client_token("c", "g", 3, 0), client_token("c", "g", 3, 0));
        assert_ne!(client_token("c", "g", 3, 0), client_token("c", "g", 3, 1));
        assert_ne!(client_token("c", "g", 3, 0), client_token("c", "g", 4, 0));
        assert!(client_token("c", "g", 3, 0).len() <= 64);
    }
}
