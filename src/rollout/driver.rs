//! The roll itself: observe a group, ask the [`policy`](super::policy)
//! what to do, do it (launch replacements; cordon, drain, terminate, delete
//! the node and validate for each old machine), and ask again whenever a
//! node changes or a replacement finishes. Generic over the machines (EC2,
//! or an in-memory fleet for benchmarks) and the nodes (the Kubernetes API,
//! or the same in-memory fleet), so the same code is measured and shipped.
//!
//! Time is tokio's, so benchmarks run it on a paused clock.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use futures::stream::FuturesUnordered;
use futures::StreamExt as _;
use serde::Serialize;
use tokio::time::Instant;

use super::policy::{self, Limits, Member, Step};
use crate::kube::drain::NodeState;

/// One machine of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    pub id: String,
    /// On the group's current launch-template version.
    pub current: bool,
}

/// The cloud side of a roll.
pub trait Machines {
    fn list(&self, group: &str) -> impl Future<Output = Result<Vec<Machine>>>;
    /// Starts `n` machines on the group's current version; their ids.
    fn launch(&self, group: &str, n: u32) -> impl Future<Output = Result<Vec<String>>>;
    fn terminate(&self, id: &str) -> impl Future<Output = Result<()>>;
}

/// The Kubernetes side of a roll.
pub trait Nodes {
    /// Nodes by the id of the machine behind them.
    fn list(&self) -> impl Future<Output = Result<BTreeMap<String, NodeState>>>;
    fn cordon(&self, node: &str) -> impl Future<Output = Result<()>>;
    fn drain(&self, node: &str, timeout: Duration, force: bool) -> impl Future<Output = Result<()>>;
    fn delete(&self, node: &str) -> impl Future<Output = Result<()>>;
    /// Removes the node's etcd member (a control-plane machine about to go),
    /// refusing when etcd would lose its quorum.
    fn remove_etcd_member(&self, node: &str) -> impl Future<Output = Result<()>>;
    /// One look at kops's etcd-manager (a control plane taken over from
    /// kops, `members` per etcd cluster): every member healthy, or, with
    /// `leaving` about to go, a quorum without it. Err says what is short.
    fn etcd_manager_health(&self, members: usize, leaving: Option<&str>) -> impl Future<Output = Result<(), String>>;
    /// One validation pass, ignoring the named nodes (still joining).
    fn validate(&self, ignore: &BTreeSet<String>) -> impl Future<Output = Result<(), String>>;
    /// Returns when a node may have changed, or after `max`.
    fn changed(&self, max: Duration) -> impl Future<Output = ()>;
}

/// How one group is rolled.
#[derive(Debug, Clone, Serialize)]
pub struct GroupRoll {
    pub group: String,
    pub limits: Limits,
    pub drain_timeout: Duration,
    pub force_drain: bool,
    /// A replacement not Ready within this halts the roll.
    pub boot_timeout: Duration,
    /// Consecutive passing validations wanted after each replacement …
    pub validate_count: u32,
    /// … this far apart …
    pub validate_interval: Duration,
    /// … within this.
    pub validation_timeout: Duration,
    /// Machines to replace even though they are current (`--force`).
    pub force_ids: BTreeSet<String>,
    /// Each machine's etcd member is removed before it is terminated
    /// (control-plane groups).
    pub etcd_members: bool,
    /// The control plane's etcd is kops's etcd-manager, with this many
    /// members per etcd cluster: a machine goes only while the others hold
    /// a quorum, and its replacement's member (its volume, taken over) is
    /// healthy before the next goes. None: not etcd-manager's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_manager: Option<usize>,
}

