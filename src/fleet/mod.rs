//! Fleet-wide staged rollouts; this module is the plan. Clusters are
//! put in stages by their labels (`clusters/fleet.yaml`, or dev → staging
//! → production by `env`), ordered within a stage (a canary cluster first
//! where the stage asks for one, then by region and name), each stage
//! after the previous one's soak, each cluster inside its maintenance
//! windows.
//!
//! ```text
//! clusters/*.yaml + clusters/fleet.yaml ─▶ Folder::load ─▶ plan (pure) ─▶ table / -o json
//!                                                          └▶ rollout::FleetRollout ─▶ run::apply
//! ```
//!
//! The plan becomes a record ([`rollout`]) that one writer carries out
//! ([`run`]) through each cluster's own roll ([`aws`] on AWS, [`rehearsal`]
//! in memory on a paused clock).

pub mod aws;
pub mod rehearsal;
pub mod rollout;
pub mod run;
pub mod spec;
pub mod status;
pub mod tenancy;
pub mod text;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ami::window::Window;
pub use spec::{FleetSpec, Stage};

/// A cluster as the fleet sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub region: String,
}

/// What a rollout moves to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind", content = "value")]
pub enum Target {
    Ami(String),
    KubernetesVersion(String),
    /// `RECIPE/CHANNEL`: the image the channel holds in each cluster's
    /// region, for the groups that follow that channel.
    Channel(String),
    /// `NAMESPACE/NAME@VERSION`: a new version of a placed workload, its
    /// images by container (`crate::delivery`).
    Workload(String),
}

impl Target {
    /// A channel target's recipe and channel.
    pub fn channel(&self) -> Option<(&str, &str)> {
        match self {
            Target::Channel(rc) => rc.split_once('/'),
            _ => None,
        }
    }
}

/// One cluster's place in the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Place {
    pub cluster: String,
    /// 1-based position within its stage.
    pub position: usize,
    pub canary: bool,
    pub region: String,
    pub from: String,
    pub to: String,
    /// When it may start at the earliest: its stage's start, or its next window opening after that.
    pub earliest: DateTime<Utc>,
    /// The windows that allow it (empty: any time).
    pub windows: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedStage {
    pub name: String,
    pub selector: String,
    #[serde(with = "humantime_serde_secs")]
    pub soak: Duration,
    pub max_failures: String,
    pub approval: bool,
    /// The earliest the stage can start: now, or after every earlier stage's soak.
    pub earliest: DateTime<Utc>,
    pub clusters: Vec<Place>,
}

mod humantime_serde_secs {
    pub fn serialize<S: serde::Serializer>(d: &std::time::Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetPlan {
    pub target: Target,
    pub stages: Vec<PlannedStage>,
    /// Clusters no stage selects: the rollout leaves them alone.
    pub unstaged: Vec<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Ami(a) => write!(f, "AMI {a}"),
            Target::KubernetesVersion(v) => write!(f, "Kubernetes {v}"),
            Target::Channel(rc) => write!(f, "image channel {rc}"),
            Target::Workload(w) => write!(f, "workload {w}"),
        }
    }
}

/// The clusters folder as the fleet sees it: `fleet.yaml` and every cluster.
pub struct Folder {
    pub spec: FleetSpec,
    pub loaded: Vec<crate::spec::Loaded>,
    pub members: Vec<Member>,
}

impl Folder {
    pub fn load(dir: &std::path::Path, opts: &crate::spec::LoadOptions) -> anyhow::Result<Folder> {
        let (loaded, diags) = crate::spec::load_paths(std::slice::from_ref(&dir.to_path_buf()), opts);
        if !diags.0.is_empty() {
            anyhow::bail!("{diags}");
        }
        let spec = FleetSpec::load(&dir.join("fleet.yaml"))?;
        let refused = tenancy::check(&spec, &loaded);
        if !refused.is_empty() {
            anyhow::bail!("{}", crate::spec::Diagnostics(refused));
        }
        let members = loaded
            .iter()
            .map(|l| Member {
                name: l.cluster.metadata.name.clone(),
                labels: l.cluster.metadata.labels.clone(),
                region: l.cluster.spec.cloud.region.clone(),
            })
            .collect();
        Ok(Folder { spec, loaded, members })
    }

    /// The clusters some stage selects, in order.
    pub fn staged(&self) -> Vec<String> {
        stage_members(&self.spec, &self.members).into_iter().flatten().map(|m| m.name.clone()).collect()
    }

