//! The Pod Security Standards (pure): a pod — every container, init
//! container and sidecar — judged by the levels of the Kubernetes Pod
//! Security Standards, with the standard's own check names. Two users: the
//! gateway judges the pods the controller will create for a submission
//! (the first line), and the sim's API server enforces a namespace's
//! `pod-security.kubernetes.io/enforce` label on pods, as a real API
//! server's Pod Security admission does (the second line).
//!
//! ```text
//! rendered children (workloads::render) / a pod written to the API
//!     │ pod templates: Deployment, StatefulSet, Job, CronJob; a Pod
//!     ▼
//! check(level) ─► [Violation { check, detail, at }]  (none: the pod may run)
//! ``` The rules follow the standard's
//! definitions (kubernetes.io/docs/concepts/security/pod-security-standards,
//! policy version "latest"); the check names are Pod Security admission's.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Unrestricted: only a platform admin's policy grants it.
    Privileged,
    /// Prevents known privilege escalations (the platform's default).
    #[default]
    Baseline,
    /// Hardened: runs as non-root, drops every capability, seccomp on.
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    pub fn parse(s: &str) -> Result<Level, String> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err(format!("{s:?}: not a Pod Security level (privileged, baseline, restricted)")),
        }
    }
}

/// Every check name, baseline's then restricted's (as Pod Security admission names them).
pub const BASELINE_CHECKS: &[&str] = &[
    "hostProcess",
    "host namespaces",
    "privileged",
    "non-default capabilities",
    "hostPath volumes",
    "hostPort",
    "forbidden AppArmor profile",
    "seLinuxOptions",
    "procMount",
    "seccompProfile",
    "forbidden sysctls",
];
pub const RESTRICTED_CHECKS: &[&str] = &[
    "restricted volume types",
    "allowPrivilegeEscalation != false",
    "runAsNonRoot != true",
    "runAsUser=0",
    "seccompProfile",
    "unrestricted capabilities",
];

/// Where in the pod a violation is: the pod's spec, or one container.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum At {
    /// A field of the pod's spec (`hostNetwork`, `volumes[2]`).
    Pod(String),
    /// A field of the named container (`securityContext.privileged`).
    Container(String, String),
}

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The standard's check name ("privileged", "hostPath volumes").
    pub check: &'static str,
    /// What, as Pod Security admission says it.
    pub detail: String,
    pub at: Vec<At>,
}

/// The baseline level's capabilities a container may add.
const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The sysctls the baseline level allows.
const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The volume types the restricted level allows.
const RESTRICTED_VOLUMES: &[&str] =
    &["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"];

/// The SELinux types the baseline level allows.
const SELINUX_TYPES: &[&str] = &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"];

fn quote(names: &[String]) -> String {
    names.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
}

fn containers_word(n: usize) -> &'static str {
    if n == 1 {
        "container"
    } else {
        "containers"
    }
}

/// Every container of the pod: init containers (native sidecars among
/// them), containers, ephemeral containers.
fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|f| spec.get(*f).and_then(Value::as_array).into_iter().flatten())
        .collect()
}

fn name_of(c: &Value) -> String {
    c.get("name").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn sc<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    v.get("securityContext").and_then(|s| s.get(field)).filter(|x| !x.is_null())
}

/// Collects, for each container failing `bad`, its name and the field.
fn per_container(spec: &Value, field: &str, mut bad: impl FnMut(&Value) -> bool) -> (Vec<String>, Vec<At>) {
    let mut names = Vec::new();
    let mut at = Vec::new();
    for c in containers(spec) {
        if bad(c) {
            let n = name_of(c);
            at.push(At::Container(n.clone(), field.to_string()));
            names.push(n);
        }
    }
    (names, at)
}

/// A check of one field of each container: `containers "a", "b" RULE`,
/// at each failing container's field.
fn container_check(
    out: &mut Vec<Violation>,
    spec: &Value,
    check: &'static str,
    field: &str,
    rule: &str,
    bad: impl FnMut(&Value) -> bool,
) {
    let (names, at) = per_container(spec, field, bad);
    if !names.is_empty() {
        out.push(Violation::new(check, format!("{} {} {rule}", containers_word(names.len()), quote(&names)), at));
    }
}

