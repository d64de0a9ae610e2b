//! IAM (pure): each machine role's IAM role, its inline policy and its
//! instance profile, created when missing and the policy replaced when it
//! says something else. Launch templates that name a managed profile wait
//! for it.

use super::{field, Action, Changes, Op};
use crate::cloud::iam::same_policy;
use crate::cloud::key::ResourceKey as K;
use crate::cloud::model::Desired;
use crate::cloud::observed::Observed;

pub(super) fn diff(desired: &Desired, observed: &Observed, out: &mut Changes) {
    for r in &desired.iam {
        let role_key = K::IamRole(r.key.clone());
        let have = observed.iam_roles.iter().find(|o| o.name == r.name);
        match have {
            None => out.push(
                role_key.clone(),
                Action::Create,
                format!("{} (assumable by EC2)", r.name),
                vec![field("policy", None::<String>, Some("(least privilege for the role)"))],
                "machines of this role call AWS (no spec.iam instance profile named)".into(),
                vec![],
                Op::CreateRole { name: r.name.clone(), trust: r.trust.clone(), policy: r.policy.clone() },
            ),
            Some(o) if !o.policy.as_deref().is_some_and(|p| same_policy(p, &r.policy)) => out.push(
                K::RolePolicy(r.key.clone()),
                Action::Update,
                format!("inline policy of {}", r.name),
                vec![field("policy", Some("(differs)"), Some("(least privilege for the role)"))],
                "the role's policy is not the one pinfleet grants".into(),
                vec![role_key.clone()],
                Op::PutRolePolicy { name: r.name.clone(), policy: r.policy.clone() },
            ),
            Some(_) => {}
        }
        let profile = observed.instance_profiles.iter().find(|p| p.name == r.name);
        if !profile.is_some_and(|p| p.roles.contains(&r.name)) {
            out.push(
                K::InstanceProfile(r.key.clone()),
                if profile.is_none() { Action::Create } else { Action::Update },
                format!("{} holding role {}", r.name, r.name),
                vec![field("roles", None::<String>, Some(&r.name))],
                "launch templates name it".into(),
                vec![role_key],
                Op::CreateInstanceProfile { name: r.name.clone() },
            );
        }
    }
}

/// The profile key a launch template waits for, when it names a managed one.
pub(super) fn profile_dependency(desired: &Desired, profile: Option<&str>) -> Option<K> {
    let p = profile?;
    desired.iam.iter().find(|r| r.name == p).map(|r| K::InstanceProfile(r.key.clone()))
}
