//! What a submission is, and every problem with it in one answer (pure).
//!
//! ```text
//! submitted workload + caller + policy
//!     │ layer 1, schema: the CRD's structural schema and its CEL rules
//!     │ layer 2, platform: the owner team is the caller's, known tier,
//!     │          images from allowed registries, a kind the gateway takes
//!     │ layer 3, the children: the controller's own render of it under
//!     │          each member's runtime profile, checked by the API
//!     │          server's rules of each member's minor, its demand
//!     │          counted from those children (workloads::demand)
//!     ▼
//! Intake { team, tier, demand, artifact, … }  or  [Problem { layer, field, message }]
//! ```
//!
//! A server-side dry run of the children on the member clusters (once per
//! minor) and whether the fleet can ever hold it need the world; the
//! service adds them.

use serde::Serialize;
use serde_json::Value;

use super::quota::{Amount, Resource};
use crate::workloads::demand::{self, Demand, PodSet, Requests};
use crate::workloads::render::{self, RuntimeProfile};
use crate::workloads::Tier;

/// What the gateway knows of the members a workload may land on: the
/// runtime profiles their controllers render with, their minors, and
/// their RuntimeClasses' pod overheads (`None`: not known).
#[derive(Debug, Clone, Default)]
pub struct Members<'a> {
    /// Each member's runtime-support ConfigMap data (the controller picks
    /// the workload's pinned profile or the default from it).
    pub profiles: &'a [std::collections::BTreeMap<String, String>],
    pub minors: &'a [u32],
    pub overheads: Option<&'a std::collections::BTreeMap<String, Requests>>,
    /// The GPU products the submitting team's quota holds, in
    /// [`demand::FLAVORS`]' order (a training job that names none gets the first).
    pub gpu_products: &'a [demand::Flavor],
}

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
    /// The priority classes submitters choose from (empty: [`default_classes`]).
    pub priority_classes: Vec<PriorityClass>,
    /// The Pod Security Standards level each team's pods are held to.
    pub pod_security: PodSecurity,
    /// The DNS domains a platform admin assigned to each team: a team's
    /// Ingress hosts are its domains and their subdomains (no domain: no host).
    pub domains: std::collections::BTreeMap<String, Vec<String>>,
    /// Per team, the provenance its images must carry (`--trust-policy`):
    /// a team without one is not checked.
    pub trust: std::collections::BTreeMap<String, crate::provenance::TrustPolicy>,
    /// Per team, the taint keys of the node groups the admins opened to it
    /// (`--team-tolerations`), beyond [`PLATFORM_TOLERATIONS`].
    pub tolerations: std::collections::BTreeMap<String, Vec<String>>,
    /// The IngressClasses a team's Ingress may name (`--ingress-class
    /// [TEAM=]CLASS`: for one team, or for every team without one);
    /// none: only the cluster's default class (no `className`).
    pub ingress_classes: Vec<(Option<String>, String)>,
    /// How long a placed gang's pods have to be ready, and its requeue
    /// backoff (Kueue's `waitForPodsReady`; [`super::gang`]).
    pub pods_ready: super::gang::Policy,
    /// Submissions of one team not finished at once (default
    /// [`super::records::MAX_OPEN_PER_TEAM`]); past it 429.
    pub max_open: Option<usize>,
    /// What one team keeps on the host at most, in bytes (records and
    /// bodies, finished ones included); default [`super::records::KEPT_PER_TEAM`].
    pub max_kept_bytes: Option<u64>,
}

/// `TEAM=DOMAIN` (the gateway's `--team-domain`).
pub fn parse_team_domain(s: &str) -> Result<(String, String), String> {
    let (team, domain) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected TEAM=DOMAIN"))?;
    if !dns_label(team) {
        return Err(format!("{team:?}: a team name is a DNS label"));
    }
    let domain = domain.trim_end_matches('.').to_ascii_lowercase();
    if domain.is_empty() || domain.starts_with('*') || !domain.split('.').all(dns_label) {
        return Err(format!("{domain:?}: a domain is DNS labels joined by '.', no wildcard"));
    }
    Ok((team.to_string(), domain))
}

/// Whether `host` is `team`'s to claim: one of its domains or below one,
/// never a wildcard (only a platform admin claims those).
pub fn host_allowed(
    host: &str,
    team: &str,
    caller: &Caller,
    domains: &std::collections::BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if caller.admin {
        return Ok(());
    }
    if host.contains('*') {
        return Err(format!("{host:?}: a wildcard host is a platform admin's to claim"));
    }
    let mine = domains.get(team).map(Vec::as_slice).unwrap_or_default();
    if mine.iter().any(|d| host == *d || host.ends_with(&format!(".{d}"))) {
        return Ok(());
    }
    Err(if mine.is_empty() {
        format!("{host:?}: team {team} has no domain assigned (a platform admin assigns domains)")
    } else {
        format!("{host:?} is not in team {team}'s domains ({})", mine.join(", "))
    })
}

/// Which Pod Security Standards level a team's pods meet: baseline unless
/// a platform admin's policy says otherwise (restricted per team; a
/// lower level or a single check waived only by the admins' policy).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodSecurity {
    /// The level of every team the policy does not name (default baseline).
    pub default: crate::kube::podsecurity::Level,
    /// Team → its level.
    pub teams: std::collections::BTreeMap<String, crate::kube::podsecurity::Level>,
    /// Team → check names waived for it (an exception, by the admins).
    pub exceptions: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
}

impl PodSecurity {
    pub fn level(&self, team: &str) -> crate::kube::podsecurity::Level {
        self.teams.get(team).copied().unwrap_or(self.default)
    }

    /// `TEAM=LEVEL` (the gateway's `--pod-security`).
    pub fn parse_team(s: &str) -> Result<(String, crate::kube::podsecurity::Level), String> {
        let (team, level) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected TEAM=LEVEL"))?;
        if !dns_label(team) {
            return Err(format!("{team:?}: a team name is a DNS label"));
        }
        Ok((team.to_string(), crate::kube::podsecurity::Level::parse(level)?))
    }

    /// `TEAM:CHECK` (the gateway's `--pod-security-exception`), the check
    /// one of the standard's names.
    pub fn parse_exception(s: &str) -> Result<(String, String), String> {
        let (team, check) = s.split_once(':').ok_or_else(|| format!("{s:?}: expected TEAM:CHECK"))?;
        if !dns_label(team) {
            return Err(format!("{team:?}: a team name is a DNS label"));
        }
        let known = crate::kube::podsecurity::BASELINE_CHECKS.iter().chain(crate::kube::podsecurity::RESTRICTED_CHECKS);
        if !known.clone().any(|c| *c == check) {
            return Err(format!(
                "{check:?}: not a Pod Security check (one of: {})",
                known.copied().collect::<Vec<_>>().join(", ")
            ));
        }
        Ok((team.to_string(), check.to_string()))
    }
}

/// The registry host of an image reference, as the container runtime
/// resolves it (distribution's reference grammar: the first component is
/// a host when it has a '.' or ':' or is `localhost`; otherwise the image
/// is Docker Hub's), lowercased.
pub fn image_registry(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_ascii_lowercase()
        }
        _ => "docker.io".to_string(),
    }
}

/// Whether `image` comes from `allowed` (`registry.example.com/` or
/// `registry.example.com/team/`): the registry host compared exactly (a
/// look-alike such as `registry.example.com.evil.io` is another host), then
/// the path by whole components.
pub fn from_registry(image: &str, allowed: &str) -> bool {
    let allowed = allowed.trim_end_matches('/');
    let (host, path) = allowed.split_once('/').unwrap_or((allowed, ""));
    if image_registry(image) != host.to_ascii_lowercase() {
        return false;
    }
    if path.is_empty() {
        return true;
    }
    let repo = image.split_once('/').map(|(_, r)| r).unwrap_or_default();
    repo.strip_prefix(path).is_some_and(|rest| rest.starts_with('/'))
}

/// A named priority the admins define, as Kueue's WorkloadPriorityClass:
/// its value orders the queue and decides who yields to whom; who may use
/// it is limited to teams and tiers. Submitters name a class, never a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PriorityClass {
    pub name: String,
    pub value: i32,
    /// Teams allowed to use it (empty: every team).
    pub teams: Vec<String>,
    /// Tiers it may be used in (empty: every tier).
    pub tiers: Vec<Tier>,
}

/// The class a submission gets when it names none.
pub const DEFAULT_CLASS: &str = "normal";

/// Values an admin may give a class: beyond them is a typo, not a policy.
pub const CLASS_VALUES: std::ops::RangeInclusive<i32> = -1_000_000..=1_000_000;

/// The classes when the admins define none: `low` (-100) and `normal`
/// (0) for everyone, `high` (100) for Reserved work only.
pub fn default_classes() -> Vec<PriorityClass> {
    vec![
        PriorityClass { name: "low".into(), value: -100, teams: vec![], tiers: vec![] },
        PriorityClass { name: DEFAULT_CLASS.into(), value: 0, teams: vec![], tiers: vec![] },
        PriorityClass { name: "high".into(), value: 100, teams: vec![], tiers: vec![Tier::Reserved] },
    ]
}

impl PriorityClass {
    /// `NAME=VALUE[,team=T]…[,tier=TIER]…` (the gateway's `--priority-class`).
    pub fn parse(s: &str) -> Result<PriorityClass, String> {
        let mut parts = s.split(',');
        let head = parts.next().unwrap_or_default();
        let (name, value) =
            head.split_once('=').ok_or_else(|| format!("{s:?}: expected NAME=VALUE[,team=TEAM][,tier=TIER]"))?;
        if !dns_label(name) {
            return Err(format!("{name:?}: a class name is a DNS label"));
        }
        let value: i32 = value.parse().map_err(|_| format!("{value:?}: a class value is an integer"))?;
        if !CLASS_VALUES.contains(&value) {
            return Err(format!(
                "{value}: a class value is between {} and {}",
                CLASS_VALUES.start(),
                CLASS_VALUES.end()
            ));
        }
        let mut class = PriorityClass { name: name.into(), value, teams: vec![], tiers: vec![] };
        for p in parts {
            match p.split_once('=') {
                Some(("team", t)) if dns_label(t) => class.teams.push(t.into()),
                Some(("tier", t)) => class.tiers.push(
                    serde_json::from_value(Value::String(t.into()))
                        .map_err(|_| format!("{t:?}: not a tier (Reserved, OnDemand, Preemptible)"))?,
                ),
                _ => return Err(format!("{p:?}: expected team=TEAM or tier=TIER")),
            }
        }
        Ok(class)
    }

