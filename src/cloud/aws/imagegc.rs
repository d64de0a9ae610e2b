//! Image garbage collection at the AWS edge: gathers, per region, the
//! images pinfleet baked, every launch-template version that names an
//! image and every channel's history; [`crate::ami::gc::plan`] decides;
//! [`carry_out`] deprecates, disables and deregisters (deleting the
//! snapshots, which `DeregisterImage` alone leaves billed).

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{sdk, Aws};
use crate::ami::bake::TAG_RECIPE;
use crate::ami::channel::Channel;
use crate::ami::gc::{Action, Baked, LaunchTemplateRef, Plan};

/// What was found in one region.
#[derive(Debug, Clone, Default)]
pub struct Found {
    pub images: Vec<Baked>,
    pub refs: Vec<LaunchTemplateRef>,
    pub channels: Vec<Channel>,
    /// (images owned, launch-template versions) for the quota warnings.
    pub counts: (usize, usize),
}

fn parse(s: Option<&str>) -> Option<DateTime<Utc>> {
    s.and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|d| d.with_timezone(&Utc))
}

/// Everything GC needs from `aws`'s region.
pub async fn gather(aws: &Aws) -> Result<Found> {
    let mut f = Found::default();
    let owned = sdk("DescribeImages", aws.ec2.describe_images().owners("self").include_deprecated(true).send().await)?;
    f.counts.0 = owned.images().len();
    for i in owned.images() {
        let tags: BTreeMap<&str, &str> =
            i.tags().iter().map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default())).collect();
        let Some(recipe) = tags.get(TAG_RECIPE) else { continue };
        f.images.push(Baked {
            id: i.image_id().unwrap_or_default().into(),
            region: aws.region.clone(),
            name: i.name().unwrap_or_default().into(),
            recipe: recipe.to_string(),
            state: i.state().map(|s| s.as_str().to_string()).unwrap_or_else(|| "available".into()),
            created: parse(i.creation_date()),
            deprecated_at: parse(i.deprecation_time()),
            snapshots: i
                .block_device_mappings()
                .iter()
                .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()))
                .map(str::to_string)
                .collect(),
        });
    }
    // Every launch template of the account in the region, whoever made it:
    // an image some template still names is never deregistered.
    let mut token: Option<String> = None;
    let mut templates = Vec::new();
    loop {
        let out = sdk(
            "DescribeLaunchTemplates",
            aws.ec2.describe_launch_templates().set_next_token(token.clone()).send().await,
        )?;
        templates.extend(out.launch_templates().iter().cloned());
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    for t in &templates {
        let id = t.launch_template_id().unwrap_or_default();
        let cluster = t
            .tags()
            .iter()
            .find(|x| x.key() == Some("pinfleet.dev/cluster"))
            .and_then(|x| x.value())
            .unwrap_or("-")
            .to_string();
        let mut token: Option<String> = None;
        loop {
            let out = sdk(
                "DescribeLaunchTemplateVersions",
                aws.ec2
                    .describe_launch_template_versions()
                    .launch_template_id(id)
                    .set_next_token(token.clone())
                    .send()
                    .await,
            )?;
            for v in out.launch_template_versions() {
                f.counts.1 += 1;
                if let Some(image) = v.launch_template_data().and_then(|d| d.image_id()) {
                    f.refs.push(LaunchTemplateRef {
                        region: aws.region.clone(),
                        image: image.to_string(),
                        what: format!(
                            "{cluster}/{} v{}",
                            t.launch_template_name().unwrap_or(id),
                            v.version_number().unwrap_or_default()
                        ),
                    });
                }
            }
            token = out.next_token().map(str::to_string);
            if token.is_none() {
                break;
            }
        }
    }
    f.channels = super::channels::list(aws, None).await?;
    Ok(f)
}

/// One action done (or not, and why).
#[derive(Debug, Clone, Serialize)]
pub struct Done {
    pub image: String,
    pub region: String,
    pub action: String,
    pub outcome: String,
}

