//! `pinfleet ami gc`: what goes and why each survivor stays (a dry run without --yes).

#[allow(unused_imports)]
use super::*;

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