    fn allows(&self, team: &str, tier: Tier) -> bool {
        (self.teams.is_empty() || self.teams.iter().any(|t| t == team))
            && (self.tiers.is_empty() || self.tiers.contains(&tier))
    }
}

impl Policy {
    /// A team's open submissions at most.
    /// What one team keeps on the host at most, in bytes.
    pub fn max_kept_bytes(&self) -> u64 {
        self.max_kept_bytes.unwrap_or(super::records::KEPT_PER_TEAM)
    }

    pub fn max_open(&self) -> usize {
        self.max_open.unwrap_or(super::records::MAX_OPEN_PER_TEAM)
    }

    pub fn classes(&self) -> std::borrow::Cow<'_, [PriorityClass]> {
        if self.priority_classes.is_empty() {
            std::borrow::Cow::Owned(default_classes())
        } else {
            std::borrow::Cow::Borrowed(&self.priority_classes)
        }
    }

    /// The class `name` (default: [`DEFAULT_CLASS`]) for work of `team` in
    /// `tier` asked by `caller`: admins may use any class, others only the
    /// classes their team and tier are allowed.
    pub fn class(&self, name: Option<&str>, team: &str, tier: Tier, caller: &Caller) -> Result<PriorityClass, Problem> {
        let classes = self.classes();
        let name = name.unwrap_or(DEFAULT_CLASS);
        let usable: Vec<&PriorityClass> = classes.iter().filter(|c| caller.admin || c.allows(team, tier)).collect();
        let names = || usable.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ");
        match classes.iter().find(|c| c.name == name) {
            None => Err(Problem::new(
                "platform",
                "priorityClass",
                format!("{name:?} is not a priority class (team {team} may use: {})", names()),
            )),
            Some(c) if !(caller.admin || c.allows(team, tier)) => Err(Problem::new(
                "platform",
                "priorityClass",
                format!(
                    "team {team} may not use priority class {name:?} for {} work (it may use: {})",
                    crate::gateway::quota::tier_name(tier),
                    names()
                ),
            )),
            Some(c) => Ok(c.clone()),
        }
    }
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
    /// What the demand counts: each pod template, how many run at once, each pod's requests.
    pub sets: Vec<PodSet>,
    pub artifact: String,
    /// Every image the pods run (init containers and sidecars the
    /// submitter wrote included), once each, for the audit.
    pub images: Vec<String>,
    pub expected_seconds: Option<i64>,
}

/// The Pod Security Standards on the pods the controller will create (the
/// rendered children: the submitter's containers and the platform's
/// sidecars), each failed check one problem at the submitted field it
/// comes from, with the standard's check name.
fn pod_security(team: &str, templates: &[(String, Value)], children: &[Value], ps: &PodSecurity) -> Vec<Problem> {
    use crate::kube::podsecurity::{self, At};
    let level = ps.level(team);
    let waived = ps.exceptions.get(team);
    let mut out: Vec<Problem> = Vec::new();
    for (_, pod) in podsecurity::pod_templates(children) {
        let spec = pod.get("spec").unwrap_or(&Value::Null);
        let names = |t: &Value| -> Vec<String> {
            ["initContainers", "containers"]
                .iter()
                .flat_map(|f| t.pointer(&format!("/spec/{f}")).and_then(Value::as_array).into_iter().flatten())
                .filter_map(|c| c.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        };
        // The submitted template this pod comes from: the one whose
        // containers it runs (a training job has one per role).
        let ours = names(pod);
        let (at, template) = templates
            .iter()
            .find(|(_, t)| names(t).iter().all(|n| ours.contains(n)) && !names(t).is_empty())
            .or(templates.first())
            .map(|(a, t)| (a.as_str(), t))
            .unwrap_or(("spec.template", &Value::Null));
        let container_field = |name: &str, field: &str| -> String {
            for f in ["initContainers", "containers", "ephemeralContainers"] {
                let found = template
                    .pointer(&format!("/spec/{f}"))
                    .and_then(Value::as_array)
                    .and_then(|cs| cs.iter().position(|c| c.get("name").and_then(Value::as_str) == Some(name)));
                if let Some(i) = found {
                    return format!("{at}.spec.{f}[{i}].{field}");
                }
            }
            // A container the platform adds: its part of the pod.
            format!("{at}.spec")
        };
        for v in podsecurity::check(pod.get("metadata").unwrap_or(&Value::Null), spec, level) {
            if waived.is_some_and(|w| w.contains(v.check)) {
                continue;
            }
            let field = match v.at.first() {
                Some(At::Pod(f)) => format!("{at}.spec.{f}"),
                Some(At::Container(name, f)) => container_field(name, f),
                None => format!("{at}.spec"),
            };
            let message = format!("violates PodSecurity \"{}:latest\": {} ({})", level.as_str(), v.check, v.detail);
            let p = Problem::new("pod-security", field, message);
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// The API server's rules on each submitted pod template as written, for
/// a submission whose children cannot be rendered: problems at fields no
/// earlier problem names.
fn templates_as_written(templates: &[(String, Value)], earlier: &[Problem]) -> Vec<Problem> {
    let mut out = Vec::new();
    for (at, t) in templates {
        if !t.is_object() {
            continue;
        }
        let mut t = t.clone();
        // What an earlier layer refused is taken out, so the rest of the
        // template is still checked (an unparsable quantity would
        // otherwise hide every other problem of its pod).
        for p in earlier {
            if let Some(rest) = p.field.strip_prefix(at.as_str()).and_then(|r| r.strip_prefix('.')) {
                remove_at(&mut t, rest);
            }
        }
        // The kind's own restart policy is the render's to set.
        if let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("restartPolicy");
        }
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "probe"}, "template": t});
        for e in crate::kube::validation::validate("", "PodTemplate", &pod, None) {
            let Some(rest) = e.field.strip_prefix("template.") else { continue };
            let field = format!("{at}.{rest}");
            let named = |p: &Problem| field.starts_with(&p.field) || p.field.starts_with(&field);
            if earlier.iter().any(named) || out.iter().any(named) {
                continue;
            }
            out.push(Problem::new("validation", field, e.body()));
        }
    }
    out
}

/// The resources a submitted container may ask for: what the team's quota
/// counts (GPUs per product, Neuron devices). Anything else a pod can ask
/// for (other extended resources, hugepages, ephemeral storage) is refused
/// rather than run uncounted — here as submitted, and again over the
/// rendered pods (`demand::pod_requests`: the platform's sidecars and
/// `spec.runtime.overrides` included).
pub const COUNTED_RESOURCES: &[&str] = &["cpu", "memory", demand::GPU, demand::NEURON];

/// The largest claim a workload may ask for, each (its storage is not in
/// the team's quota: bounded here instead).
pub const MAX_CLAIM_BYTES: u64 = 1 << 40;

/// Every resource a pod or a claim asks for is counted or refused: the
/// containers' requests and limits name counted resources only; a claim
/// names no volume of its own choosing (it would bind to one another team
/// provisioned) and asks for at most [`MAX_CLAIM_BYTES`].
fn resource_rules(obj: &Value, templates: &[(String, Value)], problems: &mut Vec<Problem>) {
    for (at, t) in templates {
        for f in ["initContainers", "containers", "ephemeralContainers"] {
            for (i, c) in t.pointer(&format!("/spec/{f}")).and_then(Value::as_array).into_iter().flatten().enumerate() {
                for kind in ["requests", "limits", "claims"] {
                    let Some(asked) = c.pointer(&format!("/resources/{kind}")) else { continue };
                    if kind == "claims" {
                        if asked.as_array().is_some_and(|a| !a.is_empty()) {
                            problems.push(Problem::new(
                                "platform",
                                format!("{at}.spec.{f}[{i}].resources.claims"),
                                "dynamic resource claims are not offered to submitted work (not counted by the team's quota)",
                            ));
                        }
                        continue;
                    }
                    for name in asked.as_object().into_iter().flatten().map(|(k, _)| k) {
                        if !COUNTED_RESOURCES.contains(&name.as_str()) {
                            problems.push(Problem::new(
                                "platform",
                                format!(
                                    "{at}.spec.{f}[{i}].resources.{kind}[{}]",
                                    crate::views::text::escaped(name, false)
                                ),
                                format!(
                                    "{:?} is not counted by the team's quota (only {}): not offered to submitted work",
                                    crate::views::text::escaped(name, false),
                                    COUNTED_RESOURCES.join(", ")
                                ),
                            ));
                        }
                    }
                }
            }
        }
        // Pod-level resources take cpu and memory (the API server's rule;
        // hugepages, which it also takes, are not counted): a device asked
        // here would be counted by no container, and a real API server
        // refuses it.
        for kind in ["requests", "limits"] {
            for name in t
                .pointer(&format!("/spec/resources/{kind}"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
            {
                if name == "cpu" || name == "memory" {
                    continue;
                }
                let shown = crate::views::text::escaped(name, false);
                problems.push(Problem::new(
                    "validation",
                    format!("{at}.spec.resources.{kind}[{shown}]"),
                    format!(
                        "Unsupported value: {shown:?}: pod-level resources take \"cpu\" and \"memory\" (ask for devices in a container's resources)"
                    ),
                ));
            }
        }
        for (i, v) in t.pointer("/spec/volumes").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if let Some(spec) = v.pointer("/ephemeral/volumeClaimTemplate/spec") {
                claim_rules(&format!("{at}.spec.volumes[{i}].ephemeral.volumeClaimTemplate.spec"), spec, problems);
            }
        }
    }
    for (i, c) in obj.pointer("/spec/volumeClaimTemplates").and_then(Value::as_array).into_iter().flatten().enumerate()
    {
        if let Some(spec) = c.get("spec") {
            claim_rules(&format!("spec.volumeClaimTemplates[{i}].spec"), spec, problems);
        }
    }
}

fn claim_rules(at: &str, spec: &Value, problems: &mut Vec<Problem>) {
    if spec.get("volumeName").is_some_and(|v| !v.is_null()) {
        problems.push(Problem::new(
            "platform",
            format!("{at}.volumeName"),
            "a claim names no volume: it is provisioned for the workload (a named volume may be another team's)",
        ));
    }
    for kind in ["requests", "limits"] {
        let Some(size) = spec.pointer(&format!("/resources/{kind}/storage")) else { continue };
        match crate::kube::quantity::bytes(size) {
            Ok(b) if b <= MAX_CLAIM_BYTES => {}
            Ok(_) => problems.push(Problem::new(
                "platform",
                format!("{at}.resources.{kind}.storage"),
                format!("{size}: a claim asks for at most 1Ti"),
            )),
            Err(e) => problems.push(Problem::new(
                "platform",
                format!("{at}.resources.{kind}.storage"),
                format!("{size}: {e}"),
            )),
        }
    }
}

/// The longest termination grace period a pod may ask for: a pod that is
/// told to stop keeps running (and using its team's share) for as long as
/// this, so it is bounded as the platform's own drains are.
pub const MAX_GRACE_SECONDS: i64 = 300;

/// What would let a workload outlive its cancellation: finalizers on the
/// workload or its pods (only their owners' controllers remove them), and a
/// termination grace period beyond [`MAX_GRACE_SECONDS`].
fn lifetime_rules(obj: &Value, templates: &[(String, Value)], problems: &mut Vec<Problem>) {
    let finalizers = |v: Option<&Value>| v.and_then(Value::as_array).is_some_and(|f| !f.is_empty());
    if finalizers(obj.pointer("/metadata/finalizers")) {
        problems.push(Problem::new(
            "platform",
            "metadata.finalizers",
            "a submitted workload carries no finalizers: a cancelled workload is removed by the platform, and a finalizer would keep it (and its quota's worth of pods) on the members",
        ));
    }
    for (at, t) in templates {
        if finalizers(t.pointer("/metadata/finalizers")) {
            problems.push(Problem::new(
                "platform",
                format!("{at}.metadata.finalizers"),
                "pods carry no finalizers of the submitter's: they would keep a cancelled workload's pods",
            ));
        }
        match t.pointer("/spec/terminationGracePeriodSeconds") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_i64() {
                Some(g) if (0..=MAX_GRACE_SECONDS).contains(&g) => {}
                _ => problems.push(Problem::new(
                    "platform",
                    format!("{at}.spec.terminationGracePeriodSeconds"),
                    format!(
                        "{v}: must be between 0 and {MAX_GRACE_SECONDS} seconds (the platform's bound on a pod's stop)"
                    ),
                )),
            },
        }
    }
}

