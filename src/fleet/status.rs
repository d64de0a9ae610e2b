//! Where a fleet rollout stands, as the view every screen draws
//! ([`crate::views::fleet::FleetStatusView`]): the rollout's record, the
//! fleet lock, each stage and cluster with why it is not moving, and a
//! rolling cluster's groups from its roll progress. `fleet rollout status`
//! prints it; the console shows it on the fleet page.

use anyhow::Result;
use chrono::Utc;

use crate::views::fleet::{FleetClusterRow, FleetGroupRow, FleetStageRow, FleetStatusView};

/// A rolling cluster's groups from its roll progress record: done, rolling
/// (replaced of outdated), or waiting for the group before it (control
/// planes first, one group at a time).
pub fn group_rows(
    cluster: &crate::spec::Cluster,
    progress: Option<&crate::rollout::progress::RollProgress>,
) -> Vec<FleetGroupRow> {
    use crate::rollout::progress::GroupState;
    let mut order: Vec<&crate::spec::InstanceGroup> = cluster.spec.instance_groups.iter().collect();
    order.sort_by_key(|g| g.role != crate::spec::Role::ControlPlane);
    let mut before: Option<&str> = None;
    let mut rows = Vec::new();
    for g in order {
        let p = progress.and_then(|p| p.groups.get(&g.name));
        let (state, why) = match p {
            Some(p) if p.status == GroupState::Done => (format!("done ({} replaced)", p.replaced), String::new()),
            Some(p) => (format!("rolling ({} of {} replaced)", p.replaced, p.outdated), String::new()),
            None => (
                "waiting".to_string(),
                match before {
                    Some(b) => format!("groups roll one at a time (control planes first): after {b}"),
                    None => "the roll is starting (applying new launch-template versions)".to_string(),
                },
            ),
        };
        rows.push(FleetGroupRow { group: g.name.clone(), state, why });
        before = Some(&g.name);
    }
    rows
}
/// Each group row the capacity ledgers hold back gets the reason.
pub fn with_capacity(
    rows: &mut [FleetGroupRow],
    cluster: &crate::spec::Cluster,
    ledgers: &[crate::capacity::Ledger],
    now: chrono::DateTime<Utc>,
) {
    for row in rows {
        let Some(g) = cluster.spec.instance_groups.iter().find(|g| g.name == row.group) else { continue };
        if let Some((n, of, why)) = g.capacity_held(&cluster.metadata.name, &cluster.spec, ledgers, now) {
            let held = format!("{n} of {of} offerings out; {why}");
            row.why = if row.why.is_empty() { held } else { format!("{}; {held}", row.why) };
        }
    }
}

