//! The API's load balancer: the balancer, its target group and listener,
//! and its targets (the live control-plane machines), or the API's
//! Elastic IP where the endpoint has no ELBv2.

use super::{call, filter, OpContext, OpError, R};
use crate::cloud::key::ResourceKey as K;
use aws_sdk_elasticloadbalancingv2::types as elb;

use crate::cloud::tags;
use crate::spec::Role;

/// The resource's tags as ELBv2 takes them (the same as EC2's).
fn elb_tags(ctx: &OpContext, key: &K) -> Vec<elb::Tag> {
    ctx.tags_for(key, &[])
        .into_iter()
        .map(|t| elb::Tag::builder().key(t.key().unwrap_or_default()).value(t.value().unwrap_or_default()).build())
        .collect()
}

pub(super) async fn create_load_balancer(
    ctx: &OpContext,
    key: &K,
    name: &str,
    internal: bool,
    subnets: &[String],
) -> R<String> {
    let mut ids = Vec::new();
    for s in subnets {
        ids.push(ctx.id(&K::Subnet(s.to_string())).await?);
    }
    let tag_list = elb_tags(ctx, key);
    let out = call(
        "CreateLoadBalancer",
        ctx.aws
            .elb
            .create_load_balancer()
            .name(name)
            .r#type(elb::LoadBalancerTypeEnum::Network)
            .scheme(if internal {
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

pub(super) async fn create_target_group(ctx: &OpContext, key: &K, name: &str, port: u16) -> R<String> {
    let vpc = ctx.id(&K::Vpc).await?;
    let tag_list = elb_tags(ctx, key);
    let out = call(
        "CreateTargetGroup",
        ctx.aws
            .elb
            .create_target_group()
            .name(name)
            .protocol(elb::ProtocolEnum::Tcp)
            .port(i32::from(port))
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

pub(super) async fn create_listener(ctx: &OpContext, key: &K, port: u16) -> R<String> {
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
            .port(i32::from(port))
            .default_actions(action)
            .send()
            .await,
    )?;
    let arn = out.listeners().first().and_then(|l| l.listener_arn()).unwrap_or_default().to_string();
    ctx.set(key, &arn).await;
    Ok(arn)
}

pub(super) async fn sync_targets(ctx: &OpContext) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    let cluster = &ctx.desired.cluster;
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
            live.extend(
                r.instances().iter().filter_map(|i| {
                    Some((i.instance_id()?.to_string(), i.launch_time().map(|t| t.secs()).unwrap_or(0)))
                }),
            );
        }
    }
    live.sort_by_key(|(id, t)| (*t, id.clone()));
    let live: Vec<String> = live.into_iter().map(|(id, _)| id).collect();
    if ctx.desired.api_address {
        return associate_api_address(ctx, &live).await;
    }
    let tg = ctx.id(&K::TargetGroup).await?;
    let health = call("DescribeTargetHealth", ctx.aws.elb.describe_target_health().target_group_arn(&tg).send().await)?;
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
