//! One cluster: its groups and machines (image, kubelet, age, health), its
//! addons with their versions, the checks of its last end-to-end run with
//! their reasons, and the workloads placed on it.

pub mod tables;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::html::{self, esc, seg};
use super::{age, text, Reach, Status, Tone, Viewer};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub viewer: Viewer,
    pub at: DateTime<Utc>,
    pub name: String,
    pub reach: Reach,
    pub version: Option<String>,
    pub machines: Vec<Machine>,
    pub addons: Vec<Addon>,
    pub e2e: Option<E2eRun>,
    pub drift: Status,
    pub workloads: Vec<PlacedPart>,
    /// The applied revisions, oldest first (from the cluster's state store).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<Revision>,
    /// Why no revisions are shown, when they are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revisions_note: Option<String>,
    /// Why the addons are not compared with the definition, when they are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addons_note: Option<String>,
    /// Each group the capacity ledger holds back, with why and what is tried next.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity: Vec<String>,
    /// Its etcd backups as the state store has them (none: not read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_backup: Option<EtcdBackup>,
}

/// The newest verified etcd backup, and what came after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackup {
    /// The newest verified backup: its id and when it was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<(String, DateTime<Utc>)>,
    /// The newest backup, when its verification failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed: Option<String>,
    /// Backups in the store.
    pub count: usize,
    /// The cluster's full-backup interval, in seconds (older than twice it
    /// is what the monitoring addon's alert fires on).
    pub interval_seconds: i64,
    /// Why the backups could not be read, when they could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl EtcdBackup {
    /// As the alert judges it: bad when the newest backup failed its
    /// verification or the newest verified one is older than twice the
    /// interval; unknown when the store could not be read.
    pub fn status(&self, now: DateTime<Utc>) -> Status {
        if let Some(n) = &self.note {
            return Status::new(Tone::Unknown, "not read").because(n.clone());
        }
        let verified = self.last_verified.as_ref().map(|(id, at)| ((now - *at).num_seconds(), id));
        match (verified, &self.last_failed) {
            (_, Some(failed)) => Status::new(Tone::Bad, "verification failed").because(format!(
                "the newest backup ({failed}) failed its verification{}",
                verified.map(|(s, _)| format!("; the last verified one is {} old", age(s))).unwrap_or_default()
            )),
            (None, None) if self.count == 0 => Status::new(Tone::Bad, "none").because("no etcd backup was ever taken"),
            (None, None) => {
                Status::new(Tone::Warn, "none verified").because(format!("{} backup(s), none verified yet", self.count))
            }
            (Some((s, id)), None) if s > self.interval_seconds.saturating_mul(2) => {
                Status::new(Tone::Bad, format!("{} old", age(s))).because(format!(
                    "the newest verified backup ({id}) is older than twice the interval ({})",
                    age(self.interval_seconds)
                ))
            }
            (Some((s, id)), None) => {
                Status::new(Tone::Ok, format!("{} old", age(s))).because(format!("verified: {id}"))
            }
        }
    }
}

/// One applied revision: when, by whom, what changed, the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revision {
    pub revision: u64,
    pub applied_at: String,
    pub by: String,
    /// `+created ~updated -/+replaced -deleted`.
    pub changes: String,
    pub command: String,
}

/// A node as it reports itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    pub name: String,
    pub group: String,
    pub role: String,
    /// The machine image (AMI) when the node names it, else its OS image.
    pub image: String,
    pub os_image: String,
    pub kernel: String,
    pub kubelet: String,
    pub runtime: String,
    pub created: Option<DateTime<Utc>>,
    pub ready: bool,
    /// Why it is not ready, or cordoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub unschedulable: bool,
    /// The EC2 instance behind the node (from its provider ID).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The launch-template version it was started from (from EC2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_template_version: Option<String>,
}

