//! The pure translation: a workload CR + the runtime-support profile →
//! native objects, with runtime support injected into every pod template.
//! No IO and no clock: the controller applies what this returns.
//!
//! Injected into each pod: the `platform-init` init container (renders
//! configTemplates into a shared volume, fetches dependencies), native
//! sidecars (init containers with `restartPolicy: Always`, so batch pods
//! still complete) for identity, traffic (service kinds only: registers
//! podIP:port once ready, deregisters in preStop), logging and metrics;
//! platform env (PLATFORM_TEAM, PLATFORM_PROJECT, WORKLOAD_KIND,
//! WORKLOAD_NAME, CLUSTER, POD_IP, NODE_NAME; SHARD_INDEX/SHARD_COUNT for
//! sharded batch); ownership labels; default requests/limits; zone spread;
//! non-root security contexts; the priority class of the tier. The profile
//! version is an annotation on the pod template, so bumping it rolls pods.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::types::*;
use crate::accelerated::{Flavor, GPU, PRODUCT_LABEL};

/// Versioned runtime support, as the runtime-support addon publishes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeProfile {
    pub version: String,
    pub init_image: String,
    pub identity_image: String,
    pub traffic_image: String,
    pub logging_image: String,
    pub metrics_image: String,
    /// Service discovery ensemble the traffic sidecar registers with.
    pub zookeeper: String,
    pub default_requests: Resources,
    pub default_limits: Resources,
    pub sidecar_resources: Resources,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpu: String,
    pub memory: String,
}

impl RuntimeProfile {
    /// The profile shipped as the platform's default.
    pub fn default_profile(version: &str) -> Self {
        RuntimeProfile {
            version: version.into(),
            init_image: format!("ghcr.io/pinfleet/platform-init:{version}"),
            identity_image: format!("ghcr.io/pinfleet/identity-agent:{version}"),
            traffic_image: format!("ghcr.io/pinfleet/traffic-registrar:{version}"),
            logging_image: "cr.fluentbit.io/fluent/fluent-bit:3.2.2".into(),
            metrics_image: "quay.io/prometheus/node-exporter:v1.8.2".into(),
            zookeeper: "zk-0.zookeeper.platform:2181,zk-1.zookeeper.platform:2181,zk-2.zookeeper.platform:2181".into(),
            default_requests: Resources { cpu: "100m".into(), memory: "128Mi".into() },
            default_limits: Resources { cpu: "1".into(), memory: "512Mi".into() },
            sidecar_resources: Resources { cpu: "50m".into(), memory: "64Mi".into() },
        }
    }
}

/// Everything besides the CR that the translation depends on.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    pub cluster: String,
    pub profile: RuntimeProfile,
    /// Labels of the CR's namespace (privileged daemons need the infrastructure label).
    pub namespace_labels: BTreeMap<String, String>,
}

/// The namespace label that allows privileged or host-network daemons.
pub const INFRASTRUCTURE_LABEL: &str = "pinfleet.dev/infrastructure";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("{0}")]
    PolicyDenied(String),
    #[error("invalid spec: {0}")]
    Invalid(String),
}

/// Refuses children a real API server would refuse, with the rule and
/// the child named: derived names (`<name>-<role>`, a CronJob's 52
/// characters, label values of 63) can overflow for a long custom-resource
/// name, and the workload should say so in its status instead of meeting a
/// 422 on every retry.
fn checked(children: Vec<Value>) -> Result<Vec<Value>, RenderError> {
    use crate::kube::validation;
    let mut problems = Vec::new();
    for c in &children {
        let (group, _) = c["apiVersion"].as_str().unwrap_or_default().rsplit_once('/').unwrap_or(("", ""));
        let kind = c["kind"].as_str().unwrap_or_default();
        let errors = validation::validate(group, kind, c, None);
        if !errors.is_empty() {
            let name = c["metadata"]["name"].as_str().unwrap_or_default();
            problems.push(validation::invalid_message(kind, group, name, &errors));
        }
    }
    if problems.is_empty() {
        Ok(children)
    } else {
        Err(RenderError::Invalid(format!("a child would be refused by the API server: {}", problems.join("; "))))
    }
}

