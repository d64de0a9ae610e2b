//! What a workload will really ask of a cluster (pure): the children the
//! controller's render makes from it, their pods counted, and each pod's
//! requests by Kubernetes' own rule. The gateway's quota counts this, so a
//! submission cannot be written to count less than what it runs.
//!
//! ```text
//! submitted workload (JSON, any quantity form)
//!     │ typed as the controller types it (serde, located errors)
//!     ▼ render::<kind>_children (the controller's own code)
//! children (Deployment, Job, CronJob, StatefulSet, …)
//!     │ pod templates × how many pods of each run at once
//!     ▼ effective request per pod (resourcehelper.PodRequests)
//! Demand { sets, cpu, memory, pods }  or  [Located { field, message }]
//! ```
//!
//! A pod's effective request is Kubernetes': the sum of its containers
//! and its restartable init containers (sidecars), or the largest a
//! one-shot init container needs while the sidecars started before it
//! run, whichever is more; plus the pod's overhead (its own, or its
//! RuntimeClass's). A request left out takes the limit's value, as the
//! API server defaults it. Pods at once: a Deployment's or StatefulSet's
//! replicas, a Job's parallelism (at most its completions), a CronJob's
//! Job times the runs that may be alive together (one under `Forbid` or
//! `Replace`; under `Allow`, as many as start within the Job's
//! `activeDeadlineSeconds`, and refused without one).
//!
//! A pod's GPUs are counted as the one product its scheduling terms can
//! land it on ([`product_of`]: terms that reach more than one, or a label
//! no node carries, are refused). [`pod_takes`] is the one reading of a
//! pod: admission counts templates with it, drift counts the pods that run
//! around the gateway with it (their GPUs as their node's product).

// Every count here is checked (a tenant's value must not wrap a demand).
// The tests beside the code may count as tests do; what ships may not.
#![cfg_attr(not(test), deny(clippy::arithmetic_side_effects))]

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::render::{self, Context, RenderError};
use crate::kube::quantity;

// Holding a pod to the product it is counted as is render's (the
// controller's render holds a training role to its product too).
pub use super::render::hold_to_product;
// The accelerators' vocabulary lives with the machines that carry them (a
// floor below the workloads); named here too, where the quota counts it.
pub use crate::accelerated::{Flavor, FLAVORS, GPU, NEURON, PRODUCT_LABEL};

/// A problem, at its field of the submitted workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Located {
    pub field: String,
    pub message: String,
}

impl Located {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Located {
        Located { field: field.into(), message: message.into() }
    }
}

fn no_accelerators(a: &[u64; 5]) -> bool {
    a.iter().all(|n| *n == 0)
}

/// What one pod reserves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Requests {
    /// Millicores.
    pub cpu: u64,
    /// Bytes.
    pub memory: u64,
    /// Devices of each [`Flavor`], in [`FLAVORS`]' order.
    #[serde(skip_serializing_if = "no_accelerators")]
    pub accelerators: [u64; 5],
}

impl Requests {
    pub fn accelerator(&self, f: Flavor) -> u64 {
        self.accelerators.get(f.index()).copied().unwrap_or_default()
    }

    fn zip(self, o: Requests, f: impl Fn(u64, u64) -> Option<u64>) -> Option<Requests> {
        let mut accelerators = [0u64; 5];
        for (i, a) in accelerators.iter_mut().enumerate() {
            *a = f(self.accelerators.get(i).copied()?, o.accelerators.get(i).copied()?)?;
        }
        Some(Requests { cpu: f(self.cpu, o.cpu)?, memory: f(self.memory, o.memory)?, accelerators })
    }

    /// Checked sum, resource by resource.
    pub fn checked_add(self, o: Requests) -> Option<Requests> {
        self.zip(o, u64::checked_add)
    }

    /// Sum that stops at the most there is, resource by resource.
    pub fn saturating_add(self, o: Requests) -> Requests {
        self.zip(o, |a, b| Some(a.saturating_add(b))).unwrap_or(self)
    }

