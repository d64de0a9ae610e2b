//! `pinfleet controller`: kube-runtime Controllers for the six workload
//! kinds. Each reconcile loads the runtime-support profile, renders the
//! CR ([`crate::workloads::render`]), applies every child with server-side
//! apply (field manager `pinfleet-controller`) — only when the live object
//! differs in a field pinfleet sets, so a no-op resync writes nothing and
//! hand edits are reverted — prunes children no longer rendered, and
//! writes status computed from the children ([`status`]) only when it
//! changed. Children carry owner references, so deletion cascades.
//! Failures back off exponentially per object.
//!
//! At scale: every child kind is watched (paged lists, managed fields
//! dropped, kept compact by [`child`]) into a cache the reconcile compares
//! against, so an unchanged child costs no request, and pruning reads the
//! children the caches hold per owner instead of listing; a watch event is a reason to reconcile only when
//! it changes what the workload renders from (not its status, which only
//! this controller writes), or a child in a way the workload reads (not a
//! PodDisruptionBudget's counts), and not when it is the controller's own
//! write. A standby replica keeps the same caches warm and reconciles
//! everything when it comes to lead. Each workload's change-to-children and
//! change-to-pods latency is a Prometheus histogram (the reconcile SLO).
//!
//! ```text
//! watches ──► reconcile ──► (profile, workload's render) ──► apply, prune, status
//!    │            │
//!    └──► context (caches, own writes, latencies) ◄──┘──► metrics
//! ```
//!
//! This file holds the entry point and what every part names (the field
//! manager, the profile's ConfigMap, the error); `workload` says what the
//! controller needs of each kind, `profile` loads the runtime-support
//! profile, `context` is the state the reconciles share, `metrics` its
//! histograms, `reconcile` one workload's pass, `watches` the watches and
//! caches that feed it and a new leader's takeover.

pub mod child;
mod context;
pub mod leader;
mod metrics;
mod profile;
mod reconcile;
pub mod serving;
pub mod status;
mod watches;
mod workload;

use std::sync::Arc;

use crate::workloads::*;

pub use context::{Ctx, LeadGuard};
pub use metrics::{Histogram, BUCKETS, LATENCY_BUCKETS};
pub use profile::{load_profile, profile_from, profile_in};
pub use workload::Workload;

pub const MANAGER: &str = "pinfleet-controller";
/// Where the runtime-support addon publishes its profiles.
pub const SYSTEM_NAMESPACE: &str = "pinfleet-system";
pub const PROFILE_CONFIGMAP: &str = "runtime-support";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}

/// Runs the controllers for all six kinds until the process ends.
pub async fn run(ctx: Arc<Ctx>) {
    watches::start_caches(&ctx).await;
    futures::join!(
        watches::run_one::<PinterestService>(ctx.clone()),
        watches::run_one::<PinterestJobSet>(ctx.clone()),
        watches::run_one::<PinterestCronJob>(ctx.clone()),
        watches::run_one::<PinterestDaemon>(ctx.clone()),
        watches::run_one::<PinterestTrainingJob>(ctx.clone()),
        watches::run_one::<PinterestStatefulSet>(ctx.clone()),
    );
}