/// Which kind is rendered (for labels, env and injection choices).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Service,
    JobSet,
    CronJob,
    Daemon,
    TrainingJob,
    StatefulSet,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Service => "PinterestService",
            Kind::JobSet => "PinterestJobSet",
            Kind::CronJob => "PinterestCronJob",
            Kind::Daemon => "PinterestDaemon",
            Kind::TrainingJob => "PinterestTrainingJob",
            Kind::StatefulSet => "PinterestStatefulSet",
        }
    }
    fn serves_traffic(self) -> bool {
        matches!(self, Kind::Service | Kind::StatefulSet)
    }

    /// The kind a workload's `kind` names.
    pub fn of_name(name: &str) -> Option<Kind> {
        [Kind::Service, Kind::JobSet, Kind::CronJob, Kind::Daemon, Kind::TrainingJob, Kind::StatefulSet]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// The platform's containers a pod of this kind can have, whatever is
    /// turned off: the names `spec.runtime.overrides` may give resources
    /// to (a batch kind has no traffic sidecar).
    pub fn platform_containers(self) -> &'static [&'static str] {
        if self.serves_traffic() {
            &["platform-init", "identity", "traffic", "logging", "metrics"]
        } else {
            &["platform-init", "identity", "logging", "metrics"]
        }
    }

    fn batch(self) -> bool {
        matches!(self, Kind::JobSet | Kind::CronJob | Kind::TrainingJob)
    }
}

/// The platform's containers a pod of `kind` is given under `rt`, in
/// start order (as the render injects them): the overrides
/// that reach a pod are these containers'.
pub fn platform_containers_of(kind: Kind, rt: &Runtime) -> Vec<&'static str> {
    let mut out = vec!["platform-init"];
    if rt.identity.enabled {
        out.push("identity");
    }
    if rt.traffic.enabled && kind.serves_traffic() {
        out.push("traffic");
    }
    if rt.logging.enabled {
        out.push("logging");
    }
    if rt.metrics.enabled {
        out.push("metrics");
    }
    out
}

/// The identity of the CR being rendered.
#[derive(Debug, Clone)]
pub struct Workload<'a> {
    pub kind: Kind,
    pub name: &'a str,
    pub namespace: &'a str,
    pub uid: &'a str,
    pub common: &'a Common,
}

const NONROOT_UID: i64 = 65532;

/// An object built by moving values in (`json!` would serialize each
/// interpolated value again — a deep copy of every pod template).
fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn owner_reference(w: &Workload) -> Value {
    json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": w.kind.name(), "name": w.name, "uid": w.uid, "controller": true, "blockOwnerDeletion": true})
}

/// Labels for ownership, cost tracking and garbage collection.
pub fn labels(w: &Workload) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), w.name.to_string()),
        ("app.kubernetes.io/managed-by".into(), "pinfleet".into()),
        ("pinfleet.dev/team".into(), w.common.owner.team.clone()),
        ("pinfleet.dev/project".into(), w.common.owner.project.clone()),
        ("pinfleet.dev/kind".into(), w.kind.name().to_string()),
        ("pinfleet.dev/name".into(), w.name.to_string()),
    ])
}

/// The labels pods are selected by (stable across profile versions).
pub fn selector(w: &Workload) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), w.name.to_string()),
        ("pinfleet.dev/kind".into(), w.kind.name().to_string()),
    ])
}

fn meta(w: &Workload, name: &str) -> Value {
    let labels: serde_json::Map<String, Value> = labels(w).into_iter().map(|(k, v)| (k, Value::String(v))).collect();
    obj([
        ("name", name.into()),
        ("namespace", w.namespace.into()),
        ("labels", Value::Object(labels)),
        ("ownerReferences", Value::Array(vec![owner_reference(w)])),
    ])
}

fn injected_security() -> Value {
    json!({"runAsNonRoot": true, "runAsUser": NONROOT_UID, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}})
}

fn sidecar_resources(p: &RuntimeProfile, overrides: &BTreeMap<String, Value>, name: &str) -> Value {
    overrides.get(name).cloned().unwrap_or_else(|| {
        json!({"requests": {"cpu": p.sidecar_resources.cpu, "memory": p.sidecar_resources.memory}, "limits": {"memory": p.sidecar_resources.memory}})
    })
}

fn priority_class(tier: Tier) -> &'static str {
    match tier {
        Tier::Reserved => "platform-reserved",
        Tier::OnDemand => "platform-on-demand",
        Tier::Preemptible => "platform-preemptible",
    }
}

fn tier_name(tier: Tier) -> &'static str {
    match tier {
        Tier::Reserved => "Reserved",
        Tier::OnDemand => "OnDemand",
        Tier::Preemptible => "Preemptible",
    }
}

/// Batch sharding to wire into the pod's env.
#[derive(Debug, Clone, Copy)]
pub struct Sharding {
    pub count: i32,
}

