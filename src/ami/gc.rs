//! Garbage collection of baked images by reference (pure).
//!
//! An image pinfleet baked (it carries `pinfleet:recipe`) is
//! - kept whole while a channel holds it or a launch-template version of
//!   any cluster names it;
//! - deprecated `deprecate_after` after it left its last channel (AWS then
//!   hides it from filtered lookups; launches by id still work);
//! - disabled `disable_after` after it left, unless a launch template
//!   names it (a disabled image cannot launch);
//! - deregistered, with its snapshots, only when nothing names it and no
//!   channel's history within `retention` held it.
//!
//! Data flow: the engine gathers images, launch-template references and
//! channel histories per region (`cloud::aws::images`) → [`plan`] → the
//! actions it then carries out, or prints with `--dry-run`.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::channel::{left_at, Channel};

/// EC2's default quotas per region.
pub const AMI_QUOTA: usize = 50_000;
pub const LAUNCH_TEMPLATE_VERSION_QUOTA: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub deprecate_after: Duration,
    pub disable_after: Duration,
    pub retention: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { deprecate_after: Duration::days(7), disable_after: Duration::days(30), retention: Duration::days(30) }
    }
}

/// A baked image as seen in one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Baked {
    pub id: String,
    pub region: String,
    pub name: String,
    pub recipe: String,
    pub state: String,
    pub created: Option<DateTime<Utc>>,
    pub deprecated_at: Option<DateTime<Utc>>,
    pub snapshots: Vec<String>,
}

/// Who names an image: a launch template's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LaunchTemplateRef {
    pub region: String,
    pub image: String,
    /// `cluster/template vN`.
    pub what: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    Keep { reasons: Vec<String> },
    Deprecate { at: DateTime<Utc>, reasons: Vec<String> },
    Disable { reasons: Vec<String> },
    Deregister { snapshots: Vec<String>, reason: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub image: Baked,
    /// What to do, first to last (deprecate then disable, say).
    pub actions: Vec<Action>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    pub warnings: Vec<String>,
}

