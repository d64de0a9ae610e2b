//! A fleet rollout as terminal text (pure): its plan, its notes and
//! events as it runs, and what a revert would do. Its status is the
//! view's own text ([`crate::views::fleet::FleetStatusView::text`]).

use crate::views::text::table;

/// The last word of a run of `apply`: its line, its state under `-o json`,
/// and the exit status. Only a rollout with every staged cluster on its
/// target is a success; one that went through with failed clusters names
/// each, why, and what it runs now, and exits 1.
pub fn fleet_outcome(number: u64, target: &str, o: &crate::fleet::run::Outcome) -> (String, &'static str, u8) {
    use crate::fleet::run::Outcome;
    match o {
        Outcome::Finished => (
            format!("fleet rollout #{number} is done: every staged cluster is on its target ({target})"),
            "finished",
            0,
        ),
        Outcome::FinishedWithFailures(failures) => (
            format!(
                "fleet rollout #{number} is over, but not every staged cluster is on its target ({target}): {failures}\n`pinfleet fleet rollout revert --yes` rolls the touched clusters back; a new `apply` rolls the failed ones again"
            ),
            "finishedWithFailures",
            1,
        ),
        Outcome::Waiting { until, .. } => {
            let when = until.map_or("an approval".to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
            (format!("fleet rollout #{number} waits (until {when}); run apply again to go on, `status` says why"), "waiting", 0)
        }
        Outcome::Halted(reason) => (
            format!(
                "fleet rollout #{number} halted: {reason}\n`pinfleet fleet rollout revert --yes` rolls the touched clusters back"
            ),
            "halted",
            1,
        ),
    }
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
            out.push_str(&format!(
                "  (no cluster matches `{}`: this stage would pass with nothing rolled{})\n",
                s.selector,
                if i == 0 { ", and the stages after it go without a canary before them" } else { "" }
            ));
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
        out.push_str(&format!(
            "not in any stage (left alone; no stage's selector matches them): {}\n",
            p.unstaged.join(", ")
        ));
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
        Note::Held { stage, reason } => format!(
            "fleet: stage {stage}'s gate was inconclusive ({reason}); a person decides: approve {stage}.gate, or revert"
        ),
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
        Note::FinishedWithFailures { number, failures } => {
            format!("fleet: rollout #{number} went through every stage, NOT every cluster: {failures}")
        }
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
        Event::BlockedOnCapacity { group, reason } => format!("  [{cluster}] {group}: waiting, {reason}"),
        Event::Backup { message } => format!("  [{cluster}] etcd: {message}"),
        Event::Kops { message } => format!("  [{cluster}] kops: {message}"),
        Event::Launched { .. } | Event::Draining { .. } | Event::Replaced { .. } => return None,
    })
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