/// The user's pod template with the runtime support injected.
pub fn inject(w: &Workload, ctx: &Context, sharding: Option<Sharding>, extra_env: &[Value]) -> Value {
    let mut t = serde_json::to_value(&w.common.template).unwrap_or_else(|_| json!({}));
    if !t.is_object() {
        t = json!({});
    }
    pod_metadata(w, ctx, &mut t);
    let mut spec = t.get_mut("spec").map(Value::take).filter(Value::is_object).unwrap_or_else(|| json!({}));
    user_containers(w, ctx, sharding, extra_env, &mut spec);
    let mut init = platform_containers(w, ctx);
    let mut existing_init: Vec<Value> =
        spec.get("initContainers").and_then(Value::as_array).cloned().unwrap_or_default();
    init.append(&mut existing_init);
    spec["initContainers"] = Value::Array(init);
    pod_defaults(w, &mut spec);
    // Metadata first, as people read manifests.
    obj([("metadata", t["metadata"].take()), ("spec", spec)])
}

/// Ownership labels and the profile version (a bump rolls pods); the
/// scrape annotations when metrics are on.
fn pod_metadata(w: &Workload, ctx: &Context, t: &mut Value) {
    let (p, rt) = (&ctx.profile, &w.common.runtime);
    let mut pod_labels = labels(w);
    if let Some(existing) = t.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in existing {
            pod_labels.entry(k.clone()).or_insert_with(|| v.as_str().unwrap_or_default().to_string());
        }
    }
    let profile_version = rt.version.clone().unwrap_or_else(|| p.version.clone());
    t["metadata"]["labels"] = json!(pod_labels);
    t["metadata"]["annotations"]["pinfleet.dev/runtime-profile"] = json!(profile_version);
    if rt.metrics.enabled {
        t["metadata"]["annotations"]["prometheus.io/scrape"] = json!("true");
        t["metadata"]["annotations"]["prometheus.io/port"] = json!(rt.metrics.port.unwrap_or(9090).to_string());
        t["metadata"]["annotations"]["prometheus.io/path"] =
            json!(rt.metrics.path.clone().unwrap_or_else(|| "/metrics".into()));
    }
}

