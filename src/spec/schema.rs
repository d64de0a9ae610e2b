//! JSON Schema of the cluster format, derived from [`super::Cluster`].
//!
//! The same schema drives the structural checker and editors
//! (yaml-language-server). The *strict* form is the complete file; the
//! *partial* form drops `required` everywhere, for bases and for files that
//! extend one (they hold only what they add or change).

use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::Cluster;

pub const SCHEMA_ID: &str = "https://pinfleet.dev/schemas/cluster.v1alpha1.json";

/// The strict schema: what a complete, merged cluster file must satisfy.
pub fn cluster_schema() -> Value {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<Cluster>().to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("$id".into(), Value::String(SCHEMA_ID.into()));
    }
    schema
}

/// The partial schema, for bases and files that extend one.
pub fn partial_schema() -> Value {
    let mut schema = cluster_schema();
    drop_required(&mut schema);
    if let Some(obj) = schema.as_object_mut() {
        obj.insert("$id".into(), Value::String(SCHEMA_ID.replace(".json", ".partial.json")));
        obj.insert(
            "title".into(),
            Value::String("pinfleet Cluster (partial: a base or a file that extends one)".into()),
        );
    }
    schema
}

fn drop_required(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("required");
            map.values_mut().for_each(drop_required);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_required),
        _ => {}
    }
}

/// Pretty JSON with a trailing newline, as checked in.
pub fn to_pretty(schema: &Value) -> String {
    let mut s = serde_json::to_string_pretty(schema).expect("schema serializes");
    s.push('\n');
    s
}
