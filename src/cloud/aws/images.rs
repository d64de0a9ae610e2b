//! Resolving each group's image: pinned ids in one DescribeImages call,
//! a channel through its SSM parameter, one call per distinct selector (deprecated images included so they can be
//! skipped deliberately, with a reason, rather than vanish).

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use aws_sdk_ec2::types::Filter;
use chrono::{DateTime, Utc};

use super::{sdk, Aws};
use crate::ami::{self, ImageInfo};
use crate::spec::{Cluster, ImageSelector};

fn info(i: &aws_sdk_ec2::types::Image) -> ImageInfo {
    let parse = |s: Option<&str>| s.and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|d| d.with_timezone(&Utc));
    ImageInfo {
        id: i.image_id().unwrap_or_default().to_string(),
        name: i.name().unwrap_or_default().to_string(),
        owner: i.owner_id().unwrap_or_default().to_string(),
        architecture: i.architecture().map(|a| a.as_str().to_string()).unwrap_or_default(),
        state: i.state().map(|s| s.as_str().to_string()).unwrap_or_else(|| "available".into()),
        root_device: i.root_device_name().unwrap_or("/dev/xvda").to_string(),
        created: parse(i.creation_date()),
        deprecated_at: parse(i.deprecation_time()),
    }
}

pub async fn candidates(aws: &Aws, sel: &ImageSelector) -> Result<Vec<ImageInfo>> {
    let out = sdk(
        "DescribeImages",
        aws.ec2
            .describe_images()
            .set_owners(Some(sel.owners.clone()))
            .filters(Filter::builder().name("name").values(&sel.name).build())
            .filters(Filter::builder().name("architecture").values(sel.architecture.as_str()).build())
            .include_deprecated(true)
            .send()
            .await,
    )?;
    Ok(out.images().iter().map(info).collect())
}

/// The image (id, root device) for every group, plus warnings.
pub async fn resolve(
    aws: &Aws,
    cluster: &Cluster,
    now: DateTime<Utc>,
) -> Result<(BTreeMap<String, ImageInfo>, Vec<String>)> {
    let groups = &cluster.spec.instance_groups;
    let pinned: Vec<String> = {
        let mut v: Vec<String> = groups.iter().filter_map(|g| g.image.id.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let mut by_id: BTreeMap<String, ImageInfo> = BTreeMap::new();
    if !pinned.is_empty() {
        let out = sdk(
            "DescribeImages",
            aws.ec2.describe_images().set_image_ids(Some(pinned.clone())).include_deprecated(true).send().await,
        )?;
        for i in out.images() {
            let i = info(i);
            by_id.insert(i.id.clone(), i);
        }
    }
    let mut by_selector: BTreeMap<String, Vec<ImageInfo>> = BTreeMap::new();
    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    for g in groups {
        let chosen = match (&g.image.id, &g.image.selector) {
            (Some(id), _) => {
                let Some(i) = by_id.get(id) else {
                    bail!("instance group {}: image {id} does not exist (deregistered?)", g.name)
                };
                warnings.extend(
                    ami::pinned_warnings(i, now, chrono::Duration::days(180))
                        .into_iter()
                        .map(|w| format!("instance group {}: {w}", g.name)),
                );
                i.clone()
            }
            (None, Some(sel)) => {
                let key = format!("{:?}", sel);
                if !by_selector.contains_key(&key) {
                    by_selector.insert(key.clone(), candidates(aws, sel).await?);
                }
                let cands = &by_selector[&key];
                match ami::select(cands, &sel.name, sel.architecture.as_str(), now) {
                    Some(i) => i.clone(),
                    None => {
                        let deprecated = cands.iter().filter(|c| c.is_deprecated(now)).count();
                        bail!(
                            "instance group {}: no available {} image named `{}` owned by {}{}",
                            g.name,
                            sel.architecture.as_str(),
                            sel.name,
                            sel.owners.join(", "),
                            if deprecated > 0 {
                                format!(" ({deprecated} match but are deprecated; pin one by id to keep using it)")
                            } else {
                                String::new()
                            }
                        )
                    }
                }
            }
            (None, None) if g.image.channel.is_some() => {
                let (ch, recipe) =
                    (g.image.channel.as_deref().unwrap_or_default(), g.image.recipe.as_deref().unwrap_or_default());
                let Some(id) = super::channels::current(aws, recipe, ch).await? else {
                    bail!(
                        "instance group {}: channel {ch} of recipe {recipe} has never been written in {} (pinfleet ami promote {recipe} --to {ch})",
                        g.name,
                        aws.region
                    )
                };
                if !by_id.contains_key(&id) {
                    let out = sdk(
                        "DescribeImages",
                        aws.ec2.describe_images().image_ids(&id).include_deprecated(true).send().await,
                    )
                    .map_err(|e| {
                        anyhow::anyhow!("instance group {}: channel {ch} of recipe {recipe} holds {id}: {e}", g.name)
                    })?;
                    for i in out.images() {
                        let i = info(i);
                        by_id.insert(i.id.clone(), i);
                    }
                }
                let Some(i) = by_id.get(&id) else {
                    bail!("instance group {}: channel {ch} of recipe {recipe} holds {id}, which no longer exists (pinfleet ami rollback {recipe} {ch})", g.name)
                };
                if i.state != "available" {
                    bail!(
                        "instance group {}: channel {ch} of recipe {recipe} holds {id}, which is {}",
                        g.name,
                        i.state
                    );
                }
                i.clone()
            }
            (None, None) => bail!("instance group {} has no image", g.name),
        };
        out.insert(g.name.clone(), chosen);
    }
    Ok((out, warnings))
}

/// Each image's builder facts (its `pinfleet:facts` tag, parsed; empty
/// for images pinfleet did not bake): what a kubelet on it will report.
pub async fn facts(aws: &Aws, ids: &[String]) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    Ok(facts_and_owners(aws, ids).await?.into_iter().map(|(id, (_, f))| (id, f)).collect())
}

/// [`facts`], with each image's owner (an image shared from another
/// account shows none of the owner's tags, so its facts read empty here).
pub async fn facts_and_owners(
    aws: &Aws,
    ids: &[String],
) -> Result<BTreeMap<String, (String, BTreeMap<String, String>)>> {
    let out = sdk(
        "DescribeImages",
        aws.ec2.describe_images().set_image_ids(Some(ids.to_vec())).include_deprecated(true).send().await,
    )?;
    Ok(out
        .images()
        .iter()
        .map(|i| {
            let facts = crate::ami::bake::parse_report(&crate::ami::bake::facts_of(|k| {
                i.tags().iter().find(|t| t.key() == Some(k)).and_then(|t| t.value())
            }));
            (i.image_id().unwrap_or_default().to_string(), (i.owner_id().unwrap_or_default().to_string(), facts))
        })
        .collect())
}
