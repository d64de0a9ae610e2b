//! `clusters/fleet.yaml`: the stages of a fleet rollout and the
//! maintenance windows, with located errors; the default when the file is
//! absent (dev → staging → production by the `env` label, a production
//! canary first).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::ami::window::Window;
use crate::spec::selector::Selector;
use crate::spec::IntOrPercent;

#[derive(Debug, Clone)]
pub struct Stage {
    pub name: String,
    pub selector: Selector,
    pub selector_text: String,
    pub soak: Duration,
    pub max_failures: IntOrPercent,
    pub approval: bool,
    pub canary: bool,
    /// How many of the stage's clusters roll at once (all when absent).
    pub max_parallel: Option<u32>,
    /// The clusters by name, in order, instead of the selector's (a wave
    /// of an image's rollout: a share of the fleet, not a label).
    pub clusters: Option<Vec<String>>,
}

#[derive(Debug, Clone)]
pub struct WindowRule {
    pub cluster: Option<String>,
    pub selector: Option<Selector>,
    pub window: Window,
}

#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub stages: Vec<Stage>,
    pub windows: Vec<WindowRule>,
    /// Where a rollout's record and the fleet lock live (default: the
    /// state store the staged clusters share).
    pub state_store: Option<String>,
    /// The accounts clusters may live in, and whose teams' clusters each
    /// takes ([`super::tenancy`]); None: no list, any account.
    pub accounts: Option<Vec<AllowedAccount>>,
}

/// One account on the admins' list.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AllowedAccount {
    pub id: String,
    /// What the account is for (`production`, `build`), shown in refusals.
    #[serde(default)]
    pub name: Option<String>,
    /// The teams (a cluster's `spec.owner`) whose clusters may land here;
    /// absent: every team's.
    #[serde(default)]
    pub teams: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawStage {
    name: String,
    selector: String,
    #[serde(default = "default_soak")]
    soak: String,
    #[serde(default)]
    max_failures: Option<serde_json::Value>,
    #[serde(default)]
    approval: bool,
    #[serde(default)]
    canary: bool,
    #[serde(default)]
    max_parallel: Option<u32>,
}