    /// The larger of each resource.
    pub fn max(self, o: Requests) -> Requests {
        self.zip(o, |a, b| Some(a.max(b))).unwrap_or(self)
    }

    /// Checked product by a count of pods.
    pub fn checked_mul(self, n: u64) -> Option<Requests> {
        self.zip(self, |a, _| a.checked_mul(n))
    }
}

/// Whether a pod spec's containers ask for some of `resource` (requests or
/// limits): `nvidia.com/gpu: 0` asks for none (the scheduler gives it no
/// device), so it gets neither the GPU nodes' toleration nor their
/// selector. A value that is not a quantity counts as asking (its field
/// is refused elsewhere).
pub fn asks_for(spec: &Value, resource: &str) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        spec.get(*list).and_then(Value::as_array).into_iter().flatten().any(|c| {
            ["requests", "limits"]
                .iter()
                .any(|w| c.pointer(&format!("/resources/{w}")).and_then(|m| m.get(resource)).is_some_and(some_of))
        })
    })
}

/// Whether a resource quantity asks for more than nothing.
pub fn some_of(q: &Value) -> bool {
    quantity::cpu_millis(q).map_or(true, |m| m > 0)
}

/// The GPU product a pod can land on, from every scheduling term it has:
/// its `nodeSelector`'s [`PRODUCT_LABEL`] and each term of its required
/// node affinity. Terms are ORed, so a term that names no product reaches
/// nodes of every product: the pod's product is the one every term (or
/// the node selector) holds it to, and None when nothing names one (any
/// node). Refused at its field: a value no node carries (the quota would
/// count a product the pod never lands on), an operator other than `In`,
/// and terms that together reach nodes of more than one product (the
/// quota would count one and the scheduler run it on another).
pub fn product_of(spec: &Value, at: &str) -> Result<Option<Flavor>, Located> {
    let known = |field: &str, v: &str| -> Result<Flavor, Located> {
        Flavor::labelled(v).ok_or_else(|| {
            Located::new(
                field,
                format!(
                    "{:?}: no node carries this {PRODUCT_LABEL}, so the pod would wait for ever (the products known: {})",
                    crate::escape::escaped(v, false),
                    Flavor::known_labels()
                ),
            )
        })
    };
    let more_than_one = |field: String| {
        Located::new(field, "selects more than one GPU product: the quota counts a pod's GPUs as one product")
    };
    let selected = match spec.pointer(&format!("/nodeSelector/{}", PRODUCT_LABEL.replace('/', "~1"))) {
        Some(v) => Some(known(format!("{at}.nodeSelector[{PRODUCT_LABEL}]").as_str(), v.as_str().unwrap_or_default())?),
        None => None,
    };
    let terms_at =
        format!("{at}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
    let terms = spec
        .pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms")
        .and_then(Value::as_array);
    // Each term that can match a node, with the product it holds the pod
    // to (None: every product's nodes).
    let mut reach: Vec<(usize, Option<Flavor>)> = Vec::new();
    for (i, t) in terms.into_iter().flatten().enumerate() {
        let expressions = t.get("matchExpressions").and_then(Value::as_array);
        let fields = t.get("matchFields").and_then(Value::as_array);
        // A term without requirements matches no node (Kubernetes' rule).
        if expressions.is_none_or(Vec::is_empty) && fields.is_none_or(Vec::is_empty) {
            continue;
        }
        let mut term: Option<Flavor> = None;
        for (j, e) in expressions.into_iter().flatten().enumerate() {
            if e.get("key").and_then(Value::as_str) != Some(PRODUCT_LABEL) {
                continue;
            }
            let field = format!("{terms_at}[{i}].matchExpressions[{j}]");
            if e.get("operator").and_then(Value::as_str) != Some("In") {
                return Err(Located::new(
                    field,
                    format!(
                        "{PRODUCT_LABEL} is selected with In only (the quota counts the product the pod will run on)"
                    ),
                ));
            }
            for v in e.get("values").and_then(Value::as_array).into_iter().flatten() {
                let f = known(field.as_str(), v.as_str().unwrap_or_default())?;
                if term.is_some_and(|g| g != f) || selected.is_some_and(|g| g != f) {
                    return Err(more_than_one(field));
                }
                term = Some(f);
            }
        }
        reach.push((i, term));
    }
    if selected.is_some() {
        // The node selector holds every term to its product.
        return Ok(selected);
    }
    let Some((first, product)) = reach.iter().find_map(|(i, f)| f.map(|f| (*i, f))) else {
        return Ok(None);
    };
    for (i, f) in &reach {
        match f {
            Some(g) if *g != product => return Err(more_than_one(format!("{terms_at}[{i}]"))),
            Some(_) => {}
            None => {
                return Err(Located::new(
                    format!("{terms_at}[{i}]"),
                    format!(
                        "names no {PRODUCT_LABEL}, so it reaches nodes of every GPU product, while nodeSelectorTerms[{first}] selects {}: terms are ORed, the pod could run on another product than the one counted; name the same product (In) in every term",
                        product.short()
                    ),
                ))
            }
        }
    }
    Ok(Some(product))
}

/// Pods of one template that run at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodSet {
    /// `Deployment/web`.
    pub child: String,
    /// The workload's field the pods come from (`spec.template`).
    pub field: String,
    pub pods: u64,
    pub per_pod: Requests,
    /// Where its pods may land: the template's `nodeSelector` and required
    /// node affinity, as a pod (`{"spec": {…}}`) that
    /// [`crate::kube::scheduling::affinity_ok`] reads; Null when it has
    /// neither (any node).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub scheduling: Value,
}

