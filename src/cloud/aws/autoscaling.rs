//! The Auto Scaling groups of a cluster taken over from kops (pinfleet runs
//! none of its own): a machine the roll replaces leaves its group first,
//! the group's desired size going down with it, so the group never starts
//! another in its place; a group left empty is deleted, with its launch
//! template.
//!
//! ```text
//! roll: terminate(machine) ─▶ release: DetachInstances(decrement) ─▶ TerminateInstances
//!       end of a group ─▶ sweep: empty groups of kops's ─▶ DeleteAutoScalingGroup, DeleteLaunchTemplate
//! ```
//!
//! Every step reads before it writes, so a roll killed between two is
//! finished by the next run: a detached machine is still the cluster's
//! (its tags say so) and is terminated then; an empty group is swept then.

use anyhow::Result;

use super::{sdk, Aws};
use crate::cloud::tags::{KOPS_CLUSTER as KOPS_CLUSTER_TAG, KOPS_INSTANCE_GROUP as KOPS_GROUP_TAG};

/// The Auto Scaling group `instance` is in, if any.
async fn group_of(aws: &Aws, instance: &str) -> Result<Option<String>> {
    let out = sdk(
        "DescribeAutoScalingInstances",
        aws.autoscaling.describe_auto_scaling_instances().instance_ids(instance).send().await,
    )?;
    Ok(out.auto_scaling_instances().iter().find_map(|i| i.auto_scaling_group_name().map(str::to_string)))
}

/// Takes `instance` out of its Auto Scaling group (if it is in one), the
/// group's desired size down by one, its minimum set to 0 first (the roll
/// empties the group: two machines released at once must not take the
/// desired size below a minimum lowered by one). Returns the group's name.
pub async fn release(aws: &Aws, instance: &str) -> Result<Option<String>> {
    let Some(name) = group_of(aws, instance).await? else { return Ok(None) };
    let groups = sdk(
        "DescribeAutoScalingGroups",
        aws.autoscaling.describe_auto_scaling_groups().auto_scaling_group_names(&name).send().await,
    )?;
    if groups.auto_scaling_groups().first().is_some_and(|g| g.min_size().unwrap_or(0) > 0) {
        sdk(
            "UpdateAutoScalingGroup",
            aws.autoscaling.update_auto_scaling_group().auto_scaling_group_name(&name).min_size(0).send().await,
        )?;
    }
    sdk(
        "DetachInstances",
        aws.autoscaling
            .detach_instances()
            .auto_scaling_group_name(&name)
            .instance_ids(instance)
            .should_decrement_desired_capacity(true)
            .send()
            .await,
    )?;
    Ok(Some(name))
}

/// What a sweep did: the groups and launch templates deleted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    pub groups: Vec<String>,
    pub launch_templates: Vec<String>,
}

/// Deletes kops's Auto Scaling groups (tagged `KubernetesCluster=<kops_name>`)
/// of the given kops instance groups that hold no machine and want none,
/// then the launch templates they ran (kops's own, by their tags). A
/// group with a machine left is kept.
pub async fn sweep(aws: &Aws, kops_name: &str, kops_groups: &[String]) -> Result<Swept> {
    use aws_sdk_autoscaling::types::Filter;
    let f = Filter::builder().name(format!("tag:{KOPS_CLUSTER_TAG}")).values(kops_name).build();
    let all: Vec<aws_sdk_autoscaling::types::AutoScalingGroup> = sdk(
        "DescribeAutoScalingGroups",
        aws.autoscaling.describe_auto_scaling_groups().filters(f).into_paginator().items().send().try_collect().await,
    )?;
    let tag = |g: &aws_sdk_autoscaling::types::AutoScalingGroup, k: &str| {
        g.tags().iter().find(|t| t.key() == Some(k)).and_then(|t| t.value()).map(str::to_string)
    };
    let mut out = Swept::default();
    for g in all {
        let ours = tag(&g, KOPS_CLUSTER_TAG).as_deref() == Some(kops_name);
        let selected = tag(&g, KOPS_GROUP_TAG).is_some_and(|k| kops_groups.contains(&k));
        let empty = g.instances().is_empty() && g.desired_capacity().unwrap_or(0) == 0;
        if !(ours && selected && empty) {
            continue;
        }
        let name = g.auto_scaling_group_name().unwrap_or_default().to_string();
        let template = g.launch_template().and_then(|t| t.launch_template_id()).map(str::to_string).or_else(|| {
            g.mixed_instances_policy()
                .and_then(|m| m.launch_template())
                .and_then(|t| t.launch_template_specification())
                .and_then(|t| t.launch_template_id())
                .map(str::to_string)
        });
        sdk(
            "DeleteAutoScalingGroup",
            aws.autoscaling.delete_auto_scaling_group().auto_scaling_group_name(&name).send().await,
        )?;
        out.groups.push(name);
        if let Some(id) = template {
            // Only kops's own template (its tags say so), and only once no
            // group runs it.
            let lts = sdk(
                "DescribeLaunchTemplates",
                aws.ec2.describe_launch_templates().launch_template_ids(&id).send().await,
            );
            let kops_s = lts.ok().is_some_and(|o| {
                o.launch_templates()
                    .iter()
                    .any(|t| t.tags().iter().any(|x| x.key() == Some(KOPS_CLUSTER_TAG) && x.value() == Some(kops_name)))
            });
            if kops_s {
                sdk("DeleteLaunchTemplate", aws.ec2.delete_launch_template().launch_template_id(&id).send().await)?;
                out.launch_templates.push(id);
            }
        }
    }
    Ok(out)
}
