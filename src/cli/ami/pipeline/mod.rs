//! `pinfleet ami bake|promote|rollback|channels|gc|waves|gate`: the image
//! pipeline's commands, one file each. Thin: load the recipe, connect a
//! client per region, call the engine (`cloud::aws::{bake, channels,
//! imagegc}`) and draw the outcome ([`crate::views::images`]). What they
//! share (the images' arguments, the regions, showing writes) is here.

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

mod bake;
mod gate;
mod gc;
mod promote;
mod show_channels;
mod waves;

pub use bake::{bake, BakeArgs};
pub use gate::{gate, GateArgs};
pub use gc::{gc, GcArgs};
pub use promote::{promote, rollback, PromoteArgs, RollbackArgs};
pub use show_channels::{channels_cmd, ChannelsArgs};
pub use waves::{waves, WavesArgs};

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

    /// A client per recipe region, home first: in the recipe's build
    /// account when it names one (its role assumed, and the landing
    /// checked with GetCallerIdentity before anything is written, as a
    /// cluster's is), else with the caller's own credentials.
    async fn clients(&self, l: &recipe::Loaded) -> Result<Vec<Aws>> {
        let Some(account) = &l.recipe.build_account else {
            let mut out = Vec::new();
            for r in &l.recipe.regions {
                out.push(self.client(r).await?);
            }
            return Ok(out);
        };
        let target = self.target.aws().ok_or_else(|| anyhow!("images live on AWS: --target aws or localstack"))?;
        let sessions = std::sync::Arc::new(crate::cloud::aws::account::Sessions::default());
        let mut out = Vec::new();
        for r in &l.recipe.regions {
            let mut opts = AwsOptions::from_env(target, Some(r.clone()))?;
            opts.role = Some(crate::cloud::aws::account::RoleFor {
                account: account.clone(),
                cluster: format!("image-{}", l.name),
                command: "ami".into(),
            });
            opts.sessions = Some(sessions.clone());
            let aws = Aws::connect(&opts)
                .await
                .map_err(|e| anyhow!("recipe {}: build account {}: {e:#}", l.name, account.id))?;
            out.push(aws);
        }
        Ok(out)
    }
}

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

/// Each region's image shared with the accounts whose clusters (in the
/// clusters folder) follow the channel there: launch permission and the
/// snapshots' createVolumePermission ([`crate::cloud::aws::sharing`]);
/// and the channel written into each of those accounts (through its
/// role), so its clusters read in their own account what was written.
/// Every channel write (promote, rollback, gate) ends here.
pub(super) async fn share_where_served(
    g: &GlobalArgs,
    images: &ImagesArgs,
    regions: &[&Aws],
    recipe: &str,
    channel: &str,
    writes: &[channels::Write],
) -> Result<()> {
    let target = images.target.aws().ok_or_else(|| anyhow!("images live on AWS: --target aws or localstack"))?;
    let (loaded, _) = crate::spec::load_paths(std::slice::from_ref(&g.clusters_dir), &Default::default());
    let clusters: Vec<crate::spec::Cluster> = loaded.into_iter().map(|l| l.cluster).collect();
    for w in writes {
        let Some(aws) = regions.iter().find(|a| a.region == w.region) else { continue };
        // The account the image lives in: the role's (a build account), else the caller's.
        let home = match aws.account() {
            Some(id) => Some(id.to_string()),
            None => aws.caller_identity().await.and_then(|arn| arn.split(':').nth(4).map(str::to_string)),
        };
        let members = crate::cloud::aws::sharing::served(&clusters, recipe, channel, &w.region, home.as_deref());
        let mut accounts: std::collections::BTreeSet<String> = members.iter().map(|a| a.id.clone()).collect();
        // Clusters without an account of their own run in the caller's:
        // when the image lives elsewhere (a recipe's build account), the
        // caller's account is served too, the channel written there with
        // the caller's own credentials.
        let mut caller = None;
        if crate::cloud::aws::sharing::served_at_home(&clusters, recipe, channel, &w.region) {
            let mine = images.client(&w.region).await?;
            let id = mine.caller_identity().await.and_then(|arn| arn.split(':').nth(4).map(str::to_string));
            if let Some(id) = id.filter(|id| Some(id) != home.as_ref()) {
                accounts.insert(id);
                caller = Some(mine);
            }
        }
        let shared = crate::cloud::aws::sharing::share(aws, &w.to, &accounts).await?;
        if !shared.is_empty() && g.output == Format::Text {
            writeln!(anstream::stdout(), "shared {} in {} with {}", w.to, w.region, shared.join(", "))?;
        }
        // The channel is written where its clusters read it: into each
        // member account too (through its role), naming the shared image.
        for account in members {
            let mut opts = AwsOptions::from_env(target, Some(w.region.clone()))?;
            opts.role = Some(crate::cloud::aws::account::RoleFor {
                account: account.clone(),
                cluster: "fleet".into(),
                command: g.command.clone(),
            });
            let member = Aws::connect(&opts)
                .await
                .map_err(|e| anyhow!("writing channel {channel} into account {}: {e:#}", account.id))?;
            channels::write_all(&[&member], std::slice::from_ref(w)).await?;
        }
        if let Some(mine) = caller {
            channels::write_all(&[&mine], std::slice::from_ref(w)).await?;
        }
    }
    Ok(())
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

async fn regions_for(images: &ImagesArgs, recipe: Option<&str>, given: &[String]) -> Result<Vec<Aws>> {
    let names: Vec<String> = if !given.is_empty() {
        given.to_vec()
    } else if let Some(r) = recipe {
        return images.clients(&images.recipe(r)?).await;
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
