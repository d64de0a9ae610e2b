//! The planner, pure: desired model vs observation → changes. Snapshots of
//! the rendered plan, and table-style checks of what each situation plans.

use std::collections::BTreeMap;
use std::path::Path;

use pinfleet::cloud::model::{self, Desired, RouteTarget, Source};
use pinfleet::cloud::observed::*;
use pinfleet::plan::{self, show, Action, Op};
use pinfleet::spec::{self, LoadOptions};

#[path = "support/model.rs"]
mod fixture;

fn desired_with(edit: impl Fn(&mut pinfleet::spec::Cluster)) -> Desired {
    fixture::desired(edit, |g| {
        format!("#cloud-config\n# {} {}\nendpoint: {}:6443\n", g.name, g.machine_type, plan::API_HOST_PLACEHOLDER)
    })
}

/// What AWS would hold after applying `d` perfectly.
fn applied(d: &Desired) -> Observed {
    let sg_id = |n: &str| format!("sg-{n}");
    let subnet_id = |n: &str| format!("subnet-{n}");
    let lb_dns = "minimal-api-1.elb.example".to_string();
    let mut o =
        Observed { vpc: Some(ObservedVpc { id: "vpc-1".into(), cidr: d.vpc_cidr.clone() }), ..Default::default() };
    o.subnets = d
        .subnets
        .iter()
        .map(|s| ObservedSubnet {
            id: subnet_id(&s.name),
            name: s.name.clone(),
            zone: s.zone.clone(),
            cidr: s.cidr.clone(),
        })
        .collect();
    if d.internet_gateway {
        o.internet_gateway = Some(ObservedIgw { id: "igw-1".into(), attached_vpc: Some("vpc-1".into()) });
    }
    for n in &d.nat_gateways {
        o.addresses.push(ObservedAddress {
            allocation_id: format!("eipalloc-{}", n.zone),
            zone: n.zone.clone(),
            public_ip: None,
            instance: None,
        });
        o.nat_gateways.push(ObservedNat {
            id: format!("nat-{}", n.zone),
            zone: n.zone.clone(),
            subnet_id: subnet_id(&n.subnet),
            state: "available".into(),
        });
    }
    o.route_tables = d
        .route_tables
        .iter()
        .map(|r| ObservedRouteTable {
            id: format!("rtb-{}", r.name),
            name: r.name.clone(),
            default_route: r.default_route.as_ref().map(|t| match t {
                RouteTarget::InternetGateway => "igw-1".to_string(),
                RouteTarget::Nat { zone } => format!("nat-{zone}"),
            }),
            associations: r.subnets.iter().map(|s| (format!("rtbassoc-{s}"), subnet_id(s))).collect(),
        })
        .collect();
    o.security_groups = d
        .security_groups
        .iter()
        .map(|g| ObservedSecurityGroup {
            id: sg_id(&g.name),
            name: g.name.clone(),
            ingress: g
                .ingress
                .iter()
                .map(|r| ObservedRule {
                    protocol: r.protocol.clone(),
                    from_port: r.from_port,
                    to_port: r.to_port,
                    source: match &r.source {
                        Source::Cidr(c) => ObservedSource::Cidr(c.clone()),
                        Source::Group(n) => ObservedSource::GroupId(sg_id(n)),
                    },
                })
                .collect(),
        })
        .collect();
    o.load_balancer = Some(ObservedLoadBalancer {
        arn: "arn:lb".into(),
        dns_name: lb_dns.clone(),
        internal: d.load_balancer.internal,
        subnet_ids: vec![],
    });
    o.target_group = Some(ObservedTargetGroup { arn: "arn:tg".into(), port: 6443, targets: vec![] });
    o.listener = Some("arn:listener".into());
    let mut n = 0;
    for (g, lt) in d.groups.iter().zip(&d.launch_templates) {
        let data = &lt.data;
        o.launch_templates.push(ObservedLaunchTemplate {
            id: format!("lt-{}", g.name),
            name: lt.name.clone(),
            group: g.name.clone(),
            latest_version: 1,
            scaled_size: None,
            latest: Some(ObservedTemplateData {
                image_id: data.image_id.clone(),
                instance_type: data.instance_type.clone(),
                root_device: data.root_device.clone(),
                root_volume_gib: data.root_volume_gib,
                root_volume_type: data.root_volume_type.clone(),
                encrypted: data.encrypted,
                instance_profile: data.instance_profile.clone(),
                key_name: data.key_name.clone(),
                security_group_ids: vec![sg_id(&data.security_group)],
                imds_tokens_required: true,
                user_data: plan::with_api_host(&data.user_data, &lb_dns),
                tags: data.tags.clone(),
                capacity_reservation: data.capacity_reservation.clone(),
            }),
        });
        for _ in 0..g.desired {
            n += 1;
            let id = format!("i-{n:04}");
            if g.role == spec::Role::ControlPlane {
                o.target_group.as_mut().unwrap().targets.push(id.clone());
            }
            o.instances.push(ObservedInstance {
                id,
                cluster: Some(d.cluster.clone()),
                group: Some(g.name.clone()),
                owner: Some(d.owner.clone()),
                state: "running".into(),
                image_id: data.image_id.clone(),
                instance_type: data.instance_type.clone(),
                subnet_id: Some(subnet_id(&g.subnets[0])),
                zone: None,
                vpc_id: Some("vpc-1".into()),
                private_ip: None,
                launch_template_version: Some(1),
                revision: Some(1),
                launch_time: Some(n),
                kubernetes_version: None,
                spot: false,
                etcd_manager: false,
            });
        }
    }
    o.target_group.as_mut().unwrap().targets.sort();
    for r in &d.iam {
        o.iam_roles.push(ObservedRole { key: r.key.clone(), name: r.name.clone(), policy: Some(r.policy.clone()) });
        o.instance_profiles.push(ObservedProfile {
            key: r.key.clone(),
            name: r.name.clone(),
            roles: vec![r.name.clone()],
        });
    }
    o
}

