//! What a submission is, and every problem with it in one answer (pure).
//!
//! ```text
//! submitted workload + caller + policy
//!     │ layer 1, schema: the CRD's structural schema and its CEL rules
//!     │ layer 2, platform: the owner team is the caller's, known tier,
//!     │          images from allowed registries, a kind the gateway takes
//!     ▼
//! Intake { team, tier, demand, artifact, … }  or  [Problem { layer, field, message }]
//! ```
//!
//! Layers 3 (a server-side dry run on the member clusters it would land
//! on) and 4 (can the fleet ever hold it) need the world; the server adds
//! them.

use serde::Serialize;
use serde_json::Value;

use super::quota::Amount;
use crate::workloads::Tier;

/// One problem with a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// schema, platform, dry-run, capacity, request.
    pub layer: &'static str,
    /// Where in the submitted workload (`spec.replicas`), empty for the whole.
    pub field: String,
    pub message: String,
}

impl Problem {
    pub fn new(layer: &'static str, field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { layer, field: field.into(), message: message.into() }
    }
}

/// The platform's own rules.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Image registries workloads may pull from (`registry.example.com/`);
    /// empty: any.
    pub allowed_registries: Vec<String>,
}

/// Who is asking, as identity established it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Caller {
    pub user: String,
    pub teams: Vec<String>,
    pub admin: bool,
    /// oidc, serviceaccount, certificate, loopback.
    pub via: String,
}

impl Caller {
    pub fn may_act_for(&self, team: &str) -> bool {
        self.admin || self.teams.iter().any(|t| t == team)
    }
}

/// A submission that passed the gateway's own layers.
#[derive(Debug, Clone, PartialEq)]
pub struct Intake {
    pub workload: Value,
    pub kind: String,
    pub name: String,
    pub team: String,
    pub tier: Tier,
    /// Requests of one pod, and how many pods run at once.
    pub per_pod: Amount,
    pub pods: u64,
    pub demand: Amount,
    pub artifact: String,
    pub expected_seconds: Option<i64>,
}

pub const EXPECTED_DURATION: &str = "gateway.pinfleet.dev/expected-duration";

const KINDS: [&str; 5] =
    ["PinterestService", "PinterestJobSet", "PinterestCronJob", "PinterestTrainingJob", "PinterestStatefulSet"];

/// Each kind's schema, its CEL rules compiled, built once (generating the
/// CRDs and compiling their rules on every submission cost more than the
/// rest of the checks).
fn schema_of(kind: &str) -> Option<&'static crate::sim::schema::CrdSchema> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, crate::sim::schema::CrdSchema>> =
        std::sync::OnceLock::new();
    SCHEMAS
        .get_or_init(|| {
            crate::workloads::crds()
                .into_iter()
                .filter_map(|c| {
                    let v = serde_json::to_value(&c.spec.versions[0].schema).ok()?;
                    let schema = v.get("openAPIV3Schema").cloned()?;
                    Some((c.spec.names.kind.clone(), crate::sim::schema::CrdSchema::new(schema)))
                })
                .collect()
        })
        .get(kind)
}

