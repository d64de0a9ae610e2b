//! Images where they run: an image baked in the build account is shared
//! with the accounts whose clusters its channel serves — launch permission
//! on the image, createVolumePermission on each of its snapshots (EC2
//! needs both to launch from another account, as EC2 Image Builder's
//! distribution grants them) — and the shares pinfleet made are recorded
//! on the image (tag `pinfleet:shared-with`), so collection removes exactly
//! those and no others.
//!
//! Encrypted snapshots: sharing them needs the KMS key shared too, and an
//! image encrypted with the AWS-managed key cannot be shared at all; copying
//! into each account with its own key is the way then. Not done here: the
//! bake's images use the default (unencrypted) root volume; a recipe with
//! encryption is refused a share with the reason instead of half-sharing.

use std::collections::BTreeSet;

use anyhow::{anyhow, bail, Result};
use aws_sdk_ec2::types::{LaunchPermission, LaunchPermissionModifications};

use super::Aws;
use crate::spec::Cluster;

/// The tag listing the accounts pinfleet shared an image with.
pub const TAG_SHARED_WITH: &str = "pinfleet:shared-with";

/// The accounts whose clusters in `region` follow `recipe`'s `channel`,
/// other than `home` (the build account: its own images need no share).
pub fn served_accounts(
    clusters: &[Cluster],
    recipe: &str,
    channel: &str,
    region: &str,
    home: Option<&str>,
) -> BTreeSet<String> {
    served(clusters, recipe, channel, region, home).into_iter().map(|a| a.id).collect()
}

/// [`served_accounts`] with each account's role (to write the channel
/// into the account, so its clusters read it where they run).
pub fn served(
    clusters: &[Cluster],
    recipe: &str,
    channel: &str,
    region: &str,
    home: Option<&str>,
) -> BTreeSet<crate::spec::Account> {
    clusters
        .iter()
        .filter(|c| c.spec.cloud.region == region)
        .filter(|c| {
            c.spec
                .instance_groups
                .iter()
                .any(|g| g.image.channel.as_deref() == Some(channel) && g.image.recipe.as_deref() == Some(recipe))
        })
        .filter_map(|c| c.spec.cloud.account.clone())
        .filter(|a| Some(a.id.as_str()) != home)
        .collect()
}

/// Whether a cluster without an account of its own (it runs in the
/// caller's) follows `recipe`'s `channel` in `region`.
pub fn served_at_home(clusters: &[Cluster], recipe: &str, channel: &str, region: &str) -> bool {
    clusters.iter().filter(|c| c.spec.cloud.region == region && c.spec.cloud.account.is_none()).any(|c| {
        c.spec
            .instance_groups
            .iter()
            .any(|g| g.image.channel.as_deref() == Some(channel) && g.image.recipe.as_deref() == Some(recipe))
    })
}

/// What is shared of an image now: (accounts pinfleet recorded, snapshots).
async fn image_facts(aws: &Aws, image: &str) -> Result<(BTreeSet<String>, Vec<String>, bool)> {
    let out = super::sdk("DescribeImages", aws.ec2.describe_images().image_ids(image).send().await)?;
    let img = out.images().first().ok_or_else(|| anyhow!("image {image} does not exist in {}", aws.region))?;
    let recorded: BTreeSet<String> = img
        .tags()
        .iter()
        .find(|t| t.key() == Some(TAG_SHARED_WITH))
        .and_then(|t| t.value())
        .map(|v| v.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let snapshots: Vec<String> = img
        .block_device_mappings()
        .iter()
        .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()))
        .map(str::to_string)
        .collect();
    let encrypted = img.block_device_mappings().iter().any(|m| m.ebs().and_then(|e| e.encrypted()) == Some(true));
    Ok((recorded, snapshots, encrypted))
}

async fn record(aws: &Aws, image: &str, accounts: &BTreeSet<String>) -> Result<()> {
    let value = accounts.iter().cloned().collect::<Vec<_>>().join(" ");
    if value.is_empty() {
        super::sdk(
            "DeleteTags",
            aws.ec2
                .delete_tags()
                .resources(image)
                .tags(aws_sdk_ec2::types::Tag::builder().key(TAG_SHARED_WITH).build())
                .send()
                .await,
        )?;
    } else {
        super::sdk(
            "CreateTags",
            aws.ec2
                .create_tags()
                .resources(image)
                .tags(aws_sdk_ec2::types::Tag::builder().key(TAG_SHARED_WITH).value(value).build())
                .send()
                .await,
        )?;
    }
    Ok(())
}

