//! `extends`: deep merge of a cluster file over its base.
//!
//! Runs on located trees, before the structural check, so every node keeps
//! the file and line it came from (a value inherited from a base is reported
//! in the base). Rules, in the spirit of strategic merge patch:
//! - mappings merge key by key; the child wins on scalars;
//! - lists whose items all have a `name` merge by name (base order first,
//!   new items appended); other lists are replaced whole;
//! - `$patch: delete` in a mapping value or a named list item removes the
//!   inherited item; `$patch: replace` takes the child's value as is.

use super::yaml::{Entry, Node, Value};
use super::Diagnostic;

const PATCH: &str = "$patch";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Directive {
    None,
    Delete,
    Replace,
}

fn directive(node: &Node, path: &str, errors: &mut Vec<Diagnostic>) -> Directive {
    let Some(e) = node.entry(PATCH) else { return Directive::None };
    match e.value.as_str() {
        Some("delete") => Directive::Delete,
        Some("replace") => Directive::Replace,
        _ => {
            errors.push(Diagnostic {
                loc: e.key_loc.clone(),
                path: format!("{path}.{PATCH}"),
                message: format!("unknown directive {}, expected `delete` or `replace`", describe(&e.value)),
            });
            Directive::None
        }
    }
}

fn describe(n: &Node) -> String {
    n.as_str().map(|s| format!("`{s}`")).unwrap_or_else(|| n.kind_name().to_string())
}

/// Removes `$patch` keys everywhere below `node`.
fn strip(node: Node) -> Node {
    let value = match node.value {
        Value::Map(entries) => Value::Map(
            entries.into_iter().filter(|e| e.key != PATCH).map(|e| Entry { value: strip(e.value), ..e }).collect(),
        ),
        Value::Seq(items) => Value::Seq(items.into_iter().map(strip).collect()),
        scalar => scalar,
    };
    Node { value, loc: node.loc }
}

fn name_of(node: &Node) -> Option<&str> {
    node.get("name")?.as_str()
}

fn all_named(items: &[Node]) -> bool {
    !items.is_empty() && items.iter().all(|i| name_of(i).is_some())
}

/// Merges `child` over `base`. Problems (a delete naming nothing, a bad
/// directive) are pushed to `errors`.
pub fn merge(base: Node, child: Node, path: &str, errors: &mut Vec<Diagnostic>) -> Node {
    match (base.value, child.value) {
        (Value::Map(base_entries), Value::Map(child_entries)) => {
            let mut result = base_entries;
            for ce in child_entries {
                if ce.key == PATCH {
                    continue;
                }
                let child_path = if path.is_empty() { ce.key.clone() } else { format!("{path}.{}", ce.key) };
                let pos = result.iter().position(|e| e.key == ce.key);
                match (directive(&ce.value, &child_path, errors), pos) {
                    (Directive::Delete, Some(i)) => {
                        result.remove(i);
                    }
                    (Directive::Delete, None) => errors.push(Diagnostic {
                        loc: ce.key_loc.clone(),
                        path: child_path,
                        message: "`$patch: delete` removes nothing: the base has no such field".into(),
                    }),
                    (Directive::Replace, Some(i)) => result[i] = Entry { value: strip(ce.value), ..ce },
                    (_, Some(i)) => {
                        let be = result.remove(i);
                        let merged = merge(be.value, ce.value, &child_path, errors);
                        result.insert(i, Entry { key: ce.key, key_loc: ce.key_loc, value: merged });
                    }
                    (_, None) => result.push(Entry { value: strip(ce.value), ..ce }),
                }
            }
            Node { value: Value::Map(result), loc: child.loc }
        }
        (Value::Seq(base_items), Value::Seq(child_items)) if all_named(&base_items) && all_named(&child_items) => {
            let mut result = base_items;
            for (i, item) in child_items.into_iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                let name = name_of(&item).unwrap_or_default().to_string();
                let pos = result.iter().position(|b| name_of(b) == Some(name.as_str()));
                match (directive(&item, &item_path, errors), pos) {
                    (Directive::Delete, Some(p)) => {
                        result.remove(p);
                    }
                    (Directive::Delete, None) => errors.push(Diagnostic {
                        loc: item.loc.clone(),
                        path: item_path,
                        message: format!("`$patch: delete` removes nothing: the base has no item named `{name}`"),
                    }),
                    (Directive::Replace, Some(p)) => result[p] = strip(item),
                    (_, Some(p)) => {
                        let b = result.remove(p);
                        result.insert(p, merge(b, item, &item_path, errors));
                    }
                    (_, None) => result.push(strip(item)),
                }
            }
            Node { value: Value::Seq(result), loc: child.loc }
        }
        (_, value) => strip(Node { value, loc: child.loc }),
    }
}

/// In a file that extends nothing, a `$patch` has nothing to act on.
pub fn report_stray_directives(node: &Node, path: &str, errors: &mut Vec<Diagnostic>) {
    match &node.value {
        Value::Map(entries) => {
            for e in entries {
                let p = if path.is_empty() { e.key.clone() } else { format!("{path}.{}", e.key) };
                if e.key == PATCH {
                    errors.push(Diagnostic {
                        loc: e.key_loc.clone(),
                        path: p,
                        message: "`$patch` only applies in a file that extends a base".into(),
                    });
                } else {
                    report_stray_directives(&e.value, &p, errors);
                }
            }
        }
        Value::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                report_stray_directives(item, &format!("{path}[{i}]"), errors);
            }
        }
        Value::Scalar(..) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::yaml::parse_single;
    use std::path::Path;

    fn merged(base: &str, child: &str) -> (serde_json::Value, Vec<String>) {
        let b = parse_single(base, Path::new("base.yaml")).unwrap();
        let c = parse_single(child, Path::new("child.yaml")).unwrap();
        let mut errors = Vec::new();
        let m = merge(b, c, "", &mut errors);
        (m.to_json(), errors.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn maps_merge_deeply_and_scalars_override() {
        let (m, e) = merged("a: {x: 1, y: 2}\nb: 1\n", "a: {y: 3, z: 4}\n");
        assert_eq!(m, serde_json::json!({"a": {"x": 1, "y": 3, "z": 4}, "b": 1}));
        assert!(e.is_empty());
    }

    #[test]
    fn named_lists_merge_by_name_and_delete() {
        let base = "gs:\n- {name: a, n: 1}\n- {name: b, n: 2}\n- {name: c, n: 3}\n";
        let child = "gs:\n- {name: b, n: 20}\n- {name: a, $patch: delete}\n- {name: d, n: 4}\n";
        let (m, e) = merged(base, child);
        assert_eq!(
            m,
            serde_json::json!({"gs": [{"name": "b", "n": 20}, {"name": "c", "n": 3}, {"name": "d", "n": 4}]})
        );
        assert!(e.is_empty());
    }

    #[test]
    fn plain_lists_are_replaced_and_replace_directive_works() {
        let (m, _) = merged("z: [a, b]\nm: {x: 1, y: 2}\n", "z: [c]\nm: {$patch: replace, y: 5}\n");
        assert_eq!(m, serde_json::json!({"z": ["c"], "m": {"y": 5}}));
    }

    #[test]
    fn deleting_what_is_not_there_is_reported() {
        let (_, e) = merged("gs:\n- {name: a}\n", "gs:\n- {name: q, $patch: delete}\nk: {$patch: delete}\n");
        assert_eq!(
            e,
            vec![
                "child.yaml:2:3: gs[0]: `$patch: delete` removes nothing: the base has no item named `q`",
                "child.yaml:3:1: k: `$patch: delete` removes nothing: the base has no such field",
            ]
        );
    }
}
