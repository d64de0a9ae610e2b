//! Printing results for people and for pipelines: `-o text|json|yaml`, with
//! colour only on a terminal and never under NO_COLOR (anstream decides),
//! and the progress of long operations ([`RollView`]).

use std::io::Write;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
    Yaml,
}

/// Writes `value` as JSON or YAML to stdout.
pub fn print_data<T: Serialize>(format: Format, value: &T) -> anyhow::Result<()> {
    let text = match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(value)?;
            s.push('\n');
            s
        }
        Format::Yaml | Format::Text => serde_saphyr::to_string(value)?,
    };
    let mut out = anstream::stdout();
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// A roll shown as it happens: JSON events on stdout (`-o json`), progress
/// bars on a terminal, or one line per event in a log. `upgrade` and
/// `ami rollout` show their rolls with it.
pub struct RollView {
    json: bool,
    bars: Option<indicatif::MultiProgress>,
    group_bars: std::sync::Mutex<std::collections::BTreeMap<String, indicatif::ProgressBar>>,
}

impl RollView {
    pub fn new(json: bool) -> Self {
        use std::io::IsTerminal as _;
        let bars = (!json && std::io::stderr().is_terminal()).then(indicatif::MultiProgress::new);
        RollView { json, bars, group_bars: Default::default() }
    }