#[test]
fn a_new_cluster_plans_everything_in_dependency_order() {
    let d = desired_with(|_| {});
    let p = plan::diff(&d, &Observed::default());
    insta::assert_snapshot!("new_cluster", show::text(&p, false));
    let pos = |k: &str| p.changes.iter().position(|c| c.key == k).unwrap_or_else(|| panic!("no {k}"));
    assert!(pos("vpc") < pos("subnet/private-a"));
    assert!(pos("lb") < pos("lt/nodes"), "user-data needs the load balancer's name");
    assert!(pos("instances/control-plane") < pos("instances/nodes"), "the control plane starts first");
    assert!(pos("instances/control-plane") < pos("targets"));
    for c in &p.changes {
        for dep in &c.depends_on {
            assert!(pos(&dep.to_string()) < pos(&c.key.to_string()), "{} runs before its dependency {dep}", c.key);
        }
    }
    assert!(p.changes.iter().all(|c| c.action == Action::Create || c.key == "targets"));
}

#[test]
fn an_applied_cluster_plans_nothing() {
    let d = desired_with(|_| {});
    let p = plan::diff(&d, &applied(&d));
    assert!(p.is_empty(), "{}", show::text(&p, false));
    assert!(p.needs_rollout.is_empty());
}

#[test]
fn a_machine_type_change_is_one_template_version_and_a_rollout_note() {
    let before = desired_with(|_| {});
    let after = desired_with(|c| c.spec.instance_groups[1].machine_type = "m6i.2xlarge".into());
    let p = plan::diff(&after, &applied(&before));
    insta::assert_snapshot!("machine_type_change", show::text(&p, false));
    assert_eq!(p.changes.len(), 1);
    assert!(matches!(p.changes[0].op.op(), Some(Op::CreateLaunchTemplateVersion { .. })));
    assert_eq!(p.needs_rollout.len(), 1);
    assert_eq!(p.needs_rollout[0].instances.len(), 3);
    assert_eq!(p.needs_rollout[0].current_version, "2 (new)");
}

/// A group targeting an On-Demand Capacity Reservation: its launch
/// template carries the reservation (shown in the plan), and a change of
/// reservation is a new template version, because of `capacity.reservation`.
#[test]
fn a_capacity_reservation_is_in_the_launch_template_and_its_change_is_a_new_version() {
    let reserved = |id: &'static str| {
        move |c: &mut pinfleet::spec::Cluster| {
            c.spec.instance_groups[1].capacity =
                Some(serde_json::from_value(serde_json::json!({"reservation": {"id": id}})).unwrap());
        }
    };
    let d = desired_with(reserved("cr-0123456789abcdef0"));
    let p = plan::diff(&d, &Observed::default());
    let text = show::text(&p, false);
    let lt = text.lines().skip_while(|l| !l.contains("+ lt/nodes")).take(5).collect::<Vec<_>>().join("\n");
    insta::assert_snapshot!("reservation_new", lt);
    assert!(plan::diff(&d, &applied(&d)).is_empty(), "read back as written: no change");
    let after = desired_with(reserved("cr-0fedcba9876543210"));
    let p = plan::diff(&after, &applied(&d));
    insta::assert_snapshot!("reservation_change", show::text(&p, false));
    assert!(matches!(p.changes[0].op.op(), Some(Op::CreateLaunchTemplateVersion { .. })));
}

