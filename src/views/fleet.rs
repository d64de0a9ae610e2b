//! The fleet at a glance: every member cluster with its labels, Kubernetes
//! version, image per group, nodes, last end-to-end run, drift, and
//! whether the figures are live or kept from when it last answered.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::html::{self, esc, seg};
use super::{text, Reach, Status, Viewer};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetView {
    pub viewer: Viewer,
    pub at: DateTime<Utc>,
    pub clusters: Vec<ClusterRow>,
    /// The latest fleet rollout, when the console reads the fleet's state store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<FleetStatusView>,
    /// Why the rollout could not be read (the rest of the page still shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    pub name: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    pub reach: Reach,
    pub version: Option<String>,
    /// Each instance group: its nodes and the images they run.
    pub groups: Vec<GroupImages>,
    pub nodes: usize,
    pub ready: usize,
    pub e2e: Status,
    pub drift: Status,
    /// Parts of admitted workloads placed here.
    pub workloads: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupImages {
    pub group: String,
    /// Image → nodes running it: the machine's AMI (its `pinfleet.dev/image`
    /// label, which pinfleet's machines set at boot), else the OS image the
    /// node reports (machines pinfleet did not boot, the sim's).
    pub images: BTreeMap<String, usize>,
}

impl GroupImages {
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .images
            .iter()
            .map(|(i, n)| if self.images.len() == 1 { i.clone() } else { format!("{i} ×{n}") })
            .collect();
        format!("{}: {}", self.group, parts.join(", "))
    }
}

impl ClusterRow {
    pub fn nodes_status(&self) -> Status {
        let tone = if self.nodes == 0 {
            super::Tone::Unknown
        } else if self.ready == self.nodes {
            super::Tone::Ok
        } else {
            super::Tone::Warn
        };
        Status::new(tone, format!("{}/{} ready", self.ready, self.nodes))
    }

    fn labels_text(&self) -> String {
        self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(",")
    }
}

impl FleetView {
    pub fn text(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .clusters
            .iter()
            .map(|c| {
                vec![
                    c.name.clone(),
                    c.reach.status().text(),
                    c.version.clone().unwrap_or_else(|| "-".into()),
                    format!("{}/{}", c.ready, c.nodes),
                    c.groups.iter().map(GroupImages::summary).collect::<Vec<_>>().join("; "),
                    c.e2e.text(),
                    c.drift.text(),
                    c.workloads.to_string(),
                    c.labels_text(),
                ]
            })
            .collect();
        text::table(&["CLUSTER", "REACH", "VERSION", "READY", "IMAGES", "E2E", "DRIFT", "WORKLOADS", "LABELS"], &rows)
    }

    /// Not everything fine: not answering, nodes not ready, a failed or
    /// warning e2e run, drift.
    pub fn needs_a_look(&self) -> Vec<&ClusterRow> {
        use super::Tone;
        self.clusters
            .iter()
            .filter(|c| {
                c.reach.stale()
                    || c.ready < c.nodes
                    || matches!(c.e2e.tone, Tone::Bad | Tone::Warn)
                    || matches!(c.drift.tone, Tone::Bad | Tone::Warn)
            })
            .collect()
    }

