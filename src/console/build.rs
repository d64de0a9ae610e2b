//! Views from what the gateway and the observer hold (reads only): the
//! fleet and a cluster from member snapshots and the submissions (pure),
//! a team and a workload from the gateway's ledger, queue and records.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::observe::MemberSnapshot;
use crate::gateway::intake::Caller;
use crate::gateway::quota::{tier_name, Amount, TIERS};
use crate::gateway::records::{Phase, Submission};
use crate::gateway::service::Service;
use crate::views::cluster::{ClusterView, PlacedPart};
use crate::views::fleet::{ClusterRow, FleetView, GroupImages};
use crate::views::html::seg;
use crate::views::team::{Queued, TeamView, TierRow, UsagePoint, Why, WorkloadRow};
use crate::views::workload::{Container, Made, Part, Stage, Waiting as WaitingView, WorkloadView};
use crate::views::{Reach, Status, Tone, Viewer};

pub fn viewer(c: &Caller, teams: Vec<String>, csrf: String) -> Viewer {
    Viewer { user: c.user.clone(), teams, via: c.via.clone(), admin: c.admin, csrf }
}

fn phase(s: &Submission) -> Phase {
    s.status.as_ref().map(|st| st.phase).unwrap_or_default()
}

/// A submission's phase as a status, linking to why when it waits or failed.
pub fn phase_status(s: &Submission) -> Status {
    let st = s.status.clone().unwrap_or_default();
    let link = format!("/workloads/{}/{}", seg(&s.spec.team), seg(&s.spec.id));
    let label = format!("{:?}", st.phase);
    let base = match st.phase {
        Phase::Queued => Status::new(Tone::Progress, label).at(format!("{link}#why")),
        Phase::Admitted | Phase::Placed => Status::new(Tone::Progress, label).at(format!("{link}#placement")),
        Phase::Running | Phase::Succeeded => Status::new(Tone::Ok, label).at(format!("{link}#placement")),
        Phase::Failed => Status::new(Tone::Bad, label).at(format!("{link}#placement")),
        Phase::Preempted => Status::new(Tone::Warn, label),
        Phase::Cancelled => Status::new(Tone::Unknown, label),
    };
    match st.message {
        Some(m) if !m.is_empty() => base.because(m),
        _ => base,
    }
}

fn drift_status(m: &MemberSnapshot) -> Status {
    let link = format!("/clusters/{}#e2e", seg(&m.name));
    match (m.drift_since, &m.e2e) {
        (Some(t), _) => Status::new(Tone::Warn, "drifted")
            .because(format!(
                "since {}; `pinfleet diff {}` names each difference and its fix",
                t.format("%Y-%m-%d %H:%M UTC"),
                m.name
            ))
            .at(link),
        (None, Some(_)) => Status::new(Tone::Ok, "in sync").because("at the last end-to-end run").at(link),
        (None, None) => Status::new(Tone::Unknown, "not checked").because("no end-to-end run recorded"),
    }
}

fn e2e_status(m: &MemberSnapshot) -> Status {
    match &m.e2e {
        Some(r) => r.status(&m.name),
        None => Status::new(Tone::Unknown, "none recorded"),
    }
}

fn holds_on(s: &Submission, cluster: &str) -> Option<u32> {
    if !phase(s).holds() {
        return None;
    }
    s.status.as_ref()?.placement.iter().find(|p| p.cluster == cluster && p.replicas > 0).map(|p| p.replicas)
}

/// The fleet page: every member, its figures live or kept from when it last answered.
pub fn fleet(viewer: Viewer, members: &[MemberSnapshot], subs: &[Arc<Submission>], now: DateTime<Utc>) -> FleetView {
    let clusters = members
        .iter()
        .map(|m| {
            let mut groups: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
            for x in &m.machines {
                *groups.entry(x.group.clone()).or_default().entry(x.image.clone()).or_default() += 1;
            }
            ClusterRow {
                name: m.name.clone(),
                labels: m.labels.clone(),
                reach: m.reach.clone(),
                version: m.version.clone(),
                groups: groups.into_iter().map(|(group, images)| GroupImages { group, images }).collect(),
                nodes: m.machines.len(),
                ready: m.machines.iter().filter(|x| x.ready).count(),
                e2e: e2e_status(m),
                drift: drift_status(m),
                workloads: subs.iter().filter(|s| holds_on(s, &m.name).is_some()).count(),
            }
        })
        .collect();
    FleetView { viewer, at: now, clusters, rollout: None, rollout_error: None }
}