/// Progress, for bars and `-o json`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
pub enum Event {
    Started {
        group: String,
        outdated: usize,
        machines: usize,
    },
    Launched {
        group: String,
        ids: Vec<String>,
    },
    Draining {
        group: String,
        instance: String,
        node: Option<String>,
    },
    Replaced {
        group: String,
        instance: String,
        done: usize,
        total: usize,
    },
    Finished {
        group: String,
        replaced: usize,
        seconds: f64,
    },
    /// A step of a Kubernetes version upgrade begins (see [`super::versions`]).
    VersionStep {
        step: String,
    },
    /// The end-to-end gate passed (`after`: a group, or the roll).
    Validated {
        after: String,
        checks: usize,
        skipped: usize,
    },
    /// Every offering of the group is refused by EC2: the roll waits (this
    /// is no machine's failure, and counts toward no `maxFailures`).
    BlockedOnCapacity {
        group: String,
        reason: String,
    },
    /// The etcd backup a change to the control plane waits for (asked of
    /// the agents, taken, verified).
    Backup {
        message: String,
    },
    /// What the roll of a cluster taken over from kops did to kops's own
    /// (its Auto Scaling groups and launch templates, deleted once empty).
    Kops {
        message: String,
    },
}

/// How long a roll blocked on capacity waits before it asks again: the
/// ledger's shortest time to live, so the first offering to expire is the
/// next one tried.
pub const CAPACITY_RETRY: Duration = Duration::from_secs(180);
/// A roll blocked on capacity longer than this halts, saying so.
pub const CAPACITY_PATIENCE: Duration = Duration::from_secs(3600);