/// Every user container: the platform's env and mounts, default requests
/// and a memory limit.
fn user_containers(w: &Workload, ctx: &Context, sharding: Option<Sharding>, extra_env: &[Value], spec: &mut Value) {
    let p = &ctx.profile;
    let mut env = vec![
        json!({"name": "PLATFORM_TEAM", "value": w.common.owner.team}),
        json!({"name": "PLATFORM_PROJECT", "value": w.common.owner.project}),
        json!({"name": "WORKLOAD_KIND", "value": w.kind.name()}),
        json!({"name": "WORKLOAD_NAME", "value": w.name}),
        json!({"name": "CLUSTER", "value": ctx.cluster}),
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
        json!({"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}),
    ];
    if let Some(s) = sharding {
        env.push(json!({"name": "SHARD_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}}));
        env.push(json!({"name": "SHARD_COUNT", "value": s.count.to_string()}));
    }
    env.extend(extra_env.iter().cloned());
    let mounts = vec![
        json!({"name": "platform-config", "mountPath": "/etc/platform", "readOnly": true}),
        json!({"name": "platform-logs", "mountPath": "/var/log/app"}),
    ];
    if let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) {
        for c in containers.iter_mut() {
            let existing: Vec<Value> = c.get("env").and_then(Value::as_array).cloned().unwrap_or_default();
            let mut merged = env.clone();
            merged.retain(|e| !existing.iter().any(|x| x["name"] == e["name"]));
            merged.extend(existing);
            c["env"] = Value::Array(merged);
            let mut vm: Vec<Value> = c.get("volumeMounts").and_then(Value::as_array).cloned().unwrap_or_default();
            for m in &mounts {
                if !vm.iter().any(|x| x["mountPath"] == m["mountPath"]) {
                    vm.push(m.clone());
                }
            }
            c["volumeMounts"] = Value::Array(vm);
            // Default requests where the user gave neither a request nor a
            // limit for the resource (as a LimitRange's defaultRequest does,
            // resource by resource; a limit alone becomes the request by the
            // API server's own defaulting): no container runs unaccounted.
            for (resource, default) in [("cpu", &p.default_requests.cpu), ("memory", &p.default_requests.memory)] {
                if c.pointer(&format!("/resources/requests/{resource}")).is_none()
                    && c.pointer(&format!("/resources/limits/{resource}")).is_none()
                {
                    c["resources"]["requests"][resource] = json!(default);
                }
            }
            if c.pointer("/resources/limits").is_none() {
                // The default limit, or the request where it asks for more
                // (a request above its limit is refused by the API server).
                let request = c.pointer("/resources/requests/memory").cloned();
                let above = request.as_ref().is_some_and(|r| {
                    let default = Value::String(p.default_limits.memory.clone());
                    matches!((crate::kube::quantity::bytes(r), crate::kube::quantity::bytes(&default)), (Ok(r), Ok(d)) if r > d)
                });
                c["resources"]["limits"] = match request {
                    Some(r) if above => json!({"memory": r}),
                    _ => json!({"memory": p.default_limits.memory}),
                };
            }
        }
    }
}

/// The init container and native sidecars, in start order.
fn platform_containers(w: &Workload, ctx: &Context) -> Vec<Value> {
    let (p, rt) = (&ctx.profile, &w.common.runtime);
    let mut init: Vec<Value> = Vec::new();
    let templates: Vec<String> = w.common.config_templates.iter().map(|c| c.name.clone()).collect();
    init.push(obj([
        ("name", "platform-init".into()),
        ("image", p.init_image.clone().into()),
        ("args", json!(["render", "--out=/etc/platform", format!("--templates={}", templates.join(","))])),
        ("env", json!([{"name": "WORKLOAD_NAME", "value": w.name}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}])),
        ("volumeMounts", json!([{"name": "platform-config", "mountPath": "/etc/platform"}, {"name": "platform-templates", "mountPath": "/etc/platform-templates", "readOnly": true}])),
        ("resources", sidecar_resources(p, &rt.overrides, "platform-init")),
        ("securityContext", injected_security()),
    ]));
    let sidecar = |name: &str, image: &str, extra: Value| -> Value {
        let mut c = obj([
            ("name", name.into()),
            ("image", image.into()),
            ("restartPolicy", "Always".into()),
            ("resources", sidecar_resources(p, &rt.overrides, name)),
            ("securityContext", injected_security()),
        ]);
        if let (Some(o), Value::Object(e)) = (c.as_object_mut(), extra) {
            o.extend(e);
        }
        c
    };
    if rt.identity.enabled {
        init.push(sidecar("identity", &p.identity_image, json!({
            "env": [{"name": "SPIFFE_ID", "value": format!("spiffe://{}/ns/{}/sa/{}", ctx.cluster, w.namespace, w.name)}],
            "volumeMounts": [{"name": "platform-identity", "mountPath": "/run/identity"}],
            "readinessProbe": {"exec": {"command": ["/identity-agent", "ready"]}, "periodSeconds": 5},
        })));
    }
    if rt.traffic.enabled && w.kind.serves_traffic() {
        let serviceset = rt.traffic.serviceset.clone().unwrap_or_else(|| format!("{}.{}", w.namespace, w.name));
        init.push(sidecar("traffic", &p.traffic_image, json!({
            "env": [{"name": "ZK_ENSEMBLE", "value": p.zookeeper}, {"name": "SERVICESET", "value": serviceset}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "lifecycle": {"preStop": {"exec": {"command": ["/traffic-registrar", "deregister"]}}},
        })));
    }
    if rt.logging.enabled {
        init.push(sidecar(
            "logging",
            &p.logging_image,
            json!({
                "args": ["--path=/var/log/app", format!("--tag={}.{}", w.common.owner.team, w.name)],
                "volumeMounts": [{"name": "platform-logs", "mountPath": "/var/log/app", "readOnly": true}],
            }),
        ));
    }
    if rt.metrics.enabled {
        init.push(sidecar(
            "metrics",
            &p.metrics_image,
            // At most 15 characters: a port name is an IANA service name.
            json!({"ports": [{"name": "pf-metrics", "containerPort": 9100}]}),
        ));
    }
    init
}

/// The platform's volumes and the pod's defaults: service account,
/// priority, security context, zone spread, a batch pod's restart policy.
fn pod_defaults(w: &Workload, spec: &mut Value) {
    let mut volumes: Vec<Value> = spec.get("volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    volumes.extend([
        json!({"name": "platform-config", "emptyDir": {}}),
        json!({"name": "platform-logs", "emptyDir": {}}),
        json!({"name": "platform-identity", "emptyDir": {"medium": "Memory"}}),
        json!({"name": "platform-templates", "configMap": {"name": format!("{}-config", w.name), "optional": true}}),
    ]);
    spec["volumes"] = Value::Array(volumes);
    if spec.get("serviceAccountName").is_none() {
        spec["serviceAccountName"] = json!(w.name);
    }
    spec["priorityClassName"] = json!(priority_class(w.common.tier));
    if spec.get("securityContext").is_none() {
        spec["securityContext"] = json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    }
    if !w.kind.batch() && w.kind != Kind::Daemon && spec.get("topologySpreadConstraints").is_none() {
        spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": selector(w)}}]);
    }
    if w.kind.batch() && spec.get("restartPolicy").is_none() {
        spec["restartPolicy"] = json!("Never");
    }
}

fn service_account(w: &Workload) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(w, w.name)})
}