/// The images of `intake` a delivery marked bad, matched by digest (a
/// reference by tag matches once the gateway pinned it to its digest),
/// each at its field. Only the submitting team's own delivery is named
/// with its reason; another team's delivery, its workload and why it was
/// rolled back are that team's to know.
pub fn marked_bad(
    intake: &Intake,
    bad: &std::collections::BTreeMap<String, crate::delivery::book::Bad>,
) -> Vec<Problem> {
    // A mark binds only the team whose delivery made it: another team
    // delivering (and rolling back) the same digest changes nothing here.
    image_fields(&intake.kind, &intake.workload)
        .into_iter()
        .filter_map(|(at, image)| {
            let d = crate::delivery::book::digest_of(&image)?;
            let b = crate::delivery::book::mark_of(bad, d, &intake.team)?;
            Some(Problem::new(
                "delivery",
                at,
                format!(
                    "{image} is marked bad: delivery #{} of {} {} was rolled back ({}); submit a fixed build",
                    b.delivery, b.workload, b.version, b.reason
                ),
            ))
        })
        .collect()
}

/// `[TEAM=]CLASS` (the gateway's `--ingress-class`).
pub fn parse_ingress_class(s: &str) -> Result<(Option<String>, String), String> {
    let (team, class) = match s.split_once('=') {
        Some((t, c)) if dns_label(t) => (Some(t.to_string()), c),
        Some((t, _)) => return Err(format!("{t:?}: a team name is a DNS label")),
        None => (None, s),
    };
    if !class.split('.').all(dns_label) {
        return Err(format!("{class:?}: an IngressClass name is a DNS subdomain"));
    }
    Ok((team, class.to_string()))
}

/// Where a team's traffic goes: its pods register only into its own
/// service sets (`TEAM.NAME`, as the default `{namespace}.{name}` is; red
/// naming `blue.checkout` would receive blue's clients), and its Ingress
/// names only an IngressClass the admins allow it. A platform admin may
/// name any.
fn traffic_rules(obj: &Value, team: &str, caller: &Caller, policy: &Policy, problems: &mut Vec<Problem>) {
    if caller.admin || team.is_empty() {
        return;
    }
    if let Some(set) = obj.pointer("/spec/runtime/traffic/serviceset").and_then(Value::as_str) {
        // Its own, and a name of DNS labels (`red..x` names no set).
        let own = set.split_once('.').is_some_and(|(owner, rest)| owner == team && rest.split('.').all(dns_label));
        if !own {
            problems.push(Problem::new(
                "platform",
                "spec.runtime.traffic.serviceset",
                crate::views::text::escaped(
                    &format!("{set:?}: team {team}'s pods register only into its own service sets ({team}.NAME)"),
                    false,
                )
                .into_owned(),
            ));
        }
    }
    if let Some(class) = obj.pointer("/spec/ingress/className").and_then(Value::as_str) {
        let own: Vec<&str> = policy
            .ingress_classes
            .iter()
            .filter(|(t, _)| t.as_deref() == Some(team))
            .map(|(_, c)| c.as_str())
            .collect();
        let allowed: Vec<&str> = if own.is_empty() {
            policy.ingress_classes.iter().filter(|(t, _)| t.is_none()).map(|(_, c)| c.as_str()).collect()
        } else {
            own
        };
        if !allowed.contains(&class) {
            problems.push(Problem::new(
                "platform",
                "spec.ingress.className",
                crate::views::text::escaped(
                    &format!(
                        "{class:?}: team {team}'s Ingress may name {}",
                        if allowed.is_empty() {
                            "no class (the cluster's default class serves it)".to_string()
                        } else {
                            format!("only {} (or none, for the cluster's default)", allowed.join(", "))
                        }
                    ),
                    false,
                )
                .into_owned(),
            ));
        }
    }
}

/// No `metadata.ownerReferences` anywhere in a submission (the workload's,
/// its templates', its claim templates'): the gateway writes with its own
/// credentials, so an owner reference would tie the workload (and its
/// garbage collection) to an object the submitter may not touch.
fn owner_references_rule(v: &Value, at: &str, problems: &mut Vec<Problem>) {
    let join = |k: &str| if at.is_empty() { k.to_string() } else { format!("{at}.{k}") };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if k == "metadata" && v.get("ownerReferences").is_some_and(|r| !r.is_null()) {
                    problems.push(Problem::new(
                        "platform",
                        join("metadata.ownerReferences"),
                        "owner references are the platform's to write (the gateway writes with its own credentials): remove them",
                    ));
                }
                owner_references_rule(v, &join(k), problems);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                owner_references_rule(v, &format!("{at}[{i}]"), problems);
            }
        }
        _ => {}
    }
}

/// The control plane's taint keys (and node-role labels): no submitted pod
/// tolerates or selects them, a platform admin's included (the control
/// plane runs the platform, never a workload the gateway places).
pub const CONTROL_PLANE_KEYS: [&str; 2] = ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"];

/// The label every node carries with its own name: selecting it pins a pod.
const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Taints every team's pods may tolerate: the node conditions Kubernetes'
/// own DefaultTolerationSeconds admission plugin tolerates on every pod
/// (they only say how long a pod stays on a failing node).
pub const PLATFORM_TOLERATIONS: [&str; 2] = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];

/// `TEAM=KEY[,KEY]` (the gateway's `--team-tolerations`): taint keys of
/// the node groups the admins open to a team.
pub fn parse_team_tolerations(s: &str) -> Result<(String, Vec<String>), String> {
    let (team, keys) = s.split_once('=').ok_or_else(|| format!("{s:?}: expected TEAM=KEY[,KEY]"))?;
    if !dns_label(team) {
        return Err(format!("{team:?}: a team name is a DNS label"));
    }
    let keys: Vec<String> = keys.split(',').map(str::trim).filter(|k| !k.is_empty()).map(String::from).collect();
    if keys.is_empty() {
        return Err(format!("{s:?}: name at least one taint key"));
    }
    if let Some(k) = keys.iter().find(|k| CONTROL_PLANE_KEYS.contains(&k.as_str())) {
        return Err(format!("{k:?}: the control plane's taint is never a team's to tolerate"));
    }
    Ok((team.to_string(), keys))
}

/// The taint keys a pod of the workload tolerates without the admins'
/// word: [`PLATFORM_TOLERATIONS`], and each extended resource it asks for
/// (`nvidia.com/gpu`), as the ExtendedResourceToleration admission plugin
/// adds them.
fn platform_tolerations(obj: &Value, template: &Value) -> Vec<String> {
    let mut keys: Vec<String> = PLATFORM_TOLERATIONS.iter().map(|k| k.to_string()).collect();
    keys.extend(obj.pointer("/spec/accelerators/type").and_then(Value::as_str).map(String::from));
    // What the platform's sidecars are given through the overrides too
    // (those of containers the pod gets: another reaches no pod).
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    for r in applied_overrides(kind, obj) {
        for w in ["requests", "limits"] {
            // `nvidia.com/gpu: 0` asks for none: no toleration for it.
            keys.extend(
                r.get(w)
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter(|(_, q)| demand::some_of(q))
                    .map(|(k, _)| k.clone()),
            );
        }
    }
    for field in ["initContainers", "containers"] {
        for c in template.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten() {
            for r in ["requests", "limits"] {
                for k in c
                    .pointer(&format!("/resources/{r}"))
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter(|(_, q)| demand::some_of(q))
                    .map(|(k, _)| k)
                {
                    // Extended resources are domain-prefixed, outside kubernetes.io.
                    if k.contains('/') && !k.split('/').next().unwrap_or_default().ends_with("kubernetes.io") {
                        keys.push(k.clone());
                    }
                }
            }
        }
    }
    keys
}