/// Requests of one pod from a pod template: the runtime-support defaults
/// where a container gives none (as placement counts them).
fn pod_requests(template: &Value) -> Amount {
    let (cpu, mem) = crate::federation::fanout::replica_requests(&serde_json::json!({"template": template}));
    Amount::new(cpu, mem, 1)
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Checks a submitted workload for `caller`: every problem of layers 1
/// and 2 at once, or what the submission is.
pub fn check(workload: &Value, caller: &Caller, policy: &Policy) -> Result<Intake, Vec<Problem>> {
    let mut problems = Vec::new();
    let api = workload.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = workload.get("kind").and_then(Value::as_str).unwrap_or_default().to_string();
    if api != "pinfleet.dev/v1alpha1" {
        problems.push(Problem::new(
            "request",
            "apiVersion",
            format!("{api:?}: the gateway takes pinfleet.dev/v1alpha1 workloads"),
        ));
    }
    if kind == "PinterestDaemon" {
        problems.push(Problem::new(
            "platform",
            "kind",
            "a PinterestDaemon runs on every node of a cluster: the platform team installs daemons, the gateway does not place them",
        ));
    } else if !KINDS.contains(&kind.as_str()) {
        problems.push(Problem::new("request", "kind", format!("{kind:?}: expected one of {}", KINDS.join(", "))));
    }
    let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    if !dns_label(&name) {
        problems.push(Problem::new(
            "schema",
            "metadata.name",
            format!("{name:?}: a name is 1–63 lowercase letters, digits and '-', starting and ending with a letter or digit"),
        ));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    // Layer 1: the CRD's schema and its CEL rules.
    let schema = schema_of(&kind).expect("a CRD for every kind the gateway takes");
    let mut obj = workload.clone();
    match crate::sim::schema::validate(&schema.json, workload) {
        Ok(defaulted) => {
            obj = defaulted;
            if let Err(errs) = crate::sim::schema::validate_cel(schema, &obj, None) {
                problems.extend(errs.into_iter().map(|m| schema_problem(&m)));
            }
        }
        Err(errs) => problems.extend(errs.into_iter().map(|m| schema_problem(&m))),
    }
    // Layer 2: the platform's rules.
    let team = obj.pointer("/spec/owner/team").and_then(Value::as_str).unwrap_or_default().to_string();
    if !team.is_empty() && !caller.may_act_for(&team) {
        problems.push(Problem::new(
            "platform",
            "spec.owner.team",
            format!(
                "{team:?} is not a team of {} (theirs: {})",
                caller.user,
                if caller.teams.is_empty() { "none".to_string() } else { caller.teams.join(", ") }
            ),
        ));
    }
    if !team.is_empty() && !dns_label(&team) {
        problems.push(Problem::new(
            "platform",
            "spec.owner.team",
            format!("{team:?} is not a team name (a DNS label)"),
        ));
    }
    let tier = match obj.pointer("/spec/tier") {
        None | Some(Value::Null) => Tier::OnDemand,
        Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|_| {
            problems.push(Problem::new(
                "platform",
                "spec.tier",
                format!("{v}: not a tier (Reserved, OnDemand, Preemptible)"),
            ));
            Tier::OnDemand
        }),
    };
    let templates: Vec<(String, Value)> = match kind.as_str() {
        "PinterestTrainingJob" => obj
            .pointer("/spec/roles")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| {
                let t = r.get("template").filter(|t| !t.is_null()).or_else(|| obj.pointer("/spec/template"));
                (format!("spec.roles[{i}].template"), t.cloned().unwrap_or(Value::Null))
            })
            .collect(),
        _ => vec![("spec.template".to_string(), obj.pointer("/spec/template").cloned().unwrap_or(Value::Null))],
    };
    let mut artifact = String::new();
    for (at, t) in &templates {
        for (i, c) in t.pointer("/spec/containers").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
            if artifact.is_empty() {
                artifact = image.to_string();
            }
            if !policy.allowed_registries.is_empty()
                && !policy.allowed_registries.iter().any(|r| image.starts_with(r.as_str()))
            {
                problems.push(Problem::new(
                    "platform",
                    format!("{at}.spec.containers[{i}].image"),
                    format!("{image:?} is not from an allowed registry ({})", policy.allowed_registries.join(", ")),
                ));
            }
        }
    }
    let i = |p: &str| obj.pointer(p).and_then(Value::as_i64);
    let (per_pod, pods) = match kind.as_str() {
        "PinterestService" | "PinterestStatefulSet" => {
            (pod_requests(&templates[0].1), i("/spec/replicas").unwrap_or(1))
        }
        "PinterestJobSet" => {
            let shards = i("/spec/shards").unwrap_or(1);
            (pod_requests(&templates[0].1), i("/spec/parallelism").unwrap_or(shards).min(shards))
        }
        "PinterestCronJob" => (pod_requests(&templates[0].1), 1),
        _ => {
            // Training: every role's replicas, each with its own template.
            let mut total = Amount::default();
            let mut n = 0;
            for (r, (_, t)) in
                obj.pointer("/spec/roles").and_then(Value::as_array).into_iter().flatten().zip(&templates)
            {
                let reps = r.get("replicas").and_then(Value::as_i64).unwrap_or(1).max(0) as u64;
                total = total.plus(pod_requests(t).times(reps));
                n += reps;
            }
            let per = if n > 0 { Amount::new(total.cpu / n, total.memory / n, 1) } else { Amount::new(0, 0, 1) };
            (per, n as i64)
        }
    };
    let pods = pods.max(0) as u64;
    let expected_seconds = match obj.pointer(&format!("/metadata/annotations/{}", EXPECTED_DURATION.replace('/', "~1")))
    {
        Some(Value::String(s)) => match humantime::parse_duration(s) {
            Ok(d) => Some(d.as_secs() as i64),
            Err(e) => {
                problems.push(Problem::new(
                    "platform",
                    format!("metadata.annotations[{EXPECTED_DURATION}]"),
                    format!("{s:?}: {e}"),
                ));
                None
            }
        },
        _ => i("/spec/activeDeadlineSeconds"),
    };
    if !problems.is_empty() {
        return Err(problems);
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("namespace".into(), Value::String(team.clone()));
    }
    let demand = Amount::new(per_pod.cpu * pods, per_pod.memory * pods, pods);
    Ok(Intake { workload: obj, kind, name, team, tier, per_pod, pods, demand, artifact, expected_seconds })
}

