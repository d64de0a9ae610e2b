//! Machines that heal: the machine-health loop `pinfleet controller
//! --machines CLUSTER` runs (as Cluster API's MachineHealthCheck does).
//!
//! ```text
//! observe (EC2 machines + their Nodes) ─▶ verdict per machine (pure)
//!   ─▶ decide per group (pure: short-circuit, rollout budget)
//!   ─▶ control plane touched? a fresh verified etcd backup (found or asked
//!      of the agent), else the control plane is held, saying why
//!   ─▶ replace: (etcd member removed) ─▶ terminate ─▶ delete Node ─▶ launch to desired
//!   ─▶ history record with each decision and its reason
//! ```
//!
//! A machine is unhealthy when its instance stopped or is going, when no
//! Node registered within `node_startup` of its launch, or when its Node's
//! Ready condition has been False or Unknown for `unhealthy`. A group with
//! more than `max_unhealthy` of its machines unhealthy is not touched (a
//! storm is more likely the network or the control plane than the
//! machines: replacing them would make it worse), and says so.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::spec::{Cluster, IntOrPercent, Role};

/// MachineHealthCheck's knobs, with its defaults (and 40% short-circuit).
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub node_startup: Duration,
    pub unhealthy: Duration,
    pub max_unhealthy: IntOrPercent,
    /// Replace control-plane machines without a fresh, verified etcd
    /// backup, for this reason (recorded in history).
    pub skip_backup: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            node_startup: Duration::from_secs(600),
            unhealthy: Duration::from_secs(300),
            max_unhealthy: IntOrPercent::Percent(40),
            skip_backup: None,
        }
    }
}

/// A machine as the loop sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MachineObs {
    pub id: String,
    /// EC2's state: pending, running, stopping, stopped, shutting-down, terminated.
    pub state: String,
    pub launched_at: Option<DateTime<Utc>>,
    pub node: Option<NodeObs>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeObs {
    pub name: String,
    /// Ready's status: Some(true), Some(false), or None (Unknown / absent).
    pub ready: Option<bool>,
    /// When Ready last changed.
    pub since: Option<DateTime<Utc>>,
}

/// Why a machine is unhealthy, or None.
pub fn unhealthy(m: &MachineObs, now: DateTime<Utc>, cfg: &Config) -> Option<String> {
    let age = |t: Option<DateTime<Utc>>| t.and_then(|t| (now - t).to_std().ok()).unwrap_or_default();
    if matches!(m.state.as_str(), "stopping" | "stopped" | "shutting-down" | "terminated") {
        return Some(format!("instance {}", m.state));
    }
    match &m.node {
        None if age(m.launched_at) > cfg.node_startup => {
            Some(format!("no Node registered within {} of launch", humantime::format_duration(cfg.node_startup)))
        }
        None => None,
        Some(n) if n.ready == Some(true) => None,
        Some(n) => {
            let for_ = age(n.since);
            (for_ > cfg.unhealthy).then(|| {
                format!(
                    "Node {} Ready={} for {} (> {})",
                    n.name,
                    if n.ready == Some(false) { "False" } else { "Unknown" },
                    humantime::format_duration(Duration::from_secs(for_.as_secs())),
                    humantime::format_duration(cfg.unhealthy)
                )
            })
        }
    }
}

/// What the loop does with one group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupDecision {
    pub group: String,
    pub machines: usize,
    /// Replaced now: (machine, reason).
    pub replace: Vec<(String, String)>,
    /// Unhealthy but left for a later pass (budget) or at all (short-circuit).
    pub held: Vec<(String, String)>,
    /// Why nothing is replaced although machines are unhealthy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub short_circuit: Option<String>,
}