/// One cluster's page; the workloads shown are those of teams the viewer may see.
pub fn cluster(
    viewer: Viewer,
    m: &MemberSnapshot,
    subs: &[Arc<Submission>],
    may_see: impl Fn(&str) -> bool,
    now: DateTime<Utc>,
) -> ClusterView {
    let mut workloads: Vec<PlacedPart> = subs
        .iter()
        .filter(|s| may_see(&s.spec.team))
        .filter_map(|s| {
            let replicas = holds_on(s, &m.name)?;
            let part = s.status.as_ref()?.placement.iter().find(|p| p.cluster == m.name)?;
            Some(PlacedPart {
                team: s.spec.team.clone(),
                id: s.spec.id.clone(),
                workload: s.spec.workload_name.clone(),
                replicas,
                state: part.state.clone().unwrap_or_else(|| "not reported yet".into()),
            })
        })
        .collect();
    workloads.sort_by(|a, b| (&a.team, &a.id).cmp(&(&b.team, &b.id)));
    ClusterView {
        viewer,
        at: now,
        name: m.name.clone(),
        reach: m.reach.clone(),
        version: m.version.clone(),
        machines: m.machines.clone(),
        addons: m.addons.clone(),
        e2e: m.e2e.clone(),
        drift: drift_status(m),
        workloads,
        revisions: Vec::new(),
        revisions_note: None,
        addons_note: None,
        capacity: Vec::new(),
        etcd_backup: None,
    }
}

/// Each machine's image and launch-template version as EC2 has them (its
/// node names its instance).
pub fn with_instances(
    machines: &mut [crate::views::cluster::Machine],
    instances: &[crate::cloud::observed::ObservedInstance],
) {
    for m in machines {
        let Some(i) = m.instance.as_ref().and_then(|id| instances.iter().find(|i| &i.id == id)) else { continue };
        m.image = i.image_id.clone();
        m.launch_template_version = i.launch_template_version.map(|v| v.to_string());
    }
}

/// The addons compared with what the cluster's definition selects: each
/// installed one marked as defined (at which version) or not, and each
/// defined one nobody installed added as not installed.
pub fn with_defined_addons(
    addons: &mut Vec<crate::views::cluster::Addon>,
    defined: &std::collections::BTreeMap<String, String>,
) {
    use crate::views::cluster::{Addon, Defined, NOT_INSTALLED};
    for a in addons.iter_mut() {
        a.defined = Some(Defined { version: defined.get(&a.name).cloned() });
    }
    for (name, version) in defined {
        if !addons.iter().any(|a| &a.name == name) {
            addons.push(Addon {
                name: name.clone(),
                version: NOT_INSTALLED.into(),
                workloads: 0,
                ready: 0,
                defined: Some(Defined { version: Some(version.clone()) }),
            });
        }
    }
    addons.sort_by(|a, b| a.name.cmp(&b.name));
}

/// An applied revision as the cluster page shows it.
pub fn revision(r: &crate::state::HistoryRecord) -> crate::views::cluster::Revision {
    crate::views::cluster::Revision {
        revision: r.revision,
        applied_at: r.applied_at.clone(),
        by: match &r.identity {
            Some(arn) => format!("{}@{} as {arn}", r.by, r.host),
            None => format!("{}@{}", r.by, r.host),
        },
        changes: format!("+{} ~{} -/+{} -{}", r.created, r.updated, r.replaced, r.deleted),
        command: r.command.split_whitespace().skip(1).collect::<Vec<_>>().join(" "),
    }
}

pub fn why(b: &crate::gateway::admission::Blocker) -> Why {
    Why {
        kind: format!("{:?}", b.kind).to_lowercase(),
        quota: b.quota.clone(),
        resource: b.resource.clone(),
        requested: b.requested.clone(),
        used: b.used.clone(),
        limit: b.limit.clone(),
        short: b.short.clone(),
        message: b.message.clone(),
        unblock: b.unblock.clone(),
    }
}

fn show(a: Amount) -> String {
    a.show()
}

/// A sample of a team's use as the team page draws it.
pub fn usage_point(s: crate::gateway::records::UsageSample) -> UsagePoint {
    UsagePoint { at: s.at, tier: s.tier, cpu: s.cpu, memory: s.memory, pods: s.pods }
}

