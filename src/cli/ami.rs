//! `pinfleet ami resolve|rollout|history CLUSTER`: which AMI each group's
//! selector resolves to now, the scheduled rollout of a newer one (canary
//! group first, a soak, then the rest, inside a maintenance window), and the
//! rollouts recorded in the state store; and the pipeline that makes the
//! images (`bake`, `promote`, `rollback`, `channels`, `gc`, `waves`, in
//! [`pipeline`]).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Result;
use chrono::Utc;
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;

mod pipeline;
mod rollout;
use crate::output::{print_data, Format};
pub use rollout::RolloutArgs;

/// What rolls the cluster's groups (its store, CA and API): the same for
/// `ami rollout` and `ami gate`.
async fn roller<'a>(
    s: &'a Session,
    cloud: &CloudArgs,
    roll: &super::upgrade::RollArgs,
) -> Result<crate::imaging::Roller<'a>> {
    let kubeconfig = cloud.target.kubeconfig_or(roll.kubeconfig.as_deref(), s.name());
    let (store, pki, client) = s.roll_target(&kubeconfig).await?;
    Ok(crate::imaging::Roller {
        aws: &s.aws,
        cluster: &s.loaded.cluster,
        store,
        pki,
        client,
        roll: roll.options(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
    })
}

#[derive(Debug, Args)]
pub struct AmiArgs {
    #[command(subcommand)]
    pub command: AmiCommand,
}

#[derive(Debug, Subcommand)]
pub enum AmiCommand {
    /// For each group: the AMI its selector resolves to now, and the one its launch template runs.
    Resolve(ResolveArgs),
    /// The scheduled job: roll a newer AMI onto the cluster, canary group first.
    Rollout(RolloutArgs),
    /// Past AMI rollouts of the cluster.
    History(ResolveArgs),
    /// Bake an image from a recipe (images/RECIPE.yaml): builder, checks, image, copies.
    Bake(pipeline::BakeArgs),
    /// Point a channel at a baked image (or at what another channel holds), in every region.
    Promote(pipeline::PromoteArgs),
    /// Point a channel back at its previous image: one write per region.
    Rollback(pipeline::RollbackArgs),
    /// The channels, what each holds and what a rollback would restore.
    Channels(pipeline::ChannelsArgs),
    /// Deprecate, disable and deregister baked images nothing refers to any more.
    Gc(pipeline::GcArgs),
    /// The waves a channel's new image takes through the fleet.
    Waves(pipeline::WavesArgs),
    /// Try a channel's candidate on a canary cluster (roll, soak, e2e, compare nodes, downgrade), then promote.
    Gate(pipeline::GateArgs),
}

#[derive(Debug, Args)]
pub struct ResolveArgs {
    pub cluster: String,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub use crate::ami::job::{AmiRollout, GroupImage, RolloutStatus};

pub async fn run(g: &GlobalArgs, args: AmiArgs) -> Result<ExitCode> {
    match args.command {
        AmiCommand::Resolve(a) => {
            let s = Session::open(g, &a.cluster, &a.cloud).await?;
            let images = resolve(&s).await?;
            show(g, &images)?;
            Ok(ExitCode::SUCCESS)
        }
        AmiCommand::History(a) => history(g, a).await,
        AmiCommand::Rollout(a) => rollout::rollout(g, a).await,
        AmiCommand::Bake(a) => pipeline::bake(g, a).await,
        AmiCommand::Promote(a) => pipeline::promote(g, a).await,
        AmiCommand::Rollback(a) => pipeline::rollback(g, a).await,
        AmiCommand::Channels(a) => pipeline::channels_cmd(g, a).await,
        AmiCommand::Gc(a) => pipeline::gc(g, a).await,
        AmiCommand::Waves(a) => pipeline::waves(g, a),
        AmiCommand::Gate(a) => pipeline::gate(g, a).await,
    }
}

/// Each group's image now; the resolver's warnings go to stderr.
pub(super) async fn resolve(s: &Session) -> Result<Vec<GroupImage>> {
    let (images, warnings) = crate::imaging::job::resolve(&s.aws, &s.loaded.cluster, Utc::now()).await?;
    for w in &warnings {
        writeln!(anstream::stderr(), "{} {w}", "warning:".yellow().bold())?;
    }
    Ok(images)
}

pub(super) fn show(g: &GlobalArgs, rows: &[GroupImage]) -> Result<()> {
    match g.output {
        Format::Text => Ok(write!(anstream::stdout(), "{}", crate::views::cluster::tables::images_table(rows))?),
        other => print_data(other, &rows),
    }
}

async fn history(g: &GlobalArgs, a: ResolveArgs) -> Result<ExitCode> {
    let s = Session::open(g, &a.cluster, &a.cloud).await?;
    let Some(store) = s.store(false).await? else {
        writeln!(anstream::stderr(), "no state store yet")?;
        return Ok(ExitCode::SUCCESS);
    };
    let rows = crate::imaging::job::history(&store).await?;
    if g.output != Format::Text {
        print_data(g.output, &rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    write!(anstream::stdout(), "{}", crate::views::cluster::tables::ami_history_table(&rows))?;
    Ok(ExitCode::SUCCESS)
}