/// The decision for one group: at most `budget` replacements, none when
/// more than `max_unhealthy` of the group is unhealthy.
pub fn decide(group: &str, members: &[MachineObs], now: DateTime<Utc>, cfg: &Config, budget: u32) -> GroupDecision {
    let bad: Vec<(String, String)> =
        members.iter().filter_map(|m| unhealthy(m, now, cfg).map(|why| (m.id.clone(), why))).collect();
    let total = members.len() as u32;
    let allowed = cfg.max_unhealthy.resolve_down(total);
    let mut d = GroupDecision {
        group: group.to_string(),
        machines: members.len(),
        replace: vec![],
        held: vec![],
        short_circuit: None,
    };
    if bad.len() as u32 > allowed {
        d.short_circuit = Some(format!(
            "{} of {total} machines unhealthy, more than maxUnhealthy {} ({allowed}): remediation short-circuited",
            bad.len(),
            match cfg.max_unhealthy {
                IntOrPercent::Int(n) => n.to_string(),
                IntOrPercent::Percent(p) => format!("{p}%"),
            }
        ));
        d.held = bad;
        return d;
    }
    let (now_, later) = bad.split_at(bad.len().min(budget.max(1) as usize));
    d.replace = now_.to_vec();
    d.held =
        later.iter().map(|(id, why)| (id.clone(), format!("{why}; waits for the group's rollout budget"))).collect();
    d
}

/// The decision for group `g` as [`decide`] makes it, with a control
/// plane `held` back for the reason given (no fresh, verified etcd backup
/// to stand on): its replacements become held machines, and
/// `launch` (machines to launch back to the desired size) is zero.
pub fn decide_in(
    cluster: &Cluster,
    g: &crate::spec::InstanceGroup,
    members: &[MachineObs],
    now: DateTime<Utc>,
    cfg: &Config,
    held: Option<&str>,
) -> (GroupDecision, usize) {
    let mut d = decide(&g.name, members, now, cfg, budget(cluster, &g.name));
    let left = members.len().saturating_sub(d.replace.len());
    let want = g.desired_count() as usize;
    let mut launch = if d.short_circuit.is_none() { want.saturating_sub(left) } else { 0 };
    if let (Some(why), Role::ControlPlane) = (held, g.role) {
        let replace = std::mem::take(&mut d.replace);
        d.held.splice(0..0, replace.into_iter().map(|(id, r)| (id, format!("{r}; held: {why}"))));
        if launch > 0 {
            d.held
                .push((format!("{launch} to launch"), format!("the group is short of its desired size; held: {why}")));
        }
        launch = 0;
    }
    (d, launch)
}

/// Whether a pass would change a control-plane machine (replace one, or
/// launch one back to the desired size): the change that needs a backup.
pub fn touches_control_plane(
    cluster: &Cluster,
    observed: &BTreeMap<String, Vec<MachineObs>>,
    cfg: &Config,
    now: DateTime<Utc>,
) -> bool {
    cluster.spec.instance_groups.iter().filter(|g| g.role == Role::ControlPlane).any(|g| {
        let members = observed.get(&g.name).map(Vec::as_slice).unwrap_or_default();
        let (d, launch) = decide_in(cluster, g, members, now, cfg, None);
        !d.replace.is_empty() || launch > 0
    })
}

/// How many machines of a group may be replaced at once: its rollout's
/// maxUnavailable (at least one), one for a control plane.
pub fn budget(cluster: &Cluster, group: &str) -> u32 {
    match cluster.spec.instance_groups.iter().find(|g| g.name == group) {
        Some(g) if g.role == Role::Node => g.rollout.max_unavailable.resolve_down(g.desired_count()).max(1),
        _ => 1,
    }
}

/// One pass's result, as printed and recorded.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub groups: Vec<GroupDecision>,
    /// Machines launched to bring groups back to their desired size.
    pub launched: BTreeMap<String, Vec<String>>,
}

impl Pass {
    /// The lines of its history record (empty: nothing done or held).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for g in &self.groups {
            for (id, why) in &g.replace {
                out.push(format!("machine-health: replaced {id} ({}): {why}", g.group));
            }
            if let Some(sc) = &g.short_circuit {
                out.push(format!("machine-health: {}: {sc}", g.group));
            }
            for (id, why) in g.held.iter().filter(|_| g.short_circuit.is_none()) {
                out.push(format!("machine-health: held {id} ({}): {why}", g.group));
            }
        }
        for (g, ids) in &self.launched {
            out.push(format!("machine-health: launched {} in {g} (back to its desired size)", ids.join(", ")));
        }
        out
    }
}