    fn rows(rows: &[&ClusterRow]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|c| {
                vec![
                    format!("<a href=\"/clusters/{}\">{}</a>", seg(&c.name), esc(&c.name)),
                    html::badge(&c.reach.status()),
                    esc(c.version.as_deref().unwrap_or("-")),
                    html::badge(&c.nodes_status()),
                    c.groups.iter().map(|g| esc(&g.summary())).collect::<Vec<_>>().join("<br>"),
                    html::badge(&c.e2e),
                    html::badge(&c.drift),
                    c.workloads.to_string(),
                    esc(&c.labels_text()),
                ]
            })
            .collect()
    }

    const HEAD: [&'static str; 9] = [
        "Cluster",
        "Reachable",
        "Kubernetes",
        "Nodes",
        "Images by group",
        "Last e2e run",
        "Drift",
        "Workloads",
        "Labels",
    ];

    /// The page's `<main>`: what needs a look first, then every cluster (a page of them).
    pub fn html_body(&self, page: usize) -> String {
        let mut out = String::with_capacity(600 * html::PAGE + 4096);
        let stale = self.clusters.iter().filter(|c| c.reach.stale()).count();
        let look = self.needs_a_look();
        let _ = write!(out, "<h1>Fleet</h1>");
        let summary = vec![
            ("Clusters", self.clusters.len().to_string()),
            ("Nodes ready", {
                let (r, n) = self.clusters.iter().fold((0, 0), |(r, n), c| (r + c.ready, n + c.nodes));
                format!("{r} of {n}")
            }),
            ("Not answering", stale.to_string()),
            ("Need a look", look.len().to_string()),
            ("As of", self.at.format("%Y-%m-%d %H:%M:%S UTC").to_string()),
        ];
        out.push_str(&html::facts(&summary));
        if let Some(r) = &self.rollout {
            out.push_str(&r.html_body());
        }
        if let Some(e) = &self.rollout_error {
            let st = Status::new(super::Tone::Stale, "fleet rollout not read").because(e.clone());
            let _ = write!(out, "<p class=\"stale-note\">{}</p>", html::badge(&st));
        }
        if !look.is_empty() {
            let (r, _) = html::paged(&look, 1, "/", "clusters");
            let more =
                if look.len() > r.end { format!(" (the first {} of {})", r.end, look.len()) } else { String::new() };
            out.push_str(&html::table(&format!("Need a look{more}"), &Self::HEAD, &Self::rows(&look[r]), "look"));
        }
        let all: Vec<&ClusterRow> = self.clusters.iter().collect();
        let (r, pager) = html::paged(&all, page, "/", "clusters");
        out.push_str(&html::table("Member clusters", &Self::HEAD, &Self::rows(&all[r]), "clusters"));
        out.push_str(&pager);
        out
    }

    pub fn html(&self, page: usize) -> String {
        html::page("Fleet", "/", &self.viewer, &self.html_body(page))
    }
}