/// The platform's scheduling rules on a submitted pod template: a pod is
/// placed by the scheduler, never pinned to a node (by `nodeName` or by a
/// required node affinity on `metadata.name`), and tolerates only the
/// taints of node groups the admins opened to its team (a toleration of
/// every taint runs on the control plane and on every team's dedicated
/// nodes); a platform admin may do either. Nobody's pod tolerates, selects
/// or requires the control plane.
fn scheduling_rules(
    at: &str,
    obj: &Value,
    template: &Value,
    team: &str,
    caller: &Caller,
    policy: &Policy,
    problems: &mut Vec<Problem>,
) {
    let control_plane = |k: &str| CONTROL_PLANE_KEYS.contains(&k);
    let refuse = |problems: &mut Vec<Problem>, field: String, message: String| {
        problems.push(Problem::new("platform", field, crate::views::text::escaped(&message, false).into_owned()))
    };
    for (k, _) in template.pointer("/spec/nodeSelector").and_then(Value::as_object).into_iter().flatten() {
        if control_plane(k) {
            refuse(
                problems,
                format!("{at}.spec.nodeSelector[{k}]"),
                format!("{k:?}: the control plane runs the platform, never a submitted workload"),
            );
        } else if k == HOSTNAME_LABEL && !caller.admin {
            refuse(
                problems,
                format!("{at}.spec.nodeSelector[{k}]"),
                "pods are placed by the scheduler; pinning one to a node by its hostname is for platform admins".into(),
            );
        }
    }
    let required = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
    let terms_at =
        format!("{at}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms");
    for (i, term) in template.pointer(required).and_then(Value::as_array).into_iter().flatten().enumerate() {
        for (j, e) in term.get("matchExpressions").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
            let op = e.get("operator").and_then(Value::as_str).unwrap_or_default();
            if control_plane(key) && matches!(op, "In" | "Exists") {
                refuse(
                    problems,
                    format!("{terms_at}[{i}].matchExpressions[{j}]"),
                    format!("{key:?}: the control plane runs the platform, never a submitted workload"),
                );
            } else if key == HOSTNAME_LABEL && op == "In" && !caller.admin {
                refuse(
                    problems,
                    format!("{terms_at}[{i}].matchExpressions[{j}]"),
                    "pods are placed by the scheduler; pinning one to a node by its hostname is for platform admins"
                        .into(),
                );
            }
        }
        if caller.admin {
            continue;
        }
        for (j, f) in term.get("matchFields").and_then(Value::as_array).into_iter().flatten().enumerate() {
            if f.get("key").and_then(Value::as_str) == Some("metadata.name") {
                refuse(
                    problems,
                    format!("{terms_at}[{i}].matchFields[{j}]"),
                    "pods are placed by the scheduler; pinning one to a node by name is for platform admins".into(),
                );
            }
        }
    }
    if !caller.admin {
        if let Some(node) = template.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            refuse(
                problems,
                format!("{at}.spec.nodeName"),
                format!("{node:?}: pods are placed by the scheduler; pinning one to a node is for platform admins"),
            );
        }
    }
    let opened = policy.tolerations.get(team).map(Vec::as_slice).unwrap_or_default();
    let platform = platform_tolerations(obj, template);
    for (i, t) in template.pointer("/spec/tolerations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let key = t.get("key").and_then(Value::as_str).unwrap_or_default();
        let field = format!("{at}.spec.tolerations[{i}]");
        if key.is_empty() {
            if !caller.admin {
                refuse(problems, field, "a toleration without a key tolerates every taint (the control plane's, other teams' dedicated nodes): name the taint's key".into());
            }
        } else if control_plane(key) {
            refuse(
                problems,
                field,
                format!("{key:?}: the control plane's taint is never tolerated by a submitted workload"),
            );
        } else if !caller.admin && !opened.iter().chain(&platform).any(|k| k == key) {
            refuse(
                problems,
                field,
                format!(
                    "{key:?}: team {team} may tolerate only the taints of node groups the admins opened to it ({})",
                    if opened.is_empty() { "none".to_string() } else { opened.join(", ") }
                ),
            );
        }
    }
}

pub const EXPECTED_DURATION: &str = "gateway.pinfleet.dev/expected-duration";

/// The longest expected duration the queue takes: 366 days.
pub const MAX_EXPECTED_SECONDS: i64 = 366 * 86_400;

const KINDS: [&str; 5] =
    ["PinterestService", "PinterestJobSet", "PinterestCronJob", "PinterestTrainingJob", "PinterestStatefulSet"];

/// Each kind's schema, its CEL rules compiled, built once (generating the
/// CRDs and compiling their rules on every submission cost more than the
/// rest of the checks).
fn schema_of(kind: &str) -> Option<&'static crate::kube::schema::CrdSchema> {
    static SCHEMAS: std::sync::OnceLock<std::collections::HashMap<String, crate::kube::schema::CrdSchema>> =
        std::sync::OnceLock::new();
    SCHEMAS
        .get_or_init(|| {
            crate::workloads::crds()
                .into_iter()
                .filter_map(|c| {
                    let v = serde_json::to_value(&c.spec.versions[0].schema).ok()?;
                    let schema = v.get("openAPIV3Schema").cloned()?;
                    Some((c.spec.names.kind.clone(), crate::kube::schema::CrdSchema::new(schema)))
                })
                .collect()
        })
        .get(kind)
}

/// The most characters a submission id holds.
pub const ID_MAX_CHARS: usize = 253;

/// A submission id, by a positive rule (what it may hold, not a list of
/// what it may not): a lowercase RFC 1123 subdomain, as Kubernetes names
/// objects — 1–253 of `a-z`, `0-9`, `-` and `.`, starting and ending with
/// a letter or digit. Nothing else can hide in it: no control,
/// bidirectional, zero-width, look-alike or spacing character passes.
pub fn check_id(id: &str) -> Result<(), Problem> {
    let bad = |m: String| Err(Problem::new("request", "id", m));
    let n = id.chars().count();
    if n == 0 || n > ID_MAX_CHARS {
        return bad(format!("a submission id is 1–{ID_MAX_CHARS} characters; this one is {n}"));
    }
    if let Some(c) = id.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.')) {
        return bad(format!(
            "a submission id is lowercase letters, digits, '-' and '.' (as a Kubernetes name); U+{:04X} is not one of them",
            c as u32
        ));
    }
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !edge(id.chars().next()) || !edge(id.chars().last()) {
        return bad("a submission id starts and ends with a letter or digit".into());
    }
    Ok(())
}

/// A team's name: a DNS label (it names the team's namespace on every member).
pub fn team_name(s: &str) -> bool {
    dns_label(s)
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `TEAM=X` settings (flags given once per pair), grouped by team in the
/// order given.
pub fn by_team<V: Clone>(pairs: &[(String, V)]) -> std::collections::BTreeMap<String, Vec<V>> {
    let mut m: std::collections::BTreeMap<String, Vec<V>> = Default::default();
    for (t, v) in pairs {
        m.entry(t.clone()).or_default().push(v.clone());
    }
    m
}

/// Checks a submitted workload for `caller`: every problem of layers 1
/// and 2 at once, or what the submission is.
pub fn check(workload: &Value, caller: &Caller, policy: &Policy, members: &Members) -> Result<Intake, Vec<Problem>> {
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
    match crate::kube::schema::validate(&schema.json, workload) {
        Ok(defaulted) => {
            obj = defaulted;
            if let Err(errs) = crate::kube::schema::validate_cel(schema, &obj, None) {
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
    neuron_product_rule(&obj, &mut problems);
    accelerator_product(&kind, &mut obj, &team, members, &mut problems);
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
    let templates = templates_of(&kind, &obj);
    let (artifact, images) = images_rule(&templates, policy, &mut problems);
    for (at, t) in &templates {
        scheduling_rules(at, &obj, t, &team, caller, policy, &mut problems);
    }
    lifetime_rules(&obj, &templates, &mut problems);
    owner_references_rule(workload, "", &mut problems);
    hosts_rule(&obj, &team, caller, policy, &mut problems);
    traffic_rules(&obj, &team, caller, policy, &mut problems);
    resource_rules(&obj, &templates, &mut problems);
    overrides_rule(&kind, &obj, &mut problems);
    device_env_rule(&templates, &mut problems);
    // Demand and validation: the controller's own children of this
    // workload, under every runtime profile the members run (the most
    // each asks), checked by the API server's rules of every minor.
    let mut named = obj.clone();
    named["metadata"]["namespace"] = Value::String(if team.is_empty() { "default".into() } else { team.clone() });
    let pinned = obj.pointer("/spec/runtime/version").and_then(Value::as_str);
    let mut profiles: Vec<RuntimeProfile> = Vec::new();
    for data in members.profiles.iter().chain(members.profiles.is_empty().then_some(&Default::default())) {
        match crate::controller::profile_from(data.clone(), pinned) {
            Ok(p) if !profiles.contains(&p) => profiles.push(p),
            Ok(_) => {}
            Err(e) => problems.push(Problem::new("platform", "spec.runtime.version", e.to_string())),
        }
    }
    let demand = if !problems.is_empty() {
        // Every problem at once: the children cannot be rendered from
        // what did not parse, but the pod templates as written still meet
        // the API server's rules and the Pod Security Standards.
        let written = templates_as_written(&templates, &problems);
        problems.extend(written);
        let as_written: Vec<Value> = templates
            .iter()
            .map(|(_, t)| serde_json::json!({"kind": "Pod", "metadata": {"name": name}, "spec": {"template": t}}))
            .collect();
        problems.extend(pod_security(&team, &templates, &as_written, &policy.pod_security));
        None
    } else {
        children_layer(&kind, &named, &team, &templates, &profiles, policy, members, &mut problems)
    };
    let demand = demand.unwrap_or_default();
    let pods = demand.pods;
    let (per_pod, amount) = shares(&demand);
    let expected_seconds = expected_seconds(&obj, &mut problems);
    name_refused_values(&mut problems, workload);
    if !problems.is_empty() {
        return Err(problems);
    }
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("namespace".into(), Value::String(team.clone()));
    }
    let sets = demand.sets.clone();
    let demand = amount;
    Ok(Intake {
        workload: obj,
        kind,
        name,
        team,
        tier,
        per_pod,
        pods,
        demand,
        sets,
        artifact,
        images,
        expected_seconds,
    })
}

/// One pod's share for placement (replicas of one template are alike; a
/// training job's roles are averaged, rounded up), and the whole demand,
/// accelerators per flavor included.
fn shares(d: &demand::Demand) -> (Amount, Amount) {
    let pods = d.pods;
    let per_pod = if pods > 0 {
        let mut a = Amount::new(d.cpu.div_ceil(pods), d.memory.div_ceil(pods), 1);
        for f in demand::FLAVORS {
            a.set(Resource::of_flavor(f), d.accelerator(f).div_ceil(pods));
        }
        a
    } else {
        Amount::new(0, 0, 1)
    };
    let mut amount = Amount::new(d.cpu, d.memory, pods);
    for f in demand::FLAVORS {
        amount.set(Resource::of_flavor(f), d.accelerator(f));
    }
    (per_pod, amount)
}

/// The submitted field that asks for an accelerator flavor: a training
/// job's `spec.accelerators`, or the first container of a submitted
/// template that names its resource.
pub fn accelerator_field(intake: &Intake, r: Resource) -> Option<String> {
    let flavor = r.flavor()?;
    let name = if flavor == demand::Flavor::Neuron { demand::NEURON } else { demand::GPU };
    if intake.workload.pointer("/spec/accelerators/type").and_then(Value::as_str) == Some(name) {
        return Some("spec.accelerators".into());
    }
    for (at, t) in templates_of(&intake.kind, &intake.workload) {
        for list in ["initContainers", "containers"] {
            for (i, c) in
                t.pointer(&format!("/spec/{list}")).and_then(Value::as_array).into_iter().flatten().enumerate()
            {
                for which in ["limits", "requests"] {
                    if c.pointer(&format!("/resources/{which}")).and_then(|m| m.get(name)).is_some() {
                        return Some(format!("{at}.spec.{list}[{i}].resources.{which}[{name}]"));
                    }
                }
            }
        }
    }
    intake.workload.pointer("/spec/runtime/overrides").map(|_| "spec.runtime.overrides".to_string())
}

/// The overrides (`spec.runtime.overrides`) that reach the workload's
/// pods: those of the platform containers its kind gives them under its
/// runtime toggles. An override of a container a pod does not get gives
/// nothing to any pod.
fn applied_overrides<'a>(kind: &str, obj: &'a Value) -> Vec<&'a Value> {
    let Some(kind) = render::Kind::of_name(kind) else { return Vec::new() };
    let runtime: crate::workloads::Runtime =
        obj.pointer("/spec/runtime").cloned().and_then(|r| serde_json::from_value(r).ok()).unwrap_or_default();
    let given = render::platform_containers_of(kind, &runtime);
    obj.pointer("/spec/runtime/overrides")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(name, _)| given.contains(&name.as_str()))
        .map(|(_, r)| r)
        .collect()
}