/// A team's page: quota per tier, its queue with reasons, its admitted work.
pub async fn team(
    svc: &Service,
    viewer: Viewer,
    team: &str,
    history: Vec<UsagePoint>,
    now: DateTime<Utc>,
) -> Result<TeamView> {
    let (world, broken) = svc.world().await?;
    let usage = svc.usage(team).await?;
    // What the team runs around the gateway is held against its OnDemand
    // quota, as admission holds it.
    let drift = svc.drift(team).await;
    let q = world.quotas.get(team);
    let mut tiers = Vec::new();
    let mut accelerators = Vec::new();
    if let Some(q) = q {
        for t in TIERS {
            let Some(l) = q.limits(t) else { continue };
            let mut u = usage.get(tier_name(t)).copied().unwrap_or_default();
            if t == crate::workloads::Tier::OnDemand {
                u = u.plus(drift);
            }
            let borrowed = u.minus(l.guaranteed);
            for r in crate::gateway::quota::FLAVORS {
                let (g, m, used) = (l.guaranteed.get(r), l.max.get(r), u.get(r));
                if m > 0 || used > 0 {
                    accelerators.push(crate::views::team::AcceleratorRow {
                        tier: tier_name(t).to_string(),
                        flavor: r.flavor().map(|f| f.short().to_string()).unwrap_or_default(),
                        resource: r.name().to_string(),
                        guaranteed: g,
                        max: m,
                        used,
                        free: m.saturating_sub(used),
                    });
                }
            }
            tiers.push(TierRow {
                tier: tier_name(t).to_string(),
                guaranteed: show(l.guaranteed),
                max: show(l.max),
                used: show(u),
                borrowed: show(borrowed),
                borrowing: borrowed != Amount::default(),
            });
        }
    }
    let waiting = svc.waiting().await;
    let all = svc.all();
    let mut queue = Vec::new();
    let mut admitted = Vec::new();
    for s in all.iter().filter(|s| s.spec.team == team) {
        let name = s.metadata.name.clone().unwrap_or_default();
        let kind = s.spec.kind.clone();
        let workload = s.spec.workload_name.clone();
        if let Some(w) = waiting.get(&name) {
            queue.push(Queued {
                id: s.spec.id.clone(),
                workload,
                kind,
                tier: tier_name(s.spec.tier).to_string(),
                priority: s.spec.priority,
                demand: s.spec.demand.show(),
                position: w.position,
                ahead_in_fleet: w.ahead_in_fleet,
                estimate: w.estimate.map(|e| (e.earliest, e.latest)),
                why: why(&w.why),
            });
        } else if phase(s).holds() {
            let st = s.status.clone().unwrap_or_default();
            admitted.push(WorkloadRow {
                id: s.spec.id.clone(),
                workload,
                kind,
                tier: tier_name(s.spec.tier).to_string(),
                demand: s.spec.demand.show(),
                phase: phase_status(s),
                clusters: st.placement.iter().filter(|p| p.replicas > 0).map(|p| p.cluster.clone()).collect(),
                since: st.admitted_at,
            });
        }
    }
    queue.sort_by_key(|q| q.position);
    admitted.sort_by(|a, b| b.since.cmp(&a.since).then(a.id.cmp(&b.id)));
    let holds = admitted.len() as u64;
    Ok(TeamView {
        viewer,
        at: now,
        team: team.to_string(),
        cohort: q.map(|q| q.cohort.clone()).unwrap_or_else(|| team.to_string()),
        drift: (!drift.is_zero()).then(|| show(drift)),
        quota_problem: if q.is_some() {
            None
        } else {
            Some(broken.get(team).map(|e| e.join("; ")).unwrap_or_else(|| {
                format!(
                    "team {team} has no TeamQuota: nothing it submits is admitted until the platform team writes one"
                )
            }))
        },
        tiers,
        workloads: holds,
        max_workloads: q.and_then(|q| q.max_workloads),
        pods_per_minute: q.and_then(|q| q.pods_per_minute),
        queue,
        admitted,
        accelerators,
        history,
    })
}

/// A member part's state as a status; a member that does not answer now is stale.
fn part_status(p: &crate::gateway::records::MemberPart, member: Option<&MemberSnapshot>) -> Status {
    if let Some(Reach::Stale { .. }) = member.map(|m| &m.reach) {
        let r = member.expect("matched").reach.status();
        return Status::new(
            Tone::Stale,
            format!("{} ({})", p.state.clone().unwrap_or_else(|| "unknown".into()), r.label),
        )
        .because(r.reason.unwrap_or_default());
    }
    let tone = match p.state.as_deref() {
        Some("Ready" | "Succeeded") => Tone::Ok,
        Some("Failed") => Tone::Bad,
        Some("unreachable") => Tone::Stale,
        Some(_) => Tone::Progress,
        None => Tone::Unknown,
    };
    let s = Status::new(tone, p.state.clone().unwrap_or_else(|| "not reported yet".into()));
    match &p.message {
        Some(m) if !m.is_empty() => s.because(m.clone()),
        _ => s,
    }
}