/// `fleet rollout status`: the rollout, the fleet lock, and each cluster
/// with why it is not moving.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStatusView {
    pub number: u64,
    pub target: String,
    pub state: String,
    pub by: String,
    pub created_at: DateTime<Utc>,
    /// Who holds the fleet lock (a run of apply or revert), if anyone.
    pub lock: Option<String>,
    pub stages: Vec<FleetStageRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetStageRow {
    pub name: String,
    pub state: String,
    pub clusters: Vec<FleetClusterRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetClusterRow {
    pub cluster: String,
    pub state: String,
    pub from: String,
    pub to: String,
    /// Why it is not moving now (empty when it is, or is through).
    pub why: String,
    /// While it rolls: each group, and why one is not moving.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<FleetGroupRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetGroupRow {
    pub group: String,
    pub state: String,
    pub why: String,
}

impl FleetStatusView {
    /// `fleet rollout status` as the terminal shows it.
    pub fn text(&self) -> String {
        let v = self;
        let mut out = format!(
            "fleet rollout #{} to {}: {} (started {} by {})\n",
            v.number,
            v.target,
            v.state,
            v.created_at.format("%Y-%m-%d %H:%M UTC"),
            v.by
        );
        out.push_str(&match &v.lock {
            Some(l) => format!("fleet lock held by {l}\n"),
            None => "fleet lock: free (no apply is running)\n".to_string(),
        });
        for s in &v.stages {
            out.push_str(&format!("stage {}: {}\n", s.name, s.state));
            let rows: Vec<Vec<String>> = s
                .clusters
                .iter()
                .map(|c| vec![c.cluster.clone(), c.state.clone(), c.from.clone(), c.to.clone(), c.why.clone()])
                .collect();
            for line in text::table(&["CLUSTER", "STATE", "FROM", "TO", "WHY NOT MOVING"], &rows).lines() {
                out.push_str(&format!("  {line}\n"));
            }
            for c in s.clusters.iter().filter(|c| !c.groups.is_empty()) {
                out.push_str(&format!("  {}'s groups:\n", c.cluster));
                let rows: Vec<Vec<String>> =
                    c.groups.iter().map(|g| vec![g.group.clone(), g.state.clone(), g.why.clone()]).collect();
                for line in text::table(&["GROUP", "STATE", "WHY NOT MOVING"], &rows).lines() {
                    out.push_str(&format!("    {line}\n"));
                }
            }
        }
        out
    }

    /// Why a cluster is not moving, as a status.
    fn cluster_status(c: &FleetClusterRow) -> Status {
        use super::Tone;
        let tone = match c.state.as_str() {
            s if s.starts_with("done") || s.starts_with("rolled") || s == "passed" => Tone::Ok,
            s if s.contains("fail") => Tone::Bad,
            s if s.starts_with("rolling") || s.starts_with("soak") => Tone::Progress,
            _ if !c.why.is_empty() => Tone::Warn,
            _ => Tone::Unknown,
        };
        let s = Status::new(tone, c.state.clone());
        if c.why.is_empty() {
            s
        } else {
            s.because(c.why.clone())
        }
    }

    /// The rollout on the fleet page: each stage, each cluster and why it waits.
    pub fn html_body(&self) -> String {
        let mut out = format!("<h2 id=\"rollout\">Fleet rollout #{} to {}</h2>", self.number, esc(&self.target));
        out.push_str(&html::facts(&[
            ("State", esc(&self.state)),
            ("Started", format!("{} by {}", self.created_at.format("%Y-%m-%d %H:%M UTC"), esc(&self.by))),
            ("Fleet lock", esc(self.lock.as_deref().unwrap_or("free (no apply is running)"))),
        ]));
        for (i, s) in self.stages.iter().enumerate() {
            let rows: Vec<Vec<String>> = s
                .clusters
                .iter()
                .map(|c| {
                    let groups = c
                        .groups
                        .iter()
                        .map(|g| {
                            let why = if g.why.is_empty() { String::new() } else { format!(": {}", g.why) };
                            format!("<br><span class=\"why\">{} {}{}</span>", esc(&g.group), esc(&g.state), esc(&why))
                        })
                        .collect::<String>();
                    vec![
                        format!("<a href=\"/clusters/{}\">{}</a>", seg(&c.cluster), esc(&c.cluster)),
                        format!("{}{groups}", html::badge(&Self::cluster_status(c))),
                        esc(&c.from),
                        esc(&c.to),
                    ]
                })
                .collect();
            out.push_str(&html::table(
                &format!("Stage {}: {}", s.name, s.state),
                &["Cluster", "State and why it waits", "From", "To"],
                &rows,
                &format!("stage-{i}"),
            ));
        }
        out
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::views::Tone;

    pub(crate) fn at() -> DateTime<Utc> {
        "2026-11-24T12:00:00Z".parse().unwrap()
    }

    pub(crate) fn viewer() -> Viewer {
        Viewer {
            user: "alice".into(),
            teams: vec!["search".into()],
            via: "oidc".into(),
            admin: false,
            csrf: "c5rf".into(),
        }
    }

    pub(crate) fn fleet() -> FleetView {
        let row = |name: &str, reach: Reach, kernel: &str| ClusterRow {
            name: name.into(),
            labels: BTreeMap::from([("stage".into(), "prod".into())]),
            reach,
            version: Some("v1.36.2".into()),
            groups: vec![GroupImages { group: "nodes".into(), images: BTreeMap::from([(kernel.to_string(), 3)]) }],
            nodes: 4,
            ready: 3,
            e2e: Status::new(Tone::Ok, "passed").at(format!("/clusters/{name}#e2e")),
            drift: Status::new(Tone::Ok, "in sync"),
            workloads: 2,
        };
        FleetView {
            viewer: viewer(),
            at: at(),
            clusters: vec![
                row("east", Reach::Live { seen: at() }, "Ubuntu 24.04"),
                row("west", Reach::Stale { since: Some(at()), error: "connection refused".into() }, "Ubuntu <24.10>"),
            ],
            rollout: Some(FleetStatusView {
                number: 3,
                target: "kubernetes 1.37.1".into(),
                state: "running".into(),
                by: "ops@example.com".into(),
                created_at: at(),
                lock: None,
                stages: vec![FleetStageRow {
                    name: "prod".into(),
                    state: "needs approval".into(),
                    clusters: vec![FleetClusterRow {
                        cluster: "east".into(),
                        state: "pending".into(),
                        from: "1.36.2".into(),
                        to: "1.37.1".into(),
                        why: "stage prod needs approval: pinfleet fleet rollout approve prod".into(),
                        groups: vec![],
                    }],
                }],
            }),
            rollout_error: None,
        }
    }

    #[test]
    fn the_fleet_as_text() {
        insta::assert_snapshot!(fleet().text());
    }

    #[test]
    fn the_fleet_as_html() {
        insta::assert_snapshot!(fleet().html(1));
    }

    #[test]
    fn a_view_reads_back_what_it_wrote() {
        let v = fleet();
        let back: FleetView = serde_json::from_value(serde_json::to_value(&v).unwrap()).unwrap();
        assert_eq!(back, v);
    }
}
