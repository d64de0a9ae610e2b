//! desired vs observed → [`Plan`]: an ordered list of changes, each with the
//! resource, field-level before → after, the reason (the spec field behind
//! it) and what it depends on. Pure. A plan serializes, so it can be shown
//! ([`show`]), saved and applied exactly as reviewed; plan, apply and
//! dry-run walk the same data.

pub mod show;

use crate::cloud::key::ResourceKey as K;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::cloud::model::{Desired, LaunchTemplateData, RouteTarget, Rule, Source};
use crate::cloud::observed::{Observed, ObservedInstance, ObservedSource};
use crate::spec::Role;

pub use crate::cloud::ops::{with_api_host, ObservedRuleRef, Op, API_HOST_PLACEHOLDER};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Update,
    Replace,
    Delete,
}

impl Action {
    /// `+`, `~`, `-/+`, `-`, as terraform shows them.
    pub fn symbol(self) -> &'static str {
        match self {
            Action::Create => "+",
            Action::Update => "~",
            Action::Replace => "-/+",
            Action::Delete => "-",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldChange {
    pub field: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The resource's key, e.g. `subnet/private-a`, `instances/general`.
    pub key: crate::cloud::key::ResourceKey,
    pub action: Action,
    pub summary: String,
    pub fields: Vec<FieldChange>,
    /// Why: the spec field (or observation) behind the change.
    pub reason: String,
    pub depends_on: Vec<crate::cloud::key::ResourceKey>,
    pub op: Op,
}

/// Instances running an older launch-template version: a later
/// `pinfleet upgrade` replaces them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutNote {
    pub group: String,
    pub instances: Vec<String>,
    pub current_version: String,
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub cluster: String,
    pub changes: Vec<Change>,
    pub needs_rollout: Vec<RolloutNote>,
    /// AWS calls made while observing, by operation.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub aws_calls: BTreeMap<String, u64>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }
    pub fn count(&self, action: Action) -> usize {
        self.changes.iter().filter(|c| c.action == action).count()
    }
    pub fn refusals(&self) -> Vec<&Change> {
        self.changes.iter().filter(|c| matches!(c.op, Op::Refuse { .. })).collect()
    }
}

fn field(name: &str, before: Option<impl ToString>, after: Option<impl ToString>) -> FieldChange {
    FieldChange { field: name.to_string(), before: before.map(|b| b.to_string()), after: after.map(|a| a.to_string()) }
}

/// The fields in which an observed launch template differs from the desired
/// one, with the spec field behind each.
pub fn template_changes(
    want: &LaunchTemplateData,
    have: &crate::cloud::observed::ObservedTemplateData,
    sg_names: &BTreeMap<String, String>,
    api_host: Option<&str>,
    group: &str,
) -> Vec<(FieldChange, String)> {
    let g = format!("spec.instanceGroups[{group}]");
    let mut out = Vec::new();
    let mut cmp = |name: &str, a: String, b: String, why: String| {
        if a != b {
            out.push((field(name, Some(b), Some(a)), why));
        }
    };
    cmp("imageId", want.image_id.clone(), have.image_id.clone(), format!("{g}.image"));
    cmp("instanceType", want.instance_type.clone(), have.instance_type.clone(), format!("{g}.machineType"));
    cmp("rootDevice", want.root_device.clone(), have.root_device.clone(), format!("{g}.image (root device)"));
    cmp(
        "rootVolume.sizeGiB",
        want.root_volume_gib.to_string(),
        have.root_volume_gib.to_string(),
        format!("{g}.rootVolume.sizeGiB"),
    );
    cmp(
        "rootVolume.type",
        want.root_volume_type.clone(),
        have.root_volume_type.clone(),
        format!("{g}.rootVolume.type"),
    );
    cmp(
        "rootVolume.encrypted",
        want.encrypted.to_string(),
        have.encrypted.to_string(),
        format!("{g}.rootVolume.encrypted"),
    );
    cmp(
        "instanceProfile",
        want.instance_profile.clone().unwrap_or_default(),
        have.instance_profile.clone().unwrap_or_default(),
        format!("{g}.instanceProfile / spec.iam"),
    );
    cmp(
        "keyName",
        want.key_name.clone().unwrap_or_default(),
        have.key_name.clone().unwrap_or_default(),
        "spec.sshKeyName".into(),
    );
    let have_sgs: Vec<String> =
        have.security_group_ids.iter().map(|id| sg_names.get(id).cloned().unwrap_or_else(|| id.clone())).collect();
    cmp("securityGroup", want.security_group.clone(), have_sgs.join(","), format!("{g}.role"));
    cmp(
        "metadataOptions.httpTokens",
        if want.imds_tokens_required { "required" } else { "optional" }.into(),
        if have.imds_tokens_required { "required" } else { "optional" }.into(),
        "IMDSv2 is always required".into(),
    );
    let want_ud = match api_host {
        Some(h) => with_api_host(&want.user_data, h),
        None => want.user_data.clone(),
    };
    cmp(
        "userData",
        want_ud,
        have.user_data.clone(),
        "rendered bootstrap (spec.kubernetesVersion, labels, taints, templates/)".into(),
    );
    let fmt_tags =
        |t: &BTreeMap<String, String>| t.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ");
    cmp("tags", fmt_tags(&want.tags), fmt_tags(&have.tags), format!("{g}.cloudLabels / spec.owner"));
    out
}

fn observed_rule_to_desired(r: &crate::cloud::observed::ObservedRule, sg_names: &BTreeMap<String, String>) -> Rule {
    Rule {
        protocol: r.protocol.clone(),
        from_port: r.from_port,
        to_port: r.to_port,
        source: match &r.source {
            ObservedSource::Cidr(c) => Source::Cidr(c.clone()),
            ObservedSource::GroupId(id) => match sg_names.get(id) {
                Some(n) => Source::Group(n.clone()),
                None => Source::Cidr(format!("sg:{id}")),
            },
        },
    }
}

/// Which live instances to terminate when a group shrinks: those on an
/// outdated launch-template version first, then the oldest.
pub fn pick_excess<'a>(
    live: &[&'a ObservedInstance],
    excess: usize,
    current: Option<i64>,
) -> Vec<&'a ObservedInstance> {
    let mut sorted: Vec<&ObservedInstance> = live.to_vec();
    sorted.sort_by_key(|i| {
        (i.launch_template_version == current && current.is_some(), i.launch_time.unwrap_or(0), i.id.clone())
    });
    sorted.into_iter().take(excess).collect()
}