/// Shares `image` (and its snapshots) with `accounts`; returns the accounts
/// newly shared with. Idempotent: an account already shared with is left.
pub async fn share(aws: &Aws, image: &str, accounts: &BTreeSet<String>) -> Result<Vec<String>> {
    if accounts.is_empty() {
        return Ok(Vec::new());
    }
    let (recorded, snapshots, encrypted) = image_facts(aws, image).await?;
    let new: Vec<String> = accounts.difference(&recorded).cloned().collect();
    if new.is_empty() {
        return Ok(new);
    }
    if encrypted {
        bail!(
            "image {image} in {} has encrypted snapshots: sharing it with {} needs its KMS key shared (or a copy in each account with its own key), which pinfleet does not do",
            aws.region,
            new.join(", ")
        );
    }
    permit(aws, image, &snapshots, &new, aws_sdk_ec2::types::OperationType::Add).await?;
    let all: BTreeSet<String> = recorded.union(accounts).cloned().collect();
    record(aws, image, &all).await?;
    Ok(new)
}

/// Removes the shares pinfleet made of `image` (what its tag records; a
/// share someone else made stays); returns the accounts unshared.
pub async fn unshare(aws: &Aws, image: &str) -> Result<Vec<String>> {
    let (recorded, snapshots, _) = image_facts(aws, image).await?;
    if recorded.is_empty() {
        return Ok(Vec::new());
    }
    let gone: Vec<String> = recorded.iter().cloned().collect();
    permit(aws, image, &snapshots, &gone, aws_sdk_ec2::types::OperationType::Remove).await?;
    record(aws, image, &BTreeSet::new()).await?;
    Ok(gone)
}

/// Adds (or removes) `accounts`' permission to launch `image` and to
/// create volumes from its `snapshots`.
async fn permit(
    aws: &Aws,
    image: &str,
    snapshots: &[String],
    accounts: &[String],
    op: aws_sdk_ec2::types::OperationType,
) -> Result<()> {
    let permissions = Some(accounts.iter().map(|a| LaunchPermission::builder().user_id(a).build()).collect());
    let launch = match op {
        aws_sdk_ec2::types::OperationType::Remove => LaunchPermissionModifications::builder().set_remove(permissions),
        _ => LaunchPermissionModifications::builder().set_add(permissions),
    }
    .build();
    super::sdk(
        "ModifyImageAttribute",
        aws.ec2.modify_image_attribute().image_id(image).launch_permission(launch).send().await,
    )?;
    for snap in snapshots {
        // The OperationType + UserIds form (EC2 takes it as it takes
        // CreateVolumePermission.Add; moto reads only this one).
        super::sdk(
            "ModifySnapshotAttribute",
            aws.ec2
                .modify_snapshot_attribute()
                .snapshot_id(snap)
                .attribute(aws_sdk_ec2::types::SnapshotAttributeName::CreateVolumePermission)
                .operation_type(op.clone())
                .set_user_ids(Some(accounts.to_vec()))
                .send()
                .await,
        )?;
    }
    Ok(())
}

/// The accounts `image` may be launched from now (its launch permissions).
pub async fn launch_permissions(aws: &Aws, image: &str) -> Result<BTreeSet<String>> {
    let out = super::sdk(
        "DescribeImageAttribute",
        aws.ec2
            .describe_image_attribute()
            .image_id(image)
            .attribute(aws_sdk_ec2::types::ImageAttributeName::LaunchPermission)
            .send()
            .await,
    )?;
    Ok(out.launch_permissions().iter().filter_map(|p| p.user_id().map(str::to_string)).collect())
}

/// The accounts that may create volumes from `snapshot`.
pub async fn volume_permissions(aws: &Aws, snapshot: &str) -> Result<BTreeSet<String>> {
    let out = super::sdk(
        "DescribeSnapshotAttribute",
        aws.ec2
            .describe_snapshot_attribute()
            .snapshot_id(snapshot)
            .attribute(aws_sdk_ec2::types::SnapshotAttributeName::CreateVolumePermission)
            .send()
            .await,
    )?;
    Ok(out.create_volume_permissions().iter().filter_map(|p| p.user_id().map(str::to_string)).collect())
}

/// Whether any of `accounts` (each through its own connection) still runs
/// instances of `image`: collection never deregisters those.
pub async fn launched_elsewhere(image: &str, accounts: &[&Aws]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for aws in accounts {
        let found = super::sdk(
            "DescribeInstances",
            aws.ec2
                .describe_instances()
                .filters(aws_sdk_ec2::types::Filter::builder().name("image-id").values(image).build())
                .filters(
                    aws_sdk_ec2::types::Filter::builder()
                        .name("instance-state-name")
                        .values("pending")
                        .values("running")
                        .values("stopping")
                        .values("stopped")
                        .build(),
                )
                .send()
                .await,
        )?;
        if found.reservations().iter().any(|r| !r.instances().is_empty()) {
            out.push(aws.account().unwrap_or("the caller's account").to_string());
        }
    }
    Ok(out)
}