fn default_soak() -> String {
    "1h".into()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWindow {
    #[serde(default)]
    cluster: Option<String>,
    #[serde(default)]
    selector: Option<String>,
    window: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawFleet {
    #[serde(default)]
    stages: Vec<RawStage>,
    #[serde(default)]
    windows: Vec<RawWindow>,
    #[serde(default)]
    state_store: Option<String>,
    #[serde(default)]
    accounts: Option<Vec<AllowedAccount>>,
}

impl FleetSpec {
    /// The same fleet rolled in waves (`crate::ami::waves`) instead of its
    /// stages: `order` (the staged clusters, stage by stage, canaries
    /// first) split by share; each wave soaks until the next one's start
    /// (the last for an hour), and one failure in a wave halts the rest.
    /// Windows and the state store stay the file's.
    pub fn in_waves(&self, profile: crate::ami::waves::Profile, order: &[String]) -> FleetSpec {
        let waves = crate::ami::waves::plan(profile, order);
        let stages = waves
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let soak = waves.get(i + 1).map_or(Duration::from_secs(3600), |n| n.starts_after - w.starts_after);
                Stage {
                    name: format!("wave-{}", w.number),
                    selector: Selector::default(),
                    selector_text: format!("{}% of the fleet", w.share),
                    soak,
                    max_failures: IntOrPercent::Int(0),
                    approval: false,
                    canary: i == 0,
                    max_parallel: None,
                    clusters: Some(w.clusters.clone()),
                }
            })
            .collect();
        FleetSpec {
            stages,
            windows: self.windows.clone(),
            state_store: self.state_store.clone(),
            accounts: self.accounts.clone(),
        }
    }

    /// dev → staging → production by `env`, production's canary first.
    pub fn default_stages() -> FleetSpec {
        let stage = |name: &str, soak: u64, canary: bool| Stage {
            name: name.into(),
            selector: Selector::parse(&format!("env={name}")).expect("a selector"),
            selector_text: format!("env={name}"),
            soak: Duration::from_secs(soak),
            max_failures: IntOrPercent::Int(0),
            approval: false,
            canary,
            max_parallel: None,
            clusters: None,
        };
        FleetSpec {
            stages: vec![
                stage("dev", 3600, false),
                stage("staging", 4 * 3600, false),
                stage("production", 24 * 3600, true),
            ],
            windows: vec![],
            state_store: None,
            accounts: None,
        }
    }

    /// The file's stages and windows; the default when it does not exist.
    pub fn load(path: &Path) -> anyhow::Result<FleetSpec> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default_stages()),
            Err(e) => return Err(anyhow::anyhow!("reading {}: {e}", path.display())),
        };
        Self::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<FleetSpec, String> {
        let raw: RawFleet = serde_saphyr::from_str(text).map_err(|e| e.to_string())?;
        Self::from_raw(raw)
    }

    /// The same as [`FleetSpec::parse`], from a mapping inside another
    /// file (a delivery's `waves:`); errors name fields from there.
    pub fn from_value(v: serde_json::Value) -> Result<FleetSpec, String> {
        let raw: RawFleet = serde_path_to_error::deserialize(v).map_err(|e| {
            let p = e.path().to_string();
            format!("{p}: {}", e.into_inner())
        })?;
        Self::from_raw(raw)
    }

    fn from_raw(raw: RawFleet) -> Result<FleetSpec, String> {
        let mut stages = Vec::new();
        for (i, s) in raw.stages.into_iter().enumerate() {
            let at = format!("stages[{i}] ({})", s.name);
            let soak = humantime::parse_duration(&s.soak).map_err(|e| format!("{at}.soak: `{}`: {e}", s.soak))?;
            let max_failures = match s.max_failures {
                None => IntOrPercent::Int(0),
                Some(serde_json::Value::Number(n)) => IntOrPercent::Int(n.as_u64().unwrap_or(0) as u32),
                Some(serde_json::Value::String(p)) => p.parse().map_err(|e| format!("{at}.maxFailures: {e}"))?,
                Some(other) => return Err(format!("{at}.maxFailures: `{other}` is neither a count nor a percentage")),
            };
            stages.push(Stage {
                selector: Selector::parse(&s.selector).map_err(|e| format!("{at}.selector: {e}"))?,
                selector_text: s.selector,
                name: s.name,
                soak,
                max_failures,
                approval: s.approval,
                canary: s.canary,
                max_parallel: match s.max_parallel {
                    Some(0) => return Err(format!("{at}.maxParallel: 0 would never roll anything")),
                    other => other,
                },
                clusters: None,
            });
        }
        if stages.is_empty() {
            stages = Self::default_stages().stages;
        }
        let mut windows = Vec::new();
        for (i, w) in raw.windows.into_iter().enumerate() {
            let at = format!("windows[{i}]");
            if w.cluster.is_some() && w.selector.is_some() {
                return Err(format!("{at}: name a cluster or a selector, not both"));
            }
            windows.push(WindowRule {
                selector: w
                    .selector
                    .as_deref()
                    .map(Selector::parse)
                    .transpose()
                    .map_err(|e| format!("{at}.selector: {e}"))?,
                cluster: w.cluster,
                window: w.window.parse().map_err(|e| format!("{at}.window: {e}"))?,
            });
        }
        if let Some(url) = &raw.state_store {
            if !url.starts_with("s3://") && !url.starts_with("file://") {
                return Err(format!("stateStore: `{url}` is not a state store URL (s3://bucket/prefix or file://dir)"));
            }
        }
        if let Some(accounts) = &raw.accounts {
            let mut seen = std::collections::BTreeSet::new();
            for (i, a) in accounts.iter().enumerate() {
                if a.id.len() != 12 || !a.id.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(format!("accounts[{i}].id: `{}` is not an AWS account id (12 digits)", a.id));
                }
                if !seen.insert(&a.id) {
                    return Err(format!("accounts[{i}].id: account {} is listed twice", a.id));
                }
            }
        }
        Ok(FleetSpec { stages, windows, state_store: raw.state_store, accounts: raw.accounts })
    }
}
