//! The pure half of the installer: a cluster spec and the packages on disk
//! → the ordered list of objects each addon wants, labelled for inventory
//! and pruning. No IO; the installer ([`super::install`]) applies the
//! result.
//!
//! Order: addons by `dependsOn` (ties by name), and inside an addon
//! Namespaces and CRDs first, then identities and configuration, then
//! services, then workloads, then everything else (custom resources last,
//! after their CRD is Established).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::package::{Package, Readiness, ReadyKind};
use crate::spec::yaml;
use crate::spec::{Cluster, Loc};

/// Label on every addon object: which addon owns it (prune selects on it).
pub use crate::kube::ADDON_LABEL;
/// Label on every addon object: the addon version that rendered it.
pub const VERSION_LABEL: &str = "pinfleet.dev/addon-version";
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// One problem found before anything is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonError {
    pub addon: String,
    /// `file:line:col` when the problem is in a file.
    pub loc: Option<String>,
    pub message: String,
}

impl fmt::Display for AddonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.loc {
            Some(loc) => write!(f, "addon {}: {loc}: {}", self.addon, self.message),
            None => write!(f, "addon {}: {}", self.addon, self.message),
        }
    }
}

/// Every problem found, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct AddonErrors(pub Vec<AddonError>);

impl fmt::Display for AddonErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(f, "{}", lines.join("\n"))
    }
}

fn err(addon: &str, loc: Option<String>, message: impl Into<String>) -> AddonError {
    AddonError { addon: addon.to_string(), loc, message: message.into() }
}

/// An addon chosen for a cluster, with its values resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Selected<'a> {
    pub package: &'a Package,
    pub values: Map<String, Value>,
}

/// Identity of an object in the cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.kind, self.name)
        } else {
            write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// One rendered object and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Object {
    pub key: ObjectKey,
    #[serde(skip)]
    pub source: Option<Loc>,
    pub value: Value,
}

/// One addon, rendered.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RenderedAddon {
    pub name: String,
    pub version: String,
    pub namespace: String,
    pub roll_nodes: bool,
    pub depends_on: Vec<String>,
    /// Checks with their namespaces filled in.
    pub readiness: Vec<Readiness>,
    pub objects: Vec<Object>,
}

/// Kinds that live outside namespaces (the installer's discovery has the
/// final word; this list decides where a namespace is filled in).
const CLUSTER_SCOPED: &[&str] = &[
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "PriorityClass",
    "StorageClass",
    "PersistentVolume",
    "IngressClass",
    "RuntimeClass",
    "CSIDriver",
    "APIService",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

pub fn cluster_scoped(kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&kind)
}

/// Apply order inside one addon.
fn kind_rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        "PriorityClass" | "StorageClass" | "IngressClass" | "RuntimeClass" => 2,
        "ServiceAccount" | "ClusterRole" | "Role" => 3,
        "ClusterRoleBinding" | "RoleBinding" => 4,
        "ConfigMap" | "Secret" => 5,
        "Service" => 6,
        "Deployment" | "DaemonSet" | "StatefulSet" | "Job" | "CronJob" => 7,
        "PodDisruptionBudget" | "HorizontalPodAutoscaler" => 8,
        _ => 9,
    }
}

/// Chooses the cluster's addons: the packages marked `default` unless the
/// cluster disables them, plus any it enables; version pins and values
/// checked; ordered so every addon comes after what it depends on.
/// Whether the cluster gets `package`: as its addons list says, else the package's default.
/// A device plugin's default is whether the cluster has a group of
/// machines that offer its resource.
pub fn enabled(cluster: &Cluster, package: &Package) -> bool {
    let default = match &package.meta.accelerators {
        Some(resource) => cluster
            .spec
            .instance_groups
            .iter()
            .any(|g| crate::accelerated::of_instance_type(&g.machine_type).is_some_and(|a| a.resource == resource)),
        None => package.meta.default,
    };
    cluster.spec.addons.iter().find(|a| a.name == package.meta.name).map_or(default, |a| a.enabled)
}

/// Why `package` cannot run on the cluster's Kubernetes minor (its declared
/// `kubernetes` range), if it cannot.
pub fn minor_unsupported(cluster: &Cluster, package: &Package) -> Option<String> {
    let range = package.meta.kubernetes.as_ref()?;
    let (_, minor, _) = crate::spec::validate::parse_kubernetes_version(&cluster.spec.kubernetes_version)?;
    (!range.contains(minor)).then(|| {
        format!(
            "supports Kubernetes {range}; the cluster runs {} (disable the addon, or use a release of it that supports 1.{minor})",
            cluster.spec.kubernetes_version
        )
    })
}

