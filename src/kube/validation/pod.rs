//! `pkg/apis/core/validation` for pods: a pod template, its spec (volumes,
//! container names unique across init, regular and ephemeral containers,
//! the restart policy its owner allows), and each container (ports,
//! environment, mounts, requests within limits, restart policy and probes).
//! The workload kinds (apps, batch) check their pod templates here.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::format::{dns1123_label, env_var_name, parse_quantity, port_name};
use super::meta::{annotations, labels};
use super::{entries, err, forbidden, invalid, items, not_supported, required, s, since, ErrorType, FieldError};

/// `claims` are the names of volumes the owner adds to every pod (a
/// StatefulSet's `volumeClaimTemplates`): the template's containers may mount them.
pub(super) fn pod_template(
    t: Option<&Value>,
    path: &str,
    restart: &[&str],
    claims: &BTreeSet<String>,
    e: &mut Vec<FieldError>,
) {
    let Some(t) = t.filter(|t| !t.is_null()) else {
        e.push(required(path, ""));
        return;
    };
    let m = t.get("metadata").unwrap_or(&Value::Null);
    labels(m.get("labels"), &format!("{path}.labels"), e);
    annotations(m.get("annotations"), &format!("{path}.annotations"), e);
    pod_spec(t.get("spec").unwrap_or(&Value::Null), &format!("{path}.spec"), restart, claims, e);
}

