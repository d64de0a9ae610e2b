//! `pinfleet ami bake|promote|rollback|channels|gc|waves`: the image
//! pipeline's commands. Thin: load the recipe, connect a client per
//! region, call the engine (`cloud::aws::{bake, channels, imagegc}`) and
//! draw the outcome ([`crate::views::images`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use clap::Args;

use super::super::cloud::Target;
use super::super::GlobalArgs;
use crate::ami::recipe;
use crate::cloud::aws::channels::{self, Source};
use crate::cloud::aws::{Aws, AwsOptions};
use crate::output::{print_data, Format};

#[derive(Debug, Clone, Args)]
pub struct ImagesArgs {
    /// Folder holding the image recipes (`images/NAME.yaml`).
    #[arg(long, env = "PINFLEET_IMAGES_DIR", default_value = "images")]
    pub images_dir: PathBuf,
    /// AWS itself (or whatever `AWS_ENDPOINT_URL` names), or LocalStack.
    #[arg(long, value_enum, default_value_t = Target::Aws, env = "PINFLEET_TARGET")]
    pub target: Target,
}

impl ImagesArgs {
    fn recipe(&self, name: &str) -> Result<recipe::Loaded> {
        recipe::load(&self.images_dir, name).map_err(|d| anyhow!("{d}"))
    }

    async fn client(&self, region: &str) -> Result<Aws> {
        let target = self.target.aws().ok_or_else(|| anyhow!("images live on AWS: --target aws or localstack"))?;
        Aws::connect(&AwsOptions::from_env(target, Some(region.to_string()))?).await
    }

    /// A client per recipe region, home first.
    async fn clients(&self, l: &recipe::Loaded) -> Result<Vec<Aws>> {
        let mut out = Vec::new();
        for r in &l.recipe.regions {
            out.push(self.client(r).await?);
        }
        Ok(out)
    }
}

#[derive(Debug, Args)]
pub struct BakeArgs {
    /// The recipe: `images/RECIPE.yaml`.
    pub recipe: String,
    /// How long the builder may take to report (its packages and script).
    #[arg(long, default_value = "60m", value_parser = humantime::parse_duration)]
    pub report_timeout: Duration,
    /// How long an image or copy may take to become available.
    #[arg(long, default_value = "4h", value_parser = humantime::parse_duration)]
    pub image_timeout: Duration,
    /// Between looks at the builder and the images.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub poll: Duration,
    #[command(flatten)]
    pub images: ImagesArgs,
}

pub async fn bake(g: &GlobalArgs, a: BakeArgs) -> Result<ExitCode> {
    let l = a.images.recipe(&a.recipe)?;
    let clients = a.images.clients(&l).await?;
    let (home, rest) = clients.split_first().ok_or_else(|| anyhow!("the recipe names no region"))?;
    let copies: BTreeMap<String, Aws> = rest.iter().map(|c| (c.region.clone(), c.clone())).collect();
    let waits = crate::cloud::aws::bake::Waits { report: a.report_timeout, image: a.image_timeout, poll: a.poll };
    let mut progress = |line: &str| {
        let _ = writeln!(anstream::stderr(), "{}", crate::views::text::safe(line));
    };
    let baked = crate::cloud::aws::bake::bake(home, &copies, &l, waits, &mut progress).await?;
    if g.output != Format::Text {
        print_data(g.output, &baked)?;
        return Ok(ExitCode::SUCCESS);
    }
    let images: Vec<(String, String)> =
        l.recipe.regions.iter().filter_map(|r| baked.images.get(r).map(|i| (r.clone(), i.clone()))).collect();
    write!(
        anstream::stdout(),
        "{}",
        crate::views::images::baked(
            &baked.build_id,
            &baked.name,
            &baked.base_image,
            &images,
            &baked.checks,
            &baked.steps
        )
    )?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    pub recipe: String,
    /// The image to promote (its id in the recipe's first region).
    #[arg(long, conflicts_with = "from", required_unless_present = "from")]
    pub image: Option<String>,
    /// Promote what this channel holds (e.g. candidate).
    #[arg(long)]
    pub from: Option<String>,
    /// The channel written (default: the one after --from in the recipe's
    /// channels, or the first channel for --image).
    #[arg(long)]
    pub to: Option<String>,
    /// Why, kept with the channel's history.
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Write it (without: what would be written).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Deprecate the image the channel held before, this long from now,
    /// unless another channel holds it.
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub deprecate_after: Duration,
    #[command(flatten)]
    pub images: ImagesArgs,
}