/// `spec.replicas: Invalid value: …` → field and message.
fn schema_problem(m: &str) -> Problem {
    match m.split_once(": ") {
        Some((field, rest)) if !field.contains(' ') => Problem::new("schema", field.trim_start_matches('.'), rest),
        _ => Problem::new("schema", "", m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn alice() -> Caller {
        Caller { user: "alice".into(), teams: vec!["search".into()], admin: false, via: "oidc".into() }
    }

    fn service() -> Value {
        json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestService", "metadata": {"name": "web"},
            "spec": {"owner": {"team": "search", "project": "web"}, "replicas": 3,
                "template": {"spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1.2",
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}}})
    }

    #[test]
    fn a_service_asks_for_its_requests_times_its_replicas() {
        let i = check(&service(), &alice(), &Policy::default()).unwrap();
        assert_eq!(i.demand, Amount::new(1500, 3 << 30, 3));
        assert_eq!(
            (i.team.as_str(), i.tier, i.artifact.as_str()),
            ("search", Tier::OnDemand, "registry.example.com/web:1.2")
        );
        assert_eq!(i.workload["metadata"]["namespace"], "search");
    }

    #[test]
    fn every_problem_comes_back_at_once_with_its_field() {
        let mut w = service();
        w["spec"]["owner"]["team"] = json!("ads");
        w["spec"]["replicas"] = json!(-1);
        w["spec"]["template"]["spec"]["containers"][0]["image"] = json!("docker.io/web:latest");
        let policy = Policy { allowed_registries: vec!["registry.example.com/".into()] };
        let problems = check(&w, &alice(), &policy).unwrap_err();
        let fields: Vec<(&str, &str)> = problems.iter().map(|p| (p.layer, p.field.as_str())).collect();
        assert_eq!(
            fields,
            [
                ("schema", "spec.replicas"),
                ("platform", "spec.owner.team"),
                ("platform", "spec.template.spec.containers[0].image")
            ]
        );
        assert_eq!(problems[1].message, "\"ads\" is not a team of alice (theirs: search)");
    }

    #[test]
    fn daemons_and_unknown_kinds_are_refused_with_the_reason() {
        let mut w = service();
        w["kind"] = json!("PinterestDaemon");
        assert!(check(&w, &alice(), &Policy::default()).unwrap_err()[0]
            .message
            .contains("the platform team installs daemons"));
        w["kind"] = json!("Deployment");
        assert_eq!(check(&w, &alice(), &Policy::default()).unwrap_err()[0].field, "kind");
    }
}
