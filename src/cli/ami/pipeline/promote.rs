//! `pinfleet ami promote` and `pinfleet ami rollback`: a channel's writes, every region decided before the first.

#[allow(unused_imports)]
use super::*;

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
        share_where_served(g, &a.images, &refs, &l.name, &to, &writes).await?;
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
    if a.yes {
        // A member account's clusters read the channel in their own
        // account: it is rolled back there too, or they would go on
        // launching what the build account rolled back.
        share_where_served(g, &a.images, &refs, &l.name, &a.channel, &writes).await?;
    }
    Ok(ExitCode::SUCCESS)
}
