//! A team: its quota per tier (guaranteed, maximum, used, borrowed), its
//! admitted work, and its queue with each waiting workload's position,
//! estimated start and the reason it waits.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::html::{self, esc, seg};
use super::{age, text, Status, Tone, Viewer};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamView {
    pub viewer: Viewer,
    pub at: DateTime<Utc>,
    pub team: String,
    pub cohort: String,
    /// None: the team has no quota (nothing it submits is admitted), or its record does not resolve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_problem: Option<String>,
    /// What the team runs around the gateway (in its namespace on the
    /// members, not admitted), counted in its OnDemand use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift: Option<String>,
    pub tiers: Vec<TierRow>,
    pub workloads: u64,
    pub max_workloads: Option<u64>,
    pub pods_per_minute: Option<u64>,
    pub queue: Vec<Queued>,
    pub admitted: Vec<WorkloadRow>,
    /// Accelerators per flavor and tier: the maximum, what is used, what
    /// is free (only flavors the team's quota or its work holds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accelerators: Vec<AcceleratorRow>,
    /// Use over time per tier, as a share of the tier's maximum (sampled
    /// by the gateway's leader a minute apart, kept on the host a day; oldest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<UsagePoint>,
}

/// One sample of a tier's use: cpu, memory and pods as shares of its maximum.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsagePoint {
    pub at: DateTime<Utc>,
    pub tier: String,
    pub cpu: f64,
    pub memory: f64,
    pub pods: f64,
}