/// The containers of a child's pod template, those not submitted marked injected.
pub fn containers(child: &Value, submitted: &Value) -> Vec<Container> {
    let template = ["/spec/template/spec", "/spec/jobTemplate/spec/template/spec"]
        .iter()
        .find_map(|p| child.pointer(p))
        .cloned()
        .unwrap_or(Value::Null);
    let names = |spec: &Value, key: &str| -> Vec<String> {
        spec.get(key)
            .and_then(Value::as_array)
            .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let sub_spec = ["/spec/template/spec", "/spec/jobTemplate/spec/template/spec"]
        .iter()
        .find_map(|p| submitted.pointer(p))
        .cloned()
        .unwrap_or(Value::Null);
    let mine: Vec<String> = [names(&sub_spec, "containers"), names(&sub_spec, "initContainers")].concat();
    let mut out = Vec::new();
    for (key, init) in [("initContainers", true), ("containers", false)] {
        for c in template.get(key).and_then(Value::as_array).into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default().to_string();
            out.push(Container {
                injected: !mine.contains(&name),
                image: c["image"].as_str().unwrap_or_default().to_string(),
                init,
                name,
            });
        }
    }
    out
}

/// What the controller made on each member holding a part (read now, 3 s per member).
async fn made(svc: &Service, s: &Submission, submitted: &Value) -> Vec<Made> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let kind = s.spec.kind.as_str();
    let name = s.spec.workload_name.as_str();
    let selector = format!("pinfleet.dev/kind={kind},pinfleet.dev/name={name}");
    let mut out = Vec::new();
    let parts = s.status.as_ref().map(|st| st.placement.clone()).unwrap_or_default();
    for p in parts.iter().filter(|p| p.replicas > 0) {
        let Some(m) = svc.members.iter().find(|m| m.name == p.cluster) else { continue };
        for (group, version, k, plural) in [
            ("apps", "v1", "Deployment", "deployments"),
            ("apps", "v1", "StatefulSet", "statefulsets"),
            ("apps", "v1", "DaemonSet", "daemonsets"),
            ("batch", "v1", "Job", "jobs"),
            ("batch", "v1", "CronJob", "cronjobs"),
        ] {
            let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, k), plural);
            let api: Api<DynamicObject> = Api::namespaced_with(m.client.clone(), &s.spec.team, &ar);
            let Ok(Ok(list)) = tokio::time::timeout(
                std::time::Duration::from_secs(3),
                api.list(&ListParams::default().labels(&selector)),
            )
            .await
            else {
                continue;
            };
            for o in list.items {
                let v = serde_json::to_value(&o).unwrap_or_default();
                // A Job a CronJob started is the CronJob's; show the CronJob alone.
                if k == "Job"
                    && o.metadata.owner_references.as_ref().is_some_and(|r| r.iter().any(|r| r.kind == "CronJob"))
                {
                    continue;
                }
                out.push(Made {
                    cluster: m.name.clone(),
                    kind: k.to_string(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                    containers: containers(&v, submitted),
                });
            }
        }
    }
    out
}

/// A workload's page.
pub async fn workload(
    svc: &Service,
    members: &[MemberSnapshot],
    viewer: Viewer,
    s: &Submission,
    now: DateTime<Utc>,
) -> WorkloadView {
    let st = s.status.clone().unwrap_or_default();
    let name = s.metadata.name.clone().unwrap_or_default();
    let waiting = svc.waiting_for(&name).await.map(|w| WaitingView {
        position: w.position,
        estimate: crate::views::team::estimate_text(w.estimate.map(|e| (e.earliest, e.latest)), now),
        why: why(&w.why),
    });
    let latency = crate::gateway::service::stages(&st)
        .iter()
        .map(|(stage, from, to)| Stage {
            stage: stage.replace('_', " "),
            at: *to,
            seconds: match (from, to) {
                (Some(a), Some(b)) => Some((*b - *a).num_milliseconds() as f64 / 1000.0),
                _ => None,
            },
        })
        .collect();
    let placement = st
        .placement
        .iter()
        .map(|p| Part {
            cluster: p.cluster.clone(),
            replicas: p.replicas,
            reason: p.reason.clone(),
            state: part_status(p, members.iter().find(|m| m.name == p.cluster)),
            ready: p.ready_replicas,
            observed_at: p.observed_at,
            runs: p.runs.clone(),
        })
        .collect();
    // The workload itself, from its body (the record holds only what lists need).
    let body = match svc.body(s).await {
        Ok(w) => w.unwrap_or_default(),
        Err(why) => json!({ "refused": why }),
    };
    let submitted =
        serde_saphyr::to_string(&body).unwrap_or_else(|_| serde_json::to_string_pretty(&body).unwrap_or_default());
    WorkloadView {
        viewer,
        at: now,
        summary: crate::gateway::service::summary(s),
        submitted_by: format!("{} (by {})", s.spec.submitted_by, s.spec.authenticated_by),
        phase: phase_status(s),
        waiting,
        placement,
        latency,
        submitted,
        made: made(svc, s, &body).await,
        provenance: s.spec.provenance.clone(),
        delivery: delivery(svc, s).await,
    }
}