impl Machine {
    pub fn health(&self) -> Status {
        match (self.ready, self.unschedulable) {
            (true, false) => Status::new(Tone::Ok, "Ready"),
            (true, true) => {
                Status::new(Tone::Warn, "Ready, cordoned").because("unschedulable: being drained or replaced")
            }
            (false, _) => Status::new(Tone::Bad, "NotReady")
                .because(self.reason.clone().unwrap_or_else(|| "the kubelet reports no reason".into())),
        }
    }
}

/// An addon as installed: its objects carry its name and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Addon {
    pub name: String,
    pub version: String,
    /// Workloads of the addon (Deployments and DaemonSets) and how many are ready.
    pub workloads: usize,
    pub ready: usize,
    /// Compared with the cluster's definition (when the fleet folder is read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defined: Option<Defined>,
}

/// What the cluster's definition selects of an addon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Defined {
    /// The version the definition selects; None: the definition has no such addon.
    pub version: Option<String>,
}

/// The version shown for an addon the definition selects but nobody installed.
pub const NOT_INSTALLED: &str = "-";

impl Addon {
    /// Whether it is as its cluster's definition says (None: not compared).
    pub fn drift(&self) -> Option<Status> {
        let d = self.defined.as_ref()?;
        Some(match &d.version {
            Some(v) if self.version == NOT_INSTALLED => Status::new(Tone::Warn, "not installed")
                .because(format!("the definition selects {v}: pinfleet addons apply")),
            Some(v) if *v == self.version => Status::new(Tone::Ok, "as defined"),
            Some(v) => {
                Status::new(Tone::Warn, "drifted").because(format!("the definition selects {v}: pinfleet addons apply"))
            }
            None => Status::new(Tone::Warn, "not defined").because("the cluster's definition has no such addon"),
        })
    }
}

/// The last end-to-end run, as the cluster recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct E2eRun {
    pub finished: Option<DateTime<Utc>>,
    pub seconds: f64,
    pub checks: Vec<E2eCheck>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct E2eCheck {
    pub phase: String,
    pub name: String,
    /// pass, warn, fail, skip.
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<String>,
}

impl E2eCheck {
    pub fn anchor(&self) -> String {
        let s: String = format!("{}-{}", self.phase, self.name)
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("check-{s}")
    }

    pub fn status(&self) -> Status {
        let tone = match self.result.as_str() {
            "pass" => Tone::Ok,
            "warn" => Tone::Warn,
            "fail" => Tone::Bad,
            _ => Tone::Unknown,
        };
        let s = Status::new(tone, self.result.clone());
        match &self.reason {
            Some(r) => s.because(r.clone()),
            None => s,
        }
    }
}

impl E2eRun {
    /// The run in one status, linking to the first check that failed.
    pub fn status(&self, cluster: &str) -> Status {
        let fails: Vec<&E2eCheck> = self.checks.iter().filter(|c| c.result == "fail").collect();
        let warns = self.checks.iter().filter(|c| c.result == "warn").count();
        let when = self.finished.map(|t| format!(" at {}", t.format("%Y-%m-%d %H:%M UTC"))).unwrap_or_default();
        let base = format!("/clusters/{}", seg(cluster));
        match fails.first() {
            Some(first) => Status::new(Tone::Bad, format!("{} failed", fails.len()))
                .because(format!("{}: {}{when}", first.name, first.reason.clone().unwrap_or_default()))
                .at(format!("{base}#{}", first.anchor())),
            None if warns > 0 => Status::new(Tone::Warn, format!("passed, {warns} warnings"))
                .because(format!("ran{when}"))
                .at(format!("{base}#e2e")),
            None => Status::new(Tone::Ok, "passed").because(format!("ran{when}")).at(format!("{base}#e2e")),
        }
    }
}

/// A workload's part on this cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacedPart {
    pub team: String,
    pub id: String,
    pub workload: String,
    pub replicas: u32,
    pub state: String,
}

impl ClusterView {
    fn e2e_rows(&self) -> Vec<&E2eCheck> {
        self.e2e.as_ref().map(|r| r.checks.iter().collect()).unwrap_or_default()
    }

