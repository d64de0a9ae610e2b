//! CustomResourceDefinitions that extend the registry: a CRD's names and
//! structural schemas checked, each served version registered (with its
//! subresources, printer columns and schema), and its status written as
//! the API server's establishing controller writes it.

use serde_json::{json, Value};

use super::{invalid_all, meta_str, now, ApiError, Inner, R};
use crate::sim::registry::{ResourceType, Scale};

impl Inner {
    pub(super) fn register_crd(&mut self, crd: &mut Value) -> R<()> {
        let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
        let group = spec.get("group").and_then(Value::as_str).unwrap_or_default().to_string();
        let names = spec.get("names").cloned().unwrap_or(Value::Null);
        let plural = names.get("plural").and_then(Value::as_str).unwrap_or_default().to_string();
        let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
        let expected = format!("{plural}.{group}");
        if group.is_empty() || plural.is_empty() || kind.is_empty() {
            return Err(ApiError::new(
                422,
                "Invalid",
                "CustomResourceDefinition needs spec.group, spec.names.plural and spec.names.kind",
            ));
        }
        if meta_str(crd, "name") != Some(expected.as_str()) {
            return Err(ApiError::new(422, "Invalid", format!("CustomResourceDefinition.apiextensions.k8s.io \"{}\" is invalid: metadata.name: Invalid value: must be spec.names.plural+\".\"+spec.group ({expected})", meta_str(crd, "name").unwrap_or_default())));
        }
        // A v1 CRD's every schema must be structural, or the CRD is refused.
        // The server names the schema as its internal version holds it: one
        // `spec.validation` when every version has the same, else per version.
        let mut errs = Vec::new();
        let all: Vec<Option<&Value>> = spec
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.pointer("/schema/openAPIV3Schema"))
            .collect();
        match all.first() {
            Some(Some(one)) if all.iter().all(|s| s == &Some(*one)) => {
                errs.extend(crate::kube::schema::structural(one, "spec.validation.openAPIV3Schema"));
            }
            _ => {
                for (i, schema) in all.iter().enumerate() {
                    if let Some(schema) = schema {
                        errs.extend(crate::kube::schema::structural(
                            schema,
                            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        ));
                    }
                }
            }
        }
        if !errs.is_empty() {
            let name = meta_str(crd, "name").unwrap_or_default();
            return Err(invalid_all("CustomResourceDefinition", "apiextensions.k8s.io", name, &errs));
        }
        let strs = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        self.registry.remove_group_plural(&group, &plural);
        let versions = spec.get("versions").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut stored = Vec::new();
        for v in versions.iter().filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true)) {
            let version = v.get("name").and_then(Value::as_str).unwrap_or("v1").to_string();
            if v.get("storage").and_then(Value::as_bool) == Some(true) {
                stored.push(version.clone());
            }
            let sub = v.get("subresources");
            let scale = sub.and_then(|s| s.get("scale")).map(|s| Scale {
                spec_replicas: s.get("specReplicasPath").and_then(Value::as_str).unwrap_or(".spec.replicas").into(),
                status_replicas: s
                    .get("statusReplicasPath")
                    .and_then(Value::as_str)
                    .unwrap_or(".status.replicas")
                    .into(),
                label_selector: s.get("labelSelectorPath").and_then(Value::as_str).map(str::to_string),
            });
            self.registry.add(ResourceType {
                group: group.clone(),
                version,
                kind: kind.clone(),
                plural: plural.clone(),
                singular: names
                    .get("singular")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| kind.to_lowercase()),
                namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
                short_names: strs(names.get("shortNames")),
                categories: strs(names.get("categories")),
                status: sub.and_then(|s| s.get("status")).is_some(),
                scale,
                columns: v.get("additionalPrinterColumns").and_then(Value::as_array).cloned().unwrap_or_default(),
                schema: v
                    .pointer("/schema/openAPIV3Schema")
                    .map(|s| std::sync::Arc::new(crate::kube::schema::CrdSchema::new(s.clone()))),
                custom: true,
            });
        }
        // Conditions keep their transition time while they hold (a re-apply
        // of the same CRD must be a no-op).
        let now = crd
            .pointer("/status/conditions/1/lastTransitionTime")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(now);
        crd["status"] = json!({
            "acceptedNames": names,
            "storedVersions": stored,
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ]
        });
        Ok(())
    }
}
