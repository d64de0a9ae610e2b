//! The resource types the emulator serves: the built-in ones pinfleet and
//! kubectl rely on, plus whatever CustomResourceDefinitions add. Discovery
//! documents are generated from here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The plural, as in URLs (`deployments`).
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    /// Path of replicas in spec / status / label selector, for `…/scale`.
    pub scale: Option<Scale>,
    /// Printer columns (CRDs), as given.
    pub columns: Vec<Value>,
    /// A CRD version's structural schema (openAPIV3Schema), enforced on writes.
    pub schema: Option<std::sync::Arc<crate::kube::schema::CrdSchema>>,
    /// Served for a CustomResourceDefinition (kept as unstructured JSON).
    pub custom: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scale {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
    /// Storage key: group and plural (versions share storage).
    pub fn key(&self) -> (String, String) {
        (self.group.clone(), self.plural.clone())
    }
}

fn rt(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
    short: &[&str],
    status: bool,
) -> ResourceType {
    ResourceType {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        singular: kind.to_lowercase(),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        status,
        scale: None,
        columns: Vec::new(),
        schema: None,
        custom: false,
    }
}

fn replicas_scale() -> Option<Scale> {
    Some(Scale {
        spec_replicas: ".spec.replicas".into(),
        status_replicas: ".status.replicas".into(),
        label_selector: None,
    })
}

