//! Delivery: a new version of a placed workload rolled across the member
//! clusters it runs on, in waves, on the fleet rollout's engine
//! (`fleet::rollout` decides, `fleet::run` carries out, resumable, with
//! windows and approvals); each wave gated by the new revision running
//! Ready and an analysis against Prometheus; rolled back by itself when a
//! wave fails or an alert fires, the version then marked bad for the
//! gateway to refuse. SLOs render their burn-rate rules here too.
//!
//! ```text
//! deliveries/*.yaml ─▶ spec (pure) ─▶ run ─▶ fleet::run (engine) ─▶ members (kube, Prometheus)
//!                                      │                              └▶ analysis (pure)
//!                                      ├◀ waits: every member call parked at a wait (no wait)
//!                                      ├▶ book: record, line (stop, bad, audit) in the state store
//!                                      └◀ alerts (Alertmanager webhook)
//! slo (pure) ─▶ rules YAML;  status (pure) ─▶ text
//! ```

pub mod alerts;
pub mod analysis;
pub mod book;
pub mod members;
pub mod prometheus;
pub mod run;
pub mod slo;
pub mod spec;
pub mod status;
pub mod waits;

pub use spec::DeliverySpec;

/// Durations in records and files as `1h 30m`.
pub(crate) mod secs {
    use serde::{Deserialize, Deserializer, Serializer};
    pub fn serialize<S: Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(serde::de::Error::custom)
    }
}
