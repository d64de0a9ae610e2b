//! Showing a plan to a person: a terraform-like summary (+ ~ -/+ -), the
//! changed fields as a unified diff (multi-line values such as user-data
//! diffed line by line), what needs a rollout, and the totals.

use std::fmt::Write;

use owo_colors::OwoColorize;
use similar::TextDiff;

use super::{Action, Plan};

fn paint(a: Action, s: &str, color: bool) -> String {
    if !color {
        return s.to_string();
    }
    match a {
        Action::Create => s.green().to_string(),
        Action::Update => s.yellow().to_string(),
        Action::Replace => s.magenta().to_string(),
        Action::Delete => s.red().to_string(),
    }
}

/// The plan as text; `color` adds ANSI colours (the caller decides, e.g.
/// through anstream, which strips them when not on a terminal).
pub fn text(plan: &Plan, color: bool) -> String {
    let mut out = String::new();
    if plan.changes.is_empty() {
        let _ = writeln!(out, "No changes: cluster {} matches its definition.", plan.cluster);
    } else {
        let _ = writeln!(out, "pinfleet will make these changes to cluster {}:\n", plan.cluster);
        let width = plan.changes.iter().map(|c| c.key.to_string().len()).max().unwrap_or(0);
        for c in &plan.changes {
            let head = format!("{:>3} {:<width$}  {}", c.action.symbol(), c.key, c.summary);
            let _ = writeln!(out, "{}", paint(c.action, &head, color));
            for f in &c.fields {
                let before = f.before.as_deref().unwrap_or("");
                let after = f.after.as_deref().unwrap_or("");
                if before.contains('\n') || after.contains('\n') {
                    let _ = writeln!(out, "      {}:", f.field);
                    let diff = TextDiff::from_lines(before, after);
                    for hunk in diff.unified_diff().context_radius(2).iter_hunks() {
                        for line in hunk.to_string().lines() {
                            let painted = match line.chars().next() {
                                Some('+') if color => line.green().to_string(),
                                Some('-') if color => line.red().to_string(),
                                Some('@') if color => line.cyan().to_string(),
                                _ => line.to_string(),
                            };
                            let _ = writeln!(out, "        {painted}");
                        }
                    }
                } else {
                    match (&f.before, &f.after) {
                        (Some(b), Some(a)) => {
                            let _ = writeln!(
                                out,
                                "      {}: {} → {}",
                                f.field,
                                paint(Action::Delete, &format!("{b:?}"), color),
                                paint(Action::Create, &format!("{a:?}"), color)
                            );
                        }
                        (None, Some(a)) => {
                            let _ =
                                writeln!(out, "      {}", paint(Action::Create, &format!("+ {}: {a}", f.field), color));
                        }
                        (Some(b), None) => {
                            let _ =
                                writeln!(out, "      {}", paint(Action::Delete, &format!("- {}: {b}", f.field), color));
                        }
                        (None, None) => {}
                    }
                }
            }
            let _ = writeln!(
                out,
                "      {}",
                if color {
                    format!("because: {}", c.reason).dimmed().to_string()
                } else {
                    format!("because: {}", c.reason)
                }
            );
            if let super::Step::Refuse { why } = &c.op {
                let _ = writeln!(out, "      {}", paint(Action::Delete, &format!("will not apply: {why}"), color));
            }
        }
        let _ = writeln!(
            out,
            "\nPlan: {} to create, {} to update, {} to replace, {} to delete.",
            plan.count(Action::Create),
            plan.count(Action::Update),
            plan.count(Action::Replace),
            plan.count(Action::Delete)
        );
    }
    if !plan.needs_rollout.is_empty() {
        let _ = writeln!(out, "\nNeeds rollout (`pinfleet upgrade {}` replaces them):", plan.cluster);
        for n in &plan.needs_rollout {
            let _ = writeln!(
                out,
                "  {}: {} instance(s) {}; current version {}",
                n.group,
                n.instances.len(),
                n.reason,
                n.current_version
            );
        }
    }
    out
}
