//! Launch templates and machines (pure): a template version when its
//! content changes, launches and terminations toward each group's desired
//! count, the API endpoint following the control plane, machines on older
//! versions noted for a roll, and groups that left the spec removed.

use std::collections::{BTreeMap, BTreeSet};

use super::{field, Action, Changes, Op};
use super::{pick_excess, template_changes, RolloutNote};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::{Desired, DesiredGroup, DesiredLaunchTemplate};
use crate::cloud::observed::{Observed, ObservedInstance};
use crate::spec::Role;

/// The API address's resource key.
fn api_key() -> K {
    K::Eip(crate::cloud::model::API_ADDRESS.to_string())
}

/// The control plane as the groups leave it: the launches that change it,
/// its machines that stay.
#[derive(Default)]
struct ControlPlane {
    launch_keys: Vec<K>,
    live: BTreeSet<String>,
    changed: bool,
}

/// Returns the machines that need a roll.
pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) -> Vec<RolloutNote> {
    let sg_names: BTreeMap<String, String> =
        observed.security_groups.iter().map(|s| (s.id.clone(), s.name.clone())).collect();
    let mut needs_rollout = Vec::new();
    let mut cp = ControlPlane::default();
    for (g, lt) in desired.groups.iter().zip(&desired.launch_templates) {
        // A group whose template is refused (a minor version change) goes no further.
        let Some((current_version, version_label)) = template(desired, observed, &sg_names, g, lt, out) else {
            continue;
        };
        let live: Vec<&ObservedInstance> = observed.live_instances(&g.name).collect();
        let terminating = machines(desired, observed, g, &live, current_version, &mut cp, out);
        if g.role == Role::ControlPlane {
            cp.live.extend(live.iter().filter(|i| !terminating.contains(&i.id)).map(|i| i.id.clone()));
        }
        let changes = observed.template(&g.name).is_some() && current_version.is_none();
        needs_rollout.extend(outdated(g, &live, &terminating, current_version, version_label, changes));
    }
    api_endpoint(desired, observed, &cp, out);
    removed_groups(desired, observed, out);
    needs_rollout
}