pub fn select<'a>(cluster: &Cluster, packages: &'a [Package]) -> Result<Vec<Selected<'a>>, AddonErrors> {
    let mut errors = Vec::new();
    let by_name: BTreeMap<&str, &Package> = packages.iter().map(|p| (p.meta.name.as_str(), p)).collect();
    let refs: BTreeMap<&str, &crate::spec::AddonRef> =
        cluster.spec.addons.iter().map(|a| (a.name.as_str(), a)).collect();
    for r in refs.values() {
        if !by_name.contains_key(r.name.as_str()) {
            let known: Vec<&str> = by_name.keys().copied().collect();
            errors.push(err(&r.name, None, format!("no such package (known: {})", known.join(", "))));
        }
    }
    let mut chosen: BTreeMap<&str, Selected<'a>> = BTreeMap::new();
    for p in packages {
        let name = p.meta.name.as_str();
        let r = refs.get(name);
        if !enabled(cluster, p) {
            continue;
        }
        if let Some(why) = minor_unsupported(cluster, p) {
            errors.push(err(name, None, why));
        }
        if let Some(pin) = r.and_then(|r| r.version.as_ref()) {
            if pin != &p.meta.version {
                errors.push(err(
                    name,
                    None,
                    format!(
                        "the cluster pins version {pin}, but addons/{name} is version {}; \
                         update the pin to upgrade or check out the package that matches",
                        p.meta.version
                    ),
                ));
            }
        }
        let mut values: Map<String, Value> =
            p.meta.values.iter().map(|(k, d)| (k.clone(), d.default.clone())).collect();
        if let Some(r) = r {
            for (k, v) in &r.values {
                if !p.meta.values.contains_key(k) {
                    let known: Vec<&str> = p.meta.values.keys().map(String::as_str).collect();
                    let hint = if known.is_empty() {
                        "it takes none".to_string()
                    } else {
                        format!("it takes: {}", known.join(", "))
                    };
                    errors.push(err(name, None, format!("unknown value `{k}` ({hint})")));
                    continue;
                }
                values.insert(k.clone(), v.clone());
            }
        }
        chosen.insert(name, Selected { package: p, values });
    }
    for s in chosen.values() {
        for d in &s.package.meta.depends_on {
            if !chosen.contains_key(d.as_str()) {
                let why = if by_name.contains_key(d.as_str()) {
                    "which this cluster disables"
                } else {
                    "which does not exist"
                };
                errors.push(err(&s.package.meta.name, None, format!("depends on `{d}`, {why}")));
            }
        }
    }
    if !errors.is_empty() {
        return Err(AddonErrors(errors));
    }
    // Kahn's algorithm: `first` packages before the others, then the
    // smallest name first among the ready ones.
    let mut order = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    while done.len() < chosen.len() {
        let ready = |(n, s): &(&&str, &Selected)| {
            !done.contains(**n) && s.package.meta.depends_on.iter().all(|d| done.contains(d.as_str()))
        };
        let next = chosen.iter().filter(ready).min_by_key(|(n, s)| (!s.package.meta.first, **n)).map(|(n, _)| *n);
        match next {
            Some(n) => {
                done.insert(n);
                order.push(chosen[n].clone());
            }
            None => {
                let stuck: Vec<&str> = chosen.keys().filter(|n| !done.contains(*n)).copied().collect();
                return Err(AddonErrors(vec![err(
                    stuck[0],
                    None,
                    format!("dependency cycle among {}", stuck.join(", ")),
                )]));
            }
        }
    }
    Ok(order)
}

/// The cluster's definition standing alone: its bases are merged in
/// already, so the `extends` that named them goes.
fn standalone(cluster: &Cluster) -> String {
    let mut v = serde_json::to_value(cluster).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("extends");
    }
    v.to_string()
}

