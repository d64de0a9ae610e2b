//! YAML documents as a tree of located nodes.
//!
//! First step of the spec data flow: text → [`Node`] (every node knows the
//! file, line and column it came from). `extends` merging, structural checks
//! and deserialization all work on this tree, so any message about any field
//! can point at the place a person would edit. Built on saphyr-parser's event
//! stream; scalars keep their source text, and typing is decided later by the
//! schema that reads them (as serde_yaml did for `String` fields, so
//! `kubernetesVersion: 1.30` stays "1.30").

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScalarStyle, Span};

/// Where a node starts: file, 1-based line and 1-based column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loc {
    pub file: Arc<PathBuf>,
    pub line: usize,
    pub col: usize,
}

impl Loc {
    pub fn new(file: Arc<PathBuf>, line: usize, col: usize) -> Self {
        Loc { file, line, col }
    }
    fn from_span(file: &Arc<PathBuf>, span: &Span) -> Self {
        Loc::new(file.clone(), span.start.line(), span.start.col() + 1)
    }
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.col)
    }
}

/// How a scalar was written; plain scalars may be read as numbers, booleans
/// or null, quoted and block scalars are always strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    Plain,
    Quoted,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(String, Style),
    Seq(Vec<Node>),
    Map(Vec<Entry>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_loc: Loc,
    pub value: Node,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub loc: Loc,
}

/// A YAML syntax error, located.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{loc}: {message}")]
pub struct SyntaxError {
    pub loc: Loc,
    pub message: String,
}

/// Aliases may not expand a document past this many nodes ("billion laughs").
const MAX_EXPANDED_NODES: usize = 200_000;
/// Nesting deeper than this is refused rather than risking the stack.
const MAX_DEPTH: usize = 128;

impl Node {
    pub fn is_null(&self) -> bool {
        matches!(&self.value, Value::Scalar(s, Style::Plain) if is_null_text(s))
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Scalar(s, _) => Some(s),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?.iter().find(|e| e.key == key).map(|e| &e.value)
    }

    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|e| e.key == key)
    }

    /// Short description of the node's kind, for messages.
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            Value::Map(_) => "a mapping",
            Value::Seq(_) => "a list",
            Value::Scalar(_, _) if self.is_null() => "null",
            Value::Scalar(_, _) => "a scalar",
        }
    }

    /// Finds the place to point at for a field path such as
    /// `spec.instanceGroups[2].minSize`: the key of the deepest entry that
    /// exists (or the list item), so a message about a missing field points
    /// at its parent.
    pub fn locate(&self, path: &str) -> Loc {
        let mut node = self;
        let mut loc = self.loc.clone();
        for seg in parse_path(path) {
            match seg {
                PathSeg::Key(k) => match node.entry(&k) {
                    Some(e) => {
                        loc = e.key_loc.clone();
                        node = &e.value;
                    }
                    None => break,
                },
                PathSeg::Index(i) => match &node.value {
                    Value::Seq(items) if i < items.len() => {
                        node = &items[i];
                        loc = node.loc.clone();
                    }
                    _ => break,
                },
            }
        }
        loc
    }

    /// Converts to JSON, resolving plain scalars by the YAML 1.2 core schema.
    /// Used for free-form fields (addon values) and manifests.
    pub fn to_json(&self) -> serde_json::Value {
        match &self.value {
            Value::Scalar(s, Style::Quoted) => serde_json::Value::String(s.clone()),
            Value::Scalar(s, Style::Plain) => resolve_plain(s),
            Value::Seq(items) => serde_json::Value::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => {
                serde_json::Value::Object(entries.iter().map(|e| (e.key.clone(), e.value.to_json())).collect())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSeg {
    Key(String),
    Index(usize),
}

/// Splits `a.b[3].c` into segments.
pub fn parse_path(path: &str) -> Vec<PathSeg> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            if i > 0 {
                out.push(PathSeg::Key(rest[..i].to_string()));
            }
            rest = &rest[i..];
            while let Some(stripped) = rest.strip_prefix('[') {
                let end = stripped.find(']').unwrap_or(stripped.len());
                if let Ok(n) = stripped[..end].parse() {
                    out.push(PathSeg::Index(n));
                }
                rest = stripped.get(end + 1..).unwrap_or("");
            }
        } else {
            out.push(PathSeg::Key(rest.to_string()));
        }
    }
    out
}