#[test]
fn scaling_down_terminates_outdated_then_oldest() {
    let d = desired_with(|_| {});
    let mut o = applied(&d);
    // i-0003 runs an old template version: it goes first, then the oldest.
    o.instances.iter_mut().find(|i| i.id == "i-0003").unwrap().launch_template_version = Some(0);
    let smaller = desired_with(|c| c.spec.instance_groups[1].desired = Some(2));
    let p = plan::diff(&smaller, &o);
    assert_eq!(p.changes.len(), 1);
    match p.changes[0].op.op().unwrap() {
        Op::TerminateInstances { ids, .. } => assert_eq!(ids, &["i-0003"]),
        other => panic!("{other:?}"),
    }
    let smallest = desired_with(|c| {
        c.spec.instance_groups[1].min_size = 0;
        c.spec.instance_groups[1].desired = Some(1);
    });
    match plan::diff(&smallest, &o).changes[0].op.op().unwrap() {
        Op::TerminateInstances { ids, .. } => assert_eq!(ids, &["i-0003", "i-0002"]),
        other => panic!("{other:?}"),
    }
}

/// A control-plane machine carries an etcd member, which apply cannot
/// remove: a surplus left by a roll killed mid-way (an outdated machine
/// beside its replacement) is left to the roll, and a smaller control plane
/// is refused rather than terminated.
#[test]
fn a_control_plane_is_never_shrunk_by_terminating_machines() {
    let d = desired_with(|_| {});
    let cp = d.groups.iter().find(|g| g.role == pinfleet::spec::Role::ControlPlane).unwrap().name.clone();
    let mut o = applied(&d);
    let old = o.instances.iter().find(|i| i.group.as_deref() == Some(cp.as_str())).unwrap().clone();
    o.instances.iter_mut().find(|i| i.id == old.id).unwrap().launch_template_version = Some(0);
    let mut replacement = old.clone();
    replacement.id = "i-0100".into();
    replacement.launch_template_version = Some(1);
    replacement.launch_time = Some(100);
    o.instances.push(replacement);
    let p = plan::diff(&d, &o);
    assert!(
        p.changes.iter().all(|c| !matches!(c.op.op(), Some(Op::TerminateInstances { .. }))),
        "{}",
        show::text(&p, false)
    );
    let note = p.needs_rollout.iter().find(|n| n.group == cp).expect("the outdated machine is listed for the roll");
    assert_eq!(note.instances, [old.id.clone()]);
    // Two current control-plane machines where one is wanted: refused, with the reason.
    o.instances.iter_mut().find(|i| i.id == old.id).unwrap().launch_template_version = Some(1);
    let p = plan::diff(&d, &o);
    let refused = p.refusals();
    assert_eq!(refused.len(), 1, "{}", show::text(&p, false));
    assert!(matches!(&refused[0].op, plan::Step::Refuse { why } if why.contains("etcd member must be removed first")));
}

#[test]
fn allowed_cidrs_change_only_the_rules() {
    let before = desired_with(|_| {});
    let after = desired_with(|c| c.spec.api.allowed_cidrs = vec!["10.0.0.0/8".parse().unwrap()]);
    let p = plan::diff(&after, &applied(&before));
    let keys: Vec<String> = p.changes.iter().map(|c| c.key.to_string()).collect();
    assert_eq!(keys, ["sg/control-plane/rules"]);
    match p.changes[0].op.op().unwrap() {
        Op::SyncSecurityGroupRules { add, remove, .. } => {
            assert_eq!(add.len(), 1);
            assert_eq!(remove.len(), 1);
            assert_eq!(remove[0].source, ObservedSource::Cidr("0.0.0.0/0".into()));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn immutable_network_changes_are_refused_not_attempted() {
    let before = desired_with(|_| {});
    let after = desired_with(|c| c.spec.network.subnets[0].cidr = "10.0.32.0/20".parse().unwrap());
    let p = plan::diff(&after, &applied(&before));
    assert_eq!(p.refusals().len(), 1);
    assert_eq!(p.refusals()[0].key, "subnet/private-a");
    assert_eq!(p.refusals()[0].action, Action::Replace);
}

#[test]
fn destroy_deletes_in_reverse_dependency_order() {
    let d = desired_with(|_| {});
    let p = plan::destroy("minimal", &applied(&d));
    insta::assert_snapshot!("destroy", show::text(&p, false));
    let pos = |k: &str| p.changes.iter().position(|c| c.key == k).unwrap();
    assert_eq!(p.changes.last().unwrap().key, "vpc");
    assert!(pos("instances/nodes") < pos("subnet/private-a"));
    assert!(pos("sg/nodes/rules") < pos("sg/control-plane"));
    assert!(pos("nat/us-east-1a") < pos("igw"));
    assert!(pos("listener") < pos("lb") && pos("lb") < pos("tg"));
    let tags: BTreeMap<_, _> = model::base_tags(
        &spec::load_cluster(Path::new("tests/fixtures/valid/minimal.yaml"), &LoadOptions::default()).unwrap().cluster,
    );
    assert_eq!(tags.get("pinfleet.dev/managed-by").map(String::as_str), Some("pinfleet"));
}