fn config_map(w: &Workload) -> Option<Value> {
    let data: BTreeMap<String, String> =
        w.common.config_templates.iter().filter_map(|c| c.template.clone().map(|t| (c.name.clone(), t))).collect();
    (!w.common.config_templates.is_empty()).then(|| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(w, &format!("{}-config", w.name)), "data": data}))
}

fn base(w: &Workload) -> Vec<Value> {
    let mut out = vec![service_account(w)];
    out.extend(config_map(w));
    out
}

fn workload<'a>(kind: Kind, m: &'a kube::api::ObjectMeta, common: &'a Common) -> Result<Workload<'a>, RenderError> {
    Ok(Workload {
        kind,
        name: m.name.as_deref().ok_or_else(|| RenderError::Invalid("metadata.name is missing".into()))?,
        namespace: m.namespace.as_deref().unwrap_or("default"),
        uid: m.uid.as_deref().unwrap_or_default(),
        common,
    })
}

pub fn service(cr: &PinterestService, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(service_children(cr, ctx)?)
}

/// The children of [`service`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn service_children(cr: &PinterestService, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::Service, &cr.metadata, &s.common)?;
    let mut out = base(&w);
    let mut strategy = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 0}});
    if let Some(v) = &s.strategy.max_surge {
        strategy["rollingUpdate"]["maxSurge"] = v.clone();
    }
    if let Some(v) = &s.strategy.max_unavailable {
        strategy["rollingUpdate"]["maxUnavailable"] = v.clone();
    }
    let mut deploy_meta = meta(&w, w.name);
    if s.common.paused {
        deploy_meta["annotations"] = json!({"pinfleet.dev/paused": "true"});
    }
    out.push(obj([
        ("apiVersion", "apps/v1".into()),
        ("kind", "Deployment".into()),
        ("metadata", deploy_meta),
        (
            "spec",
            obj([
                ("replicas", s.replicas.into()),
                ("paused", s.common.paused.into()),
                ("selector", json!({"matchLabels": selector(&w)})),
                ("strategy", strategy),
                ("template", inject(&w, ctx, None, &[])),
            ]),
        ),
    ]));
    if !s.ports.is_empty() {
        let ports: Vec<Value> = s.ports.iter().map(|p| json!({"name": p.name, "port": p.port, "targetPort": p.target_port.clone().unwrap_or(json!(p.port)), "protocol": p.protocol})).collect();
        out.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(&w, w.name), "spec": {"selector": selector(&w), "ports": ports}}));
    }
    if let Some(ing) = &s.ingress {
        let port = s
            .ports
            .first()
            .map(|p| p.port)
            .ok_or_else(|| RenderError::Invalid("spec.ingress needs at least one port".into()))?;
        let paths: Vec<String> = if ing.paths.is_empty() { vec!["/".into()] } else { ing.paths.clone() };
        let rules: Vec<Value> = ing
            .hosts
            .iter()
            .map(|h| json!({"host": h, "http": {"paths": paths.iter().map(|p| json!({"path": p, "pathType": "Prefix", "backend": {"service": {"name": w.name, "port": {"number": port}}}})).collect::<Vec<_>>()}}))
            .collect();
        let mut spec = json!({"rules": rules});
        if let Some(c) = &ing.class_name {
            spec["ingressClassName"] = json!(c);
        }
        if ing.tls {
            spec["tls"] = json!([{"hosts": ing.hosts, "secretName": format!("{}-tls", w.name)}]);
        }
        out.push(json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta(&w, w.name), "spec": spec}));
    }
    if s.replicas > 1 {
        let max_unavailable = s.disruption.max_unavailable.clone().unwrap_or(json!(1));
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(&w, w.name), "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector(&w)}}}));
    }
    Ok(out)
}

fn claims(w: &Workload, templates: &[VolumeClaimTemplate], out: &mut Vec<Value>, pod: &mut Value) {
    let mut volumes: Vec<Value> = pod.pointer("/spec/volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    for vct in templates {
        match vct.scope {
            // One claim the CR owns, shared by every shard.
            ClaimScope::Shared => {
                let name = format!("{}-{}", w.name, vct.name);
                out.push(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(w, &name), "spec": vct.spec}));
                volumes.push(json!({"name": vct.name, "persistentVolumeClaim": {"claimName": name}}));
            }
            // A claim per pod, created and removed with it (generic ephemeral volume).
            ClaimScope::PerShard => volumes.push(json!({"name": vct.name, "ephemeral": {"volumeClaimTemplate": {"metadata": {"labels": labels(w)}, "spec": vct.spec}}})),
        }
    }
    pod["spec"]["volumes"] = Value::Array(volumes);
}

pub fn jobset(cr: &PinterestJobSet, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(jobset_children(cr, ctx)?)
}

