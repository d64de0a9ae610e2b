//! A delivery file (pure): which workload moves to which version (its
//! images by digest), where it runs (the member clusters, with their
//! labels and regions), the waves and windows (a `fleet.yaml` mapping),
//! freeze windows, the analysis each wave must pass and the workload's
//! SLO. Every problem is reported at once, each with its field.
//!
//! ```text
//! deliveries/*.yaml ─▶ DeliverySpec::parse ─▶ plan (fleet::plan over the members) ─▶ FleetRollout
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::analysis::{Analysis, Condition, Metric};
use super::slo::Slo;
use crate::ami::window::Window;
use crate::fleet::{FleetSpec, Member};

/// The workload a delivery moves: a platform resource on each member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Debug, Clone)]
pub struct ClusterEntry {
    pub kubeconfig: PathBuf,
    pub region: String,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct DeliverySpec {
    pub workload: WorkloadRef,
    pub version: String,
    /// Container → image by digest.
    pub images: BTreeMap<String, String>,
    pub state_store: String,
    pub clusters: BTreeMap<String, ClusterEntry>,
    pub waves: FleetSpec,
    /// No wave starts inside one of these (a hotfix may, audited).
    pub freeze: Vec<Window>,
    pub prometheus: Option<String>,
    pub analysis: Analysis,
    /// How long a cluster may take to run the new version Ready.
    pub ready_timeout: Duration,
    pub slo: Option<Slo>,
    /// The team's trust policy (YAML, as the gateway's `--trust-policy`):
    /// every image must be a signed, landed build before anything moves.
    pub trust_policy: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Raw {
    workload: RawWorkload,
    version: String,
    images: BTreeMap<String, String>,
    state_store: String,
    clusters: BTreeMap<String, RawCluster>,
    #[serde(default)]
    waves: Option<Value>,
    #[serde(default)]
    freeze: Vec<String>,
    #[serde(default)]
    analysis: Option<RawAnalysis>,
    #[serde(default)]
    slo: Option<RawSlo>,
    #[serde(default)]
    trust_policy: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWorkload {
    #[serde(default = "default_kind")]
    kind: String,
    namespace: String,
    name: String,
}

fn default_kind() -> String {
    "PinterestService".into()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCluster {
    kubeconfig: PathBuf,
    #[serde(default)]
    region: String,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAnalysis {
    prometheus: Option<String>,
    interval: Option<String>,
    count: Option<u32>,
    failure_limit: Option<u32>,
    inconclusive_limit: Option<u32>,
    consecutive_error_limit: Option<u32>,
    bake: Option<String>,
    ready_timeout: Option<String>,
    /// With an SLO and no metrics: the SLI's error ratio must stay at or
    /// below this many times the budget (default 1); above it a
    /// measurement fails.
    max_burn_rate: Option<f64>,
    #[serde(default)]
    metrics: Vec<RawMetric>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawMetric {
    name: String,
    query: String,
    success_condition: Option<String>,
    failure_condition: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSlo {
    name: String,
    #[serde(default = "default_sli")]
    sli: String,
    objective: f64,
    #[serde(default = "default_window")]
    window: String,
    errors: String,
    total: String,
}

fn default_sli() -> String {
    "availability".into()
}

fn default_window() -> String {
    "30d".into()
}

fn duration(field: &str, text: Option<&str>, default: Duration, problems: &mut Vec<String>) -> Duration {
    match text {
        None => default,
        Some(t) => humantime::parse_duration(t).unwrap_or_else(|e| {
            problems.push(format!("{field}: `{t}`: {e}"));
            default
        }),
    }
}

/// The kinds that run until replaced (a batch kind's version is its next run).
pub const KINDS: [&str; 3] = ["PinterestService", "PinterestDaemon", "PinterestStatefulSet"];

/// A digest reference: `HOST/REPO@sha256:<64 hex>`.
fn by_digest(image: &str) -> bool {
    image.rsplit_once("@sha256:").is_some_and(|(name, hex)| {
        !name.is_empty() && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

impl DeliverySpec {
    pub fn load(path: &Path) -> anyhow::Result<DeliverySpec> {
        let text = std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse_file(&text, base, path).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// The file's delivery; kubeconfigs relative to `base`. Every problem at
    /// once, each at its line (of `delivery.yaml`).
    pub fn parse(text: &str, base: &Path) -> Result<DeliverySpec, String> {
        Self::parse_file(text, base, Path::new("delivery.yaml"))
    }

    /// As [`DeliverySpec::parse`], each problem located in `file`.
    pub fn parse_file(text: &str, base: &Path, file: &Path) -> Result<DeliverySpec, String> {
        let raw: Raw = serde_saphyr::from_str(text).map_err(|e| format!("{}: {e}", file.display()))?;
        Self::from_raw(raw, base).map_err(|problems| {
            let tree = crate::spec::yaml::parse_single(text, file).ok();
            problems
                .iter()
                .map(|p| match &tree {
                    Some(t) => format!("{}: {p}", t.locate(&field_of(p))),
                    None => format!("{}: {p}", file.display()),
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
    }

    fn from_raw(raw: Raw, base: &Path) -> Result<DeliverySpec, Vec<String>> {
        let mut problems = check_names(&raw);
        let waves = match raw.waves {
            None => Ok(FleetSpec { stages: one_wave(), windows: vec![], state_store: None, accounts: None }),
            Some(v) => FleetSpec::from_value(v).map_err(|e| format!("waves.{e}")),
        };
        let waves = match waves {
            Ok(w) => {
                problems.extend(unmatched(&w, &raw.clusters));
                w
            }
            Err(e) => {
                problems.push(e);
                FleetSpec { stages: one_wave(), windows: vec![], state_store: None, accounts: None }
            }
        };
        let mut freeze = Vec::new();
        for (i, f) in raw.freeze.iter().enumerate() {
            match f.parse::<Window>() {
                Ok(w) => freeze.push(w),
                Err(e) => problems.push(format!("freeze[{i}]: {e}")),
            }
        }
        let slo = raw.slo.map(|s| {
            let window = duration("slo.window", Some(&s.window), Duration::from_secs(30 * 86400), &mut problems);
            let slo =
                Slo { name: s.name, sli: s.sli, objective: s.objective, window, errors: s.errors, total: s.total };
            problems.extend(slo.check());
            slo
        });
        let a = raw.analysis.unwrap_or_default();
        let mut metrics = Vec::new();
        for (i, m) in a.metrics.iter().enumerate() {
            let at = format!("analysis.metrics[{i}] ({})", m.name);
            let cond = |field: &str, c: &Option<String>, problems: &mut Vec<String>| {
                c.as_deref()
                    .and_then(|t| Condition::parse(t).map_err(|e| problems.push(format!("{at}.{field}: {e}"))).ok())
            };
            let success_condition = cond("successCondition", &m.success_condition, &mut problems);
            let failure_condition = cond("failureCondition", &m.failure_condition, &mut problems);
            if m.success_condition.is_none() && m.failure_condition.is_none() {
                problems.push(format!("{at}: name a successCondition, a failureCondition or both"));
            }
            metrics.push(Metric {
                name: m.name.clone(),
                query: m.query.clone(),
                success_condition,
                failure_condition,
                budget_burn: None,
            });
        }
        let interval = duration("analysis.interval", a.interval.as_deref(), Duration::from_secs(60), &mut problems);
        if metrics.is_empty() {
            if let Some(s) = &slo {
                let burn = a.max_burn_rate.unwrap_or(1.0);
                if !(burn.is_finite() && burn > 0.0) {
                    problems.push(format!("analysis.maxBurnRate: {burn} must be a positive number"));
                }
                let range = format!("{}s", interval.as_secs().max(60));
                metrics.push(super::slo::analysis_metric(s, burn, &range));
            }
        }
        let count = a.count.unwrap_or(3);
        if count == 0 || count > 1000 {
            problems.push(format!("analysis.count: {count} must be between 1 and 1000"));
        }
        let analysis = Analysis {
            interval,
            count,
            failure_limit: a.failure_limit.unwrap_or(0),
            inconclusive_limit: a.inconclusive_limit.unwrap_or(0),
            consecutive_error_limit: a.consecutive_error_limit.unwrap_or(4),
            bake: duration("analysis.bake", a.bake.as_deref(), Duration::from_secs(300), &mut problems),
            metrics,
        };
        if !analysis.metrics.is_empty() && a.prometheus.is_none() {
            problems.push(
                "analysis.prometheus: the analysis' metrics need the Prometheus to ask (http://host:port)".into(),
            );
        }
        if let Some(url) = &a.prometheus {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                problems.push(format!("analysis.prometheus: `{url}` is not an http(s) URL"));
            }
        }
        let ready_timeout =
            duration("analysis.readyTimeout", a.ready_timeout.as_deref(), Duration::from_secs(600), &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        let clusters = raw
            .clusters
            .into_iter()
            .map(|(name, c)| {
                let kubeconfig = if c.kubeconfig.is_absolute() { c.kubeconfig } else { base.join(c.kubeconfig) };
                (name, ClusterEntry { kubeconfig, region: c.region, labels: c.labels })
            })
            .collect();
        Ok(DeliverySpec {
            workload: WorkloadRef {
                kind: raw.workload.kind,
                namespace: raw.workload.namespace,
                name: raw.workload.name,
            },
            version: raw.version,
            images: raw.images,
            state_store: raw.state_store,
            clusters,
            waves,
            freeze,
            prometheus: a.prometheus,
            analysis,
            ready_timeout,
            slo,
            trust_policy: raw.trust_policy.map(|p| if p.is_absolute() { p } else { base.join(p) }),
        })
    }

    /// The members as the fleet's plan sees them.
    pub fn members(&self) -> Vec<Member> {
        self.clusters
            .iter()
            .map(|(name, c)| Member { name: name.clone(), labels: c.labels.clone(), region: c.region.clone() })
            .collect()
    }

    /// The fleet target: `NAMESPACE/NAME@VERSION`.
    pub fn target(&self) -> crate::fleet::Target {
        crate::fleet::Target::Workload(format!("{}@{}", self.workload, self.version))
    }
}

/// The workload, version, images, state store and members: each problem with its field.
fn check_names(raw: &Raw) -> Vec<String> {
    let mut problems = Vec::new();
    let w = &raw.workload;
    for (field, v) in [("workload.namespace", &w.namespace), ("workload.name", &w.name)] {
        if let Some(p) = crate::kube::validation::dns1123_label(v).first() {
            problems.push(format!("{field}: `{v}`: {p}"));
        }
    }
    if !KINDS.contains(&w.kind.as_str()) {
        problems.push(format!("workload.kind: `{}` is not a serving platform kind ({})", w.kind, KINDS.join(", ")));
    }
    if raw.version.is_empty()
        || raw.version.len() > 63
        || !raw.version.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        problems
            .push(format!("version: `{}` must be 1-63 letters, digits, `.`, `_` or `-`", raw.version.escape_debug()));
    }
    if raw.images.is_empty() {
        problems.push("images: name at least one container's new image".into());
    }
    for (c, image) in &raw.images {
        if !by_digest(image) {
            problems.push(format!(
                "images.{c}: `{}` is not by digest; a delivery moves to digests (the gateway pins them at submission: `pinfleet view workload TEAM/ID` shows them)",
                image.escape_debug()
            ));
        }
    }
    if !raw.state_store.starts_with("s3://") && !raw.state_store.starts_with("file://") {
        problems.push(format!(
            "stateStore: `{}` is not a state store URL (s3://bucket/prefix or file://dir)",
            raw.state_store
        ));
    }
    if raw.clusters.is_empty() {
        problems.push("clusters: name the member clusters the workload runs on".into());
    }
    for name in raw.clusters.keys() {
        if let Some(p) = crate::kube::validation::dns1123_label(name).first() {
            problems.push(format!("clusters.{name}: {p}"));
        }
    }
    problems
}

/// A delivery names its members one by one, so a wave that takes none of
/// them (a typo in its selector: it would pass with nothing moved, and the
/// waves after it would go without their canary) and a member no wave takes
/// (it would never move) are mistakes, refused with the file.
fn unmatched(waves: &FleetSpec, clusters: &BTreeMap<String, RawCluster>) -> Vec<String> {
    let members: Vec<Member> = clusters
        .iter()
        .map(|(name, c)| Member { name: name.clone(), labels: c.labels.clone(), region: c.region.clone() })
        .collect();
    if members.is_empty() {
        return vec![];
    }
    let labels = |m: &Member| {
        let l: Vec<String> = m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        format!("{} {{{}}}", m.name, l.join(","))
    };
    let staged = crate::fleet::stage_members(waves, &members);
    let mut out = Vec::new();
    for (i, (stage, chosen)) in waves.stages.iter().zip(&staged).enumerate() {
        if chosen.is_empty() {
            out.push(format!(
                "waves.stages[{i}] ({}).selector: `{}` matches none of the delivery's clusters not taken by an earlier wave ({}); a wave that moves nothing would pass its gate, and the waves after it would go without their canary",
                stage.name,
                stage.selector_text.escape_debug(),
                members.iter().map(labels).collect::<Vec<_>>().join("; ")
            ));
        }
    }
    let taken: std::collections::BTreeSet<&str> = staged.iter().flatten().map(|m| m.name.as_str()).collect();
    for m in members.iter().filter(|m| !taken.contains(m.name.as_str())) {
        out.push(format!(
            "clusters.{}: no wave takes it (labels: {}); it would never move: match it in a wave's selector or remove it",
            m.name,
            labels(m)
        ));
    }
    out
}

/// The field a problem names (`waves.stages[0] (canary).soak: …` →
/// `waves.stages[0].soak`), to find its line.
fn field_of(problem: &str) -> String {
    let head = problem.split(": ").next().unwrap_or_default();
    let mut out = String::new();
    let mut depth = 0usize;
    for c in head.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ' ' => {}
            c if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Without `waves:`: a canary (the cluster labelled `canary: "true"`, else
/// the first), then the rest, none failing.
fn one_wave() -> Vec<crate::fleet::Stage> {
    let stage = |name: &str, canary: bool| crate::fleet::Stage {
        name: name.into(),
        selector: crate::spec::selector::Selector::default(),
        selector_text: String::new(),
        soak: Duration::ZERO,
        max_failures: crate::spec::IntOrPercent::Int(0),
        approval: false,
        canary,
        max_parallel: if canary { Some(1) } else { None },
        clusters: None,
    };
    vec![stage("all", true)]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub const FILE: &str = r#"
workload: {namespace: feeds, name: web}
version: v3
images: {app: "127.0.0.1:5000/feeds/web@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}
stateStore: s3://deliveries/feeds
clusters:
  north: {kubeconfig: north.yaml, region: us-east-1, labels: {canary: "true"}}
  south: {kubeconfig: /abs/south.yaml, region: us-west-2}
waves:
  stages:
    - {name: canary, selector: canary=true, soak: 0s}
    - {name: rest, selector: "!canary", soak: 0s}
freeze: ["Fri 16:00-23:59 UTC"]
analysis:
  prometheus: http://127.0.0.1:9090
  bake: 10s
  interval: 5s
  count: 2
slo:
  name: web-availability
  objective: 99.9
  errors: 'sum(rate(http_requests_total{cluster=~"{{cluster}}",code=~"5.."}[{{range}}]))'
  total: 'sum(rate(http_requests_total{cluster=~"{{cluster}}"}[{{range}}]))'
"#;

    #[test]
    fn a_delivery_file_and_what_it_defaults() {
        let d = DeliverySpec::parse(FILE, Path::new("/deliveries")).unwrap();
        assert_eq!(d.target().to_string(), "workload feeds/web@v3");
        assert_eq!(d.clusters["north"].kubeconfig, Path::new("/deliveries/north.yaml"));
        assert_eq!(d.clusters["south"].kubeconfig, Path::new("/abs/south.yaml"));
        assert_eq!(d.waves.stages.len(), 2);
        assert_eq!((d.analysis.count, d.analysis.failure_limit, d.analysis.interval), (2, 0, Duration::from_secs(5)));
        // No metric of its own: the SLO's SLI, within its budget (maxBurnRate 1): above it fails.
        assert_eq!(d.analysis.metrics.len(), 1);
        let m = &d.analysis.metrics[0];
        assert_eq!(m.name, "web-availability-error-ratio");
        let bounds = |m: &Metric| (m.success_condition.unwrap().to_string(), m.failure_condition.unwrap().to_string());
        assert_eq!(bounds(m), ("<= 0.001".to_string(), "> 0.001".to_string()));
        let twice =
            DeliverySpec::parse(&FILE.replace("count: 2", "count: 2\n  maxBurnRate: 2"), Path::new("/")).unwrap();
        assert_eq!(bounds(&twice.analysis.metrics[0]), ("<= 0.002".to_string(), "> 0.002".to_string()));
        assert_eq!(d.members().len(), 2);
    }

    #[test]
    fn every_problem_is_reported_with_its_field() {
        let bad = FILE
            .replace("version: v3", "version: \"v3 final\"")
            .replace("web@sha256:aaaa", "web:v3#")
            .replace("Fri 16:00-23:59 UTC", "Caturday")
            .replace("count: 2", "count: 0")
            .replace("soak: 0s}\n    - {name: rest", "soak: soon}\n    - {name: rest")
            .replace("objective: 99.9", "objective: 100");
        let e = DeliverySpec::parse(&bad, Path::new("/")).unwrap_err();
        for want in [
            "version: `v3 final`",
            "images.app:",
            "is not by digest",
            "freeze[0]:",
            "analysis.count: 0",
            "waves.stages[0] (canary).soak",
            "slo.objective",
        ] {
            assert!(e.contains(want), "{want} in\n{e}");
        }
        assert!(DeliverySpec::parse("workload: {}\n", Path::new("/")).is_err());
        assert!(DeliverySpec::parse(&FILE.replace("version:", "verzion:"), Path::new("/"))
            .unwrap_err()
            .contains("verzion"));
    }

    #[test]
    fn a_wave_that_matches_nothing_and_a_member_no_wave_takes_are_refused_at_their_lines() {
        // The first wave's selector has a typo: without the check it would
        // pass with nothing moved, and `south` would go with no canary first.
        let typo = FILE
            .replace(
                "north: {kubeconfig: north.yaml, region: us-east-1, labels: {canary: \"true\"}}",
                "north: {kubeconfig: north.yaml, region: us-east-1, labels: {ring: zero}}",
            )
            .replace(
                "{name: canary, selector: canary=true, soak: 0s}",
                "{name: first, selector: \"ring=zer0\", soak: 0s}",
            )
            .replace("{name: rest, selector: \"!canary\", soak: 0s}", "{name: second, selector: \"!ring\", soak: 0s}");
        let e = DeliverySpec::parse_file(&typo, Path::new("/d"), Path::new("/d/web.yaml")).unwrap_err();
        let lines: Vec<&str> = e.lines().collect();
        assert_eq!(lines.len(), 2, "{e}");
        // Each at the line a person edits: the wave's selector, the member's name.
        assert!(lines[0].starts_with("/d/web.yaml:11:"), "{e}");
        assert!(lines[0].contains("waves.stages[0] (first).selector: `ring=zer0` matches none"), "{e}");
        assert!(lines[0].contains("north {ring=zero}"), "{e}");
        assert!(lines[1].starts_with("/d/web.yaml:7:"), "{e}");
        assert!(lines[1].contains("clusters.north: no wave takes it"), "{e}");
        // The same file with the selector mended is a delivery.
        assert!(DeliverySpec::parse(&typo.replace("ring=zer0", "ring=zero"), Path::new("/d")).is_ok());
        // Without `waves:`, one wave takes every member.
        let (head, _) = FILE.split_once("waves:").unwrap();
        let (_, tail) = FILE.split_once("freeze:").unwrap();
        assert!(DeliverySpec::parse(&format!("{head}freeze:{tail}"), Path::new("/d")).is_ok());
    }

    #[test]
    fn the_field_a_problem_names() {
        assert_eq!(field_of("waves.stages[0] (canary).soak: `soon`: x"), "waves.stages[0].soak");
        assert_eq!(field_of("analysis.metrics[1] (err).successCondition: y"), "analysis.metrics[1].successCondition");
        assert_eq!(field_of("images: name at least one"), "images");
    }
}