/// The group's launch template: created, or a new version when its content
/// changes. Its current version (None while a new one is on its way) and
/// the version machines will run, in words; None when the change is refused.
fn template(
    desired: &Desired,
    observed: &Observed,
    sg_names: &BTreeMap<String, String>,
    g: &DesiredGroup,
    lt: &DesiredLaunchTemplate,
    out: &mut Changes,
) -> Option<(Option<i64>, String)> {
    let sg_keys: Vec<K> = desired.security_groups.iter().map(|s| K::SecurityGroup(s.name.to_string())).collect();
    let api_host = if let Some(h) = desired.join_host(observed.adopted.is_some()) {
        Some(h)
    } else if desired.api_address {
        observed.api_address().and_then(|a| a.public_ip.as_deref())
    } else {
        observed.load_balancer.as_ref().map(|l| l.dns_name.as_str())
    };
    let lt_key = K::LaunchTemplate(g.name.to_string());
    let mut lt_deps: Vec<K> = sg_keys.clone();
    lt_deps.push(if desired.api_address { api_key() } else { K::LoadBalancer });
    lt_deps.extend(super::iam::profile_dependency(desired, lt.data.instance_profile.as_deref()));
    let observed_lt = observed.template(&g.name);
    let current_version: Option<i64>;
    let mut version_label = String::new();
    match observed_lt {
        None => {
            current_version = None;
            version_label = "1 (new)".into();
            let mut fields = vec![
                field("imageId", None::<String>, Some(&lt.data.image_id)),
                field("instanceType", None::<String>, Some(&lt.data.instance_type)),
            ];
            if let Some(r) = &lt.data.capacity_reservation {
                fields.push(field("capacityReservationSpecification", None::<String>, Some(r)));
            }
            out.push(
                lt_key.clone(),
                Action::Create,
                format!("{} {} {}", lt.name, lt.data.instance_type, lt.data.image_id),
                fields,
                format!("spec.instanceGroups[{}]", g.name),
                lt_deps,
                Op::CreateLaunchTemplate { group: g.name.clone(), name: lt.name.clone(), data: lt.data.clone() },
            );
        }
        Some(o) => {
            let diffs = match &o.latest {
                Some(have) => template_changes(&lt.data, have, sg_names, api_host, &g.name),
                None => vec![(
                    field("data", None::<String>, Some("(unreadable)")),
                    "launch template has no readable version".into(),
                )],
            };
            let minor = |tags: &BTreeMap<String, String>| {
                tags.get(crate::cloud::tags::KUBERNETES_VERSION)
                    .and_then(|v| crate::spec::validate::parse_kubernetes_version(v))
                    .map(|(_, m, _)| m)
            };
            let running = o.latest.as_ref().and_then(|h| minor(&h.tags));
            let wanted = minor(&lt.data.tags);
            if let (Some(have), Some(want), false) = (running, wanted, desired.version_step) {
                if have != want {
                    out.push(
                        lt_key.clone(),
                        Action::Update,
                        format!("Kubernetes 1.{have} → 1.{want} for {}", lt.name),
                        vec![field("kubernetesVersion", Some(format!("1.{have}")), Some(format!("1.{want}")))],
                        "spec.kubernetesVersion".into(),
                        lt_deps,
                        super::Step::Refuse {
                            why: format!(
                                "group {} runs Kubernetes 1.{have}; a change of minor version is an upgrade: `pinfleet upgrade {}` shows and runs its steps (control plane first, one minor at a time, within the version skew policy)",
                                g.name, desired.cluster
                            ),
                        },
                    );
                    return None;
                }
            }
            if diffs.is_empty() {
                current_version = Some(o.latest_version);
            } else {
                current_version = None;
                version_label = format!("{} (new)", o.latest_version + 1);
                let reasons: Vec<String> =
                    diffs.iter().map(|(_, r)| r.clone()).collect::<BTreeSet<_>>().into_iter().collect();
                out.push(
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
    Some((current_version, version_label))
}

/// Launches or terminations toward the group's size; the machines being
/// terminated.
fn machines(
    desired: &Desired,
    observed: &Observed,
    g: &DesiredGroup,
    live: &[&ObservedInstance],
    current_version: Option<i64>,
    cp: &mut ControlPlane,
    out: &mut Changes,
) -> BTreeSet<String> {
    let lt_key = K::LaunchTemplate(g.name.to_string());
    let observed_lt = observed.template(&g.name);
    let inst_key = K::Instances(g.name.to_string());
    // The autoscaler moves a group between its desired size (a floor) and its maximum.
    let scaled = observed_lt.and_then(|o| o.scaled_size).map(|s| if g.max > 0 { s.min(g.max) } else { s });
    let want = g.desired.max(scaled.unwrap_or(0)) as usize;
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
            cp.launch_keys.push(inst_key.clone());
            cp.changed = true;
        }
        out.push(
            inst_key.clone(),
            Action::Create,
            format!("launch {count} ({} → {})", live.len(), want),
            vec![field("instances", Some(live.len()), Some(want))],
            format!("spec.instanceGroups[{}].desired", g.name),
            deps,
            Op::LaunchInstances { group: g.name.clone(), role: g.role, count, subnets: g.subnets.clone() },
        );
    } else if live.len() > want {
        let excess = pick_excess(live, live.len() - want, current_version);
        let ids: Vec<String> = excess.iter().map(|i| i.id.clone()).collect();
        // A control-plane machine carries an etcd member: terminating it
        // here would leave the member behind (a roll killed mid-way leaves
        // such a surplus; losing that member's vote can cost the quorum).
        let cp_outdated =
            |i: &&ObservedInstance| current_version.is_some() && i.launch_template_version != current_version;
        let step: Option<super::Step> = match g.role {
            // Outdated machines: the roll (`upgrade`) replaces them, member first; listed below.
            Role::ControlPlane if excess.iter().all(cp_outdated) => None,
            Role::ControlPlane => Some(super::Step::Refuse {
                why: "a control plane is not made smaller by terminating machines: each one's etcd member must be removed first, and apply does not reach etcd; remove the members (etcdctl member remove) before lowering desired".into(),
            }),
            // An adopted cluster's machines still on the other tool's
            // launch templates: the roll replaces them with `desired` of
            // pinfleet's; plan changes nothing that exists (listed below).
            Role::Node if observed.adopted.is_some() && excess.iter().all(|i| i.launch_template_version.is_none()) => {
                None
            }
            Role::Node => {
                terminating.extend(ids.iter().cloned());
                Some(Op::TerminateInstances { group: g.name.clone(), ids: ids.clone(), wait: false }.into())
            }
        };
        if let Some(step) = step {
            out.push(
                inst_key.clone(),
                Action::Delete,
                format!("terminate {} ({} → {})", ids.len(), live.len(), want),
                ids.iter().map(|id| field("instance", Some(id), None::<String>)).collect(),
                format!("spec.instanceGroups[{}].desired", g.name),
                vec![],
                step,
            );
        }
    }
    terminating
}

/// The group's machines not on its current template version: a roll's work.
fn outdated(
    g: &DesiredGroup,
    live: &[&ObservedInstance],
    terminating: &BTreeSet<String>,
    current_version: Option<i64>,
    version_label: String,
    template_changes: bool,
) -> Option<RolloutNote> {
    let outdated: Vec<String> = live
        .iter()
        .filter(|i| {
            !terminating.contains(&i.id) && (current_version.is_none() || i.launch_template_version != current_version)
        })
        .map(|i| i.id.clone())
        .collect();
    if outdated.is_empty() {
        return None;
    }
    Some(RolloutNote {
        group: g.name.clone(),
        instances: outdated,
        current_version: version_label,
        reason: if template_changes {
            "the launch template changes".into()
        } else {
            "on an older launch-template version".into()
        },
    })
}

/// The API endpoint follows the control plane: its address on a live
/// control-plane machine, or the load balancer's targets.
fn api_endpoint(desired: &Desired, observed: &Observed, cp: &ControlPlane, out: &mut Changes) {
    if desired.api_address {
        // The address follows the control plane: on a live control-plane
        // machine, or moved to one.
        let on = observed.api_address().and_then(|a| a.instance.clone());
        if cp.changed || on.as_ref().is_none_or(|i| !cp.live.contains(i)) {
            let mut deps = vec![api_key()];
            deps.extend(cp.launch_keys.iter().cloned());
            out.push(
                K::Targets,
                Action::Update,
                "associate the API address with the control plane".into(),
                vec![field(
                    "instance",
                    on.clone(),
                    Some(cp.live.iter().next().cloned().unwrap_or_else(|| "(known after apply)".to_string())),
                )],
                "spec.api.loadBalancer.type: elastic-ip".into(),
                deps,
                Op::SyncTargets,
            );
        }
    }
    let registered: BTreeSet<String> =
        observed.target_group.as_ref().map(|t| t.targets.iter().cloned().collect()).unwrap_or_default();
    if !desired.api_address && (cp.changed || registered != cp.live) {
        let mut deps = vec![K::TargetGroup];
        deps.extend(cp.launch_keys.iter().cloned());
        out.push(
            K::Targets,
            Action::Update,
            "register the control plane with the API load balancer".into(),
            vec![field(
                "targets",
                Some(registered.into_iter().collect::<Vec<_>>().join(",")),
                Some(if cp.live.is_empty() {
                    "(known after apply)".to_string()
                } else {
                    cp.live.iter().cloned().collect::<Vec<_>>().join(",")
                }),
            )],
            "control-plane instance groups".into(),
            deps,
            Op::SyncTargets,
        );
    }
}

/// Groups removed from the spec: their machines and template go.
fn removed_groups(desired: &Desired, observed: &Observed, out: &mut Changes) {
    let desired_groups: BTreeSet<&str> = desired.groups.iter().map(|g| g.name.as_str()).collect();
    let mut removed: BTreeSet<String> = observed.launch_templates.iter().map(|t| t.group.clone()).collect();
    removed.extend(observed.instances.iter().filter(|i| i.is_live()).filter_map(|i| i.group.clone()));
    for group in removed.into_iter().filter(|g| !desired_groups.contains(g.as_str())) {
        let live: Vec<String> = observed.live_instances(&group).map(|i| i.id.clone()).collect();
        let inst_key = K::Instances(group.to_string());
        if !live.is_empty() {
            out.push(
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
            out.push(
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
}