    /// Where the fleet's rollouts live: `stateStore` in fleet.yaml, else the
    /// one state store every staged cluster shares.
    pub fn state_store(&self, staged: &[String]) -> anyhow::Result<String> {
        if let Some(url) = &self.spec.state_store {
            return Ok(url.clone());
        }
        let urls: std::collections::BTreeSet<&str> = self
            .loaded
            .iter()
            .filter(|l| staged.contains(&l.cluster.metadata.name))
            .map(|l| l.cluster.spec.state_store.as_str())
            .collect();
        match urls.len() {
            1 => Ok(urls.into_iter().next().unwrap_or_default().to_string()),
            0 => anyhow::bail!("no cluster is in any stage of the rollout: nothing to roll"),
            _ => anyhow::bail!(
                "the staged clusters keep their state in different stores ({}); say where the fleet's rollouts live: `stateStore:` in fleet.yaml",
                urls.into_iter().collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// Why `cluster`'s own scheduled AMI job must leave it alone now, if a
/// fleet rollout holds it. A clusters folder that does not load, or a fleet
/// without one state store, holds nothing (the job says why at debug level).
pub async fn holds(
    dir: &std::path::Path,
    opts: &crate::spec::LoadOptions,
    cluster: &str,
    aws: &crate::cloud::aws::Aws,
) -> anyhow::Result<Option<String>> {
    let folder = match Folder::load(dir, opts) {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!("no fleet rollout check: {e:#}");
            return Ok(None);
        }
    };
    let staged = folder.staged();
    if !staged.iter().any(|c| c == cluster) {
        return Ok(None);
    }
    let url = match folder.state_store(&staged) {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!("no fleet rollout check: {e:#}");
            return Ok(None);
        }
    };
    // Only look: a store whose bucket does not exist holds nothing (and is not made here).
    match crate::state::Store::open_existing(&url, crate::state::lock::FLEET, Some(aws)).await? {
        Some(store) => run::Book { store }.holds(cluster).await,
        None => Ok(None),
    }
}

impl FleetPlan {
    /// Every cluster in a stage, in order.
    pub fn staged(&self) -> Vec<String> {
        self.stages.iter().flat_map(|s| s.clusters.iter().map(|c| c.cluster.clone())).collect()
    }
}

/// The windows that apply to `m` (by name or selector).
pub fn windows_for<'a>(spec: &'a FleetSpec, m: &Member) -> Vec<&'a Window> {
    spec.windows
        .iter()
        .filter(|w| match (&w.cluster, &w.selector) {
            (Some(c), _) => c == &m.name,
            (None, Some(s)) => s.matches(&m.labels),
            (None, None) => true,
        })
        .map(|w| &w.window)
        .collect()
}

/// When `m` may act at or after `t`: `t` without windows, else the
/// earliest opening of any of its windows.
pub fn next_opening(spec: &FleetSpec, m: &Member, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let ws = windows_for(spec, m);
    if ws.is_empty() {
        return Some(t);
    }
    ws.iter().filter_map(|w| w.next_open(t)).min()
}

/// Each stage's clusters, in order: a cluster goes to the first stage
/// whose selector matches it; within a stage by region and name, the
/// canary (the first labelled `canary: "true"`, else the first) first
/// where the stage asks for one.
pub fn stage_members<'a>(spec: &FleetSpec, members: &'a [Member]) -> Vec<Vec<&'a Member>> {
    let mut taken: std::collections::BTreeSet<&str> = Default::default();
    let mut out = Vec::new();
    for s in &spec.stages {
        if let Some(names) = &s.clusters {
            let chosen: Vec<&Member> = names
                .iter()
                .filter_map(|n| members.iter().find(|m| &m.name == n && !taken.contains(m.name.as_str())))
                .collect();
            taken.extend(chosen.iter().map(|m| m.name.as_str()));
            out.push(chosen);
            continue;
        }
        let mut chosen: Vec<&Member> =
            members.iter().filter(|m| !taken.contains(m.name.as_str()) && s.selector.matches(&m.labels)).collect();
        chosen.sort_by(|a, b| (&a.region, &a.name).cmp(&(&b.region, &b.name)));
        if s.canary {
            if let Some(i) = chosen.iter().position(|m| m.labels.get("canary").is_some_and(|v| v == "true")) {
                let c = chosen.remove(i);
                chosen.insert(0, c);
            }
        }
        taken.extend(chosen.iter().map(|m| m.name.as_str()));
        out.push(chosen);
    }
    out
}

