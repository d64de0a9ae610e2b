//! `pinfleet ami channels`: what each channel holds, per region.

#[allow(unused_imports)]
use super::*;

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
