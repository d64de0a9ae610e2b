//! Custom resources checked against their CRD's structural schema, as the
//! API server does on every write: defaults applied, unknown fields pruned
//! (unless `x-kubernetes-preserve-unknown-fields`), and every violation
//! reported in one 422 with the real message format, e.g.
//! `spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string"`.
//! CEL rules (`x-kubernetes-validations`) are evaluated after the structural
//! checks ([`validate_cel`]), compiled once per CRD ([`CrdSchema`]).
//!
//! A library room both the sim (on every write) and the gateway (on every
//! submission) use: no production path enters the emulator.

use serde_json::{Map, Value};

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// Applies schema defaults, prunes unknown fields and collects violations.
pub fn check(schema: &Value, v: &mut Value, path: &str, errors: &mut Vec<String>) {
    check_at(schema, v, path, errors, false)
}

/// A schema's `pattern`, compiled once per thread rather than at every
/// value it checks (a CRD's patterns are few; its writes are many).
fn pattern_matches(p: &str, s: &str) -> Option<bool> {
    thread_local! {
        static COMPILED: std::cell::RefCell<std::collections::HashMap<String, Option<regex_lite::Regex>>> =
            Default::default();
    }
    COMPILED.with(|c| {
        let mut c = c.borrow_mut();
        if !c.contains_key(p) {
            if c.len() > 4096 {
                c.clear();
            }
            c.insert(p.to_string(), regex_lite::Regex::new(p).ok());
        }
        c.get(p).and_then(|re| re.as_ref().map(|re| re.is_match(s)))
    })
}

/// The fields of a custom resource the server owns: the schema's entries
/// for them are neither defaulted, required nor walked.
fn server_owned(k: &str) -> bool {
    matches!(k, "metadata" | "apiVersion" | "kind")
}

/// [`check`]; at the root of a custom resource (`root`), the server-owned
/// fields' schema entries are passed over, as if removed from the schema
/// (which is not copied for it).
fn check_at(schema: &Value, v: &mut Value, path: &str, errors: &mut Vec<String>, root: bool) {
    let preserve = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let nullable = schema.get("nullable").and_then(Value::as_bool) == Some(true);
    if v.is_null() && nullable {
        return;
    }
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        if !(v.is_i64() || v.is_u64() || v.is_string()) {
            errors.push(format!(
                "{path}: Invalid value: {}: {path} in body must be of type integer or string: {:?}",
                shown(v),
                type_name(v)
            ));
        }
        return;
    }
    if let Some(want) = schema.get("type").and_then(Value::as_str) {
        let have = type_name(v);
        let ok = have == want || (want == "number" && have == "integer");
        if !ok {
            errors
                .push(format!("{path}: Invalid value: {:?}: {path} in body must be of type {want}: {:?}", have, have));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(v) {
            let list: Vec<String> = allowed.iter().map(shown).collect();
            errors.push(format!("{path}: Unsupported value: {}: supported values: {}", shown(v), list.join(", ")));
        }
    }
    match v {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            if let Some(props) = props {
                for (k, sub) in props.iter().filter(|(k, _)| !(root && server_owned(k))) {
                    if !obj.contains_key(k) {
                        if let Some(d) = sub.get("default") {
                            obj.insert(k.clone(), d.clone());
                        }
                    }
                }
            }
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for r in required.iter().filter_map(Value::as_str).filter(|r| !(root && server_owned(r))) {
                    if !obj.contains_key(r) {
                        errors.push(format!("{}: Required value", join(path, r)));
                    }
                }
            }
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = obj.keys().cloned().collect();
            for k in keys {
                let child = join(path, &k);
                match (props.and_then(|p| p.get(&k)).filter(|_| !(root && server_owned(&k))), additional) {
                    (Some(sub), _) => check(sub, obj.get_mut(&k).expect("key"), &child, errors),
                    (None, Some(sub)) if sub.is_object() => check(sub, obj.get_mut(&k).expect("key"), &child, errors),
                    (None, Some(Value::Bool(true))) => {}
                    (None, _) if preserve || props.is_none() && schema.get("type").is_none() => {}
                    (None, _) => {
                        // Pruned, as a structural schema prunes unknown fields.
                        obj.remove(&k);
                    }
                }
            }
            let n = obj.len();
            if let Some(min) = schema.get("minProperties").and_then(Value::as_u64) {
                if (n as u64) < min {
                    errors.push(format!(
                        "{path}: Invalid value: {n}: {path} in body should have at least {min} properties"
                    ));
                }
            }
        }
        Value::Array(items) => {
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check(sub, item, &format!("{path}[{i}]"), errors);
                }
            }
            let n = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64).filter(|m| n < *m) {
                errors.push(format!("{path}: Invalid value: {n}: {path} in body should have at least {min} items"));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64).filter(|m| n > *m) {
                errors.push(format!("{path}: Too many: {n}: must have at most {max} items"));
            }
        }
        Value::String(s) => {
            let n = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64).filter(|m| n < *m) {
                errors
                    .push(format!("{path}: Invalid value: {s:?}: {path} in body should be at least {min} chars long"));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64).filter(|m| n > *m) {
                errors.push(format!("{path}: Too long: may not be more than {max} bytes"));
            }
            if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
                if pattern_matches(p, s) == Some(false) {
                    errors.push(format!("{path}: Invalid value: {s:?}: {path} in body should match '{p}'"));
                }
            }
        }
        Value::Number(num) => {
            let x = num.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64).filter(|m| x < *m) {
                errors.push(format!(
                    "{path}: Invalid value: {num}: {path} in body should be greater than or equal to {min}"
                ));
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64).filter(|m| x > *m) {
                errors.push(format!(
                    "{path}: Invalid value: {num}: {path} in body should be less than or equal to {max}"
                ));
            }
        }
        _ => {}
    }
}