    pub fn text(&self) -> String {
        let mut out = format!(
            "cluster {}: {} · Kubernetes {} · drift: {}\n",
            self.name,
            self.reach.status().text(),
            self.version.as_deref().unwrap_or("-"),
            self.drift.text()
        );
        for line in &self.capacity {
            let _ = writeln!(out, "{line}");
        }
        if let Some(b) = &self.etcd_backup {
            let _ = writeln!(out, "etcd backup: {}", b.status(self.at).text());
        }
        let rows: Vec<Vec<String>> = self
            .machines
            .iter()
            .map(|m| {
                vec![
                    m.name.clone(),
                    m.group.clone(),
                    m.image.clone(),
                    m.launch_template_version.clone().unwrap_or_else(|| "-".into()),
                    m.kernel.clone(),
                    m.kubelet.clone(),
                    m.created.map(|c| age((self.at - c).num_seconds())).unwrap_or_else(|| "-".into()),
                    m.health().text(),
                ]
            })
            .collect();
        out.push_str(&text::table(
            &["MACHINE", "GROUP", "IMAGE", "TEMPLATE", "KERNEL", "KUBELET", "AGE", "HEALTH"],
            &rows,
        ));
        let compared = self.addons.iter().any(|a| a.defined.is_some());
        let rows: Vec<Vec<String>> = self
            .addons
            .iter()
            .map(|a| {
                let mut row = vec![a.name.clone(), a.version.clone(), format!("{}/{}", a.ready, a.workloads)];
                if compared {
                    row.push(a.drift().map(|d| d.text()).unwrap_or_default());
                }
                row
            })
            .collect();
        out.push('\n');
        let heads: &[&str] =
            if compared { &["ADDON", "VERSION", "READY", "DRIFT"] } else { &["ADDON", "VERSION", "READY"] };
        out.push_str(&text::table(heads, &rows));
        if let Some(n) = &self.addons_note {
            let _ = writeln!(out, "addons not compared with the definition: {n}");
        }
        out.push('\n');
        match &self.e2e {
            None => out.push_str("no end-to-end run recorded\n"),
            Some(r) => {
                let _ = writeln!(out, "last end-to-end run: {}", r.status(&self.name).text());
                let rows: Vec<Vec<String>> =
                    self.e2e_rows().iter().map(|c| vec![c.phase.clone(), c.name.clone(), c.status().text()]).collect();
                out.push_str(&text::table(&["PHASE", "CHECK", "RESULT"], &rows));
            }
        }
        out.push('\n');
        match &self.revisions_note {
            Some(n) if self.revisions.is_empty() => {
                let _ = writeln!(out, "revisions: {n}");
            }
            _ => {
                let rows: Vec<Vec<String>> = self
                    .revisions
                    .iter()
                    .rev()
                    .map(|r| {
                        vec![
                            r.revision.to_string(),
                            r.applied_at.clone(),
                            r.by.clone(),
                            r.changes.clone(),
                            r.command.clone(),
                        ]
                    })
                    .collect();
                out.push_str(&text::table(&["REVISION", "APPLIED", "BY", "CHANGES", "COMMAND"], &rows));
            }
        }
        out
    }

