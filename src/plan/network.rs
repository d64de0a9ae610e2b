//! The network's changes (pure): VPC, subnets, internet gateway, NAT
//! gateways with their addresses, route tables; subnets that left the spec
//! go last, once nothing runs in them.

use std::collections::{BTreeMap, BTreeSet};

use super::{field, Action, Change, Changes, Op, Step};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::model::RouteTarget;
use crate::cloud::observed::Observed;

/// Everything the machines will need from the network.
pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) {
    vpc(desired, observed, out);
    subnets(desired, observed, out);
    internet_gateway(desired, observed, out);
    // An adopted cluster's routing that stays the other tool's.
    let kept = routing_kept(desired, observed);
    nat_gateways(desired, observed, &kept, out);
    route_tables(desired, observed, &kept, out);
}

/// The VPC and its CIDR.
fn vpc(desired: &Desired, observed: &Observed, out: &mut Changes) {
    match &observed.vpc {
        None => out.push(
            K::Vpc,
            Action::Create,
            desired.vpc_cidr.clone(),
            vec![field("cidr", None::<String>, Some(&desired.vpc_cidr))],
            "spec.network.vpcCidr".into(),
            vec![],
            Op::CreateVpc { cidr: desired.vpc_cidr.clone() },
        ),
        Some(v) if v.cidr != desired.vpc_cidr => out.push(
            K::Vpc,
            Action::Replace,
            format!("{} → {}", v.cidr, desired.vpc_cidr),
            vec![field("cidr", Some(&v.cidr), Some(&desired.vpc_cidr))],
            "spec.network.vpcCidr".into(),
            vec![],
            Step::Refuse {
                why: format!(
                    "the VPC CIDR cannot change in place ({} → {}); build a new cluster and move workloads",
                    v.cidr, desired.vpc_cidr
                ),
            },
        ),
        Some(_) => {}
    }
}

/// Each subnet of the spec.
fn subnets(desired: &Desired, observed: &Observed, out: &mut Changes) {
    for s in &desired.subnets {
        let key = K::Subnet(s.name.to_string());
        match observed.subnet_by_name(&s.name) {
            None => out.push(key, Action::Create, format!("{} {}{}", s.zone, s.cidr, if s.public { " (public)" } else { "" }),
                vec![field("cidr", None::<String>, Some(&s.cidr)), field("zone", None::<String>, Some(&s.zone))],
                format!("spec.network.subnets[{}]", s.name), vec![K::Vpc],
                Op::CreateSubnet { name: s.name.clone(), zone: s.zone.clone(), cidr: s.cidr.clone(), public: s.public }),
            Some(o) if o.cidr != s.cidr || o.zone != s.zone => out.push(key, Action::Replace, format!("{} {} → {} {}", o.zone, o.cidr, s.zone, s.cidr),
                vec![field("cidr", Some(&o.cidr), Some(&s.cidr)), field("zone", Some(&o.zone), Some(&s.zone))],
                format!("spec.network.subnets[{}]", s.name), vec![],
                Step::Refuse { why: format!("subnet {} cannot change in place: add a new subnet, move the groups to it, apply, then remove this one", s.name) }),
            Some(_) => {}
        }
    }
}

/// The internet gateway public subnets route to.
fn internet_gateway(desired: &Desired, observed: &Observed, out: &mut Changes) {
    if desired.internet_gateway && observed.internet_gateway.is_none() {
        out.push(
            K::Igw,
            Action::Create,
            "attached to the VPC".into(),
            vec![],
            "public subnets in spec.network.subnets".into(),
            vec![K::Vpc],
            Op::CreateInternetGateway,
        );
    }
}

/// NAT gateways and their addresses (none for a zone whose private
/// routing an adopted cluster keeps: nothing would route to it).
fn nat_gateways(desired: &Desired, observed: &Observed, kept: &BTreeSet<&str>, out: &mut Changes) {
    let routed = |zone: &str| {
        desired.route_tables.iter().any(|rt| {
            !kept.contains(rt.name.as_str())
                && matches!(&rt.default_route, Some(RouteTarget::Nat { zone: z }) if z == zone)
        })
    };
    for n in desired.nat_gateways.iter().filter(|n| observed.adopted.is_none() || routed(&n.zone)) {
        if !observed.addresses.iter().any(|a| a.zone == n.zone) {
            out.push(
                K::Eip(n.zone.to_string()),
                Action::Create,
                format!("address for the {} NAT gateway", n.zone),
                vec![],
                format!("private subnets in {}", n.zone),
                vec![],
                Op::AllocateAddress { zone: n.zone.clone() },
            );
        }
        if !observed.nat_gateways.iter().any(|o| o.zone == n.zone) {
            out.push(
                K::Nat(n.zone.to_string()),
                Action::Create,
                format!("in subnet {}", n.subnet),
                vec![],
                format!("private subnets in {}", n.zone),
                vec![K::Eip(n.zone.to_string()), K::Subnet(n.subnet.to_string()), K::Igw],
                Op::CreateNatGateway { zone: n.zone.clone(), subnet: n.subnet.clone() },
            );
        }
    }
}