/// Checks a whole custom resource (metadata, apiVersion and kind are the
/// server's); returns the defaulted, pruned object or the messages.
pub fn validate(schema: &Value, obj: &Value) -> Result<Value, Vec<String>> {
    validate_owned(schema, obj.clone())
}

/// [`validate`] of an object the caller gives up (the store's writes): no
/// copy of it, nor of the schema, is made.
pub fn validate_owned(schema: &Value, obj: Value) -> Result<Value, Vec<String>> {
    // The body checked is the object without the server's fields (nothing,
    // for a value that is not an object: that is answered as it came).
    let (mut out, mut body) = (Map::new(), Map::new());
    let not_an_object = match obj {
        Value::Object(whole) => {
            for (k, v) in whole {
                if server_owned(&k) {
                    out.insert(k, v);
                } else {
                    body.insert(k, v);
                }
            }
            None
        }
        other => Some(other),
    };
    let mut body = Value::Object(body);
    let mut errors = Vec::new();
    check_at(schema, &mut body, "", &mut errors, true);
    errors.sort();
    if !errors.is_empty() {
        return Err(errors);
    }
    if let Some(other) = not_an_object {
        return Ok(other);
    }
    if let Value::Object(b) = body {
        out.extend(b);
    }
    Ok(Value::Object(out))
}

/// Evaluates the schema's `x-kubernetes-validations` CEL rules (transition
/// rules see `oldSelf` on updates), as the API server does after the
/// structural checks. Messages read like the API server's.
pub fn validate_cel(schema: &CrdSchema, obj: &Value, old: Option<&Value>) -> Result<(), Vec<String>> {
    static VALIDATOR: std::sync::OnceLock<kube_cel::Validator> = std::sync::OnceLock::new();
    let v = VALIDATOR.get_or_init(kube_cel::Validator::new);
    if !schema.has_rules {
        return Ok(());
    }
    // Validation ratcheting (GA in 1.33): the errors of a value an update
    // leaves as it was are not reported. Where the root has no rule of its
    // own and every top-level field that holds rules is unchanged (a status
    // write), nothing is evaluated.
    if let Some(old) = old {
        if schema.cel.validations.is_empty() && schema.cel.properties.keys().all(|k| obj.get(k) == old.get(k)) {
            return Ok(());
        }
    }
    v.validate_compiled(&schema.cel, obj, old).map_err(|errs| {
        let mut out: Vec<String> = errs
            .into_vec()
            .into_iter()
            .map(|e| {
                let field = if e.field_path.is_empty() { "<root>".to_string() } else { e.field_path.clone() };
                format!("{field}: {}", invalid_value(value_at(obj, &e.field_path), &e.message))
            })
            .collect();
        out.sort();
        out
    })
}

