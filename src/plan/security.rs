//! Security groups and their rules (pure): the control plane's and the
//! nodes', with the rules the spec's API sources and the cluster's own
//! traffic need.

use std::collections::BTreeMap;

use super::observed_rule_to_desired;
use super::{field, Action, Changes, FieldChange, Op};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::model::{Rule, Source};
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
        // An adopted cluster's groups keep the other tool's rules while its
        // machines run (they need them), and a rule one of them already
        // allows is not added again.
        let adopted = observed.adopted.is_some();
        let add: Vec<Rule> = sg
            .ingress
            .iter()
            .filter(|r| !have.iter().any(|(h, _)| h == *r || (adopted && covers(h, r, &desired.vpc_cidr))))
            .cloned()
            .collect();
        let stale = |h: &Rule| !adopted && !sg.ingress.contains(h);
        let remove: Vec<ObservedRuleRef> = have.iter().filter(|(h, _)| stale(h)).map(|(_, o)| o.clone()).collect();
        if !add.is_empty() || !remove.is_empty() {
            let mut fields: Vec<FieldChange> = add.iter().map(|r| field("ingress", None::<String>, Some(r))).collect();
            fields
                .extend(have.iter().filter(|(h, _)| stale(h)).map(|(h, _)| field("ingress", Some(h), None::<String>)));
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

/// Whether rule `have` already lets through everything `want` does: every
/// protocol (`-1`) or the same one over a port range holding `want`'s,
/// from the same source or a wider range of addresses. A range holding
/// the whole VPC (`vpc`) holds every security group's machines in it.
fn covers(have: &Rule, want: &Rule, vpc: &str) -> bool {
    let holds = |h: &str, w: &str| match (h.parse::<ipnet::IpNet>(), w.parse::<ipnet::IpNet>()) {
        (Ok(h), Ok(w)) => h.contains(&w),
        _ => h == w,
    };
    let source = match (&have.source, &want.source) {
        (Source::Cidr(h), Source::Cidr(w)) => holds(h, w),
        (Source::Cidr(h), Source::Group(_)) => holds(h, vpc),
        (h, w) => h == w,
    };
    source
        && (have.protocol == "-1"
            || (have.protocol == want.protocol && have.from_port <= want.from_port && want.to_port <= have.to_port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(protocol: &str, from: i32, to: i32, source: Source) -> Rule {
        Rule { protocol: protocol.into(), from_port: from, to_port: to, source }
    }

    fn covers_(have: &Rule, want: &Rule) -> bool {
        covers(have, want, "172.20.0.0/16")
    }

    #[test]
    fn a_rule_is_covered_by_all_traffic_or_a_wider_range_from_the_same_source() {
        let nodes = || Source::Group("nodes".into());
        let want = rule("tcp", 443, 443, nodes());
        assert!(covers_(&rule("-1", -1, -1, nodes()), &want));
        assert!(covers_(&rule("tcp", 1, 2379, nodes()), &want));
        assert!(!covers_(&rule("tcp", 1, 442, nodes()), &want), "a range that stops short");
        assert!(!covers_(&rule("udp", 1, 65535, nodes()), &want), "another protocol");
        assert!(!covers_(&rule("-1", -1, -1, Source::Cidr("10.0.0.0/8".into())), &want), "another source");
        let from_vpc = rule("tcp", 443, 443, Source::Cidr("172.20.0.0/16".into()));
        assert!(covers_(&rule("tcp", 443, 443, Source::Cidr("0.0.0.0/0".into())), &from_vpc), "a wider range");
        assert!(!covers_(&rule("tcp", 443, 443, Source::Cidr("172.20.0.0/24".into())), &from_vpc), "a narrower one");
        let vpc_wide = rule("-1", -1, -1, Source::Cidr("172.20.0.0/16".into()));
        assert!(covers_(&vpc_wide, &want), "every address of the VPC holds the group's machines");
        assert!(!covers_(&rule("-1", -1, -1, Source::Cidr("172.20.0.0/17".into())), &want), "half the VPC does not");
        let range = rule("tcp", 2379, 2380, nodes());
        assert!(!covers_(&rule("tcp", 2379, 2379, nodes()), &range), "half the range");
    }
}