/// The part of a pod template that says which nodes its pods may land
/// on (its node selector and required node affinity); Null when none.
pub fn scheduling_of(template: &Value) -> Value {
    let spec = template.get("spec").unwrap_or(&Value::Null);
    let selector = spec.get("nodeSelector").filter(|v| v.as_object().is_some_and(|o| !o.is_empty()));
    let required =
        spec.pointer("/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution").filter(|v| !v.is_null());
    if selector.is_none() && required.is_none() {
        return Value::Null;
    }
    let mut out = serde_json::json!({"spec": {}});
    if let Some(s) = selector {
        out["spec"]["nodeSelector"] = s.clone();
    }
    if let Some(r) = required {
        out["spec"]["affinity"] =
            serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": r}});
    }
    out
}

/// Everything a workload runs at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Demand {
    pub sets: Vec<PodSet>,
    pub cpu: u64,
    pub memory: u64,
    pub pods: u64,
    /// Devices of each [`Flavor`] at once, in [`FLAVORS`]' order.
    #[serde(skip_serializing_if = "no_accelerators")]
    pub accelerators: [u64; 5],
}

impl Demand {
    pub fn accelerator(&self, f: Flavor) -> u64 {
        self.accelerators.get(f.index()).copied().unwrap_or_default()
    }
}

/// No single workload may ask for more pods than this: past it the
/// submission is refused as a mistake, before any multiplication.
pub const MAX_PODS: u64 = 1_000_000;

/// The controller's children of a submitted workload, without the API
/// server's checks (the caller runs them, per minor): typed exactly as
/// the controller types the custom resource.
pub fn children(kind: &str, workload: &Value, ctx: &Context) -> Result<Vec<Value>, Vec<Located>> {
    fn typed<T: serde::de::DeserializeOwned>(w: &Value) -> Result<T, Vec<Located>> {
        serde_path_to_error::deserialize(w).map_err(|e| {
            let path = e.path().to_string();
            vec![Located::new(if path == "." { String::new() } else { path }, e.into_inner().to_string())]
        })
    }
    // Quantities first, where the user wrote them: typed, a wrong one would
    // be reported at the flattened spec, not at its field.
    let located = quantities(workload);
    if !located.is_empty() {
        return Err(located);
    }
    // Counts before anything is rendered: a render allocates per replica
    // (a training job names every peer), so a count past the bound is
    // refused before it can cost the gateway memory.
    let located = counts(workload);
    if !located.is_empty() {
        return Err(located);
    }
    let rendered = match kind {
        "PinterestService" => render::service_children(&typed(workload)?, ctx),
        "PinterestJobSet" => render::jobset_children(&typed(workload)?, ctx),
        "PinterestCronJob" => render::cronjob_children(&typed(workload)?, ctx),
        "PinterestDaemon" => render::daemon_children(&typed(workload)?, ctx),
        "PinterestTrainingJob" => render::training_children(&typed(workload)?, ctx),
        "PinterestStatefulSet" => render::statefulset_children(&typed(workload)?, ctx),
        other => return Err(vec![Located::new("kind", format!("{other:?} is not a platform workload"))]),
    };
    rendered.map_err(|e| match e {
        RenderError::Invalid(m) | RenderError::PolicyDenied(m) => vec![Located::new("spec", m)],
    })
}

