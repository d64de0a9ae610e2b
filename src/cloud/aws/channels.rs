//! Image channels at the AWS edge: SSM parameters
//! (`/pinfleet/images/RECIPE/CHANNEL`, data type `aws:ec2:image`), one per
//! region, read with their history and written by promotion and rollback.
//!
//! Data flow: [`read`] / [`list`] → [`crate::ami::channel::Channel`];
//! [`plan_promotion`] / [`plan_rollback`] decide every region's write
//! before [`write_all`] makes the first one, so a promotion that cannot
//! finish writes nothing.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use aws_sdk_ssm::types::{ParameterTier, ParameterType};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Aws;
use crate::ami::bake::{TAG_BUILD, TAG_CHECKS, TAG_RECIPE};
use crate::ami::channel::{self, Channel, Version};

fn ssm_err<E: aws_sdk_ssm::error::ProvideErrorMetadata + std::error::Error + 'static>(
    what: &str,
    e: aws_sdk_ssm::error::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> anyhow::Error {
    match &e {
        aws_sdk_ssm::error::SdkError::ServiceError(s) => {
            anyhow!("{what}: {}: {}", s.err().code().unwrap_or("error"), s.err().message().unwrap_or_default())
        }
        other => anyhow!("{what}: {}", aws_sdk_ssm::error::DisplayErrorContext(other)),
    }
}

fn is_not_found<E: aws_sdk_ssm::error::ProvideErrorMetadata>(
    e: &aws_sdk_ssm::error::SdkError<E, aws_smithy_runtime_api::http::Response>,
) -> bool {
    matches!(e, aws_sdk_ssm::error::SdkError::ServiceError(s) if s.err().code() == Some("ParameterNotFound"))
}

fn at(t: Option<&aws_smithy_types::DateTime>) -> Option<DateTime<Utc>> {
    t.and_then(|t| DateTime::from_timestamp(t.secs(), t.subsec_nanos()))
}

/// A channel in `aws`'s region with its whole history (empty when never written).
pub async fn read(aws: &Aws, recipe: &str, ch: &str) -> Result<Channel> {
    let name = channel::parameter(recipe, ch);
    let mut history = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let r = aws.ssm.get_parameter_history().name(&name).max_results(50).set_next_token(token.clone()).send().await;
        let out = match r {
            Ok(o) => o,
            Err(e) if is_not_found(&e) => break,
            Err(e) => return Err(ssm_err("GetParameterHistory", e)),
        };
        for p in out.parameters() {
            history.push(Version {
                version: p.version(),
                image: p.value().unwrap_or_default().to_string(),
                at: at(p.last_modified_date()),
                note: p.description().unwrap_or_default().to_string(),
            });
        }
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    history.sort_by_key(|v| v.version);
    Ok(Channel { recipe: recipe.into(), channel: ch.into(), region: aws.region.clone(), history })
}

/// The image a channel holds now in `aws`'s region.
pub async fn current(aws: &Aws, recipe: &str, ch: &str) -> Result<Option<String>> {
    match aws.ssm.get_parameter().name(channel::parameter(recipe, ch)).send().await {
        Ok(o) => Ok(o.parameter().and_then(|p| p.value()).map(str::to_string)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(ssm_err("GetParameter", e)),
    }
}

/// Every channel in `aws`'s region (of one recipe, or all).
pub async fn list(aws: &Aws, recipe: Option<&str>) -> Result<Vec<Channel>> {
    let path = match recipe {
        Some(r) => format!("{}/{r}", channel::ROOT),
        None => channel::ROOT.to_string(),
    };
    let mut names = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = aws
            .ssm
            .get_parameters_by_path()
            .path(&path)
            .recursive(true)
            .max_results(10)
            .set_next_token(token.clone())
            .send()
            .await
            .map_err(|e| ssm_err("GetParametersByPath", e))?;
        names.extend(out.parameters().iter().filter_map(|p| p.name()).filter_map(channel::parse_parameter));
        token = out.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    names.sort();
    let mut out = Vec::new();
    for (r, c) in names {
        out.push(read(aws, &r, &c).await?);
    }
    Ok(out)
}

/// One region's write.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Write {
    pub region: String,
    pub parameter: String,
    pub from: Option<String>,
    pub to: String,
    pub note: String,
}

