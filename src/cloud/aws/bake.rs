//! The bake at the AWS edge: observe what a build left (by its tags and
//! the image's name), ask [`crate::ami::bake::next`] what to do, do it,
//! and observe again. The builder and its security group are removed
//! however the bake ends.
//!
//! Data flow: recipe ([`crate::ami::recipe`]) → base image resolved →
//! loop { observe → step → act } → the image in its home region and its
//! copies, tagged with recipe, digest, base, Kubernetes version, build id,
//! the builder's facts and the checks' verdict.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use aws_sdk_ec2::types::{
    BlockDeviceMapping, EbsBlockDevice, Filter, InstanceStateName, ResourceType, Tag, TagSpecification,
};
use base64::Engine as _;
use chrono::Utc;
use serde::Serialize;

use super::{images, sdk, Aws};
use crate::ami::bake::{self as plan, BuilderSeen, CheckResult, ImageFacts, ImageSeen, Observed, Step};
use crate::ami::recipe::{image_name, user_data, Loaded};

/// How long each wait may last before the bake stops (it resumes later).
#[derive(Debug, Clone, Copy)]
pub struct Waits {
    /// The builder's report (packages, the script): Packer's default of an hour.
    pub report: Duration,
    /// An image or a copy to become available (AWS allows hours for large ones).
    pub image: Duration,
    /// Between looks.
    pub poll: Duration,
}

impl Default for Waits {
    fn default() -> Self {
        Waits { report: Duration::from_secs(3600), image: Duration::from_secs(4 * 3600), poll: Duration::from_secs(15) }
    }
}

/// What a finished bake made.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Baked {
    pub recipe: String,
    pub build_id: String,
    pub base_image: String,
    pub name: String,
    /// Region → image id (home first in `regions`).
    pub images: BTreeMap<String, String>,
    pub regions: Vec<String>,
    pub checks: Vec<CheckResult>,
    /// Steps taken by this run (a resumed bake takes fewer).
    pub steps: Vec<String>,
}

/// A wait on the builder gave up: this run removes it as it ends.
const AGAIN_BUILDER: &str = "this run removes the builder; run the bake again to start a new builder";
/// A wait on an image or its copies gave up: EC2 goes on making them.
const AGAIN_IMAGE: &str = "EC2 goes on making it; run the bake again to resume from here";

fn tag(k: &str, v: &str) -> Tag {
    Tag::builder().key(k).value(v.chars().take(255).collect::<String>()).build()
}

fn tags_of(t: &[Tag]) -> BTreeMap<String, String> {
    t.iter().map(|t| (t.key().unwrap_or_default().to_string(), t.value().unwrap_or_default().to_string())).collect()
}

/// The base image the recipe starts from now; an error before any write.
pub async fn base_image(aws: &Aws, l: &Loaded) -> Result<crate::ami::ImageInfo> {
    let sel = &l.recipe.base;
    let cands = images::candidates(aws, sel).await?;
    crate::ami::select(&cands, &sel.name, sel.architecture.as_str(), Utc::now()).cloned().ok_or_else(|| {
        anyhow!(
            "{}: base: no available {} image named `{}` owned by {} in {}",
            l.path.display(),
            sel.architecture.as_str(),
            sel.name,
            sel.owners.join(", "),
            aws.region
        )
    })
}

async fn image_by_name(aws: &Aws, name: &str) -> Result<Option<aws_sdk_ec2::types::Image>> {
    let out = sdk(
        "DescribeImages",
        aws.ec2
            .describe_images()
            .owners("self")
            .filters(Filter::builder().name("name").values(name).build())
            .send()
            .await,
    )?;
    Ok(out.images().iter().max_by_key(|i| i.creation_date().unwrap_or_default().to_string()).cloned())
}

fn seen(i: &aws_sdk_ec2::types::Image) -> ImageSeen {
    ImageSeen {
        id: i.image_id().unwrap_or_default().into(),
        state: i.state().map(|s| s.as_str().to_string()).unwrap_or_else(|| "available".into()),
        checks: tags_of(i.tags()).remove(plan::TAG_CHECKS),
    }
}

