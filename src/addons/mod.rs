//! Addons: the platform's in-cluster pieces (workload CRDs and controller,
//! runtime-support profiles, node daemons, monitoring), kept in step with
//! each cluster file.
//!
//! ```text
//! addons/<name>/{addon.yaml, manifests/*.yaml}
//!     │ package::load_all                          (IO: read the files)
//!     ▼
//! render::select(cluster, packages)  → which addons, values, dependsOn order
//! render::render(cluster, selected)  → objects, labelled pinfleet.dev/addon
//!     │                                            (pure: no IO)
//!     ▼
//! install::Installer  → server-side apply → wait ready → prune → inventory
//!                     → diff (dry-run apply vs live)
//! ```

pub mod install;
pub mod package;
pub mod ready;
pub mod render;

pub use install::{Installer, Inventory};
pub use package::{load_all, Package};
pub use render::{render, select, RenderedAddon};

/// Loads the packages and renders the cluster's set (pure after loading).
pub fn render_for(cluster: &crate::spec::Cluster, packages: &[Package]) -> anyhow::Result<Vec<RenderedAddon>> {
    let selected = select(cluster, packages)?;
    Ok(render(cluster, &selected)?)
}