/// Judges a pod (`metadata` for its annotations, `spec`) at `level`:
/// every check that fails, in the standard's order.
pub fn check(metadata: &Value, spec: &Value, level: Level) -> Vec<Violation> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    type Check = fn(&Value, &Value, Level, &mut Vec<Violation>);
    const BASELINE: &[Check] = &[
        host_process,
        host_namespaces,
        privileged,
        capabilities_baseline,
        host_path,
        host_ports,
        app_armor,
        se_linux,
        proc_mount,
        seccomp,
        sysctls,
    ];
    const RESTRICTED: &[Check] = &[volume_types, privilege_escalation, non_root, capabilities_restricted];
    for c in BASELINE {
        c(metadata, spec, level, &mut out);
    }
    if level == Level::Restricted {
        for c in RESTRICTED {
            c(metadata, spec, level, &mut out);
        }
        // As Pod Security admission does: a restricted check replaces the
        // baseline check it tightens (restricted volume types for hostPath
        // volumes, unrestricted capabilities for non-default ones).
        out.retain(|v| v.check != "hostPath volumes" && v.check != "non-default capabilities");
    }
    // In the order Pod Security admission reports them: by check id.
    out.sort_by_key(|v| check_id(v.check));
    out
}

/// Pod Security admission's id of a check (its reports are in this order).
fn check_id(check: &str) -> &'static str {
    match check {
        "allowPrivilegeEscalation != false" => "allowPrivilegeEscalation",
        "forbidden AppArmor profile" => "appArmorProfile",
        "non-default capabilities" => "capabilities_baseline",
        "unrestricted capabilities" => "capabilities_restricted",
        "host namespaces" => "hostNamespaces",
        "hostPath volumes" => "hostPathVolumes",
        "hostPort" => "hostPorts",
        "hostProcess" => "hostProcess",
        "privileged" => "privileged",
        "procMount" => "procMount",
        "restricted volume types" => "restrictedVolumes",
        "runAsNonRoot != true" => "runAsNonRoot",
        "runAsUser=0" => "runAsUser",
        "seLinuxOptions" => "seLinuxOptions",
        "seccompProfile" => "seccompProfile",
        "forbidden sysctls" => "sysctls",
        _ => "~",
    }
}

impl Violation {
    fn new(check: &'static str, detail: String, at: Vec<At>) -> Violation {
        Violation { check, detail, at }
    }
}

/// What a container adds to its capabilities.
fn added(c: &Value) -> Vec<String> {
    c.pointer("/securityContext/capabilities/add")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// The pod's volumes.
fn volumes(spec: &Value) -> Vec<&Value> {
    spec.get("volumes").and_then(Value::as_array).into_iter().flatten().collect()
}

/// hostProcess (Windows).
fn host_process(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let pod_host_process = spec.pointer("/securityContext/windowsOptions/hostProcess") == Some(&Value::Bool(true));
    let (names, mut at) = per_container(spec, "securityContext.windowsOptions.hostProcess", |c| {
        c.pointer("/securityContext/windowsOptions/hostProcess") == Some(&Value::Bool(true))
    });
    if pod_host_process || !names.is_empty() {
        if pod_host_process {
            at.insert(0, At::Pod("securityContext.windowsOptions.hostProcess".into()));
        }
        push(
            "hostProcess",
            "pod and containers must not set securityContext.windowsOptions.hostProcess=true".into(),
            at,
        );
    }
}

/// Host namespaces.
fn host_namespaces(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let set: Vec<&str> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|f| spec.get(*f) == Some(&Value::Bool(true)))
        .collect();
    if !set.is_empty() {
        push(
            "host namespaces",
            set.iter().map(|f| format!("{f}=true")).collect::<Vec<_>>().join(", "),
            set.iter().map(|f| At::Pod(f.to_string())).collect(),
        );
    }
}

/// Privileged containers.
fn privileged(_: &Value, spec: &Value, _: Level, out: &mut Vec<Violation>) {
    container_check(
        out,
        spec,
        "privileged",
        "securityContext.privileged",
        "must not set securityContext.privileged=true",
        |c| sc(c, "privileged") == Some(&Value::Bool(true)),
    );
}