async fn observe(home: &Aws, copies: &BTreeMap<String, Aws>, build_id: &str, name: &str) -> Result<Observed> {
    let out = sdk(
        "DescribeInstances",
        home.ec2
            .describe_instances()
            .filters(Filter::builder().name(format!("tag:{}", plan::TAG_BUILD)).values(build_id).build())
            .filters(Filter::builder().name(format!("tag:{}", plan::TAG_ROLE)).values("builder").build())
            .send()
            .await,
    )?;
    let mut builders: Vec<BuilderSeen> = out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .map(|i| {
            let t = tags_of(i.tags());
            BuilderSeen {
                id: i.instance_id().unwrap_or_default().into(),
                state: i.state().and_then(|s| s.name()).map(|n| n.as_str().to_string()).unwrap_or_default(),
                status: t.get(plan::TAG_STATUS).cloned(),
                report: t.get(plan::TAG_REPORT).cloned(),
            }
        })
        .collect();
    // A live builder first; else the last one seen (its report, if any).
    builders.sort_by_key(|b| matches!(b.state.as_str(), "terminated" | "shutting-down"));
    let image = image_by_name(home, name).await?.map(|i| seen(&i));
    let mut copied = BTreeMap::new();
    for (region, aws) in copies {
        copied.insert(region.clone(), image_by_name(aws, name).await?.map(|i| seen(&i)));
    }
    Ok(Observed { builder: builders.into_iter().next(), image, copies: copied })
}

/// The subnet the builder runs in: the recipe's, or the default VPC's first.
async fn subnet(aws: &Aws, l: &Loaded) -> Result<(String, String)> {
    let mut q = aws.ec2.describe_subnets();
    q = match &l.recipe.builder.subnet {
        Some(s) => q.subnet_ids(s),
        None => q.filters(Filter::builder().name("default-for-az").values("true").build()),
    };
    let out = sdk("DescribeSubnets", q.send().await)?;
    let s = out.subnets().iter().min_by_key(|s| s.availability_zone().unwrap_or_default().to_string()).ok_or_else(
        || {
            anyhow!(
                "{}: builder.subnet: {} in {}",
                l.path.display(),
                match &l.recipe.builder.subnet {
                    Some(s) => format!("subnet {s} does not exist"),
                    None => "no default VPC to build in; name a subnet".into(),
                },
                aws.region
            )
        },
    )?;
    Ok((s.subnet_id().unwrap_or_default().into(), s.vpc_id().unwrap_or_default().into()))
}

fn sg_name(build_id: &str) -> String {
    format!("pinfleet-bake-{build_id}")
}

async fn find_sg(aws: &Aws, build_id: &str) -> Result<Option<String>> {
    let out = sdk(
        "DescribeSecurityGroups",
        aws.ec2
            .describe_security_groups()
            .filters(Filter::builder().name("group-name").values(sg_name(build_id)).build())
            .send()
            .await,
    )?;
    Ok(out.security_groups().first().and_then(|g| g.group_id()).map(str::to_string))
}

async fn launch(aws: &Aws, l: &Loaded, build_id: &str, base: &crate::ami::ImageInfo) -> Result<String> {
    let (subnet, vpc) = subnet(aws, l).await?;
    let sg = match find_sg(aws, build_id).await? {
        Some(g) => g,
        None => sdk(
            "CreateSecurityGroup",
            aws.ec2
                .create_security_group()
                .group_name(sg_name(build_id))
                .description(format!("pinfleet bake {build_id}: no ingress"))
                .vpc_id(vpc)
                .tag_specifications(
                    TagSpecification::builder()
                        .resource_type(ResourceType::SecurityGroup)
                        .tags(tag(plan::TAG_BUILD, build_id))
                        .build(),
                )
                .send()
                .await,
        )?
        .group_id()
        .unwrap_or_default()
        .to_string(),
    };
    let r = &l.recipe;
    let mut req = aws
        .ec2
        .run_instances()
        .image_id(&base.id)
        .instance_type(r.builder.instance_type.as_str().into())
        .min_count(1)
        .max_count(1)
        .subnet_id(subnet)
        .security_group_ids(sg)
        .user_data(base64::engine::general_purpose::STANDARD.encode(user_data(l, build_id)))
        .block_device_mappings(
            BlockDeviceMapping::builder()
                .device_name(&base.root_device)
                .ebs(
                    EbsBlockDevice::builder()
                        .volume_size(r.builder.volume_gib as i32)
                        .encrypted(r.encrypted)
                        .delete_on_termination(true)
                        .build(),
                )
                .build(),
        )
        .tag_specifications(
            TagSpecification::builder()
                .resource_type(ResourceType::Instance)
                .tags(tag(plan::TAG_BUILD, build_id))
                .tags(tag(plan::TAG_ROLE, "builder"))
                .tags(tag(plan::TAG_RECIPE, &l.name))
                .tags(tag("Name", &format!("pinfleet-bake-{build_id}")))
                .build(),
        );
    if let Some(p) = &r.builder.instance_profile {
        req = req.iam_instance_profile(aws_sdk_ec2::types::IamInstanceProfileSpecification::builder().name(p).build());
    }
    let out = sdk("RunInstances", req.send().await)?;
    Ok(out.instances().first().and_then(|i| i.instance_id()).unwrap_or_default().to_string())
}

