//! What a write passes before it is stored, as kube-apiserver's admission
//! and validation run it: the server's defaulting, a custom resource's
//! schema (pruning, defaults, CEL), a built-in object's validation, Pod
//! Security on a pod's creation, and a Secret's `stringData` merged.

use serde_json::{json, Value};

use super::{invalid_all, ApiError, Inner, R};
use crate::sim::registry::ResourceType;

impl Inner {
    /// Defaults, prunes and validates a custom resource against its CRD
    /// version's schema (a no-op for types without one).
    pub(super) fn enforce_schema(
        minor: u32,
        t: &ResourceType,
        name: &str,
        obj: Value,
        old: Option<&Value>,
    ) -> R<Value> {
        let Some(schema) = &t.schema else { return Ok(obj) };
        let _minor = crate::kube::validation::answering::set(minor);
        crate::kube::schema::validate_owned(&schema.json, obj)
            .and_then(|out| crate::kube::schema::validate_cel(schema, &out, old).map(|()| out))
            .map_err(|errors| invalid_all(&t.kind, &t.group, name, &errors))
    }

    /// Validates a built-in object the way kube-apiserver does (custom
    /// resources are checked against their schema instead): a body that does
    /// not decode is a 400, every refused field is in one 422.
    pub(super) fn enforce_builtin(minor: u32, t: &ResourceType, name: &str, obj: &Value, old: Option<&Value>) -> R<()> {
        use crate::kube::validation;
        if t.schema.is_some() || t.plural == "customresourcedefinitions" {
            return Ok(());
        }
        if let Some(msg) = validation::decode_error(obj) {
            return Err(ApiError::new(
                400,
                "BadRequest",
                format!("{kind} in version {v:?} cannot be handled as a {kind}: {msg}", kind = t.kind, v = t.version),
            ));
        }
        let errors = validation::validate_as(minor, &t.group, &t.kind, obj, old);
        if errors.is_empty() {
            return Ok(());
        }
        Err(ApiError::new(422, "Invalid", validation::invalid_message(&t.kind, &t.group, name, &errors))
            .with_details(validation::invalid_details(&t.kind, &t.group, name, &errors)))
    }

    /// Pod Security admission on a pod's creation, as kube-apiserver's
    /// built-in plugin enforces its namespace's
    /// `pod-security.kubernetes.io/enforce` level (dry runs included;
    /// workload objects are not refused, their pods are): a 403 naming every
    /// failed check, in the plugin's words.
    pub(super) fn enforce_pod_security(&self, t: &ResourceType, ns: &str, name: &str, obj: &Value) -> R<()> {
        use crate::kube::podsecurity::{self, Level};
        if t.plural != "pods" || !t.group.is_empty() {
            return Ok(());
        }
        let key = (String::new(), "namespaces".to_string(), String::new(), ns.to_string());
        let level = self
            .objects
            .get(&key)
            .and_then(|n| n.pointer("/metadata/labels/pod-security.kubernetes.io~1enforce"))
            .and_then(Value::as_str)
            .and_then(|l| Level::parse(l).ok());
        let Some(level) = level.filter(|l| *l != Level::Privileged) else { return Ok(()) };
        let spec = obj.get("spec").unwrap_or(&Value::Null);
        let found = podsecurity::check(obj.get("metadata").unwrap_or(&Value::Null), spec, level);
        if found.is_empty() {
            return Ok(());
        }
        let what: Vec<String> = found.iter().map(|v| format!("{} ({})", v.check, v.detail)).collect();
        Err(ApiError::new(
            403,
            "Forbidden",
            format!(
                "pods \"{name}\" is forbidden: violates PodSecurity \"{}:latest\": {}",
                level.as_str(),
                what.join(", ")
            ),
        ))
    }

    /// The server's defaulting that validation depends on (`SetDefaults_Job`):
    /// a Job with neither completions nor parallelism runs once, one pod at a
    /// time; parallelism alone defaults to 1.
    pub(super) fn default_builtin(t: &ResourceType, obj: &mut Value) {
        if t.plural != "jobs" || t.group != "batch" {
            return;
        }
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else { return };
        let completions = spec.get("completions").is_some_and(|v| !v.is_null());
        let parallelism = spec.get("parallelism").is_some_and(|v| !v.is_null());
        if !completions && !parallelism {
            spec.insert("completions".into(), json!(1));
        }
        if !parallelism {
            spec.insert("parallelism".into(), json!(1));
        }
    }

    /// A Secret's `stringData` is write-only: the API server merges it into
    /// `data` (base64), `stringData` winning, and never returns it.
    pub(super) fn merge_string_data(t: &ResourceType, obj: &mut Value) {
        if t.plural != "secrets" || !t.group.is_empty() {
            return;
        }
        let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) else { return };
        use base64::Engine as _;
        let data = obj.as_object_mut().expect("an object").entry("data").or_insert_with(|| json!({}));
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let text = v.as_str().unwrap_or_default();
                d.insert(k, json!(base64::engine::general_purpose::STANDARD.encode(text)));
            }
        }
    }
}