/// A failed rule's "Invalid value" as the answering minor words it: up to
/// 1.34 the field's type in place of its value; from 1.35 a scalar's value,
/// and nothing for an object or a list (kubernetes/kubernetes#132798).
fn invalid_value(value: Option<&Value>, message: &str) -> String {
    let v = value.filter(|v| !v.is_null());
    if crate::kube::validation::answering::minor() < 35 {
        return format!("Invalid value: \"{}\": {message}", v.map_or("object", type_name));
    }
    match v {
        Some(v) if !v.is_object() && !v.is_array() => format!("Invalid value: {}: {message}", shown(v)),
        _ => format!("Invalid value: {message}"),
    }
}

/// The value at a rule's field path (`spec.roles[0].name`; empty: the root).
fn value_at<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (name, indices) = part.split_once('[').map_or((part, ""), |(n, rest)| (n, rest));
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        for index in indices.split('[').map(|i| i.trim_end_matches(']')).filter(|i| !i.is_empty()) {
            cur = match index.parse::<usize>() {
                Ok(i) => cur.get(i)?,
                Err(_) => cur.get(index.trim_matches('"'))?,
            };
        }
    }
    Some(cur)
}

/// A CRD version's schema as the store keeps it: shared, since resource
/// types are copied for every request, and its CEL rules compiled once
/// when the CRD is written (as the API server compiles them when it
/// serves a CRD), not on every write of a custom resource.
pub struct CrdSchema {
    pub json: Value,
    cel: kube_cel::CompiledSchema,
    has_rules: bool,
}

impl CrdSchema {
    pub fn new(json: Value) -> Self {
        let has_rules = json.to_string().contains("x-kubernetes-validations");
        let mut cel = kube_cel::compile_schema(&json);
        prune(&mut cel);
        CrdSchema { json, cel, has_rules }
    }
}

/// Keeps only the parts of a compiled schema that hold a rule or a default
/// (a rule may read a defaulted field below it): the validator converts the
/// value at every node it walks, so walking a pod template with no rule in
/// it cost more than every rule together. The outcome is the same.
fn prune(c: &mut kube_cel::CompiledSchema) -> bool {
    c.properties.retain(|_, p| prune(p));
    if c.items.as_mut().is_some_and(|i| !prune(i)) {
        c.items = None;
    }
    if c.additional_properties.as_mut().is_some_and(|a| !prune(a)) {
        c.additional_properties = None;
    }
    // allOf/oneOf/anyOf branches are kept whole: rare in CRDs, and their
    // shape decides which branch applies.
    !c.validations.is_empty()
        || c.default.is_some()
        || !c.properties.is_empty()
        || c.items.is_some()
        || c.additional_properties.is_some()
        || !c.all_of.is_empty()
        || !c.one_of.is_empty()
        || !c.any_of.is_empty()
}

impl std::fmt::Debug for CrdSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.json.fmt(f)
    }
}

impl PartialEq for CrdSchema {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
    }
}

impl Eq for CrdSchema {}

/// Where a schema sits, for the API server's "type must not be empty" rule.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool) == Some(true)
}

/// The two int-or-string shapes a structural schema may carry under a
/// junctor: `anyOf: [{type: integer}, {type: string}]` exactly.
fn int_or_string_any_of(any_of: Option<&Value>) -> bool {
    any_of.and_then(Value::as_array).is_some_and(|a| {
        a.len() == 2 && a[0] == serde_json::json!({"type": "integer"}) && a[1] == serde_json::json!({"type": "string"})
    })
}

/// Why a CRD version's schema is not structural, as a v1 API server
/// refuses the CRD (apiextensions' `ValidateStructural` invariants: a type
/// on every specified field, item and the root, `object` at the root, no
/// `additionalProperties` at the root or beside `properties`, and nothing
/// but value validation under `anyOf`/`allOf`/`oneOf`/`not`), each as
/// `path: Reason: detail`, sorted as the server sorts them.
pub fn structural(schema: &Value, path: &str) -> Vec<String> {
    let mut errs = Vec::new();
    invariants(schema, Level::Root, path, &mut errs);
    errs.sort();
    errs
}

