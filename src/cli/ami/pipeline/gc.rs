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
        let members = member_accounts(g, &a.images, &clients).await?;
        let members: Vec<&Aws> = members.iter().collect();
        crate::cloud::aws::imagegc::carry_out(&refs, &members, &plan).await?
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

/// A connection into each account of the clusters folder, in each region
/// collected (its clusters' role): collection asks them whether an image is
/// still launched there before deregistering it. An account that refuses
/// stops the collection: not knowing is not "nobody launches it".
async fn member_accounts(g: &GlobalArgs, images: &ImagesArgs, clients: &[Aws]) -> Result<Vec<Aws>> {
    let target = images.target.aws().ok_or_else(|| anyhow!("images live on AWS: --target aws or localstack"))?;
    let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    let mut places = std::collections::BTreeSet::new();
    for l in &loaded {
        let c = &l.cluster;
        if let Some(a) = &c.spec.cloud.account {
            if clients.iter().any(|aws| aws.region == c.spec.cloud.region) {
                places.insert((c.spec.cloud.region.clone(), a.clone()));
            }
        }
    }
    let mut out = Vec::new();
    for (region, account) in places {
        let mut opts = AwsOptions::from_env(target, Some(region.clone()))?;
        opts.role = Some(crate::cloud::aws::account::RoleFor {
            account: account.clone(),
            cluster: "fleet".into(),
            command: g.command.clone(),
        });
        let aws = Aws::connect(&opts).await.map_err(|e| {
            anyhow!("asking account {} in {region} whether it still launches images: {e:#}", account.id)
        })?;
        out.push(aws);
    }
    Ok(out)
}
