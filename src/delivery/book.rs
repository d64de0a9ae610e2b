//! Where deliveries live (effects): in the delivery's state store, one
//! folder per workload (`.delivery.NAMESPACE.NAME/`: the record, as the
//! fleet's rollout keeps it, its lock and approvals, and each cluster's
//! analysis) and one for the whole line (`.delivery/`: whether the line is
//! stopped, the versions marked bad, the audit of stops and hotfixes).
//!
//! ```text
//! delivery::run ─▶ Book (fleet::run::Book: record, lock, approvals) + Line (stop, bad, audit)
//! gateway ─────────────────────────────────────────────────────────▶ Line::bad (refuses)
//! ```

use std::collections::BTreeMap;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::analysis::Measurement;
use crate::state::{S3Access, Store};

/// The line's folder: no workload's folder can be named so.
pub const LINE: &str = ".delivery";

/// The folder of one workload's deliveries. Namespace and name are DNS
/// labels (the delivery spec checks them), which never hold a '.': no two
/// workloads share a folder (the old `.delivery-NAMESPACE-NAME` gave team
/// red's `x-web` and team red-x's `web` the same one).
pub fn folder(namespace: &str, name: &str) -> String {
    format!(".delivery.{namespace}.{name}")
}

/// The folder deliveries were kept in before [`folder`]: never read (it
/// may be another team's), only found, to say so.
pub fn legacy_folder(namespace: &str, name: &str) -> String {
    format!(".delivery-{namespace}-{name}")
}

/// The line stopped: no delivery moves until it is lifted (a hotfix may, audited).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stopped {
    pub by: String,
    pub at: DateTime<Utc>,
    pub reason: String,
}

/// A version marked bad: the gateway refuses its images, a delivery will not start it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bad {
    /// The image, by digest, as delivered.
    pub image: String,
    pub digest: String,
    pub workload: String,
    pub version: String,
    pub delivery: u64,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl Bad {
    /// The team whose delivery marked it (its workload's namespace): the
    /// only team the mark binds.
    pub fn team(&self) -> &str {
        self.workload.split_once('/').map_or(self.workload.as_str(), |(ns, _)| ns)
    }
}

/// How [`Line::bad`] keys a mark: its digest and the team it binds.
pub fn bad_key(digest: &str, team: &str) -> String {
    format!("{digest} {team}")
}

/// `team`'s own mark of `digest`, if it made one (another team's mark
/// binds only that team).
pub fn mark_of<'a>(bad: &'a BTreeMap<String, Bad>, digest: &str, team: &str) -> Option<&'a Bad> {
    bad.get(&bad_key(digest, team))
}

/// One audited act on the line: a stop, a lift, a hotfix past a stop or a freeze.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Audit {
    pub at: DateTime<Utc>,
    pub by: String,
    pub act: String,
    pub what: String,
    pub reason: String,
}

/// One cluster's analysis in one delivery (what `status` shows per wave).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAnalysis {
    pub cluster: String,
    pub measurements: Vec<Measurement>,
    /// `baking`, `running`, then `successful`, `failed: …` or `inconclusive: …`.
    pub verdict: String,
    /// When the bake ends (set as it starts): a run picked up mid-bake
    /// waits out the rest, not a new bake.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bake_until: Option<DateTime<Utc>>,
}

/// A roll's deadline for the new revision to run Ready, from the first
/// write of these images: a roll picked up after a stopped run keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyBy {
    pub images: BTreeMap<String, String>,
    pub until: DateTime<Utc>,
}

/// Where a cluster's [`ReadyBy`] is kept while it rolls (not under
/// `analysis/`: those are all analyses).
pub fn ready_key(number: u64, cluster: &str) -> String {
    format!("rolls/{number:08}/{cluster}.json")
}

/// The workload's SLO and the Prometheus that measures it, as the last
/// delivery declared them (`slo.json` in its folder): what `status` and
/// the console ask for the error budget left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SloRecord {
    pub slo: super::slo::Slo,
    pub prometheus: String,
}

pub async fn slo(store: &Store) -> Result<Option<SloRecord>> {
    store.get_json("slo.json").await
}

pub async fn save_slo(store: &Store, r: &SloRecord) -> Result<()> {
    store.put_json("slo.json", r).await.map(|_| ())
}