/// After a promotion: the images it superseded are deprecated later.
async fn deprecate_superseded(regions: &[&Aws], writes: &[channels::Write], after: Duration) -> Result<()> {
    let at = chrono::Utc::now() + chrono::Duration::seconds(after.as_secs() as i64);
    for w in writes {
        let (Some(from), Some(aws)) = (&w.from, regions.iter().find(|r| r.region == w.region)) else { continue };
        if *from == w.to {
            continue;
        }
        let said = crate::cloud::aws::imagegc::deprecate_superseded(aws, from, at).await?;
        writeln!(anstream::stderr(), "{}", crate::views::text::safe(&said))?;
    }
    Ok(())
}

async fn who(aws: &Aws) -> String {
    aws.caller_identity().await.unwrap_or_else(|| std::env::var("USER").unwrap_or_else(|_| "unknown".into()))
}

fn show_writes(g: &GlobalArgs, writes: &[channels::Write], done: bool) -> Result<()> {
    if g.output != Format::Text {
        return print_data(g.output, &writes);
    }
    let rows: Vec<_> =
        writes.iter().map(|w| (w.region.clone(), w.parameter.clone(), w.from.clone(), w.to.clone())).collect();
    write!(anstream::stdout(), "{}", crate::views::images::writes(&rows, done))?;
    Ok(())
}

