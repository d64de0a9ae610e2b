//! Arrows between modules run one way (STYLE.md): no two sibling modules
//! (files of one folder, or the crate's top-level modules) name each other
//! in code. A circle means something sits in the wrong room. The circles
//! that are known and not yet moved are listed here; a new one fails, and
//! so does a listed one that is gone (the list stays true).
//!
//! Between the crate's top-level rooms the arrows run down: every room has
//! a floor ([`FLOORS`]) and names only rooms on floors below its own. A new
//! room fails until it is placed, and so does a new arrow up or sideways.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Circles known when this check was written, each waiting to be moved.
const KNOWN: &[(&str, &str)] = &[];

/// Module path of a source file: `src/cli/apply.rs` → [cli, apply].
fn module_of(path: &Path) -> Vec<String> {
    let rel = path.strip_prefix("src").unwrap().with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The file's code: comments and its unit tests left out.
fn code(text: &str) -> String {
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    body.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Paths named after `prefix` (`crate::a::b`, `super::c`), as segments.
fn named(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before_ok = i == 0 || !rest.as_bytes()[i - 1].is_ascii_alphanumeric() && rest.as_bytes()[i - 1] != b'_';
        rest = &rest[i + prefix.len()..];
        if !before_ok {
            continue;
        }
        let path: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':').collect();
        let base: Vec<String> = path.split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
        // `use super::{a, b::c}`: each item of the group is a path of its own.
        let after = &rest[path.len()..];
        if let (Some(group), true) = (after.strip_prefix('{'), path.ends_with("::") || path.is_empty()) {
            let inner = group.split('}').next().unwrap_or_default();
            for item in inner.split(',') {
                let first: String =
                    item.trim().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !first.is_empty() && first != "self" {
                    out.push(base.iter().cloned().chain([first]).collect());
                }
            }
            continue;
        }
        out.push(base);
    }
    out
}

#[test]
fn sibling_modules_do_not_name_each_other() {
    let mut all = Vec::new();
    files(Path::new("src"), &mut all);
    let modules: BTreeMap<Vec<String>, String> =
        all.iter().map(|p| (module_of(p), code(&std::fs::read_to_string(p).unwrap()))).collect();
    let is_module = |m: &[String]| modules.keys().any(|k| k.starts_with(m));
    let mut edges: BTreeSet<(String, String)> = BTreeSet::new();
    for (m, text) in &modules {
        if m.is_empty() || m == &["main"] || m == &["lib"] {
            continue;
        }
        let mut targets: Vec<Vec<String>> = named(text, "crate::");
        // super:: names a sibling in the parent's folder, from `a/b.rs` and
        // from `a/b/mod.rs` alike (and from `a/b.rs` with children in `a/b/`).
        if m.len() > 1 {
            let parent = &m[..m.len() - 1];
            targets.extend(named(text, "super::").into_iter().map(|p| parent.iter().cloned().chain(p).collect()));
        }
        for t in targets {
            // The two siblings the arrow runs between: the children of the
            // deepest module both paths share.
            let d = m.iter().zip(&t).take_while(|(a, b)| a == b).count();
            if d >= m.len() || d >= t.len() {
                continue;
            }
            let (from, to) = (&m[..=d], &t[..=d]);
            if is_module(to) {
                edges.insert((from.join("/"), to.join("/")));
            }
        }
    }
    let circles: BTreeSet<(String, String)> =
        edges.iter().filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone()))).cloned().collect();
    let known: BTreeSet<(String, String)> = KNOWN.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let new: Vec<_> = circles.difference(&known).collect();
    let gone: Vec<_> = known.difference(&circles).collect();
    assert!(new.is_empty(), "modules that name each other (move what sits in the wrong room): {new:?}");
    assert!(gone.is_empty(), "circles listed as known are gone: take them off KNOWN: {gone:?}");
}

/// Every top-level room (each module directly under src/) and its floor.
/// A room names only rooms on floors below its own, so the arrows between
/// rooms run down and no circle can form through them. A room sits one
/// floor above the highest room it names; the ground floor (0) names none.
/// Something a lower room needs from a higher one moves down, or is passed
/// in by the caller above (as the local home is to `kube::kind`).
const FLOORS: &[(&str, u32)] = &[
    // Vocabulary and mechanics that name no other room.
    ("accelerated", 0),
    ("edge", 0),
    ("escape", 0),
    ("outbound", 0),
    ("provenance", 0),
    ("sdk_error", 0),
    ("capacity", 1),
    ("registry", 1),
    // The cluster definition.
    ("spec", 2),
    // Kubernetes mechanics, the state store, the AMI decisions.
    ("ami", 3),
    ("kube", 3),
    ("state", 3),
    ("addons", 4),
    ("cloud", 4),
    ("etcd", 4),
    ("workloads", 4),
    // Clusters other tools run: read (their state store, their AWS
    // resources), mapped to a cluster file, claimed through the cloud's tags.
    ("adopt", 5),
    ("controller", 5),
    ("federation", 5),
    ("plan", 5),
    ("render", 5),
    ("apply", 6),
    ("sim", 6),
    ("diff", 7),
    ("e2e", 8),
    ("rollout", 9),
    ("autoscale", 10),
    ("imaging", 10),
    ("views", 10),
    ("fleet", 11),
    ("output", 11),
    ("delivery", 12),
    ("gateway", 13),
    ("console", 14),
    // The commands, above everything they call.
    ("cli", 15),
];

/// The crate's top-level rooms: each folder and each file directly under
/// src/ (`a.rs` and `a/` are one room), the crate's roots left out.
fn rooms() -> BTreeSet<String> {
    std::fs::read_dir("src")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|r| r != "lib" && r != "main")
        .collect()
}

