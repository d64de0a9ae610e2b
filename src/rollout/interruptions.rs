//! Interruption notices (pure): what EventBridge says of a cluster's
//! machines (read from its queue, `cloud::aws::events`) and what the
//! machine-health loop does about each (`rollout::health::listen` carries
//! it out).
//!
//! ```text
//! SQS message ─▶ parse ─▶ Notice ─▶ respond(notice, machine, now) ─▶ [Step] ─▶ health::listen
//! ```
//!
//! - A Spot interruption warning (two minutes' notice): cordon at once,
//!   record the offering as out in the capacity ledger, launch the
//!   replacement (which skips that offering), drain with each pod's grace
//!   capped to the time left, then end the machine and its Node.
//! - A rebalance recommendation: launch the replacement now and drain
//!   nothing until a warning comes or the replacement is Ready.
//! - State changes and scheduled changes are said; the loop's own pass
//!   brings a group that lost a machine back to its size.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::capacity::Offering;

/// How long EC2 gives between the warning and the end.
pub const NOTICE: Duration = Duration::from_secs(120);
/// Kept back from the time left for the drain: the machine's own shutdown.
pub const MARGIN: Duration = Duration::from_secs(15);
/// The ledger code of an offering EC2 took back.
pub const CODE: &str = "SpotInterruption";

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum Kind {
    Warning,
    Rebalance,
    StateChange { state: String },
    Scheduled { event: String },
}

/// One event about some machines.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub kind: Kind,
    pub instances: Vec<String>,
    pub time: DateTime<Utc>,
}

/// An EventBridge event (a queue message's body) as a notice; a located
/// reason for anything else.
pub fn parse(body: &str) -> Result<Notice, String> {
    let v: serde_json::Value = serde_json::from_str(body).map_err(|e| format!("not an event: {e}"))?;
    let detail_type = v["detail-type"].as_str().ok_or("detail-type: missing")?;
    let time = v["time"]
        .as_str()
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .ok_or("time: missing or not RFC 3339")?;
    let one = |field: &str| -> Result<Vec<String>, String> {
        v["detail"][field].as_str().map(|s| vec![s.to_string()]).ok_or(format!("detail.{field}: missing"))
    };
    let (kind, instances) = match detail_type {
        "EC2 Spot Instance Interruption Warning" => (Kind::Warning, one("instance-id")?),
        "EC2 Instance Rebalance Recommendation" => (Kind::Rebalance, one("instance-id")?),
        "EC2 Instance State-change Notification" => {
            (Kind::StateChange { state: v["detail"]["state"].as_str().unwrap_or("?").to_string() }, one("instance-id")?)
        }
        "AWS Health Event" => {
            let ids: Vec<String> = v["detail"]["affectedEntities"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e["entityValue"].as_str().map(str::to_string)).collect())
                .unwrap_or_default();
            let event = v["detail"]["eventTypeCode"].as_str().unwrap_or("scheduled change").to_string();
            (Kind::Scheduled { event }, ids)
        }
        other => return Err(format!("detail-type: {other:?} is not an event pinfleet acts on")),
    };
    if instances.iter().any(|i| !i.starts_with("i-") || i.len() > 32 || i.chars().any(|c| c.is_control())) {
        return Err("instance ids: not EC2 instance ids".into());
    }
    Ok(Notice { kind, instances, time })
}

/// A machine of the cluster as the response needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub id: String,
    pub group: String,
    pub node: Option<String>,
    /// Its offering when it runs on Spot.
    pub spot: Option<Offering>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "step")]
pub enum Step {
    Cordon { node: String },
    MarkOut { offering: Offering },
    Launch { group: String },
    Drain { node: String, within: Duration },
    Terminate { id: String },
    DeleteNode { node: String },
    Say { line: String },
}