/// Carries out the plan's actions in their regions. `members`: a
/// connection into each account the images are shared with (in its
/// region): an image one of them still launches is never deregistered, and
/// the shares pinfleet made go before the image does.
pub async fn carry_out(regions: &[&Aws], members: &[&Aws], plan: &Plan) -> Result<Vec<Done>> {
    let mut out = Vec::new();
    for d in &plan.decisions {
        let Some(aws) = regions.iter().find(|a| a.region == d.image.region) else { continue };
        let id = &d.image.id;
        for a in &d.actions {
            let done = |action: &str, outcome: String| Done {
                image: id.clone(),
                region: aws.region.clone(),
                action: action.into(),
                outcome,
            };
            match a {
                Action::Keep { .. } => {}
                Action::Deprecate { at, .. } => {
                    let when = aws_smithy_types::DateTime::from_secs(at.timestamp());
                    let r = enable_deprecation(aws, id, when).await;
                    out.push(done(
                        "deprecate",
                        match r {
                            Ok(_) => format!("deprecated from {}", at.format("%Y-%m-%d %H:%M UTC")),
                            Err(e) => format!(
                                "not deprecated: the endpoint refused EnableImageDeprecation ({})",
                                super::client::describe_sdk_error(&e)
                            ),
                        },
                    ));
                }
                Action::Disable { .. } => {
                    sdk("DisableImage", aws.ec2.disable_image().image_id(id).send().await)?;
                    out.push(done("disable", "disabled".into()));
                }
                Action::Deregister { snapshots, .. } => {
                    let here: Vec<&Aws> = members.iter().copied().filter(|m| m.region == aws.region).collect();
                    let launching = super::sharing::launched_elsewhere(id, &here).await?;
                    if !launching.is_empty() {
                        out.push(done(
                            "deregister",
                            format!("kept: account {} still launches it", launching.join(", ")),
                        ));
                        continue;
                    }
                    let unshared = super::sharing::unshare(aws, id).await?;
                    if !unshared.is_empty() {
                        out.push(done("unshare", format!("no longer shared with {}", unshared.join(", "))));
                    }
                    sdk("DeregisterImage", aws.ec2.deregister_image().image_id(id).send().await)?;
                    for s in snapshots {
                        sdk("DeleteSnapshot", aws.ec2.delete_snapshot().snapshot_id(s).send().await)?;
                    }
                    out.push(done(
                        "deregister",
                        if snapshots.is_empty() {
                            "deregistered".into()
                        } else {
                            format!("deregistered; deleted {}", snapshots.join(", "))
                        },
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// Deprecates `image` at `at` unless a channel of the region still holds
/// it (what a promotion does to the image it superseded); the outcome in
/// words (the endpoint may not offer deprecation: moto does not).
pub async fn deprecate_superseded(aws: &Aws, image: &str, at: DateTime<Utc>) -> Result<String> {
    let held: Vec<String> = super::channels::list(aws, None)
        .await?
        .into_iter()
        .filter(|c| c.current().is_some_and(|v| v.image == image))
        .map(|c| format!("{}/{}", c.recipe, c.channel))
        .collect();
    if !held.is_empty() {
        return Ok(format!("{image} in {}: still held by {}, not deprecated", aws.region, held.join(", ")));
    }
    let when = aws_smithy_types::DateTime::from_secs(at.timestamp());
    Ok(match enable_deprecation(aws, image, when).await {
        Ok(_) => format!("{image} in {}: deprecated from {}", aws.region, at.format("%Y-%m-%d")),
        Err(e) => format!(
            "{image} in {}: not deprecated, the endpoint refused EnableImageDeprecation ({}); `pinfleet ami gc` tries again",
            aws.region,
            super::client::describe_sdk_error(&e)
        ),
    })
}

/// EnableImageDeprecation, asked once: an endpoint that does not offer it
/// (moto answers 500) is not a fault to retry through the SDK's backoff.
async fn enable_deprecation(
    aws: &Aws,
    image: &str,
    when: aws_smithy_types::DateTime,
) -> Result<
    aws_sdk_ec2::operation::enable_image_deprecation::EnableImageDeprecationOutput,
    aws_sdk_ec2::error::SdkError<
        aws_sdk_ec2::operation::enable_image_deprecation::EnableImageDeprecationError,
        aws_smithy_runtime_api::http::Response,
    >,
> {
    aws.ec2
        .enable_image_deprecation()
        .image_id(image)
        .deprecate_at(when)
        .customize()
        .config_override(
            aws_sdk_ec2::config::Config::builder().retry_config(aws_config::retry::RetryConfig::disabled()),
        )
        .send()
        .await
}