/// The error budget left over the SLO's window, in words (effects: one query).
pub async fn budget_text(r: &SloRecord, namespace: &str, workload: &str) -> String {
    let vars = super::analysis::Vars {
        cluster: ".+".into(),
        namespace: namespace.into(),
        workload: workload.into(),
        version: ".+".into(),
    };
    let window = format!("{}s", r.slo.window.as_secs());
    let head = format!(
        "SLO {} ({}% {} over {})",
        r.slo.name,
        r.slo.objective,
        r.slo.sli,
        humantime::format_duration(r.slo.window)
    );
    let Ok(prom) = super::prometheus::Prometheus::new(&r.prometheus).map(|p| p.for_team(namespace)) else {
        return format!("{head}: no Prometheus client");
    };
    match prom.query(&r.slo.ratio(&vars, &window), None).await {
        super::analysis::Answer::Value(ratio) => {
            let left = 100.0 * super::slo::budget_left(&r.slo, ratio);
            let pct = super::analysis::number(100.0 * ratio);
            if left >= 0.0 {
                format!("{head}: error budget left {left:.1}% (error ratio {pct}%)")
            } else {
                format!("{head}: error budget SPENT, {:.1}% over (error ratio {pct}%)", -left)
            }
        }
        super::analysis::Answer::NoData => format!("{head}: no data yet"),
        super::analysis::Answer::Error(e) => format!("{head}: the budget cannot be read now ({e})"),
    }
}

/// The digest of a reference by digest (`…@sha256:HEX` → `sha256:HEX`).
pub fn digest_of(image: &str) -> Option<&str> {
    image.rsplit_once('@').map(|(_, d)| d).filter(|d| d.starts_with("sha256:"))
}

#[derive(Clone)]
pub struct Line {
    pub store: Store,
}

impl Line {
    pub async fn open(url: &str, aws: Option<&dyn S3Access>) -> Result<Line> {
        Ok(Line { store: Store::open(url, LINE, aws).await? })
    }

    pub async fn stopped(&self) -> Result<Option<Stopped>> {
        self.store.get_json("line-stopped.json").await
    }

    pub async fn stop(&self, s: &Stopped) -> Result<()> {
        self.store.put_json("line-stopped.json", s).await?;
        self.audit(&Audit {
            at: s.at,
            by: s.by.clone(),
            act: "stop".into(),
            what: "the line".into(),
            reason: s.reason.clone(),
        })
        .await
    }

    /// Lifts a stop; returns the stop it lifted.
    pub async fn lift(&self, by: &str, at: DateTime<Utc>) -> Result<Option<Stopped>> {
        let was = self.stopped().await?;
        if let Some(s) = &was {
            self.store.delete("line-stopped.json").await?;
            self.audit(&Audit {
                at,
                by: by.into(),
                act: "lift".into(),
                what: "the line".into(),
                reason: format!("stopped by {}: {}", s.by, s.reason),
            })
            .await?;
        }
        Ok(was)
    }

    pub async fn audit(&self, a: &Audit) -> Result<()> {
        let key = format!("audit/{}-{}.json", a.at.format("%Y%m%dT%H%M%S%.6fZ"), a.act);
        self.store.put_json(&key, a).await.map(|_| ())
    }

    pub async fn audits(&self) -> Result<Vec<Audit>> {
        let mut out = Vec::new();
        for k in self.store.list("audit/").await? {
            if let Some(a) = self.store.get_json::<Audit>(k.trim_start_matches('/')).await? {
                out.push(a);
            }
        }
        Ok(out)
    }

    /// Marks a version bad for the team whose delivery rolled it back (one
    /// mark per digest and team: another team's mark of the same digest
    /// neither replaces it nor binds it).
    pub async fn mark_bad(&self, b: &Bad) -> Result<()> {
        let key = format!("bad/{}/{}.json", b.digest.replace(':', "-"), b.team());
        self.store.put_json(&key, b).await.map(|_| ())
    }

    /// Every version marked bad, each team's mark apart ([`bad_key`]).
    pub async fn bad(&self) -> Result<BTreeMap<String, Bad>> {
        let mut out = BTreeMap::new();
        for k in self.store.list("bad/").await? {
            if let Some(b) = self.store.get_json::<Bad>(k.trim_start_matches('/')).await? {
                out.insert(bad_key(&b.digest, b.team()), b);
            }
        }
        Ok(out)
    }
}

/// Where one workload's analyses are kept.
pub fn analysis_key(number: u64, cluster: &str) -> String {
    format!("analysis/{number:08}/{cluster}.json")
}

pub async fn analyses(store: &Store, number: u64) -> Result<BTreeMap<String, ClusterAnalysis>> {
    let prefix = format!("analysis/{number:08}/");
    let mut out = BTreeMap::new();
    for k in store.list(&prefix).await? {
        if let Some(a) = store.get_json::<ClusterAnalysis>(k.trim_start_matches('/')).await? {
            out.insert(a.cluster.clone(), a);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_workloads_never_share_a_folder_and_none_is_the_lines() {
        // The old names collided: red's x-web and red-x's web.
        assert_eq!(legacy_folder("red", "x-web"), legacy_folder("red-x", "web"));
        assert_ne!(folder("red", "x-web"), folder("red-x", "web"));
        assert_eq!(folder("red", "x-web"), ".delivery.red.x-web");
        assert_ne!(folder("red", "x-web"), LINE);
    }
}
