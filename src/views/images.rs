//! The image pipeline's screens as text: a bake's outcome, channels and
//! their histories, a promotion's or rollback's writes, GC's decisions and
//! the waves. Pure: the `ami` commands build the rows, these draw them.

use crate::ami::bake::CheckResult;
use crate::ami::channel::Channel;
use crate::ami::gc::{Action, Plan};
use crate::ami::waves::Wave;

use super::text::table;

/// The checks, one per line.
pub fn checks(results: &[CheckResult]) -> String {
    table(
        &["CHECK", "RESULT", "DETAIL"],
        &results
            .iter()
            .map(|c| vec![c.check.clone(), if c.ok { "ok".into() } else { "FAILED".into() }, c.detail.clone()])
            .collect::<Vec<_>>(),
    )
}

/// A finished bake: the image per region, then its checks.
pub fn baked(
    build_id: &str,
    name: &str,
    base: &str,
    images: &[(String, String)],
    results: &[CheckResult],
    steps: &[String],
) -> String {
    let mut out = format!(
        "baked {build_id} ({name}) from {base}{}\n",
        if steps.is_empty() {
            " — found complete, nothing to do".to_string()
        } else {
            format!(" — steps this run: {}", steps.join(", "))
        }
    );
    out += &table(&["REGION", "IMAGE"], &images.iter().map(|(r, i)| vec![r.clone(), i.clone()]).collect::<Vec<_>>());
    out += &checks(results);
    out
}

