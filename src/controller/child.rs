//! A child as the controller's caches keep it: its metadata typed, its
//! status as JSON (a workload's status reads it), and everything else as
//! compact JSON text.
//!
//! ```text
//! child watch ──► Child (metadata, status, body text) ──► reflector store
//!                                                          │ reconcile
//!                                                          ▼
//!                                            Child::to_value ─► up_to_date
//! ```
//!
//! A Deployment's pod template with the platform's sidecars is most of
//! the object; held as a `serde_json::Value` tree it takes several times
//! its text. Kept as text it costs its length, and a reconcile that needs
//! it parses one object.

use std::borrow::Cow;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope, TypeMeta};
use kube::Resource;
use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

#[derive(Debug, Clone)]
pub struct Child {
    pub types: Option<TypeMeta>,
    pub metadata: ObjectMeta,
    /// `status`, when the object has one.
    pub status: Option<Value>,
    /// The object without `apiVersion`, `kind`, `metadata` and `status`, as JSON text.
    body: Box<str>,
}

impl Child {
    /// The whole object again, as the API server sent it (managed fields aside).
    pub fn to_value(&self) -> Value {
        let mut m: Map<String, Value> = serde_json::from_str(&self.body).unwrap_or_default();
        if let Some(t) = &self.types {
            m.insert("apiVersion".into(), Value::String(t.api_version.clone()));
            m.insert("kind".into(), Value::String(t.kind.clone()));
        }
        m.insert("metadata".into(), serde_json::to_value(&self.metadata).unwrap_or_default());
        if let Some(s) = &self.status {
            m.insert("status".into(), s.clone());
        }
        Value::Object(m)
    }

    /// The compact text of everything but metadata and status (for hashing).
    pub fn body(&self) -> &str {
        &self.body
    }
}

impl<'de> Deserialize<'de> for Child {
    /// Read in one pass over the object: metadata typed (its managed fields
    /// skipped, never built: the caches drop them), status as JSON, and
    /// every other field kept as the text it arrived in, not parsed into a
    /// tree and written out again.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Child;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Child, A::Error> {
                let (mut api_version, mut kind, mut metadata, mut status) = (None, None, None, None);
                let mut body = String::from("{");
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "apiVersion" => api_version = map.next_value::<Value>()?.as_str().map(str::to_string),
                        "kind" => kind = map.next_value::<Value>()?.as_str().map(str::to_string),
                        "metadata" => metadata = Some(map.next_value::<Unmanaged>()?.0),
                        "status" => status = Some(map.next_value::<Value>()?).filter(|s| !s.is_null()),
                        _ => {
                            let raw: Box<RawValue> = map.next_value()?;
                            if body.len() > 1 {
                                body.push(',');
                            }
                            body.push_str(&serde_json::to_string(&key).map_err(A::Error::custom)?);
                            body.push(':');
                            body.push_str(raw.get());
                        }
                    }
                }
                body.push('}');
                let types = match (api_version, kind) {
                    (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
                    _ => None,
                };
                let metadata = metadata.ok_or_else(|| A::Error::missing_field("metadata"))?;
                Ok(Child { types, metadata, status, body: body.into_boxed_str() })
            }
        }
        d.deserialize_map(Fields)
    }
}

/// ObjectMeta without its managed fields: they are passed over as they are
/// read, not built and then dropped.
struct Unmanaged(ObjectMeta);

impl<'de> Deserialize<'de> for Unmanaged {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = Unmanaged;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object's metadata")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Unmanaged, A::Error> {
                let mut m = Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "managedFields" {
                        map.next_value::<IgnoredAny>()?;
                    } else {
                        m.insert(key, map.next_value::<Value>()?);
                    }
                }
                serde_json::from_value(Value::Object(m)).map(Unmanaged).map_err(A::Error::custom)
            }
        }
        d.deserialize_map(Fields)
    }
}

impl Resource for Child {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_child_comes_back_whole_from_its_compact_form() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "a", "labels": {"app": "web"}, "generation": 3},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}},
            "status": {"readyReplicas": 2}});
        let c: Child = serde_json::from_value(d.clone()).unwrap();
        assert_eq!(c.status, Some(json!({"readyReplicas": 2})));
        assert!(!c.body().contains("metadata") && c.body().contains("replicas"));
        assert_eq!(c.to_value(), d);
        // A list item without apiVersion and kind, and without status.
        let item = json!({"metadata": {"name": "sa"}, "automountServiceAccountToken": false});
        let c: Child = serde_json::from_value(item.clone()).unwrap();
        assert_eq!((c.types.is_none(), c.status.is_none()), (true, true));
        assert_eq!(c.to_value(), item);
        assert!(serde_json::from_value::<Child>(json!({"spec": {}})).is_err(), "no metadata: refused");
        // From the text a watch sends: managed fields passed over, the rest
        // of the body kept as it came.
        let text = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"s","managedFields":[{"manager":"m","operation":"Apply","fieldsV1":{"f:spec":{}}}],"resourceVersion":"7"},"spec":{"ports":[{"port":80}],"type":"ClusterIP"},"status":null}"#;
        let c: Child = serde_json::from_str(text).unwrap();
        assert_eq!(c.metadata.managed_fields, None);
        assert_eq!(c.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(c.body(), r#"{"spec":{"ports":[{"port":80}],"type":"ClusterIP"}}"#);
        assert_eq!(c.status, None);
        assert!(serde_json::from_str::<Child>(r#"{"metadata":{"name":7}}"#).is_err(), "a mistyped name: refused");
    }
}