/// The most replicas (shards, a training job's replicas of every role
/// together) one workload may ask for before it is rendered.
pub const MAX_COUNT: i64 = 100_000;

/// Each count of the workload within `0..=MAX_COUNT`, and a training job's
/// roles together too (checked sums: a total past i64 is past the bound).
fn counts(workload: &Value) -> Vec<Located> {
    let mut out = Vec::new();
    let mut check = |field: String, v: &Value| -> i64 {
        match v.as_i64() {
            Some(n) if (0..=MAX_COUNT).contains(&n) => n,
            _ if v.is_null() => 0,
            _ => {
                out.push(Located::new(field, format!("{v}: must be between 0 and {MAX_COUNT}")));
                0
            }
        }
    };
    for f in ["replicas", "shards", "parallelism"] {
        if let Some(v) = workload.pointer(&format!("/spec/{f}")) {
            check(format!("spec.{f}"), v);
        }
    }
    let mut total: Option<i64> = Some(0);
    for (i, r) in workload.pointer("/spec/roles").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Some(v) = r.get("replicas") {
            let n = check(format!("spec.roles[{i}].replicas"), v);
            total = total.and_then(|t| t.checked_add(n));
        }
    }
    if total.is_none_or(|t| t > MAX_COUNT) {
        out.push(Located::new("spec.roles", format!("the roles' replicas together: more than {MAX_COUNT}")));
    }
    out
}

/// Every quantity in the workload's pod templates that Kubernetes would
/// not read, at its field.
fn quantities(workload: &Value) -> Vec<Located> {
    let mut out = Vec::new();
    let mut templates = vec![("spec.template".to_string(), workload.pointer("/spec/template"))];
    for (i, r) in workload.pointer("/spec/roles").and_then(Value::as_array).into_iter().flatten().enumerate() {
        templates.push((format!("spec.roles[{i}].template"), r.get("template")));
    }
    for (at, t) in templates {
        let Some(spec) = t.and_then(|t| t.get("spec")) else { continue };
        let mut check = |field: String, q: &Value| {
            if let Err(e) = quantity::Quantity::from_json(q) {
                out.push(Located::new(field, e.to_string()));
            }
        };
        for list in ["containers", "initContainers"] {
            for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
                for which in ["requests", "limits"] {
                    for (r, q) in
                        c.pointer(&format!("/resources/{which}")).and_then(Value::as_object).into_iter().flatten()
                    {
                        check(format!("{at}.spec.{list}[{i}].resources.{which}.{r}"), q);
                    }
                }
            }
        }
        for (r, q) in spec.get("overhead").and_then(Value::as_object).into_iter().flatten() {
            check(format!("{at}.spec.overhead.{r}"), q);
        }
        for which in ["requests", "limits"] {
            for (r, q) in spec.pointer(&format!("/resources/{which}")).and_then(Value::as_object).into_iter().flatten()
            {
                check(format!("{at}.spec.resources.{which}.{r}"), q);
            }
        }
    }
    out
}