/// `ValidatePodSpec`, the parts workloads meet.
pub(super) fn pod_spec(spec: &Value, path: &str, restart: &[&str], claims: &BTreeSet<String>, e: &mut Vec<FieldError>) {
    // Volumes (`ValidateVolumes`).
    let mut volumes = BTreeSet::new();
    for (i, v) in items(spec.get("volumes")).iter().enumerate() {
        let p = format!("{path}.volumes[{i}]");
        let name = s(v, "/name").unwrap_or_default();
        if name.is_empty() {
            e.push(required(format!("{p}.name"), ""));
        } else {
            for msg in dns1123_label(name) {
                e.push(invalid(format!("{p}.name"), name, msg));
            }
            if !volumes.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
        if v.as_object().is_some_and(|o| o.keys().all(|k| k == "name")) {
            e.push(required(p, "must specify a volume type"));
        }
    }
    // What a container may mount: the pod's volumes and its owner's claims
    // (the StatefulSet controller adds a volume per claim template to each
    // pod, replacing a same-named one; a real server accepts such a mount).
    let mountable: BTreeSet<String> = volumes.union(claims).cloned().collect();
    // Container names are unique across init, regular and ephemeral
    // containers. From 1.36 the regular containers' names are taken first,
    // so a clash is reported on the init container (validateInitContainers).
    let mut names = BTreeSet::new();
    let groups = if since(36) {
        [("containers", false), ("initContainers", true), ("ephemeralContainers", false)]
    } else {
        [("initContainers", true), ("containers", false), ("ephemeralContainers", false)]
    };
    if items(spec.get("containers")).is_empty() {
        e.push(required(format!("{path}.containers"), ""));
    }
    for (field, init) in groups {
        for (i, c) in items(spec.get(field)).iter().enumerate() {
            let p = format!("{path}.{field}[{i}]");
            container(c, &p, init, field == "ephemeralContainers", &mountable, e);
            let name = s(c, "/name").unwrap_or_default();
            if !name.is_empty() && !names.insert(name.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{p}.name"), name, ""));
            }
        }
    }
    // The pod's restartPolicy (defaulted to Always), as the kind allows it.
    let policy = s(spec, "/restartPolicy").unwrap_or("Always");
    if !restart.contains(&policy) {
        e.push(not_supported(format!("{path}.restartPolicy"), policy, restart));
    }
}

/// `validateContainers` / `validateInitContainers` for one container.
fn container(c: &Value, p: &str, init: bool, ephemeral: bool, volumes: &BTreeSet<String>, e: &mut Vec<FieldError>) {
    let name = s(c, "/name").unwrap_or_default();
    if name.is_empty() {
        e.push(required(format!("{p}.name"), ""));
    } else {
        for msg in dns1123_label(name) {
            e.push(invalid(format!("{p}.name"), name, msg));
        }
    }
    if s(c, "/image").unwrap_or_default().trim().is_empty() {
        e.push(required(format!("{p}.image"), ""));
    }
    // Ports (`validateContainerPorts`): names unique within the container.
    let mut port_names = BTreeSet::new();
    for (i, port) in items(c.get("ports")).iter().enumerate() {
        let pp = format!("{p}.ports[{i}]");
        let pname = s(port, "/name").unwrap_or_default();
        if !pname.is_empty() {
            let msgs = port_name(pname);
            if !msgs.is_empty() {
                for msg in msgs {
                    e.push(invalid(format!("{pp}.name"), pname, msg));
                }
            } else if !port_names.insert(pname.to_string()) {
                e.push(err(ErrorType::Duplicate, format!("{pp}.name"), pname, ""));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64) {
            None | Some(0) => e.push(required(format!("{pp}.containerPort"), "")),
            Some(n) if !(1..=65535).contains(&n) => {
                e.push(invalid(format!("{pp}.containerPort"), n, "must be between 1 and 65535, inclusive"))
            }
            _ => {}
        }
        if let Some(h) = port.get("hostPort").and_then(Value::as_i64).filter(|h| *h != 0) {
            if !(1..=65535).contains(&h) {
                e.push(invalid(format!("{pp}.hostPort"), h, "must be between 1 and 65535, inclusive"));
            }
        }
        let proto = s(port, "/protocol").unwrap_or("TCP");
        if !["SCTP", "TCP", "UDP"].contains(&proto) {
            e.push(not_supported(format!("{pp}.protocol"), proto, &["SCTP", "TCP", "UDP"]));
        }
    }
    // Environment (`ValidateEnv`).
    for (i, env) in items(c.get("env")).iter().enumerate() {
        let n = s(env, "/name").unwrap_or_default();
        if n.is_empty() {
            e.push(required(format!("{p}.env[{i}].name"), ""));
        } else {
            for msg in env_var_name(n) {
                e.push(invalid(format!("{p}.env[{i}].name"), n, msg));
            }
        }
    }
    // Mounts name a volume of the pod (`ValidateVolumeMounts`).
    let mut paths = BTreeSet::new();
    for (i, m) in items(c.get("volumeMounts")).iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{i}]");
        let n = s(m, "/name").unwrap_or_default();
        if n.is_empty() {
            e.push(required(format!("{mp}.name"), ""));
        } else if !volumes.contains(n) {
            e.push(err(ErrorType::NotFound, format!("{mp}.name"), n, ""));
        }
        let path = s(m, "/mountPath").unwrap_or_default();
        if path.is_empty() {
            e.push(required(format!("{mp}.mountPath"), ""));
        } else if !paths.insert(path.to_string()) {
            e.push(invalid(format!("{mp}.mountPath"), path, "must be unique"));
        }
    }
    container_resources(c, p, e);
    // Restart policy and probes: a native sidecar is an init container with
    // restartPolicy Always; other init containers run to completion and may
    // have no probes or lifecycle hooks.
    let restart = s(c, "/restartPolicy");
    // ContainerRestartRules (on by default from 1.35): any container may say
    // Always, OnFailure or Never (validateContainerRestartPolicy).
    let rules = since(35);
    if init {
        match restart {
            Some(r) if rules && !["Always", "Never", "OnFailure"].contains(&r) => {
                e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always", "Never", "OnFailure"]))
            }
            Some(r) if !rules && r != "Always" => e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always"])),
            _ => {}
        }
        if restart != Some("Always") {
            for f in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if c.get(f).is_some_and(|v| !v.is_null()) {
                    e.push(forbidden(
                        format!("{p}.{f}"),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    } else if let (Some(r), false) = (restart, ephemeral) {
        if !rules {
            e.push(forbidden(format!("{p}.restartPolicy"), "may not be set for non-init containers"));
        } else if !["Always", "Never", "OnFailure"].contains(&r) {
            e.push(not_supported(format!("{p}.restartPolicy"), r, &["Always", "Never", "OnFailure"]));
        }
    }
}

/// A container's resources (`ValidateResourceRequirements`): requests
/// never above limits; extended resources integers that cannot be
/// overcommitted.
fn container_resources(c: &Value, p: &str, e: &mut Vec<FieldError>) {
    // Requests never above limits (`ValidateResourceRequirements`).
    let limits: BTreeMap<&String, f64> = entries(c.pointer("/resources/limits"))
        .into_iter()
        .filter_map(|(k, v)| parse_quantity(v).map(|q| (k, q)))
        .collect();
    // Extended resources are integers (`ValidateResourceQuantityValue`,
    // IsIntegerResourceName), checked in requests and limits alike.
    for which in ["requests", "limits"] {
        for (k, v) in entries(c.pointer(&format!("/resources/{which}"))) {
            if is_extended_resource(k) && parse_quantity(v).is_some_and(|q| q.fract() != 0.0) {
                e.push(invalid(format!("{p}.resources.{which}[{k}]"), shown_quantity(v), "must be an integer"));
            }
        }
    }
    for (k, v) in entries(c.pointer("/resources/requests")) {
        // Extended resources and hugepages cannot be overcommitted
        // (`IsOvercommitAllowed`): a request needs its limit, and equals it.
        if !overcommit_allowed(k) {
            match (parse_quantity(v), limits.get(k)) {
                (_, None) => e.push(required(
                    format!("{p}.resources.limits"),
                    "Limit must be set for non overcommitable resources",
                )),
                (Some(req), Some(lim)) if req != *lim => {
                    let key = k.replace('~', "~0").replace('/', "~1");
                    let limit = c.pointer(&format!("/resources/limits/{key}")).map(shown_quantity).unwrap_or_default();
                    e.push(invalid(
                        format!("{p}.resources.requests"),
                        shown_quantity(v),
                        format!("must be equal to {k} limit of {limit}"),
                    ));
                }
                _ => {}
            }
            continue;
        }
        if let (Some(req), Some(lim)) = (parse_quantity(v), limits.get(k)) {
            if req > *lim {
                let limit = c.pointer(&format!("/resources/limits/{k}")).map(shown_quantity).unwrap_or_default();
                // Reported at the requests map, not its key (as every
                // supported minor's `ValidateResourceRequirements` does).
                e.push(invalid(
                    format!("{p}.resources.requests"),
                    shown_quantity(v),
                    format!("must be less than or equal to {k} limit of {limit}"),
                ));
            }
        }
    }
}

/// A resource outside the `kubernetes.io` domain (`nvidia.com/gpu`), as
/// `IsExtendedResourceName` says.
pub fn is_extended_resource(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    !native && !name.starts_with("requests.")
}

/// `IsOvercommitAllowed`: native resources but hugepages.
pub fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

fn shown_quantity(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
