//! One submitted workload: what was submitted, what the controller made of
//! it on each cluster (injected containers marked), where it was placed and
//! why, its status per cluster, why it waits, and the latency of each stage.

pub mod tables;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::html::{self, esc, seg};
use super::team::Why;
use super::{text, Status, Viewer};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadView {
    pub viewer: Viewer,
    pub at: DateTime<Utc>,
    #[serde(flatten)]
    pub summary: Summary,
    /// Who submitted it, and the identity that authenticated the call.
    pub submitted_by: String,
    pub phase: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<Waiting>,
    pub placement: Vec<Part>,
    /// accepted → admitted → placed → pods created, seconds from the stage before.
    pub latency: Vec<Stage>,
    /// The submitted object, as YAML.
    pub submitted: String,
    /// What the controller made of it, per cluster.
    pub made: Vec<Made>,
    /// Each image's provenance verdict, where the team has a trust policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provenance: Vec<crate::provenance::Verdict>,
    /// Its latest delivery across the clusters, where deliveries are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
}

/// A workload's latest delivery: the version, where it stands, and each
/// wave's clusters with their analysis' numbers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delivery {
    pub number: u64,
    pub version: String,
    pub state: String,
    /// wave, cluster, state, analysis.
    pub rows: Vec<[String; 4]>,
    /// Why it was rolled back and marked bad, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad: Option<String>,
    /// The workload's SLO and its error budget left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
}

/// What a submission is, as every screen names it: the API's view of a
/// submission (`gateway::service::View`) and the console's page alike.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub team: String,
    pub id: String,
    pub kind: String,
    pub workload: String,
    pub tier: String,
    pub priority: i32,
    pub artifact: String,
    pub demand: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    pub position: usize,
    pub estimate: String,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    pub cluster: String,
    pub replicas: u32,
    /// Why the placement put this many here.
    pub reason: String,
    pub state: Status,
    pub ready: Option<i32>,
    pub observed_at: Option<DateTime<Utc>>,
    /// What the member runs when a delivery moved it since the placement
    /// (`v3 (delivery feeds/web #4)`); none while it runs what was placed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<String>,
}

impl Part {
    /// What the member runs: the delivery's version, or the artifact placed.
    pub fn runs_text(&self) -> String {
        self.runs.clone().unwrap_or_else(|| "as placed".into())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    pub stage: String,
    pub at: Option<DateTime<Utc>>,
    pub seconds: Option<f64>,
}

/// A child object on one cluster and its pod template's containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Made {
    pub cluster: String,
    pub kind: String,
    pub name: String,
    pub containers: Vec<Container>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub name: String,
    pub image: String,
    pub init: bool,
    /// Not in what was submitted: the platform's runtime support.
    pub injected: bool,
}

impl WorkloadView {
    /// Each image's provenance as rows: digest, verdict, key, built from.
    fn provenance_rows(&self) -> Vec<Vec<String>> {
        self.provenance
            .iter()
            .map(|v| {
                let built = v.statement.as_ref().map(|s| format!("{}@{} by {}", s.repository, s.git_ref, s.builder));
                vec![
                    v.digest.clone(),
                    match &v.refused {
                        None => "trusted".to_string(),
                        Some(why) => format!("untrusted (admitted in warn mode): {why}"),
                    },
                    v.key.clone().unwrap_or_else(|| "-".into()),
                    built.unwrap_or_else(|| "-".into()),
                ]
            })
            .collect()
    }

