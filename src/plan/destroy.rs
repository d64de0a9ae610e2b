//! The destroy plan (pure): everything observed for a cluster, deleted in
//! dependency order (machines first, the VPC last).

use std::collections::{BTreeMap, BTreeSet};

use super::{order, Action, Change, ObservedRuleRef, Op, Plan};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::observed::Observed;

/// The deletions so far.
struct Deletes(Vec<Change>);

impl Deletes {
    fn add(&mut self, key: K, summary: String, depends_on: Vec<K>, op: Op) {
        self.0.push(Change {
            key,
            action: Action::Delete,
            summary,
            fields: vec![],
            reason: "destroy".into(),
            depends_on,
            op: op.into(),
        });
    }
}

/// Everything observed, deleted in dependency order.
pub fn destroy(cluster: &str, observed: &Observed) -> Plan {
    let mut out = Deletes(Vec::new());
    let inst_keys = machines(observed, &mut out);
    balancer(observed, &mut out);
    let nat_keys = gateways(observed, &inst_keys, &mut out);
    security_groups(observed, &inst_keys, &mut out);
    subnets_and_vpc(observed, &inst_keys, &nat_keys, &mut out);
    iam(observed, &inst_keys, &mut out);
    events(observed, &mut out);
    let mut changes = out.0;
    let keys: BTreeSet<K> = changes.iter().map(|c| c.key.clone()).collect();
    for c in &mut changes {
        c.depends_on.retain(|d| keys.contains(d));
    }
    order(&mut changes);
    Plan { cluster: cluster.to_string(), changes, needs_rollout: vec![], aws_calls: BTreeMap::new() }
}

/// The machines by group, then their templates; the groups' keys.
fn machines(observed: &Observed, out: &mut Deletes) -> Vec<K> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in observed.instances.iter().filter(|i| i.is_live()) {
        groups.entry(i.group.clone().unwrap_or_else(|| "(no group)".into())).or_default().push(i.id.clone());
    }
    let inst_keys: Vec<K> = groups.keys().map(|g| K::Instances(g.to_string())).collect();
    for (g, ids) in groups {
        out.add(
            K::Instances(g.to_string()),
            format!("terminate {}", ids.len()),
            vec![],
            Op::TerminateInstances { group: g, ids, wait: true },
        );
    }
    for t in &observed.launch_templates {
        out.add(
            K::LaunchTemplate(t.group.to_string()),
            t.name.clone(),
            inst_keys.clone(),
            Op::DeleteLaunchTemplate { group: t.group.clone(), id: t.id.clone() },
        );
    }
    inst_keys
}

/// The API's listener, load balancer and target group.
fn balancer(observed: &Observed, out: &mut Deletes) {
    if let Some(l) = &observed.listener {
        out.add(K::Listener, "API listener".into(), vec![], Op::DeleteListener { arn: l.clone() });
    }
    if let Some(lb) = &observed.load_balancer {
        out.add(
            K::LoadBalancer,
            "API load balancer".into(),
            vec![K::Listener],
            Op::DeleteLoadBalancer { arn: lb.arn.clone() },
        );
    }
    if let Some(tg) = &observed.target_group {
        out.add(
            K::TargetGroup,
            "API target group".into(),
            vec![K::Listener, K::LoadBalancer],
            Op::DeleteTargetGroup { arn: tg.arn.clone() },
        );
    }
}

/// NAT gateways, addresses (after the machines: the API address is on
/// one), route tables and the internet gateway; the NATs' keys.
fn gateways(observed: &Observed, inst_keys: &[K], out: &mut Deletes) -> Vec<K> {
    let nat_keys: Vec<K> = observed.nat_gateways.iter().map(|n| K::Nat(n.zone.to_string())).collect();
    for n in &observed.nat_gateways {
        out.add(
            K::Nat(n.zone.to_string()),
            n.id.clone(),
            inst_keys.to_vec(),
            Op::DeleteNatGateway { id: n.id.clone() },
        );
    }
    let mut eip_deps = nat_keys.clone();
    eip_deps.extend(inst_keys.iter().cloned());
    for a in &observed.addresses {
        out.add(
            K::Eip(a.zone.to_string()),
            a.allocation_id.clone(),
            eip_deps.clone(),
            Op::ReleaseAddress { allocation_id: a.allocation_id.clone() },
        );
    }
    for r in &observed.route_tables {
        out.add(
            K::RouteTable(r.name.to_string()),
            r.id.clone(),
            nat_keys.clone(),
            Op::DeleteRouteTable {
                id: r.id.clone(),
                associations: r.associations.iter().map(|(a, _)| a.clone()).collect(),
            },
        );
    }
    let eip_keys: Vec<K> = observed.addresses.iter().map(|a| K::Eip(a.zone.to_string())).collect();
    if let Some(g) = &observed.internet_gateway {
        let mut deps = nat_keys.clone();
        deps.extend(eip_keys.clone());
        deps.push(K::LoadBalancer);
        out.add(
            K::Igw,
            g.id.clone(),
            deps,
            Op::DeleteInternetGateway { id: g.id.clone(), vpc: g.attached_vpc.clone() },
        );
    }
    nat_keys
}

