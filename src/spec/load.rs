//! Reading cluster files: the `extends` chain, merge, structural check,
//! deserialization and semantic validation, with every problem located.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::check::Checker;
use super::merge::{merge, report_stray_directives};
use super::yaml::{self, Loc, Node, Value};
use super::{validate, Cluster, Diagnostic, Diagnostics};

/// Longest `extends` chain accepted; deeper is surely a mistake.
const MAX_EXTENDS_DEPTH: usize = 16;

pub use super::validate::LoadOptions;

/// A cluster file, loaded, merged, defaulted and valid.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub path: PathBuf,
    pub cluster: Cluster,
    /// The merged, located tree (for pointing at fields later).
    pub tree: Node,
}

fn strict_schema() -> &'static serde_json::Value {
    static SCHEMA: OnceLock<serde_json::Value> = OnceLock::new();
    SCHEMA.get_or_init(super::schema::cluster_schema)
}

fn at_file(path: &Path, message: String) -> Diagnostic {
    Diagnostic { loc: Loc::new(Arc::new(path.to_path_buf()), 1, 1), path: String::new(), message }
}

/// Lexically normalizes `a/b/../c` to `a/c` (for display; no symlink lookups).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if out.file_name().is_some_and(|n| n != "..") => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Reads one file and its `extends` chain into a single merged tree.
fn load_tree(path: &Path, chain: &mut Vec<PathBuf>) -> Result<Node, Vec<Diagnostic>> {
    let src = std::fs::read_to_string(path).map_err(|e| vec![at_file(path, format!("cannot read file: {e}"))])?;
    load_tree_source(path, &src, chain)
}

fn load_tree_source(path: &Path, src: &str, chain: &mut Vec<PathBuf>) -> Result<Node, Vec<Diagnostic>> {
    let node = yaml::parse_single(src, path).map_err(|e| vec![Diagnostic::from(e)])?;
    if !matches!(node.value, Value::Map(_)) {
        return Err(vec![Diagnostic {
            loc: node.loc.clone(),
            path: String::new(),
            message: format!("expected a mapping (a Cluster), found {}", node.kind_name()),
        }]);
    }
    let identity = std::fs::canonicalize(path).unwrap_or_else(|_| normalize(path));
    chain.push(identity);

    let mut errors = Vec::new();
    let Some(ext) = node.entry("extends").cloned() else {
        report_stray_directives(&node, "", &mut errors);
        chain.pop();
        return if errors.is_empty() { Ok(node) } else { Err(errors) };
    };
    let fail = |message: String| vec![Diagnostic { loc: ext.key_loc.clone(), path: "extends".into(), message }];
    let Some(rel) = ext.value.as_str().filter(|s| !s.is_empty() && !ext.value.is_null()) else {
        return Err(fail(format!("expected a relative file path, found {}", ext.value.kind_name())));
    };
    if chain.len() > MAX_EXTENDS_DEPTH {
        return Err(fail(format!("`extends` chain is deeper than {MAX_EXTENDS_DEPTH} files")));
    }
    let base_path = normalize(&path.parent().unwrap_or(Path::new(".")).join(rel));
    let base_identity = std::fs::canonicalize(&base_path).unwrap_or_else(|_| normalize(&base_path));
    if let Some(start) = chain.iter().position(|p| *p == base_identity) {
        let cycle: Vec<String> = chain[start..]
            .iter()
            .chain(std::iter::once(&base_identity))
            .map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
            .collect();
        return Err(fail(format!("`extends` cycle: {}", cycle.join(" → "))));
    }
    if !base_path.is_file() {
        return Err(fail(format!("base file `{}` does not exist", base_path.display())));
    }
    let base = load_tree(&base_path, chain)?;
    chain.pop();
    let merged = merge(base, node, "", &mut errors);
    if errors.is_empty() {
        Ok(merged)
    } else {
        Err(errors)
    }
}

fn sorted(mut diags: Vec<Diagnostic>) -> Diagnostics {
    diags.sort_by(|a, b| {
        (a.loc.file.as_path(), a.loc.line, a.loc.col).cmp(&(b.loc.file.as_path(), b.loc.line, b.loc.col))
    });
    diags.dedup();
    Diagnostics(diags)
}

/// Loads one cluster file: merged, checked, defaulted and validated.
pub fn load_cluster(path: &Path, opts: &LoadOptions) -> Result<Loaded, Diagnostics> {
    let src = std::fs::read_to_string(path)
        .map_err(|e| Diagnostics(vec![at_file(path, format!("cannot read file: {e}"))]))?;
    load_source(path, &src, opts)
}

