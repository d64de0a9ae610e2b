//! The API endpoint (pure): an Elastic IP for the control plane, or the
//! network load balancer with its target group and listener.

use super::{field, Action, Changes, Op, Step};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::observed::Observed;

pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) {
    // The API endpoint: an Elastic IP on the control plane, or the load balancer.
    let lb = &desired.load_balancer;
    let api_key = K::Eip(crate::cloud::model::API_ADDRESS.to_string());
    if desired.api_address && observed.api_address().is_none() {
        out.push(
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
            out.push(K::LoadBalancer, Action::Create, format!("{} ({})", lb.name, if lb.internal { "internal" } else { "internet-facing" }),
                vec![field("subnets", None::<String>, Some(lb.subnets.join(",")))], "spec.api.loadBalancer".into(), deps,
                Op::CreateLoadBalancer { name: lb.name.clone(), internal: lb.internal, subnets: lb.subnets.clone() });
        }
        Some(o) if o.internal != lb.internal => out.push(K::LoadBalancer, Action::Replace, "scheme changes".into(),
            vec![field("scheme", Some(if o.internal { "internal" } else { "internet-facing" }), Some(if lb.internal { "internal" } else { "internet-facing" }))],
            "spec.api.loadBalancer.scheme".into(), vec![],
            Step::Refuse { why: "the API load balancer's scheme cannot change in place; it changes the API endpoint every node joined with".into() }),
        Some(_) => {}
    }
        if observed.target_group.is_none() {
            out.push(
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
            out.push(
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
}