/// The API server's rules (as `minor` applies them) over every child,
/// each refusal at the workload's field it comes from.
pub fn refusals(workload: &Value, children: &[Value], minor: u32) -> Vec<Located> {
    use crate::kube::validation;
    let mut out = Vec::new();
    for c in children {
        let (group, _) = c["apiVersion"].as_str().unwrap_or_default().rsplit_once('/').unwrap_or(("", ""));
        let kind = c["kind"].as_str().unwrap_or_default();
        let name = c["metadata"]["name"].as_str().unwrap_or_default();
        if let Some(why) = validation::decode_error(c) {
            out.push(Located::new("", format!("{kind} {name:?}: {why}")));
        }
        for e in validation::validate_as(minor, group, kind, c, None) {
            let field = field_of(workload, c, &e.field);
            out.push(Located::new(field, format!("{kind} {name:?}: {}", e.body())));
        }
    }
    out.dedup();
    out
}

/// Where in a child its pod template is.
fn template_root(child: &Value) -> Option<&'static str> {
    match child["kind"].as_str()? {
        "Deployment" | "StatefulSet" | "Job" | "DaemonSet" => Some("spec.template"),
        "CronJob" => Some("spec.jobTemplate.spec.template"),
        _ => None,
    }
}

/// The workload's field of the pod template a child's pods come from.
fn template_field(workload: &Value, child: &Value) -> String {
    if workload["kind"] == "PinterestTrainingJob" {
        let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let child_name = child.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let role = child_name.strip_prefix(name).and_then(|r| r.strip_prefix('-')).unwrap_or_default();
        let roles = workload.pointer("/spec/roles").and_then(Value::as_array).cloned().unwrap_or_default();
        if let Some(i) = roles.iter().position(|r| r["name"] == role) {
            if roles[i].get("template").is_some_and(|t| !t.is_null()) {
                return format!("spec.roles[{i}].template");
            }
        }
    }
    "spec.template".into()
}

