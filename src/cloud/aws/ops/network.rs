//! The network's operations: the VPC, its subnets, gateways, addresses,
//! route tables and security groups (each create finds what a lost answer
//! already made).

use super::{call, call_ok_if, filter, OpContext, OpError, POLL, R, WAIT_LIMIT};
use crate::cloud::key::ResourceKey as K;
use aws_sdk_ec2::types::{AttributeBooleanValue, DomainType, IpPermission, IpRange, ResourceType, UserIdGroupPair};

use crate::cloud::model::{RouteTarget, Rule, Source};
use crate::cloud::observed::ObservedSource;
use crate::cloud::ops::ObservedRuleRef;

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

pub(super) async fn create_vpc(ctx: &OpContext, key: &K, cidr: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let out = call(
        "CreateVpc",
        ec2.create_vpc().cidr_block(cidr).tag_specifications(ctx.spec(ResourceType::Vpc, key, &[])).send().await,
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

pub(super) async fn create_subnet(ctx: &OpContext, key: &K, zone: &str, cidr: &str, public: bool) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    if public {
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

pub(super) async fn create_internet_gateway(ctx: &OpContext, key: &K) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    call("AttachInternetGateway", ec2.attach_internet_gateway().internet_gateway_id(&id).vpc_id(vpc).send().await)?;
    Ok(id)
}

pub(super) async fn allocate_address(ctx: &OpContext, key: &K, zone: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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

pub(super) async fn create_nat_gateway(ctx: &OpContext, key: &K, zone: &str, subnet: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let cluster = &ctx.desired.cluster;
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

pub(super) async fn create_route_table(ctx: &OpContext, key: &K) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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

pub(super) async fn sync_route_table(
    ctx: &OpContext,
    name: &str,
    default_route: Option<&RouteTarget>,
    subnets: &[String],
) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let rt = ctx.id(&K::RouteTable(name.to_string())).await?;
    let d = call("DescribeRouteTables", ec2.describe_route_tables().route_table_ids(&rt).send().await)?;
    let table = d
        .route_tables()
        .first()
        .cloned()
        .ok_or_else(|| OpError { retriable: true, error: anyhow::anyhow!("route table {rt} not visible yet") })?;
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
                call("DisassociateRouteTable", ec2.disassociate_route_table().association_id(aid).send().await)?;
            }
        }
    }
    for sid in &want {
        if !table.associations().iter().any(|a| a.subnet_id() == Some(sid.as_str())) {
            // A subnet can be associated with one table: move it if needed.
            let other = call(
                "DescribeRouteTables",
                ec2.describe_route_tables().filters(filter("association.subnet-id", [sid.clone()])).send().await,
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

pub(super) async fn create_security_group(ctx: &OpContext, key: &K, name: &str, description: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let cluster = &ctx.desired.cluster;
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

pub(super) async fn sync_security_group_rules(
    ctx: &OpContext,
    name: &str,
    add: &[Rule],
    remove: &[ObservedRuleRef],
) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