/// Capabilities beyond the baseline set.
fn capabilities_baseline(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let mut forbidden: BTreeSet<String> = BTreeSet::new();
    let (names, at) = per_container(spec, "securityContext.capabilities.add", |c| {
        let extra: Vec<String> =
            added(c).into_iter().filter(|a| !BASELINE_CAPABILITIES.contains(&a.as_str())).collect();
        let bad = !extra.is_empty();
        forbidden.extend(extra);
        bad
    });
    if !names.is_empty() {
        let caps: Vec<String> = forbidden.into_iter().collect();
        push(
            "non-default capabilities",
            format!(
                "{} {} must not include {} in securityContext.capabilities.add",
                containers_word(names.len()),
                quote(&names),
                quote(&caps)
            ),
            at,
        );
    }
}

/// hostPath volumes.
fn host_path(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let volumes = volumes(spec);
    let mut host_paths = Vec::new();
    let mut at = Vec::new();
    for (i, v) in volumes.iter().enumerate() {
        if v.get("hostPath").is_some_and(|h| !h.is_null()) {
            host_paths.push(name_of(v));
            at.push(At::Pod(format!("volumes[{i}].hostPath")));
        }
    }
    if !host_paths.is_empty() {
        let word = if host_paths.len() == 1 { "volume" } else { "volumes" };
        push("hostPath volumes", format!("{word} {}", quote(&host_paths)), at);
    }
}

/// Host ports.
fn host_ports(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let mut ports: BTreeSet<i64> = BTreeSet::new();
    let (names, at) = per_container(spec, "ports", |c| {
        let used: Vec<i64> = c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("hostPort").and_then(Value::as_i64))
            .filter(|p| *p != 0)
            .collect();
        let bad = !used.is_empty();
        ports.extend(used);
        bad
    });
    if !names.is_empty() {
        let ports: Vec<String> = ports.iter().map(i64::to_string).collect();
        push(
            "hostPort",
            format!(
                "{} {} {} hostPort {}",
                containers_word(names.len()),
                quote(&names),
                if names.len() == 1 { "uses" } else { "use" },
                ports.join(", ")
            ),
            at,
        );
    }
}

/// AppArmor: only the runtime's default or a localhost profile.
fn app_armor(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let apparmor_bad =
        |v: Option<&Value>| v.and_then(|p| p.get("type")).and_then(Value::as_str).is_some_and(|t| t == "Unconfined");
    let mut bad_apparmor: Vec<At> = Vec::new();
    if apparmor_bad(spec.pointer("/securityContext/appArmorProfile")) {
        bad_apparmor.push(At::Pod("securityContext.appArmorProfile.type".into()));
    }
    bad_apparmor.extend(
        per_container(spec, "securityContext.appArmorProfile.type", |c| apparmor_bad(sc(c, "appArmorProfile"))).1,
    );
    for (k, v) in metadata.get("annotations").and_then(Value::as_object).into_iter().flatten() {
        if k.starts_with("container.apparmor.security.beta.kubernetes.io/")
            && v.as_str().is_some_and(|v| v != "runtime/default" && !v.starts_with("localhost/"))
        {
            bad_apparmor.push(At::Pod(format!("metadata.annotations[{k}]")));
        }
    }
    if !bad_apparmor.is_empty() {
        push("forbidden AppArmor profile", "the profile must be RuntimeDefault or Localhost".into(), bad_apparmor);
    }
}

/// SELinux: only the container types, and no user or role.
fn se_linux(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let selinux_bad = |o: Option<&Value>| {
        o.is_some_and(|o| {
            let t = o.get("type").and_then(Value::as_str).unwrap_or_default();
            !SELINUX_TYPES.contains(&t)
                || o.get("user").is_some_and(|u| !u.is_null())
                || o.get("role").is_some_and(|r| !r.is_null())
        })
    };
    let mut at = Vec::new();
    if selinux_bad(spec.pointer("/securityContext/seLinuxOptions")) {
        at.push(At::Pod("securityContext.seLinuxOptions".into()));
    }
    at.extend(per_container(spec, "securityContext.seLinuxOptions", |c| selinux_bad(sc(c, "seLinuxOptions"))).1);
    if !at.is_empty() {
        push("seLinuxOptions", "the type must be a container type, with no user or role".into(), at);
    }
}

/// /proc mount.
fn proc_mount(_: &Value, spec: &Value, _: Level, out: &mut Vec<Violation>) {
    let rule = "must not set securityContext.procMount to \"Unmasked\"";
    container_check(out, spec, "procMount", "securityContext.procMount", rule, |c| {
        sc(c, "procMount").and_then(Value::as_str).is_some_and(|p| p != "Default")
    });
}