/// The machines of `cluster` with their Nodes, by group.
pub async fn observe(
    aws: &crate::cloud::aws::Aws,
    cluster: &Cluster,
    client: &kube::Client,
) -> Result<BTreeMap<String, Vec<MachineObs>>> {
    use k8s_openapi::api::core::v1::Node;
    let instances = crate::cloud::aws::observe::list_instances(aws, Some(&cluster.metadata.name), false).await?;
    let nodes = kube::Api::<Node>::all(client.clone()).list(&Default::default()).await?.items;
    let by_id: BTreeMap<String, NodeObs> = nodes
        .into_iter()
        .filter_map(|n| {
            let id = n.spec.as_ref()?.provider_id.as_deref().and_then(crate::kube::drain::instance_id)?.to_string();
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            let obs = NodeObs {
                name: n.metadata.name.clone()?,
                ready: ready.and_then(|c| match c.status.as_str() {
                    "True" => Some(true),
                    "False" => Some(false),
                    _ => None,
                }),
                since: ready
                    .and_then(|c| c.last_transition_time.as_ref())
                    .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0)),
            };
            Some((id, obs))
        })
        .collect();
    let mut out: BTreeMap<String, Vec<MachineObs>> =
        cluster.spec.instance_groups.iter().map(|g| (g.name.clone(), vec![])).collect();
    // Terminated machines are gone already: the group is short, and launching
    // to its desired size replaces them.
    for i in instances.into_iter().filter(|i| i.state != "terminated") {
        let Some(group) = i.group.clone() else { continue };
        out.entry(group).or_default().push(MachineObs {
            node: by_id.get(&i.id).cloned(),
            state: i.state,
            launched_at: i.launch_time.and_then(|t| DateTime::from_timestamp(t, 0)),
            id: i.id,
        });
    }
    Ok(out)
}

/// One pass of the loop: observe, decide, replace, launch to desired.
/// `machines` and `nodes` are the roll's edges (EC2 and the API).
pub async fn pass<M: super::driver::Machines, N: super::driver::Nodes>(
    cluster: &Cluster,
    observed: &BTreeMap<String, Vec<MachineObs>>,
    machines: &M,
    nodes: &N,
    cfg: &Config,
    now: DateTime<Utc>,
    held: Option<&str>,
) -> Result<Pass> {
    let mut result = Pass { groups: vec![], launched: BTreeMap::new() };
    for g in &cluster.spec.instance_groups {
        let members = observed.get(&g.name).cloned().unwrap_or_default();
        let (d, launch) = decide_in(cluster, g, &members, now, cfg, held);
        for (id, _) in &d.replace {
            let node = members.iter().find(|m| &m.id == id).and_then(|m| m.node.clone());
            if let Some(n) = &node {
                if g.role == Role::ControlPlane {
                    nodes.remove_etcd_member(&n.name).await?;
                }
            }
            machines.terminate(id).await?;
            if let Some(n) = &node {
                nodes.delete(&n.name).await?;
            }
        }
        // Back to the desired size: replacements for those terminated now
        // and for machines that ended on their own.
        if launch > 0 {
            let ids = machines.launch(&g.name, u32::try_from(launch).unwrap_or(u32::MAX)).await?;
            result.launched.insert(g.name.clone(), ids);
        }
        result.groups.push(d);
    }
    Ok(result)
}

/// Whether a pass would act: a machine to replace, or a group short of
/// its desired size and not short-circuited.
pub fn needs_action(
    cluster: &Cluster,
    observed: &BTreeMap<String, Vec<MachineObs>>,
    cfg: &Config,
    now: DateTime<Utc>,
    held: Option<&str>,
) -> bool {
    cluster.spec.instance_groups.iter().any(|g| {
        let members = observed.get(&g.name).map(Vec::as_slice).unwrap_or_default();
        let (d, launch) = decide_in(cluster, g, members, now, cfg, held);
        !d.replace.is_empty() || launch > 0
    })
}