fn invariants(s: &Value, lvl: Level, path: &str, errs: &mut Vec<String>) {
    let ty = s.get("type").and_then(Value::as_str).unwrap_or_default();
    if ty == "array" && s.get("items").is_none() {
        errs.push(format!("{path}.items: Required value: must be specified"));
    }
    if let Some(items) = s.get("items") {
        invariants(items, Level::Item, &format!("{path}.items"), errs);
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            invariants(v, Level::Field, &format!("{path}.properties[{k}]"), errs);
        }
    }
    if let Some(ap) = s.get("additionalProperties") {
        if lvl == Level::Root {
            errs.push(format!("{path}.additionalProperties: Forbidden: must not be used at the root"));
        }
        if ap.is_object() {
            invariants(ap, Level::Field, &format!("{path}.additionalProperties"), errs);
        }
        // `additionalProperties: true` beside properties is allowed.
        let props = s.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty());
        if props && ap != &Value::Bool(true) {
            errs.push(format!(
                "{path}.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ));
        }
    }
    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(format!("{path}.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"));
    }
    let skip_any_of = int_or_string_any_of(s.get("anyOf"));
    let skip_first_all_of = s
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .is_some_and(|f| int_or_string_any_of(f.get("anyOf")));
    junctors(s, skip_any_of, skip_first_all_of, path, errs);
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(format!("{path}.type: Required value: must be object if x-kubernetes-embedded-resource is true"));
        } else {
            errs.push(format!(
                "{path}.type: Invalid value: {ty:?}: must be object if x-kubernetes-embedded-resource is true"
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(format!("{path}.type: Required value: {detail}"));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(format!("{path}.type: Invalid value: {ty:?}: must be object at the root"));
    }
}

/// The value validation under `anyOf`, `allOf`, `oneOf` and `not`.
fn junctors(s: &Value, skip_any_of: bool, skip_first_all_of: bool, path: &str, errs: &mut Vec<String>) {
    for (key, skip) in [("anyOf", skip_any_of), ("allOf", false), ("oneOf", false)] {
        if skip {
            continue;
        }
        for (i, v) in s.get(key).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let skip_inner = key == "allOf" && i == 0 && skip_first_all_of;
            nested(v, skip_inner, &format!("{path}.{key}[{i}]"), errs);
        }
    }
    if let Some(not) = s.get("not") {
        nested(not, false, &format!("{path}.not"), errs);
    }
}

