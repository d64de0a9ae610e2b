//! The submission gateway: the developers' front door to the fleet.
//!
//! ```text
//! pinfleet submit / workloads / queue / quota (cli::gateway, HTTP client)
//!     │ bearer token or client certificate
//!     ▼
//! http (axum) ─► identity ─► service ─► records on the host cluster's API
//!                               │          (Submission, TeamQuota, AdmissionLedger)
//!                               ├─ intake (pure): what it is, every problem
//!                               ├─ admission (pure): quota, queue, preemption, estimates
//!                               │    over quota (pure): amounts, limits, the ledger
//!                               ├─ packing (pure): pods onto a member's nodes, all a pod asks on one
//!                               ├─ gang (pure): pods not ready in time → evict, requeue, fail
//!                               └─ placement (federation) ─► member clusters (server-side apply)
//! ```
//!
//! Arrows run down: the pure modules know nothing of HTTP or Kubernetes.

// Every count in the gateway is checked or saturating: a value a tenant
// sent must never wrap a quota or panic the pass every team waits on
// (scripts/test runs clippy, which refuses an unchecked operation here).
// The tests beside the code may count as tests do; what ships may not.
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

pub mod admission;
pub mod audit;
pub mod client;
pub mod gang;
pub mod guard;
pub mod http;
pub mod identity;
pub mod intake;
/// The edge the gateway's listeners stand behind (named here as before).
pub use crate::edge as listen;
pub mod metrics;
pub mod packing;
pub mod quota;
pub mod records;
pub mod render;
pub mod service;