/// One pass against the cluster: observe; when there is something to do,
/// take the cluster lock (a roll holding it is left alone this pass), act
/// through the roll's edges under a new revision, and record the decisions
/// in history. A pass that holds machines back (budget, short-circuit) is
/// recorded when it differs from `last`, the previous such record. `None`:
/// nothing new to show.
pub async fn heal(
    aws: &crate::cloud::aws::Aws,
    cluster: &Cluster,
    store: &crate::state::Store,
    client: &kube::Client,
    cfg: &Config,
    command: &str,
    last: &mut Vec<String>,
) -> Result<Option<Pass>> {
    let now = Utc::now();
    let observed = observe(aws, cluster, client).await?;
    // A control-plane machine is changed only on a fresh, verified etcd
    // backup (found, or asked of the agent), as a roll's is; without one
    // the control plane is held, saying why, and the other groups go on.
    let mut held = None;
    let mut backup_line = None;
    // A taken-over control plane the roll would refuse (kops's; kubeadm's
    // without its etcd CA, or one new machines could not take over from)
    // is held here too, saying why.
    match super::run::refuse_adopted_control_plane(cluster, store, &[]).await {
        Err(e) => held = Some(format!("{e:#}")),
        Ok(true) => {
            held = super::run::refuse_kubeadm_control_plane(cluster, client).await.err().map(|e| format!("{e:#}"))
        }
        Ok(false) => {}
    }
    if held.is_none() && crate::adopt::etcd_manager::load(store).await?.is_some() {
        held = Some(format!(
            "{}'s control plane runs kops's etcd-manager: its machines are replaced by `pinfleet upgrade {} --yes`, one at a time behind etcd's quorum, not by the machine-health loop",
            cluster.metadata.name, cluster.metadata.name
        ));
    }
    if held.is_none() && touches_control_plane(cluster, &observed, cfg, now) {
        let why = format!("{command}: a control-plane machine is replaced");
        let on = |e: super::driver::Event| tracing::info!("machine-health: {e:?}");
        match super::run::control_plane_backup(cluster, store, cfg.skip_backup.as_deref(), &why, &on).await {
            Ok(line) => backup_line = Some(line),
            Err(e) => held = Some(format!("{e:#}")),
        }
    }
    let held = held.as_deref();
    if !needs_action(cluster, &observed, cfg, now, held) {
        // Held machines and short-circuits still show.
        let groups = cluster
            .spec
            .instance_groups
            .iter()
            .map(|g| {
                decide_in(cluster, g, observed.get(&g.name).map(Vec::as_slice).unwrap_or_default(), now, cfg, held).0
            })
            .filter(|d| !d.held.is_empty())
            .collect();
        let p = Pass { groups, launched: BTreeMap::new() };
        // A decision not to act is recorded when it first appears.
        let lines = p.lines();
        if lines.is_empty() || lines == *last {
            return Ok(None);
        }
        let record = crate::state::HistoryRecord::of_actions(store.next_revision().await?, command, lines.clone());
        store.record(&record.acting_as(aws.caller_identity().await), cluster).await?;
        *last = lines;
        return Ok(Some(p));
    }
    let work = async {
        let revision = store.next_revision().await?;
        let p = crate::apply::prepare::prepare(aws, cluster).await?;
        let machines = super::edges::AwsMachines::new(aws, cluster, &p, revision);
        crate::state::join::ensure_fresh(Some(client), store, now).await?;
        let nodes = super::edges::KubeNodes::new(client.clone());
        let result = pass(cluster, &observed, &machines, &nodes, cfg, now, held).await?;
        let mut lines = result.lines();
        // The backup a control-plane replacement stood on (or why none) is history.
        if let Some(line) = backup_line {
            lines.insert(0, format!("machine-health: {line}"));
        }
        let mut record = crate::state::HistoryRecord::of_actions(revision, command, lines);
        record.replaced = result.groups.iter().map(|g| g.replace.len()).sum();
        store.record(&record.acting_as(aws.caller_identity().await), cluster).await?;
        anyhow::Ok(result)
    };
    last.clear();
    match crate::state::lock::Lock::with(store, command, work).await {
        Ok(r) => Ok(Some(r)),
        Err(e) if e.downcast_ref::<crate::state::lock::LockError>().is_some() => {
            tracing::info!("machine-health: {e:#}; this pass is skipped");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The loop over one cluster: a pass every `interval` until the process ends.
pub struct Loop {
    pub aws: crate::cloud::aws::Aws,
    pub cluster: Cluster,
    pub store: crate::state::Store,
    pub client: kube::Client,
    pub cfg: Config,
    pub interval: Duration,
    /// The command line, for history.
    pub command: String,
}

impl Loop {
    /// Runs forever; each pass's decisions shown by `on` (errors too: the
    /// next pass tries again), and beside the passes, for a cluster with a
    /// group that may run Spot, the interruption listener (its lines to `say`).
    pub async fn run(&self, on: &dyn Fn(Result<&Pass, &anyhow::Error>), say: &dyn Fn(&str)) {
        futures::join!(self.passes(on), self.listen(say));
    }

    async fn passes(&self, on: &dyn Fn(Result<&Pass, &anyhow::Error>)) {
        let mut last = Vec::new();
        loop {
            match heal(&self.aws, &self.cluster, &self.store, &self.client, &self.cfg, &self.command, &mut last).await {
                Ok(Some(p)) => on(Ok(&p)),
                Ok(None) => {}
                Err(e) => on(Err(&e)),
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}

impl Loop {
    /// Reads the cluster's interruption queue (long polls) and answers each
    /// notice at once ([`super::interruptions::respond`]): a warning is
    /// cordoned within the poll, its offering marked out in the capacity
    /// ledger, the replacement launched and the machine drained within its
    /// time left, then ended; a rebalance recommendation launches the
    /// replacement and drains the old machine only when it is Ready. A
    /// message is deleted once handled (a pass that dies leaves it to come
    /// back). Returns never; a cluster without Spot groups has nothing to read.
    pub async fn listen(&self, say: &dyn Fn(&str)) {
        if !self.cluster.spec.instance_groups.iter().any(|g| g.allows_spot()) {
            return std::future::pending().await;
        }
        let name = crate::cloud::events::queue_name(&self.cluster.metadata.name);
        // Old machine → its replacement, launched on a rebalance recommendation.
        let mut prelaunched: BTreeMap<String, String> = BTreeMap::new();
        // Found once; looked up again only after a receive fails.
        let mut found: Option<String> = None;
        loop {
            let url = match found.clone() {
                Some(u) => Ok(Some(u)),
                None => crate::cloud::aws::events::queue(&self.aws, &name).await.map(|q| q.map(|q| q.url)),
            };
            let url = match url {
                Ok(Some(u)) => {
                    found = Some(u.clone());
                    u
                }
                Ok(None) => {
                    say(&format!(
                        "interruption: queue {name} does not exist yet (`pinfleet apply` makes it); looking again"
                    ));
                    tokio::time::sleep(self.interval.max(Duration::from_secs(5))).await;
                    continue;
                }
                Err(e) => {
                    say(&format!("interruption: {e:#}; looking again"));
                    tokio::time::sleep(self.interval.max(Duration::from_secs(5))).await;
                    continue;
                }
            };
            let messages = match crate::cloud::aws::events::receive(&self.aws, &url, Duration::from_secs(2)).await {
                Ok(m) => m,
                Err(e) => {
                    say(&format!("interruption: {e:#}; looking again"));
                    found = None;
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    continue;
                }
            };
            for m in messages {
                let notice = match super::interruptions::parse(&m.body) {
                    Ok(n) => n,
                    Err(why) => {
                        // Not an event: dropped (it would come back forever).
                        say(&format!("interruption: a message on {name} is dropped: {why}"));
                        let _ = crate::cloud::aws::events::delete(&self.aws, &url, &m.receipt).await;
                        continue;
                    }
                };
                match self.answer(&notice, &mut prelaunched, say).await {
                    Ok(()) => {
                        let _ = crate::cloud::aws::events::delete(&self.aws, &url, &m.receipt).await;
                    }
                    Err(e) => say(&format!("interruption: {e:#} (the message comes back in a minute)")),
                }
            }
            if let Err(e) = self.retire_replaced(&mut prelaunched, say).await {
                say(&format!("interruption: {e:#}"));
            }
        }
    }

    async fn answer(
        &self,
        notice: &super::interruptions::Notice,
        prelaunched: &mut BTreeMap<String, String>,
        say: &dyn Fn(&str),
    ) -> Result<()> {
        use super::interruptions::{respond, Kind, Machine, Step};
        let cluster = &self.cluster.metadata.name;
        let instances = crate::cloud::aws::observe::list_instances(&self.aws, Some(cluster), false).await?;
        let nodes = crate::kube::drain::nodes_by_instance(&self.client).await?;
        for id in &notice.instances {
            let machine = instances.iter().find(|i| &i.id == id && i.is_live()).and_then(|i| {
                Some(Machine {
                    id: i.id.clone(),
                    group: i.group.clone()?,
                    node: nodes.get(&i.id).map(|n| n.name.clone()),
                    spot: matches!(notice.kind, Kind::Warning | Kind::Rebalance).then(|| crate::capacity::Offering {
                        market: crate::capacity::Market::Spot,
                        instance_type: i.instance_type.clone(),
                        zone: i.zone.clone().unwrap_or_default(),
                    }),
                })
            });
            let steps = respond(notice, machine.as_ref(), prelaunched.contains_key(id), Utc::now());
            if steps.is_empty() {
                continue;
            }
            // Cordoned before anything else, without waiting for the lock.
            for s in &steps {
                match s {
                    Step::Say { line } => say(line),
                    Step::Cordon { node } => {
                        crate::kube::drain::cordon(&self.client, node).await?;
                        say(&format!("interruption: cordoned {node}"));
                    }
                    _ => {}
                }
            }
            let lines = std::sync::Mutex::new(Vec::<String>::new());
            let note = |l: String| {
                say(&l);
                lines.lock().unwrap_or_else(|e| e.into_inner()).push(l);
            };
            let work = async {
                let revision = self.store.next_revision().await?;
                let p = crate::apply::prepare::prepare(&self.aws, &self.cluster).await?;
                let machines = super::edges::AwsMachines::new(&self.aws, &self.cluster, &p, revision);
                use super::driver::Machines as _;
                for s in &steps {
                    match s {
                        Step::MarkOut { offering } => {
                            let ledger =
                                crate::cloud::aws::ledger::StoreLedger::new(&self.cluster.spec.state_store, &self.aws);
                            use crate::capacity::LedgerStore as _;
                            let by = format!("{cluster}/{}", machine.as_ref().map(|m| m.group.as_str()).unwrap_or("?"));
                            ledger
                                .record(
                                    &[(offering.clone(), super::interruptions::CODE.to_string(), by)],
                                    &[],
                                    Utc::now(),
                                )
                                .await?;
                            note(format!("interruption: {offering} marked out in the capacity ledger"));
                        }
                        Step::Launch { group } => {
                            let ids = machines.launch(group, 1).await?;
                            note(format!("interruption: launched {} in {group} to replace {id}", ids.join(", ")));
                            if notice.kind == Kind::Rebalance {
                                if let Some(r) = ids.first() {
                                    prelaunched.insert(id.clone(), r.clone());
                                }
                            }
                        }
                        Step::Drain { node, within } => {
                            let t = std::time::Instant::now();
                            crate::kube::drain::drain_before(&self.client, node, *within).await?;
                            note(format!(
                                "interruption: drained {node} in {:.1}s (each pod's grace at most {}s)",
                                t.elapsed().as_secs_f64(),
                                within.as_secs()
                            ));
                        }
                        Step::DeleteNode { node } => crate::kube::drain::delete_node(&self.client, node).await?,
                        Step::Terminate { id } => {
                            machines.terminate(id).await?;
                            prelaunched.remove(id);
                            note(format!("interruption: ended {id}"));
                        }
                        Step::Say { .. } | Step::Cordon { .. } => {}
                    }
                }
                let record = crate::state::HistoryRecord::of_actions(
                    revision,
                    &self.command,
                    lines.lock().unwrap_or_else(|e| e.into_inner()).clone(),
                );
                self.store.record(&record.acting_as(self.aws.caller_identity().await), &self.cluster).await?;
                anyhow::Ok(())
            };
            match crate::state::lock::Lock::with(&self.store, &self.command, work).await {
                Ok(()) => {}
                Err(e) if e.downcast_ref::<crate::state::lock::LockError>().is_some() => {
                    // A roll holds the cluster: the pods still leave before the machine goes.
                    say(&format!("interruption: {e:#}; draining only (the roll or the next pass replaces {id})"));
                    for s in &steps {
                        if let Step::Drain { node, within } = s {
                            crate::kube::drain::drain_before(&self.client, node, *within).await?;
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Machines whose replacement (launched on a rebalance recommendation)
    /// is Ready: drained and ended now.
    async fn retire_replaced(&self, prelaunched: &mut BTreeMap<String, String>, say: &dyn Fn(&str)) -> Result<()> {
        if prelaunched.is_empty() {
            return Ok(());
        }
        let nodes = crate::kube::drain::nodes_by_instance(&self.client).await?;
        let ready: Vec<(String, String)> = prelaunched
            .iter()
            .filter(|(_, r)| nodes.get(*r).is_some_and(|n| n.ready))
            .map(|(o, r)| (o.clone(), r.clone()))
            .collect();
        for (old, replacement) in ready {
            let work = async {
                if let Some(n) = nodes.get(&old) {
                    crate::kube::drain::cordon(&self.client, &n.name).await?;
                    crate::kube::drain::drain(&self.client, &n.name, Duration::from_secs(300), false).await?;
                    crate::kube::drain::delete_node(&self.client, &n.name).await?;
                }
                let revision = self.store.next_revision().await?;
                let p = crate::apply::prepare::prepare(&self.aws, &self.cluster).await?;
                use super::driver::Machines as _;
                super::edges::AwsMachines::new(&self.aws, &self.cluster, &p, revision).terminate(&old).await?;
                let line = format!("rebalance: {replacement} is Ready; drained and ended {old}");
                say(&line);
                let record = crate::state::HistoryRecord::of_actions(revision, &self.command, vec![line]);
                self.store.record(&record.acting_as(self.aws.caller_identity().await), &self.cluster).await?;
                anyhow::Ok(())
            };
            match crate::state::lock::Lock::with(&self.store, &self.command, work).await {
                Ok(()) => {
                    prelaunched.remove(&old);
                }
                Err(e) if e.downcast_ref::<crate::state::lock::LockError>().is_some() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(mins: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + mins * 60, 0).unwrap()
    }

    fn m(id: &str, state: &str, node: Option<(Option<bool>, i64)>) -> MachineObs {
        MachineObs {
            id: id.into(),
            state: state.into(),
            launched_at: Some(t(0)),
            node: node.map(|(ready, since)| NodeObs { name: format!("n-{id}"), ready, since: Some(t(since)) }),
        }
    }

    #[test]
    fn verdicts_follow_machine_health_check_defaults() {
        let cfg = Config::default();
        assert_eq!(unhealthy(&m("a", "stopped", None), t(1), &cfg).as_deref(), Some("instance stopped"));
        assert_eq!(unhealthy(&m("a", "running", None), t(9), &cfg), None, "still starting");
        assert_eq!(
            unhealthy(&m("a", "running", None), t(11), &cfg).as_deref(),
            Some("no Node registered within 10m of launch")
        );
        assert_eq!(unhealthy(&m("a", "running", Some((Some(false), 20))), t(24), &cfg), None);
        assert_eq!(
            unhealthy(&m("a", "running", Some((None, 20))), t(26), &cfg).as_deref(),
            Some("Node n-a Ready=Unknown for 6m (> 5m)")
        );
        assert_eq!(unhealthy(&m("a", "running", Some((Some(true), 0))), t(60), &cfg), None);
    }

    #[test]
    fn a_storm_short_circuits_and_a_few_wait_for_the_budget() {
        let cfg = Config::default();
        let ok = |id: &str| m(id, "running", Some((Some(true), 0)));
        let group: Vec<MachineObs> =
            vec![m("a", "stopped", None), m("b", "stopped", None), ok("c"), ok("d"), ok("e"), ok("f")];
        let d = decide("general", &group, t(30), &cfg, 1);
        assert_eq!(d.replace, [("a".to_string(), "instance stopped".to_string())]);
        assert_eq!(d.held.len(), 1, "one at a time within the budget");
        assert!(d.short_circuit.is_none());
        let storm: Vec<MachineObs> =
            vec![m("a", "stopped", None), m("b", "stopped", None), m("c", "stopped", None), ok("d"), ok("e")];
        let d = decide("general", &storm, t(30), &cfg, 5);
        assert!(d.replace.is_empty());
        assert_eq!(
            d.short_circuit.as_deref(),
            Some("3 of 5 machines unhealthy, more than maxUnhealthy 40% (2): remediation short-circuited")
        );
    }
}