    pub fn html_body(&self) -> String {
        let mut out = String::new();
        let _ = write!(out, "<h1>Cluster {}</h1>", esc(&self.name));
        if let Reach::Stale { .. } = &self.reach {
            let _ = write!(
                out,
                "<p class=\"stale-note\">{} — the figures below are the last ones seen.</p>",
                html::badge(&self.reach.status())
            );
        }
        out.push_str(&html::facts(&[
            ("Reachable", html::badge(&self.reach.status())),
            ("Kubernetes", esc(self.version.as_deref().unwrap_or("-"))),
            ("Machines", self.machines.len().to_string()),
            ("Drift", html::badge(&self.drift)),
            (
                "Last e2e run",
                self.e2e.as_ref().map(|r| html::badge(&r.status(&self.name))).unwrap_or_else(|| "none recorded".into()),
            ),
            (
                "Last verified etcd backup",
                self.etcd_backup.as_ref().map(|b| html::badge(&b.status(self.at))).unwrap_or_else(|| "not read".into()),
            ),
        ]));
        if !self.capacity.is_empty() {
            out.push_str("<h2 id=\"capacity\">Held back by capacity</h2><ul class=\"capacity\">");
            for line in &self.capacity {
                let _ = write!(out, "<li>{}</li>", esc(line));
            }
            out.push_str("</ul>");
        }
        out.push_str("<h2 id=\"machines\">Groups and machines</h2>");
        let rows: Vec<Vec<String>> = self
            .machines
            .iter()
            .map(|m| {
                vec![
                    esc(&m.name),
                    esc(&m.group),
                    esc(&m.role),
                    esc(&m.image),
                    esc(m.launch_template_version.as_deref().unwrap_or("-")),
                    esc(&m.kernel),
                    esc(&m.kubelet),
                    m.created.map(|c| age((self.at - c).num_seconds())).unwrap_or_else(|| "-".into()),
                    html::badge(&m.health()),
                ]
            })
            .collect();
        out.push_str(&html::table(
            "Machines by group",
            &["Machine", "Group", "Role", "Image", "Template version", "Kernel", "Kubelet", "Age", "Health"],
            &rows,
            "machines-table",
        ));
        out.push_str("<h2 id=\"addons\">Addons</h2>");
        let compared = self.addons.iter().any(|a| a.defined.is_some());
        let rows: Vec<Vec<String>> = self
            .addons
            .iter()
            .map(|a| {
                let st = if a.ready == a.workloads {
                    Status::new(Tone::Ok, format!("{}/{} ready", a.ready, a.workloads))
                } else {
                    Status::new(Tone::Warn, format!("{}/{} ready", a.ready, a.workloads))
                };
                let mut row = vec![esc(&a.name), esc(&a.version), html::badge(&st)];
                if compared {
                    row.push(a.drift().map(|d| html::badge(&d)).unwrap_or_default());
                }
                row
            })
            .collect();
        if compared {
            out.push_str(&html::table(
                "Addons against the cluster's definition",
                &["Addon", "Version", "Workloads", "Drift"],
                &rows,
                "addons-table",
            ));
        } else {
            out.push_str(&html::table("Installed addons", &["Addon", "Version", "Workloads"], &rows, "addons-table"));
        }
        if let Some(n) = &self.addons_note {
            out.push_str(&format!("<p>Addons not compared with the definition: {}</p>", esc(n)));
        }
        out.push_str("<h2 id=\"e2e\">Last end-to-end run</h2>");
        match &self.e2e {
            None => out.push_str("<p>No end-to-end run recorded on this cluster.</p>"),
            Some(r) => {
                let _ = write!(out, "<p>{} in {:.1} s</p>", html::badge(&r.status(&self.name)), r.seconds);
                let mut rows = Vec::new();
                for c in &r.checks {
                    let objects = if c.objects.is_empty() {
                        String::new()
                    } else {
                        format!("<br><span class=\"why\">{}</span>", esc(&c.objects.join(", ")))
                    };
                    rows.push(vec![
                        format!("<span id=\"{}\">{}</span>", c.anchor(), esc(&c.name)),
                        esc(&c.phase),
                        format!("{}{objects}", html::badge(&c.status())),
                    ]);
                }
                out.push_str(&html::table("Checks", &["Check", "Phase", "Result and reason"], &rows, "e2e-table"));
            }
        }
        out.push_str("<h2 id=\"workloads\">Workloads placed here</h2>");
        let rows: Vec<Vec<String>> = self
            .workloads
            .iter()
            .map(|p| {
                vec![
                    format!("<a href=\"/workloads/{}/{}\">{}</a>", seg(&p.team), seg(&p.id), esc(&p.workload)),
                    esc(&p.team),
                    p.replicas.to_string(),
                    esc(&p.state),
                ]
            })
            .collect();
        out.push_str(&html::table("Workload parts", &["Workload", "Team", "Replicas", "State"], &rows, "parts-table"));
        out.push_str("<h2 id=\"revisions\">Applied revisions</h2>");
        if let (true, Some(n)) = (self.revisions.is_empty(), &self.revisions_note) {
            let _ = write!(out, "<p>{}</p>", esc(n));
        } else {
            let rows: Vec<Vec<String>> = self
                .revisions
                .iter()
                .rev()
                .map(|r| {
                    vec![
                        r.revision.to_string(),
                        esc(&r.applied_at),
                        esc(&r.by),
                        esc(&r.changes),
                        format!("<code>{}</code>", esc(&r.command)),
                    ]
                })
                .collect();
            out.push_str(&html::table(
                "Newest first",
                &["Revision", "Applied", "By", "Changes (+ ~ -/+ -)", "Command"],
                &rows,
                "revisions-table",
            ));
        }
        out
    }

