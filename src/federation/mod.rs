//! Federation: one large app's replicas spread over the member clusters of
//! a federation, and kept there.
//!
//! ```text
//! clusters/*.yaml (spec.federation) + clusters/federations/APP.yaml
//!     │ members: kubeconfig → health, free capacity, current replicas   (IO)
//!     ▼
//! placement::place (pure) → per-member share with its reason
//!     │
//!     ▼
//! fanout: server-side apply of a PinterestService with its share into each
//!         member; members losing replicas scaled down after the others are Ready
//! ```

pub mod fanout;
pub mod health;
pub mod placement;