/// A child's field (`spec.template.spec.initContainers[6].name`) as the
/// workload's (`spec.template.spec.initContainers[1].name`): injected init
/// containers come first, so the user's are shifted by their number.
pub fn field_of(workload: &Value, child: &Value, field: &str) -> String {
    let Some(root) = template_root(child) else { return field.to_string() };
    let Some(rest) = field.strip_prefix(root) else { return field.to_string() };
    let at = template_field(workload, child);
    let user_template =
        workload.pointer(&format!("/{}", at.replace('.', "/").replace("roles[", "roles/").replace(']', "")));
    if let Some(after) = rest.strip_prefix(".spec.initContainers[") {
        if let Some((index, tail)) = after.split_once(']') {
            let k: usize = index.parse().unwrap_or(0);
            let total = child
                .pointer(&format!("/{}/spec/initContainers", root.replace('.', "/")))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let user = user_template
                .and_then(|t| t.pointer("/spec/initContainers"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let injected = total.saturating_sub(user);
            if k < injected {
                let name = child
                    .pointer(&format!("/{}/spec/initContainers/{k}/name", root.replace('.', "/")))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                return format!("spec.runtime ({name}, injected by the platform)");
            }
            return format!("{at}.spec.initContainers[{}]{tail}", k.saturating_sub(injected));
        }
    }
    format!("{at}{rest}")
}

/// A pod template's effective request (`resourcehelper.PodRequests`):
/// cpu and memory, and each accelerator flavor (an extended resource is an
/// integer whose request is its limit; its GPU product is the one the pod
/// can land on, [`product_of`]). Any other resource a container asks for
/// (another vendor's device, hugepages, ephemeral storage) is refused at
/// its field: the quota does not count it. Pod-level resources take cpu
/// and memory only, as the API server's do.
pub fn pod_requests(
    template: &Value,
    at: &str,
    overheads: Option<&BTreeMap<String, Requests>>,
) -> Result<Requests, Vec<Located>> {
    let (r, problems) = pod_takes(template, at, overheads, None);
    if problems.is_empty() {
        Ok(r)
    } else {
        Err(problems)
    }
}

/// What one pod takes — the one reading of a pod's requests that the
/// quota (admission, through [`pod_requests`]) and drift share — and
/// every problem with it; what can be counted is, whatever the problems.
/// `on`: the flavor of the node the pod runs on, when it runs there: its
/// GPUs are that node's product, whatever its terms select (a pod written
/// around the gateway is counted by where it runs).
pub fn pod_takes(
    template: &Value,
    at: &str,
    overheads: Option<&BTreeMap<String, Requests>>,
    on: Option<Flavor>,
) -> (Requests, Vec<Located>) {
    let mut problems = Vec::new();
    let spec = template.get("spec").unwrap_or(&Value::Null);
    let product = match on.filter(|f| *f != Flavor::Neuron) {
        Some(f) => Some(f),
        None => product_of(spec, &format!("{at}.spec")).unwrap_or_else(|l| {
            problems.push(l);
            None
        }),
    };
    let mut overflow = false;
    let mut add = |a: Requests, b: Requests| {
        a.checked_add(b).unwrap_or_else(|| {
            overflow = true;
            a.saturating_add(b)
        })
    };
    let mut sum = Requests::default();
    for (i, c) in spec.get("containers").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let r = container_takes(c, &format!("{at}.spec.containers[{i}]"), product, false, &mut problems);
        sum = add(sum, r);
    }
    let mut sidecars = Requests::default();
    let mut init_peak = Requests::default();
    for (i, c) in spec.get("initContainers").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let r = container_takes(c, &format!("{at}.spec.initContainers[{i}]"), product, false, &mut problems);
        let running = if c.get("restartPolicy").and_then(Value::as_str) == Some("Always") {
            sum = add(sum, r);
            sidecars = add(sidecars, r);
            sidecars
        } else {
            add(r, sidecars)
        };
        init_peak = init_peak.max(running);
    }
    let mut total = sum.max(init_peak);
    // Pod-level resources (PodLevelResources, on by default since 1.34):
    // where the pod names its own request (or a limit, which its request
    // defaults to), that is the pod's, never less than its containers'.
    if spec.get("resources").is_some_and(|r| !r.is_null()) {
        let pod = container_takes(spec, &format!("{at}.spec"), product, true, &mut problems);
        total = total.max(pod);
    }
    let mut overhead = Requests::default();
    if let Some(o) = spec.get("overhead").filter(|o| !o.is_null()) {
        overhead = container_takes(
            &serde_json::json!({"resources": {"requests": o}}),
            &format!("{at}.spec.overhead"),
            product,
            false,
            &mut problems,
        );
    } else if let Some(class) = spec.get("runtimeClassName").and_then(Value::as_str) {
        match overheads.map(|o| o.get(class)) {
            Some(Some(o)) => overhead = *o,
            Some(None) => problems.push(Located::new(
                format!("{at}.spec.runtimeClassName"),
                format!("RuntimeClass {class:?} not found on the member clusters: its pods would be refused"),
            )),
            None => {}
        }
    }
    total = add(total, overhead);
    if overflow {
        problems.insert(0, Located::new(format!("{at}.spec"), "the pod's requests add up to more than can be counted"));
    }
    (total, problems)
}