pub async fn promote(g: &GlobalArgs, a: PromoteArgs) -> Result<ExitCode> {
    let l = a.images.recipe(&a.recipe)?;
    let chans = &l.recipe.channels;
    let to = match (&a.to, &a.from) {
        (Some(t), _) => t.clone(),
        (None, Some(f)) => {
            let i = chans.iter().position(|c| c == f).ok_or_else(|| {
                anyhow!(
                    "{}: channel {f} is not in the recipe's channels ({}); say --to",
                    l.path.display(),
                    chans.join(", ")
                )
            })?;
            chans.get(i + 1).cloned().ok_or_else(|| anyhow!("{f} is the recipe's last channel; say --to"))?
        }
        (None, None) => chans[0].clone(),
    };
    if !recipe::valid_name(&to) {
        bail!("--to {to}: use lowercase letters, digits and `-`");
    }
    let clients = a.images.clients(&l).await?;
    let refs: Vec<&Aws> = clients.iter().collect();
    let source = match (&a.image, &a.from) {
        (Some(i), _) => Source::Image(i.clone()),
        (None, Some(f)) => Source::Channel(f.clone()),
        (None, None) => bail!("say --image AMI or --from CHANNEL"),
    };
    let action = match &source {
        Source::Image(i) => format!("promoted {i}"),
        Source::Channel(f) => format!("promoted from {f}"),
    };
    let note = crate::ami::channel::note(&action, &who(&clients[0]).await, &a.reason);
    let writes = channels::plan_promotion(&refs, &l.name, &source, &to, &note).await?;
    if a.yes {
        channels::write_all(&refs, &writes).await?;
    }
    show_writes(g, &writes, a.yes)?;
    if a.yes {
        deprecate_superseded(&refs, &writes, a.deprecate_after).await?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    pub recipe: String,
    pub channel: String,
    #[arg(long, default_value = "")]
    pub reason: String,
    #[arg(long, short = 'y')]
    pub yes: bool,
    #[command(flatten)]
    pub images: ImagesArgs,
}

pub async fn rollback(g: &GlobalArgs, a: RollbackArgs) -> Result<ExitCode> {
    let l = a.images.recipe(&a.recipe)?;
    let clients = a.images.clients(&l).await?;
    let refs: Vec<&Aws> = clients.iter().collect();
    let note = crate::ami::channel::note("rolled back", &who(&clients[0]).await, &a.reason);
    let writes = channels::plan_rollback(&refs, &l.name, &a.channel, &note).await?;
    if a.yes {
        channels::write_all(&refs, &writes).await?;
    }
    show_writes(g, &writes, a.yes)?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ChannelsArgs {
    /// One recipe's channels (default: every recipe's).
    pub recipe: Option<String>,
    /// One channel's whole history.
    #[arg(long, requires = "recipe")]
    pub history: Option<String>,
    /// Regions to look in (default: the recipe's, or the configured region).
    #[arg(long, value_delimiter = ',')]
    pub regions: Vec<String>,
    #[command(flatten)]
    pub images: ImagesArgs,
}

async fn regions_for(images: &ImagesArgs, recipe: Option<&str>, given: &[String]) -> Result<Vec<Aws>> {
    let names: Vec<String> = if !given.is_empty() {
        given.to_vec()
    } else if let Some(r) = recipe {
        images.recipe(r)?.recipe.regions
    } else {
        let mut all: Vec<String> = Vec::new();
        for r in recipe::list(&images.images_dir).unwrap_or_default() {
            if let Ok(l) = images.recipe(&r) {
                all.extend(l.recipe.regions);
            }
        }
        all.sort();
        all.dedup();
        if all.is_empty() {
            let region = std::env::var("AWS_REGION").map_err(|_| {
                anyhow!("no recipes in {} and no AWS_REGION: say --regions", images.images_dir.display())
            })?;
            all.push(region);
        }
        all
    };
    let mut out = Vec::new();
    for r in names {
        out.push(images.client(&r).await?);
    }
    Ok(out)
}

pub async fn channels_cmd(g: &GlobalArgs, a: ChannelsArgs) -> Result<ExitCode> {
    let clients = regions_for(&a.images, a.recipe.as_deref(), &a.regions).await?;
    if let (Some(r), Some(c)) = (&a.recipe, &a.history) {
        let mut all = Vec::new();
        for aws in &clients {
            let ch = channels::read(aws, r, c).await?;
            if ch.history.is_empty() {
                bail!("channel {c} of recipe {r} has never been written in {}", aws.region);
            }
            all.push(ch);
        }
        if g.output != Format::Text {
            print_data(g.output, &all)?;
        } else {
            for ch in &all {
                writeln!(anstream::stdout(), "{}/{} in {}:", ch.recipe, ch.channel, ch.region)?;
                write!(anstream::stdout(), "{}", crate::views::images::history(ch))?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut all = Vec::new();
    for aws in &clients {
        all.extend(channels::list(aws, a.recipe.as_deref()).await?);
    }
    if g.output != Format::Text {
        print_data(g.output, &all)?;
    } else {
        write!(anstream::stdout(), "{}", crate::views::images::channels(&all))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Carry the plan out: deprecate, disable, deregister and delete
    /// snapshots. Without it the plan is shown and nothing changes (as
    /// `apply` shows its plan, and promote, rollback and gate ask for --yes).
    #[arg(long)]
    pub yes: bool,
    /// List what would be done and why each survivor is kept; change nothing
    /// (the default without --yes).
    #[arg(long, conflicts_with = "yes")]
    pub dry_run: bool,
    /// Deprecate an image this long after it left its last channel.
    #[arg(long, default_value = "7d", value_parser = humantime::parse_duration)]
    pub deprecate_after: Duration,
    /// Disable it this long after (unless a launch template names it).
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub disable_after: Duration,
    /// Keep images a channel held within this long (for rollbacks).
    #[arg(long, default_value = "30d", value_parser = humantime::parse_duration)]
    pub retention: Duration,
    /// Regions to collect in (default: every recipe's regions).
    #[arg(long, value_delimiter = ',')]
    pub regions: Vec<String>,
    #[command(flatten)]
    pub images: ImagesArgs,
}

pub async fn gc(g: &GlobalArgs, a: GcArgs) -> Result<ExitCode> {
    let clients = regions_for(&a.images, None, &a.regions).await?;
    let days = |d: Duration| chrono::Duration::seconds(d.as_secs() as i64);
    let policy = crate::ami::gc::Policy {
        deprecate_after: days(a.deprecate_after),
        disable_after: days(a.disable_after),
        retention: days(a.retention),
    };
    let (mut images, mut refs, mut chans, mut counts) = (Vec::new(), Vec::new(), Vec::new(), BTreeMap::new());
    for aws in &clients {
        let f = crate::cloud::aws::imagegc::gather(aws).await?;
        images.extend(f.images);
        refs.extend(f.refs);
        chans.extend(f.channels);
        counts.insert(aws.region.clone(), f.counts);
    }
    let plan = crate::ami::gc::plan(&images, &refs, &chans, &counts, policy, chrono::Utc::now());
    let dry_run = a.dry_run || !a.yes;
    let done = if dry_run {
        Vec::new()
    } else {
        let refs: Vec<&Aws> = clients.iter().collect();
        crate::cloud::aws::imagegc::carry_out(&refs, &plan).await?
    };
    if g.output != Format::Text {
        print_data(g.output, &serde_json::json!({"plan": plan, "done": done}))?;
        return Ok(ExitCode::SUCCESS);
    }
    write!(anstream::stdout(), "{}", crate::views::images::gc(&plan, dry_run))?;
    for d in &done {
        writeln!(anstream::stdout(), "{} {}: {}", d.region, d.image, d.outcome)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct WavesArgs {
    /// Folder of the fleet's cluster files (default: --clusters-dir).
    #[arg(long)]
    pub fleet: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = crate::ami::waves::Profile::Standard)]
    pub profile: crate::ami::waves::Profile,
}

pub fn waves(g: &GlobalArgs, a: WavesArgs) -> Result<ExitCode> {
    let dir = a.fleet.clone().unwrap_or_else(|| g.clusters_dir.clone());
    let opts = crate::spec::LoadOptions { known_addons: super::super::validate::known_addons(&g.addons_dir) };
    let folder = crate::fleet::Folder::load(&dir, &opts)?;
    let members = &folder.members;
    // Canaries first, then by region and name: the order fleet stages use.
    let mut order: Vec<(bool, String, String)> = members
        .iter()
        .map(|m| (m.labels.get("canary").is_none_or(|v| v != "true"), m.region.clone(), m.name.clone()))
        .collect();
    order.sort();
    let names: Vec<String> = order.into_iter().map(|(_, _, n)| n).collect();
    let ws = crate::ami::waves::plan(a.profile, &names);
    if g.output != Format::Text {
        print_data(g.output, &ws)?;
    } else {
        write!(anstream::stdout(), "{}", crate::views::images::waves(&ws))?;
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct GateArgs {
    /// The recipe whose candidate is gated.
    pub recipe: String,
    /// The canary cluster.
    #[arg(long)]
    pub cluster: String,
    /// The channel holding the candidate (default: the recipe's first).
    #[arg(long)]
    pub from: Option<String>,
    /// The group rolled (default: the first node group following the recipe).
    #[arg(long)]
    pub canary_group: Option<String>,
    /// How long the canary must stay healthy on the candidate.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub soak: Duration,
    /// e2e phases run after the upgrade and after the downgrade.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "preflight,cluster,smoke")]
    pub e2e_phases: Vec<crate::e2e::Phase>,
    /// How long e2e's smoke workloads may take.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub smoke_timeout: Duration,
    /// Promote to the recipe's next channel when the gate passes (without: say what would be written).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Folder holding the image recipes.
    #[arg(long, env = "PINFLEET_IMAGES_DIR", default_value = "images")]
    pub images_dir: PathBuf,
    #[command(flatten)]
    pub roll: super::super::upgrade::RollArgs,
    #[command(flatten)]
    pub cloud: super::super::cloud::CloudArgs,
}

pub async fn gate(g: &GlobalArgs, a: GateArgs) -> Result<ExitCode> {
    let images = ImagesArgs { images_dir: a.images_dir.clone(), target: a.cloud.target };
    let l = images.recipe(&a.recipe)?;
    let from = a.from.clone().unwrap_or_else(|| l.recipe.channels[0].clone());
    let s = super::super::cloud::Session::open(g, &a.cluster, &a.cloud).await?;
    let kubeconfig = a.cloud.target.kubeconfig_or(a.roll.kubeconfig.as_deref(), s.name());
    let (store, pki, client) = s.roll_target(&kubeconfig).await?;
    let gate = crate::ami::gating::Gate {
        aws: &s.aws,
        cluster: &s.loaded.cluster,
        store: &store,
        pki: &pki,
        client,
        roll: a.roll.options(),
        recipe: &l,
        from: from.clone(),
        canary_group: a.canary_group.clone(),
        soak: a.soak,
        e2e: crate::e2e::Options { phases: a.e2e_phases.clone(), smoke_timeout: a.smoke_timeout, ..Default::default() },
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let view = crate::output::RollView::new(g.output == Format::Json);
    let say = |line: &str| {
        let _ = writeln!(anstream::stderr(), "{}", crate::views::text::safe(line));
    };
    let outcome = crate::ami::gating::run(&gate, &|e| view.show(&e), &say).await;
    view.clear();
    let outcome = outcome?;
    let mut written = Vec::new();
    if let crate::ami::gate::Verdict::Promote { to } = &outcome.verdict {
        let clients = images.clients(&l).await?;
        let refs: Vec<&Aws> = clients.iter().collect();
        let note = crate::ami::channel::note(
            &format!("promoted from {from}"),
            &who(&clients[0]).await,
            &format!("gate passed on {} ({})", outcome.cluster, outcome.group),
        );
        written = channels::plan_promotion(&refs, &l.name, &Source::Channel(from.clone()), to, &note).await?;
        if a.yes {
            channels::write_all(&refs, &written).await?;
        }
    }
    if g.output != Format::Text {
        print_data(g.output, &serde_json::json!({"gate": outcome, "writes": written, "written": a.yes}))?;
    } else {
        let mut out = anstream::stdout();
        match &outcome.verdict {
            crate::ami::gate::Verdict::Promote { to } => {
                writeln!(out, "gate passed: {} ({}/{from}) may go to {to}", outcome.candidate, l.name)?;
                let rows: Vec<_> = written
                    .iter()
                    .map(|w| (w.region.clone(), w.parameter.clone(), w.from.clone(), w.to.clone()))
                    .collect();
                write!(out, "{}", crate::views::images::writes(&rows, a.yes))?;
            }
            crate::ami::gate::Verdict::Stop { reason } => {
                writeln!(
                    out,
                    "gate stopped: {} stays on {from}: {}",
                    outcome.candidate,
                    crate::views::text::safe(reason)
                )?;
            }
        }
    }
    Ok(if matches!(outcome.verdict, crate::ami::gate::Verdict::Promote { .. }) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