/// The variables every manifest template sees.
fn template_context(cluster: &Cluster, s: &Selected) -> tera::Context {
    let meta = &s.package.meta;
    let nodes: u32 = cluster.spec.instance_groups.iter().map(|g| g.desired.unwrap_or(g.min_size)).sum();
    let mut ctx = tera::Context::new();
    ctx.insert(
        "cluster",
        &json!({
            "name": cluster.metadata.name,
            "region": cluster.spec.cloud.region,
            "stateStore": cluster.spec.state_store,
            "etcdBackups": cluster.spec.etcd.backups,
            "kubernetesVersion": cluster.spec.kubernetes_version,
            "owner": cluster.spec.owner,
            "nodes": nodes,
            "podCidr": cluster.spec.network.pod_cidr.to_string(),
            "serviceCidr": cluster.spec.network.service_cidr.to_string(),
            "vpcCidr": cluster.spec.network.vpc_cidr.to_string(),
            "labels": cluster.metadata.labels,
            // The whole definition (extends merged), as JSON (valid YAML),
            // for addons that run pinfleet against this cluster.
            "definition": standalone(cluster),
        }),
    );
    // The builds that track the cluster's minor (the versions table's).
    let minor = crate::spec::validate::parse_kubernetes_version(&cluster.spec.kubernetes_version)
        .and_then(|(_, m, _)| crate::spec::versions::minor(m));
    ctx.insert(
        "kubernetes",
        &json!({
            "version": cluster.spec.kubernetes_version,
            "minor": minor.map(|m| m.minor),
            "cloudController": minor.map(|m| m.cloud_controller),
            "clusterAutoscaler": minor.map(|m| m.cluster_autoscaler),
            "coredns": minor.map(|m| m.coredns),
            "etcd": crate::spec::validate::parse_kubernetes_version(&cluster.spec.kubernetes_version)
                .and_then(|(_, m, p)| crate::spec::versions::minor(m).map(|row| row.etcd_at(p))),
        }),
    );
    // Image volumes (kubeadm's etcd image mounted for its binaries) are on
    // by default from 1.35.
    ctx.insert("etcdImageVolume", &minor.is_some_and(|m| m.minor >= 35));
    ctx.insert("addon", &json!({"name": meta.name, "version": meta.version, "namespace": meta.namespace}));
    ctx.insert("values", &s.values);
    ctx
}