/// Each override names a platform container the workload's kind has: one
/// of a container it does not have (a batch kind's `traffic`, a name of no
/// container) reaches no pod. Refused, so that what it asks is never taken
/// for what the pods ask (it once held pods that ask no GPU to GPU nodes).
fn overrides_rule(kind: &str, obj: &Value, problems: &mut Vec<Problem>) {
    let Some(k) = render::Kind::of_name(kind) else { return };
    let has = k.platform_containers();
    for (name, value) in obj.pointer("/spec/runtime/overrides").and_then(Value::as_object).into_iter().flatten() {
        let shown = crate::views::text::escaped(name, false);
        if has.contains(&name.as_str()) {
            // An override is a container's resources: requests and limits,
            // each a map of quantities (no claims: they name volumes the
            // pod does not have; nothing else).
            let at = format!("spec.runtime.overrides[{shown}]");
            match value.as_object() {
                None => problems.push(Problem::new(
                    "platform",
                    at,
                    "Invalid value: an override is a container's resources: {requests: {…}, limits: {…}}",
                )),
                Some(o) => {
                    for (k, v) in o {
                        let key = crate::views::text::escaped(k, false);
                        if !matches!(k.as_str(), "requests" | "limits") {
                            problems.push(Problem::new(
                                "platform",
                                format!("{at}.{key}"),
                                format!("{key:?}: an override sets requests and limits only (claims, env and the rest are not a sidecar's to change)"),
                            ));
                        } else if !v.is_object() {
                            problems.push(Problem::new(
                                "platform",
                                format!("{at}.{key}"),
                                "Invalid value: a map of resource names to quantities",
                            ));
                        }
                    }
                }
            }
            continue;
        }
        problems.push(Problem::new(
            "platform",
            format!("spec.runtime.overrides[{shown}]"),
            format!(
                "{shown:?}: a {kind}'s pods have no such platform container (they have: {}): its override would reach no pod",
                has.join(", ")
            ),
        ));
    }
}

/// A product is a GPU's: Neuron devices have none to name.
fn neuron_product_rule(obj: &Value, problems: &mut Vec<Problem>) {
    if obj.pointer("/spec/accelerators/type").and_then(Value::as_str) == Some(demand::NEURON)
        && obj.pointer("/spec/accelerators/product").is_some_and(|p| !p.is_null())
    {
        problems.push(Problem::new(
            "platform",
            "spec.accelerators.product",
            format!("a product names a GPU (A100, H100, A10G, L4): {} devices have none to name", demand::NEURON),
        ));
    }
}

/// Environment names that choose which of its node's devices a container
/// sees. Where the NVIDIA runtime is the node's default,
/// `NVIDIA_VISIBLE_DEVICES=all` (or any list) shows a container every GPU
/// of its node, counted by no quota; Neuron's runtime reads its cores and
/// devices alike. The device plugins set them for the devices a container
/// asks for in its resources. (`CUDA_VISIBLE_DEVICES` only narrows what a
/// container was given.)
pub const DEVICE_ENV: [&str; 3] = ["NVIDIA_VISIBLE_DEVICES", "NEURON_RT_VISIBLE_CORES", "AWS_NEURON_VISIBLE_DEVICES"];

/// No container of a submitted template names [`DEVICE_ENV`] in its env,
/// nor takes an `envFrom` whose `prefix` begins one (`NVIDIA_` and a
/// ConfigMap key `VISIBLE_DEVICES`). What `envFrom` without such a prefix
/// brings from a ConfigMap or Secret cannot be read at the door: the
/// accelerated image's runtime ignores `NVIDIA_VISIBLE_DEVICES` from an
/// unprivileged container and the device plugin hands devices over as
/// volume mounts (`accept-nvidia-visible-devices-envvar-when-unprivileged
/// = false`), and Neuron's runtime sees only the device files the plugin
/// mounted, so the env is at most a narrowing there.
fn device_env_rule(templates: &[(String, Value)], problems: &mut Vec<Problem>) {
    for (at, t) in templates {
        for f in ["initContainers", "containers", "ephemeralContainers"] {
            for (i, c) in t.pointer(&format!("/spec/{f}")).and_then(Value::as_array).into_iter().flatten().enumerate() {
                for (j, e) in c.get("envFrom").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    let prefix = e.get("prefix").and_then(Value::as_str).unwrap_or_default();
                    let Some(name) = DEVICE_ENV.iter().find(|n| !prefix.is_empty() && n.starts_with(prefix)) else {
                        continue;
                    };
                    problems.push(Problem::new(
                        "platform",
                        format!("{at}.spec.{f}[{i}].envFrom[{j}].prefix"),
                        format!(
                            "{prefix:?} begins {name}, which chooses which of its node's devices a container sees: the device plugin sets it for the devices a container asks for in its resources"
                        ),
                    ));
                }
                for (j, e) in c.get("env").and_then(Value::as_array).into_iter().flatten().enumerate() {
                    let name = e.get("name").and_then(Value::as_str).unwrap_or_default();
                    if !DEVICE_ENV.contains(&name) {
                        continue;
                    }
                    problems.push(Problem::new(
                        "platform",
                        format!("{at}.spec.{f}[{i}].env[{j}]"),
                        format!(
                            "{name} chooses which of its node's devices a container sees (with the NVIDIA runtime as the node's default, {name}=all shows it every GPU of the node, counted by no quota): the device plugin sets it for the devices a container asks for in its resources"
                        ),
                    ));
                }
            }
        }
    }
}

/// The submitted field that sets how many pods ask for `r` at once: the
/// replicas, shards or parallelism of the pod set that asks the most of
/// it (where a demand past the fleet, or past a team's maximum, is refused).
pub fn count_field(intake: &Intake, r: Resource) -> String {
    let asked = |s: &PodSet| -> u64 {
        let per = match r {
            Resource::Cpu => s.per_pod.cpu,
            Resource::Memory => s.per_pod.memory,
            Resource::Pods => 1,
            other => other.flavor().map_or(0, |f| s.per_pod.accelerator(f)),
        };
        per.saturating_mul(s.pods)
    };
    let set = intake.sets.iter().max_by_key(|s| asked(*s));
    let w = &intake.workload;
    let has = |p: &str| w.pointer(p).is_some_and(|v| !v.is_null());
    match intake.kind.as_str() {
        "PinterestTrainingJob" => {
            // Each role is a Job `<name>-<role>`.
            let role = set
                .and_then(|s| s.child.strip_prefix("Job/"))
                .and_then(|c| c.strip_prefix(intake.name.as_str()))
                .and_then(|c| c.strip_prefix('-'));
            let roles = w.pointer("/spec/roles").and_then(Value::as_array);
            match roles.and_then(|rs| rs.iter().position(|x| x.get("name").and_then(Value::as_str) == role)) {
                Some(i) => format!("spec.roles[{i}].replicas"),
                None => "spec.roles".into(),
            }
        }
        "PinterestJobSet" if has("/spec/parallelism") => "spec.parallelism".into(),
        "PinterestJobSet" => "spec.shards".into(),
        "PinterestCronJob" if has("/spec/job/shards") => "spec.job.shards".into(),
        "PinterestCronJob" => "spec.concurrencyPolicy".into(),
        _ => "spec.replicas".into(),
    }
}