fn image_tags(l: &Loaded, build_id: &str, base: &str, facts: &str) -> Vec<Tag> {
    let r = &l.recipe;
    let mut t = vec![
        tag(plan::TAG_BUILD, build_id),
        tag(plan::TAG_RECIPE, &l.name),
        tag(plan::TAG_DIGEST, &l.digest()),
        tag(plan::TAG_BASE, base),
        tag(plan::TAG_KUBERNETES, &r.kubernetes_version),
        tag("Name", &image_name(&l.name, build_id)),
    ];
    t.extend(plan::facts_tags(facts).iter().map(|(k, v)| tag(k, v)));
    if let Some(a) = &r.accelerator {
        t.push(tag(plan::TAG_ACCELERATOR, &plan::accelerator_tag(a)));
    }
    t.extend(r.tags.iter().map(|(k, v)| tag(k, v)));
    t
}

/// A copy's tags: the image's, its verdict, and where it was copied from.
fn copy_tags(l: &Loaded, build_id: &str, base: &str, facts: &str, verdict: &str, home: &str, image: &str) -> Vec<Tag> {
    let mut t = image_tags(l, build_id, base, facts);
    t.push(tag(plan::TAG_CHECKS, verdict));
    t.push(tag("pinfleet:copied-from", &format!("{home}/{image}")));
    t
}

/// Tags `image` and its snapshots with whatever of `want` they lack (or
/// carry with another value); says what it tagged. One CreateTags at most.
async fn mend_tags(aws: &Aws, image: &str, want: &[Tag]) -> Result<Vec<String>> {
    let out = sdk("DescribeImages", aws.ec2.describe_images().image_ids(image).send().await)?;
    let Some(img) = out.images().first() else { return Ok(Vec::new()) };
    let lacks = |have: &BTreeMap<String, String>| {
        want.iter().any(|t| have.get(t.key().unwrap_or_default()).map(String::as_str) != t.value())
    };
    let mut resources = Vec::new();
    let mut said = Vec::new();
    if lacks(&tags_of(img.tags())) {
        resources.push(image.to_string());
        said.push(format!("tagged {image}, which a run had left without its tags"));
    }
    let snaps = snapshot_ids(img);
    if !snaps.is_empty() {
        let out = sdk("DescribeSnapshots", aws.ec2.describe_snapshots().set_snapshot_ids(Some(snaps)).send().await)?;
        for s in out.snapshots() {
            if lacks(&tags_of(s.tags())) {
                let id = s.snapshot_id().unwrap_or_default().to_string();
                said.push(format!("tagged the snapshot {id} of {image}"));
                resources.push(id);
            }
        }
    }
    if !resources.is_empty() {
        sdk(
            "CreateTags",
            aws.ec2.create_tags().set_resources(Some(resources)).set_tags(Some(want.to_vec())).send().await,
        )?;
    }
    Ok(said)
}

/// The snapshots behind an image's volumes.
fn snapshot_ids(img: &aws_sdk_ec2::types::Image) -> Vec<String> {
    img.block_device_mappings()
        .iter()
        .filter_map(|m| m.ebs().and_then(|e| e.snapshot_id()))
        .map(str::to_string)
        .collect()
}