    pub fn show(&self, e: &crate::rollout::driver::Event) {
        use crate::rollout::driver::Event;
        if self.json {
            let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(e).unwrap_or_default());
            return;
        }
        let mut gb = self.group_bars.lock().expect("bars");
        match (&self.bars, e) {
            (Some(mp), Event::Started { group, outdated, .. }) => {
                let b = mp.add(indicatif::ProgressBar::new(*outdated as u64));
                b.set_style(
                    indicatif::ProgressStyle::with_template("{prefix:>14} [{bar:30}] {pos}/{len} eta {eta} {wide_msg}")
                        .expect("valid template")
                        .progress_chars("=> "),
                );
                b.set_prefix(group.clone());
                gb.insert(group.clone(), b);
            }
            (Some(_), Event::Replaced { group, instance, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.inc(1);
                    b.set_message(format!("replaced {instance}"));
                }
            }
            (Some(_), Event::Draining { group, instance, node }) => {
                if let Some(b) = gb.get(group) {
                    b.set_message(format!("draining {} ({instance})", node.as_deref().unwrap_or("-")));
                }
            }
            (Some(_), Event::Finished { group, .. }) => {
                if let Some(b) = gb.get(group) {
                    b.finish();
                }
            }
            _ => {
                let line = match e {
                    Event::Started { group, outdated, machines } => {
                        format!("{group}: {outdated} of {machines} machine(s) to replace")
                    }
                    Event::Launched { group, ids } => format!("{group}: launched {}", ids.join(", ")),
                    Event::Draining { group, instance, node } => {
                        format!("{group}: draining {} ({instance})", node.as_deref().unwrap_or("no node"))
                    }
                    Event::Replaced { group, instance, done, total } => {
                        format!("{group}: replaced {instance} ({done}/{total})")
                    }
                    Event::Finished { group, replaced, seconds } => {
                        format!("{group}: done, {replaced} replaced in {seconds:.1}s")
                    }
                    Event::VersionStep { step } => format!("step: {step}"),
                    Event::Validated { after, checks, skipped } => {
                        format!("e2e gate after {after}: {checks} checks passed ({skipped} skipped)")
                    }
                };
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    }

    /// Removes the bars once the roll ended.
    pub fn clear(&self) {
        if let Some(mp) = &self.bars {
            let _ = mp.clear();
        }
    }
}

/// An addon install shown as it happens: JSON events (`-o json`), a bar on
/// a terminal, or one line per event.
pub struct AddonView {
    json: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl AddonView {
    pub fn new(json: bool, progress: bool, addons: usize) -> Self {
        let bar = (progress && !json).then(|| {
            let b = indicatif::ProgressBar::new(addons as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template("{spinner} addons [{bar:20}] {pos}/{len} {elapsed} {wide_msg}")
                    .expect("valid template")
                    .progress_chars("=> "),
            );
            b.enable_steady_tick(std::time::Duration::from_millis(120));
            b
        });
        AddonView { json, bar }
    }

    pub fn show(&self, e: &crate::addons::install::Event) {
        use crate::addons::install::Event;
        use owo_colors::OwoColorize as _;
        if self.json {
            let _ = writeln!(anstream::stdout(), "{}", serde_json::to_string(e).unwrap_or_default());
            return;
        }
        let line = match e {
            Event::Applying { addon, objects } => format!("{addon}: applying {objects} object(s)"),
            Event::Waiting { addon, object, why } => format!("{addon}: waiting for {object}: {why}"),
            Event::Ready(r) => {
                let from = match &r.from {
                    Some(v) if v != &r.version => format!(" (was {v})"),
                    Some(_) => String::new(),
                    None => " (new)".into(),
                };
                format!("{} {}{from}: ready, {} changed, {:.1}s", r.name, r.version, r.changed, r.seconds)
            }
            Event::Pruned(k) => format!("pruned {k}"),
        };
        match &self.bar {
            Some(b) if matches!(e, Event::Ready(_)) => {
                b.inc(1);
                b.println(format!("{} {line}", "✓".green()));
            }
            Some(b) => b.set_message(line),
            None => {
                let _ = writeln!(anstream::stderr(), "{line}");
            }
        }
    }

    /// Clears the bar and, for people, sums up.
    pub fn finish(&self, report: Option<&crate::addons::install::Report>) {
        use owo_colors::OwoColorize as _;
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let Some(report) = report.filter(|_| !self.json) else { return };
        let changed: usize = report.addons.iter().map(|a| a.changed).sum();
        let mut e = anstream::stderr();
        let _ = writeln!(
            e,
            "{} {} addon(s) ready, {changed} object(s) changed, {} pruned",
            "addons:".bold(),
            report.addons.len(),
            report.pruned.len()
        );
        for k in &report.kept {
            let _ = writeln!(e, "  kept {k} (no addon renders it; --prune-crds removes it)");
        }
    }
}

/// Prints rows as an aligned table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>| -> String {
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
            + "\n"
    };
    out.push_str(&line(headers.to_vec()));
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// Tracing to stderr: `-v` levels, or RUST_LOG when set; JSON lines with `--log-json`.
pub fn init_tracing(verbose: u8, json: bool) {
    // kube-client logs every failed request at ERROR before returning the
    // error to its caller, which reports it (or, waiting for a new API
    // server, expects it): shown from -vv on.
    // The AWS SDK's config loader logs every provider it tried (IMDS
    // refusals with their debug dumps) at WARN where pinfleet reports the
    // outcome itself in one line: shown from -vv on.
    let default = match verbose {
        0 if json => "info,kube_client::client::builder=off,aws_config=error",
        0 => "warn,kube_client::client::builder=off,aws_config=error",
        1 => "info,pinfleet=info,kube_client::client::builder=off,aws_config=error",
        2 => "info,pinfleet=debug",
        _ => "debug,pinfleet=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.with_ansi(std::env::var_os("NO_COLOR").is_none()).try_init()
    };
}

/// Prints an error and its causes, one per line.
pub fn report_error(err: &anyhow::Error) {
    let mut e = anstream::stderr();
    let _ = writeln!(e, "{} {err}", owo_colors::OwoColorize::bold(&owo_colors::OwoColorize::red(&"error:")));
    for cause in err.chain().skip(1) {
        let _ = writeln!(e, "  {} {cause}", owo_colors::OwoColorize::dimmed(&"caused by:"));
    }
}

/// A unified diff, coloured for a terminal: additions green, removals red,
/// hunk headers cyan.
pub fn colored_diff(unified: &str) -> String {
    use owo_colors::OwoColorize as _;
    let mut out = String::new();
    for line in unified.lines() {
        let line = match line.chars().next() {
            Some('+') if !line.starts_with("+++") => line.green().to_string(),
            Some('-') if !line.starts_with("---") => line.red().to_string(),
            Some('@') => line.cyan().to_string(),
            _ => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

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

/// `federation status`: desired and ready per member, and its health.
pub fn federation_status(rows: &[crate::federation::health::MemberRow]) -> String {
    let mut out = format!("{:<16} {:>8} {:>6}  HEALTH\n", "CLUSTER", "DESIRED", "READY");
    for r in rows {
        out += &format!("{:<16} {:>8} {:>6}  {}\n", r.cluster, r.current, r.ready, r.health);
    }
    out
}

/// `federation plan|apply`: each member's change (green up, red down), why, and its health.
pub fn federation_plan(
    fs: &crate::federation::fanout::FederatedService,
    rows: &[crate::federation::health::MemberRow],
) -> String {
    use owo_colors::OwoColorize;
    let mut out = format!(
        "{} {} ({} replicas over federation {})\n",
        "app".bold(),
        fs.metadata.name,
        fs.spec.total_replicas,
        fs.spec.federation
    );
    for r in rows {
        let change = match r.desired.cmp(&r.current) {
            std::cmp::Ordering::Greater => format!("{} → {}", r.current, r.desired).green().to_string(),
            std::cmp::Ordering::Less => format!("{} → {}", r.current, r.desired).red().to_string(),
            std::cmp::Ordering::Equal => format!("{}", r.desired),
        };
        out += &format!("  {:<16} {:<10} {}; {}\n", r.cluster, change, r.reason, r.health);
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
                r.state.clone(),
                r.launch_template_version.clone(),
                r.zone.clone(),
                r.age.clone(),
            ]
        })
        .collect();
    table(&["INSTANCE", "CLUSTER", "GROUP", "OWNER", "AMI", "TYPE", "STATE", "LT-VERSION", "ZONE", "AGE"], &cells)
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

/// A fleet rollout plan: per stage its gate and earliest start, then each
/// cluster's place, from → to and earliest start.
pub fn fleet_plan(p: &crate::fleet::FleetPlan) -> String {
    let mut out = String::new();
    for (i, s) in p.stages.iter().enumerate() {
        out.push_str(&format!(
            "stage {} {} ({}): soak {}, maxFailures {}, {}; earliest {}\n",
            i + 1,
            s.name,
            s.selector,
            humantime::format_duration(s.soak),
            s.max_failures,
            if s.approval { "needs approval" } else { "no approval" },
            s.earliest.format("%Y-%m-%d %H:%M UTC"),
        ));
        if s.clusters.is_empty() {
            out.push_str("  (no cluster)\n");
            continue;
        }
        let rows: Vec<Vec<String>> = s
            .clusters
            .iter()
            .map(|c| {
                vec![
                    format!("{}{}", c.position, if c.canary { " (canary)" } else { "" }),
                    c.cluster.clone(),
                    c.region.clone(),
                    c.from.clone(),
                    c.to.clone(),
                    c.earliest.format("%Y-%m-%d %H:%M UTC").to_string(),
                    if c.windows.is_empty() { "any time".into() } else { c.windows.join("; ") },
                ]
            })
            .collect();
        for line in table(&["#", "CLUSTER", "REGION", "FROM", "TO", "EARLIEST", "WINDOWS"], &rows).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    if !p.unstaged.is_empty() {
        out.push_str(&format!("not in any stage (left alone): {}\n", p.unstaged.join(", ")));
    }
    out
}

/// One line of a fleet rollout's progress.
pub fn fleet_note(n: &crate::fleet::run::Note) -> String {
    use crate::fleet::run::Note;
    let at = |t: &chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    match n {
        Note::Resumed { number, clusters } => {
            format!(
                "fleet: picking up rollout #{number}: {} rolling when the last run stopped, rolled again",
                clusters.join(", ")
            )
        }
        Note::Started { stage, cluster, attempt, from, to } => format!(
            "fleet: stage {stage}: rolling {cluster}: {from} → {to}{}",
            if *attempt > 1 { format!(" (attempt {attempt})") } else { String::new() }
        ),
        Note::Done { cluster, seconds } => format!(
            "fleet: {cluster} done ({})",
            humantime::format_duration(std::time::Duration::from_secs(*seconds as u64))
        ),
        Note::Failed { cluster, error } => format!("fleet: {cluster} FAILED: {error}"),
        Note::Blocked { cluster, holder } => format!("fleet: {cluster} put off: its lock is held by {holder}"),
        Note::Soaking { stage, until } => format!("fleet: stage {stage} rolled; soaking until {}", at(until)),
        Note::Gate { stage, clusters } => format!("fleet: stage {stage}: end-to-end gate on {}", clusters.join(", ")),
        Note::Passed { stage } => format!("fleet: stage {stage} passed its gate"),
        Note::Waiting { until, why } => {
            let mut s = match until {
                Some(t) => format!("fleet: waiting until {}", at(t)),
                None => "fleet: waiting".to_string(),
            };
            for (c, w) in why {
                s.push_str(&format!("\n  {c}: {w}"));
            }
            s
        }
        Note::Halted { reason } => format!("fleet: HALTED: {reason}"),
        Note::Finished { number } => format!("fleet: rollout #{number} finished"),
        Note::Reverted { cluster, to } => format!("fleet: {cluster} reverted to {to}"),
        Note::RevertFailed { cluster, error } => format!("fleet: {cluster} revert FAILED: {error}"),
    }
}

/// A cluster's roll event as one line of a fleet rollout (the notable ones).
pub fn fleet_cluster_event(cluster: &str, e: &crate::rollout::driver::Event, json: bool) -> Option<String> {
    use crate::rollout::driver::Event;
    if json {
        let mut v = serde_json::to_value(e).ok()?;
        v["type"] = serde_json::Value::String("cluster".into());
        v["cluster"] = serde_json::Value::String(cluster.to_string());
        return Some(v.to_string());
    }
    Some(match e {
        Event::Started { group, outdated, machines } => {
            format!("  [{cluster}] {group}: {outdated} of {machines} machines to replace")
        }
        Event::Finished { group, replaced, .. } => format!("  [{cluster}] {group}: {replaced} replaced"),
        Event::VersionStep { step } => format!("  [{cluster}] {step}"),
        Event::Validated { after, checks, .. } => {
            format!("  [{cluster}] e2e gate after {after}: {checks} checks passed")
        }
        Event::Launched { .. } | Event::Draining { .. } | Event::Replaced { .. } => return None,
    })
}

pub use crate::views::fleet::{FleetClusterRow, FleetGroupRow, FleetStageRow, FleetStatusView};

/// A rolling cluster's groups (see [`crate::fleet::status::group_rows`]).
pub fn fleet_group_rows(
    cluster: &crate::spec::Cluster,
    progress: Option<&crate::state::progress::RollProgress>,
) -> Vec<FleetGroupRow> {
    crate::fleet::status::group_rows(cluster, progress)
}

/// `fleet rollout status` as text (the view draws itself).
pub fn fleet_status(v: &FleetStatusView) -> String {
    v.text()
}

/// What `fleet rollout revert` would roll back: each touched cluster, to → from.
pub fn fleet_revert_preview(r: &crate::fleet::rollout::FleetRollout) -> Option<String> {
    let back: Vec<String> = r
        .clusters()
        .filter(|(_, c)| c.touched())
        .map(|(_, c)| format!("  {}: {} → {}", c.name, c.to.over(&c.from).summary(), c.from.summary()))
        .collect();
    (!back.is_empty()).then(|| {
        format!(
            "fleet rollout #{} ({}): back to what each cluster ran before\n{}\n",
            r.number,
            r.target,
            back.join("\n")
        )
    })
}