/// Channels now, with their previous image (what a rollback writes).
pub fn channels(chs: &[Channel]) -> String {
    let rows: Vec<Vec<String>> = chs
        .iter()
        .map(|c| {
            let cur = c.current();
            vec![
                c.recipe.clone(),
                c.channel.clone(),
                c.region.clone(),
                cur.map(|v| v.image.clone()).unwrap_or_else(|| "-".into()),
                cur.map(|v| v.version.to_string()).unwrap_or_default(),
                crate::ami::channel::rollback_target(c).map(|v| v.image.clone()).unwrap_or_else(|_| "-".into()),
                cur.and_then(|v| v.at).map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default(),
                cur.map(|v| v.note.clone()).unwrap_or_default(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return "no channels written yet (pinfleet ami promote RECIPE --image AMI --to CHANNEL)\n".into();
    }
    table(&["RECIPE", "CHANNEL", "REGION", "IMAGE", "VERSION", "PREVIOUS", "SINCE", "NOTE"], &rows)
}

/// A channel's history, newest first.
pub fn history(c: &Channel) -> String {
    let rows: Vec<Vec<String>> = c
        .history
        .iter()
        .rev()
        .map(|v| {
            vec![
                v.version.to_string(),
                v.image.clone(),
                v.at.map(|t| t.format("%Y-%m-%d %H:%M").to_string()).unwrap_or_default(),
                v.note.clone(),
            ]
        })
        .collect();
    table(&["VERSION", "IMAGE", "AT", "NOTE"], &rows)
}

/// Writes a promotion or rollback makes (or would make).
pub fn writes(rows: &[(String, String, Option<String>, String)], done: bool) -> String {
    let mut out = String::from(if done { "written:\n" } else { "would write (add --yes):\n" });
    out += &table(
        &["REGION", "PARAMETER", "FROM", "TO"],
        &rows
            .iter()
            .map(|(r, p, f, t)| vec![r.clone(), p.clone(), f.clone().unwrap_or_else(|| "-".into()), t.clone()])
            .collect::<Vec<_>>(),
    );
    out
}

/// GC's decisions: every image, what happens to it and why.
pub fn gc(plan: &Plan, dry_run: bool) -> String {
    let mut rows = Vec::new();
    for d in &plan.decisions {
        for a in &d.actions {
            let (what, why) = match a {
                Action::Keep { reasons } => ("keep".to_string(), reasons.join("; ")),
                Action::Deprecate { at, reasons } => {
                    (format!("deprecate {}", at.format("%Y-%m-%d")), reasons.join("; "))
                }
                Action::Disable { reasons } => ("disable".to_string(), reasons.join("; ")),
                Action::Deregister { snapshots, reason } => (
                    if snapshots.is_empty() {
                        "deregister".into()
                    } else {
                        format!("deregister + {}", snapshots.join(","))
                    },
                    reason.clone(),
                ),
            };
            rows.push(vec![d.image.region.clone(), d.image.id.clone(), d.image.name.clone(), what, why]);
        }
    }
    let mut out = String::new();
    if dry_run {
        out += "dry run: nothing changed (run with --yes to carry it out)\n";
    }
    if rows.is_empty() {
        out += "no images baked by pinfleet here\n";
    } else {
        out += &table(&["REGION", "IMAGE", "NAME", "ACTION", "WHY"], &rows);
    }
    for w in &plan.warnings {
        out += &format!("warning: {w}\n");
    }
    out
}

/// The waves a channel's image takes through the fleet.
pub fn waves(ws: &[Wave]) -> String {
    table(
        &["WAVE", "SHARE", "STARTS AFTER", "CLUSTERS"],
        &ws.iter()
            .map(|w| {
                vec![
                    w.number.to_string(),
                    format!("{}%", w.share),
                    humantime::format_duration(w.starts_after).to_string(),
                    w.clusters.join(", "),
                ]
            })
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ami::channel::Version;
    use crate::ami::gc::{Baked, Decision};
    use chrono::{TimeZone, Utc};

    #[test]
    fn screens() {
        let at = Utc.with_ymd_and_hms(2026, 11, 20, 9, 30, 0).unwrap();
        let ch = Channel {
            recipe: "node".into(),
            channel: "stable".into(),
            region: "us-east-1".into(),
            history: vec![
                Version { version: 1, image: "ami-0aaa".into(), at: Some(at), note: "promoted by ci".into() },
                Version {
                    version: 2,
                    image: "ami-0bbb".into(),
                    at: Some(at),
                    note: "promoted from candidate by ci: gate passed".into(),
                },
            ],
        };
        let img = Baked {
            id: "ami-0aaa".into(),
            region: "us-east-1".into(),
            name: "pinfleet/node/node-1".into(),
            recipe: "node".into(),
            state: "available".into(),
            created: Some(at),
            deprecated_at: None,
            snapshots: vec!["snap-1".into()],
        };
        let plan = Plan {
            decisions: vec![Decision {
                image: img,
                actions: vec![
                    Action::Deprecate { at, reasons: vec!["superseded".into()] },
                    Action::Deregister {
                        snapshots: vec!["snap-1".into()],
                        reason: "left node/stable 40 days ago".into(),
                    },
                ],
            }],
            warnings: vec!["us-east-1: 40000 images, 80% of the 50000 quota".into()],
        };
        let checks_ = vec![CheckResult {
            check: "encrypted volumes".into(),
            ok: false,
            detail: "not encrypted: /dev/sda1 (snap-1)".into(),
        }];
        let waves_ = crate::ami::waves::plan(crate::ami::waves::Profile::Urgent, &["a".into(), "b".into(), "c".into()]);
        insta::assert_snapshot!(format!(
            "{}\n{}\n{}\n{}\n{}\n{}",
            channels(&[ch.clone()]),
            history(&ch),
            writes(
                &[(
                    "us-east-1".into(),
                    "/pinfleet/images/node/stable".into(),
                    Some("ami-0bbb".into()),
                    "ami-0aaa".into()
                )],
                false
            ),
            gc(&plan, true),
            waves(&waves_),
            baked(
                "node-1",
                "pinfleet/node/node-1",
                "ami-base",
                &[("us-east-1".into(), "ami-0aaa".into())],
                &checks_,
                &["launch".into()]
            ),
        ));
    }
}