impl FleetStatusView {
    pub fn new(
        r: &crate::fleet::rollout::FleetRollout,
        windows: &dyn crate::fleet::rollout::Windows,
        approved: &std::collections::BTreeSet<String>,
        lock: Option<&crate::state::lock::LockInfo>,
        mut groups: std::collections::BTreeMap<String, Vec<FleetGroupRow>>,
        cluster_locks: &std::collections::BTreeMap<String, crate::state::lock::LockInfo>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Self {
        let holder = |l: &crate::state::lock::LockInfo| {
            format!(
                "{} on {} (pid {}, `{}`) since {}",
                l.holder,
                l.host,
                l.pid,
                l.command,
                l.acquired_at.format("%Y-%m-%d %H:%M:%S UTC")
            )
        };
        let held = |l: &crate::state::lock::LockInfo| format!("lock held by {}", holder(l));
        use crate::fleet::rollout::ClusterState;
        use crate::fleet::rollout::RolloutState;
        let halted = matches!(r.state, RolloutState::Halted(_));
        let d = match r.state {
            RolloutState::Running | RolloutState::Halted(_) => crate::fleet::rollout::decide(r, windows, approved, now),
            _ => Default::default(),
        };
        let stages = r
            .stages
            .iter()
            .map(|s| {
                let state = if let Some(t) = s.passed_at {
                    format!("passed {}", t.format("%Y-%m-%d %H:%M UTC"))
                } else if halted {
                    "halted".to_string()
                } else if let Some(h) = &s.held {
                    format!("gate inconclusive ({h}); approve {}", crate::fleet::rollout::gate_approval(&s.name))
                } else if let Some(until) = s.soak_until() {
                    if until > now {
                        format!(
                            "soaking, {} left",
                            humantime::format_duration(std::time::Duration::from_secs(
                                (until - now).num_seconds().max(0) as u64
                            ))
                        )
                    } else {
                        "soaked; its gate is next".to_string()
                    }
                } else if s.approval && !approved.contains(&s.name) {
                    "needs approval".to_string()
                } else if s.clusters.iter().any(|c| c.state != ClusterState::Pending) {
                    "rolling".to_string()
                } else {
                    "waiting".to_string()
                };
                let failed = s.failed().len();
                let state =
                    if failed > 0 { format!("{state}; {failed} failed (budget {})", s.budget()) } else { state };
                FleetStageRow {
                    name: s.name.clone(),
                    state,
                    clusters: s
                        .clusters
                        .iter()
                        .map(|c| FleetClusterRow {
                            cluster: c.name.clone(),
                            state: c.state.to_string(),
                            from: if c.from.images.is_empty() && c.from.kubernetes_version.is_none() {
                                "-".into()
                            } else {
                                c.from.summary()
                            },
                            to: c.to.over(&c.from).summary(),
                            why: match (&c.state, d.why.get(&c.name), cluster_locks.get(&c.name)) {
                                (ClusterState::Failed(e), _, _) => match &c.runs {
                                    Some(runs) => {
                                        format!("{}; its machines run {runs}", crate::fleet::rollout::one_line(e))
                                    }
                                    None => crate::fleet::rollout::one_line(e),
                                },
                                (ClusterState::RevertFailed(e), _, _) => e.clone(),
                                (ClusterState::Pending, Some(w), Some(l)) => {
                                    format!("{w}; and its lock is held by {}", holder(l))
                                }
                                (ClusterState::Pending, None, Some(l)) => held(l),
                                (_, Some(w), _) => w.to_string(),
                                _ => String::new(),
                            },
                            groups: groups.remove(&c.name).unwrap_or_default(),
                        })
                        .collect(),
                }
            })
            .collect();
        FleetStatusView {
            number: r.number,
            target: r.target.to_string(),
            state: r.state.to_string(),
            by: r.by.clone(),
            created_at: r.created_at,
            lock: lock.map(|l| {
                if crate::state::lock::holder_running(l) {
                    holder(l)
                } else {
                    format!("{} — that process is gone from this host; the next apply takes the lock over", holder(l))
                }
            }),
            stages,
        }
    }
}
/// The latest rollout of the fleet in `folder` (None: none was started), read
/// from its state store and each rolling cluster's records (reads only).
pub async fn read(folder: &super::Folder, target: crate::cloud::aws::Target) -> Result<Option<FleetStatusView>> {
    let (book, _) = super::aws::open_book(folder, target, false).await?;
    let Some(r) = book.latest().await? else { return Ok(None) };
    // Each cluster's records are read as its own account (its role), as
    // the rollout writes them.
    let names: Vec<String> = r.clusters().map(|(_, c)| c.name.clone()).collect();
    let aws = super::aws::connections(folder, &names, target).await?;
    let approved = book.approvals(r.number).await?;
    let lock = book.store.get_json::<crate::state::lock::LockInfo>(crate::state::lock::LOCK_KEY).await?;
    let windows = (&folder.spec, &folder.members[..]);
    let mut groups: std::collections::BTreeMap<String, Vec<FleetGroupRow>> =
        super::aws::rolling_progress(folder, &r, &aws)
            .await?
            .into_iter()
            .filter_map(|(name, progress)| {
                let l = folder.loaded.iter().find(|l| l.cluster.metadata.name == name)?;
                Some((name, group_rows(&l.cluster, progress.as_ref())))
            })
            .collect();
    // A rolling cluster's group the capacity ledger holds back says so
    // (each state store's ledgers read once; one that cannot be read adds nothing).
    let mut ledgers: std::collections::BTreeMap<String, Vec<crate::capacity::Ledger>> = Default::default();
    for (name, rows) in groups.iter_mut() {
        let Some(l) = folder.loaded.iter().find(|l| &l.cluster.metadata.name == name) else { continue };
        let url = &l.cluster.spec.state_store;
        let Some(Ok(aws)) = aws.get(name) else { continue };
        if !ledgers.contains_key(url) {
            let read = crate::state::capacity::all(url, Some(aws)).await.unwrap_or_default();
            ledgers.insert(url.clone(), read);
        }
        with_capacity(rows, &l.cluster, &ledgers[url], Utc::now());
    }
    let locks = super::aws::pending_locks(folder, &r, &aws).await?;
    Ok(Some(FleetStatusView::new(&r, &windows, &approved, lock.as_ref(), groups, &locks, Utc::now())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolling_group_the_ledger_holds_back_says_why() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clusters/dev-local.yaml");
        let mut cluster = crate::spec::load_cluster(&path, &Default::default()).unwrap().cluster;
        let g = cluster.spec.instance_groups.iter_mut().find(|g| g.name == "general").unwrap();
        g.capacity = Some(serde_json::from_value(serde_json::json!({"types": ["m6a.large"]})).unwrap());
        let now = chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let zone = cluster.spec.network.subnets[0].zone.clone();
        let mut ledger = crate::capacity::Ledger::default();
        let o = crate::capacity::Offering {
            market: crate::capacity::Market::OnDemand,
            instance_type: g_type(&cluster),
            zone,
        };
        ledger.mark(&o, "InsufficientInstanceCapacity", "other/general", now);
        let mut rows = group_rows(&cluster, None);
        with_capacity(&mut rows, &cluster, &[ledger], now);
        let general = rows.iter().find(|r| r.group == "general").unwrap();
        assert!(
            general.why.contains("offerings out; blocked on capacity:")
                && general.why.contains("InsufficientInstanceCapacity"),
            "{}",
            general.why
        );
        assert!(rows.iter().filter(|r| r.group != "general").all(|r| !r.why.contains("capacity")));
    }

    fn g_type(c: &crate::spec::Cluster) -> String {
        c.spec.instance_groups.iter().find(|g| g.name == "general").unwrap().machine_type.clone()
    }
}
