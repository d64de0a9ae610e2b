//! `pinfleet ami bake RECIPE`: a builder, its checks, the image and its copies.

#[allow(unused_imports)]
use super::*;

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
