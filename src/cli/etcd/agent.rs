//! `pinfleet etcd agent` (on the control-plane machines) and `pinfleet etcd
//! backup` (one backup now): the flags read, [`crate::etcd::agent`] and
//! [`crate::etcd::order`] do the work, this file prints.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;

use super::{open_for, StoreArgs};
use crate::cli::GlobalArgs;
use crate::etcd::agent::{self, Taking};
use crate::etcd::conn::EtcdArgs;
use crate::etcd::restore::Target as Member;
use crate::etcd::scratch::Binaries;

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// The cluster's Kubernetes version, for the manifest.
    #[arg(long, env = "PINFLEET_KUBERNETES_VERSION", default_value = "unknown")]
    pub kubernetes_version: String,
    /// A full snapshot this often (default: the cluster's `etcd.backups.interval`, else 15m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// Deltas flushed this often (the RPO; default 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delta_interval: Option<Duration>,
    /// S3 Object Lock for each backup: MODE:DAYS (GOVERNANCE:30, COMPLIANCE:365).
    #[arg(long)]
    pub object_lock: Option<String>,
    /// Do not verify (etcd's binaries are not on this machine).
    #[arg(long)]
    pub no_verify: bool,
    /// The API server's EncryptionConfiguration: its key names are recorded
    /// with each backup (a restore needs them).
    #[arg(long, default_value = "/etc/kubernetes/pki/encryption-config.yaml")]
    pub encryption_config: PathBuf,
    /// Serve the agent's figures for Prometheus at /metrics here.
    #[arg(long)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The member on this machine, NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]:
    /// the agent carries out `pinfleet etcd restore`'s orders for it.
    #[arg(long, env = "PINFLEET_ETCD_RESTORE_AS")]
    pub restore_as: Option<String>,
}

/// `once`: `pinfleet etcd backup` (one backup, verified); else the agent.
pub async fn run(g: &GlobalArgs, a: AgentArgs, once: bool) -> Result<ExitCode> {
    let me: Option<Member> = a.restore_as.as_deref().map(str::parse).transpose().map_err(anyhow::Error::msg)?;
    // The agent waits out a store it cannot reach yet (the machine's network
    // or role still coming up); where its backups go must be known, though.
    let knows_where = a.store.state.is_some() || crate::cli::render::load_one(g, &a.store.cluster).is_ok();
    let mut failures = 0u32;
    let (store, mut spec) = loop {
        match open_for(g, &a.store, true).await {
            Ok(opened) => break opened,
            Err(e) if once || !knows_where => return Err(e),
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = agent::retry_after(failures);
                tracing::warn!(failures, "opening the state store: {e:#}; trying again in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    };
    if let Some(i) = a.interval {
        spec.interval.0 = i;
    }
    if let Some(i) = a.delta_interval {
        spec.delta_interval.0 = i;
    }
    let lock = super::lock_for(a.object_lock.as_deref(), &spec)?;
    let taking = Taking {
        kubernetes_version: a.kubernetes_version.clone(),
        taken_by: format!("pinfleet etcd {} on {}", if once { "backup" } else { "agent" }, crate::state::whoami().1),
        retention: lock,
        encryption_keys: std::fs::read_to_string(&a.encryption_config)
            .map(|t| agent::encryption_key_names(&t))
            .unwrap_or_default(),
    };
    let bins = if a.no_verify { None } else { Binaries::find() };
    if !a.no_verify && bins.is_none() {
        tracing::warn!(
            "etcd's binaries (etcd, etcdutl) are not here (PINFLEET_ETCD_DIR or PATH): backups are taken unverified"
        );
    }
    if once {
        return backup_once(&store, &a.etcd, &taking, bins.as_ref()).await;
    }
    let figures = crate::etcd::metrics::Shared::default();
    if let Some(listen) = a.metrics_listen {
        let at = crate::etcd::metrics::serve(listen, figures.clone()).await?;
        tracing::info!("the agent's metrics at http://{at}/metrics");
    }
    let orders = async {
        match &me {
            Some(me) => crate::etcd::order::follow_orders(&store, me, bins.as_ref(), &a.etcd).await,
            None => std::future::pending().await,
        }
    };
    // SIGTERM (a rolling update of the agents) reaches the agent itself:
    // it flushes the changes it holds before it ends.
    let stop = crate::cli::shutdown_signal();
    tokio::select! {
        r = agent::serve(&store, &a.etcd, &spec, &taking, bins.as_ref(), Some(figures), stop) => r.map(|_| ExitCode::SUCCESS),
        _ = orders => Ok(ExitCode::SUCCESS),
    }
}

/// `pinfleet etcd backup`: one backup taken, verified where the binaries are.
async fn backup_once(
    store: &crate::state::Store,
    etcd: &EtcdArgs,
    taking: &Taking,
    bins: Option<&Binaries>,
) -> Result<ExitCode> {
    let t0 = Instant::now();
    let (endpoint, _) = etcd.first_answering().await?;
    let m = agent::take(store, etcd, &endpoint, taking).await?;
    let took = t0.elapsed();
    let verdict = match bins {
        Some(b) => Some(agent::verify_locked(store, &m, b, Some(etcd), taking.retention.as_ref()).await?),
        None => None,
    };
    let mut out = anstream::stdout();
    writeln!(
        out,
        "backup {} of {}: revision {}, {} bytes from {} in {:.1}s",
        m.id,
        m.cluster,
        m.revision,
        m.size,
        m.member,
        took.as_secs_f64()
    )?;
    match &verdict {
        Some(v) if v.ok => {
            writeln!(out, "verified by a restore in {:.1}s: {}", v.restore_seconds, v.checks.join("; "))?
        }
        Some(v) => {
            writeln!(out, "NOT verified: {}", v.problems.join("; "))?;
            return Ok(ExitCode::FAILURE);
        }
        None => writeln!(out, "not verified (no etcd binaries here)")?,
    }
    Ok(ExitCode::SUCCESS)
}