async fn facts_of(aws: &Aws, id: &str) -> Result<ImageFacts> {
    let out = sdk("DescribeImages", aws.ec2.describe_images().image_ids(id).send().await)?;
    let img = out.images().first().ok_or_else(|| anyhow!("image {id} vanished"))?;
    let mut volumes = Vec::new();
    let snaps = snapshot_ids(img);
    let encrypted: BTreeMap<String, bool> = if snaps.is_empty() {
        BTreeMap::new()
    } else {
        let out = sdk("DescribeSnapshots", aws.ec2.describe_snapshots().set_snapshot_ids(Some(snaps)).send().await)?;
        out.snapshots()
            .iter()
            .map(|s| (s.snapshot_id().unwrap_or_default().to_string(), s.encrypted().unwrap_or(false)))
            .collect()
    };
    for m in img.block_device_mappings() {
        if let Some(s) = m.ebs().and_then(|e| e.snapshot_id()) {
            let enc = encrypted.get(s).copied().or(m.ebs().and_then(|e| e.encrypted())).unwrap_or(false);
            volumes.push((m.device_name().unwrap_or_default().to_string(), s.to_string(), enc));
        }
    }
    Ok(ImageFacts {
        architecture: img.architecture().map(|a| a.as_str().to_string()).unwrap_or_default(),
        boot_mode: img.boot_mode().map(|b| b.as_str().to_string()),
        volumes,
        tags: tags_of(img.tags()),
    })
}

async fn instance_state(aws: &Aws, id: &str) -> Result<String> {
    let out = sdk("DescribeInstances", aws.ec2.describe_instances().instance_ids(id).send().await)?;
    Ok(out
        .reservations()
        .iter()
        .flat_map(|r| r.instances())
        .next()
        .and_then(|i| i.state())
        .and_then(|s| s.name())
        .map(|n| n.as_str().to_string())
        .unwrap_or_else(|| "terminated".into()))
}

/// Terminates the builder and removes its security group (once the
/// instance no longer holds it).
async fn cleanup(aws: &Aws, build_id: &str, builder: Option<&str>, waits: &Waits) -> Result<()> {
    if let Some(b) = builder {
        if instance_state(aws, b).await? != InstanceStateName::Terminated.as_str() {
            sdk("TerminateInstances", aws.ec2.terminate_instances().instance_ids(b).send().await)?;
        }
        let start = Instant::now();
        while instance_state(aws, b).await? != InstanceStateName::Terminated.as_str() {
            if start.elapsed() > Duration::from_secs(900) {
                bail!("builder {b} is not terminated after 15 minutes; its security group is left for the next run");
            }
            tokio::time::sleep(waits.poll).await;
        }
    }
    if let Some(sg) = find_sg(aws, build_id).await? {
        sdk("DeleteSecurityGroup", aws.ec2.delete_security_group().group_id(sg).send().await)?;
    }
    Ok(())
}

/// How often a long wait says it is still waiting.
const TELL_EVERY: Duration = Duration::from_secs(30);

fn waiting(what: &str, start: Instant, limit: Duration) -> String {
    let secs = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs())).to_string();
    format!("waiting for {what} ({} so far, up to {})", secs(start.elapsed()), secs(limit))
}

/// Bakes the recipe: resumes whatever an earlier run left, and ends with
/// the builder gone whether it succeeds or fails.
pub async fn bake(
    home: &Aws,
    copies: &BTreeMap<String, Aws>,
    l: &Loaded,
    waits: Waits,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Baked> {
    let base = base_image(home, l).await?;
    let build_id = l.build_id(&base.id);
    let name = image_name(&l.name, &build_id);
    progress(&format!("bake {build_id}: recipe {} on {} ({})", l.name, base.id, base.name));
    let result = run(home, copies, l, &base, &build_id, &name, waits, progress).await;
    // However it ended: the builder and its security group go.
    let o = observe(home, copies, &build_id, &name).await;
    let live =
        o.as_ref().ok().and_then(|o| o.builder.as_ref()).filter(|b| b.state != "terminated").map(|b| b.id.clone());
    let cleaned = cleanup(home, &build_id, live.as_deref(), &waits).await;
    if let Some(b) = &live {
        progress(&format!("removed the builder {b} and its security group"));
    }
    let baked = result?;
    cleaned.context("removing the builder")?;
    Ok(baked)
}

/// What one bake works with.
#[derive(Clone, Copy)]
struct Bake<'a> {
    home: &'a Aws,
    copies: &'a BTreeMap<String, Aws>,
    l: &'a Loaded,
    base: &'a crate::ami::ImageInfo,
    build_id: &'a str,
    name: &'a str,
}

