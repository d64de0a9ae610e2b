//! Structural check of a located YAML tree against the JSON Schema derived
//! from the spec types.
//!
//! Sits between merge and deserialization: it walks schema and tree
//! together, reports *every* structural problem (unknown fields with a
//! "did you mean", wrong types, missing fields, bad enum values, malformed
//! CIDRs/durations/percentages) at its file, line and column, and produces
//! JSON typed by the schema, which serde then reads without surprises.
//! It implements the subset of JSON Schema that schemars emits for our types.

use serde_json::{Map, Value as Json};

use super::yaml::{parse_bool, parse_float, parse_int, Loc, Node, Style, Value};
use super::Diagnostic;

pub struct Checker<'s> {
    root: &'s Json,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Null,
    Scalar,
    Map,
    Seq,
}

fn kind_of(node: &Node) -> Kind {
    match &node.value {
        _ if node.is_null() => Kind::Null,
        Value::Scalar(..) => Kind::Scalar,
        Value::Map(_) => Kind::Map,
        Value::Seq(_) => Kind::Seq,
    }
}

fn type_names(schema: &Json) -> Vec<&str> {
    match schema.get("type") {
        Some(Json::String(s)) => vec![s.as_str()],
        Some(Json::Array(a)) => a.iter().filter_map(Json::as_str).collect(),
        _ => Vec::new(),
    }
}

fn describe_type(t: &str) -> &str {
    match t {
        "string" => "a string",
        "integer" => "a whole number",
        "number" => "a number",
        "boolean" => "true or false",
        "object" => "a mapping",
        "array" => "a list",
        "null" => "null",
        other => other,
    }
}

fn found(node: &Node) -> String {
    match &node.value {
        Value::Scalar(s, _) if !node.is_null() => format!("`{s}`"),
        _ => node.kind_name().to_string(),
    }
}