/// Renders the selected addons in order. Every problem in every addon is
/// reported together, with file and line, and nothing is returned then.
pub fn render(cluster: &Cluster, selected: &[Selected]) -> Result<Vec<RenderedAddon>, AddonErrors> {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    let mut seen: BTreeMap<ObjectKey, String> = BTreeMap::new();
    for s in selected {
        let meta = &s.package.meta;
        let ctx = template_context(cluster, s);
        let mut objects: Vec<Object> = Vec::new();
        for m in &s.package.manifests {
            let shown = m.path.display().to_string();
            let mut tera = tera::Tera::default();
            let text = tera.add_raw_template(&shown, &m.text).and_then(|_| tera.render(&shown, &ctx));
            let text = match text {
                Ok(t) => t,
                Err(e) => {
                    errors.push(err(&meta.name, Some(shown.clone()), tera_message(&e)));
                    continue;
                }
            };
            let docs = match yaml::parse_documents(&text, &m.path) {
                Ok(d) => d,
                Err(e) => {
                    errors.push(err(&meta.name, Some(e.loc.to_string()), e.message));
                    continue;
                }
            };
            for doc in docs.into_iter().filter(|d| !d.is_null()) {
                match object(&doc, &meta.namespace) {
                    Ok(mut o) => {
                        label(&mut o.value, &meta.name, &meta.version);
                        if let Some(other) = seen.insert(o.key.clone(), meta.name.clone()) {
                            errors.push(err(
                                &meta.name,
                                Some(doc.loc.to_string()),
                                format!("{} is also rendered by addon {other}", o.key),
                            ));
                        }
                        objects.push(o);
                    }
                    Err((loc, msg)) => errors.push(err(&meta.name, Some(loc.to_string()), msg)),
                }
            }
        }
        objects.sort_by_key(|o| kind_rank(&o.key.kind));
        let readiness = meta
            .readiness
            .iter()
            .map(|r| Readiness {
                namespace: match r.kind {
                    ReadyKind::CustomResourceDefinition => None,
                    _ => Some(r.namespace.clone().unwrap_or_else(|| meta.namespace.clone())),
                },
                ..r.clone()
            })
            .collect();
        out.push(RenderedAddon {
            name: meta.name.clone(),
            version: meta.version.clone(),
            namespace: meta.namespace.clone(),
            roll_nodes: meta.roll_nodes,
            depends_on: meta.depends_on.clone(),
            readiness,
            objects,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(AddonErrors(errors))
    }
}

/// Tera's message with its causes (the line of a template error is in them).
fn tera_message(e: &tera::Error) -> String {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// Checks one YAML document is a Kubernetes object and fills in its namespace.
fn object(doc: &yaml::Node, default_ns: &str) -> Result<Object, (Loc, String)> {
    let field =
        |path: &str| path.split('.').try_fold(doc, |n, k| n.get(k)).and_then(|n| n.as_str().map(str::to_string));
    let api_version = field("apiVersion").ok_or((doc.loc.clone(), "the object has no apiVersion".to_string()))?;
    let kind = field("kind").ok_or((doc.loc.clone(), "the object has no kind".to_string()))?;
    let name = field("metadata.name").ok_or((doc.loc.clone(), format!("the {kind} has no metadata.name")))?;
    let mut value = doc.to_json();
    if !value.is_object() {
        return Err((doc.loc.clone(), "a manifest document must be a mapping".into()));
    }
    let namespace = if cluster_scoped(&kind) {
        if let Some(ns) = field("metadata.namespace") {
            return Err((
                doc.locate("metadata.namespace"),
                format!("{kind} is cluster-scoped but names namespace {ns}"),
            ));
        }
        String::new()
    } else {
        let ns = field("metadata.namespace").unwrap_or_else(|| default_ns.to_string());
        value["metadata"]["namespace"] = Value::String(ns.clone());
        ns
    };
    typed_check(&kind, &value).map_err(|(path, e)| {
        let loc = if path.is_empty() { doc.loc.clone() } else { doc.locate(&path) };
        let at = if path.is_empty() { String::new() } else { format!(" at {path}") };
        (loc, format!("{kind} {name}{at}: {e}"))
    })?;
    Ok(Object { key: ObjectKey { api_version, kind, namespace, name }, source: Some(doc.loc.clone()), value })
}

/// Reads well-known kinds into their k8s-openapi types, so a wrong type
/// (a string where a number goes, a map for a list) is caught here and
/// not by the API server halfway through an install.
fn typed_check(kind: &str, v: &Value) -> Result<(), (String, String)> {
    use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core, policy::v1 as policy};
    use k8s_openapi::api::{rbac::v1 as rbac, scheduling::v1 as scheduling};
    fn check<T: serde::de::DeserializeOwned>(v: &Value) -> Result<(), (String, String)> {
        serde_path_to_error::deserialize::<_, T>(v).map(|_| ()).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." { String::new() } else { path };
            (path, e.into_inner().to_string())
        })
    }
    match kind {
        "Deployment" => check::<apps::Deployment>(v),
        "DaemonSet" => check::<apps::DaemonSet>(v),
        "StatefulSet" => check::<apps::StatefulSet>(v),
        "Job" => check::<batch::Job>(v),
        "CronJob" => check::<batch::CronJob>(v),
        "Service" => check::<core::Service>(v),
        "ConfigMap" => check::<core::ConfigMap>(v),
        "Secret" => check::<core::Secret>(v),
        "ServiceAccount" => check::<core::ServiceAccount>(v),
        "Namespace" => check::<core::Namespace>(v),
        "ClusterRole" => check::<rbac::ClusterRole>(v),
        "ClusterRoleBinding" => check::<rbac::ClusterRoleBinding>(v),
        "Role" => check::<rbac::Role>(v),
        "RoleBinding" => check::<rbac::RoleBinding>(v),
        "PodDisruptionBudget" => check::<policy::PodDisruptionBudget>(v),
        "PriorityClass" => check::<scheduling::PriorityClass>(v),
        "CustomResourceDefinition" => {
            check::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(v)
        }
        _ => Ok(()),
    }
}

/// Adds the inventory labels.
fn label(v: &mut Value, addon: &str, version: &str) {
    let meta = v["metadata"].as_object_mut().expect("checked: metadata is a map");
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if !labels.is_object() {
        *labels = json!({});
    }
    let labels = labels.as_object_mut().expect("just made a map");
    labels.insert(ADDON_LABEL.into(), addon.into());
    labels.insert(VERSION_LABEL.into(), version.into());
    labels.insert(MANAGED_BY_LABEL.into(), "pinfleet".into());
}

/// The Namespace objects the set needs (each addon's target namespace),
/// labelled as pinfleet's but with no addon label: several addons share
/// one, and namespaces are never pruned with an addon.
pub fn namespaces(addons: &[RenderedAddon]) -> Vec<Value> {
    let names: BTreeSet<&str> = addons.iter().map(|a| a.namespace.as_str()).collect();
    names
        .into_iter()
        .map(|n| {
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": n, "labels": {MANAGED_BY_LABEL: "pinfleet"}}})
        })
        .collect()
}
