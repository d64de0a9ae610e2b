//! Addon packages as they sit on disk: `addons/<name>/addon.yaml` (what the
//! package is, what it needs, how to tell it is ready, which values it
//! takes) and `addons/<name>/manifests/*.yaml` (tera templates).
//!
//! Loading is the only IO in the addon pipeline; everything after it
//! ([`super::render`]) is pure.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::spec::yaml;

/// `addon.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AddonMeta {
    pub name: String,
    /// Semantic version of the package; recorded in the inventory.
    pub version: String,
    pub description: String,
    /// Addons that must be installed (and ready) first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Namespace for namespaced objects that name none (created if missing).
    pub namespace: String,
    /// Installed before every addon that is not `first` (the pod network:
    /// until it runs, kubelet keeps nodes NotReady and nothing else starts).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first: bool,
    /// Part of every cluster's set unless the cluster disables it.
    #[serde(default = "yes")]
    pub default: bool,
    /// A device plugin: without a `default`'s say in the cluster's file, the
    /// addon is part of exactly the clusters with an instance group whose
    /// machines offer this resource (`nvidia.com/gpu`: a g5, g6, p4d or p5
    /// group; see `crate::accelerated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accelerators: Option<String>,
    /// A change to this addon only takes effect on new nodes (e.g. it
    /// changes what the kubelet runs with), so nodes must be rolled.
    #[serde(default)]
    pub roll_nodes: bool,
    /// What must hold before the addon counts as installed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readiness: Vec<Readiness>,
    /// The Kubernetes minors the package supports (`"1.33"` to `"1.36"`);
    /// a cluster on another minor is refused before anything is written.
    /// Absent: no range was declared for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<MinorRange>,
    /// The values the templates accept, with their defaults. A cluster
    /// passing any other value is an error.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub values: IndexMap<String, ValueDecl>,
}

/// An inclusive range of Kubernetes minors, as `1.MINOR` strings; either end may be open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MinorRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

impl MinorRange {
    fn minor(v: &Option<String>) -> Option<u32> {
        v.as_deref().and_then(|v| v.strip_prefix("1.")).and_then(|m| m.parse().ok())
    }

    /// Whether 1.`minor` is in the range.
    pub fn contains(&self, minor: u32) -> bool {
        Self::minor(&self.min).is_none_or(|m| minor >= m) && Self::minor(&self.max).is_none_or(|m| minor <= m)
    }

    /// The newest minor in the range (None when open-ended).
    pub fn newest(&self) -> Option<u32> {
        Self::minor(&self.max)
    }
}

impl std::fmt::Display for MinorRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.min, &self.max) {
            (Some(a), Some(b)) => write!(f, "{a} to {b}"),
            (Some(a), None) => write!(f, "{a} and newer"),
            (None, Some(b)) => write!(f, "up to {b}"),
            (None, None) => write!(f, "any minor"),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ValueDecl {
    pub default: serde_json::Value,
    pub description: String,
}

/// One readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Readiness {
    pub kind: ReadyKind,
    pub name: String,
    /// Defaults to the addon's namespace (ignored for CRDs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

pub use crate::kube::ready::ReadyKind;

/// One manifest template.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Path as shown in messages (`addons/<name>/manifests/<file>`).
    pub path: PathBuf,
    pub text: String,
}

/// A package: its metadata and its manifest templates (sorted by file name).
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    pub meta: AddonMeta,
    pub dir: PathBuf,
    pub manifests: Vec<Manifest>,
}

/// Loads every package under `dir` (a folder per package with an addon.yaml).
pub fn load_all(dir: &Path) -> anyhow::Result<Vec<Package>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| anyhow::anyhow!("reading addon packages in {}: {e}", dir.display()))?;
    let mut dirs: Vec<PathBuf> =
        entries.filter_map(Result::ok).map(|e| e.path()).filter(|p| p.join("addon.yaml").is_file()).collect();
    dirs.sort();
    dirs.iter().map(|d| load(d)).collect()
}

/// Loads one package folder.
pub fn load(dir: &Path) -> anyhow::Result<Package> {
    let meta_path = dir.join("addon.yaml");
    let text =
        std::fs::read_to_string(&meta_path).map_err(|e| anyhow::anyhow!("reading {}: {e}", meta_path.display()))?;
    let meta = parse_meta(&text, &meta_path)?;
    let folder = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if meta.name != folder {
        anyhow::bail!("{}: name `{}` differs from its folder `{folder}`", meta_path.display(), meta.name);
    }
    let mut manifests = Vec::new();
    let mdir = dir.join("manifests");
    if mdir.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&mdir)?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
            .collect();
        files.sort();
        for path in files {
            let text =
                std::fs::read_to_string(&path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
            manifests.push(Manifest { path, text });
        }
    }
    Ok(Package { meta, dir: dir.to_path_buf(), manifests })
}

/// Parses addon.yaml, reporting the file and line of what is wrong.
pub fn parse_meta(text: &str, path: &Path) -> anyhow::Result<AddonMeta> {
    let node = yaml::parse_single(text, path)?;
    serde_json::from_value(node.to_json()).map_err(|e| {
        // serde_json names the field but has no YAML position; point at the
        // field's line when the message names one.
        let field = e.to_string().split('`').nth(1).map(str::to_string);
        let loc = field.and_then(|f| find_key(&node, &f)).unwrap_or_else(|| node.loc.clone());
        anyhow::anyhow!("{loc}: {e}")
    })
}

/// The location of the first mapping key named `key`, depth first.
fn find_key(node: &yaml::Node, key: &str) -> Option<crate::spec::Loc> {
    match &node.value {
        yaml::Value::Map(entries) => {
            entries.iter().find_map(|e| if e.key == key { Some(e.key_loc.clone()) } else { find_key(&e.value, key) })
        }
        yaml::Value::Seq(items) => items.iter().find_map(|n| find_key(n, key)),
        _ => None,
    }
}
