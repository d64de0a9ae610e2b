//! Rolling replacement of machines: after `apply` gave a group a new
//! launch-template version (new AMI, type, user-data), or when nodes are
//! annotated `pinfleet.dev/needs-update`.
//!
//! ```text
//! observe (EC2 machines + their Nodes) ─▶ policy::step (pure) ─▶ driver:
//!   launch replacements (surge) ─▶ wait Ready (node watch)
//!   cordon ─▶ drain via eviction (PDBs) ─▶ terminate ─▶ delete Node ─▶ validate
//! ```
//!
//! The driver is generic over [`driver::Machines`] and [`driver::Nodes`]:
//! [`edges`] are EC2 and the Kubernetes API, [`simfleet`] an in-memory fleet
//! for benchmarks. Every decision is re-derived from observation, so a
//! killed roll re-run continues where it stopped.

pub mod driver;
pub mod edges;
pub mod health;
pub mod interruptions;
pub mod policy;
pub mod progress;
pub mod run;
pub mod simfleet;
pub mod versions;