/// A tier's use over time as an SVG chart (three lines told apart by their
/// dashes as well as their colours) with a text alternative.
fn chart(tier: &str, points: &[&UsagePoint]) -> String {
    let (w, h) = (600.0, 120.0);
    let (first, last) = (points[0].at, points[points.len() - 1].at);
    let span = (last - first).num_seconds().max(1) as f64;
    let x = |p: &UsagePoint| (p.at - first).num_seconds() as f64 / span * w;
    let y = |v: f64| h - v.clamp(0.0, 1.0) * h;
    let line = |f: &dyn Fn(&UsagePoint) -> f64, colour: &str, dash: &str| {
        let pts: Vec<String> = points.iter().map(|p| format!("{:.1},{:.1}", x(p), y(f(p)))).collect();
        format!("<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"/>", pts.join(" "))
    };
    let peak = |f: &dyn Fn(&UsagePoint) -> f64| points.iter().map(|p| f(p)).fold(0.0, f64::max) * 100.0;
    let now = points[points.len() - 1];
    let label = format!(
        "{tier} use over time, {} to {} UTC: cpu now {:.0}% of the maximum (peak {:.0}%), memory {:.0}% (peak {:.0}%), pods {:.0}% (peak {:.0}%)",
        first.format("%H:%M"),
        last.format("%H:%M"),
        now.cpu * 100.0,
        peak(&|p| p.cpu),
        now.memory * 100.0,
        peak(&|p| p.memory),
        now.pods * 100.0,
        peak(&|p| p.pods)
    );
    format!(
        "<figure class=\"chart\"><svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\" preserveAspectRatio=\"none\">\
<line x1=\"0\" y1=\"0\" x2=\"{w}\" y2=\"0\" stroke=\"#c8c8c8\"/><line x1=\"0\" y1=\"{h}\" x2=\"{w}\" y2=\"{h}\" stroke=\"#c8c8c8\"/>{}{}{}</svg>\
<figcaption>{} — <span class=\"key key-cpu\">cpu (solid)</span> <span class=\"key key-mem\">memory (dashed)</span> <span class=\"key key-pods\">pods (dotted)</span>; the top line is the maximum.</figcaption></figure>",
        esc(&label),
        line(&|p| p.cpu, "#0072B2", "none"),
        line(&|p| p.memory, "#D55E00", "8 4"),
        line(&|p| p.pods, "#009E73", "2 3"),
        esc(&label)
    )
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TierRow {
    pub tier: String,
    pub guaranteed: String,
    pub max: String,
    pub used: String,
    pub borrowed: String,
    /// Borrowing beyond the guarantee (work above it is the first to yield).
    pub borrowing: bool,
}

/// One accelerator flavor of one tier: `A100` (quota resource
/// `gpu-a100`, devices `nvidia.com/gpu` on A100 nodes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AcceleratorRow {
    pub tier: String,
    /// The short flavor people say (`A100`, `neuron`).
    pub flavor: String,
    /// The quota's resource name (`gpu-a100`).
    pub resource: String,
    pub guaranteed: u64,
    pub max: u64,
    pub used: u64,
    /// What the team may still take: its maximum less what it uses.
    pub free: u64,
}

/// Why a workload waits: which limit, which resource, by how much, and
/// what would unblock it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Why {
    /// quota, cohort, reclaim, fleet, workloads, rate.
    pub kind: String,
    pub quota: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    pub requested: String,
    pub used: String,
    pub limit: String,
    pub short: String,
    pub message: String,
    pub unblock: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Queued {
    pub id: String,
    pub workload: String,
    pub kind: String,
    pub tier: String,
    pub priority: i32,
    pub demand: String,
    /// 1-based, in the team's queue.
    pub position: usize,
    pub ahead_in_fleet: usize,
    /// Expected start: earliest and latest; none when it waits on work with no expected end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<(DateTime<Utc>, DateTime<Utc>)>,
    pub why: Why,
}

/// An expected start as people read it: `in 20m–40m (12:20–12:40 UTC)`.
pub fn estimate_text(estimate: Option<(DateTime<Utc>, DateTime<Utc>)>, now: DateTime<Utc>) -> String {
    match estimate {
        None => "unknown (waits on work with no expected end)".into(),
        Some((a, b)) => {
            let ina = age((a - now).num_seconds());
            let inb = age((b - now).num_seconds());
            if ina == inb {
                format!("in ~{ina} ({})", a.format("%H:%M UTC"))
            } else {
                format!("in {ina}–{inb} ({}–{})", a.format("%H:%M"), b.format("%H:%M UTC"))
            }
        }
    }
}

impl Queued {
    pub fn link(&self, team: &str) -> String {
        format!("/workloads/{}/{}", seg(team), seg(&self.id))
    }

    pub fn estimate_text(&self, now: DateTime<Utc>) -> String {
        estimate_text(self.estimate, now)
    }

    pub fn status(&self, team: &str) -> Status {
        Status::new(Tone::Progress, format!("queued #{}", self.position))
            .because(self.why.message.clone())
            .at(format!("{}#why", self.link(team)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRow {
    pub id: String,
    pub workload: String,
    pub kind: String,
    pub tier: String,
    pub demand: String,
    pub phase: Status,
    pub clusters: Vec<String>,
    pub since: Option<DateTime<Utc>>,
}

impl TeamView {
    pub fn text(&self) -> String {
        let mut out = self.quota_text();
        out.push_str(&self.queue_text());
        out.push('\n');
        out.push_str(&self.admitted_text());
        out
    }

    /// The team, its quota per tier and its caps (`pinfleet quota`).
    pub fn quota_text(&self) -> String {
        let mut out = format!("team {} (cohort {})\n", self.team, self.cohort);
        if let Some(p) = &self.quota_problem {
            let _ = writeln!(out, "quota: {p}");
        }
        let rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .map(|t| vec![t.tier.clone(), t.guaranteed.clone(), t.max.clone(), t.used.clone(), t.borrowed.clone()])
            .collect();
        out.push_str(&text::table(&["TIER", "GUARANTEED", "MAX", "USED", "BORROWED"], &rows));
        if let Some(d) = &self.drift {
            let _ = writeln!(out, "drift: {d} run around the gateway, counted in OnDemand USED");
        }
        if !self.accelerators.is_empty() {
            out.push_str(&text::table(
                &["ACCELERATOR", "TIER", "GUARANTEED", "MAX", "USED", "FREE"],
                &self.accelerator_rows(),
            ));
        }
        let _ = writeln!(
            out,
            "workloads {}/{} · creation rate {}\n",
            self.workloads,
            self.max_workloads.map(|m| m.to_string()).unwrap_or_else(|| "∞".into()),
            self.pods_per_minute.map(|p| format!("{p} pods/min")).unwrap_or_else(|| "unlimited".into())
        );
        out
    }

    fn accelerator_rows(&self) -> Vec<Vec<String>> {
        self.accelerators
            .iter()
            .map(|a| {
                vec![
                    if a.flavor == a.resource { a.flavor.clone() } else { format!("{} ({})", a.flavor, a.resource) },
                    a.tier.clone(),
                    a.guaranteed.to_string(),
                    a.max.to_string(),
                    a.used.to_string(),
                    a.free.to_string(),
                ]
            })
            .collect()
    }

    /// The queue in admission order, with why each waits (`pinfleet queue`).
    pub fn queue_text(&self) -> String {
        if self.queue.is_empty() {
            return format!("nothing of team {} waits\n", self.team);
        }
        let rows: Vec<Vec<String>> = self
            .queue
            .iter()
            .map(|q| {
                vec![
                    q.position.to_string(),
                    q.id.clone(),
                    q.tier.clone(),
                    q.demand.clone(),
                    q.estimate_text(self.at),
                    format!("{} — {}", q.why.message, q.why.unblock),
                ]
            })
            .collect();
        text::table(&["#", "ID", "TIER", "DEMAND", "STARTS", "WHY NOT ADMITTED"], &rows)
    }

    /// What is admitted and where it runs.
    pub fn admitted_text(&self) -> String {
        let rows: Vec<Vec<String>> = self
            .admitted
            .iter()
            .map(|w| vec![w.id.clone(), w.kind.clone(), w.tier.clone(), w.phase.text(), w.clusters.join(",")])
            .collect();
        text::table(&["ID", "KIND", "TIER", "PHASE", "CLUSTERS"], &rows)
    }

    /// The page's `<main>`; long lists show `page` of their rows.
    pub fn html_body(&self, page: usize) -> String {
        let mut out = String::with_capacity(1200 * html::PAGE + 4096);
        let path = format!("/teams/{}", seg(&self.team));
        let _ = write!(out, "<h1>Team {}</h1>", esc(&self.team));
        if let Some(p) = &self.quota_problem {
            let _ = write!(
                out,
                "<p class=\"stale-note\">{}</p>",
                html::badge(&Status::new(Tone::Bad, "no usable quota").because(p.clone()))
            );
        }
        out.push_str(&html::facts(&[
            ("Cohort", esc(&self.cohort)),
            (
                "Workloads",
                format!(
                    "{} of {}",
                    self.workloads,
                    self.max_workloads.map(|m| m.to_string()).unwrap_or_else(|| "no cap".into())
                ),
            ),
            (
                "Creation rate",
                self.pods_per_minute.map(|p| format!("{p} pods per minute")).unwrap_or_else(|| "unlimited".into()),
            ),
            ("Waiting", self.queue.len().to_string()),
        ]));
        out.push_str("<h2 id=\"quota\">Quota</h2>");
        let rows: Vec<Vec<String>> = self
            .tiers
            .iter()
            .map(|t| {
                let used = if t.borrowing {
                    html::badge(&Status::new(Tone::Warn, t.used.clone()).because("borrowing beyond the guarantee"))
                } else {
                    esc(&t.used)
                };
                vec![esc(&t.tier), esc(&t.guaranteed), esc(&t.max), used, esc(&t.borrowed)]
            })
            .collect();
        out.push_str(&html::table(
            "Quota per tier",
            &["Tier", "Guaranteed", "Maximum", "Used", "Borrowed"],
            &rows,
            "quota-table",
        ));
        if !self.accelerators.is_empty() {
            let rows: Vec<Vec<String>> =
                self.accelerator_rows().into_iter().map(|r| r.iter().map(|c| esc(c)).collect()).collect();
            out.push_str(&html::table(
                "Accelerators per flavor",
                &["Accelerator", "Tier", "Guaranteed", "Maximum", "Used", "Free"],
                &rows,
                "accelerator-table",
            ));
        }
        let tiers: Vec<&str> = self.tiers.iter().map(|t| t.tier.as_str()).collect();
        for tier in tiers {
            let points: Vec<&UsagePoint> = self.history.iter().filter(|p| p.tier == tier).collect();
            if points.len() >= 2 {
                out.push_str(&chart(tier, &points));
            }
        }
        out.push_str("<h2 id=\"queue\">Queue</h2>");
        let (shown, queue_pager) = html::paged(&self.queue, page, &path, "waiting");
        let rows: Vec<Vec<String>> = self.queue[shown]
            .iter()
            .map(|q| {
                vec![
                    q.position.to_string(),
                    format!("<a href=\"{}\">{}</a>", q.link(&self.team), esc(&q.id)),
                    esc(&q.tier),
                    q.priority.to_string(),
                    esc(&q.demand),
                    esc(&q.estimate_text(self.at)),
                    format!(
                        "<a href=\"{}#why\">{}</a><br><span class=\"why\">{}</span>",
                        q.link(&self.team),
                        esc(&q.why.message),
                        esc(&q.why.unblock)
                    ),
                ]
            })
            .collect();
        out.push_str(&html::table(
            "Waiting, in the order they will be admitted",
            &["Position", "Submission", "Tier", "Priority", "Demand", "Expected start", "Why it waits"],
            &rows,
            "queue-table",
        ));
        out.push_str(&queue_pager);
        out.push_str("<h2 id=\"admitted\">Admitted</h2>");
        let (shown, admitted_pager) = html::paged(&self.admitted, page, &path, "admitted");
        let rows: Vec<Vec<String>> = self.admitted[shown]
            .iter()
            .map(|w| {
                vec![
                    format!("<a href=\"/workloads/{}/{}\">{}</a>", seg(&self.team), seg(&w.id), esc(&w.id)),
                    esc(&w.kind),
                    esc(&w.tier),
                    esc(&w.demand),
                    html::badge(&w.phase),
                    w.clusters
                        .iter()
                        .map(|c| format!("<a href=\"/clusters/{}\">{}</a>", seg(c), esc(c)))
                        .collect::<Vec<_>>()
                        .join(", "),
                    w.since.map(|s| age((self.at - s).num_seconds())).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out.push_str(&html::table(
            "Admitted and running",
            &["Submission", "Kind", "Tier", "Demand", "Phase", "Clusters", "Age"],
            &rows,
            "admitted-table",
        ));
        out.push_str(&admitted_pager);
        out
    }

    pub fn html(&self, page: usize) -> String {
        html::page(
            &format!("Team {}", self.team),
            &format!("/teams/{}", seg(&self.team)),
            &self.viewer,
            &self.html_body(page),
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::views::fleet::tests::{at, viewer};

    pub(crate) fn why() -> Why {
        Why {
            kind: "quota".into(),
            quota: "search/OnDemand max".into(),
            resource: Some("cpu".into()),
            requested: "800m".into(),
            used: "500m".into(),
            limit: "1".into(),
            short: "300m".into(),
            message: "search/OnDemand max: cpu 800m requested, 500m of 1 used, 300m short".into(),
            unblock: "when search's admitted OnDemand work releases 300m cpu (or the quota is raised)".into(),
        }
    }

    pub(crate) fn team() -> TeamView {
        TeamView {
            viewer: viewer(),
            at: at(),
            team: "search".into(),
            cohort: "search".into(),
            quota_problem: None,
            drift: None,
            tiers: vec![TierRow {
                tier: "OnDemand".into(),
                guaranteed: "cpu 1, memory 4Gi, pods 10".into(),
                max: "cpu 1, memory 4Gi, pods 10".into(),
                used: "cpu 500m, memory 256Mi, pods 2".into(),
                borrowed: "cpu 0, memory 0, pods 0".into(),
                borrowing: false,
            }],
            workloads: 1,
            max_workloads: Some(5),
            pods_per_minute: None,
            queue: vec![Queued {
                id: "reindex-1".into(),
                workload: "reindex".into(),
                kind: "PinterestJobSet".into(),
                tier: "OnDemand".into(),
                priority: 0,
                demand: "cpu 800m, memory 256Mi, pods 1".into(),
                position: 1,
                ahead_in_fleet: 0,
                estimate: Some((at() + chrono::Duration::minutes(20), at() + chrono::Duration::minutes(40))),
                why: why(),
            }],
            admitted: vec![WorkloadRow {
                id: "web-1".into(),
                workload: "web".into(),
                kind: "PinterestService".into(),
                tier: "OnDemand".into(),
                demand: "cpu 500m, memory 256Mi, pods 2".into(),
                phase: Status::new(Tone::Ok, "Running"),
                clusters: vec!["east".into(), "west".into()],
                since: Some(at() - chrono::Duration::minutes(3)),
            }],
            history: (0..4)
                .map(|i| UsagePoint {
                    at: at() - chrono::Duration::minutes(30 - 10 * i),
                    tier: "OnDemand".into(),
                    cpu: 0.2 * i as f64,
                    memory: 0.1 * i as f64,
                    pods: 0.05 * i as f64,
                })
                .collect(),
            accelerators: vec![],
        }
    }

    #[test]
    fn a_team_as_text() {
        insta::assert_snapshot!(team().text());
    }

    #[test]
    fn a_teams_accelerators_show_per_flavor() {
        let mut t = team();
        t.tiers[0].max = "cpu 1, memory 4Gi, pods 10, gpu-a100 16, neuron 32".into();
        t.tiers[0].used = "cpu 500m, memory 256Mi, pods 2, gpu-a100 16".into();
        t.accelerators = vec![
            AcceleratorRow {
                tier: "OnDemand".into(),
                flavor: "A100".into(),
                resource: "gpu-a100".into(),
                guaranteed: 8,
                max: 16,
                used: 16,
                free: 0,
            },
            AcceleratorRow {
                tier: "OnDemand".into(),
                flavor: "neuron".into(),
                resource: "neuron".into(),
                guaranteed: 32,
                max: 32,
                used: 0,
                free: 32,
            },
        ];
        t.queue[0].why.resource = Some("gpu-a100".into());
        t.queue[0].why.message =
            "search/OnDemand max: gpu-a100 (nvidia.com/gpu A100) 8 requested, 16 of 16 used, 8 short".into();
        insta::assert_snapshot!(t.quota_text());
        insta::assert_snapshot!(t.html_body(1));
    }

    #[test]
    fn a_team_as_html() {
        insta::assert_snapshot!(team().html_body(1));
    }

    #[test]
    fn use_over_time_is_a_chart_with_a_text_alternative() {
        let body = team().html_body(1);
        assert!(
            body.contains("aria-label=\"OnDemand use over time, 11:30 to 12:00 UTC: cpu now 60% of the maximum (peak 60%), memory 30% (peak 30%), pods 15% (peak 15%)\""),
            "{body}"
        );
    }

    #[test]
    fn a_waiting_workload_links_to_its_reason() {
        let t = team();
        let s = t.queue[0].status(&t.team);
        assert_eq!(s.link.as_deref(), Some("/workloads/search/reindex-1#why"));
        assert!(t.html_body(1).contains("href=\"/workloads/search/reindex-1#why\""));
    }
}