/// An adopted cluster's route tables whose routing stays the other tool's:
/// one claimed (its routes and associations are kept as they are), and
/// one not there whose subnets all exist (they keep the routing they have,
/// their own table's or the VPC's main one). pinfleet's machines launch
/// into those subnets with the routing the running machines have.
fn routing_kept<'a>(desired: &'a Desired, observed: &Observed) -> BTreeSet<&'a str> {
    if observed.adopted.is_none() {
        return BTreeSet::new();
    }
    let exists = |s: &String| observed.subnets.iter().any(|o| &o.name == s);
    desired
        .route_tables
        .iter()
        .filter(|rt| observed.route_tables.iter().any(|o| o.name == rt.name) || rt.subnets.iter().all(exists))
        .map(|rt| rt.name.as_str())
        .collect()
}

/// Route tables: their default routes and subnets.
fn route_tables(desired: &Desired, observed: &Observed, kept: &BTreeSet<&str>, out: &mut Changes) {
    let subnet_names: BTreeMap<String, String> =
        observed.subnets.iter().map(|s| (s.id.clone(), s.name.clone())).collect();
    for rt in desired.route_tables.iter().filter(|rt| !kept.contains(rt.name.as_str())) {
        let key = K::RouteTable(rt.name.to_string());
        let mut deps = vec![K::Vpc];
        deps.extend(rt.subnets.iter().map(|s| K::Subnet(s.to_string())));
        match &rt.default_route {
            Some(RouteTarget::InternetGateway) => deps.push(K::Igw),
            Some(RouteTarget::Nat { zone }) => deps.push(K::Nat(zone.to_string())),
            None => {}
        }
        let sync = Op::SyncRouteTable {
            name: rt.name.clone(),
            default_route: rt.default_route.clone(),
            subnets: rt.subnets.clone(),
        };
        match observed.route_tables.iter().find(|o| o.name == rt.name) {
            None => {
                out.push(
                    key.clone(),
                    Action::Create,
                    format!("for {}", rt.subnets.join(", ")),
                    vec![],
                    "spec.network.subnets".into(),
                    vec![K::Vpc],
                    Op::CreateRouteTable { name: rt.name.clone() },
                );
                deps.push(key.clone());
                out.push(
                    K::Routes(rt.name.clone()),
                    Action::Create,
                    "default route and subnet associations".into(),
                    vec![],
                    "spec.network.subnets".into(),
                    deps,
                    sync,
                );
            }
            Some(o) => {
                let want_target = match &rt.default_route {
                    Some(RouteTarget::InternetGateway) => observed.internet_gateway.as_ref().map(|g| g.id.clone()),
                    Some(RouteTarget::Nat { zone }) => {
                        observed.nat_gateways.iter().find(|n| &n.zone == zone).map(|n| n.id.clone())
                    }
                    None => None,
                };
                let have_subnets: BTreeSet<String> =
                    o.associations.iter().filter_map(|(_, sid)| subnet_names.get(sid).cloned()).collect();
                let want_subnets: BTreeSet<String> = rt.subnets.iter().cloned().collect();
                let route_ok = rt.default_route.is_none() && o.default_route.is_none()
                    || (want_target.is_some() && want_target == o.default_route);
                if !route_ok || have_subnets != want_subnets {
                    let mut fields = Vec::new();
                    if !route_ok {
                        fields.push(field(
                            "defaultRoute",
                            o.default_route.clone(),
                            Some(want_target.unwrap_or_else(|| "(known after apply)".into())),
                        ));
                    }
                    if have_subnets != want_subnets {
                        fields.push(field(
                            "subnets",
                            Some(have_subnets.into_iter().collect::<Vec<_>>().join(",")),
                            Some(rt.subnets.join(",")),
                        ));
                    }
                    out.push(
                        K::Routes(rt.name.clone()),
                        Action::Update,
                        "default route and subnet associations".into(),
                        fields,
                        "spec.network.subnets".into(),
                        deps,
                        sync,
                    );
                }
            }
        }
    }
}

/// Subnets removed from the spec (after the machines that ran there).
pub(super) fn removed_subnets(desired: &Desired, observed: &Observed, out: &mut Changes) {
    for s in observed.subnets.iter().filter(|s| !desired.subnets.iter().any(|d| d.name == s.name)) {
        let deps: Vec<K> = out
            .0
            .iter()
            .filter(|c| matches!(c.key, K::Instances(_) | K::RouteTable(_) | K::Routes(_)))
            .map(|c| c.key.clone())
            .collect();
        let in_use = observed.instances.iter().any(|i| {
            i.is_live()
                && i.subnet_id.as_deref() == Some(&s.id)
                && !out
                    .0
                    .iter()
                    .any(|c| matches!(&c.op, Step::Run(Op::TerminateInstances { ids, .. }) if ids.contains(&i.id)))
        });
        let op = if in_use {
            Step::Refuse {
                why: format!(
                    "subnet {} still has running instances; move its instance groups to other subnets first",
                    s.name
                ),
            }
        } else {
            Step::Run(Op::DeleteSubnet { id: s.id.clone() })
        };
        out.0.push(Change {
            key: K::Subnet(s.name.to_string()),
            action: Action::Delete,
            summary: format!("{} {}", s.zone, s.cidr),
            fields: vec![],
            reason: format!("subnet {} is no longer in the spec", s.name),
            depends_on: deps,
            op,
        });
    }
}