/// Whether a launch failed because EC2 refused every offering of the group.
pub fn blocked_on_capacity(e: &anyhow::Error) -> Option<String> {
    // A group whose launches keep failing halts its rollouts; other groups roll on.
    crate::capacity::Blocked::find(e).filter(|b| b.churn.is_none()).map(|b| b.reason.clone())
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct GroupReport {
    pub group: String,
    pub replaced: usize,
    pub launched: usize,
    pub seconds: f64,
}

type Work<'a> = Pin<Box<dyn Future<Output = (String, Result<()>)> + 'a>>;

/// Rolls one group until every machine is current and Ready, or halts
/// with the reason (a replacement that never turns Ready, a drain that
/// times out, a validation that never passes).
pub async fn roll_group<M: Machines, N: Nodes>(
    m: &M,
    n: &N,
    cfg: &GroupRoll,
    on: &dyn Fn(Event),
) -> Result<GroupReport> {
    let start = Instant::now();
    let mut draining: BTreeSet<String> = BTreeSet::new();
    let mut booting_since: BTreeMap<String, Instant> = BTreeMap::new();
    // Launched but not listed yet (eventual consistency): never launch twice.
    let mut expected: BTreeSet<String> = BTreeSet::new();
    let mut work: FuturesUnordered<Work<'_>> = FuturesUnordered::new();
    let (mut replaced, mut launched, mut total) = (0usize, 0usize, None);
    loop {
        let (machines, nodes) = futures::try_join!(m.list(&cfg.group), n.list())?;
        let listed: BTreeSet<&str> = machines.iter().map(|x| x.id.as_str()).collect();
        expected.retain(|id| !listed.contains(id.as_str()));
        let mut members: Vec<Member> = machines
            .iter()
            .map(|x| {
                let node = nodes.get(&x.id);
                Member {
                    id: x.id.clone(),
                    current: x.current && !cfg.force_ids.contains(&x.id) && !node.is_some_and(|s| s.needs_update),
                    ready: node.is_some_and(|s| s.ready),
                    cordoned: node.is_some_and(|s| s.cordoned),
                }
            })
            .collect();
        members.extend(expected.iter().map(|id| Member {
            id: id.clone(),
            current: true,
            ready: false,
            cordoned: false,
        }));
        let outdated = members.iter().filter(|x| !x.current).count();
        let total = *total.get_or_insert_with(|| {
            on(Event::Started { group: cfg.group.clone(), outdated, machines: members.len() });
            outdated
        });
        // Replacements that never come up halt the roll.
        let now = Instant::now();
        let booting: BTreeSet<&str> = members.iter().filter(|x| x.current && !x.ready).map(|x| x.id.as_str()).collect();
        booting_since.retain(|id, _| booting.contains(id.as_str()));
        for x in members.iter().filter(|x| x.current && !x.ready) {
            let since = *booting_since.entry(x.id.clone()).or_insert(now);
            if now - since > cfg.boot_timeout {
                bail!(
                    "group {}: replacement {} did not become a Ready node within {}; the roll is halted ({replaced} of {total} replaced)",
                    cfg.group,
                    x.id,
                    humantime::format_duration(cfg.boot_timeout)
                );
            }
        }
        let joining: BTreeSet<String> = members
            .iter()
            .filter(|x| x.current && !x.ready)
            .filter_map(|x| nodes.get(&x.id).map(|s| s.name.clone()))
            .collect();
        match policy::step(&members, &draining, &cfg.limits) {
            Step::Done if work.is_empty() => {
                // Every machine is current, but a replacement's etcd member
                // may still be starting (a run resumed after a kill): the
                // group is done once etcd-manager has every member back.
                if let Some(members) = cfg.etcd_manager {
                    etcd_manager_wait(n, cfg, members, None).await.map_err(|e| {
                        anyhow!(
                            "group {}: {e:#}; every machine of it is replaced ({replaced} in this run), the roll is halted until its etcd members are back",
                            cfg.group
                        )
                    })?;
                }
                let seconds = start.elapsed().as_secs_f64();
                on(Event::Finished { group: cfg.group.clone(), replaced, seconds });
                return Ok(GroupReport { group: cfg.group.clone(), replaced, launched, seconds });
            }
            Step::Act { launch, drain } => {
                if launch > 0 {
                    let mut waited = Duration::ZERO;
                    let ids = loop {
                        match m.launch(&cfg.group, launch).await {
                            Ok(ids) => break ids,
                            Err(e) => match blocked_on_capacity(&e) {
                                Some(reason) if waited < CAPACITY_PATIENCE => {
                                    on(Event::BlockedOnCapacity { group: cfg.group.clone(), reason });
                                    tokio::time::sleep(CAPACITY_RETRY).await;
                                    waited += CAPACITY_RETRY;
                                }
                                _ => return Err(e),
                            },
                        }
                    };
                    launched += ids.len();
                    expected.extend(ids.iter().cloned());
                    on(Event::Launched { group: cfg.group.clone(), ids });
                }
                for id in drain {
                    let node = nodes.get(&id).map(|s| s.name.clone());
                    if let (Some(members), Some(node), true) = (cfg.etcd_manager, &node, work.is_empty()) {
                        // Said before the machine is called draining: it is
                        // not touched while the others lack etcd's quorum.
                        n.etcd_manager_health(members, Some(node)).await.map_err(|why| {
                            anyhow!(
                                "group {}: {node} is not taken down: {why}; nothing of it was changed; the roll is halted ({replaced} of {total} replaced)",
                                cfg.group
                            )
                        })?;
                    }
                    on(Event::Draining { group: cfg.group.clone(), instance: id.clone(), node: node.clone() });
                    draining.insert(id.clone());
                    work.push(Box::pin(replace_one(m, n, cfg, id, node, joining.clone())));
                }
            }
            _ => {}
        }
        tokio::select! {
            Some(first) = work.next(), if !work.is_empty() => {
                // Every replacement finished by now, before looking again
                // (a wave's replacements tend to finish together).
                let mut finished = vec![first];
                while let Some(Some(more)) = futures::FutureExt::now_or_never(work.next()) {
                    finished.push(more);
                }
                for (id, r) in finished {
                    draining.remove(&id);
                    r.map_err(|e| anyhow!("group {}: {e:#}; the roll is halted ({replaced} of {total} replaced)", cfg.group))?;
                    replaced += 1;
                    on(Event::Replaced { group: cfg.group.clone(), instance: id, done: replaced, total });
                }
            }
            _ = n.changed(Duration::from_millis(500)) => {}
        }
    }
}

/// Cordon → drain → (etcd member removed) → terminate → delete the node → validate.
async fn replace_one<M: Machines, N: Nodes>(
    m: &M,
    n: &N,
    cfg: &GroupRoll,
    id: String,
    node: Option<String>,
    joining: BTreeSet<String>,
) -> (String, Result<()>) {
    let r = async {
        if let (Some(node), Some(members)) = (&node, cfg.etcd_manager) {
            // kops's etcd-manager: nothing of a machine is touched while
            // the others lack a quorum without it.
            n.etcd_manager_health(members, Some(node))
                .await
                .map_err(|why| anyhow!("{node} is not taken down: {why}; nothing of it was changed"))?;
        }
        if let Some(node) = &node {
            n.cordon(node).await?;
            n.drain(node, cfg.drain_timeout, cfg.force_drain).await?;
            if cfg.etcd_members {
                n.remove_etcd_member(node).await?;
            }
            if let Some(members) = cfg.etcd_manager {
                etcd_manager_wait(n, cfg, members, Some(node)).await.map_err(|e| {
                    anyhow!("{e:#}; {node} is left cordoned and running (the roll, run again once the members are back, takes it down)")
                })?;
            }
        }
        m.terminate(&id).await?;
        if let Some(node) = &node {
            n.delete(node).await?;
        }
        validate(n, cfg, &joining).await?;
        match cfg.etcd_manager {
            Some(members) => etcd_manager_wait(n, cfg, members, None).await,
            None => Ok(()),
        }
    }
    .await;
    (id, r)
}

/// Waits, within the validation timeout, until kops's etcd-manager has
/// every member healthy (`leaving`: None) or a quorum without `leaving`.
async fn etcd_manager_wait<N: Nodes>(n: &N, cfg: &GroupRoll, members: usize, leaving: Option<&str>) -> Result<()> {
    let deadline = Instant::now() + cfg.validation_timeout;
    loop {
        match n.etcd_manager_health(members, leaving).await {
            Ok(()) => return Ok(()),
            Err(why) if Instant::now() >= deadline => {
                let what = match leaving {
                    Some(node) => format!("{node} is not taken down"),
                    None => "the replacement's etcd member is not healthy".to_string(),
                };
                bail!("{what} within {}: {why}", humantime::format_duration(cfg.validation_timeout))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// `validate_count` consecutive passes, `validate_interval` apart, within
/// the validation timeout.
pub async fn validate<N: Nodes>(n: &N, cfg: &GroupRoll, joining: &BTreeSet<String>) -> Result<()> {
    let deadline = Instant::now() + cfg.validation_timeout;
    let mut passes = 0;
    let mut last = String::new();
    while passes < cfg.validate_count {
        match n.validate(joining).await {
            Ok(()) => passes += 1,
            Err(why) => {
                passes = 0;
                last = why;
            }
        }
        if passes >= cfg.validate_count {
            break;
        }
        if Instant::now() >= deadline {
            bail!("the cluster did not validate within {}: {last}", humantime::format_duration(cfg.validation_timeout));
        }
        tokio::time::sleep(if passes > 0 { cfg.validate_interval } else { Duration::from_millis(250) }).await;
    }
    Ok(())
}

/// A check run after each group (the end-to-end gate); an error halts the roll.
pub type Gate<'a> = &'a dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Rolls groups in order: the control-plane groups one after another, then
/// node groups up to `max_parallel` at a time, `gate` after each group.
/// Stops at the first halt.
pub async fn roll<M: Machines, N: Nodes>(
    m: &M,
    n: &N,
    control_plane: &[GroupRoll],
    node_groups: &[GroupRoll],
    max_parallel: usize,
    on: &dyn Fn(Event),
    gate: Option<Gate<'_>>,
) -> Result<Vec<GroupReport>> {
    let mut reports = Vec::new();
    for g in control_plane {
        reports.push(roll_group(m, n, g, on).await?);
        if let Some(gate) = gate {
            gate(g.group.clone()).await?;
        }
    }
    let mut results =
        futures::stream::iter(node_groups.iter().map(|g| roll_group(m, n, g, on))).buffered(max_parallel.max(1));
    while let Some(r) = results.next().await {
        let r = r?;
        if let Some(gate) = gate {
            gate(r.group.clone()).await?;
        }
        reports.push(r);
    }
    Ok(reports)
}