/// Loads a cluster from text said to live at `path` (its `extends` are
/// read from disk relative to that path).
pub fn load_source(path: &Path, src: &str, opts: &LoadOptions) -> Result<Loaded, Diagnostics> {
    let tree = load_tree_source(path, src, &mut Vec::new()).map_err(sorted)?;
    let json = Checker::new(strict_schema()).check_root(&tree).map_err(sorted)?;
    let cluster: Cluster = serde_json::from_value(json).map_err(|e| {
        Diagnostics(vec![Diagnostic { loc: tree.loc.clone(), path: String::new(), message: e.to_string() }])
    })?;
    let problems = validate::validate(&cluster, opts);
    if !problems.is_empty() {
        return Err(sorted(
            problems
                .into_iter()
                .map(|p| Diagnostic { loc: tree.locate(&p.path), path: p.path, message: p.message })
                .collect(),
        ));
    }
    Ok(Loaded { path: path.to_path_buf(), cluster, tree })
}

/// The cluster files directly inside `dir` (`*.yaml`, `*.yml`), sorted.
/// Subfolders (bases/, federations/) hold other things and are skipped.
pub fn cluster_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        // The fleet's rollout stages and windows live beside the clusters.
        .filter(|p| p.file_stem().and_then(|s| s.to_str()) != Some("fleet"))
        .collect();
    files.sort();
    Ok(files)
}

/// Loads every file named (folders are expanded to their cluster files),
/// returning what loaded and every problem found, including two files that
/// define the same cluster name.
pub fn load_paths(paths: &[PathBuf], opts: &LoadOptions) -> (Vec<Loaded>, Diagnostics) {
    let mut files = Vec::new();
    let mut problems = Vec::new();
    for p in paths {
        if p.is_dir() {
            match cluster_files(p) {
                Ok(found) => files.extend(found),
                Err(e) => problems.push(at_file(p, format!("cannot read folder: {e}"))),
            }
        } else {
            files.push(p.clone());
        }
    }
    let mut loaded = Vec::new();
    for f in files {
        match load_cluster(&f, opts) {
            Ok(l) => loaded.push(l),
            Err(d) => problems.extend(d.0),
        }
    }
    let mut by_name: BTreeMap<&str, &Loaded> = BTreeMap::new();
    for l in &loaded {
        if let Some(first) = by_name.insert(&l.cluster.metadata.name, l) {
            problems.push(Diagnostic {
                loc: l.tree.locate("metadata.name"),
                path: "metadata.name".into(),
                message: format!("cluster `{}` is also defined in {}", l.cluster.metadata.name, first.path.display()),
            });
        }
    }
    (loaded, Diagnostics(problems))
}

/// Loads every cluster in a folder; any problem fails the whole load.
pub fn load_dir(dir: &Path, opts: &LoadOptions) -> Result<Vec<Loaded>, Diagnostics> {
    let (loaded, problems) = load_paths(&[dir.to_path_buf()], opts);
    if problems.0.is_empty() {
        Ok(loaded)
    } else {
        Err(problems)
    }
}

/// Turns a CLUSTER argument into a file: an existing path, or a name under
/// the clusters folder (`NAME.yaml` / `NAME.yml`, or any file whose
/// metadata.name is NAME).
pub fn resolve_cluster_file(arg: &str, clusters_dir: &Path) -> anyhow::Result<PathBuf> {
    let as_path = Path::new(arg);
    if as_path.is_file() {
        return Ok(as_path.to_path_buf());
    }
    for ext in ["yaml", "yml"] {
        let candidate = clusters_dir.join(format!("{arg}.{ext}"));
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    let files = cluster_files(clusters_dir).unwrap_or_default();
    for f in &files {
        if let Ok(src) = std::fs::read_to_string(f) {
            if let Ok(node) = yaml::parse_single(&src, f) {
                if node.get("metadata").and_then(|m| m.get("name")).and_then(Node::as_str) == Some(arg) {
                    return Ok(f.clone());
                }
            }
        }
    }
    let names: Vec<String> =
        files.iter().filter_map(|f| f.file_stem().map(|s| s.to_string_lossy().into_owned())).collect();
    let hint = match super::check::did_you_mean(arg, names.iter().map(String::as_str)) {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None if names.is_empty() => String::new(),
        None => format!(" (known: {})", names.join(", ")),
    };
    anyhow::bail!("no cluster `{arg}`: not a file, and not a cluster in {}{hint}", clusters_dir.display())
}
