//! Which accounts a fleet's clusters may live in: the admins' list in
//! `fleet.yaml` (`accounts:`), deny by default once there is one — a
//! cluster file naming an account not on it, or a team the account does not
//! take, is refused at its line before any command acts on it. Pure: the
//! fleet's spec and the loaded clusters in, located diagnostics out.

use super::spec::FleetSpec;
use crate::spec::{Diagnostic, Loaded};

/// Every cluster that may not live where its file says.
pub fn check(spec: &FleetSpec, loaded: &[Loaded]) -> Vec<Diagnostic> {
    let Some(allowed) = &spec.accounts else { return Vec::new() };
    let mut out = Vec::new();
    for l in loaded {
        let c = &l.cluster;
        let at = |path: &str, message: String| Diagnostic { loc: l.tree.locate(path), path: path.into(), message };
        let Some(account) = &c.spec.cloud.account else {
            out.push(at(
                "spec.cloud",
                format!(
                    "cluster {} names no account, and fleet.yaml allows only listed ones ({}): add spec.cloud.account",
                    c.metadata.name,
                    listed(allowed)
                ),
            ));
            continue;
        };
        match allowed.iter().find(|a| a.id == account.id) {
            None => out.push(at(
                "spec.cloud.account.id",
                format!(
                    "cluster {}: account {} is not on fleet.yaml's accounts ({})",
                    c.metadata.name,
                    account.id,
                    listed(allowed)
                ),
            )),
            Some(a) => {
                if let Some(teams) = &a.teams {
                    if !teams.contains(&c.spec.owner) {
                        out.push(at(
                            "spec.owner",
                            format!(
                                "cluster {}: team {} may not have clusters in account {}{} (its teams: {})",
                                c.metadata.name,
                                c.spec.owner,
                                a.id,
                                a.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default(),
                                if teams.is_empty() { "none".to_string() } else { teams.join(", ") }
                            ),
                        ));
                    }
                }
            }
        }
    }
    out
}

fn listed(allowed: &[super::spec::AllowedAccount]) -> String {
    if allowed.is_empty() {
        return "none".into();
    }
    allowed
        .iter()
        .map(|a| match &a.name {
            Some(n) => format!("{} {n}", a.id),
            None => a.id.clone(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