/// The plan (pure). `from`: each cluster's present image or version.
pub fn plan(
    spec: &FleetSpec,
    members: &[Member],
    target: &Target,
    from: &BTreeMap<String, String>,
    now: DateTime<Utc>,
) -> FleetPlan {
    let to = match target {
        Target::Ami(a) => a.clone(),
        Target::KubernetesVersion(v) => v.clone(),
        Target::Channel(rc) => format!("channel {rc}"),
        Target::Workload(w) => w.clone(),
    };
    let mut stages = Vec::new();
    let mut start = now;
    let staged = stage_members(spec, members);
    for (s, chosen) in spec.stages.iter().zip(&staged) {
        let clusters = chosen
            .iter()
            .enumerate()
            .map(|(i, m)| Place {
                cluster: m.name.clone(),
                position: i + 1,
                canary: s.canary && i == 0,
                region: m.region.clone(),
                from: from.get(&m.name).cloned().unwrap_or_else(|| "-".into()),
                to: to.clone(),
                earliest: next_opening(spec, m, start).unwrap_or(start),
                windows: windows_for(spec, m).iter().map(|w| w.to_string()).collect(),
            })
            .collect::<Vec<_>>();
        stages.push(PlannedStage {
            name: s.name.clone(),
            selector: s.selector_text.clone(),
            soak: s.soak,
            max_failures: s.max_failures.to_string(),
            approval: s.approval,
            earliest: start,
            clusters,
        });
        // The next stage waits for this one's soak (rolls take their own time on top).
        start += chrono::Duration::from_std(s.soak).unwrap_or_default();
    }
    let taken: std::collections::BTreeSet<&str> = staged.iter().flatten().map(|m| m.name.as_str()).collect();
    let unstaged = members.iter().filter(|m| !taken.contains(m.name.as_str())).map(|m| m.name.clone()).collect();
    FleetPlan { target: target.clone(), stages, unstaged }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn m(name: &str, labels: &[(&str, &str)], region: &str) -> Member {
        Member {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            region: region.into(),
        }
    }

    #[test]
    fn stages_come_from_labels_in_order_with_the_canary_first() {
        let members = vec![
            m("prod-usw2", &[("env", "production")], "us-west-2"),
            m("prod-use1", &[("env", "production"), ("canary", "true")], "us-east-1"),
            m("prod-euw1", &[("env", "production")], "eu-west-1"),
            m("staging-use1", &[("env", "staging")], "us-east-1"),
            m("dev-local", &[("env", "dev")], "us-east-1"),
            m("sandbox", &[("env", "lab")], "us-east-1"),
        ];
        let now = Utc.with_ymd_and_hms(2026, 11, 23, 0, 0, 0).unwrap();
        let p = plan(&FleetSpec::default_stages(), &members, &Target::Ami("ami-new".into()), &BTreeMap::new(), now);
        let order: Vec<Vec<&str>> =
            p.stages.iter().map(|s| s.clusters.iter().map(|c| c.cluster.as_str()).collect()).collect();
        assert_eq!(order, [vec!["dev-local"], vec!["staging-use1"], vec!["prod-use1", "prod-euw1", "prod-usw2"]]);
        assert!(p.stages[2].clusters[0].canary);
        assert_eq!(p.unstaged, ["sandbox"]);
        // Each stage after the earlier stages' soaks (1h, then 4h).
        assert_eq!(p.stages[1].earliest, now + chrono::Duration::hours(1));
        assert_eq!(p.stages[2].earliest, now + chrono::Duration::hours(5));
    }

    #[test]
    fn a_file_with_windows_and_its_errors() {
        let spec = FleetSpec::parse(
            "stages:\n  - {name: canary, selector: \"env=prod,canary\", soak: 2h, maxFailures: \"10%\"}\n  - {name: prod, selector: env=prod, approval: true}\nwindows:\n  - {selector: env=prod, window: \"Tue,Thu 02:00-05:00 America/Los_Angeles\"}\n",
        )
        .unwrap();
        assert_eq!(spec.stages.len(), 2);
        let prod = m("prod-use1", &[("env", "prod")], "us-east-1");
        // Monday noon UTC: the next opening is Tuesday 02:00 PST = 10:00 UTC.
        let monday = Utc.with_ymd_and_hms(2026, 11, 23, 12, 0, 0).unwrap();
        assert_eq!(next_opening(&spec, &prod, monday), Some(Utc.with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap()));
        assert!(FleetSpec::parse("stages:\n  - {name: x, selector: env=x, soak: soon}\n")
            .unwrap_err()
            .contains("stages[0] (x).soak"));
        assert!(FleetSpec::parse("windows:\n  - {cluster: a, window: \"Sat 02:00-06:00 Moon/Base\"}\n")
            .unwrap_err()
            .contains("windows[0].window"));
        assert!(FleetSpec::parse("stagez: []\n").is_err());
        // The example beside the clusters parses.
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/fleet.yaml");
        let spec = FleetSpec::load(&example).unwrap();
        assert_eq!(spec.stages.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["dev", "staging", "production"]);
        assert_eq!(spec.windows.len(), 2);
    }
}