#[test]
fn every_room_has_a_floor() {
    let placed: BTreeSet<&str> = FLOORS.iter().map(|(r, _)| *r).collect();
    let rooms = rooms();
    let unplaced: Vec<&String> = rooms.iter().filter(|r| !placed.contains(r.as_str())).collect();
    let gone: Vec<&str> = placed.iter().copied().filter(|r| !rooms.contains(*r)).collect();
    assert!(
        unplaced.is_empty(),
        "rooms without a floor: place each in FLOORS (tests/architecture.rs), one floor above the highest room it names: {unplaced:?}"
    );
    assert!(gone.is_empty(), "rooms in FLOORS that are gone: take them off: {gone:?}");
    assert_eq!(placed.len(), FLOORS.len(), "a room is placed twice in FLOORS");
}

#[test]
fn rooms_name_only_rooms_below_them() {
    let floors: BTreeMap<&str, u32> = FLOORS.iter().copied().collect();
    let mut all = Vec::new();
    files(Path::new("src"), &mut all);
    let mut up: BTreeSet<String> = BTreeSet::new();
    for p in &all {
        let m = module_of(p);
        let Some(room) = m.first() else { continue };
        let Some(&from) = floors.get(room.as_str()) else { continue };
        let text = code(&std::fs::read_to_string(p).unwrap());
        for t in named(&text, "crate::") {
            let Some(other) = t.first().filter(|o| *o != room) else { continue };
            let Some(&to) = floors.get(other.as_str()) else { continue };
            if to >= from {
                up.insert(format!("{} ({room}, floor {from}) names {other} (floor {to})", p.display()));
            }
        }
    }
    let up: Vec<String> = up.into_iter().collect();
    assert!(
        up.is_empty(),
        "arrows that do not run down (move what is named down, or have the caller above pass it in):\n{}",
        up.join("\n")
    );
}

/// The longest function a reader is asked to hold.
const MAX_FUNCTION_LINES: usize = 150;

/// Functions longer than that when this check was written, each waiting to
/// be split into named steps: (file, function).
const KNOWN_LONG: &[(&str, &str)] = &[
    // A table of protobuf fields (data written as code), not steps.
    ("src/sim/protobuf/fields.rs", "fields"),
];

/// Each `fn` of the code (tests left out) and its length in lines, from its
/// signature to its closing brace at the same indentation.
fn functions(text: &str) -> Vec<(String, usize)> {
    let body = text.split("#[cfg(test)]").next().unwrap_or_default();
    let lines: Vec<&str> = body.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let sig = [
            "fn ",
            "pub fn ",
            "async fn ",
            "pub async fn ",
            "pub(crate) fn ",
            "pub(super) fn ",
            "pub(crate) async fn ",
            "pub(super) async fn ",
        ]
        .iter()
        .find_map(|p| t.strip_prefix(p));
        let Some(rest) = sig else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        // A declaration without a body (a trait's) ends with ';'.
        let mut j = i;
        while j < lines.len() && !lines[j].trim_end().ends_with('{') && !lines[j].trim_end().ends_with(';') {
            j += 1;
        }
        if j >= lines.len() || lines[j].trim_end().ends_with(';') {
            continue;
        }
        let close = " ".repeat(indent) + "}";
        if let Some(end) = (j + 1..lines.len()).find(|k| lines[*k].trim_end() == close) {
            out.push((name, end - i + 1));
        }
    }
    out
}

#[test]
fn functions_a_reader_can_hold() {
    let mut all = Vec::new();
    files(Path::new("src"), &mut all);
    let mut long: BTreeSet<(String, String)> = BTreeSet::new();
    let mut sizes = Vec::new();
    for p in &all {
        let text = std::fs::read_to_string(p).unwrap();
        for (name, n) in functions(&text) {
            if n > MAX_FUNCTION_LINES {
                let file = p.display().to_string();
                sizes.push(format!("{file} {name}: {n} lines"));
                long.insert((file, name));
            }
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN_LONG.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    let new: Vec<_> = long.difference(&known).collect();
    let gone: Vec<_> = known.difference(&long).collect();
    assert!(
        new.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them into named steps): {new:?}\n{}",
        sizes.join("\n")
    );
    assert!(gone.is_empty(), "listed as long but no longer: take them off KNOWN_LONG: {gone:?}");
}

/// The rooms whose docs say they are pure: decisions and data, no effect.
/// Effects sit at the edges (`cloud::aws`, `state`, `kube`, `imaging`,
/// `fleet`, `cli`, …) and call into these rooms, never the other way.
const PURE: &[&str] = &["ami", "capacity", "escape", "plan", "provenance", "render", "views", "workloads"];

/// What an effect looks like in code: an AWS client, the state store or
/// its lock, a Kubernetes client, the async runtime, a process.
const EFFECTS: &[&str] = &[
    "crate::cloud::aws",
    "aws_sdk_",
    "crate::state::Store",
    "crate::state::lock",
    "crate::imaging",
    "kube::Client",
    "kube::Api",
    "kube::api::Api",
    "tokio::",
    "std::process",
    "reqwest",
];

#[test]
fn no_effect_in_the_pure_rooms() {
    let mut all = Vec::new();
    files(Path::new("src"), &mut all);
    let mut found = Vec::new();
    for p in &all {
        let m = module_of(p);
        if !m.first().is_some_and(|r| PURE.contains(&r.as_str())) {
            continue;
        }
        let text = code(&std::fs::read_to_string(p).unwrap());
        for e in EFFECTS {
            if text.contains(e) {
                found.push(format!("{}: {e}", p.display()));
            }
        }
    }
    assert!(found.is_empty(), "a pure room does something (move it to an edge): {found:?}");
}