/// The built-in types.
pub fn builtins() -> Vec<ResourceType> {
    let all = vec!["all".to_string()];
    let mut v = vec![
        rt("", "v1", "Namespace", "namespaces", false, &["ns"], true),
        rt("", "v1", "Node", "nodes", false, &["no"], true),
        rt("", "v1", "Pod", "pods", true, &["po"], true),
        rt("", "v1", "Service", "services", true, &["svc"], true),
        rt("", "v1", "Endpoints", "endpoints", true, &["ep"], false),
        rt("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", true, &[], false),
        rt("", "v1", "ConfigMap", "configmaps", true, &["cm"], false),
        rt("", "v1", "Secret", "secrets", true, &[], false),
        rt("", "v1", "ServiceAccount", "serviceaccounts", true, &["sa"], false),
        rt("", "v1", "Event", "events", true, &["ev"], false),
        rt("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", true, &["pvc"], true),
        rt("", "v1", "ResourceQuota", "resourcequotas", true, &["quota"], true),
        rt("", "v1", "PersistentVolume", "persistentvolumes", false, &["pv"], true),
        rt("apps", "v1", "Deployment", "deployments", true, &["deploy"], true),
        rt("apps", "v1", "ReplicaSet", "replicasets", true, &["rs"], true),
        rt("apps", "v1", "DaemonSet", "daemonsets", true, &["ds"], true),
        rt("apps", "v1", "StatefulSet", "statefulsets", true, &["sts"], true),
        rt("apps", "v1", "ControllerRevision", "controllerrevisions", true, &[], false),
        rt("batch", "v1", "Job", "jobs", true, &[], true),
        rt("batch", "v1", "CronJob", "cronjobs", true, &["cj"], true),
        rt("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", true, &["pdb"], true),
        rt("rbac.authorization.k8s.io", "v1", "Role", "roles", true, &[], false),
        rt("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true, &[], false),
        rt("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false, &[], false),
        rt("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", false, &[], false),
        rt("networking.k8s.io", "v1", "Ingress", "ingresses", true, &["ing"], true),
        rt("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", true, &["netpol"], false),
        rt("networking.k8s.io", "v1", "IngressClass", "ingressclasses", false, &[], false),
        rt("coordination.k8s.io", "v1", "Lease", "leases", true, &[], false),
        // Create-only and never stored: answered by the authenticator.
        rt("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false, &[], false),
        rt(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["crd", "crds"],
            true,
        ),
        rt("events.k8s.io", "v1", "Event", "events", true, &["ev"], false),
        rt("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", false, &["pc"], false),
        rt("storage.k8s.io", "v1", "StorageClass", "storageclasses", false, &["sc"], false),
        rt("storage.k8s.io", "v1", "CSIDriver", "csidrivers", false, &[], false),
        rt("storage.k8s.io", "v1", "CSINode", "csinodes", false, &[], false),
        rt("apiregistration.k8s.io", "v1", "APIService", "apiservices", false, &[], true),
        rt(
            "certificates.k8s.io",
            "v1",
            "CertificateSigningRequest",
            "certificatesigningrequests",
            false,
            &["csr"],
            true,
        ),
    ];
    for r in &mut v {
        if matches!(
            r.plural.as_str(),
            "pods" | "services" | "deployments" | "replicasets" | "daemonsets" | "statefulsets" | "jobs" | "cronjobs"
        ) {
            r.categories = all.clone();
        }
        if matches!(r.plural.as_str(), "deployments" | "replicasets" | "statefulsets") {
            r.scale = replicas_scale();
        }
    }
    v
}

/// All served types, by (group, version, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    types: BTreeMap<(String, String, String), ResourceType>,
}

impl Registry {
    pub fn new() -> Self {
        let mut r = Registry::default();
        for t in builtins() {
            r.add(t);
        }
        r
    }

    pub fn add(&mut self, t: ResourceType) {
        self.types.insert((t.group.clone(), t.version.clone(), t.plural.clone()), t);
    }

    pub fn remove_group_plural(&mut self, group: &str, plural: &str) {
        self.types.retain(|(g, _, p), _| !(g == group && p == plural));
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.types.get(&(group.to_string(), version.to_string(), plural.to_string()))
    }

    /// The type of `apiVersion`/`kind` (for objects in request bodies and owner references).
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceType> {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        self.types.values().find(|t| t.group == group && t.version == version && t.kind == kind)
    }

    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.types.values()
    }

    /// Groups and their versions (core group excluded), preferred version first.
    pub fn groups(&self) -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.types.values().filter(|t| !t.group.is_empty()) {
            let vs = out.entry(t.group.clone()).or_default();
            if !vs.contains(&t.version) {
                vs.push(t.version.clone());
            }
        }
        for vs in out.values_mut() {
            vs.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)));
        }
        out
    }

    /// `APIResourceList` for one group/version.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let types: Vec<&ResourceType> =
            self.types.values().filter(|t| t.group == group && t.version == version).collect();
        if types.is_empty() {
            return None;
        }
        let mut resources = Vec::new();
        for t in types {
            let verbs = json!(["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]);
            let mut r = json!({
                "name": t.plural, "singularName": t.singular, "namespaced": t.namespaced, "kind": t.kind, "verbs": verbs,
            });
            if !t.short_names.is_empty() {
                r["shortNames"] = json!(t.short_names);
            }
            if !t.categories.is_empty() {
                r["categories"] = json!(t.categories);
            }
            resources.push(r);
            if t.status {
                resources.push(json!({"name": format!("{}/status", t.plural), "singularName": "", "namespaced": t.namespaced, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
            }
            if t.scale.is_some() {
                resources.push(json!({"name": format!("{}/scale", t.plural), "singularName": "", "namespaced": t.namespaced, "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
            }
            if t.plural == "certificatesigningrequests" {
                resources.push(json!({"name": "certificatesigningrequests/approval", "singularName": "", "namespaced": false, "kind": t.kind, "verbs": ["get", "patch", "update"]}));
            }
            if t.plural == "pods" && t.group.is_empty() {
                resources.push(json!({"name": "pods/log", "singularName": "", "namespaced": true, "kind": "Pod", "verbs": ["get"]}));
                resources.push(json!({"name": "pods/eviction", "singularName": "", "namespaced": true, "group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]}));
            }
        }
        let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
    }
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let rest = v.trim_start_matches('v');
    let (major, tail) =
        rest.split_once(|c: char| !c.is_ascii_digit()).map(|(a, _)| (a, &rest[a.len()..])).unwrap_or((rest, ""));
    let major: u32 = major.parse().unwrap_or(0);
    let (stage, n) = if let Some(b) = tail.strip_prefix("beta") {
        (1, b.parse().unwrap_or(0))
    } else if let Some(a) = tail.strip_prefix("alpha") {
        (0, a.parse().unwrap_or(0))
    } else {
        (2, 0)
    };
    (stage, major, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v1", "v2beta1", "v1beta2"];
        v.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)));
        assert_eq!(v, ["v1", "v2beta1", "v1beta2", "v1alpha1"]);
    }
}