/// Seccomp: never Unconfined (baseline); RuntimeDefault or Localhost, set (restricted).
fn seccomp(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let seccomp = |v: Option<&Value>| v.and_then(|p| p.get("type")).and_then(Value::as_str).map(str::to_string);
    let pod_seccomp = seccomp(spec.pointer("/securityContext/seccompProfile"));
    let allowed = |t: &str| t == "RuntimeDefault" || t == "Localhost";
    let mut at = Vec::new();
    let mut unset = Vec::new();
    if pod_seccomp.as_deref() == Some("Unconfined") {
        at.push(At::Pod("securityContext.seccompProfile.type".into()));
    }
    for c in containers(spec) {
        match seccomp(sc(c, "seccompProfile")) {
            Some(t) if t == "Unconfined" => {
                at.push(At::Container(name_of(c), "securityContext.seccompProfile.type".into()))
            }
            Some(t) if level == Level::Restricted && !allowed(&t) => {
                at.push(At::Container(name_of(c), "securityContext.seccompProfile.type".into()))
            }
            Some(_) => {}
            None if level == Level::Restricted && !pod_seccomp.as_deref().is_some_and(allowed) => {
                unset.push(name_of(c))
            }
            None => {}
        }
    }
    if !at.is_empty() || !unset.is_empty() {
        let detail = if unset.is_empty() {
            "pod and containers must not set securityContext.seccompProfile.type to \"Unconfined\"".to_string()
        } else {
            format!(
                "pod or {} {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_word(unset.len()),
                quote(&unset)
            )
        };
        if !unset.is_empty() {
            at.push(At::Pod("securityContext.seccompProfile".into()));
        }
        push("seccompProfile", detail, at);
    }
}

/// Sysctls.
fn sysctls(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let bad: Vec<String> = spec
        .pointer("/securityContext/sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.get("name").and_then(Value::as_str))
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .map(str::to_string)
        .collect();
    if !bad.is_empty() {
        push("forbidden sysctls", bad.join(", "), vec![At::Pod("securityContext.sysctls".into())]);
    }
}

/// Volume types.
fn volume_types(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let mut names = Vec::new();
    let mut types: BTreeSet<String> = BTreeSet::new();
    let mut at = Vec::new();
    for (i, v) in volumes(spec).iter().enumerate() {
        let kinds: Vec<&String> =
            v.as_object().into_iter().flatten().filter(|(k, _)| k.as_str() != "name").map(|(k, _)| k).collect();
        let restricted: Vec<&&String> = kinds.iter().filter(|k| !RESTRICTED_VOLUMES.contains(&k.as_str())).collect();
        if !restricted.is_empty() {
            names.push(name_of(v));
            types.extend(restricted.iter().map(|k| k.to_string()));
            at.push(At::Pod(format!("volumes[{i}]")));
        }
    }
    if !names.is_empty() {
        let types: Vec<String> = types.into_iter().collect();
        let (word, verb) = if names.len() == 1 { ("volume", "uses") } else { ("volumes", "use") };
        push(
            "restricted volume types",
            format!(
                "{word} {} {verb} restricted volume type{} {}",
                quote(&names),
                if types.len() == 1 { "" } else { "s" },
                quote(&types)
            ),
            at,
        );
    }
}

/// Privilege escalation.
fn privilege_escalation(_: &Value, spec: &Value, _: Level, out: &mut Vec<Violation>) {
    let (check, field) = ("allowPrivilegeEscalation != false", "securityContext.allowPrivilegeEscalation");
    container_check(out, spec, check, field, "must set securityContext.allowPrivilegeEscalation=false", |c| {
        sc(c, "allowPrivilegeEscalation") != Some(&Value::Bool(false))
    });
}

/// Non-root.
fn non_root(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let pod_non_root = spec.pointer("/securityContext/runAsNonRoot").and_then(Value::as_bool);
    let (names, at) =
        per_container(spec, "securityContext.runAsNonRoot", |c| match sc(c, "runAsNonRoot").and_then(Value::as_bool) {
            Some(v) => !v,
            None => pod_non_root != Some(true),
        });
    let pod_false = pod_non_root == Some(false);
    if !names.is_empty() || pod_false {
        let mut at = at;
        if pod_false || pod_non_root.is_none() {
            at.insert(0, At::Pod("securityContext.runAsNonRoot".into()));
        }
        push(
            "runAsNonRoot != true",
            format!(
                "pod or {} {} must set securityContext.runAsNonRoot=true",
                containers_word(names.len()),
                quote(&names)
            ),
            at,
        );
    }
    let mut at = Vec::new();
    if spec.pointer("/securityContext/runAsUser").and_then(Value::as_i64) == Some(0) {
        at.push(At::Pod("securityContext.runAsUser".into()));
    }
    at.extend(
        per_container(spec, "securityContext.runAsUser", |c| sc(c, "runAsUser").and_then(Value::as_i64) == Some(0)).1,
    );
    if !at.is_empty() {
        push("runAsUser=0", "pod and containers must not set runAsUser=0".into(), at);
    }
}

/// Capabilities: drop ALL, add at most NET_BIND_SERVICE.
fn capabilities_restricted(metadata: &Value, spec: &Value, level: Level, out: &mut Vec<Violation>) {
    let _ = (metadata, level);
    let mut push = |check: &'static str, detail: String, at: Vec<At>| out.push(Violation::new(check, detail, at));
    let drops_all = |c: &Value| {
        c.pointer("/securityContext/capabilities/drop")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|x| x.as_str() == Some("ALL")))
    };
    let (no_drop, mut at) = per_container(spec, "securityContext.capabilities.drop", |c| !drops_all(c));
    let mut extra: BTreeSet<String> = BTreeSet::new();
    let (adding, at_add) = per_container(spec, "securityContext.capabilities.add", |c| {
        let bad: Vec<String> = added(c).into_iter().filter(|a| a != "NET_BIND_SERVICE").collect();
        let b = !bad.is_empty();
        extra.extend(bad);
        b
    });
    at.extend(at_add);
    if !no_drop.is_empty() || !adding.is_empty() {
        let mut parts = Vec::new();
        if !no_drop.is_empty() {
            parts.push(format!(
                "{} {} must set securityContext.capabilities.drop=[\"ALL\"]",
                containers_word(no_drop.len()),
                quote(&no_drop)
            ));
        }
        if !adding.is_empty() {
            let extra: Vec<String> = extra.into_iter().collect();
            parts.push(format!(
                "{} {} must not include {} in securityContext.capabilities.add",
                containers_word(adding.len()),
                quote(&adding),
                quote(&extra)
            ));
        }
        push("unrestricted capabilities", parts.join("; "), at);
    }
}