/// Security groups' rules first (groups name each other), then the groups.
fn security_groups(observed: &Observed, inst_keys: &[K], out: &mut Deletes) {
    let sg_rule_keys: Vec<K> = observed.security_groups.iter().map(|s| K::Rules(s.name.to_string())).collect();
    for s in &observed.security_groups {
        if !s.ingress.is_empty() {
            let remove = s
                .ingress
                .iter()
                .map(|r| ObservedRuleRef {
                    protocol: r.protocol.clone(),
                    from_port: r.from_port,
                    to_port: r.to_port,
                    source: r.source.clone(),
                })
                .collect();
            out.add(
                K::Rules(s.name.to_string()),
                "revoke all rules".into(),
                vec![],
                Op::SyncSecurityGroupRules { name: s.name.clone(), add: vec![], remove },
            );
        }
    }
    for s in &observed.security_groups {
        let mut deps = inst_keys.to_vec();
        deps.extend(sg_rule_keys.iter().cloned());
        deps.push(K::LoadBalancer);
        deps.extend(observed.launch_templates.iter().map(|t| K::LaunchTemplate(t.group.to_string())));
        out.add(K::SecurityGroup(s.name.to_string()), s.id.clone(), deps, Op::DeleteSecurityGroup { id: s.id.clone() });
    }
}

/// Subnets once nothing runs in them, then the VPC after everything.
fn subnets_and_vpc(observed: &Observed, inst_keys: &[K], nat_keys: &[K], out: &mut Deletes) {
    let rt_keys: Vec<K> = observed.route_tables.iter().map(|r| K::RouteTable(r.name.to_string())).collect();
    for s in &observed.subnets {
        let mut deps = inst_keys.to_vec();
        deps.extend(nat_keys.iter().cloned());
        deps.extend(rt_keys.iter().cloned());
        deps.push(K::LoadBalancer);
        out.add(
            K::Subnet(s.name.to_string()),
            format!("{} {}", s.zone, s.cidr),
            deps,
            Op::DeleteSubnet { id: s.id.clone() },
        );
    }
    if let Some(v) = &observed.vpc {
        let deps: Vec<K> = out.0.iter().map(|c: &Change| c.key.clone()).collect();
        out.add(K::Vpc, v.cidr.clone(), deps, Op::DeleteVpc { id: v.id.clone() });
    }
}

/// IAM once no machine runs with it.
fn iam(observed: &Observed, inst_keys: &[K], out: &mut Deletes) {
    // IAM once no machine runs with it.
    for p in &observed.instance_profiles {
        out.add(
            K::InstanceProfile(p.key.clone()),
            p.name.clone(),
            inst_keys.to_vec(),
            Op::DeleteInstanceProfile { name: p.name.clone(), roles: p.roles.clone() },
        );
    }
    for r in &observed.iam_roles {
        let mut deps = inst_keys.to_vec();
        deps.push(K::InstanceProfile(r.key.clone()));
        out.add(K::IamRole(r.key.clone()), r.name.clone(), deps, Op::DeleteRole { name: r.name.clone() });
    }
}

/// Interruption events: the rules, then their queue.
fn events(observed: &Observed, out: &mut Deletes) {
    // Interruption events: the rules, then their queue.
    for r in &observed.event_rules {
        out.add(K::EventRule(r.kind.clone()), r.name.clone(), vec![], Op::DeleteEventRule { name: r.name.clone() });
    }
    if let Some(q) = &observed.events_queue {
        let deps = observed.event_rules.iter().map(|r| K::EventRule(r.kind.clone())).collect();
        out.add(K::EventQueue, q.name.clone(), deps, Op::DeleteEventQueue { url: q.url.clone() });
    }
}