/// A training job's GPUs that name no product are given the first the
/// team's quota holds (as Kueue assigns the first flavor of a queue), and
/// the product is written into the workload so that the controller holds
/// its pods to nodes of that product; a team whose quota holds no GPU is
/// refused there, at `spec.accelerators`.
fn accelerator_product(kind: &str, obj: &mut Value, team: &str, members: &Members, problems: &mut Vec<Problem>) {
    // A pod template whose containers (or the platform's sidecars, through
    // `spec.runtime.overrides`) ask for GPUs without selecting a product is
    // held to the team's first product the same way.
    // Only an override that reaches the pod (a platform container it
    // gets) makes it ask: one of a container it does not get gives it no
    // GPU, and so neither the GPU nodes' toleration nor their selector.
    let overrides = applied_overrides(kind, obj).iter().any(|r| {
        ["requests", "limits"].iter().any(|w| r.get(*w).and_then(|m| m.get(demand::GPU)).is_some_and(demand::some_of))
    });
    let mut templates: Vec<(String, String)> = vec![("/spec/template".into(), "spec.template".into())];
    for i in 0..obj.pointer("/spec/roles").and_then(Value::as_array).map_or(0, Vec::len) {
        templates.push((format!("/spec/roles/{i}/template"), format!("spec.roles[{i}].template")));
    }
    for (pointer, field) in templates {
        let Some(spec) = obj.pointer_mut(&format!("{pointer}/spec")).filter(|s| s.is_object()) else { continue };
        // A pod given devices tolerates their nodes' taint (as the
        // ExtendedResourceToleration admission plugin would, which an API
        // server does not run by default): else a pod that names its
        // product itself is counted, placed, and Pending for ever.
        for (resource, asks) in [
            (demand::GPU, overrides || demand::asks_for(spec, demand::GPU)),
            (demand::NEURON, demand::asks_for(spec, demand::NEURON)),
        ] {
            if !asks {
                continue;
            }
            let toleration = serde_json::json!({"key": resource, "operator": "Exists", "effect": "NoSchedule"});
            let mut tolerations = spec.get("tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
            if !tolerations.contains(&toleration) {
                tolerations.push(toleration);
                spec["tolerations"] = Value::Array(tolerations);
            }
        }
        if !(overrides || demand::asks_for(spec, demand::GPU)) || !matches!(demand::product_of(spec, ""), Ok(None)) {
            continue;
        }
        match members.gpu_products.first() {
            Some(f) => demand::hold_to_product(spec, *f),
            None => {
                // At the first container that asks (else the overrides).
                let mut at = "spec.runtime.overrides".to_string();
                'find: for list in ["initContainers", "containers"] {
                    for (i, c) in spec.get(list).and_then(Value::as_array).into_iter().flatten().enumerate() {
                        for which in ["limits", "requests"] {
                            if c.pointer(&format!("/resources/{which}"))
                                .and_then(|m| m.get(demand::GPU))
                                .is_some_and(demand::some_of)
                            {
                                at = format!("{field}.spec.{list}[{i}].resources.{which}[{}]", demand::GPU);
                                break 'find;
                            }
                        }
                    }
                }
                problems.push(Problem::new(
                    "capacity",
                    at,
                    format!(
                        "{} is not in team {team}'s quota (no GPU product: A100, H100, A10G, L4): ask the platform team for GPU quota",
                        demand::GPU
                    ),
                ));
            }
        }
    }
    if kind != "PinterestTrainingJob" {
        return;
    }
    let Some(acc) = obj.pointer_mut("/spec/accelerators").and_then(Value::as_object_mut) else { return };
    let kind = acc.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    let product = acc.get("product").and_then(Value::as_str).map(String::from);
    match (kind.as_str(), product) {
        (demand::GPU, None) => match members.gpu_products.first() {
            Some(f) => {
                acc.insert("product".into(), Value::String(f.short().into()));
            }
            None => problems.push(Problem::new(
                "capacity",
                "spec.accelerators",
                format!(
                    "{} is not in team {team}'s quota (no GPU product: A100, H100, A10G, L4): ask the platform team for GPU quota",
                    demand::GPU
                ),
            )),
        },
        (demand::GPU, Some(p)) if demand::Flavor::product(&p).is_none() => problems.push(Problem::new(
            "schema",
            "spec.accelerators.product",
            format!("{:?}: not a GPU product (A100, H100, A10G, L4)", crate::views::text::escaped(&p, false)),
        )),
        (demand::GPU | demand::NEURON, _) => {}
        (other, _) => problems.push(Problem::new(
            "platform",
            "spec.accelerators.type",
            format!(
                "{:?} is not counted by the team's quota ({} per product, {}): not offered to submitted work",
                crate::views::text::escaped(other, false),
                demand::GPU,
                demand::NEURON
            ),
        )),
    }
}

/// The submitted pod templates, each with the field it is at (a training
/// job has one per role, its own or the shared one).
fn templates_of(kind: &str, obj: &Value) -> Vec<(String, Value)> {
    match kind {
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
    }
}

/// Every container's image with the field it is at
/// (`spec.template.spec.containers[0].image`), in the workload's order.
pub fn image_fields(kind: &str, obj: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (at, t) in templates_of(kind, obj) {
        for field in ["initContainers", "containers", "ephemeralContainers"] {
            for (i, c) in
                t.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten().enumerate()
            {
                let image = c.get("image").and_then(Value::as_str).unwrap_or_default().to_string();
                out.push((format!("{at}.spec.{field}[{i}].image"), image));
            }
        }
    }
    out
}

/// Replaces each container image found in `pinned` (reference → the same
/// image by digest) wherever a pod template of `obj` names it.
pub fn pin_images(obj: &mut Value, pinned: &std::collections::BTreeMap<String, String>) {
    match obj {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if matches!(k.as_str(), "initContainers" | "containers" | "ephemeralContainers") {
                    for c in v.as_array_mut().into_iter().flatten() {
                        let to = c.get("image").and_then(Value::as_str).and_then(|i| pinned.get(i)).cloned();
                        if let Some(to) = to {
                            c["image"] = Value::String(to);
                        }
                    }
                } else {
                    pin_images(v, pinned);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| pin_images(v, pinned)),
        _ => {}
    }
}

/// Every image of every container is from an allowed registry; the first
/// container's is the artifact, and every image is listed once.
fn images_rule(templates: &[(String, Value)], policy: &Policy, problems: &mut Vec<Problem>) -> (String, Vec<String>) {
    let mut artifact = String::new();
    let mut images: Vec<String> = Vec::new();
    for (at, t) in templates {
        for field in ["initContainers", "containers", "ephemeralContainers"] {
            for (i, c) in
                t.pointer(&format!("/spec/{field}")).and_then(Value::as_array).into_iter().flatten().enumerate()
            {
                let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
                if field == "containers" && artifact.is_empty() {
                    artifact = image.to_string();
                }
                if !images.iter().any(|x| x == image) {
                    images.push(image.to_string());
                }
                if !policy.allowed_registries.is_empty()
                    && !policy.allowed_registries.iter().any(|r| from_registry(image, r))
                {
                    problems.push(Problem::new(
                        "platform",
                        format!("{at}.spec.{field}[{i}].image"),
                        format!(
                            "{image:?} is from {}, not an allowed registry ({})",
                            image_registry(image),
                            policy.allowed_registries.join(", ")
                        ),
                    ));
                }
            }
        }
    }
    (artifact, images)
}

/// Each Ingress host is the team's to claim ([`host_allowed`]).
fn hosts_rule(obj: &Value, team: &str, caller: &Caller, policy: &Policy, problems: &mut Vec<Problem>) {
    for (i, h) in obj.pointer("/spec/ingress/hosts").and_then(Value::as_array).into_iter().flatten().enumerate() {
        if let Err(why) = host_allowed(h.as_str().unwrap_or_default(), team, caller, &policy.domains) {
            problems.push(Problem::new(
                "platform",
                format!("spec.ingress.hosts[{i}]"),
                crate::views::text::escaped(&why, false).into_owned(),
            ));
        }
    }
}

/// Layer 3: the controller's own children of the workload under every
/// runtime profile the members run, checked by the Pod Security Standards
/// and the API server's rules of every minor; the most any profile asks.
#[allow(clippy::too_many_arguments)]
fn children_layer(
    kind: &str,
    named: &Value,
    team: &str,
    templates: &[(String, Value)],
    profiles: &[RuntimeProfile],
    policy: &Policy,
    members: &Members,
    problems: &mut Vec<Problem>,
) -> Option<Demand> {
    let mut demand: Option<Demand> = None;
    let mut validated = false;
    for profile in profiles {
        let ctx = render::Context {
            cluster: "gateway".into(),
            profile: profile.clone(),
            namespace_labels: Default::default(),
        };
        let children = match demand::children(kind, named, &ctx) {
            Ok(c) => c,
            Err(located) => {
                // Not renderable: the templates as written still meet the
                // API server's rules, each problem at once.
                problems.extend(located.into_iter().map(|l| Problem::new("schema", l.field, l.message)));
                let written = templates_as_written(templates, problems);
                problems.extend(written);
                break;
            }
        };
        if !validated {
            validated = true;
            problems.extend(pod_security(team, templates, &children, &policy.pod_security));
            let mut minors: Vec<u32> = members.minors.to_vec();
            if minors.is_empty() {
                minors.push(crate::spec::versions::DEFAULT_MINOR);
            }
            minors.sort_unstable();
            minors.dedup();
            let mut seen = std::collections::BTreeSet::new();
            for minor in minors {
                for l in demand::refusals(named, &children, minor) {
                    if seen.insert((l.field.clone(), l.message.clone())) {
                        problems.push(Problem::new("validation", l.field, l.message));
                    }
                }
            }
        }
        match demand::demand(named, &children, members.overheads) {
            Ok(d) => {
                demand = Some(match demand {
                    Some(before)
                        if (before.cpu, before.memory, before.accelerators) >= (d.cpu, d.memory, d.accelerators) =>
                    {
                        before
                    }
                    _ => d,
                })
            }
            Err(located) => {
                let mut seen = std::collections::BTreeSet::new();
                problems.extend(
                    located
                        .into_iter()
                        .filter(|l| seen.insert((l.field.clone(), l.message.clone())))
                        .map(|l| Problem::new("demand", l.field, l.message)),
                );
                break;
            }
        }
    }
    demand
}