    pub fn html(&self) -> String {
        html::page(
            &format!("Cluster {}", self.name),
            &format!("/clusters/{}", seg(&self.name)),
            &self.viewer,
            &self.html_body(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::fleet::tests::{at, viewer};

    fn cluster() -> ClusterView {
        ClusterView {
            viewer: viewer(),
            at: at(),
            name: "east".into(),
            reach: Reach::Live { seen: at() },
            version: Some("v1.36.2".into()),
            machines: vec![
                Machine {
                    name: "east-cp-0".into(),
                    group: "control-plane".into(),
                    role: "control-plane".into(),
                    image: "ami-0abc".into(),
                    os_image: "Ubuntu 24.04".into(),
                    kernel: "6.8.0-1012-aws".into(),
                    kubelet: "v1.36.2".into(),
                    runtime: "containerd://2.1".into(),
                    created: Some(at() - chrono::Duration::hours(50)),
                    ready: true,
                    reason: None,
                    unschedulable: false,
                    instance: Some("i-0123".into()),
                    launch_template_version: Some("3".into()),
                },
                Machine {
                    name: "east-nodes-1".into(),
                    group: "nodes".into(),
                    role: "node".into(),
                    image: "ami-0abc".into(),
                    kernel: "6.8.0-1012-aws".into(),
                    kubelet: "v1.36.2".into(),
                    created: Some(at() - chrono::Duration::minutes(7)),
                    ready: false,
                    reason: Some("KubeletNotReady: container runtime network not ready".into()),
                    ..Default::default()
                },
            ],
            addons: vec![Addon {
                name: "cilium".into(),
                version: "1.18.2".into(),
                workloads: 2,
                ready: 2,
                defined: None,
            }],
            e2e: Some(E2eRun {
                finished: Some(at()),
                seconds: 41.2,
                checks: vec![
                    E2eCheck {
                        phase: "cluster".into(),
                        name: "nodes-ready".into(),
                        result: "fail".into(),
                        reason: Some("1 node not Ready".into()),
                        objects: vec!["east-nodes-1".into()],
                    },
                    E2eCheck {
                        phase: "smoke".into(),
                        name: "dns".into(),
                        result: "pass".into(),
                        reason: None,
                        objects: vec![],
                    },
                ],
            }),
            drift: Status::new(Tone::Warn, "drifted").because("addons: 1 object since 2026-11-24 09:00 UTC"),
            workloads: vec![PlacedPart {
                team: "search".into(),
                id: "web-1".into(),
                workload: "web".into(),
                replicas: 2,
                state: "Ready".into(),
            }],
            revisions: vec![Revision {
                revision: 1,
                applied_at: "2026-11-22T10:00:00Z".into(),
                by: "ops@laptop".into(),
                changes: "+14 ~0 -/+0 -0".into(),
                command: "bootstrap east --yes".into(),
            }],
            revisions_note: None,
            addons_note: None,
            capacity: vec![],
            etcd_backup: None,
        }
    }

    #[test]
    fn a_cluster_as_text() {
        insta::assert_snapshot!(cluster().text());
    }

    /// Against its definition: cilium as defined, an old log agent, an
    /// addon nobody defined, and a defined one nobody installed.
    fn compared() -> ClusterView {
        let mut c = cluster();
        let defined = |v: Option<&str>| Some(Defined { version: v.map(str::to_string) });
        c.addons = vec![
            Addon {
                name: "cilium".into(),
                version: "1.18.2".into(),
                workloads: 2,
                ready: 2,
                defined: defined(Some("1.18.2")),
            },
            Addon {
                name: "debug-tools".into(),
                version: "0.1.0".into(),
                workloads: 1,
                ready: 1,
                defined: defined(None),
            },
            Addon {
                name: "log-agent".into(),
                version: "4.0.1".into(),
                workloads: 1,
                ready: 1,
                defined: defined(Some("4.1.0")),
            },
            Addon {
                name: "metrics-server".into(),
                version: NOT_INSTALLED.into(),
                workloads: 0,
                ready: 0,
                defined: defined(Some("0.8.0")),
            },
        ];
        c
    }

    #[test]
    fn addons_against_the_definition_as_text() {
        insta::assert_snapshot!(compared().text());
    }

    #[test]
    fn addons_against_the_definition_as_html() {
        let html = compared().html_body();
        let table = &html[html.find("id=\"addons\"").unwrap()..html.find("id=\"e2e\"").unwrap()];
        insta::assert_snapshot!(table);
    }

    /// A group the capacity ledger holds back says so at the top of the
    /// page, in text and HTML (escaped).
    #[test]
    fn a_group_held_back_by_capacity() {
        let mut v = cluster();
        v.capacity = vec!["group general: 1 of 6 offerings out; blocked on capacity: m6i.large in us-east-1a, InsufficientInstanceCapacity since 10:42, trying us-east-1b <now>".into()];
        insta::assert_snapshot!(v.text().lines().take(2).collect::<Vec<_>>().join("\n"));
        let html = v.html_body();
        let part = &html[html.find("id=\"capacity\"").unwrap()..html.find("id=\"machines\"").unwrap()];
        insta::assert_snapshot!(part);
    }

    /// The age of the last verified etcd backup, judged as the alert judges
    /// it: fresh, older than twice the interval, a failed verification,
    /// none at all, or a store that could not be read.
    #[test]
    fn the_last_verified_etcd_backup_and_its_age() {
        let mut v = cluster();
        let at = v.at;
        let b = |minutes: i64, failed: Option<&str>| EtcdBackup {
            last_verified: Some(("20261127T1000Z-r42".into(), at - chrono::Duration::minutes(minutes))),
            last_failed: failed.map(str::to_string),
            count: 3,
            interval_seconds: 900,
            note: None,
        };
        let cases = [
            b(7, None),
            b(31, None),
            b(7, Some("20261127T1015Z-r57")),
            EtcdBackup { interval_seconds: 900, ..Default::default() },
            EtcdBackup { count: 2, interval_seconds: 900, ..Default::default() },
            EtcdBackup { note: Some("AWS did not answer within 10 s".into()), ..Default::default() },
        ];
        let lines: Vec<String> = cases.iter().map(|c| c.status(at).text()).collect();
        insta::assert_snapshot!(lines.join("\n"));
        assert_eq!(cases[0].status(at).tone, Tone::Ok);
        assert!(cases[1..5].iter().all(|c| matches!(c.status(at).tone, Tone::Bad | Tone::Warn)));
        v.etcd_backup = Some(b(7, None));
        assert!(v.text().contains("etcd backup: ✓ 7m old: verified: 20261127T1000Z-r42"), "{}", v.text());
        let html = v.html_body();
        assert!(html.contains("Last verified etcd backup") && html.contains("7m old"), "{html}");
    }

    #[test]
    fn a_cluster_as_html() {
        insta::assert_snapshot!(cluster().html_body());
    }

    #[test]
    fn a_failed_run_links_to_its_first_failed_check() {
        let s = cluster().e2e.unwrap().status("east");
        assert_eq!(s.tone, Tone::Bad);
        assert_eq!(s.link.as_deref(), Some("/clusters/east#check-cluster-nodes-ready"));
        assert!(
            cluster().html_body().contains("id=\"check-cluster-nodes-ready\""),
            "the anchor the link leads to exists"
        );
    }
}
