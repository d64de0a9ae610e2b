//! End-to-end validation of a running cluster: `pinfleet e2e`, the gates
//! of `upgrade` and `ami rollout`, and the `e2e` addon's CronJob.
//!
//! ```text
//! cluster file (+ rendered addons) + API client
//!   ─▶ pre-flight (checks) ─▶ cluster (checks) ─▶ platform smoke (smoke)
//!   ─▶ Report: each check with its phase, duration and outcome
//!   ─▶ output (table, -o json, JUnit XML via junit)
//! ```
//!
//! The checks judge what they read with pure functions (unit-tested); the
//! runner times them and stops a phase early only when the API is gone.

pub mod checks;
pub mod junit;
pub mod smoke;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::addons::RenderedAddon;
use crate::spec::Cluster;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Preflight,
    Cluster,
    Smoke,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preflight => "preflight",
            Phase::Cluster => "cluster",
            Phase::Smoke => "smoke",
        }
    }
}

/// How a check ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "lowercase")]
pub enum Outcome {
    Pass,
    /// Worth knowing; does not fail the run.
    Warn {
        reason: String,
        objects: Vec<String>,
    },
    Fail {
        reason: String,
        objects: Vec<String>,
    },
    Skip {
        reason: String,
    },
}

impl Outcome {
    pub fn fail(reason: impl Into<String>, objects: Vec<String>) -> Self {
        Outcome::Fail { reason: reason.into(), objects }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Pass => "ok",
            Outcome::Warn { .. } => "warn",
            Outcome::Fail { .. } => "FAIL",
            Outcome::Skip { .. } => "skip",
        }
    }
}

/// One check's result.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub phase: Phase,
    pub name: String,
    pub seconds: f64,
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// One cluster's run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub cluster: String,
    pub seconds: f64,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| matches!(c.outcome, Outcome::Fail { .. }))
    }

    pub fn failures(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| matches!(c.outcome, Outcome::Fail { .. })).collect()
    }
}

/// What a run checks against.
pub struct Target {
    pub cluster: Cluster,
    pub client: kube::Client,
    /// The addon set as rendered for the cluster; None skips the comparison.
    pub addons: Option<Vec<RenderedAddon>>,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub phases: Vec<Phase>,
    /// How long the smoke workloads may take to turn Ready or Succeeded.
    pub smoke_timeout: Duration,
    /// Run the smoke workloads on this runtime-support profile version
    /// (to try a new profile before it becomes the default).
    pub smoke_profile: Option<String>,
    /// Instance groups a roll in progress has yet to reach: their cordoned
    /// (Ready) nodes are that roll's own work — a drain a killed run
    /// started, which the roll resumes — not a fault of the cluster.
    pub rolling_groups: std::collections::BTreeSet<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            phases: vec![Phase::Preflight, Phase::Cluster, Phase::Smoke],
            smoke_timeout: Duration::from_secs(300),
            smoke_profile: None,
            rolling_groups: Default::default(),
        }
    }
}

/// Collects checks as they finish, telling `on` about each.
pub struct Recorder<'a> {
    pub checks: Vec<Check>,
    on: &'a (dyn Fn(&str, &Check) + Sync),
    cluster: String,
}

impl<'a> Recorder<'a> {
    pub fn new(cluster: &str, on: &'a (dyn Fn(&str, &Check) + Sync)) -> Self {
        Recorder { checks: Vec::new(), on, cluster: cluster.to_string() }
    }

    /// Runs one check, timing it; an error is a failure with its message.
    pub async fn check<F>(&mut self, phase: Phase, name: &str, f: F) -> &Outcome
    where
        F: std::future::Future<Output = anyhow::Result<Outcome>>,
    {
        let start = Instant::now();
        let outcome = f.await.unwrap_or_else(|e| Outcome::fail(format!("{e:#}"), vec![]));
        self.push(Check { phase, name: name.to_string(), seconds: start.elapsed().as_secs_f64(), outcome });
        &self.checks.last().expect("just pushed").outcome
    }