/// The children of [`jobset`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn jobset_children(cr: &PinterestJobSet, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::JobSet, &cr.metadata, &s.common)?;
    let parallelism = s.parallelism.unwrap_or(s.shards);
    if parallelism > s.shards {
        return Err(RenderError::Invalid(format!("parallelism {parallelism} exceeds shards {}", s.shards)));
    }
    let mut out = base(&w);
    let mut pod = inject(&w, ctx, Some(Sharding { count: s.shards }), &[]);
    claims(&w, &s.volume_claim_templates, &mut out, &mut pod);
    let mut spec = obj([
        ("completionMode", "Indexed".into()),
        ("completions", s.shards.into()),
        ("parallelism", parallelism.into()),
        ("suspend", s.common.paused.into()),
        ("template", pod),
    ]);
    if let Some(b) = s.backoff_limit_per_index {
        spec["backoffLimitPerIndex"] = json!(b);
    }
    if let Some(d) = s.active_deadline_seconds {
        spec["activeDeadlineSeconds"] = json!(d);
    }
    if let Some(t) = s.ttl_seconds_after_finished {
        spec["ttlSecondsAfterFinished"] = json!(t);
    }
    out.push(obj([
        ("apiVersion", "batch/v1".into()),
        ("kind", "Job".into()),
        ("metadata", meta(&w, w.name)),
        ("spec", spec),
    ]));
    Ok(out)
}

pub fn cronjob(cr: &PinterestCronJob, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(cronjob_children(cr, ctx)?)
}

/// The children of [`cronjob`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn cronjob_children(cr: &PinterestCronJob, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::CronJob, &cr.metadata, &s.common)?;
    let mut out = base(&w);
    let shards = s.job.shards;
    let pod = inject(&w, ctx, shards.map(|count| Sharding { count }), &[]);
    let mut job = obj([("template", pod)]);
    if let Some(n) = shards {
        job["completionMode"] = json!("Indexed");
        job["completions"] = json!(n);
        job["parallelism"] = json!(n);
    }
    if let Some(b) = s.job.backoff_limit {
        job["backoffLimit"] = json!(b);
    }
    if let Some(d) = s.job.active_deadline_seconds {
        job["activeDeadlineSeconds"] = json!(d);
    }
    let policy = match s.concurrency_policy {
        ConcurrencyPolicy::Allow => "Allow",
        ConcurrencyPolicy::Forbid => "Forbid",
        ConcurrencyPolicy::Replace => "Replace",
    };
    let mut spec = obj([
        ("schedule", s.schedule.clone().into()),
        ("concurrencyPolicy", policy.into()),
        ("suspend", (s.suspend || s.common.paused).into()),
        ("jobTemplate", obj([("metadata", json!({"labels": labels(&w)})), ("spec", job)])),
    ]);
    if let Some(tz) = &s.time_zone {
        spec["timeZone"] = json!(tz);
    }
    if let Some(n) = s.successful_jobs_history_limit {
        spec["successfulJobsHistoryLimit"] = json!(n);
    }
    if let Some(n) = s.failed_jobs_history_limit {
        spec["failedJobsHistoryLimit"] = json!(n);
    }
    out.push(obj([
        ("apiVersion", "batch/v1".into()),
        ("kind", "CronJob".into()),
        ("metadata", meta(&w, w.name)),
        ("spec", spec),
    ]));
    Ok(out)
}

pub fn daemon(cr: &PinterestDaemon, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(daemon_children(cr, ctx)?)
}

/// The children of [`daemon`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn daemon_children(cr: &PinterestDaemon, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::Daemon, &cr.metadata, &s.common)?;
    if (s.privileged || s.host_network)
        && ctx.namespace_labels.get(INFRASTRUCTURE_LABEL).map(String::as_str) != Some("true")
    {
        return Err(RenderError::PolicyDenied(format!(
            "privileged or host-network daemons run only in namespaces labelled {INFRASTRUCTURE_LABEL}=true; {} is not",
            w.namespace
        )));
    }
    let mut out = base(&w);
    let mut pod = inject(&w, ctx, None, &[]);
    if !s.node_selector.is_empty() {
        pod["spec"]["nodeSelector"] = json!(s.node_selector);
    }
    // Infrastructure daemons run everywhere unless told otherwise.
    pod["spec"]["tolerations"] =
        if s.tolerations.is_empty() { json!([{"operator": "Exists"}]) } else { json!(s.tolerations) };
    if s.host_network {
        pod["spec"]["hostNetwork"] = json!(true);
        pod["spec"]["dnsPolicy"] = json!("ClusterFirstWithHostNet");
    }
    if s.privileged {
        if let Some(cs) = pod.pointer_mut("/spec/containers").and_then(Value::as_array_mut) {
            for c in cs {
                c["securityContext"]["privileged"] = json!(true);
            }
        }
        pod["spec"]["securityContext"] = json!({"seccompProfile": {"type": "RuntimeDefault"}});
    }
    let mut update = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}});
    if let Some(v) = &s.update_strategy.max_unavailable {
        update["rollingUpdate"]["maxUnavailable"] = v.clone();
    }
    if let Some(v) = &s.update_strategy.max_surge {
        update["rollingUpdate"]["maxSurge"] = v.clone();
    }
    out.push(obj([
        ("apiVersion", "apps/v1".into()),
        ("kind", "DaemonSet".into()),
        ("metadata", meta(&w, w.name)),
        (
            "spec",
            obj([("selector", json!({"matchLabels": selector(&w)})), ("updateStrategy", update), ("template", pod)]),
        ),
    ]));
    Ok(out)
}