fn nested(v: &Value, skip_any_of: bool, path: &str, errs: &mut Vec<String>) {
    junctors(v, skip_any_of, false, path, errs);
    if let Some(items) = v.get("items") {
        nested(items, false, &format!("{path}.items"), errs);
    }
    if let Some(props) = v.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            nested(p, false, &format!("{path}.properties[{k}]"), errs);
        }
        if props.contains_key("metadata") {
            errs.push(format!("{path}.properties[metadata]: Forbidden: must not be specified in a nested context"));
        }
    }
    let forbidden = [
        ("type", "must be empty to be structural"),
        ("additionalProperties", "must be undefined to be structural"),
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("x-kubernetes-list-map-keys", "must be empty to be structural"),
        ("x-kubernetes-list-type", "must be undefined to be structural"),
    ];
    for (k, detail) in forbidden {
        if v.get(k).is_some_and(|x| !x.is_null() && x != "" && x != &Value::Array(vec![])) {
            errs.push(format!("{path}.{k}: Forbidden: {detail}"));
        }
    }
    for k in [
        "nullable",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(v, k) {
            errs.push(format!("{path}.{k}: Forbidden: must be false to be structural"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The platform's CRDs as shipped (generated from the workload model's
    /// types, a floor above this one, and kept current by its test): read
    /// as data, so the schema's tests name no room above.
    const PLATFORM_CRDS: &str =
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/addons/platform-crds/manifests/crds.yaml"));

    /// The kept parts of a compiled schema answer as the whole schema does,
    /// on creates and on updates, for every platform CRD.
    #[test]
    fn pruned_rules_answer_as_the_whole_schema_does() {
        let whole = kube_cel::Validator::new();
        let crds: Vec<Value> = PLATFORM_CRDS
            .split("\n---\n")
            .filter(|d| d.contains("kind: CustomResourceDefinition"))
            .map(|d| serde_saphyr::from_str(d).expect("a CRD's YAML"))
            .collect();
        let schema_of = |kind: &str| {
            let c = crds.iter().find(|c| c["spec"]["names"]["kind"] == kind).expect("a CRD");
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
        };
        let messages = |r: Result<(), kube_cel::ValidationErrors>| -> Vec<String> {
            let mut v: Vec<String> = r
                .err()
                .map(|e| e.into_vec().into_iter().map(|e| format!("{}: {}", e.field_path, e.message)).collect())
                .unwrap_or_default();
            v.sort();
            v
        };
        let jobset = |shards: i64, parallelism: i64, team: &str| {
            json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestJobSet", "metadata": {"name": "j"},
                "spec": {"owner": {"team": team, "project": "p"}, "shards": shards, "parallelism": parallelism,
                    "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}}})
        };
        let cases: Vec<(Value, Option<Value>)> = vec![
            (jobset(4, 2, "ads"), None),
            (jobset(2, 4, "ads"), None),
            (jobset(4, 2, "search"), Some(jobset(4, 2, "ads"))),
            (jobset(2, 8, "ads"), Some(jobset(4, 2, "ads"))),
            (jobset(4, 2, "ads"), Some(jobset(4, 2, "ads"))),
        ];
        let json = schema_of("PinterestJobSet");
        let kept = CrdSchema::new(json.clone());
        let mut refused = 0;
        for (obj, old) in &cases {
            let want = messages(whole.validate(&json, obj, old.as_ref()));
            let got = messages(kube_cel::Validator::new().validate_compiled(&kept.cel, obj, old.as_ref()));
            assert_eq!(got, want, "{obj} (was {old:?})");
            refused += usize::from(!want.is_empty());
        }
        // The cases exercise both rules: shards, and the immutable owner.
        assert_eq!(refused, 3);
    }

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["owner"], "properties": {
            "owner": {"type": "string", "minLength": 1},
            "replicas": {"type": "integer", "minimum": 0, "default": 1},
            "tier": {"type": "string", "enum": ["critical", "standard"]},
            "port": {"x-kubernetes-int-or-string": true},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }}}})
    }

    #[test]
    fn defaults_prune_and_report_every_violation() {
        let ok = validate(
            &schema(),
            &json!({"metadata": {"name": "x"}, "spec": {"owner": "t", "junk": 1, "extra": {"k": 1}}}),
        )
        .unwrap();
        assert_eq!(ok["spec"], json!({"owner": "t", "replicas": 1, "extra": {"k": 1}}));
        let errs =
            validate(&schema(), &json!({"spec": {"replicas": "three", "tier": "gold", "port": true}})).unwrap_err();
        assert_eq!(
            errs,
            vec![
                "spec.owner: Required value".to_string(),
                "spec.port: Invalid value: true: spec.port in body must be of type integer or string: \"boolean\""
                    .to_string(),
                "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
                    .to_string(),
                "spec.tier: Unsupported value: \"gold\": supported values: \"critical\", \"standard\"".to_string(),
            ]
        );
    }
}

#[cfg(test)]
mod rule_message_tests {
    use super::*;
    use serde_json::json;

    /// A failed rule's value as each minor words it: the field's type up to
    /// 1.34; from 1.35 a scalar's value, and none for an object or a list.
    #[test]
    fn a_failed_rules_value_is_worded_as_the_minor_does() {
        let obj = json!({"spec": {"owner": {"team": "a"}, "roles": [{"name": "w", "replicas": 2}]}});
        let owner = value_at(&obj, "spec.owner");
        let name = value_at(&obj, "spec.roles[0].name");
        assert_eq!(name, Some(&json!("w")));
        assert_eq!(value_at(&obj, "spec.roles[0].replicas"), Some(&json!(2)));
        assert_eq!(value_at(&obj, ""), Some(&obj));
        {
            let _m = crate::kube::validation::answering::set(34);
            assert_eq!(invalid_value(owner, "m"), "Invalid value: \"object\": m");
            assert_eq!(invalid_value(name, "m"), "Invalid value: \"string\": m");
        }
        let _m = crate::kube::validation::answering::set(36);
        assert_eq!(invalid_value(owner, "m"), "Invalid value: m");
        assert_eq!(invalid_value(value_at(&obj, "spec.roles"), "m"), "Invalid value: m");
        assert_eq!(invalid_value(name, "m"), "Invalid value: \"w\": m");
        assert_eq!(invalid_value(value_at(&obj, "spec.roles[0].replicas"), "m"), "Invalid value: 2: m");
    }
}