pub fn is_null_text(s: &str) -> bool {
    matches!(s, "" | "~" | "null" | "Null" | "NULL")
}

pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "true" | "True" | "TRUE" => Some(true),
        "false" | "False" | "FALSE" => Some(false),
        _ => None,
    }
}

pub fn parse_int(s: &str) -> Option<i64> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if let Some(hex) = s.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    if let Some(oct) = s.strip_prefix("0o") {
        return i64::from_str_radix(oct, 8).ok();
    }
    if s.is_empty() || !s.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

pub fn parse_float(s: &str) -> Option<f64> {
    match s {
        ".inf" | ".Inf" | ".INF" | "+.inf" => return Some(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => return Some(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => {}
    }
    let looks_numeric = s.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'))
        && s.bytes().any(|b| b.is_ascii_digit());
    if looks_numeric {
        s.parse().ok()
    } else {
        None
    }
}

fn resolve_plain(s: &str) -> serde_json::Value {
    if is_null_text(s) {
        serde_json::Value::Null
    } else if let Some(b) = parse_bool(s) {
        serde_json::Value::Bool(b)
    } else if let Some(i) = parse_int(s) {
        serde_json::Value::from(i)
    } else if let Some(f) = parse_float(s).and_then(serde_json::Number::from_f64) {
        serde_json::Value::Number(f)
    } else {
        serde_json::Value::String(s.to_string())
    }
}

/// Parses every document in `src`. `file` is only used for locations.
pub fn parse_documents(src: &str, file: &Path) -> Result<Vec<Node>, SyntaxError> {
    let file = Arc::new(file.to_path_buf());
    let mut builder =
        Builder { file: file.clone(), stack: Vec::new(), docs: Vec::new(), anchors: HashMap::new(), expanded: 0 };
    for event in Parser::new_from_str(src) {
        let (event, span) = event.map_err(|e| SyntaxError {
            loc: Loc::new(file.clone(), e.marker().line(), e.marker().col() + 1),
            message: format!("invalid YAML: {}", e.info()),
        })?;
        builder.on_event(event, span)?;
    }
    Ok(builder.docs)
}

/// Parses a file holding exactly one document (an empty file is an error).
pub fn parse_single(src: &str, file: &Path) -> Result<Node, SyntaxError> {
    let mut docs = parse_documents(src, file)?;
    let loc = |line| Loc::new(Arc::new(file.to_path_buf()), line, 1);
    match docs.len() {
        1 => Ok(docs.remove(0)),
        0 => Err(SyntaxError { loc: loc(1), message: "the file holds no YAML document".into() }),
        _ => Err(SyntaxError {
            loc: docs[1].loc.clone(),
            message: "expected one YAML document, found a second one".into(),
        }),
    }
}

enum Frame {
    Seq { anchor: usize, loc: Loc, items: Vec<Node> },
    Map { anchor: usize, loc: Loc, entries: Vec<Entry>, pending_key: Option<(String, Loc)> },
}

struct Builder {
    file: Arc<PathBuf>,
    stack: Vec<Frame>,
    docs: Vec<Node>,
    anchors: HashMap<usize, Node>,
    expanded: usize,
}

fn count_nodes(n: &Node) -> usize {
    match &n.value {
        Value::Scalar(..) => 1,
        Value::Seq(items) => 1 + items.iter().map(count_nodes).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|e| count_nodes(&e.value)).sum::<usize>(),
    }
}

impl Builder {
    fn err(&self, loc: Loc, message: impl Into<String>) -> SyntaxError {
        let _ = &self.file;
        SyntaxError { loc, message: message.into() }
    }

    fn on_event(&mut self, event: Event<'_>, span: Span) -> Result<(), SyntaxError> {
        let loc = Loc::from_span(&self.file, &span);
        match event {
            Event::Scalar(text, style, anchor, _tag) => {
                let style = match style {
                    ScalarStyle::Plain => Style::Plain,
                    _ => Style::Quoted,
                };
                let node = Node { value: Value::Scalar(text.into_owned(), style), loc };
                self.finish(node, anchor)?;
            }
            Event::SequenceStart(anchor, _) => {
                self.check_depth(&loc)?;
                self.stack.push(Frame::Seq { anchor, loc, items: Vec::new() });
            }
            Event::MappingStart(anchor, _) => {
                self.check_depth(&loc)?;
                self.stack.push(Frame::Map { anchor, loc, entries: Vec::new(), pending_key: None });
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let (node, anchor) = match self.stack.pop() {
                    Some(Frame::Seq { anchor, loc, items }) => (Node { value: Value::Seq(items), loc }, anchor),
                    Some(Frame::Map { anchor, loc, entries, .. }) => (Node { value: Value::Map(entries), loc }, anchor),
                    None => return Err(self.err(loc, "unbalanced collection end")),
                };
                self.finish(node, anchor)?;
            }
            Event::Alias(id) => {
                let Some(target) = self.anchors.get(&id).cloned() else {
                    return Err(self.err(loc, "alias refers to an unknown anchor"));
                };
                self.expanded += count_nodes(&target);
                if self.expanded > MAX_EXPANDED_NODES {
                    return Err(self.err(loc, "aliases expand to too many nodes"));
                }
                self.finish(target, 0)?;
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentStart(_) | Event::DocumentEnd | Event::Nothing => {}
        }
        Ok(())
    }

    fn check_depth(&self, loc: &Loc) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(self.err(loc.clone(), format!("nesting deeper than {MAX_DEPTH} levels")));
        }
        Ok(())
    }

    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), SyntaxError> {
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        match self.stack.last_mut() {
            None => self.docs.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, pending_key, .. }) => match pending_key.take() {
                None => {
                    let key = match &node.value {
                        Value::Scalar(s, _) => s.clone(),
                        _ => return Err(SyntaxError { loc: node.loc, message: "mapping keys must be scalars".into() }),
                    };
                    if entries.iter().any(|e| e.key == key) {
                        return Err(SyntaxError { loc: node.loc, message: format!("duplicate key `{key}`") });
                    }
                    *pending_key = Some((key, node.loc));
                }
                Some((key, key_loc)) => entries.push(Entry { key, key_loc, value: node }),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Node {
        parse_single(src, Path::new("t.yaml")).unwrap()
    }

    #[test]
    fn locates_keys_and_items() {
        let n = parse("a:\n  b:\n    - x: 1\n      y: 2\n");
        assert_eq!(n.locate("a.b[0].y").to_string(), "t.yaml:4:7");
        assert_eq!(n.locate("a.b[0]").to_string(), "t.yaml:3:7");
        assert_eq!(n.locate("a.missing.z").to_string(), "t.yaml:1:1");
        assert_eq!(n.locate("a.b[5]").to_string(), "t.yaml:2:3");
    }

    #[test]
    fn plain_and_quoted_scalars() {
        let n = parse("v: 1.30\nq: '7'\nb: true\nz: ~\n");
        assert_eq!(n.get("v").unwrap().as_str(), Some("1.30"));
        assert_eq!(n.to_json(), serde_json::json!({"v": 1.3, "q": "7", "b": true, "z": null}));
    }

    #[test]
    fn duplicate_keys_and_aliases() {
        let e = parse_single("a: 1\na: 2\n", Path::new("t.yaml")).unwrap_err();
        assert_eq!(e.to_string(), "t.yaml:2:1: duplicate key `a`");
        let n = parse("x: &v {k: 1}\ny: *v\n");
        assert_eq!(n.get("y").unwrap().to_json(), serde_json::json!({"k": 1}));
    }

    #[test]
    fn alias_bombs_are_refused() {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            src.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        let e = parse_single(&src, Path::new("t.yaml")).unwrap_err();
        assert!(e.message.contains("too many nodes"), "{e}");
    }

    #[test]
    fn paths_parse() {
        assert_eq!(
            parse_path("spec.instanceGroups[2].minSize"),
            vec![
                PathSeg::Key("spec".into()),
                PathSeg::Key("instanceGroups".into()),
                PathSeg::Index(2),
                PathSeg::Key("minSize".into())
            ]
        );
    }
}