/// The workload's latest delivery, where the gateway knows the deliveries'
/// store (`--delivery-store`); none when it has none or cannot read it.
async fn delivery(
    svc: &crate::gateway::service::Service,
    s: &crate::gateway::records::Submission,
) -> Option<crate::views::workload::Delivery> {
    use crate::delivery::{book, status};
    let line = svc.delivery_line.get()?;
    let name = s.spec.workload_name.as_str();
    if name.is_empty() {
        return None;
    }
    let store = line.store.sibling(&book::folder(&s.spec.team, name));
    let r = crate::fleet::run::Book { store: store.clone() }.latest().await.ok()??;
    let analyses = book::analyses(&store, r.number).await.unwrap_or_default();
    let digests: Vec<String> = r
        .clusters()
        .flat_map(|(_, c)| c.to.images.values().filter_map(|i| book::digest_of(i).map(str::to_string)))
        .collect();
    let bad = line
        .bad()
        .await
        .ok()
        .and_then(|b| b.into_values().find(|b| digests.contains(&b.digest) && b.team() == s.spec.team));
    let budget = match book::slo(&store).await {
        Ok(Some(rec)) => Some(book::budget_text(&rec, &s.spec.team, name).await),
        _ => None,
    };
    let rows = r
        .clusters()
        .map(|(st, c)| {
            [st.name.clone(), c.name.clone(), c.state.to_string(), status::analysis_cell(analyses.get(&c.name))]
        })
        .collect();
    Some(crate::views::workload::Delivery {
        number: r.number,
        version: r.target.to_string().trim_start_matches("workload ").to_string(),
        state: r.state.to_string(),
        rows,
        bad: bad.map(|b| b.reason),
        budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn addons_are_compared_with_what_the_definition_selects() {
        use crate::views::cluster::{Addon, NOT_INSTALLED};
        let installed = |name: &str, version: &str| Addon {
            name: name.into(),
            version: version.into(),
            workloads: 1,
            ready: 1,
            defined: None,
        };
        let mut addons = vec![installed("log-agent", "4.0.1"), installed("cilium", "1.18.2"), installed("extra", "1")];
        let defined: std::collections::BTreeMap<String, String> =
            [("cilium", "1.18.2"), ("log-agent", "4.1.0"), ("metrics-server", "0.8.0")]
                .into_iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect();
        with_defined_addons(&mut addons, &defined);
        let got: Vec<(String, String, String)> =
            addons.iter().map(|a| (a.name.clone(), a.version.clone(), a.drift().unwrap().text())).collect();
        let want = |a: &str, v: &str, d: &str| (a.to_string(), v.to_string(), d.to_string());
        assert_eq!(
            got,
            vec![
                want("cilium", "1.18.2", "✓ as defined"),
                want("extra", "1", "! not defined: the cluster's definition has no such addon"),
                want("log-agent", "4.0.1", "! drifted: the definition selects 4.1.0: pinfleet addons apply"),
                want(
                    "metrics-server",
                    NOT_INSTALLED,
                    "! not installed: the definition selects 0.8.0: pinfleet addons apply"
                ),
            ]
        );
    }

    #[test]
    fn containers_not_submitted_are_marked_injected() {
        let submitted = json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "a:1"}]}}}});
        let child = json!({"spec": {"template": {"spec": {
            "initContainers": [{"name": "wait-for-mesh", "image": "mesh:1"}],
            "containers": [{"name": "app", "image": "a:1"}, {"name": "log-agent", "image": "fluent-bit:4"}]}}}});
        let got: Vec<(String, bool, bool)> =
            containers(&child, &submitted).into_iter().map(|c| (c.name, c.init, c.injected)).collect();
        assert_eq!(
            got,
            vec![("wait-for-mesh".into(), true, true), ("app".into(), false, false), ("log-agent".into(), false, true)]
        );
    }
}