/// The pods a workload's children will create: each child's pod template
/// (`spec.template`, a CronJob's `spec.jobTemplate.spec.template`), with
/// the child's kind and name.
pub fn pod_templates(children: &[Value]) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    for c in children {
        let kind = c.get("kind").and_then(Value::as_str).unwrap_or_default();
        let name = c.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        for p in ["/spec/template", "/spec/jobTemplate/spec/template"] {
            if let Some(t) = c.pointer(p).filter(|t| t.get("spec").is_some()) {
                out.push((format!("{kind}/{name}"), t));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn checks(spec: Value, level: Level) -> Vec<&'static str> {
        check(&json!({}), &spec, level).iter().map(|v| v.check).collect()
    }

    fn restricted_ok() -> Value {
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
               "containers": [{"name": "app", "image": "x",
                  "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]})
    }

    #[test]
    fn a_plain_pod_is_baseline_and_a_hardened_one_restricted() {
        let plain = json!({"containers": [{"name": "app", "image": "x"}]});
        assert!(checks(plain.clone(), Level::Baseline).is_empty());
        assert_eq!(
            checks(plain, Level::Restricted),
            // In Pod Security admission's order (by check id), as a real v1.36 server reports them.
            [
                "allowPrivilegeEscalation != false",
                "unrestricted capabilities",
                "runAsNonRoot != true",
                "seccompProfile"
            ]
        );
        assert!(checks(restricted_ok(), Level::Restricted).is_empty());
        assert!(checks(restricted_ok(), Level::Baseline).is_empty());
    }

    /// The pod the issue ran on a member: every way to own the node, each
    /// named by its check, with the containers and volumes it concerns.
    #[test]
    fn the_node_owning_pod_fails_every_check_it_touches() {
        let spec = json!({
            "hostNetwork": true, "hostPID": true, "hostIPC": true,
            "securityContext": {"runAsUser": 0},
            "initContainers": [{"name": "setup", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}],
            "containers": [{"name": "app", "image": "x", "securityContext": {"privileged": true},
                            "ports": [{"containerPort": 80, "hostPort": 80}],
                            "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]
        });
        let v = check(&json!({}), &spec, Level::Baseline);
        let got: Vec<(&str, &str)> = v.iter().map(|v| (v.check, v.detail.as_str())).collect();
        assert_eq!(
            got,
            [
                (
                    "non-default capabilities",
                    "container \"setup\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add"
                ),
                ("host namespaces", "hostNetwork=true, hostPID=true, hostIPC=true"),
                ("hostPath volumes", "volume \"root\""),
                ("hostPort", "container \"app\" uses hostPort 80"),
                ("privileged", "container \"app\" must not set securityContext.privileged=true"),
            ]
        );
        assert_eq!(v[4].at, [At::Container("app".into(), "securityContext.privileged".into())]);
        assert_eq!(v[2].at, [At::Pod("volumes[0].hostPath".into())]);
        // Restricted replaces the baseline checks it tightens, as a real server does.
        let r = checks(spec, Level::Restricted);
        assert!(r.contains(&"runAsUser=0") && r.contains(&"restricted volume types"), "{r:?}");
        assert!(!r.contains(&"hostPath volumes") && !r.contains(&"non-default capabilities"), "{r:?}");
        assert!(check(&json!({}), &json!({"hostNetwork": true, "containers": []}), Level::Privileged).is_empty());
    }

    #[test]
    fn allowed_values_pass_and_the_rest_fail() {
        let with_sc = |sc: Value| json!({"containers": [{"name": "a", "image": "x", "securityContext": sc}]});
        assert!(checks(with_sc(json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"]}})), Level::Baseline)
            .is_empty());
        assert!(checks(with_sc(json!({"procMount": "Default"})), Level::Baseline).is_empty());
        assert_eq!(checks(with_sc(json!({"procMount": "Unmasked"})), Level::Baseline), ["procMount"]);
        assert_eq!(
            checks(with_sc(json!({"seccompProfile": {"type": "Unconfined"}})), Level::Baseline),
            ["seccompProfile"]
        );
        assert_eq!(checks(with_sc(json!({"seLinuxOptions": {"type": "spc_t"}})), Level::Baseline), ["seLinuxOptions"]);
        assert!(checks(with_sc(json!({"seLinuxOptions": {"type": "container_t", "level": "s0:c1"}})), Level::Baseline)
            .is_empty());
        assert_eq!(checks(with_sc(json!({"windowsOptions": {"hostProcess": true}})), Level::Baseline), ["hostProcess"]);
        assert_eq!(
            checks(with_sc(json!({"appArmorProfile": {"type": "Unconfined"}})), Level::Baseline),
            ["forbidden AppArmor profile"]
        );
        let sysctl = |n: &str| json!({"securityContext": {"sysctls": [{"name": n, "value": "1"}]}, "containers": [{"name": "a", "image": "x"}]});
        assert!(checks(sysctl("net.ipv4.tcp_syncookies"), Level::Baseline).is_empty());
        assert_eq!(checks(sysctl("kernel.msgmax"), Level::Baseline), ["forbidden sysctls"]);
        // Restricted: a container may add NET_BIND_SERVICE only, and must drop ALL.
        let mut s = restricted_ok();
        s["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["NET_BIND_SERVICE"]);
        assert!(checks(s.clone(), Level::Restricted).is_empty());
        s["containers"][0]["securityContext"]["capabilities"]["add"] = json!(["CHOWN"]);
        assert_eq!(checks(s, Level::Restricted), ["unrestricted capabilities"]);
        let mut s = restricted_ok();
        s["volumes"] =
            json!([{"name": "c", "configMap": {"name": "c"}}, {"name": "n", "nfs": {"server": "s", "path": "/"}}]);
        let v = check(&json!({}), &s, Level::Restricted);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].check, v[0].detail.as_str()),
            ("restricted volume types", "volume \"n\" uses restricted volume type \"nfs\"")
        );
    }

    #[test]
    fn pod_templates_are_found_in_every_child_that_makes_pods() {
        let children = vec![
            json!({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": []}}}}),
            json!({"kind": "CronJob", "metadata": {"name": "c"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}),
            json!({"kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": []}}),
        ];
        let got: Vec<String> = pod_templates(&children).into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, ["Deployment/d", "CronJob/c"]);
    }
}