/// Port the rendezvous listens on (PyTorch's MASTER_PORT, TensorFlow's gRPC port).
pub const RENDEZVOUS_PORT: i32 = 23456;

pub fn training(cr: &PinterestTrainingJob, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(training_children(cr, ctx)?)
}

/// The children of [`training`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn training_children(cr: &PinterestTrainingJob, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::TrainingJob, &cr.metadata, &s.common)?;
    let mut out = base(&w);
    // A headless Service gives every pod a stable name: <job>-<role>-<index>.<name>.
    out.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(&w, w.name),
        "spec": {"clusterIP": "None", "selector": selector(&w), "publishNotReadyAddresses": true, "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}]}}));
    let host = |role: &str, i: i32| format!("{}-{role}-{i}.{}", w.name, w.name);
    let world: i32 = s.roles.iter().map(|r| r.replicas).sum();
    let tf_cluster: BTreeMap<String, Vec<String>> = s
        .roles
        .iter()
        .map(|r| (r.name.clone(), (0..r.replicas).map(|i| format!("{}:{RENDEZVOUS_PORT}", host(&r.name, i))).collect()))
        .collect();
    let mut offset = 0;
    for role in &s.roles {
        let mut common = s.common.clone();
        if let Some(t) = &role.template {
            common.template = t.clone();
        }
        let rw = Workload { common: &common, ..w.clone() };
        let env: Vec<Value> = match s.framework {
            Framework::PyTorch => {
                let mut env = vec![
                    json!({"name": "MASTER_ADDR", "value": host(&s.roles[0].name, 0)}),
                    json!({"name": "MASTER_PORT", "value": RENDEZVOUS_PORT.to_string()}),
                    json!({"name": "WORLD_SIZE", "value": world.to_string()}),
                    json!({"name": "RANK_OFFSET", "value": offset.to_string()}),
                    json!({"name": "ROLE_INDEX", "value": "$(SHARD_INDEX)"}),
                ];
                // Env cannot add: RANK is exact only for the first role's
                // ranks (offset 0); later roles compute RANK_OFFSET + ROLE_INDEX.
                if offset == 0 {
                    env.push(json!({"name": "RANK", "value": "$(SHARD_INDEX)"}));
                }
                env
            }
            Framework::TensorFlow => vec![json!({"name": "TF_CONFIG", "value": format!(
                "{{\"cluster\":{},\"task\":{{\"type\":\"{}\",\"index\":$(SHARD_INDEX)}}}}",
                serde_json::to_string(&tf_cluster).unwrap_or_default(), role.name
            )})],
        };
        let mut pod = inject(&rw, ctx, Some(Sharding { count: role.replicas }), &env);
        pod["metadata"]["labels"]["pinfleet.dev/role"] = json!(role.name);
        pod["spec"]["subdomain"] = json!(w.name);
        if let Some(acc) = &s.accelerators {
            // Devices per worker pod (the CRD's word): on its first (main)
            // container only, so the pod asks `count`, not `count` per
            // container (a device is held by the container it is given to).
            if let Some(c) = pod.pointer_mut("/spec/containers/0") {
                c["resources"]["limits"][&acc.kind] = json!(acc.count);
                if c.pointer("/resources/requests").and_then(|r| r.get(&acc.kind)).is_some() {
                    c["resources"]["requests"][&acc.kind] = json!(acc.count);
                }
            }
            // Accelerated nodes are tainted with their device's resource
            // name (GPU instance groups: nvidia.com/gpu=present:NoSchedule),
            // tolerated here as the ExtendedResourceToleration plugin would.
            let tolerations = pod["spec"]["tolerations"].as_array().cloned().unwrap_or_default();
            let toleration = json!({"key": acc.kind, "operator": "Exists", "effect": "NoSchedule"});
            if !tolerations.contains(&toleration) {
                let mut t = tolerations;
                t.push(toleration);
                pod["spec"]["tolerations"] = json!(t);
            }
            if let Some(product) = &acc.product {
                let Some(flavor) = Flavor::product(product) else {
                    return Err(RenderError::Invalid(format!(
                        "spec.accelerators.product: {product:?} is not a GPU product (A100, H100, A10G, L4)"
                    )));
                };
                hold_to_product(&mut pod["spec"], flavor);
            }
        }
        let job_name = format!("{}-{}", w.name, role.name);
        let spec = obj([
            ("completionMode", "Indexed".into()),
            ("completions", role.replicas.into()),
            ("parallelism", role.replicas.into()),
            ("suspend", s.common.paused.into()),
            ("template", pod),
        ]);
        out.push(obj([
            ("apiVersion", "batch/v1".into()),
            ("kind", "Job".into()),
            ("metadata", meta(&w, &job_name)),
            ("spec", spec),
        ]));
        offset += role.replicas;
    }
    Ok(out)
}