    /// What a delivery moved the members to since the placement, and where
    /// (`v3 (delivery feeds/web #4) on north, south`).
    pub fn delivered(&self) -> Option<String> {
        let mut by: Vec<(String, Vec<&str>)> = Vec::new();
        for p in &self.placement {
            let Some(r) = &p.runs else { continue };
            match by.iter_mut().find(|(x, _)| x == r) {
                Some((_, cs)) => cs.push(&p.cluster),
                None => by.push((r.clone(), vec![&p.cluster])),
            }
        }
        if by.is_empty() {
            return None;
        }
        Some(by.iter().map(|(r, cs)| format!("{r} on {}", cs.join(", "))).collect::<Vec<_>>().join("; "))
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "{}/{}: {} {} ({}, priority {}) by {}\nartifact {}\ndemand {}\nphase {}\n",
            self.summary.team,
            self.summary.id,
            self.summary.kind,
            self.summary.workload,
            self.summary.tier,
            self.summary.priority,
            self.submitted_by,
            self.summary.artifact,
            self.summary.demand,
            self.phase.text()
        );
        if let Some(now) = self.delivered() {
            let _ = writeln!(out, "now runs {now} (the artifact above is what was submitted)");
        }
        if let Some(w) = &self.waiting {
            let _ = writeln!(
                out,
                "queued #{}; expected start {}\nwhy: {}\nunblocks: {}",
                w.position, w.estimate, w.why.message, w.why.unblock
            );
        }
        let rows: Vec<Vec<String>> = self
            .placement
            .iter()
            .map(|p| {
                vec![
                    p.cluster.clone(),
                    p.replicas.to_string(),
                    p.ready.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                    p.state.text(),
                    p.runs_text(),
                    p.reason.clone(),
                ]
            })
            .collect();
        if !self.provenance.is_empty() {
            out.push('\n');
            out.push_str(&text::table(&["DIGEST", "PROVENANCE", "KEY", "BUILT FROM"], &self.provenance_rows()));
        }
        if let Some(d) = &self.delivery {
            out.push_str(&format!("\ndelivery #{} of {}: {}\n", d.number, d.version, d.state));
            if let Some(b) = &d.budget {
                out.push_str(&format!("{b}\n"));
            }
            if let Some(b) = &d.bad {
                out.push_str(&format!("marked bad: {b}\n"));
            }
            let rows: Vec<Vec<String>> = d.rows.iter().map(|r| r.to_vec()).collect();
            out.push_str(&text::table(&["WAVE", "CLUSTER", "STATE", "ANALYSIS"], &rows));
        }
        out.push('\n');
        out.push_str(&text::table(&["CLUSTER", "REPLICAS", "READY", "STATE", "RUNS", "WHY HERE"], &rows));
        let rows: Vec<Vec<String>> = self
            .latency
            .iter()
            .map(|s| vec![s.stage.clone(), s.seconds.map(|x| format!("{x:.3}s")).unwrap_or_else(|| "-".into())])
            .collect();
        out.push('\n');
        out.push_str(&text::table(&["STAGE", "AFTER THE STAGE BEFORE"], &rows));
        for m in &self.made {
            let _ = writeln!(out, "\n{} {} on {}:", m.kind, m.name, m.cluster);
            let rows: Vec<Vec<String>> = m
                .containers
                .iter()
                .map(|c| {
                    vec![
                        c.name.clone(),
                        if c.init { "init".into() } else { "container".into() },
                        c.image.clone(),
                        if c.injected { "injected by the platform".into() } else { "submitted".into() },
                    ]
                })
                .collect();
            out.push_str(&text::table(&["CONTAINER", "TYPE", "IMAGE", "FROM"], &rows));
        }
        out
    }

    pub fn html_body(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "<h1>{} {}</h1>", esc(&self.summary.kind), esc(&self.summary.workload));
        out.push_str(&html::facts(&[
            (
                "Submission",
                format!(
                    "<a href=\"/teams/{}\">{}</a>/{}",
                    seg(&self.summary.team),
                    esc(&self.summary.team),
                    esc(&self.summary.id)
                ),
            ),
            ("Phase", html::badge(&self.phase)),
            ("Tier and priority", format!("{} · {}", esc(&self.summary.tier), self.summary.priority)),
            ("Submitted by", esc(&self.submitted_by)),
            ("Artifact", esc(&self.summary.artifact)),
            ("Now runs", esc(&self.delivered().unwrap_or_else(|| "what was placed".into()))),
            ("Demand", esc(&self.summary.demand)),
        ]));
        if let Some(w) = &self.waiting {
            let _ = write!(
                out,
                "<h2 id=\"why\">Why it waits</h2><p>Position {} in its team's queue; expected start {}.</p>",
                w.position,
                esc(&w.estimate)
            );
            out.push_str(&html::facts(&[
                ("Held by", esc(&w.why.quota)),
                ("Resource", esc(w.why.resource.as_deref().unwrap_or("-"))),
                ("Requested", esc(&w.why.requested)),
                ("Used", esc(&w.why.used)),
                ("Limit", esc(&w.why.limit)),
                ("Short by", esc(&w.why.short)),
            ]));
            let _ = write!(
                out,
                "<p>{}</p><p><strong>What would unblock it:</strong> {}</p>",
                esc(&w.why.message),
                esc(&w.why.unblock)
            );
        }
        if !self.provenance.is_empty() {
            out.push_str("<h2 id=\"provenance\">Provenance</h2>");
            let rows: Vec<Vec<String>> =
                self.provenance_rows().into_iter().map(|r| r.iter().map(|c| esc(c)).collect()).collect();
            let head = ["Digest", "Verdict", "Key", "Built from"];
            out.push_str(&html::table("What each image was checked for", &head, &rows, "provenance-table"));
        }
        if let Some(d) = &self.delivery {
            out.push_str("<h2 id=\"delivery\">Delivery</h2>");
            out.push_str(&format!(
                "<p>Delivery #{} of {}: <strong>{}</strong></p>",
                d.number,
                esc(&d.version),
                esc(&d.state)
            ));
            if let Some(b) = &d.budget {
                out.push_str(&format!("<p>{}</p>", esc(b)));
            }
            if let Some(b) = &d.bad {
                out.push_str(&format!("<p>Marked bad: {}</p>", esc(b)));
            }
            let rows: Vec<Vec<String>> = d.rows.iter().map(|r| r.iter().map(|c| esc(c)).collect()).collect();
            let head = ["Wave", "Cluster", "State", "Analysis"];
            out.push_str(&html::table("Each wave's clusters and their analysis", &head, &rows, "delivery-table"));
        }
        out.push_str("<h2 id=\"placement\">Placement</h2>");
        let rows: Vec<Vec<String>> = self
            .placement
            .iter()
            .map(|p| {
                vec![
                    format!("<a href=\"/clusters/{}\">{}</a>", seg(&p.cluster), esc(&p.cluster)),
                    p.replicas.to_string(),
                    p.ready.map(|r| r.to_string()).unwrap_or_else(|| "-".into()),
                    html::badge(&p.state),
                    esc(&p.runs_text()),
                    esc(&p.reason),
                ]
            })
            .collect();
        out.push_str(&html::table(
            "Where it runs and why",
            &["Cluster", "Replicas", "Ready", "State", "Runs", "Why here"],
            &rows,
            "placement-table",
        ));
        out.push_str("<h2 id=\"latency\">Latency</h2>");
        let rows: Vec<Vec<String>> = self
            .latency
            .iter()
            .map(|s| {
                vec![
                    esc(&s.stage),
                    s.at.map(|t| t.format("%H:%M:%S%.3f UTC").to_string()).unwrap_or_else(|| "not yet".into()),
                    s.seconds.map(|x| format!("{x:.3} s")).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out.push_str(&html::table("Stages", &["Stage", "At", "After the stage before"], &rows, "latency-table"));
        out.push_str("<h2 id=\"made\">What the controller made of it</h2>");
        if self.made.is_empty() {
            out.push_str("<p>Nothing yet: it has not been written to a cluster, or its cluster does not answer.</p>");
        }
        for (i, m) in self.made.iter().enumerate() {
            let rows: Vec<Vec<String>> = m
                .containers
                .iter()
                .map(|c| {
                    let from = if c.injected {
                        "<span class=\"injected\">injected by the platform</span>".to_string()
                    } else {
                        "submitted".to_string()
                    };
                    vec![esc(&c.name), if c.init { "init".into() } else { "container".into() }, esc(&c.image), from]
                })
                .collect();
            out.push_str(&html::table(
                &format!("{} {} on {}", m.kind, m.name, m.cluster),
                &["Container", "Type", "Image", "From"],
                &rows,
                &format!("made-{i}"),
            ));
        }
        let _ = write!(out, "<h2 id=\"submitted\">Submitted</h2><pre>{}</pre>", esc(&self.submitted));
        out
    }

    pub fn html(&self) -> String {
        html::page(
            &format!("{} {}", self.summary.kind, self.summary.workload),
            &format!("/workloads/{}/{}", seg(&self.summary.team), seg(&self.summary.id)),
            &self.viewer,
            &self.html_body(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fleet::tests::{at, viewer};
    use crate::views::Tone;

    fn workload() -> WorkloadView {
        WorkloadView {
            viewer: viewer(),
            at: at(),
            summary: Summary {
                team: "search".into(),
                id: "web-1".into(),
                kind: "PinterestService".into(),
                workload: "web".into(),
                tier: "OnDemand".into(),
                priority: 0,
                artifact: "registry.k8s.io/pause:3.10".into(),
                demand: "cpu 500m, memory 256Mi, pods 2".into(),
            },
            submitted_by: "alice".into(),
            phase: Status::new(Tone::Ok, "Running"),
            waiting: Some(Waiting {
                position: 1,
                estimate: "in 20m–40m".into(),
                why: crate::views::team::tests::why(),
            }),
            placement: vec![Part {
                cluster: "east".into(),
                replicas: 2,
                reason: "weight 1 of 2, room for 8".into(),
                state: Status::new(Tone::Ok, "Ready"),
                ready: Some(2),
                observed_at: Some(at()),
                runs: Some("v3 (delivery search/web #2)".into()),
            }],
            latency: vec![
                Stage { stage: "admitted".into(), at: Some(at()), seconds: Some(0.21) },
                Stage { stage: "pods created".into(), at: None, seconds: None },
            ],
            submitted: "kind: PinterestService\nmetadata: {name: web}\n".into(),
            delivery: Some(Delivery {
                number: 2,
                version: "search/web@v3".into(),
                state: "reverted".into(),
                rows: vec![[
                    "canary".into(),
                    "north".into(),
                    "reverted".into(),
                    "failed: error-ratio [0.2 FAILED]".into(),
                ]],
                bad: Some("analysis failed on north".into()),
                budget: Some("SLO web-availability (99.9% availability over 30days): error budget left 73.2% (error ratio 0.0268%)".into()),
            }),
            provenance: vec![crate::provenance::Verdict {
                digest: "sha256:4260fb6fa3f1".into(),
                checked: vec!["signature by search-release over sha256:4260fb6fa3f1".into()],
                key: Some("search-release".into()),
                statement: Some(crate::provenance::Statement {
                    builder: "https://github.com/slsa-framework/slsa-github-generator".into(),
                    repository: "https://github.com/example/search".into(),
                    git_ref: "refs/heads/main".into(),
                }),
                refused: None,
            }],
            made: vec![Made {
                cluster: "east".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                containers: vec![
                    Container {
                        name: "app".into(),
                        image: "registry.k8s.io/pause:3.10".into(),
                        init: false,
                        injected: false,
                    },
                    Container { name: "log-agent".into(), image: "fluent-bit:4".into(), init: false, injected: true },
                ],
            }],
        }
    }

    #[test]
    fn a_workload_as_text() {
        insta::assert_snapshot!(workload().text());
    }

    #[test]
    fn a_workload_as_html() {
        insta::assert_snapshot!(workload().html_body());
    }
}