/// Closest candidate by edit distance, if it is close enough to be a typo.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&word.to_lowercase(), &c.to_lowercase()), c))
        .filter(|(d, c)| *d <= (c.len().max(word.len()) / 3).max(1))
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl<'s> Checker<'s> {
    pub fn new(root: &'s Json) -> Self {
        Checker { root }
    }

    /// Checks `node` against the root schema; returns typed JSON when there
    /// were no errors.
    pub fn check_root(&self, node: &Node) -> Result<Json, Vec<Diagnostic>> {
        let mut out = Vec::new();
        let json = self.check(self.root, node, "", &node.loc, &mut out);
        if out.is_empty() {
            Ok(json)
        } else {
            Err(out)
        }
    }

    fn resolve<'a>(&'a self, schema: &'a Json) -> &'a Json {
        let mut s = schema;
        for _ in 0..32 {
            match s.get("$ref").and_then(Json::as_str) {
                Some(r) => {
                    let name = r.rsplit('/').next().unwrap_or_default();
                    match self.root.get("$defs").and_then(|d| d.get(name)) {
                        Some(target) => s = target,
                        None => return &Json::Bool(true),
                    }
                }
                None => return s,
            }
        }
        s
    }

    /// Which node kinds a (resolved) schema accepts, for choosing anyOf branches.
    fn accepts(&self, schema: &Json, kind: Kind) -> bool {
        let schema = self.resolve(schema);
        if schema.get("x-pinfleet-format").is_some() {
            return kind == Kind::Scalar;
        }
        if let Some(branches) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Json::as_array) {
            return branches.iter().any(|b| self.accepts(b, kind));
        }
        if schema.get("enum").is_some() || schema.get("const").is_some() {
            return kind == Kind::Scalar;
        }
        let types = type_names(schema);
        if types.is_empty() {
            return true;
        }
        types.iter().any(|t| match (*t, kind) {
            ("null", Kind::Null) => true,
            ("object", Kind::Map) => true,
            ("array", Kind::Seq) => true,
            ("string" | "integer" | "number" | "boolean", Kind::Scalar) => true,
            _ => false,
        })
    }

    fn check(&self, schema: &Json, node: &Node, path: &str, loc: &Loc, out: &mut Vec<Diagnostic>) -> Json {
        let schema = self.resolve(schema);
        let err = |out: &mut Vec<Diagnostic>, message: String| {
            out.push(Diagnostic { loc: loc.clone(), path: path.to_string(), message });
        };
        if schema == &Json::Bool(true) || schema.as_object().is_some_and(|o| o.is_empty()) {
            return node.to_json();
        }
        let kind = kind_of(node);

        if let Some(format) = schema.get("x-pinfleet-format").and_then(Json::as_str) {
            let Value::Scalar(text, _) = &node.value else {
                err(out, format!("expected a string, found {}", node.kind_name()));
                return Json::Null;
            };
            if kind == Kind::Null {
                err(out, "expected a value, found null".into());
                return Json::Null;
            }
            let checked = match format {
                "cidr" => text.parse::<super::Cidr>().map(|_| Json::String(text.clone())),
                "duration" => text.parse::<super::DurationSpec>().map(|_| Json::String(text.clone())),
                "int-or-percent" => text.parse::<super::IntOrPercent>().map(|v| match v {
                    super::IntOrPercent::Int(n) => Json::from(n),
                    super::IntOrPercent::Percent(_) => Json::String(text.clone()),
                }),
                _ => Ok(Json::String(text.clone())),
            };
            return checked.unwrap_or_else(|m| {
                err(out, m);
                Json::Null
            });
        }

        if let Some(branches) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Json::as_array) {
            let candidates: Vec<&Json> = branches.iter().filter(|b| self.accepts(b, kind)).collect();
            match candidates.as_slice() {
                [] => {
                    let expected: Vec<&str> =
                        branches.iter().flat_map(|b| type_names(self.resolve(b))).map(describe_type).collect();
                    err(out, format!("expected {}, found {}", expected.join(" or "), found(node)));
                    return Json::Null;
                }
                [only] => return self.check(only, node, path, loc, out),
                many => {
                    let mut first_errors = None;
                    for b in many {
                        let mut scratch = Vec::new();
                        let v = self.check(b, node, path, loc, &mut scratch);
                        if scratch.is_empty() {
                            return v;
                        }
                        first_errors.get_or_insert(scratch);
                    }
                    out.extend(first_errors.unwrap_or_default());
                    return Json::Null;
                }
            }
        }

        if let Some(allowed) = schema.get("enum").and_then(Json::as_array) {
            return self.check_enum(allowed, node, path, loc, out);
        }
        if let Some(c) = schema.get("const") {
            return self.check_enum(std::slice::from_ref(c), node, path, loc, out);
        }

        let types = type_names(schema);
        match (&node.value, kind) {
            (_, Kind::Null) if types.contains(&"null") => Json::Null,
            (Value::Map(entries), Kind::Map) if types.is_empty() || types.contains(&"object") => {
                self.check_object(schema, node, entries, path, loc, out)
            }
            (Value::Seq(items), Kind::Seq) if types.is_empty() || types.contains(&"array") => {
                let item_schema = schema.get("items").unwrap_or(&Json::Bool(true));
                Json::Array(
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, item)| self.check(item_schema, item, &format!("{path}[{i}]"), &item.loc, out))
                        .collect(),
                )
            }
            (Value::Scalar(text, style), Kind::Scalar) => {
                if let Some(v) = scalar_as(&types, text, *style) {
                    if let Some(m) = bounds_error(schema, &v) {
                        err(out, m);
                    }
                    return v;
                }
                let expected: Vec<&str> = types.iter().copied().map(describe_type).collect();
                err(out, format!("expected {}, found {}", expected.join(" or "), found(node)));
                Json::Null
            }
            _ => {
                let expected: Vec<&str> = types.iter().copied().map(describe_type).collect();
                err(out, format!("expected {}, found {}", expected.join(" or "), found(node)));
                Json::Null
            }
        }
    }

    fn check_enum(&self, allowed: &[Json], node: &Node, path: &str, loc: &Loc, out: &mut Vec<Diagnostic>) -> Json {
        let names: Vec<String> =
            allowed.iter().map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string())).collect();
        if let Value::Scalar(text, _) = &node.value {
            if let Some(i) = names.iter().position(|n| n == text) {
                return allowed[i].clone();
            }
        }
        let suggestion =
            node.as_str().filter(|_| names.len() > 1).and_then(|t| did_you_mean(t, names.iter().map(String::as_str)));
        let hint = match suggestion {
            Some(s) => format!(" (did you mean `{s}`?)"),
            None => String::new(),
        };
        out.push(Diagnostic {
            loc: loc.clone(),
            path: path.to_string(),
            message: format!("unknown value {}, expected one of: {}{hint}", found(node), names.join(", ")),
        });
        Json::Null
    }

    fn check_object(
        &self,
        schema: &Json,
        node: &Node,
        entries: &[super::yaml::Entry],
        path: &str,
        loc: &Loc,
        out: &mut Vec<Diagnostic>,
    ) -> Json {
        let empty = Map::new();
        let props = schema.get("properties").and_then(Json::as_object).unwrap_or(&empty);
        let additional = schema.get("additionalProperties");
        let mut result = Map::new();
        for e in entries {
            let child_path = join(path, &e.key);
            let child_schema = match (props.get(&e.key), additional) {
                (Some(s), _) => s,
                (None, Some(Json::Bool(false))) => {
                    let hint = match did_you_mean(&e.key, props.keys().map(String::as_str)) {
                        Some(s) => format!(" (did you mean `{s}`?)"),
                        None => format!(" (known fields: {})", props.keys().cloned().collect::<Vec<_>>().join(", ")),
                    };
                    out.push(Diagnostic {
                        loc: e.key_loc.clone(),
                        path: child_path,
                        message: format!("unknown field `{}`{hint}", e.key),
                    });
                    continue;
                }
                (None, Some(s)) => s,
                (None, None) => &Json::Bool(true),
            };
            let v = self.check(child_schema, &e.value, &child_path, &e.key_loc, out);
            result.insert(e.key.clone(), v);
        }
        if let Some(required) = schema.get("required").and_then(Json::as_array) {
            for r in required.iter().filter_map(Json::as_str) {
                if node.get(r).is_none() {
                    out.push(Diagnostic {
                        loc: loc.clone(),
                        path: join(path, r),
                        message: "required field is missing".into(),
                    });
                }
            }
        }
        Json::Object(result)
    }
}