/// What to do about `notice` for one of its machines (`None`: not the
/// cluster's). `prelaunched`: a replacement was launched already (on a
/// rebalance recommendation).
pub fn respond(notice: &Notice, machine: Option<&Machine>, prelaunched: bool, now: DateTime<Utc>) -> Vec<Step> {
    let Some(m) = machine else { return vec![] };
    let id = m.id.as_str();
    let mut out = Vec::new();
    match &notice.kind {
        Kind::Warning => {
            let deadline = notice.time + chrono::Duration::from_std(NOTICE).unwrap_or_default();
            let left = (deadline - now).to_std().unwrap_or_default();
            out.push(Step::Say {
                line: format!(
                    "interruption: {id} ({}) is reclaimed at {} ({}s left)",
                    m.group,
                    deadline.format("%H:%M:%S"),
                    left.as_secs()
                ),
            });
            if let Some(n) = &m.node {
                out.push(Step::Cordon { node: n.clone() });
            }
            if let Some(o) = &m.spot {
                out.push(Step::MarkOut { offering: o.clone() });
            }
            if !prelaunched {
                out.push(Step::Launch { group: m.group.clone() });
            }
            if let Some(n) = &m.node {
                out.push(Step::Drain { node: n.clone(), within: left.saturating_sub(MARGIN) });
                out.push(Step::DeleteNode { node: n.clone() });
            }
            out.push(Step::Terminate { id: id.to_string() });
        }
        Kind::Rebalance if !prelaunched => {
            out.push(Step::Say {
                line: format!("rebalance: {id} ({}) is at risk; its replacement starts now, nothing drained", m.group),
            });
            out.push(Step::Launch { group: m.group.clone() });
        }
        Kind::Rebalance => {}
        Kind::StateChange { state } => out.push(Step::Say { line: format!("state: {id} ({}) is {state}", m.group) }),
        Kind::Scheduled { event } => out.push(Step::Say { line: format!("scheduled: {id} ({}) has {event}", m.group) }),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::Market;

    fn event(detail_type: &str, detail: serde_json::Value) -> String {
        serde_json::json!({"version": "0", "source": "aws.ec2", "detail-type": detail_type, "time": "2026-11-26T10:00:00Z", "detail": detail}).to_string()
    }

    #[test]
    fn a_warning_cordons_first_marks_launches_then_drains_within_the_time_left() {
        let n = parse(&event(
            "EC2 Spot Instance Interruption Warning",
            serde_json::json!({"instance-id": "i-0abc", "instance-action": "terminate"}),
        ))
        .unwrap();
        assert_eq!((n.kind.clone(), n.instances.clone()), (Kind::Warning, vec!["i-0abc".to_string()]));
        let o = Offering { market: Market::Spot, instance_type: "m6i.large".into(), zone: "us-east-1a".into() };
        let m =
            Machine { id: "i-0abc".into(), group: "general".into(), node: Some("n1".into()), spot: Some(o.clone()) };
        let now = n.time + chrono::Duration::seconds(5);
        let steps = respond(&n, Some(&m), false, now);
        let kinds: Vec<String> =
            steps.iter().map(|s| serde_json::to_value(s).unwrap()["step"].as_str().unwrap().to_string()).collect();
        assert_eq!(kinds, ["say", "cordon", "markOut", "launch", "drain", "deleteNode", "terminate"]);
        assert!(steps.contains(&Step::Drain { node: "n1".into(), within: Duration::from_secs(100) }));
        // Late: nothing left for grace, still drained (at once) and ended.
        let late = respond(&n, Some(&m), true, n.time + chrono::Duration::minutes(3));
        assert!(late.contains(&Step::Drain { node: "n1".into(), within: Duration::ZERO }));
        assert!(!late.iter().any(|s| matches!(s, Step::Launch { .. })), "already replaced on the recommendation");
        // Another cluster's machine: nothing.
        assert!(respond(&n, None, false, now).is_empty());
    }

    #[test]
    fn a_rebalance_launches_once_and_drains_nothing_and_hostile_bodies_are_refused() {
        let n =
            parse(&event("EC2 Instance Rebalance Recommendation", serde_json::json!({"instance-id": "i-1"}))).unwrap();
        let m = Machine { id: "i-1".into(), group: "g".into(), node: Some("n".into()), spot: None };
        let s = respond(&n, Some(&m), false, n.time);
        assert!(
            s.contains(&Step::Launch { group: "g".into() })
                && !s.iter().any(|s| matches!(s, Step::Drain { .. } | Step::Cordon { .. }))
        );
        assert!(respond(&n, Some(&m), true, n.time).is_empty());
        assert!(parse("{").unwrap_err().starts_with("not an event"));
        assert!(parse(&event("EC2 Spot Instance Interruption Warning", serde_json::json!({})))
            .unwrap_err()
            .contains("detail.instance-id"));
        assert!(parse(&event("Something Else", serde_json::json!({})))
            .unwrap_err()
            .contains("not an event pinfleet acts on"));
        assert!(parse(&event(
            "EC2 Instance Rebalance Recommendation",
            serde_json::json!({"instance-id": "i-1\u{1b}[2J"})
        ))
        .is_err());
        let h = serde_json::json!({"source": "aws.health", "detail-type": "AWS Health Event", "time": "2026-11-26T10:00:00Z",
            "detail": {"eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED", "affectedEntities": [{"entityValue": "i-2"}]}});
        let n = parse(&h.to_string()).unwrap();
        assert_eq!(n.instances, ["i-2"]);
    }
}
