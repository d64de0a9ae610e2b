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
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
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
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut m = Map::<String, Value>::deserialize(d)?;
        let api_version = m.remove("apiVersion").and_then(|v| v.as_str().map(str::to_string));
        let kind = m.remove("kind").and_then(|v| v.as_str().map(str::to_string));
        let types = match (api_version, kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        let metadata: ObjectMeta = match m.remove("metadata") {
            Some(v) => serde_json::from_value(v).map_err(D::Error::custom)?,
            None => return Err(D::Error::missing_field("metadata")),
        };
        let status = m.remove("status").filter(|s| !s.is_null());
        let body = serde_json::to_string(&m).map_err(D::Error::custom)?.into_boxed_str();
        Ok(Child { types, metadata, status, body })
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
    }
}
