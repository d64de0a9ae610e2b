//! A cluster's results as terminal text (pure): the images each group
//! resolves to and their rollouts, the machines EC2 holds, a roll's groups
//! and version steps, the addons (catalog, rendered, diffs), and an
//! end-to-end run's checks. The commands print these; the console's
//! cluster page draws the same things from [`super`].

use serde::Serialize;

use crate::views::text::{colored_diff, table};

/// Each group's images (`ami resolve`, the rollout's decision).
pub fn images_table(rows: &[crate::ami::job::GroupImage]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{:<16} {:<22} {:<22} {:<10} NAME (CREATED)", "GROUP", "CURRENT", "RESOLVED", "STATUS");
    for r in rows {
        let status = match (&r.current, r.newer) {
            (None, _) => "not applied",
            (Some(_), true) => "newer",
            (Some(_), false) => "up to date",
        };
        let created = r.resolved_created.map(|c| c.format("%Y-%m-%d").to_string()).unwrap_or_default();
        let current = r.current.as_deref().unwrap_or("-");
        let _ = writeln!(
            out,
            "{:<16} {:<22} {:<22} {:<10} {} ({created})",
            r.group, current, r.resolved, status, r.resolved_name
        );
    }
    out
}

/// Past AMI rollouts (`ami history`).
pub fn ami_history_table(rows: &[crate::ami::job::AmiRollout]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{:<4} {:<20} {:<14} {:<30} STATUS", "#", "DECIDED", "CANARY", "IMAGES");
    for r in rows {
        let images: Vec<String> = r.groups.iter().map(|i| format!("{}→{}", i.group, i.resolved)).collect();
        let decided = r.decided_at.format("%Y-%m-%d %H:%M");
        let _ = writeln!(
            out,
            "{:<4} {:<20} {:<14} {:<30} {}",
            r.number,
            decided,
            r.canary_group,
            images.join(","),
            r.status
        );
    }
    out
}

/// What a roll would do, per group, and the order (`upgrade` without `--yes`).
pub fn roll_status_table(rows: &[crate::rollout::run::GroupStatus]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<13} {:>8} {:>12} {:>6} {:>14}  NODES",
        "GROUP", "ROLE", "MACHINES", "NEEDS UPDATE", "READY", "MIN/DESIRED/MAX"
    );
    for r in rows {
        let sizes = format!("{}/{}/{}", r.min, r.desired, r.max);
        let role = format!("{:?}", r.role);
        let (machines, needs, ready, nodes) = (r.machines, r.needs_update, r.ready, r.nodes.join(","));
        let _ = writeln!(out, "{:<16} {:<13} {machines:>8} {needs:>12} {ready:>6} {sizes:>14}  {nodes}", r.group, role);
    }
    let order: Vec<String> = rows
        .iter()
        .filter(|r| r.needs_update > 0)
        .map(|r| {
            let how = if r.role == crate::spec::Role::ControlPlane { "one at a time" } else { "surge" };
            format!("{} ({how})", r.group)
        })
        .collect();
    if !order.is_empty() {
        let _ = writeln!(out, "\norder: control planes first, then node groups: {}", order.join(" → "));
    }
    out
}

/// One machine in `get instances`.
#[derive(Debug, Serialize)]
pub struct InstanceRow {
    pub id: String,
    pub cluster: String,
    pub group: String,
    pub owner: String,
    pub image: String,
    pub instance_type: String,
    /// `spot` or `on-demand`.
    pub market: String,
    pub state: String,
    pub launch_template_version: String,
    pub zone: String,
    pub age: String,
    pub region: String,
}

impl InstanceRow {
    pub fn of(i: &crate::cloud::observed::ObservedInstance, region: &str, now: chrono::DateTime<chrono::Utc>) -> Self {
        let dash = || "-".to_string();
        InstanceRow {
            id: i.id.clone(),
            cluster: i.cluster.clone().unwrap_or_else(dash),
            group: i.group.clone().unwrap_or_else(dash),
            owner: i.owner.clone().unwrap_or_else(|| "(none)".into()),
            image: i.image_id.clone(),
            instance_type: i.instance_type.clone(),
            market: if i.spot { "spot" } else { "on-demand" }.to_string(),
            state: i.state.clone(),
            launch_template_version: i.launch_template_version.map(|v| v.to_string()).unwrap_or_else(dash),
            zone: i.zone.clone().unwrap_or_default(),
            age: age(i.launch_time, now),
            region: region.to_string(),
        }
    }
}

/// How long ago `secs` (a Unix time) was, in one unit: 90s, 12m, 5h, 3d.
fn age(secs: Option<i64>, now: chrono::DateTime<chrono::Utc>) -> String {
    let Some(s) = secs else { return "-".into() };
    match (now.timestamp() - s).max(0) {
        d if d < 120 => format!("{d}s"),
        d if d < 7200 => format!("{}m", d / 60),
        d if d < 172_800 => format!("{}h", d / 3600),
        d => format!("{}d", d / 86400),
    }
}

