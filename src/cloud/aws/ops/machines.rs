//! Launch templates and terminations (launches are [`super::launch`]'s).

use super::{call, call_ok_if, OpContext, OpError, POLL, R, WAIT_LIMIT};
use crate::cloud::key::ResourceKey as K;
use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget, LaunchTemplateBlockDeviceMappingRequest,
    LaunchTemplateCapacityReservationSpecificationRequest, LaunchTemplateEbsBlockDeviceRequest,
    LaunchTemplateHttpTokensState, LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMetadataEndpointState, LaunchTemplateInstanceMetadataOptionsRequest,
    LaunchTemplateTagSpecificationRequest, RequestLaunchTemplateData, ResourceType, Tag, VolumeType,
};
use base64::Engine;

use crate::cloud::model::LaunchTemplateData;
use crate::cloud::ops::with_api_host;
use crate::cloud::tags;

async fn template_data(ctx: &OpContext, d: &LaunchTemplateData, group: &str) -> R<RequestLaunchTemplateData> {
    let host = match &ctx.join_host {
        Some(h) => h.clone(),
        None => ctx
            .lb_dns
            .lock()
            .await
            .clone()
            .ok_or_else(|| OpError::fatal(anyhow::anyhow!("the API load balancer has no DNS name yet")))?,
    };
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
    if let Some(r) = &d.capacity_reservation {
        b = b.capacity_reservation_specification(reservation_spec(r));
    }
    let _ = group;
    Ok(b.build())
}

/// `capacity.reservation` as EC2's `CapacityReservationSpecification`.
fn reservation_spec(r: &crate::capacity::Reservation) -> LaunchTemplateCapacityReservationSpecificationRequest {
    use crate::capacity::Reservation;
    let b = LaunchTemplateCapacityReservationSpecificationRequest::builder();
    match r {
        Reservation::Id(id) => {
            b.capacity_reservation_target(CapacityReservationTarget::builder().capacity_reservation_id(id).build())
        }
        Reservation::ResourceGroup(arn) => b.capacity_reservation_target(
            CapacityReservationTarget::builder().capacity_reservation_resource_group_arn(arn).build(),
        ),
        Reservation::Preference(p) => {
            b.capacity_reservation_preference(CapacityReservationPreference::from(p.as_ec2()))
        }
    }
    .build()
}

pub(super) async fn create_launch_template(
    ctx: &OpContext,
    key: &K,
    group: &str,
    name: &str,
    data: &LaunchTemplateData,
) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    ctx.versions.lock().await.insert(group.to_string(), version);
    Ok(format!("{id} v{version}"))
}

pub(super) async fn create_launch_template_version(
    ctx: &OpContext,
    key: &K,
    group: &str,
    data: &LaunchTemplateData,
) -> R<String> {
    let ec2 = &ctx.aws.ec2;
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
    ctx.versions.lock().await.insert(group.to_string(), version);
    Ok(format!("{id} v{version}"))
}

pub(super) async fn terminate_instances(ctx: &OpContext, ids: &[String], wait: bool) -> R<String> {
    let ec2 = &ctx.aws.ec2;
    if ids.is_empty() {
        return Ok(String::new());
    }
    call_ok_if(
        "TerminateInstances",
        &["InvalidInstanceID.NotFound"],
        ec2.terminate_instances().set_instance_ids(Some(ids.to_vec())).send().await,
    )?;
    if wait {
        let start = std::time::Instant::now();
        loop {
            let d =
                call("DescribeInstances", ec2.describe_instances().set_instance_ids(Some(ids.to_vec())).send().await)?;
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