/// A baked image of `recipe` in `aws`'s region, by id or by build id; it
/// must be available and have passed its checks.
async fn baked_image(aws: &Aws, recipe: &str, filter: (&str, &str)) -> Result<(String, String)> {
    let out = super::sdk(
        "DescribeImages",
        aws.ec2
            .describe_images()
            .owners("self")
            .filters(aws_sdk_ec2::types::Filter::builder().name(filter.0).values(filter.1).build())
            .send()
            .await,
    )?;
    let Some(img) = out.images().first() else {
        bail!("no image of this account with {} {} in {}", filter.0, filter.1, aws.region)
    };
    let id = img.image_id().unwrap_or_default().to_string();
    let tags: BTreeMap<&str, &str> =
        img.tags().iter().map(|t| (t.key().unwrap_or_default(), t.value().unwrap_or_default())).collect();
    if tags.get(TAG_RECIPE) != Some(&recipe) {
        bail!(
            "image {id} in {} was not baked from recipe {recipe} (its {TAG_RECIPE} tag: {:?})",
            aws.region,
            tags.get(TAG_RECIPE)
        );
    }
    let state = img.state().map(|s| s.as_str()).unwrap_or("available");
    if state != "available" {
        bail!("image {id} in {} is {state}, not available", aws.region);
    }
    match tags.get(TAG_CHECKS) {
        Some(v) if v.starts_with("passed") => {}
        Some(v) => bail!("image {id} in {} did not pass its checks: {v}", aws.region),
        None => bail!("image {id} in {} has no checks recorded (bake it with `pinfleet ami bake`)", aws.region),
    }
    let build = tags.get(TAG_BUILD).copied().unwrap_or_default().to_string();
    Ok((id, build))
}

/// Decides a promotion of `image` (an id in the home region) or of what
/// `from` holds, to channel `to`, in every region; nothing is written.
pub async fn plan_promotion(
    regions: &[&Aws],
    recipe: &str,
    source: &Source,
    to: &str,
    note: &str,
) -> Result<Vec<Write>> {
    let home = regions.first().ok_or_else(|| anyhow!("no regions"))?;
    let id = match source {
        Source::Image(id) => id.clone(),
        Source::Channel(from) => current(home, recipe, from).await?.ok_or_else(|| {
            anyhow!(
                "channel {from} of recipe {recipe} has never been written in {} (promote an image to it first)",
                home.region
            )
        })?,
    };
    let (_, build) = baked_image(home, recipe, ("image-id", &id)).await?;
    let mut writes = Vec::new();
    for aws in regions {
        let local = if aws.region == home.region {
            id.clone()
        } else {
            baked_image(aws, recipe, (&format!("tag:{TAG_BUILD}"), &build))
                .await
                .map_err(|e| {
                    anyhow!("{e} (the bake copies to every recipe region; run it again to finish the copies)")
                })?
                .0
        };
        let from = current(aws, recipe, to).await?;
        writes.push(Write {
            region: aws.region.clone(),
            parameter: channel::parameter(recipe, to),
            from,
            to: local,
            note: note.to_string(),
        });
    }
    Ok(writes)
}

/// What a promotion starts from.
#[derive(Debug, Clone)]
pub enum Source {
    Image(String),
    Channel(String),
}

/// Decides a rollback of `ch` in every region; nothing is written.
pub async fn plan_rollback(regions: &[&Aws], recipe: &str, ch: &str, note: &str) -> Result<Vec<Write>> {
    let mut writes = Vec::new();
    for aws in regions {
        let c = read(aws, recipe, ch).await?;
        let target = channel::rollback_target(&c).map_err(|e| anyhow!(e))?;
        writes.push(Write {
            region: aws.region.clone(),
            parameter: channel::parameter(recipe, ch),
            from: c.current().map(|v| v.image.clone()),
            to: target.image.clone(),
            note: note.to_string(),
        });
    }
    Ok(writes)
}

/// Writes each region's parameter (a new version each).
pub async fn write_all(regions: &[&Aws], writes: &[Write]) -> Result<()> {
    for w in writes {
        let aws = regions.iter().find(|a| a.region == w.region).ok_or_else(|| anyhow!("no client for {}", w.region))?;
        aws.ssm
            .put_parameter()
            .name(&w.parameter)
            .value(&w.to)
            .r#type(ParameterType::String)
            .data_type("aws:ec2:image")
            .tier(ParameterTier::Standard)
            .description(&w.note)
            .overwrite(true)
            .send()
            .await
            .map_err(|e| ssm_err(&format!("PutParameter {} in {}", w.parameter, w.region), e))?;
    }
    Ok(())
}