/// `get instances` as a table.
pub fn instances_table(rows: &[InstanceRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.id.clone(),
                r.cluster.clone(),
                r.group.clone(),
                r.owner.clone(),
                r.image.clone(),
                r.instance_type.clone(),
                r.market.clone(),
                r.state.clone(),
                r.launch_template_version.clone(),
                r.zone.clone(),
                r.age.clone(),
            ]
        })
        .collect();
    table(
        &["INSTANCE", "CLUSTER", "GROUP", "OWNER", "AMI", "TYPE", "MARKET", "STATE", "LT-VERSION", "ZONE", "AGE"],
        &cells,
    )
}

/// `addons list` as a table (ENABLED is `-` when no cluster was named).
pub fn addon_catalog_table(rows: &[crate::addons::CatalogRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let enabled = match r.enabled {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            };
            vec![r.name.clone(), r.version.clone(), enabled.into(), r.namespace.clone(), r.depends_on.join(",")]
        })
        .collect();
    table(&["NAME", "VERSION", "ENABLED", "NAMESPACE", "DEPENDS ON"], &cells)
}

/// `addons render`: every object as a YAML document headed by its addon and key.
pub fn rendered_addons(set: &[crate::addons::RenderedAddon]) -> anyhow::Result<String> {
    let mut out = String::new();
    for a in set {
        for o in &a.objects {
            out += &format!("---\n# addon {} {}: {}\n", a.name, a.version, o.key);
            out += &serde_saphyr::to_string(&o.value)?;
        }
    }
    Ok(out)
}

/// `addons diff`: the coloured diffs, and a one-line summary for stderr.
pub fn addon_diffs(cluster: &str, diffs: &[crate::addons::install::ObjectDiff]) -> (String, String) {
    let text: String = diffs.iter().map(|d| colored_diff(&d.unified())).collect();
    let summary = match diffs.len() {
        0 => format!("addons of {cluster} match the cluster"),
        n => format!("{n} object(s) differ"),
    };
    (text, summary)
}

/// A version upgrade's steps, numbered, under what the cluster runs (empty
/// when there is no version change).
pub fn version_steps(p: &crate::rollout::run::Preview) -> String {
    let Some(r) = &p.running else { return String::new() };
    let target = p.version_steps.iter().rev().find_map(|s| match s {
        crate::rollout::versions::Step::ControlPlane { version }
        | crate::rollout::versions::Step::NodeGroups { version, .. } => Some(*version),
        _ => None,
    });
    let mut out = format!(
        "\nKubernetes upgrade: control plane {}{}, in {} steps:\n",
        r.control_plane,
        target.map(|t| format!(" → {t}")).unwrap_or_default(),
        p.version_steps.len()
    );
    for (i, s) in p.version_steps.iter().enumerate() {
        out.push_str(&format!("  {:>2}. {s}\n", i + 1));
    }
    out
}

/// One e2e check as it ends: `cluster  phase  check  result  time  reason`.
pub fn e2e_line(cluster: &str, c: &crate::e2e::Check) -> String {
    use crate::e2e::Outcome;
    let reason = match &c.outcome {
        Outcome::Pass => String::new(),
        Outcome::Skip { reason } => reason.clone(),
        Outcome::Warn { reason, objects } | Outcome::Fail { reason, objects } => {
            let shown: Vec<&str> = objects.iter().take(5).map(String::as_str).collect();
            let more = objects.len().saturating_sub(5);
            format!(
                "{reason}{}{}",
                if shown.is_empty() { String::new() } else { format!(": {}", shown.join("; ")) },
                if more > 0 { format!(" (+{more} more)") } else { String::new() }
            )
        }
    };
    format!(
        "{cluster:<16} {:<9} {:<26} {:<4} {:>6.2}s  {reason}",
        c.phase.as_str(),
        c.name,
        c.outcome.label(),
        c.seconds
    )
}

/// Per cluster: checks passed, warned, failed, skipped, and the time; then each failure.
pub fn e2e_summary(reports: &[crate::e2e::Report]) -> String {
    use crate::e2e::Outcome;
    let mut rows = Vec::new();
    for r in reports {
        let n = |f: fn(&Outcome) -> bool| r.checks.iter().filter(|c| f(&c.outcome)).count().to_string();
        rows.push(vec![
            r.cluster.clone(),
            n(|o| matches!(o, Outcome::Pass)),
            n(|o| matches!(o, Outcome::Warn { .. })),
            n(|o| matches!(o, Outcome::Fail { .. })),
            n(|o| matches!(o, Outcome::Skip { .. })),
            format!("{:.1}s", r.seconds),
        ]);
    }
    let mut out = format!("\n{}", table(&["CLUSTER", "PASSED", "WARNED", "FAILED", "SKIPPED", "TIME"], &rows));
    for r in reports {
        for c in r.failures() {
            if let Outcome::Fail { reason, objects } = &c.outcome {
                out.push_str(&format!("\nFAIL {} {}/{}: {reason}\n", r.cluster, c.phase.as_str(), c.name));
                for o in objects {
                    out.push_str(&format!("  - {o}\n"));
                }
            }
        }
    }
    out
}
