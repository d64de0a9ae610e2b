//! Security groups and their rules (pure): the control plane's and the
//! nodes', with the rules the spec's API sources and the cluster's own
//! traffic need.

use std::collections::BTreeMap;

use super::observed_rule_to_desired;
use super::{field, Action, Changes, FieldChange, Op};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::model::Rule;
use crate::cloud::observed::Observed;
use crate::cloud::ops::ObservedRuleRef;

pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) {
    let sg_names: BTreeMap<String, String> =
        observed.security_groups.iter().map(|s| (s.id.clone(), s.name.clone())).collect();
    // Security groups and their rules.
    let sg_keys: Vec<K> = desired.security_groups.iter().map(|s| K::SecurityGroup(s.name.to_string())).collect();
    for sg in &desired.security_groups {
        let key = K::SecurityGroup(sg.name.to_string());
        let observed_sg = observed.sg_by_name(&sg.name);
        if observed_sg.is_none() {
            out.push(
                key.clone(),
                Action::Create,
                sg.description.clone(),
                vec![],
                "cluster security model".into(),
                vec![K::Vpc],
                Op::CreateSecurityGroup { name: sg.name.clone(), description: sg.description.clone() },
            );
        }
        let have: Vec<(Rule, ObservedRuleRef)> = observed_sg
            .map(|o| {
                o.ingress
                    .iter()
                    .map(|r| {
                        (
                            observed_rule_to_desired(r, &sg_names),
                            ObservedRuleRef {
                                protocol: r.protocol.clone(),
                                from_port: r.from_port,
                                to_port: r.to_port,
                                source: r.source.clone(),
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let add: Vec<Rule> = sg.ingress.iter().filter(|r| !have.iter().any(|(h, _)| h == *r)).cloned().collect();
        let remove: Vec<ObservedRuleRef> =
            have.iter().filter(|(h, _)| !sg.ingress.contains(h)).map(|(_, o)| o.clone()).collect();
        if !add.is_empty() || !remove.is_empty() {
            let mut fields: Vec<FieldChange> = add.iter().map(|r| field("ingress", None::<String>, Some(r))).collect();
            fields.extend(
                have.iter()
                    .filter(|(h, _)| !sg.ingress.contains(h))
                    .map(|(h, _)| field("ingress", Some(h), None::<String>)),
            );
            out.push(
                K::Rules(sg.name.clone()),
                if observed_sg.is_none() { Action::Create } else { Action::Update },
                format!("{} to add, {} to remove", add.len(), remove.len()),
                fields,
                "spec.api.allowedCidrs / cluster security model".into(),
                sg_keys.clone(),
                Op::SyncSecurityGroupRules { name: sg.name.clone(), add, remove },
            );
        }
    }
}
