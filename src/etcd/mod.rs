//! The control plane's etcd, backed up and brought back.
//!
//! Where it sits: the agent (`pinfleet etcd agent`, on the control-plane
//! machines, speaking etcd's gRPC API with the node's client certificates)
//! streams snapshots and watch deltas into the state store; the verifier
//! restores each snapshot into a scratch etcd on loopback and compares it
//! with the live cluster; `pinfleet etcd restore` brings every member back
//! from one snapshot plus the deltas after it. The pure core decides; the
//! effects are at the edges:
//!
//! ```text
//! policy (pure: gc tiers, freshness, the revision to bump to, what is lost)
//!    ▲
//! manifest (pure: what a backup is, its keys in the store, keys per prefix)
//!    ▲
//! agent ── etcd gRPC ──▶ snapshot stream ──▶ state::blob upload ──▶ manifest
//!   └──── watch ──▶ deltas (every deltaInterval) ──▶ state store
//! verify ── download ──▶ scratch (etcdutl restore + etcd on loopback) ──▶ verdict
//! plan (a restore here): every check first, the snapshot's checksum among
//!          them, no machine touched ──▶ the phases, printed, then run in order:
//! restore ── etcdutl per member (new token) ──▶ members start ──▶ deltas replayed
//!          ──▶ revision bumped past any client's ──▶ compacted (watches relist)
//! order (members on separate machines): the command writes an order into
//!          the state store ──▶ each machine's agent restores its member in
//!          place and reports ──▶ the first replays, bumps and compacts
//! ```
//!
//! Membership changes during a roll are [`crate::kube::etcd`]'s; this module
//! never adds or removes members.

pub mod agent;
pub mod conn;
pub mod kops;
pub mod manifest;
pub mod metrics;
pub mod order;
pub mod plan;
pub mod policy;
pub mod restore;
pub mod scratch;
pub mod snapshot;
pub mod verify;

/// The variable naming the points at which a drill has the process die
/// (comma-separated): `restore:between-renames` (a swap's old data moved
/// aside, the restored data not yet in), `restore:before-finished` (the
/// finisher replayed, bumped and compacted but has not said so),
/// `adopt:tagging` (an adopt's PKI and record written, one resource
/// tagged, the rest not). The way
/// to prove a restart there resumes; unset, nothing happens.
pub const FAILPOINT_VAR: &str = "PINFLEET_FAILPOINT";
/// The exit code of a process that died at a failpoint.
pub const FAILPOINT_EXIT: i32 = 86;

/// Dies at once (no destructors, no cleanup: as a machine losing power
/// would, less the page cache) when [`FAILPOINT_VAR`] names `point`.
pub(crate) fn failpoint(point: &str) {
    if std::env::var(FAILPOINT_VAR).is_ok_and(|v| v.split(',').any(|p| p.trim() == point)) {
        eprintln!("failpoint {point}: the process dies here ({FAILPOINT_VAR})");
        // SAFETY: ends the process without running anything else, as a kill would.
        unsafe { libc::_exit(FAILPOINT_EXIT) };
    }
}
