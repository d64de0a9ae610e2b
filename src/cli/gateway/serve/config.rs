//! What `pinfleet gateway serve`'s flags configure: the admins' policy
//! (`intake::Policy`), who callers are (`identity::Settings`), and the
//! budget of requests to the host cluster's API.

use std::time::Duration;

use anyhow::{Context as _, Result};

use super::ServeArgs;
use crate::gateway::identity::{OidcSettings, Settings};
use crate::gateway::intake::{Caller, Policy};
use crate::kube::budget::Budget;

impl ServeArgs {
    pub(super) fn api_budget(&self) -> Budget {
        Budget { in_flight: self.api_in_flight, qps: self.api_qps, burst: self.api_burst }
    }

    /// What the admins configure (`intake::Policy`), from the flags.
    pub(super) fn policy(&self) -> Policy {
        Policy {
            allowed_registries: self.allowed_registries.clone(),
            trust: self.trust_policies.iter().cloned().collect(),
            priority_classes: self.priority_classes.clone(),
            domains: crate::gateway::intake::by_team(&self.team_domains),
            ingress_classes: self.ingress_classes.clone(),
            tolerations: crate::gateway::intake::by_team(&self.team_tolerations)
                .into_iter()
                .map(|(t, keys)| (t, keys.concat()))
                .collect(),
            pod_security: crate::gateway::intake::PodSecurity {
                default: self.pod_security_default,
                teams: self.pod_security.iter().cloned().collect(),
                exceptions: self.pod_security_exceptions.iter().fold(Default::default(), |mut m, (t, c)| {
                    m.entry(t.clone()).or_insert_with(std::collections::BTreeSet::new).insert(c.clone());
                    m
                }),
            },
            pods_ready: crate::gateway::gang::Policy {
                timeout: chrono_of(self.pods_ready_timeout),
                backoff_base: chrono_of(self.requeue_backoff_base),
                backoff_max: chrono_of(self.requeue_backoff_max),
                backoff_limit: self.requeue_limit,
            },
            max_open: Some(self.max_open_per_team),
            max_kept_bytes: Some(self.max_kept_mib_per_team.saturating_mul(1 << 20)),
        }
    }

    /// Who callers are, from the flags: OIDC tokens, service-account tokens
    /// (TokenReview), the groups that name teams and admins, and for local
    /// work the anonymous caller on loopback.
    pub(super) fn identity_settings(&self) -> Result<Settings> {
        let anonymous = match &self.anonymous_as {
            Some(a) => {
                let (user, teams) = a.split_once(':').context("--anonymous-as USER:TEAM[,TEAM]")?;
                Some(Caller {
                    user: user.into(),
                    teams: teams.split(',').map(str::to_string).collect(),
                    admin: false,
                    via: "loopback".into(),
                })
            }
            None => None,
        };
        Ok(Settings {
            oidc: self.oidc_issuer.clone().map(|issuer| OidcSettings {
                issuer,
                audience: self.oidc_audience.clone().unwrap_or_default(),
                jwks_url: self.oidc_jwks_url.clone(),
                groups_claim: self.groups_claim.clone(),
                username_claim: self.username_claim.clone(),
            }),
            token_review: !self.no_token_review,
            team_prefix: self.team_prefix.clone(),
            admin_group: self.admin_group.clone(),
            anonymous,
        })
    }
}

/// A flag's duration as the gang policy keeps it (one past chrono's range: the longest).
fn chrono_of(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}