    pub fn push(&mut self, c: Check) {
        (self.on)(&self.cluster, &c);
        self.checks.push(c);
    }
}

/// Runs the chosen phases against one cluster. `on` sees each check as it ends.
pub async fn run(t: &Target, opts: &Options, on: &(dyn Fn(&str, &Check) + Sync)) -> Report {
    let start = Instant::now();
    let mut r = Recorder::new(&t.cluster.metadata.name, on);
    let reachable = checks::preflight(t, &mut r, opts.phases.contains(&Phase::Preflight)).await;
    if reachable {
        if opts.phases.contains(&Phase::Cluster) {
            checks::cluster(t, &mut r, &opts.rolling_groups).await;
        }
        if opts.phases.contains(&Phase::Smoke) {
            smoke::run(t, &mut r, opts).await;
        }
    }
    Report { cluster: t.cluster.metadata.name.clone(), seconds: start.elapsed().as_secs_f64(), checks: r.checks }
}

/// Told about each check as it ends: (cluster, check).
pub type OnCheck = std::sync::Arc<dyn Fn(&str, &Check) + Send + Sync>;

/// Runs several clusters, at most `parallel` at once, each in its own task
/// (so they use every core); reports in the order given.
pub async fn run_many(targets: Vec<Target>, opts: &Options, parallel: usize, on: OnCheck) -> Vec<Report> {
    let permits = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let tasks: Vec<_> = targets
        .into_iter()
        .map(|t| {
            let (opts, on, permits) = (opts.clone(), on.clone(), permits.clone());
            tokio::spawn(async move {
                let _permit = permits.acquire_owned().await.expect("the semaphore is never closed");
                run(&t, &opts, &*on).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        match t.await {
            Ok(r) => out.push(r),
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
    out
}

/// Where the last run's results are kept in the cluster (the `e2e`
/// addon's CronJob writes them; the workload controller's /metrics serves them).
pub const RESULTS_CONFIGMAP: &str = "pinfleet-e2e-results";
/// The results' key for since when the cluster has drifted.
pub const DRIFT_SINCE_KEY: &str = "drift-since";

fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// Objects that drifted from what pinfleet declared, by layer, as this run
/// found them (the addons that differ from the rendered set, the children
/// of platform workloads edited by hand).
pub fn drift(r: &Report) -> BTreeMap<&'static str, usize> {
    let mut out = BTreeMap::new();
    for (check, layer) in [(checks::DRIFT_ADDONS_CHECK, "addons"), (checks::DRIFT_WORKLOADS_CHECK, "workloads")] {
        if let Some(c) = r.checks.iter().find(|c| c.name == check) {
            let n = match &c.outcome {
                Outcome::Fail { objects, .. } | Outcome::Warn { objects, .. } => objects.len(),
                Outcome::Pass => 0,
                Outcome::Skip { .. } => continue,
            };
            out.insert(layer, n);
        }
    }
    out
}

/// Since when the cluster has drifted: the previous run's time when it
/// had drifted already, `now` when drift is new, none when in sync.
pub fn drift_since(
    r: &Report,
    previous: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    drift(r).values().any(|n| *n > 0).then(|| previous.unwrap_or(now))
}

/// The run as Prometheus metrics (pure): when it ran, how long it took,
/// each check's failure (1) or not (0), and drift by layer with since when
/// (the monitoring addon alerts on drift older than a day).
pub fn metrics(
    r: &Report,
    finished_at: chrono::DateTime<chrono::Utc>,
    drifted_since: Option<chrono::DateTime<chrono::Utc>>,
) -> String {
    let c = label(&r.cluster);
    let mut out = String::new();
    out.push_str("# HELP pinfleet_e2e_last_run_timestamp_seconds When the last end-to-end run ended.\n# TYPE pinfleet_e2e_last_run_timestamp_seconds gauge\n");
    out.push_str(&format!("pinfleet_e2e_last_run_timestamp_seconds{{cluster=\"{c}\"}} {}\n", finished_at.timestamp()));
    out.push_str("# HELP pinfleet_e2e_last_run_duration_seconds How long the last end-to-end run took.\n# TYPE pinfleet_e2e_last_run_duration_seconds gauge\n");
    out.push_str(&format!("pinfleet_e2e_last_run_duration_seconds{{cluster=\"{c}\"}} {:.3}\n", r.seconds));
    out.push_str("# HELP pinfleet_e2e_checks_failed Checks that failed in the last run.\n# TYPE pinfleet_e2e_checks_failed gauge\n");
    out.push_str(&format!("pinfleet_e2e_checks_failed{{cluster=\"{c}\"}} {}\n", r.failures().len()));
    out.push_str("# HELP pinfleet_e2e_check_failed Whether a check failed in the last run (1) or not (0).\n# TYPE pinfleet_e2e_check_failed gauge\n");
    for k in &r.checks {
        let failed = u8::from(matches!(k.outcome, Outcome::Fail { .. }));
        out.push_str(&format!(
            "pinfleet_e2e_check_failed{{cluster=\"{c}\",phase=\"{}\",check=\"{}\"}} {failed}\n",
            k.phase.as_str(),
            label(&k.name)
        ));
    }
    let drift = drift(r);
    if !drift.is_empty() {
        out.push_str("# HELP pinfleet_drift_objects Objects that differ from what pinfleet declared, by layer, at the last run.\n# TYPE pinfleet_drift_objects gauge\n");
        for (layer, n) in &drift {
            out.push_str(&format!("pinfleet_drift_objects{{cluster=\"{c}\",layer=\"{layer}\"}} {n}\n"));
        }
        out.push_str("# HELP pinfleet_drift_since_timestamp_seconds Since when the cluster has drifted (0: in sync).\n# TYPE pinfleet_drift_since_timestamp_seconds gauge\n");
        out.push_str(&format!(
            "pinfleet_drift_since_timestamp_seconds{{cluster=\"{c}\"}} {}\n",
            drifted_since.map_or(0, |t| t.timestamp())
        ));
    }
    out
}

/// The last recorded run's metrics, from the ConfigMap [`record`] writes
/// (empty when there is none); the controller's /metrics serves them.
pub async fn recorded_metrics(client: &kube::Client) -> String {
    use k8s_openapi::api::core::v1::ConfigMap;
    kube::api::Api::<ConfigMap>::namespaced(client.clone(), crate::controller::SYSTEM_NAMESPACE)
        .get_opt(RESULTS_CONFIGMAP)
        .await
        .ok()
        .flatten()
        .and_then(|cm| cm.data?.get("metrics.prom").cloned())
        .unwrap_or_default()
}

/// Keeps the run in the cluster: `pinfleet-system/pinfleet-e2e-results`
/// with the metrics and the report.
pub async fn record(client: &kube::Client, r: &Report) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, Patch, PatchParams};
    let api = Api::<ConfigMap>::namespaced(client.clone(), crate::controller::SYSTEM_NAMESPACE);
    // Drift carries over from run to run until it is gone.
    let previous = api
        .get_opt(RESULTS_CONFIGMAP)
        .await?
        .and_then(|cm| cm.data?.get(DRIFT_SINCE_KEY).cloned())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
        .map(|t| t.with_timezone(&chrono::Utc));
    let now = chrono::Utc::now();
    let since = drift_since(r, previous, now);
    let mut data =
        serde_json::json!({"metrics.prom": metrics(r, now, since), "report.json": serde_json::to_string_pretty(r)?});
    if let Some(t) = since {
        data[DRIFT_SINCE_KEY] = serde_json::json!(t.to_rfc3339());
    }
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": RESULTS_CONFIGMAP, "namespace": crate::controller::SYSTEM_NAMESPACE},
        "data": data,
    });
    api.patch(RESULTS_CONFIGMAP, &PatchParams::apply("pinfleet-e2e").force(), &Patch::Apply(cm)).await?;
    Ok(())
}