/// Decides, for every baked image, what to do now.
pub fn plan(
    images: &[Baked],
    refs: &[LaunchTemplateRef],
    channels: &[Channel],
    counts: &BTreeMap<String, (usize, usize)>,
    policy: Policy,
    now: DateTime<Utc>,
) -> Plan {
    let mut out = Plan::default();
    for img in images {
        let here = |c: &&Channel| c.region == img.region;
        let mut keep: Vec<String> = Vec::new();
        for c in channels.iter().filter(here) {
            if c.current().is_some_and(|v| v.image == img.id) {
                keep.push(format!("channel {}/{} holds it", c.recipe, c.channel));
            }
        }
        for r in refs.iter().filter(|r| r.region == img.region && r.image == img.id) {
            keep.push(format!("launch template {} names it", r.what));
        }
        if !keep.is_empty() {
            out.decisions.push(Decision { image: img.clone(), actions: vec![Action::Keep { reasons: keep }] });
            continue;
        }
        // When it left its last channel; never promoted: since it was made.
        let mut left: Option<DateTime<Utc>> = None;
        let mut held: Vec<String> = Vec::new();
        for c in channels.iter().filter(here) {
            if let Some(at) = left_at(c, &img.id) {
                let at = at.or(img.created);
                held.push(format!("{}/{}", c.recipe, c.channel));
                left = match (left, at) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
            }
        }
        let since = left.or(img.created).unwrap_or(now);
        let age = now - since;
        let mut actions = Vec::new();
        if img.deprecated_at.is_none() {
            actions.push(Action::Deprecate {
                at: (since + policy.deprecate_after).max(now),
                reasons: vec![if held.is_empty() {
                    "never promoted".to_string()
                } else {
                    format!("superseded on {} in {}", since.format("%Y-%m-%d"), held.join(", "))
                }],
            });
        }
        let in_retention = !held.is_empty() && age < policy.retention;
        if in_retention {
            let until = since + policy.retention;
            if age >= policy.disable_after && img.state != "disabled" {
                actions.push(Action::Disable { reasons: vec![format!("superseded {} days ago", age.num_days())] });
            }
            actions.push(Action::Keep {
                reasons: vec![format!(
                    "in the history of {} until {} (retention {} days)",
                    held.join(", "),
                    until.format("%Y-%m-%d"),
                    policy.retention.num_days()
                )],
            });
        } else if age >= policy.disable_after || held.is_empty() && age >= policy.retention {
            actions.push(Action::Deregister {
                snapshots: img.snapshots.clone(),
                reason: if held.is_empty() {
                    format!("never promoted, made {} days ago, named by no launch template", age.num_days())
                } else {
                    format!("left {} {} days ago, named by no launch template", held.join(", "), age.num_days())
                },
            });
        } else {
            actions.push(Action::Keep {
                reasons: vec![format!(
                    "superseded {} days ago; deregistered after {} days",
                    age.num_days(),
                    policy.disable_after.num_days().max(policy.retention.num_days())
                )],
            });
        }
        out.decisions.push(Decision { image: img.clone(), actions });
    }
    for (region, (amis, versions)) in counts {
        if *amis * 5 >= AMI_QUOTA * 4 {
            out.warnings.push(format!("{region}: {amis} images, {}% of the {AMI_QUOTA} quota", amis * 100 / AMI_QUOTA));
        }
        if *versions * 5 >= LAUNCH_TEMPLATE_VERSION_QUOTA * 4 {
            out.warnings.push(format!(
                "{region}: {versions} launch-template versions, {}% of the {LAUNCH_TEMPLATE_VERSION_QUOTA} quota",
                versions * 100 / LAUNCH_TEMPLATE_VERSION_QUOTA
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::channel::Version;
    use super::*;

    fn day(n: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-01T00:00:00Z").unwrap().with_timezone(&Utc) + Duration::days(n)
    }

    fn baked(id: &str, made: i64) -> Baked {
        Baked {
            id: id.into(),
            region: "us-east-1".into(),
            name: format!("pinfleet/node/{id}"),
            recipe: "node".into(),
            state: "available".into(),
            created: Some(day(made)),
            deprecated_at: None,
            snapshots: vec![format!("snap-{id}")],
        }
    }

    fn stable(history: &[(&str, i64)]) -> Channel {
        Channel {
            recipe: "node".into(),
            channel: "stable".into(),
            region: "us-east-1".into(),
            history: history
                .iter()
                .enumerate()
                .map(|(i, (im, d))| Version {
                    version: i as i64 + 1,
                    image: im.to_string(),
                    at: Some(day(*d)),
                    note: String::new(),
                })
                .collect(),
        }
    }

    fn kinds(d: &Decision) -> Vec<&'static str> {
        d.actions
            .iter()
            .map(|a| match a {
                Action::Keep { .. } => "keep",
                Action::Deprecate { .. } => "deprecate",
                Action::Disable { .. } => "disable",
                Action::Deregister { .. } => "deregister",
            })
            .collect()
    }

    #[test]
    fn images_go_by_reference_not_by_age() {
        let images = vec![baked("a", 0), baked("b", 1), baked("c", 2), baked("d", 3)];
        // stable: a (day 0) → b (day 1) → c (day 20); d never promoted.
        let ch = vec![stable(&[("a", 0), ("b", 1), ("c", 20)])];
        // One cluster's launch template still runs a.
        let refs =
            vec![LaunchTemplateRef { region: "us-east-1".into(), image: "a".into(), what: "prod/nodes v3".into() }];
        let p = plan(&images, &refs, &ch, &BTreeMap::new(), Policy::default(), day(60));
        let by: BTreeMap<&str, Vec<&str>> = p.decisions.iter().map(|d| (d.image.id.as_str(), kinds(d))).collect();
        assert_eq!(by["a"], ["keep"], "a launch template names it");
        assert_eq!(by["b"], ["deprecate", "deregister"], "left stable 40 days ago");
        assert_eq!(by["c"], ["keep"], "stable holds it");
        assert_eq!(by["d"], ["deprecate", "deregister"], "never promoted, 57 days old");
        let Action::Deregister { snapshots, reason } = &p.decisions[1].actions[1] else { panic!() };
        assert_eq!(snapshots, &["snap-b"]);
        assert!(reason.contains("left node/stable 40 days ago"), "{reason}");
    }

    #[test]
    fn recent_history_is_kept_but_deprecated_then_disabled() {
        let images = vec![baked("a", 0), baked("b", 1)];
        let ch = vec![stable(&[("a", 0), ("b", 10)])];
        let p = plan(&images, &[], &ch, &BTreeMap::new(), Policy::default(), day(12));
        assert_eq!(kinds(&p.decisions[0]), ["deprecate", "keep"]);
        let Action::Deprecate { at, .. } = &p.decisions[0].actions[0] else { panic!() };
        assert_eq!(*at, day(17), "7 days after it left");
        let policy = Policy { retention: Duration::days(90), ..Policy::default() };
        let p = plan(&images, &[], &ch, &BTreeMap::new(), policy, day(45));
        assert_eq!(kinds(&p.decisions[0]), ["deprecate", "disable", "keep"]);
    }

    #[test]
    fn quotas_warn_at_four_fifths() {
        let counts: BTreeMap<String, (usize, usize)> =
            [("us-east-1".to_string(), (40_000, 100)), ("eu-west-1".to_string(), (10, 8_500))].into();
        let p = plan(&[], &[], &[], &counts, Policy::default(), day(0));
        assert_eq!(
            p.warnings,
            [
                "eu-west-1: 8500 launch-template versions, 85% of the 10000 quota",
                "us-east-1: 40000 images, 80% of the 50000 quota"
            ]
        );
    }
}