/// A wait's clock: it runs from the wait's first look; the wait is told at
/// its start and then every [`TELL_EVERY`].
#[derive(Default)]
struct Clock {
    since: Option<(String, Instant, Instant)>,
}

impl Clock {
    /// What to tell of waiting for `what` now (None: nothing new); an error
    /// past `limit`, saying what a run again does (`then`: the builder is
    /// removed as this run ends and a new one launched, while an image or
    /// its copies go on in EC2 and are found again).
    fn wait(&mut self, what: String, limit: Duration, then: &str) -> Result<Option<String>> {
        let key = what.clone();
        let (start, told) = match &self.since {
            Some((k, t, told)) if *k == key => (*t, *told),
            _ => {
                self.since = Some((key.clone(), Instant::now(), Instant::now()));
                return Ok(Some(waiting(&what, Instant::now(), limit)));
            }
        };
        if start.elapsed() > limit {
            bail!("gave up {} ({then})", waiting(&what, start, limit));
        }
        if told.elapsed() >= TELL_EVERY {
            self.since = Some((key, start, Instant::now()));
            return Ok(Some(waiting(&what, start, limit)));
        }
        Ok(None)
    }
}

/// Tells each check's outcome.
fn tell(checks: &[CheckResult], progress: &mut (dyn FnMut(&str) + Send)) {
    for c in checks {
        progress(&format!("  {} {}: {}", if c.ok { "ok  " } else { "FAIL" }, c.check, c.detail));
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    home: &Aws,
    copies: &BTreeMap<String, Aws>,
    l: &Loaded,
    base: &crate::ami::ImageInfo,
    build_id: &str,
    name: &str,
    waits: Waits,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Baked> {
    let b = Bake { home, copies, l, base, build_id, name };
    let mut steps: Vec<String> = Vec::new();
    let mut checks: Vec<CheckResult> = Vec::new();
    let mut clock = Clock::default();
    loop {
        let o = observe(home, copies, build_id, name).await?;
        let step = plan::next(&o);
        let label = match &step {
            Step::AwaitReport { .. }
            | Step::AwaitStopped { .. }
            | Step::AwaitImage { .. }
            | Step::AwaitCopies { .. } => None,
            s => Some(
                serde_json::to_value(s).ok().and_then(|v| v["step"].as_str().map(str::to_string)).unwrap_or_default(),
            ),
        };
        if let Some(s) = &label {
            if s != "done" && s != "cleanup" {
                steps.push(s.clone());
            }
        }
        let told = match step {
            Step::Launch => {
                let id = launch(home, l, build_id, base).await?;
                progress(&format!("launched the builder {id} ({})", l.recipe.builder.instance_type));
                None
            }
            Step::AwaitReport { builder } => {
                clock.wait(format!("the builder {builder} to report"), waits.report, AGAIN_BUILDER)?
            }
            Step::Stop { builder } => {
                checks = stop(&b, &o, &builder, progress).await?;
                None
            }
            Step::AwaitStopped { builder } => {
                clock.wait(format!("the builder {builder} to stop"), Duration::from_secs(900), AGAIN_BUILDER)?
            }
            Step::CreateImage { builder } => {
                create_image(&b, &o, &builder, &mut checks, progress).await?;
                None
            }
            Step::AwaitImage { image } => clock.wait(format!("image {image}"), waits.image, AGAIN_IMAGE)?,
            Step::Check { image } => {
                check(&b, &image, &mut checks, progress).await?;
                None
            }
            Step::Copy { regions } => {
                copy(&b, &o, &regions, progress).await?;
                None
            }
            Step::AwaitCopies { pending } => {
                clock.wait(format!("copies in {}", pending.join(", ")), waits.image, AGAIN_IMAGE)?
            }
            Step::Cleanup { builder } => {
                cleanup(home, build_id, Some(&builder), &waits).await?;
                progress(&format!("removed the builder {builder} and its security group"));
                None
            }
            Step::Done { image } => return done(&b, &o, &image, checks, steps, progress).await,
            Step::Fail { reason } => bail!("bake {build_id}: {reason}"),
        };
        if let Some(line) = told {
            progress(&line);
        }
        if label.is_none() {
            tokio::time::sleep(waits.poll).await;
        }
    }
}

/// The builder reported: its checks judged (a failure stops the bake, no
/// image made), then it is stopped.
async fn stop(
    b: &Bake<'_>,
    o: &Observed,
    builder: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<CheckResult>> {
    let Bake { home, l, .. } = *b;
    let Some(builder_seen) = o.builder.as_ref() else { bail!("no builder to stop") };
    let facts = plan::parse_report(builder_seen.report.as_deref().unwrap_or_default());
    let checks = plan::judge_report(l, &facts);
    tell(&checks, progress);
    if checks.iter().any(|c| !c.ok) {
        bail!("the builder's checks failed ({}); no image was made", plan::verdict(&checks));
    }
    sdk("StopInstances", home.ec2.stop_instances().instance_ids(builder).send().await)?;
    progress(&format!("stopping the builder {builder}"));
    Ok(checks)
}

/// The image made from the stopped builder (its checks judged first when
/// an earlier run stopped it).
async fn create_image(
    b: &Bake<'_>,
    o: &Observed,
    builder: &str,
    checks: &mut Vec<CheckResult>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    let Bake { home, l, base, build_id, name, .. } = *b;
    let Some(builder_seen) = o.builder.as_ref() else { bail!("no builder to make the image from") };
    let report = builder_seen.report.clone().unwrap_or_default();
    if checks.is_empty() {
        *checks = plan::judge_report(l, &plan::parse_report(&report));
        if checks.iter().any(|c| !c.ok) {
            bail!("the builder's checks failed ({}); no image was made", plan::verdict(&checks));
        }
    }
    let out = sdk(
        "CreateImage",
        home.ec2
            .create_image()
            .instance_id(builder)
            .name(name)
            .description(format!("pinfleet recipe {} (build {build_id}) from {}", l.name, base.id))
            .tag_specifications(
                TagSpecification::builder()
                    .resource_type(ResourceType::Image)
                    .set_tags(Some(image_tags(l, build_id, &base.id, &report)))
                    .build(),
            )
            // The snapshots are tagged by the check step (the
            // image's tags and the verdict), and mended at the end.
            .send()
            .await,
    )?;
    progress(&format!("creating image {} ({name})", out.image_id().unwrap_or_default()));
    Ok(())
}

/// The image's checks: the builder's facts and the static ones, the
/// verdict written on the image and its snapshots, pass or fail.
async fn check(
    b: &Bake<'_>,
    image: &str,
    checks: &mut Vec<CheckResult>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<()> {
    let Bake { home, l, base, build_id, .. } = *b;
    let facts = facts_of(home, image).await?;
    let report = plan::facts_of(|k| facts.tags.get(k).map(String::as_str));
    // The builder's checks were told when it stopped, unless that was an earlier run.
    let told = !checks.is_empty();
    *checks = plan::judge_report(l, &plan::parse_report(&report));
    let statics = plan::static_checks(l, &l.digest(), &facts);
    if !told {
        tell(checks, progress);
    }
    tell(&statics, progress);
    checks.extend(statics);
    let verdict = plan::verdict(&checks);
    // The verdict is written on the image and its snapshots,
    // pass or fail; the snapshots carry the image's tags too
    // (the recipe's own among them).
    let mut resources = vec![image.to_string()];
    resources.extend(facts.volumes.iter().map(|(_, s, _)| s.clone()));
    let mut tags = image_tags(l, build_id, &base.id, &report);
    tags.push(tag(plan::TAG_CHECKS, &verdict));
    sdk("CreateTags", home.ec2.create_tags().set_resources(Some(resources)).set_tags(Some(tags)).send().await)?;
    progress(&format!("image {image}: {verdict}"));
    Ok(())
}

/// Copies to the recipe's other regions, each tagged in the call.
async fn copy(b: &Bake<'_>, o: &Observed, regions: &[String], progress: &mut (dyn FnMut(&str) + Send)) -> Result<()> {
    let Bake { home, copies, l, base, build_id, name } = *b;
    let Some(image) = o.image.as_ref().map(|i| i.id.clone()) else { bail!("no image to copy") };
    let facts = facts_of(home, &image).await?;
    let verdict = facts.tags.get(plan::TAG_CHECKS).cloned().unwrap_or_default();
    let report = plan::facts_of(|k| facts.tags.get(k).map(String::as_str));
    let copies_now = regions.iter().map(|region| {
        let aws = &copies[region];
        let (image, verdict, report) = (image.clone(), verdict.clone(), report.clone());
        async move {
            // Tagged in the call itself (image and snapshots): a
            // run killed after CopyImage leaves a copy that is
            // already found, promoted and collected by its tags.
            let t = copy_tags(l, build_id, &base.id, &report, &verdict, &home.region, &image);
            let spec =
                |kind: ResourceType| TagSpecification::builder().resource_type(kind).set_tags(Some(t.clone())).build();
            let out = sdk(
                "CopyImage",
                aws.ec2
                    .copy_image()
                    .source_image_id(&image)
                    .source_region(&home.region)
                    .name(name)
                    .description(format!("pinfleet recipe {} (build {build_id}), copy of {image}", l.name))
                    .encrypted(l.recipe.encrypted)
                    .client_token(format!("{build_id}-{region}"))
                    .tag_specifications(spec(ResourceType::Image))
                    .tag_specifications(spec(ResourceType::Snapshot))
                    .send()
                    .await,
            )
            .with_context(|| format!("copying {image} to {region}"))?;
            let id = out.image_id().unwrap_or_default().to_string();
            anyhow::Ok((region.clone(), id))
        }
    });
    let results = futures::future::join_all(copies_now).await;
    let mut failed = Vec::new();
    for r in results {
        match r {
            Ok((region, id)) => progress(&format!("copying to {region} as {id}")),
            Err(e) => failed.push(format!("{e:#}")),
        }
    }
    if !failed.is_empty() {
        bail!("{} (the copies made are kept; run the bake again to finish)", failed.join("; "));
    }
    Ok(())
}

/// The bake's end: whatever a run left untagged (a kill between a call and
/// its tags, a region whose API ignored the tags asked for with the call)
/// is tagged now (what is not tagged is never promoted nor collected), and
/// the bake's record.
async fn done(
    b: &Bake<'_>,
    o: &Observed,
    image: &str,
    mut checks: Vec<CheckResult>,
    steps: Vec<String>,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Baked> {
    let Bake { home, copies, l, base, build_id, name } = *b;
    if checks.is_empty() {
        let facts = facts_of(home, image).await?;
        checks = plan::judge_report(l, &plan::parse_report(&plan::facts_of(|k| facts.tags.get(k).map(String::as_str))));
        checks.extend(plan::static_checks(l, &l.digest(), &facts));
    }
    // Whatever a run left untagged (a kill between a call and
    // its tags, a region whose API ignored the tags asked for
    // with the call) is tagged now: what is not tagged is never
    // promoted nor collected.
    let facts = facts_of(home, image).await?;
    let report = plan::facts_of(|k| facts.tags.get(k).map(String::as_str));
    let verdict = facts.tags.get(plan::TAG_CHECKS).cloned().unwrap_or_default();
    let mut home_tags = image_tags(l, build_id, &base.id, &report);
    home_tags.push(tag(plan::TAG_CHECKS, &verdict));
    for line in mend_tags(home, image, &home_tags).await? {
        progress(&line);
    }
    let mut images = BTreeMap::from([(home.region.clone(), image.to_string())]);
    for (region, c) in &o.copies {
        if let Some(c) = c {
            let t = copy_tags(l, build_id, &base.id, &report, &verdict, &home.region, image);
            for line in mend_tags(&copies[region], &c.id, &t).await? {
                progress(&format!("{region}: {line}"));
            }
            images.insert(region.clone(), c.id.clone());
        }
    }
    Ok(Baked {
        recipe: l.name.clone(),
        build_id: build_id.to_string(),
        base_image: base.id.clone(),
        name: name.to_string(),
        images,
        regions: l.recipe.regions.clone(),
        checks,
        steps,
    })
}