/// How long the workload runs, as its submitter said (the annotation) or
/// its deadline bounds it; refused past [`MAX_EXPECTED_SECONDS`].
fn expected_seconds(obj: &Value, problems: &mut Vec<Problem>) -> Option<i64> {
    let i = |p: &str| obj.pointer(p).and_then(Value::as_i64);
    match obj.pointer(&format!("/metadata/annotations/{}", EXPECTED_DURATION.replace('/', "~1"))) {
        Some(Value::String(s)) => match humantime::parse_duration(s) {
            Ok(d) if d.as_secs() > MAX_EXPECTED_SECONDS as u64 => {
                problems.push(Problem::new(
                    "platform",
                    format!("metadata.annotations[{EXPECTED_DURATION}]"),
                    format!(
                        "{s:?}: must be at most {} days (the queue's estimates look no further)",
                        MAX_EXPECTED_SECONDS / 86_400
                    ),
                ));
                None
            }
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
        _ => match i("/spec/activeDeadlineSeconds") {
            // The platform's bound on a run (1e13 s is past the calendar).
            Some(d) if !(0..=MAX_EXPECTED_SECONDS).contains(&d) => {
                problems.push(Problem::new(
                    "platform",
                    "spec.activeDeadlineSeconds",
                    format!(
                        "{d}: must be between 0 and {MAX_EXPECTED_SECONDS} ({} days)",
                        MAX_EXPECTED_SECONDS / 86_400
                    ),
                ));
                None
            }
            d => d,
        },
    }
}

/// Each schema problem names the value it refused, as the API server's
/// `Invalid value: …` does.
fn name_refused_values(problems: &mut [Problem], workload: &Value) {
    for p in problems.iter_mut().filter(|p| p.layer == "schema" && !p.message.contains("Invalid value")) {
        if let Some(v) = value_at(workload, &p.field).filter(|v| v.is_string() || v.is_number() || v.is_boolean()) {
            // JSON leaves DEL and C1 as they are: escaped here too.
            let shown: String = v
                .to_string()
                .chars()
                .take(80)
                .flat_map(|c| if c.is_control() { c.escape_default().collect::<Vec<_>>() } else { vec![c] })
                .collect();
            p.message = format!("Invalid value: {shown}: {}", p.message);
        }
    }
}

/// The value at a field path (`spec.template.spec.containers[0].image`).
fn value_at<'a>(v: &'a Value, field: &str) -> Option<&'a Value> {
    use crate::spec::yaml::{parse_path, PathSeg};
    parse_path(field).into_iter().try_fold(v, |v, seg| match seg {
        PathSeg::Key(k) => v.get(k.as_str()),
        PathSeg::Index(i) => v.get(i),
    })
}

