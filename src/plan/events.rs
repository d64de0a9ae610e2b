//! Interruption events (pure): the queue created when missing, each rule
//! created or replaced when its pattern or target says something else, and
//! what the cluster no longer needs (no group may run Spot) deleted, rules
//! before the queue.

use super::{field, Action, Changes, Op};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::observed::Observed;

pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) {
    let Some(d) = &desired.events else {
        removed(observed, out);
        return;
    };
    let rule_names: Vec<String> = d.rules.iter().map(|r| r.name.clone()).collect();
    if observed.events_queue.is_none() {
        out.push(
            K::EventQueue,
            Action::Create,
            d.queue.clone(),
            vec![field("sender", None::<String>, Some("the cluster's EventBridge rules"))],
            "a group may run Spot: the machine-health loop reads interruption warnings from it".into(),
            vec![],
            Op::CreateEventQueue { name: d.queue.clone(), rules: rule_names },
        );
    }
    let queue_arn = observed.events_queue.as_ref().map(|q| q.arn.as_str());
    for r in &d.rules {
        let have = observed.event_rules.iter().find(|o| o.name == r.name);
        let targets_queue =
            |o: &crate::cloud::observed::ObservedEventRule| queue_arn.is_some_and(|a| o.targets.iter().any(|t| t == a));
        let (action, why) = match have {
            None => (Action::Create, "EventBridge sends these events to the queue"),
            Some(o) if !crate::cloud::events::same_pattern(&o.pattern, &r.pattern) => {
                (Action::Update, "the rule's pattern is not the one pinfleet sets")
            }
            Some(o) if !targets_queue(o) => (Action::Update, "the rule does not send to the cluster's queue"),
            Some(_) => continue,
        };
        out.push(
            K::EventRule(r.kind.clone()),
            action,
            r.name.clone(),
            vec![field("pattern", have.map(|o| o.pattern.clone()), Some(&r.pattern))],
            why.into(),
            vec![K::EventQueue],
            Op::PutEventRule { name: r.name.clone(), pattern: r.pattern.clone(), queue: d.queue.clone() },
        );
    }
}

/// Deletes of a queue and rules no group needs any more.
fn removed(observed: &Observed, out: &mut Changes) {
    let rule_keys: Vec<K> = observed.event_rules.iter().map(|r| K::EventRule(r.kind.clone())).collect();
    for r in &observed.event_rules {
        out.push(
            K::EventRule(r.kind.clone()),
            Action::Delete,
            r.name.clone(),
            vec![],
            "no group may run Spot any more".into(),
            vec![],
            Op::DeleteEventRule { name: r.name.clone() },
        );
    }
    if let Some(q) = &observed.events_queue {
        out.push(
            K::EventQueue,
            Action::Delete,
            q.name.clone(),
            vec![],
            "no group may run Spot any more".into(),
            rule_keys,
            Op::DeleteEventQueue { url: q.url.clone() },
        );
    }
}
