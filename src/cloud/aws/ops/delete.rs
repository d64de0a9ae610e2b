//! Deletions: each treats "not found" as done, and a NAT gateway's waits
//! until it is gone (its address and subnet are not free before).

use super::{call_ok_if, OpContext, OpError, POLL, R, WAIT_LIMIT};

pub(super) async fn delete_launch_template(ctx: &OpContext, id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    call_ok_if(
        "DeleteLaunchTemplate",
        &["InvalidLaunchTemplateId.NotFound", "InvalidLaunchTemplateId.Malformed"],
        ec2.delete_launch_template().launch_template_id(id).send().await,
    )?;
    Ok(id.to_string())
}

pub(super) async fn delete_listener(ctx: &OpContext, arn: &str) -> R<String> {
    call_ok_if("DeleteListener", &["ListenerNotFound"], ctx.aws.elb.delete_listener().listener_arn(arn).send().await)?;
    Ok(arn.to_string())
}

pub(super) async fn delete_load_balancer(ctx: &OpContext, arn: &str) -> R<String> {
    call_ok_if(
        "DeleteLoadBalancer",
        &["LoadBalancerNotFound"],
        ctx.aws.elb.delete_load_balancer().load_balancer_arn(arn).send().await,
    )?;
    Ok(arn.to_string())
}

pub(super) async fn delete_target_group(ctx: &OpContext, arn: &str) -> R<String> {
    call_ok_if(
        "DeleteTargetGroup",
        &["TargetGroupNotFound"],
        ctx.aws.elb.delete_target_group().target_group_arn(arn).send().await,
    )?;
    Ok(arn.to_string())
}

pub(super) async fn delete_nat_gateway(ctx: &OpContext, id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
        let state =
            d.as_ref().and_then(|d| d.nat_gateways().first().and_then(|n| n.state()).map(|s| s.as_str().to_string()));
        match state.as_deref() {
            None | Some("deleted") => break,
            _ if start.elapsed() > WAIT_LIMIT => {
                return Err(OpError { retriable: true, error: anyhow::anyhow!("NAT gateway {id} is still deleting") })
            }
            _ => tokio::time::sleep(POLL).await,
        }
    }
    Ok(id.to_string())
}

pub(super) async fn release_address(ctx: &OpContext, allocation_id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    call_ok_if(
        "ReleaseAddress",
        &["InvalidAllocationID.NotFound"],
        ec2.release_address().allocation_id(allocation_id).send().await,
    )?;
    Ok(allocation_id.to_string())
}

pub(super) async fn delete_route_table(ctx: &OpContext, id: &str, associations: &[String]) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    Ok(id.to_string())
}

pub(super) async fn delete_internet_gateway(ctx: &OpContext, id: &str, vpc: Option<&str>) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    Ok(id.to_string())
}

pub(super) async fn delete_subnet(ctx: &OpContext, id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    call_ok_if("DeleteSubnet", &["InvalidSubnetID.NotFound"], ec2.delete_subnet().subnet_id(id).send().await)?;
    Ok(id.to_string())
}

pub(super) async fn delete_security_group(ctx: &OpContext, id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    call_ok_if(
        "DeleteSecurityGroup",
        &["InvalidGroup.NotFound"],
        ec2.delete_security_group().group_id(id).send().await,
    )?;
    Ok(id.to_string())
}

pub(super) async fn delete_vpc(ctx: &OpContext, id: &str) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    call_ok_if("DeleteVpc", &["InvalidVpcID.NotFound"], ec2.delete_vpc().vpc_id(id).send().await)?;
    Ok(id.to_string())
}