/// Reads a scalar as the first of the schema's types it can be.
fn scalar_as(types: &[&str], text: &str, style: Style) -> Option<Json> {
    let plain = style == Style::Plain;
    for t in types {
        let v = match *t {
            "integer" if plain => parse_int(text).map(Json::from),
            "number" if plain => parse_float(text).and_then(serde_json::Number::from_f64).map(Json::Number),
            "boolean" if plain => parse_bool(text).map(Json::Bool),
            _ => None,
        };
        if v.is_some() {
            return v;
        }
    }
    if types.contains(&"string") || types.is_empty() {
        return Some(Json::String(text.to_string()));
    }
    None
}

fn bounds_error(schema: &Json, v: &Json) -> Option<String> {
    let n = v.as_f64()?;
    let (fmt_min, fmt_max) = match schema.get("format").and_then(Json::as_str) {
        Some("uint8") => (Some(0.0), Some(u8::MAX as f64)),
        Some("uint16") => (Some(0.0), Some(u16::MAX as f64)),
        Some("uint32") => (Some(0.0), Some(u32::MAX as f64)),
        Some("uint64" | "uint") => (Some(0.0), None),
        Some("int32") => (Some(i32::MIN as f64), Some(i32::MAX as f64)),
        _ => (None, None),
    };
    let min = schema.get("minimum").and_then(Json::as_f64).or(fmt_min);
    let max = schema.get("maximum").and_then(Json::as_f64).or(fmt_max);
    if let Some(min) = min.filter(|m| n < *m) {
        return Some(format!("{v} is less than the minimum {min}"));
    }
    if let Some(max) = max.filter(|m| n > *m) {
        return Some(format!("{v} is more than the maximum {max}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_only_for_near_misses() {
        assert_eq!(did_you_mean("minSzie", ["minSize", "maxSize", "name"]), Some("minSize"));
        assert_eq!(did_you_mean("colour", ["name", "role"]), None);
    }
}