/// What one container asks (`pod_level`: the pod's own `resources`): cpu
/// and memory (a request left out is its limit's), and its devices as
/// `product` (GPUs) or Neuron; each problem at its field.
fn container_takes(
    c: &Value,
    field: &str,
    product: Option<Flavor>,
    pod_level: bool,
    problems: &mut Vec<Located>,
) -> Requests {
    let mut r = Requests::default();
    for (resource, milli) in [("cpu", true), ("memory", false)] {
        // A request left out is the limit's (the API server's defaulting).
        let (q, which) = match c.pointer(&format!("/resources/requests/{resource}")) {
            Some(q) => (Some(q), "requests"),
            None => (c.pointer(&format!("/resources/limits/{resource}")), "limits"),
        };
        let Some(q) = q else { continue };
        let n = if milli { quantity::cpu_millis(q) } else { quantity::bytes(q) };
        match n {
            Ok(n) if milli => r.cpu = n,
            Ok(n) => r.memory = n,
            Err(e) => problems.push(Located::new(format!("{field}.resources.{which}.{resource}"), e)),
        }
    }
    let mut names: Vec<(&String, &str)> = Vec::new();
    for which in ["limits", "requests"] {
        for k in
            c.pointer(&format!("/resources/{which}")).and_then(Value::as_object).into_iter().flatten().map(|(k, _)| k)
        {
            if k != "cpu" && k != "memory" && !names.iter().any(|(n, _)| *n == k) {
                names.push((k, which));
            }
        }
    }
    for (name, which) in names {
        let shown = crate::escape::escaped(name, false);
        if pod_level {
            // The API server takes cpu, memory (and hugepages) at the pod's
            // level: a device is a container's to ask for, and one asked
            // here would be counted by no container.
            problems.push(Located::new(
                format!("{field}.resources.{which}[{shown}]"),
                format!("Unsupported value: {shown:?}: pod-level resources take \"cpu\" and \"memory\" (ask for devices in a container's resources)"),
            ));
            continue;
        }
        // Zero of a device asks for none: nothing to count, no product.
        let asked = c.pointer(&format!("/resources/{which}")).and_then(|m| m.get(name.as_str()));
        if (name == GPU || name == NEURON) && asked.is_some_and(|q| !some_of(q)) {
            continue;
        }
        let flavor = match name.as_str() {
            GPU => match product {
                Some(p) => p,
                None => {
                    problems.push(Located::new(
                        format!("{field}.resources.limits[{shown}]"),
                        format!("{GPU} on a pod that names no GPU product: select one with nodeSelector {PRODUCT_LABEL} (the quota counts GPUs per product: A100, H100, A10G, L4)"),
                    ));
                    continue;
                }
            },
            NEURON => Flavor::Neuron,
            _ => {
                problems.push(Located::new(
                    format!("{field}.resources[{shown}]"),
                    format!("{shown:?} is not counted by the team's quota (cpu, memory, {GPU} per product, {NEURON}): not offered to submitted work"),
                ));
                continue;
            }
        };
        // Requests equal limits (the API server refuses otherwise, at the
        // child's field: `refusals`); the limit is what is counted, as a
        // request left out defaults to it.
        let Some(limit) = c.pointer(&format!("/resources/limits/{}", name.replace('~', "~0").replace('/', "~1")))
        else {
            problems.push(Located::new(
                format!("{field}.resources.limits"),
                "Required value: Limit must be set for non overcommitable resources",
            ));
            continue;
        };
        let at_limit = format!("{field}.resources.limits[{shown}]");
        match quantity::cpu_millis(limit) {
            Ok(m) if m % 1000 == 0 => {
                if let Some(slot) = r.accelerators.get_mut(flavor.index()) {
                    *slot = m / 1000;
                }
            }
            Ok(_) => problems.push(Located::new(at_limit, format!("Invalid value: {limit}: must be an integer"))),
            Err(e) => problems.push(Located::new(at_limit, e)),
        }
    }
    r
}

/// The longest run whose overlaps are counted (a leap year).
const MAX_RUN_SECONDS: i64 = 366 * 86_400;

