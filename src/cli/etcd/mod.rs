//! `pinfleet etcd …`: the control plane's etcd backups. `agent` runs on the
//! control-plane machines (the project's image); `backup`, `backups`,
//! `verify`, `gc` and `restore` are the operator's. The work is
//! [`crate::etcd`]'s; these files read flags and print, one per command:
//! `agent.rs` (agent, backup), `backups.rs` (backups, verify, gc),
//! `restore.rs` and `rotate.rs` (rotate-key). Here: the flags they share,
//! and the state store they open.

use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};

use super::GlobalArgs;
use crate::cloud::aws::{Aws, AwsOptions, Target};
use crate::spec::types::BackupSpec;
use crate::state::blob::Retention;
use crate::state::Store;

mod agent;
mod backups;
mod import;
mod restore;
mod rotate;

pub use agent::AgentArgs;
pub use backups::VerifyArgs;
pub use import::ImportKopsArgs;
pub use restore::RestoreArgs;
pub use rotate::{rewrite_secrets, RotateArgs, REWRITTEN_UNDER};

#[derive(Debug, Args)]
pub struct EtcdCmdArgs {
    #[command(subcommand)]
    pub command: EtcdCommand,
}

#[derive(Debug, Subcommand)]
pub enum EtcdCommand {
    /// Take backups on a control-plane machine: a full snapshot every
    /// interval, deltas in between, each verified where etcd's binaries are.
    Agent(AgentArgs),
    /// Take one full backup now, and verify it.
    Backup(AgentArgs),
    /// The cluster's backups: age, revision, size, verified.
    Backups(StoreArgs),
    /// Restore a backup into a scratch etcd and compare it with the live store.
    Verify(VerifyArgs),
    /// Collect the backups the retention tiers no longer keep.
    Gc(StoreArgs),
    /// Bring the control plane's etcd back from a backup.
    Restore(RestoreArgs),
    /// Copy one of etcd-manager's backups (kops's state store) in as the
    /// cluster's own backup, to verify and restore as any other.
    ImportKops(ImportKopsArgs),
    /// A new encryption key for Secrets at rest (and rewrite them with it).
    RotateKey(RotateArgs),
}

/// The cluster and where its backups are.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    pub cluster: String,
    /// The state store (`s3://bucket/prefix` or `file://dir`); default: the
    /// cluster file's `stateStore`.
    #[arg(long, env = "PINFLEET_STATE_STORE")]
    pub state: Option<String>,
    /// The store's region, with `--state s3://…` (default: the cluster file's).
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
}

pub async fn run(g: &GlobalArgs, args: EtcdCmdArgs) -> Result<ExitCode> {
    match args.command {
        EtcdCommand::Agent(a) => agent::run(g, a, false).await,
        EtcdCommand::Backup(a) => agent::run(g, a, true).await,
        EtcdCommand::Backups(a) => backups::backups(g, a).await,
        EtcdCommand::Verify(a) => backups::verify(g, a).await,
        EtcdCommand::Gc(a) => backups::gc(g, a).await,
        EtcdCommand::Restore(a) => restore::run(g, a).await,
        EtcdCommand::ImportKops(a) => import::run(g, a).await,
        EtcdCommand::RotateKey(a) => rotate::run(g, a).await,
    }
}

/// The store, and the cluster's backup settings when its file is here.
async fn open(g: &GlobalArgs, a: &StoreArgs) -> Result<(Store, BackupSpec)> {
    open_for(g, a, false).await
}

/// `create`: a writer makes a missing bucket (versioned, encrypted, private).
async fn open_for(g: &GlobalArgs, a: &StoreArgs, create: bool) -> Result<(Store, BackupSpec)> {
    let loaded = super::render::load_one(g, &a.cluster).ok();
    let spec = loaded.as_ref().map(|l| l.cluster.spec.etcd.backups.clone()).unwrap_or_default();
    let url = match (&a.state, &loaded) {
        (Some(u), _) => u.clone(),
        (None, Some(l)) => l.cluster.spec.state_store.clone(),
        (None, None) => bail!(
            "no cluster file for {} in {} and no --state: say where its backups are (--state s3://bucket/prefix)",
            a.cluster,
            g.clusters_dir.display()
        ),
    };
    let region = a.region.clone().or_else(|| loaded.as_ref().map(|l| l.cluster.spec.cloud.region.clone()));
    let store = if url.starts_with("s3://") {
        let aws = Aws::connect(&AwsOptions::from_env(Target::Aws, region)?).await?;
        if create {
            Store::open(&url, &a.cluster, Some(&aws)).await?
        } else {
            Store::open_existing(&url, &a.cluster, Some(&aws))
                .await?
                .with_context(|| format!("{url}: no such bucket"))?
        }
    } else {
        Store::open(&url, &a.cluster, None).await?
    };
    Ok((store, spec))
}

/// The lock a backup written now takes: `--object-lock MODE:DAYS` when
/// given, else the cluster file's `etcd.backups.objectLock`.
fn lock_for(flag: Option<&str>, spec: &BackupSpec) -> Result<Option<Retention>> {
    Ok(match flag {
        Some(s) => retention(Some(s))?,
        None => spec.object_lock.as_ref().map(|l| Retention {
            mode: format!("{:?}", l.mode).to_ascii_uppercase(),
            until: chrono::Utc::now() + chrono::Duration::days(i64::from(l.days)),
        }),
    })
}

fn retention(s: Option<&str>) -> Result<Option<Retention>> {
    let Some(s) = s else { return Ok(None) };
    let (mode, days) = s.split_once(':').with_context(|| format!("--object-lock {s}: expected MODE:DAYS"))?;
    let mode = mode.to_ascii_uppercase();
    if mode != "GOVERNANCE" && mode != "COMPLIANCE" {
        bail!("--object-lock {s}: the mode is GOVERNANCE or COMPLIANCE");
    }
    let days: u32 = days.parse().with_context(|| format!("--object-lock {s}: DAYS is a whole number"))?;
    Ok(Some(Retention { mode, until: chrono::Utc::now() + chrono::Duration::days(i64::from(days)) }))
}
