//! The cluster's interruption events (pure): an SQS queue and the
//! EventBridge rules that feed it, for a cluster with a group that may run
//! Spot. Part of the desired model like IAM: the plan diffs it against what
//! SQS and EventBridge have (`cloud::aws::events`), the executor creates,
//! updates and deletes it. The machine-health loop reads the queue
//! (`rollout::interruptions`).
//!
//! The rules: EC2's Spot interruption warning (two minutes' notice), the
//! rebalance recommendation (earlier, or with it), instance state changes,
//! and AWS Health's scheduled changes for EC2.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::spec::Cluster;

/// The rules, by kind (their keys): (kind, event pattern).
pub const KINDS: [&str; 4] = ["spot-interruption", "rebalance", "state-change", "scheduled-change"];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredEvents {
    /// The queue's name.
    pub queue: String,
    pub rules: Vec<DesiredRule>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DesiredRule {
    /// One of [`KINDS`]: the key's name.
    pub kind: String,
    pub name: String,
    /// The event pattern, as JSON text.
    pub pattern: String,
}

/// A name of at most `max` characters: `pinfleet-<cluster>-<what>`, a hash
/// keeping long cluster names apart.
fn bounded(full: String, max: usize) -> String {
    if full.len() <= max {
        return full;
    }
    use sha2::Digest;
    let h = sha2::Sha256::digest(full.as_bytes());
    let hash: String = h.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hash}", &full[..max - 9])
}

/// The queue's name (SQS allows 80 characters).
pub fn queue_name(cluster: &str) -> String {
    bounded(format!("pinfleet-{cluster}-interruptions"), 80)
}

/// A rule's name (EventBridge allows 64 characters).
pub fn rule_name(cluster: &str, kind: &str) -> String {
    bounded(format!("pinfleet-{cluster}-{kind}"), 64)
}

/// The event pattern of a kind.
pub fn pattern(kind: &str) -> serde_json::Value {
    match kind {
        "spot-interruption" => {
            json!({"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]})
        }
        "rebalance" => json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]}),
        "state-change" => json!({"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]}),
        _ => json!({
            "source": ["aws.health"],
            "detail-type": ["AWS Health Event"],
            "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]}
        }),
    }
}

/// What the cluster needs: the queue and its rules when any group may run
/// Spot; nothing otherwise (an On-Demand machine is not interrupted, and
/// the machine-health loop sees its state changes by observing).
pub fn desired(cluster: &Cluster) -> Option<DesiredEvents> {
    if !cluster.spec.instance_groups.iter().any(|g| g.allows_spot()) {
        return None;
    }
    let name = &cluster.metadata.name;
    Some(DesiredEvents {
        queue: queue_name(name),
        rules: KINDS
            .iter()
            .map(|k| DesiredRule { kind: k.to_string(), name: rule_name(name, k), pattern: pattern(k).to_string() })
            .collect(),
    })
}

/// Whether two event patterns say the same (key order and spacing aside).
pub fn same_pattern(a: &str, b: &str) -> bool {
    match (serde_json::from_str::<serde_json::Value>(a), serde_json::from_str::<serde_json::Value>(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The queue's access policy: EventBridge may send to it from the
/// cluster's rules only.
pub fn queue_policy(queue_arn: &str, rule_arns: &[String]) -> String {
    json!({
        "Version": "2012-10-17",
        "Statement": [{
            "Sid": "pinfleet-interruption-events",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arns}}
        }]
    })
    .to_string()
}

/// A rule's ARN in the queue's account and region (from the queue's ARN).
pub fn rule_arn(queue_arn: &str, rule: &str) -> Option<String> {
    // arn:aws:sqs:REGION:ACCOUNT:NAME
    let parts: Vec<&str> = queue_arn.split(':').collect();
    (parts.len() == 6).then(|| format!("arn:{}:events:{}:{}:rule/{rule}", parts[1], parts[3], parts[4]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_and_stay_apart() {
        assert_eq!(queue_name("prod"), "pinfleet-prod-interruptions");
        assert_eq!(rule_name("prod", "rebalance"), "pinfleet-prod-rebalance");
        let long = "c".repeat(70);
        assert!(rule_name(&long, "scheduled-change").len() <= 64);
        assert_ne!(rule_name(&long, "scheduled-change"), rule_name(&format!("{long}x"), "scheduled-change"));
        assert!(queue_name(&long).len() <= 80);
        assert!(same_pattern(
            &pattern("rebalance").to_string(),
            r#"{"detail-type":["EC2 Instance Rebalance Recommendation"],"source":["aws.ec2"]}"#
        ));
        assert_eq!(
            rule_arn("arn:aws:sqs:us-east-1:123456789012:q", "r").as_deref(),
            Some("arn:aws:events:us-east-1:123456789012:rule/r")
        );
    }
}