/// How many pods of a child run at once, or why that cannot be bounded.
fn pods_at_once(child: &Value, workload: &Value) -> Result<u64, Located> {
    let n = |p: &str| child.pointer(p).and_then(Value::as_i64);
    let count = |v: Option<i64>, default: i64| u64::try_from(v.unwrap_or(default).max(0)).unwrap_or(0);
    Ok(match child["kind"].as_str().unwrap_or_default() {
        "Deployment" | "StatefulSet" => count(n("/spec/replicas"), 1),
        "Job" => job_pods(n("/spec/parallelism"), n("/spec/completions")),
        "CronJob" => {
            let job = job_pods(n("/spec/jobTemplate/spec/parallelism"), n("/spec/jobTemplate/spec/completions"));
            let policy = child.pointer("/spec/concurrencyPolicy").and_then(Value::as_str).unwrap_or("Allow");
            let runs = if policy == "Allow" {
                let schedule = child.pointer("/spec/schedule").and_then(Value::as_str).unwrap_or_default();
                let Some(deadline) = n("/spec/jobTemplate/spec/activeDeadlineSeconds").filter(|d| *d > 0) else {
                    return Err(Located::new(
                        "spec.concurrencyPolicy",
                        "Allow lets runs overlap without bound: give spec.job.activeDeadlineSeconds (runs alive at once are counted from it and the schedule) or use Forbid or Replace",
                    ));
                };
                // Past a year, the overlap cannot be counted (nor would such a
                // run be bounded in any useful sense).
                let Some(window) = chrono::Duration::try_seconds(deadline).filter(|_| deadline <= MAX_RUN_SECONDS)
                else {
                    return Err(Located::new(
                        "spec.job.activeDeadlineSeconds",
                        format!("{deadline}: with concurrencyPolicy Allow at most {MAX_RUN_SECONDS} (a year): runs alive at once are counted from it"),
                    ));
                };
                let s = crate::kube::cron::Schedule::parse(schedule)
                    .map_err(|e| Located::new("spec.schedule", format!("{schedule:?}: {e}")))?;
                s.most_in_window(window).max(1) as u64
            } else {
                1
            };
            let _ = workload;
            job.saturating_mul(runs)
        }
        // A daemon's pods follow the nodes; nothing the gateway places.
        _ => 0,
    })
}

/// A Job's pods at once: its parallelism (default 1), at most its completions.
fn job_pods(parallelism: Option<i64>, completions: Option<i64>) -> u64 {
    let p = parallelism.unwrap_or(1).max(0);
    let c = completions.unwrap_or(p).max(0);
    u64::try_from(p.min(c)).unwrap_or(0)
}

/// The demand of a workload from its children (see the module doc).
pub fn demand(
    workload: &Value,
    children: &[Value],
    overheads: Option<&BTreeMap<String, Requests>>,
) -> Result<Demand, Vec<Located>> {
    let mut problems = Vec::new();
    let mut out = Demand::default();
    for c in children {
        let Some(root) = template_root(c) else { continue };
        let at = template_field(workload, c);
        let pods = match pods_at_once(c, workload) {
            Ok(p) => p,
            Err(l) => {
                problems.push(l);
                continue;
            }
        };
        let template = c.pointer(&format!("/{}", root.replace('.', "/"))).unwrap_or(&Value::Null);
        let per_pod = match pod_requests(template, &at, overheads) {
            Ok(r) => r,
            Err(mut l) => {
                // Fields named by the workload's template, as the user wrote it.
                for p in &mut l {
                    p.field = field_of(workload, c, &p.field.replacen(&at, root, 1));
                }
                problems.append(&mut l);
                continue;
            }
        };
        let kind = c["kind"].as_str().unwrap_or_default();
        let name = c["metadata"]["name"].as_str().unwrap_or_default();
        out.sets.push(PodSet {
            child: format!("{kind}/{name}"),
            field: at,
            pods,
            per_pod,
            scheduling: scheduling_of(template),
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut pods: u64 = 0;
    for s in &out.sets {
        pods = pods.saturating_add(s.pods);
    }
    if pods > MAX_PODS {
        return Err(vec![Located::new(
            "spec",
            format!("{pods} pods at once: more than {MAX_PODS}, the most one workload may run"),
        )]);
    }
    let mut total = Requests::default();
    for s in &out.sets {
        match s.per_pod.checked_mul(s.pods).and_then(|r| total.checked_add(r)) {
            Some(t) => total = t,
            None => {
                return Err(vec![Located::new(
                    s.field.clone(),
                    format!("{} pods of {}: their requests add up to more than can be counted", s.pods, s.child),
                )])
            }
        }
    }
    out.cpu = total.cpu;
    out.memory = total.memory;
    out.accelerators = total.accelerators;
    out.pods = pods;
    Ok(out)
}

#[cfg(test)]
mod tests;