/// The plan that makes `observed` match `desired`.
pub fn diff(desired: &Desired, observed: &Observed) -> Plan {
    let mut changes: Vec<Change> = Vec::new();
    let mut push = |key: K, action, summary: String, fields, reason: String, depends_on: Vec<K>, op| {
        changes.push(Change { key, action, summary, fields, reason, depends_on, op });
    };
    let sg_names: BTreeMap<String, String> =
        observed.security_groups.iter().map(|s| (s.id.clone(), s.name.clone())).collect();
    let subnet_names: BTreeMap<String, String> =
        observed.subnets.iter().map(|s| (s.id.clone(), s.name.clone())).collect();

    // VPC.
    match &observed.vpc {
        None => push(
            K::Vpc,
            Action::Create,
            desired.vpc_cidr.clone(),
            vec![field("cidr", None::<String>, Some(&desired.vpc_cidr))],
            "spec.network.vpcCidr".into(),
            vec![],
            Op::CreateVpc { cidr: desired.vpc_cidr.clone() },
        ),
        Some(v) if v.cidr != desired.vpc_cidr => push(
            K::Vpc,
            Action::Replace,
            format!("{} → {}", v.cidr, desired.vpc_cidr),
            vec![field("cidr", Some(&v.cidr), Some(&desired.vpc_cidr))],
            "spec.network.vpcCidr".into(),
            vec![],
            Op::Refuse {
                why: format!(
                    "the VPC CIDR cannot change in place ({} → {}); build a new cluster and move workloads",
                    v.cidr, desired.vpc_cidr
                ),
            },
        ),
        Some(_) => {}
    }

    // Subnets.
    for s in &desired.subnets {
        let key = K::Subnet(s.name.to_string());
        match observed.subnet_by_name(&s.name) {
            None => push(key, Action::Create, format!("{} {}{}", s.zone, s.cidr, if s.public { " (public)" } else { "" }),
                vec![field("cidr", None::<String>, Some(&s.cidr)), field("zone", None::<String>, Some(&s.zone))],
                format!("spec.network.subnets[{}]", s.name), vec![K::Vpc],
                Op::CreateSubnet { name: s.name.clone(), zone: s.zone.clone(), cidr: s.cidr.clone(), public: s.public }),
            Some(o) if o.cidr != s.cidr || o.zone != s.zone => push(key, Action::Replace, format!("{} {} → {} {}", o.zone, o.cidr, s.zone, s.cidr),
                vec![field("cidr", Some(&o.cidr), Some(&s.cidr)), field("zone", Some(&o.zone), Some(&s.zone))],
                format!("spec.network.subnets[{}]", s.name), vec![],
                Op::Refuse { why: format!("subnet {} cannot change in place: add a new subnet, move the groups to it, apply, then remove this one", s.name) }),
            Some(_) => {}
        }
    }

    // Internet gateway.
    if desired.internet_gateway && observed.internet_gateway.is_none() {
        push(
            K::Igw,
            Action::Create,
            "attached to the VPC".into(),
            vec![],
            "public subnets in spec.network.subnets".into(),
            vec![K::Vpc],
            Op::CreateInternetGateway,
        );
    }

    // NAT gateways and their addresses.
    for n in &desired.nat_gateways {
        if !observed.addresses.iter().any(|a| a.zone == n.zone) {
            push(
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
            push(
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

    // Route tables.
    for rt in &desired.route_tables {
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
                push(
                    key.clone(),
                    Action::Create,
                    format!("for {}", rt.subnets.join(", ")),
                    vec![],
                    "spec.network.subnets".into(),
                    vec![K::Vpc],
                    Op::CreateRouteTable { name: rt.name.clone() },
                );
                deps.push(key.clone());
                push(
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
                    push(
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

    // Security groups and their rules.
    let sg_keys: Vec<K> = desired.security_groups.iter().map(|s| K::SecurityGroup(s.name.to_string())).collect();
    for sg in &desired.security_groups {
        let key = K::SecurityGroup(sg.name.to_string());
        let observed_sg = observed.sg_by_name(&sg.name);
        if observed_sg.is_none() {
            push(
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
            push(
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

    // The API endpoint: an Elastic IP on the control plane, or the load balancer.
    let lb = &desired.load_balancer;
    let api_key = K::Eip(crate::cloud::model::API_ADDRESS.to_string());
    if desired.api_address && observed.api_address().is_none() {
        push(
            api_key.clone(),
            Action::Create,
            "address for the API endpoint".into(),
            vec![],
            "spec.api.loadBalancer.type: elastic-ip".into(),
            vec![],
            Op::AllocateAddress { zone: crate::cloud::model::API_ADDRESS.into() },
        );
    }
    if !desired.api_address {
        match &observed.load_balancer {
        None => {
            let mut deps: Vec<K> = lb.subnets.iter().map(|s| K::Subnet(s.to_string())).collect();
            if !lb.internal {
                deps.push(K::Igw);
            }
            push(K::LoadBalancer, Action::Create, format!("{} ({})", lb.name, if lb.internal { "internal" } else { "internet-facing" }),
                vec![field("subnets", None::<String>, Some(lb.subnets.join(",")))], "spec.api.loadBalancer".into(), deps,
                Op::CreateLoadBalancer { name: lb.name.clone(), internal: lb.internal, subnets: lb.subnets.clone() });
        }
        Some(o) if o.internal != lb.internal => push(K::LoadBalancer, Action::Replace, "scheme changes".into(),
            vec![field("scheme", Some(if o.internal { "internal" } else { "internet-facing" }), Some(if lb.internal { "internal" } else { "internet-facing" }))],
            "spec.api.loadBalancer.scheme".into(), vec![],
            Op::Refuse { why: "the API load balancer's scheme cannot change in place; it changes the API endpoint every node joined with".into() }),
        Some(_) => {}
    }
        if observed.target_group.is_none() {
            push(
                K::TargetGroup,
                Action::Create,
                format!("{} TCP {}", lb.name, lb.port),
                vec![],
                "spec.api.port".into(),
                vec![K::Vpc],
                Op::CreateTargetGroup { name: lb.name.clone(), port: lb.port },
            );
        }
        if observed.listener.is_none() {
            push(
                K::Listener,
                Action::Create,
                format!("TCP {}", lb.port),
                vec![],
                "spec.api.port".into(),
                vec![K::LoadBalancer, K::TargetGroup],
                Op::CreateListener { port: lb.port },
            );
        }
    }

    // Launch templates, instances, targets.
    let api_host = if desired.api_address {
        observed.api_address().and_then(|a| a.public_ip.as_deref())
    } else {
        observed.load_balancer.as_ref().map(|l| l.dns_name.as_str())
    };
    let mut needs_rollout = Vec::new();
    let mut cp_launch_keys = Vec::new();
    let mut cp_live: BTreeSet<String> = BTreeSet::new();
    let mut cp_changed = false;
    let desired_groups: BTreeSet<&str> = desired.groups.iter().map(|g| g.name.as_str()).collect();
    for (g, lt) in desired.groups.iter().zip(&desired.launch_templates) {
        let lt_key = K::LaunchTemplate(g.name.to_string());
        let mut lt_deps: Vec<K> = sg_keys.clone();
        lt_deps.push(if desired.api_address { api_key.clone() } else { K::LoadBalancer });
        let observed_lt = observed.template(&g.name);
        let current_version: Option<i64>;
        let mut version_label = String::new();
        match observed_lt {
            None => {
                current_version = None;
                version_label = "1 (new)".into();
                push(
                    lt_key.clone(),
                    Action::Create,
                    format!("{} {} {}", lt.name, lt.data.instance_type, lt.data.image_id),
                    vec![
                        field("imageId", None::<String>, Some(&lt.data.image_id)),
                        field("instanceType", None::<String>, Some(&lt.data.instance_type)),
                    ],
                    format!("spec.instanceGroups[{}]", g.name),
                    lt_deps,
                    Op::CreateLaunchTemplate { group: g.name.clone(), name: lt.name.clone(), data: lt.data.clone() },
                );
            }
            Some(o) => {
                let diffs = match &o.latest {
                    Some(have) => template_changes(&lt.data, have, &sg_names, api_host, &g.name),
                    None => vec![(
                        field("data", None::<String>, Some("(unreadable)")),
                        "launch template has no readable version".into(),
                    )],
                };
                if diffs.is_empty() {
                    current_version = Some(o.latest_version);
                } else {
                    current_version = None;
                    version_label = format!("{} (new)", o.latest_version + 1);
                    let reasons: Vec<String> =
                        diffs.iter().map(|(_, r)| r.clone()).collect::<BTreeSet<_>>().into_iter().collect();
                    push(
                        lt_key.clone(),
                        Action::Update,
                        format!("new version {} of {}", o.latest_version + 1, o.name),
                        diffs.into_iter().map(|(f, _)| f).collect(),
                        reasons.join("; "),
                        lt_deps,
                        Op::CreateLaunchTemplateVersion { group: g.name.clone(), data: lt.data.clone() },
                    );
                }
            }
        }
        if version_label.is_empty() {
            version_label = current_version.map(|v| v.to_string()).unwrap_or_default();
        }
        let live: Vec<&ObservedInstance> = observed.live_instances(&g.name).collect();
        let inst_key = K::Instances(g.name.to_string());
        let want = g.desired as usize;
        let mut terminating = BTreeSet::new();
        if live.len() < want {
            let count = (want - live.len()) as u32;
            let mut deps = vec![lt_key.clone()];
            deps.extend(g.subnets.iter().map(|s| K::Subnet(s.to_string())));
            deps.extend(desired.route_tables.iter().map(|r| K::Routes(r.name.to_string())));
            deps.extend(desired.security_groups.iter().map(|sg| K::Rules(sg.name.clone())));
            if g.role == Role::Node {
                deps.extend(
                    desired
                        .groups
                        .iter()
                        .filter(|x| x.role == Role::ControlPlane)
                        .map(|x| K::Instances(x.name.to_string())),
                );
            } else {
                cp_launch_keys.push(inst_key.clone());
                cp_changed = true;
            }
            push(
                inst_key.clone(),
                Action::Create,
                format!("launch {count} ({} → {})", live.len(), want),
                vec![field("instances", Some(live.len()), Some(want))],
                format!("spec.instanceGroups[{}].desired", g.name),
                deps,
                Op::LaunchInstances { group: g.name.clone(), role: g.role, count, subnets: g.subnets.clone() },
            );
        } else if live.len() > want {
            let excess = pick_excess(&live, live.len() - want, current_version);
            let ids: Vec<String> = excess.iter().map(|i| i.id.clone()).collect();
            terminating.extend(ids.iter().cloned());
            if g.role == Role::ControlPlane {
                cp_changed = true;
            }
            push(
                inst_key.clone(),
                Action::Delete,
                format!("terminate {} ({} → {})", ids.len(), live.len(), want),
                ids.iter().map(|id| field("instance", Some(id), None::<String>)).collect(),
                format!("spec.instanceGroups[{}].desired", g.name),
                vec![],
                Op::TerminateInstances { group: g.name.clone(), ids, wait: false },
            );
        }
        if g.role == Role::ControlPlane {
            cp_live.extend(live.iter().filter(|i| !terminating.contains(&i.id)).map(|i| i.id.clone()));
        }
        let outdated: Vec<String> = live
            .iter()
            .filter(|i| {
                !terminating.contains(&i.id)
                    && (current_version.is_none() || i.launch_template_version != current_version)
            })
            .map(|i| i.id.clone())
            .collect();
        if !outdated.is_empty() {
            needs_rollout.push(RolloutNote {
                group: g.name.clone(),
                instances: outdated,
                current_version: version_label,
                reason: if observed_lt.is_some() && current_version.is_none() {
                    "the launch template changes".into()
                } else {
                    "on an older launch-template version".into()
                },
            });
        }
    }
    if desired.api_address {
        // The address follows the control plane: on a live control-plane
        // machine, or moved to one.
        let on = observed.api_address().and_then(|a| a.instance.clone());
        if cp_changed || on.as_ref().is_none_or(|i| !cp_live.contains(i)) {
            let mut deps = vec![api_key.clone()];
            deps.extend(cp_launch_keys.iter().cloned());
            push(
                K::Targets,
                Action::Update,
                "associate the API address with the control plane".into(),
                vec![field(
                    "instance",
                    on.clone(),
                    Some(cp_live.iter().next().cloned().unwrap_or_else(|| "(known after apply)".to_string())),
                )],
                "spec.api.loadBalancer.type: elastic-ip".into(),
                deps,
                Op::SyncTargets,
            );
        }
    }
    let registered: BTreeSet<String> =
        observed.target_group.as_ref().map(|t| t.targets.iter().cloned().collect()).unwrap_or_default();
    if !desired.api_address && (cp_changed || registered != cp_live) {
        let mut deps = vec![K::TargetGroup];
        deps.extend(cp_launch_keys);
        push(
            K::Targets,
            Action::Update,
            "register the control plane with the API load balancer".into(),
            vec![field(
                "targets",
                Some(registered.into_iter().collect::<Vec<_>>().join(",")),
                Some(if cp_live.is_empty() {
                    "(known after apply)".to_string()
                } else {
                    cp_live.iter().cloned().collect::<Vec<_>>().join(",")
                }),
            )],
            "control-plane instance groups".into(),
            deps,
            Op::SyncTargets,
        );
    }

    // Groups removed from the spec: their machines and template go.
    let mut removed: BTreeSet<String> = observed.launch_templates.iter().map(|t| t.group.clone()).collect();
    removed.extend(observed.instances.iter().filter(|i| i.is_live()).filter_map(|i| i.group.clone()));
    for group in removed.into_iter().filter(|g| !desired_groups.contains(g.as_str())) {
        let live: Vec<String> = observed.live_instances(&group).map(|i| i.id.clone()).collect();
        let inst_key = K::Instances(group.to_string());
        if !live.is_empty() {
            push(
                inst_key.clone(),
                Action::Delete,
                format!("terminate {} (group removed)", live.len()),
                live.iter().map(|id| field("instance", Some(id), None::<String>)).collect(),
                format!("instance group {group} is no longer in the spec"),
                vec![],
                Op::TerminateInstances { group: group.clone(), ids: live, wait: true },
            );
        }
        if let Some(t) = observed.template(&group) {
            push(
                K::LaunchTemplate(group.to_string()),
                Action::Delete,
                t.name.clone(),
                vec![],
                format!("instance group {group} is no longer in the spec"),
                vec![inst_key],
                Op::DeleteLaunchTemplate { group: group.clone(), id: t.id.clone() },
            );
        }
    }

    // Subnets removed from the spec.
    for s in observed.subnets.iter().filter(|s| !desired.subnets.iter().any(|d| d.name == s.name)) {
        let deps: Vec<K> = changes
            .iter()
            .filter(|c| matches!(c.key, K::Instances(_) | K::RouteTable(_) | K::Routes(_)))
            .map(|c| c.key.clone())
            .collect();
        let in_use = observed.instances.iter().any(|i| {
            i.is_live()
                && i.subnet_id.as_deref() == Some(&s.id)
                && !changes.iter().any(|c| matches!(&c.op, Op::TerminateInstances { ids, .. } if ids.contains(&i.id)))
        });
        let op = if in_use {
            Op::Refuse {
                why: format!(
                    "subnet {} still has running instances; move its instance groups to other subnets first",
                    s.name
                ),
            }
        } else {
            Op::DeleteSubnet { id: s.id.clone() }
        };
        changes.push(Change {
            key: K::Subnet(s.name.to_string()),
            action: Action::Delete,
            summary: format!("{} {}", s.zone, s.cidr),
            fields: vec![],
            reason: format!("subnet {} is no longer in the spec", s.name),
            depends_on: deps,
            op,
        });
    }

    order(&mut changes);
    Plan { cluster: desired.cluster.clone(), changes, needs_rollout, aws_calls: BTreeMap::new() }
}

/// Everything observed, deleted in dependency order.
pub fn destroy(cluster: &str, observed: &Observed) -> Plan {
    let mut changes: Vec<Change> = Vec::new();
    fn push(changes: &mut Vec<Change>, key: K, summary: String, depends_on: Vec<K>, op: Op) {
        changes.push(Change {
            key,
            action: Action::Delete,
            summary,
            fields: vec![],
            reason: "destroy".into(),
            depends_on,
            op,
        });
    }
    macro_rules! add {
        ($($arg:expr),* $(,)?) => { push(&mut changes, $($arg),*) };
    }
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in observed.instances.iter().filter(|i| i.is_live()) {
        groups.entry(i.group.clone().unwrap_or_else(|| "(no group)".into())).or_default().push(i.id.clone());
    }
    let inst_keys: Vec<K> = groups.keys().map(|g| K::Instances(g.to_string())).collect();
    for (g, ids) in groups {
        add!(
            K::Instances(g.to_string()),
            format!("terminate {}", ids.len()),
            vec![],
            Op::TerminateInstances { group: g, ids, wait: true }
        );
    }
    for t in &observed.launch_templates {
        add!(
            K::LaunchTemplate(t.group.to_string()),
            t.name.clone(),
            inst_keys.clone(),
            Op::DeleteLaunchTemplate { group: t.group.clone(), id: t.id.clone() }
        );
    }
    if let Some(l) = &observed.listener {
        add!(K::Listener, "API listener".into(), vec![], Op::DeleteListener { arn: l.clone() });
    }
    if let Some(lb) = &observed.load_balancer {
        add!(
            K::LoadBalancer,
            "API load balancer".into(),
            vec![K::Listener],
            Op::DeleteLoadBalancer { arn: lb.arn.clone() }
        );
    }
    if let Some(tg) = &observed.target_group {
        add!(
            K::TargetGroup,
            "API target group".into(),
            vec![K::Listener, K::LoadBalancer],
            Op::DeleteTargetGroup { arn: tg.arn.clone() }
        );
    }
    let nat_keys: Vec<K> = observed.nat_gateways.iter().map(|n| K::Nat(n.zone.to_string())).collect();
    for n in &observed.nat_gateways {
        add!(K::Nat(n.zone.to_string()), n.id.clone(), inst_keys.clone(), Op::DeleteNatGateway { id: n.id.clone() });
    }
    // After the NAT gateways and the machines (the API address is on one).
    let mut eip_deps = nat_keys.clone();
    eip_deps.extend(inst_keys.iter().cloned());
    for a in &observed.addresses {
        add!(
            K::Eip(a.zone.to_string()),
            a.allocation_id.clone(),
            eip_deps.clone(),
            Op::ReleaseAddress { allocation_id: a.allocation_id.clone() }
        );
    }
    for r in &observed.route_tables {
        add!(
            K::RouteTable(r.name.to_string()),
            r.id.clone(),
            nat_keys.clone(),
            Op::DeleteRouteTable {
                id: r.id.clone(),
                associations: r.associations.iter().map(|(a, _)| a.clone()).collect()
            }
        );
    }
    let rt_keys: Vec<K> = observed.route_tables.iter().map(|r| K::RouteTable(r.name.to_string())).collect();
    let eip_keys: Vec<K> = observed.addresses.iter().map(|a| K::Eip(a.zone.to_string())).collect();
    if let Some(g) = &observed.internet_gateway {
        let mut deps = nat_keys.clone();
        deps.extend(eip_keys.clone());
        deps.push(K::LoadBalancer);
        add!(K::Igw, g.id.clone(), deps, Op::DeleteInternetGateway { id: g.id.clone(), vpc: g.attached_vpc.clone() });
    }
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
            add!(
                K::Rules(s.name.to_string()),
                "revoke all rules".into(),
                vec![],
                Op::SyncSecurityGroupRules { name: s.name.clone(), add: vec![], remove }
            );
        }
    }
    for s in &observed.security_groups {
        let mut deps = inst_keys.clone();
        deps.extend(sg_rule_keys.iter().cloned());
        deps.push(K::LoadBalancer);
        deps.extend(observed.launch_templates.iter().map(|t| K::LaunchTemplate(t.group.to_string())));
        add!(K::SecurityGroup(s.name.to_string()), s.id.clone(), deps, Op::DeleteSecurityGroup { id: s.id.clone() });
    }
    for s in &observed.subnets {
        let mut deps = inst_keys.clone();
        deps.extend(nat_keys.iter().cloned());
        deps.extend(rt_keys.iter().cloned());
        deps.push(K::LoadBalancer);
        add!(
            K::Subnet(s.name.to_string()),
            format!("{} {}", s.zone, s.cidr),
            deps,
            Op::DeleteSubnet { id: s.id.clone() }
        );
    }
    if let Some(v) = &observed.vpc {
        let deps: Vec<K> = changes.iter().map(|c: &Change| c.key.clone()).collect();
        add!(K::Vpc, v.cidr.clone(), deps, Op::DeleteVpc { id: v.id.clone() });
    }
    let keys: BTreeSet<K> = changes.iter().map(|c| c.key.clone()).collect();
    for c in &mut changes {
        c.depends_on.retain(|d| keys.contains(d));
    }
    order(&mut changes);
    Plan { cluster: cluster.to_string(), changes, needs_rollout: vec![], aws_calls: BTreeMap::new() }
}

/// Topological order (stable: keeps the given order among independent
/// changes); dependencies on keys not in the plan are dropped.
fn order(changes: &mut Vec<Change>) {
    let keys: BTreeSet<K> = changes.iter().map(|c| c.key.clone()).collect();
    for c in changes.iter_mut() {
        c.depends_on.retain(|d| keys.contains(d) && d != &c.key);
        c.depends_on.sort();
        c.depends_on.dedup();
    }
    let mut done: BTreeSet<K> = BTreeSet::new();
    let mut out = Vec::with_capacity(changes.len());
    let mut rest = std::mem::take(changes);
    while !rest.is_empty() {
        let before = rest.len();
        let (ready, blocked): (Vec<Change>, Vec<Change>) =
            rest.into_iter().partition(|c| c.depends_on.iter().all(|d| done.contains(d)));
        for c in &ready {
            done.insert(c.key.clone());
        }
        out.extend(ready);
        rest = blocked;
        if rest.len() == before {
            // A cycle would be a bug in the planner; keep going rather than lose changes.
            out.append(&mut rest);
        }
    }
    *changes = out;
}