/// Removes the value at a field path, if it is there.
fn remove_at(v: &mut Value, field: &str) {
    use crate::spec::yaml::{parse_path, PathSeg};
    let mut segs = parse_path(field);
    let Some(last) = segs.pop() else { return };
    let parent = segs.into_iter().try_fold(v, |v, seg| match seg {
        PathSeg::Key(k) => v.get_mut(k.as_str()),
        PathSeg::Index(i) => v.get_mut(i),
    });
    match (parent, last) {
        (Some(Value::Object(m)), PathSeg::Key(k)) => {
            m.remove(&k);
        }
        (Some(Value::Array(a)), PathSeg::Index(i)) if i < a.len() => {
            a[i] = Value::Null;
        }
        _ => {}
    }
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
    fn gpus_without_a_product_are_held_to_the_teams_first_and_counted() {
        let mut w = service();
        w["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": "2"});
        let products = [demand::Flavor::GpuA10g];
        let members = Members { gpu_products: &products, ..Default::default() };
        let i = check(&w, &alice(), &Policy::default(), &members).unwrap();
        assert_eq!((i.demand.gpu_a10g, i.per_pod.gpu_a10g), (6, 2));
        let spec = &i.workload["spec"]["template"]["spec"];
        assert_eq!(demand::product_of(spec, "").unwrap(), Some(demand::Flavor::GpuA10g));
        assert!(spec["tolerations"].as_array().unwrap().iter().any(|t| t["key"] == "nvidia.com/gpu"));
        // A team whose quota holds no GPU: refused at the container that asks.
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        assert_eq!(
            problems[0].field, "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]",
            "{problems:?}"
        );
        // A GPU given to a platform sidecar counts as well (a probe ran 4 so, uncounted).
        let mut w = service();
        w["spec"]["runtime"] = json!({"overrides": {"logging": {"limits": {"nvidia.com/gpu": 4}}}});
        let i = check(&w, &alice(), &Policy::default(), &members).unwrap();
        assert_eq!(i.demand.gpu_a10g, 12);
    }

    /// Issue: work that asks for no GPU was held to GPU nodes through an
    /// override of a sidecar its pods do not get (a batch kind's
    /// `traffic`, a name of no container): counted no GPU, given the GPU
    /// nodes' toleration and selector.
    #[test]
    fn overrides_are_of_containers_the_pods_get_and_hold_no_pod_that_asks_no_gpu() {
        let products = [demand::Flavor::GpuA100];
        let members = Members { gpu_products: &products, ..Default::default() };
        let gpu = json!({"limits": {"nvidia.com/gpu": 1}});
        let mut js = service();
        js["kind"] = json!("PinterestJobSet");
        js["spec"].as_object_mut().unwrap().remove("replicas");
        js["spec"]["shards"] = json!(2);
        js["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        js["spec"]["runtime"] = json!({"overrides": {"traffic": gpu.clone(), "proxy": gpu.clone()}});
        let problems = check(&js, &alice(), &Policy::default(), &members).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["spec.runtime.overrides[traffic]", "spec.runtime.overrides[proxy]"], "{problems:?}");
        assert!(problems[0].message.contains("no such platform container"), "{problems:?}");
        // An override of a sidecar turned off reaches no pod: no GPU, and
        // neither the GPU nodes' toleration nor their selector.
        let mut w = service();
        w["spec"]["runtime"] = json!({"logging": {"enabled": false}, "overrides": {"logging": gpu}});
        let i = check(&w, &alice(), &Policy::default(), &members).unwrap();
        assert_eq!(i.demand.gpu_a100, 0);
        let spec = &i.workload["spec"]["template"]["spec"];
        assert!(spec.get("affinity").is_none() && spec.get("tolerations").is_none(), "{spec:#}");
    }

    /// Issue: `NVIDIA_VISIBLE_DEVICES=all` in a container's env was
    /// accepted: where the NVIDIA runtime is the default, that pod sees
    /// every GPU of its node, counted by no quota.
    #[test]
    fn env_that_chooses_a_nodes_devices_is_refused_in_every_container() {
        let mut w = service();
        let spec = &mut w["spec"]["template"]["spec"];
        spec["containers"][0]["env"] =
            json!([{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]);
        spec["initContainers"] = json!([{"name": "warm", "image": "registry.example.com/warm:1",
            "env": [{"name": "NEURON_RT_VISIBLE_CORES", "value": "0-31"}, {"name": "AWS_NEURON_VISIBLE_DEVICES", "value": "0"}]}]);
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.initContainers[0].env[0]",
                "spec.template.spec.initContainers[0].env[1]",
                "spec.template.spec.containers[0].env[1]"
            ],
            "{problems:?}"
        );
        assert!(problems[2].message.starts_with("NVIDIA_VISIBLE_DEVICES chooses"), "{problems:?}");
    }

    /// Issue: `nvidia.com/gpu` in pod-level resources was accepted (a
    /// real API server takes cpu and memory there).
    #[test]
    fn pod_level_devices_are_refused_as_submitted() {
        let mut w = service();
        w["spec"]["template"]["spec"]["resources"] = json!({"limits": {"nvidia.com/gpu": 1, "memory": "2Gi"}});
        let products = [demand::Flavor::GpuA100];
        let members = Members { gpu_products: &products, ..Default::default() };
        let problems = check(&w, &alice(), &Policy::default(), &members).unwrap_err();
        assert_eq!(problems[0].field, "spec.template.spec.resources.limits[nvidia.com/gpu]", "{problems:?}");
    }

    /// Issue: a workload past the whole fleet was refused at no field: the
    /// count that asks too much is named.
    #[test]
    fn the_count_that_asks_too_much_is_named() {
        let i = check(&service(), &alice(), &Policy::default(), &Members::default()).unwrap();
        assert_eq!(count_field(&i, Resource::Cpu), "spec.replicas");
        let tj = json!({"apiVersion": "pinfleet.dev/v1alpha1", "kind": "PinterestTrainingJob", "metadata": {"name": "t"},
            "spec": {"owner": {"team": "search", "project": "t"}, "framework": "PyTorch",
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.example.com/t:1",
                    "resources": {"requests": {"cpu": "1"}}}]}},
                "roles": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 9}]}});
        let i = check(&tj, &alice(), &Policy::default(), &Members::default()).unwrap();
        assert_eq!(count_field(&i, Resource::Cpu), "spec.roles[1].replicas");
        assert_eq!(count_field(&i, Resource::Pods), "spec.roles[1].replicas");
    }

    #[test]
    fn a_service_asks_for_its_requests_times_its_replicas() {
        let i = check(&service(), &alice(), &Policy::default(), &Members::default()).unwrap();
        // The app's requests and the four sidecars injected beside it (50m, 64Mi each).
        assert_eq!(i.demand, Amount::new(3 * (500 + 4 * 50), 3 * ((1 << 30) + (4 * 64 << 20)), 3));
        assert_eq!(
            (i.team.as_str(), i.tier, i.artifact.as_str()),
            ("search", Tier::OnDemand, "registry.example.com/web:1.2")
        );
        assert_eq!(i.workload["metadata"]["namespace"], "search");
    }

    #[test]
    fn every_layer_reports_what_it_can_still_check_and_names_the_refused_value() {
        let mut w = service();
        w["spec"]["template"]["spec"]["containers"] = json!([
            {"name": "app", "image": "registry.example.com/web:1.2", "resources": {"requests": {"cpu": "lots"}}},
            {"name": "Side_Car", "image": "registry.example.com/side:1"},
            {"name": "noimage"}
        ]);
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        let at = |field: &str| problems.iter().find(|p| p.field == field);
        let cpu = at("spec.template.spec.containers[0].resources.requests.cpu").expect("the quantity's problem");
        assert!(cpu.message.contains("\"lots\""), "{problems:?}");
        let name = at("spec.template.spec.containers[1].name").expect("the name's problem");
        assert!(name.message.contains("Side_Car"), "{problems:?}");
        assert!(at("spec.template.spec.containers[2].image").is_some(), "{problems:?}");
    }

    #[test]
    fn every_problem_comes_back_at_once_with_its_field() {
        let mut w = service();
        w["spec"]["owner"]["team"] = json!("ads");
        w["spec"]["replicas"] = json!(-1);
        w["spec"]["template"]["spec"]["containers"][0]["image"] = json!("docker.io/web:latest");
        let policy = Policy { allowed_registries: vec!["registry.example.com/".into()], ..Policy::default() };
        let problems = check(&w, &alice(), &policy, &Members::default()).unwrap_err();
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
    fn a_pod_tolerates_and_selects_only_the_node_groups_opened_to_its_team_and_never_the_control_plane() {
        let mut w = service();
        let spec = &mut w["spec"]["template"]["spec"];
        spec["tolerations"] = json!([
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists"},
            {"key": "dedicated", "operator": "Equal", "value": "ads", "effect": "NoSchedule"},
            {"key": "dedicated-search", "operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
            {"key": "node-role.kubernetes.io/master", "operator": "Exists"},
            {"key": "nvidia.com/gpu", "operator": "Exists"}
        ]);
        spec["nodeSelector"] = json!({"node-role.kubernetes.io/control-plane": ""});
        spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}],
             "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ip-10-0-0-1"]}]}
        ]}}});
        let policy = Policy {
            tolerations: [("search".to_string(), vec!["dedicated-search".to_string()])].into(),
            ..Policy::default()
        };
        let problems = check(&w, &alice(), &policy, &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        let terms = "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]";
        assert_eq!(
            fields,
            [
                "spec.template.spec.nodeSelector[node-role.kubernetes.io/control-plane]".to_string(),
                format!("{terms}.matchExpressions[0]"),
                format!("{terms}.matchFields[0]"),
                "spec.template.spec.tolerations[0]".into(),
                "spec.template.spec.tolerations[1]".into(),
                "spec.template.spec.tolerations[2]".into(),
                "spec.template.spec.tolerations[5]".into(),
                "spec.template.spec.tolerations[6]".into(),
            ],
            "{problems:?}"
        );
        assert!(
            problems[5].message.contains("team search may tolerate only")
                && problems[5].message.contains("dedicated-search")
        );
        // A platform admin may tolerate any dedicated taint, never the control plane's.
        let admin = Caller { admin: true, ..alice() };
        let problems = check(&w, &admin, &Policy::default(), &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.nodeSelector[node-role.kubernetes.io/control-plane]".to_string(),
                format!("{terms}.matchExpressions[0]"),
                "spec.template.spec.tolerations[0]".into(),
                "spec.template.spec.tolerations[5]".into(),
            ],
            "{problems:?}"
        );
        // Pinned to a node by its hostname label: placed by the scheduler instead; an admin may.
        let mut w = service();
        w["spec"]["template"]["spec"]["nodeSelector"] = json!({"kubernetes.io/hostname": "ip-10-0-0-1"});
        w["spec"]["template"]["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["ip-10-0-0-2"]}]}]}}});
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.nodeSelector[kubernetes.io/hostname]".to_string(),
                format!("{terms}.matchExpressions[0]"),
            ],
            "{problems:?}"
        );
        assert!(problems[0].message.contains("by its hostname is for platform admins"), "{problems:?}");
        check(&w, &admin, &Policy::default(), &Members::default()).unwrap();
        // A pod asking for a GPU tolerates the GPU nodes' taint, as the ExtendedResourceToleration plugin does.
        let mut w = service();
        w["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = json!({"nvidia.com/gpu": 1});
        w["spec"]["template"]["spec"]["tolerations"] = json!([{"key": "nvidia.com/gpu", "operator": "Exists"}]);
        // (extended resources are refused elsewhere until a quota counts them; the toleration is not)
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        assert!(problems.iter().all(|p| !p.field.contains("tolerations")), "{problems:?}");
        assert_eq!(
            parse_team_tolerations("search=dedicated,gpu").unwrap(),
            ("search".into(), vec!["dedicated".into(), "gpu".into()])
        );
        assert!(parse_team_tolerations("search=node-role.kubernetes.io/master").is_err());
    }

    #[test]
    fn owner_references_are_refused_wherever_they_are_written() {
        let mut w = service();
        let owner = json!([{"apiVersion": "v1", "kind": "Namespace", "name": "ads", "uid": "6f1c0000-0000-0000-0000-000000000000"}]);
        w["metadata"]["ownerReferences"] = owner.clone();
        w["spec"]["template"]["metadata"] = json!({"ownerReferences": owner});
        let problems = check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().filter(|p| p.layer == "platform").map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["metadata.ownerReferences", "spec.template.metadata.ownerReferences"], "{problems:?}");
    }

    #[test]
    fn a_team_registers_only_into_its_own_service_sets_behind_the_ingress_classes_it_is_allowed() {
        let mut w = service();
        w["spec"]["runtime"] = json!({"traffic": {"serviceset": "blue.checkout"}});
        w["spec"]["ports"] = json!([{"name": "http", "port": 8080}]);
        w["spec"]["ingress"] = json!({"className": "internal", "hosts": []});
        let policy = Policy {
            ingress_classes: vec![(None, "public".into()), (Some("ads".into()), "internal".into())],
            ..Policy::default()
        };
        let problems = check(&w, &alice(), &policy, &Members::default()).unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(fields, ["spec.runtime.traffic.serviceset", "spec.ingress.className"], "{problems:?}");
        assert!(problems[1].message.contains("only public"), "{problems:?}");
        // A look-alike of the team's prefix is not the team's.
        for set in ["search-x.web", "searchweb", "search.", ".search.web", "search..x", "search.x.", "search.X"] {
            w["spec"]["runtime"]["traffic"]["serviceset"] = json!(set);
            let problems = check(&w, &alice(), &policy, &Members::default()).unwrap_err();
            assert!(problems.iter().any(|p| p.field == "spec.runtime.traffic.serviceset"), "{set}: {problems:?}");
        }
        w["spec"]["runtime"]["traffic"]["serviceset"] = json!("search.checkout");
        w["spec"]["ingress"]["className"] = json!("public");
        check(&w, &alice(), &policy, &Members::default()).unwrap();
        w["spec"]["ingress"]["className"] = json!("internal");
        check(&w, &Caller { admin: true, ..alice() }, &policy, &Members::default()).unwrap();
        assert_eq!(parse_ingress_class("ads=internal").unwrap(), (Some("ads".into()), "internal".into()));
        assert!(parse_ingress_class("Ads=x").is_err());
    }

    #[test]
    fn a_bad_version_is_refused_by_digest_naming_only_the_callers_own_delivery() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let bad_of = |workload: &str| crate::delivery::book::Bad {
            image: format!("registry.example.com/web@{digest}"),
            digest: digest.clone(),
            workload: workload.into(),
            version: "v7".into(),
            delivery: 12,
            reason: "checkout errors at 9%".into(),
            at: chrono::Utc::now(),
        };
        let mut i = check(&service(), &alice(), &Policy::default(), &Members::default()).unwrap();
        // A tag is not matched until it is pinned; then by its digest, whatever the tag.
        let mark = |b: crate::delivery::book::Bad| (crate::delivery::book::bad_key(&b.digest, b.team()), b);
        let bad: std::collections::BTreeMap<_, _> = [mark(bad_of("search/web"))].into();
        assert!(marked_bad(&i, &bad).is_empty());
        pin_images(
            &mut i.workload,
            &[("registry.example.com/web:1.2".to_string(), format!("registry.example.com/web:1.2@{digest}"))].into(),
        );
        let p = marked_bad(&i, &bad);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].field, "spec.template.spec.containers[0].image");
        assert!(p[0].message.contains("delivery #12 of search/web v7") && p[0].message.contains("9%"), "{p:?}");
        // Another team's delivery: neither its name nor its reason.
        // Another team's mark of the same digest binds only that team: nothing here.
        let bad: std::collections::BTreeMap<_, _> = [mark(bad_of("blue/checkout"))].into();
        assert!(marked_bad(&i, &bad).is_empty(), "blue's mark binds blue alone");
    }

    #[test]
    fn daemons_and_unknown_kinds_are_refused_with_the_reason() {
        let mut w = service();
        w["kind"] = json!("PinterestDaemon");
        assert!(check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err()[0]
            .message
            .contains("the platform team installs daemons"));
        w["kind"] = json!("Deployment");
        assert_eq!(check(&w, &alice(), &Policy::default(), &Members::default()).unwrap_err()[0].field, "kind");
    }

    #[test]
    fn an_id_is_a_kubernetes_name_and_nothing_can_hide_in_it() {
        for ok in ["web-1", "reindex.2026-11-26", "a", &"x".repeat(253)] {
            assert!(check_id(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Web",
            "-web",
            "web-",
            "we b",
            "web\u{ad}1",
            "web\u{e0041}",
            "web\u{3164}",
            "web\u{180e}",
            "web\u{fff9}",
            "w\u{0435}b",
            "web\u{202e}",
            "web\u{200b}",
            "x\u{1b}]52;c;ZXZpbA==\u{7}",
            &"x".repeat(254),
        ] {
            let e = check_id(bad).unwrap_err();
            assert_eq!(e.field, "id", "{bad:?}");
            assert!(!e.message.chars().any(crate::views::text::hidden), "{bad:?}: the message echoes nothing hidden");
        }
    }

    proptest::proptest! {
        #[test]
        fn an_accepted_id_holds_only_what_the_rule_names(id in "\\PC{0,12}") {
            if check_id(&id).is_ok() {
                proptest::prop_assert!(id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'));
            }
        }
    }

    #[test]
    fn a_registry_is_its_exact_host_and_then_whole_path_components() {
        let allowed = "registry.example.com/";
        assert!(from_registry("registry.example.com/web:1", allowed));
        assert!(from_registry("REGISTRY.example.com/web:1", allowed));
        assert!(!from_registry("registry.example.com.evil.io/web:1", allowed));
        assert!(!from_registry("registry.example.com:5000/web:1", allowed), "another port is another registry");
        assert!(!from_registry("evil.io/registry.example.com/web", allowed));
        assert!(!from_registry("web:1", allowed), "Docker Hub's");
        assert_eq!(image_registry("busybox"), "docker.io");
        assert_eq!(image_registry("library/busybox"), "docker.io");
        assert_eq!(image_registry("localhost/x"), "localhost");
        let team = "registry.example.com/search/";
        assert!(from_registry("registry.example.com/search/web@sha256:00", team));
        assert!(!from_registry("registry.example.com/searchx/web", team));
        assert!(!from_registry("registry.example.com/web", team));
    }
}
