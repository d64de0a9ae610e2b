//! The IAM edge: observing the cluster's roles and instance profiles (by
//! the names `cloud::iam` gives them) and running the IAM operations of a
//! plan. IAM is global and eventually consistent: a profile just made may
//! not be usable by RunInstances for some seconds (the launch retries).

use aws_sdk_iam::types::Tag;

use super::context::{call, call_ok_if, OpContext, R};
use super::Aws;
use crate::cloud::iam::{self, PATH, POLICY_NAME};
use crate::cloud::key::ResourceKey as K;
use crate::cloud::observed::{ObservedProfile, ObservedRole};
use crate::cloud::ops::Op;
use crate::cloud::tags;
use crate::spec::Role;

/// The cluster's roles and profiles, looked up by name (both machine roles,
/// whether or not the spec still wants them, so destroy finds them too).
/// The reads of both roles run at once.
pub async fn observe(aws: &Aws, cluster: &str) -> anyhow::Result<(Vec<ObservedRole>, Vec<ObservedProfile>)> {
    let found = futures::future::try_join_all(
        [Role::ControlPlane, Role::Node].map(|role| observe_one(aws, iam::role_name(cluster, role), iam::key(role))),
    )
    .await?;
    Ok((found.iter().filter_map(|(r, _)| r.clone()).collect(), found.into_iter().filter_map(|(_, p)| p).collect()))
}

/// One machine role's IAM role (with its inline policy) and instance profile.
async fn observe_one(
    aws: &Aws,
    name: String,
    key: &str,
) -> anyhow::Result<(Option<ObservedRole>, Option<ObservedProfile>)> {
    let role = async {
        match aws.iam.get_role().role_name(&name).send().await {
            Ok(_) => {}
            Err(e) if super::error_code(&e) == Some("NoSuchEntity") => return Ok(None),
            Err(e) => anyhow::bail!("GetRole {name}: {}", super::client::describe_sdk_error(&e)),
        }
        let policy = match aws.iam.get_role_policy().role_name(&name).policy_name(POLICY_NAME).send().await {
            Ok(p) => Some(p.policy_document().to_string()),
            Err(e) if super::error_code(&e) == Some("NoSuchEntity") => None,
            Err(e) => anyhow::bail!("GetRolePolicy {name}: {}", super::client::describe_sdk_error(&e)),
        };
        Ok(Some(ObservedRole { key: key.to_string(), name: name.clone(), policy }))
    };
    let profile = async {
        match aws.iam.get_instance_profile().instance_profile_name(&name).send().await {
            Ok(p) => {
                let held = p.instance_profile().map(|p| p.roles().iter().map(|r| r.role_name().to_string()).collect());
                Ok(Some(ObservedProfile { key: key.to_string(), name: name.clone(), roles: held.unwrap_or_default() }))
            }
            Err(e) if super::error_code(&e) == Some("NoSuchEntity") => Ok(None),
            Err(e) => anyhow::bail!("GetInstanceProfile {name}: {}", super::client::describe_sdk_error(&e)),
        }
    };
    futures::try_join!(role, profile)
}

fn iam_tags(ctx: &OpContext, key: &K) -> Vec<Tag> {
    let mut t = ctx.base_tags.clone();
    t.insert(tags::RESOURCE.into(), key.to_string());
    t.into_iter().filter_map(|(k, v)| Tag::builder().key(k).value(v).build().ok()).collect()
}

pub async fn run(ctx: &OpContext, key: &K, op: &Op) -> R<String> {
    let iam = &ctx.aws.iam;
    match op {
        Op::CreateRole { name, trust, policy } => {
            call_ok_if(
                "CreateRole",
                &["EntityAlreadyExists"],
                iam.create_role()
                    .role_name(name)
                    .path(PATH)
                    .assume_role_policy_document(trust)
                    .description(format!("pinfleet machines of cluster {}", ctx.desired.cluster))
                    .set_tags(Some(iam_tags(ctx, key)))
                    .send()
                    .await,
            )?;
            call(
                "PutRolePolicy",
                iam.put_role_policy().role_name(name).policy_name(POLICY_NAME).policy_document(policy).send().await,
            )?;
            Ok(name.clone())
        }
        Op::PutRolePolicy { name, policy } => {
            call(
                "PutRolePolicy",
                iam.put_role_policy().role_name(name).policy_name(POLICY_NAME).policy_document(policy).send().await,
            )?;
            Ok(name.clone())
        }
        Op::CreateInstanceProfile { name } => {
            call_ok_if(
                "CreateInstanceProfile",
                &["EntityAlreadyExists"],
                iam.create_instance_profile()
                    .instance_profile_name(name)
                    .path(PATH)
                    .set_tags(Some(iam_tags(ctx, key)))
                    .send()
                    .await,
            )?;
            // A profile holds at most one role; adding it twice is LimitExceeded.
            call_ok_if(
                "AddRoleToInstanceProfile",
                &["LimitExceeded", "EntityAlreadyExists"],
                iam.add_role_to_instance_profile().instance_profile_name(name).role_name(name).send().await,
            )?;
            Ok(name.clone())
        }
        Op::DeleteInstanceProfile { name, roles } => {
            for r in roles {
                call_ok_if(
                    "RemoveRoleFromInstanceProfile",
                    &["NoSuchEntity"],
                    iam.remove_role_from_instance_profile().instance_profile_name(name).role_name(r).send().await,
                )?;
            }
            call_ok_if(
                "DeleteInstanceProfile",
                &["NoSuchEntity"],
                iam.delete_instance_profile().instance_profile_name(name).send().await,
            )?;
            Ok(name.clone())
        }
        Op::DeleteRole { name } => {
            call_ok_if(
                "DeleteRolePolicy",
                &["NoSuchEntity"],
                iam.delete_role_policy().role_name(name).policy_name(POLICY_NAME).send().await,
            )?;
            call_ok_if("DeleteRole", &["NoSuchEntity"], iam.delete_role().role_name(name).send().await)?;
            Ok(name.clone())
        }
        other => Err(crate::cloud::ops::OpError::fatal(anyhow::anyhow!("not an IAM operation: {other:?}"))),
    }
}
