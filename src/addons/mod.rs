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
/// The readiness rules, shared with the rest of the platform (`kube::ready`).
pub use crate::kube::ready;
pub mod render;

pub use install::{Installer, Inventory};
pub use package::{load_all, Package};
pub use render::{render, select, RenderedAddon};

/// Loads the packages and renders the cluster's set (pure after loading).
pub fn render_for(cluster: &crate::spec::Cluster, packages: &[Package]) -> anyhow::Result<Vec<RenderedAddon>> {
    let selected = select(cluster, packages)?;
    Ok(render(cluster, &selected)?)
}

/// The cluster's addons, rendered from the packages under `addons_dir`
/// (errors located: addon, file, line).
pub fn rendered(addons_dir: &std::path::Path, cluster: &crate::spec::Cluster) -> anyhow::Result<Vec<RenderedAddon>> {
    use anyhow::Context as _;
    let packages = load_all(addons_dir)?;
    render_for(cluster, &packages)
        .with_context(|| format!("the addons of cluster {} do not render", cluster.metadata.name))
}

/// What was installed, by whom and when (`addons.json` in the state store).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstalledRecord {
    pub installed_at: chrono::DateTime<chrono::Utc>,
    pub by: String,
    pub versions: std::collections::BTreeMap<String, String>,
}

/// Records an install's versions in the cluster's state store.
pub async fn record(store: &crate::state::Store, report: &install::Report) -> anyhow::Result<()> {
    let (by, host) = crate::state::whoami();
    let rec = InstalledRecord {
        installed_at: chrono::Utc::now(),
        by: format!("{by}@{host}"),
        versions: report.addons.iter().map(|a| (a.name.clone(), a.version.clone())).collect(),
    };
    store.put_json("addons.json", &rec).await.map(|_| ())
}

/// One package in the catalog, and whether a cluster runs it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CatalogRow {
    pub name: String,
    pub version: String,
    /// Whether the cluster runs it (None: no cluster asked about).
    pub enabled: Option<bool>,
    pub namespace: String,
    pub depends_on: Vec<String>,
    pub roll_nodes: bool,
    pub description: String,
}

/// The packages, and for `cluster` which of them it runs.
pub fn catalog(packages: &[Package], cluster: Option<&crate::spec::Cluster>) -> anyhow::Result<Vec<CatalogRow>> {
    let chosen: Option<Vec<String>> = match cluster {
        Some(c) => Some(select(c, packages)?.iter().map(|s| s.package.meta.name.clone()).collect()),
        None => None,
    };
    Ok(packages
        .iter()
        .map(|p| CatalogRow {
            name: p.meta.name.clone(),
            version: p.meta.version.clone(),
            enabled: chosen.as_ref().map(|c| c.contains(&p.meta.name)),
            namespace: p.meta.namespace.clone(),
            depends_on: p.meta.depends_on.clone(),
            roll_nodes: p.meta.roll_nodes,
            description: p.meta.description.clone(),
        })
        .collect())
}