/// Holds a pod spec to nodes of a GPU product: a required node affinity
/// on [`PRODUCT_LABEL`] `In` the product's values (added to every term:
/// terms are ORed), and a toleration of the GPU nodes' taint.
pub fn hold_to_product(spec: &mut Value, flavor: Flavor) {
    let expression = serde_json::json!({"key": PRODUCT_LABEL, "operator": "In", "values": flavor.product_labels()});
    let path = "/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    match spec.pointer_mut(path).and_then(Value::as_array_mut) {
        Some(terms) if !terms.is_empty() => {
            for t in terms {
                let mut e = t.get("matchExpressions").and_then(Value::as_array).cloned().unwrap_or_default();
                e.push(expression.clone());
                t["matchExpressions"] = Value::Array(e);
            }
        }
        _ => {
            spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] =
                serde_json::json!({"nodeSelectorTerms": [{"matchExpressions": [expression]}]});
        }
    }
    let toleration = serde_json::json!({"key": GPU, "operator": "Exists", "effect": "NoSchedule"});
    let mut tolerations = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    if !tolerations.contains(&toleration) {
        tolerations.push(toleration);
        spec["tolerations"] = Value::Array(tolerations);
    }
}

pub fn statefulset(cr: &PinterestStatefulSet, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    checked(statefulset_children(cr, ctx)?)
}

/// The children of [`statefulset`] before the API server's rules are checked
/// (the gateway checks them itself, to say which field of the workload is wrong).
pub fn statefulset_children(cr: &PinterestStatefulSet, ctx: &Context) -> Result<Vec<Value>, RenderError> {
    let s = &cr.spec;
    let w = workload(Kind::StatefulSet, &cr.metadata, &s.common)?;
    let mut out = base(&w);
    out.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(&w, w.name), "spec": {"clusterIP": "None", "selector": selector(&w), "ports": [{"name": "peer", "port": 7000}]}}));
    let pod = inject(&w, ctx, None, &[]);
    let claims: Vec<Value> = s
        .volume_claim_templates
        .iter()
        .map(|v| json!({"metadata": {"name": v.name, "labels": labels(&w)}, "spec": v.spec}))
        .collect();
    let policy = match s.pod_management_policy {
        PodManagementPolicy::OrderedReady => "OrderedReady",
        PodManagementPolicy::Parallel => "Parallel",
    };
    let mut update = json!({"type": "RollingUpdate", "rollingUpdate": {}});
    if let Some(p) = s.update_strategy.partition {
        update["rollingUpdate"]["partition"] = json!(p);
    }
    if let Some(m) = &s.update_strategy.max_unavailable {
        update["rollingUpdate"]["maxUnavailable"] = m.clone();
    }
    let spec = obj([
        ("replicas", s.replicas.into()),
        ("serviceName", w.name.into()),
        ("podManagementPolicy", policy.into()),
        ("updateStrategy", update),
        ("selector", json!({"matchLabels": selector(&w)})),
        ("template", pod),
        ("volumeClaimTemplates", Value::Array(claims)),
    ]);
    out.push(obj([
        ("apiVersion", "apps/v1".into()),
        ("kind", "StatefulSet".into()),
        ("metadata", meta(&w, w.name)),
        ("spec", spec),
    ]));
    if s.replicas > 1 {
        out.push(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(&w, w.name), "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(&w)}}}));
    }
    Ok(out)
}

/// The tier's PriorityClass name (the runtime-support addon creates them).
pub fn priority_class_for(tier: Tier) -> (&'static str, &'static str) {
    (tier_name(tier), priority_class(tier))
}
