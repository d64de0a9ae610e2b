//! A cluster-wide roll, as `upgrade` and `ami rollout` run it: apply what
//! is pending (so launch templates carry the new version), find what needs
//! replacing, build each group's limits, and drive the groups.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde::Serialize;

use super::driver::{self, Event, GroupReport, GroupRoll};
use super::edges::{AwsMachines, KubeNodes};
use super::policy;
use super::versions::{self, Running, Step as VStep, Version};
use crate::apply::prepare::{self, Prepared};
use crate::cloud::aws::Aws;
use crate::kube::drain::NodeState;
use crate::spec::{Cluster, Role};
use crate::state::pki::Pki;

#[derive(Debug, Clone)]
pub struct Options {
    /// Only these groups (all when empty).
    pub groups: Vec<String>,
    /// Replace every machine, current or not.
    pub force: bool,
    pub max_parallel_groups: usize,
    pub force_drain: bool,
    pub boot_timeout: Duration,
    pub validate_count: u32,
    pub validate_interval: Duration,
    /// Replace one machine and validate before the rest of a node group.
    pub canary: bool,
    /// Remove a control-plane machine's etcd member before terminating it
    /// (off only for rehearsing what happens without it).
    pub etcd_member_removal: bool,
    /// Run the end-to-end gates: the cluster phase after each group, the
    /// platform smoke at the end (`--skip-e2e` turns them off).
    pub e2e: bool,
    /// Roll the control plane without a fresh, verified etcd backup, for
    /// this reason (recorded in history).
    pub skip_backup: Option<String>,
}

/// Whether a roll may change the control plane: a verified etcd backup
/// younger than `etcd.backups.freshFor` must be in the state store
/// ([`crate::etcd::policy::fresh`]), or the caller skips it with a reason.
/// Checked before the roll's first write. Ok(Some(line)) says what was
/// found or skipped (for history).
pub async fn backup_gate(
    cluster: &Cluster,
    store: &crate::state::Store,
    opts: &Options,
    why: &str,
    on: &dyn Fn(Event),
) -> Result<Option<String>> {
    let touches_control_plane = selected(cluster, opts).iter().any(|g| g.role == Role::ControlPlane);
    if !touches_control_plane {
        return Ok(None);
    }
    control_plane_backup(cluster, store, opts.skip_backup.as_deref(), why, on).await.map(Some)
}

/// The backup a change to the control plane stands on (a roll's, or the
/// machine-health loop's replacement of a control-plane machine): a fresh
/// verified one found, or asked of the agent and waited for; or skipped
/// for `skip`'s reason, or backups off. Ok(line) says which (for history);
/// Err says why the change may not go ahead and what to do.
pub async fn control_plane_backup(
    cluster: &Cluster,
    store: &crate::state::Store,
    skip: Option<&str>,
    why: &str,
    on: &dyn Fn(Event),
) -> Result<String> {
    let backups = &cluster.spec.etcd.backups;
    if !backups.enabled {
        return Ok("etcd backups are off for this cluster (etcd.backups.enabled: false): rolled without one".into());
    }
    if let Some(reason) = skip {
        if reason.trim().is_empty() {
            anyhow::bail!("--skip-backup needs a reason (it is recorded in the cluster's history)");
        }
        return Ok(format!("etcd backup skipped for this roll (--skip-backup): {}", reason.trim()));
    }
    let list = crate::etcd::agent::list(store).await?;
    match crate::etcd::policy::fresh(&list, backups.fresh_for.0, chrono::Utc::now()) {
        crate::etcd::policy::Fresh::Yes { id, age } => Ok(format!(
            "etcd backup {id} ({} old, verified) taken before this change to the control plane",
            humantime::format_duration(std::time::Duration::from_secs(age.as_secs()))
        )),
        crate::etcd::policy::Fresh::No(stale) => {
            let name = &cluster.metadata.name;
            let now = chrono::Utc::now();
            // An agent that reported within a few of its flushes is there to ask.
            let alive_within = backups.delta_interval.0.saturating_mul(4).max(std::time::Duration::from_secs(120));
            let seen = crate::etcd::agent::seen(store).await?;
            let agent = match &seen {
                Some(s) if crate::etcd::policy::age(now, s.at) <= alive_within => None,
                Some(s) => Some(format!(
                    "the etcd backup agent last reported {} ago (member {})",
                    humantime::format_duration(std::time::Duration::from_secs(
                        crate::etcd::policy::age(now, s.at).as_secs()
                    )),
                    s.member
                )),
                None => Some("no etcd backup agent has reported for this cluster".to_string()),
            };
            // Why it has not: the agents' own word, when they could write it.
            let newest = list.iter().map(|b| b.manifest.taken_at).max();
            let agent = match agent {
                Some(a) => match crate::etcd::agent::troubles(store, newest).await?.first() {
                    Some(t) => Some(format!("{a}; {}", crate::etcd::policy::trouble_line(t, now))),
                    None => Some(a),
                },
                None => None,
            };
            let tail = format!(
                "a change to the control plane of {name} needs a verified etcd backup younger than {} \
                 (etcd.backups.freshFor). Nothing was changed. Take one on a control-plane machine \
                 (`pinfleet etcd backup {name}`, which the agent also does every {}), or roll without one: \
                 --skip-backup REASON (recorded in history)",
                backups.fresh_for, backups.interval
            );
            if let Some(absent) = agent {
                anyhow::bail!("{stale}, and {absent}: {tail}");
            }
            let (user, host) = crate::state::whoami();
            let by = format!("{user}@{host}");
            let asked = crate::etcd::agent::ask_and_wait(store, &by, why, backups.wait_for_backup.0, &|m| {
                on(Event::Backup { message: m.to_string() })
            })
            .await?;
            match asked {
                Some(b) => Ok(format!(
                    "etcd backup {} taken and verified before this change to the control plane (asked of the agent)",
                    b.manifest.id
                )),
                None => anyhow::bail!(
                    "{stale}; the backup asked of the agent was not taken and verified within {} \
                     (etcd.backups.waitForBackup; an agent without etcd's binaries leaves verification to \
                     `pinfleet etcd verify {name}`): {tail}",
                    backups.wait_for_backup
                ),
            }
        }
    }
}

/// The end-to-end gate: `phases` of `pinfleet e2e` against the cluster,
/// run again (every 2s) while they fail, for up to `settle` (machines
/// launched a moment ago are still joining); failing still then halts the
/// roll with the failed checks.
pub async fn gate(
    cluster: &Cluster,
    client: &kube::Client,
    phases: &[crate::e2e::Phase],
    after: &str,
    settle: Duration,
    on: &dyn Fn(Event),
) -> Result<()> {
    gate_with(cluster, client, phases, after, settle, Default::default(), on).await
}

/// [`gate`] during a roll: `rolling` names the groups it has yet to reach,
/// whose cordoned nodes are its own work (a drain a killed run started and
/// this run resumes in their group), not a fault to halt on.
pub async fn gate_with(
    cluster: &Cluster,
    client: &kube::Client,
    phases: &[crate::e2e::Phase],
    after: &str,
    settle: Duration,
    rolling: BTreeSet<String>,
    on: &dyn Fn(Event),
) -> Result<()> {
    use crate::e2e::{self, Outcome};
    let t = e2e::Target { cluster: cluster.clone(), client: client.clone(), addons: None };
    let opts = e2e::Options { phases: phases.to_vec(), rolling_groups: rolling, ..Default::default() };
    let deadline = tokio::time::Instant::now() + settle;
    loop {
        let report = e2e::run(&t, &opts, &|_, _| {}).await;
        let failures: Vec<String> = report
            .failures()
            .iter()
            .map(|c| match &c.outcome {
                Outcome::Fail { reason, objects } => {
                    format!("{}/{}: {reason} [{}]", c.phase.as_str(), c.name, objects.join("; "))
                }
                _ => String::new(),
            })
            .collect();
        if failures.is_empty() {
            let skipped = report.checks.iter().filter(|c| matches!(c.outcome, Outcome::Skip { .. })).count();
            on(Event::Validated { after: after.to_string(), checks: report.checks.len() - skipped, skipped });
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "the e2e gate after {after} failed (still after {}): {}",
                humantime::format_duration(settle),
                failures.join(" | ")
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// One row of the upgrade table.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    pub group: String,
    pub role: Role,
    pub machines: usize,
    pub needs_update: usize,
    pub ready: usize,
    pub min: u32,
    pub desired: u32,
    pub max: u32,
    pub nodes: Vec<String>,
}

/// Applies the pending plan, if any (new launch-template versions, scaling),
/// and returns a fresh observation and the plan it applied.
pub async fn apply_pending(
    aws: &Aws,
    cluster: &Cluster,
    revision: u64,
    version_step: bool,
) -> Result<(Prepared, Option<crate::plan::Plan>)> {
    let prepared = prepare::prepare_with(aws, cluster, version_step).await?;
    let plan = without_terminations(&prepared.plan);
    if plan.is_empty() {
        return Ok((prepared, None));
    }
    let ctx = prepared.context(aws, cluster, revision);
    crate::apply::execute(&plan, ctx, &crate::apply::Options::default()).await?;
    Ok((prepare::prepare_with(aws, cluster, version_step).await?, Some(plan)))
}

/// The plan without its terminations of surplus machines: the roll replaces
/// machines itself, draining each and removing a control-plane machine's
/// etcd member first. A group has a surplus when a run was killed mid-roll
/// (the replacement launched, the old machine not yet gone); terminating
/// the old control-plane machine there, member and all, would cost etcd
/// its quorum.
fn without_terminations(plan: &crate::plan::Plan) -> crate::plan::Plan {
    use crate::cloud::ops::Op;
    let mut plan = plan.clone();
    let dropped: BTreeSet<crate::cloud::key::ResourceKey> = plan
        .changes
        .iter()
        .filter(|c| matches!(c.op.op(), Some(Op::TerminateInstances { wait: false, .. })))
        .map(|c| c.key.clone())
        .collect();
    plan.changes.retain(|c| !dropped.contains(&c.key));
    for c in &mut plan.changes {
        c.depends_on.retain(|d| !dropped.contains(d));
    }
    plan
}

/// The Kubernetes version steps from what the cluster runs to
/// `spec.kubernetesVersion` (none when they agree, or when the cluster
/// keeps no kubeadm configuration to read its version from).
pub async fn version_steps(cluster: &Cluster, client: &kube::Client) -> Result<(Option<Running>, Vec<VStep>)> {
    let target = Version::parse(&cluster.spec.kubernetes_version).ok_or_else(|| {
        anyhow::anyhow!("spec.kubernetesVersion {} is not a version", cluster.spec.kubernetes_version)
    })?;
    let Some(mut running) = crate::kube::kubeadm::running(client).await? else { return Ok((None, vec![])) };
    // Node groups without nodes move with the control plane's version.
    for g in cluster.spec.instance_groups.iter().filter(|g| g.role == Role::Node) {
        running.node_groups.entry(g.name.clone()).or_insert(running.control_plane);
    }
    let steps = versions::plan(&running, target).map_err(|why| anyhow::anyhow!("{why}"))?;
    Ok((Some(running), steps))
}

/// The cluster as one version step renders it: each group at its version.
fn cluster_at(cluster: &Cluster, at: &BTreeMap<String, Version>) -> Cluster {
    let mut c = cluster.clone();
    for g in &mut c.spec.instance_groups {
        g.kubernetes_version = at.get(&g.name).map(ToString::to_string);
    }
    c
}

fn versions(p: &Prepared) -> BTreeMap<String, i64> {
    p.observed.launch_templates.iter().map(|t| (t.group.clone(), t.latest_version)).collect()
}

fn selected<'a>(cluster: &'a Cluster, opts: &Options) -> Vec<&'a crate::spec::InstanceGroup> {
    cluster.spec.instance_groups.iter().filter(|g| opts.groups.is_empty() || opts.groups.contains(&g.name)).collect()
}

/// What `upgrade` without `--yes` shows.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// Each selected group now.
    pub groups: Vec<GroupStatus>,
    /// Planned changes (applied before the roll).
    pub pending: usize,
    /// What the cluster runs, when it differs from `spec.kubernetesVersion`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<Running>,
    /// The version upgrade's steps, in order (empty: no version change).
    pub version_steps: Vec<VStep>,
}

pub async fn preview(aws: &Aws, cluster: &Cluster, client: &kube::Client, opts: &Options) -> Result<Preview> {
    let p = crate::apply::prepare::prepare(aws, cluster).await?;
    let nodes = crate::kube::drain::nodes_by_instance(client).await?;
    let (running, version_steps) = version_steps(cluster, client).await?;
    // A version change shows as steps, not as the refused template changes.
    let pending = if version_steps.is_empty() { p.plan.changes.len() } else { 0 };
    let running = running.filter(|_| !version_steps.is_empty());
    Ok(Preview { groups: status(cluster, &p, &nodes, opts), pending, running, version_steps })
}

/// Refuses a selection (`--instance-group`) naming a group the file does
/// not have: a roll of it would do nothing and say "done".
pub fn refuse_unknown_groups(cluster: &Cluster, groups: &[String]) -> Result<()> {
    let have: Vec<&str> = cluster.spec.instance_groups.iter().map(|g| g.name.as_str()).collect();
    let unknown: Vec<String> = groups
        .iter()
        .filter(|g| !have.contains(&g.as_str()))
        .map(|g| crate::escape::escaped(g, false).into_owned())
        .collect();
    if !unknown.is_empty() {
        anyhow::bail!(
            "{}: no instance group {} (its groups: {}); nothing was changed",
            cluster.metadata.name,
            unknown.join(", "),
            have.join(", ")
        );
    }
    Ok(())
}

/// Refuses a roll of a cluster taken over ([`crate::adopt::CLAIMS_KEY`] in
/// its state) whose selection (`groups`; empty: every group) holds a
/// control-plane group that cannot be rolled: kops's (its etcd is
/// etcd-manager's, with CAs and membership of its own), or kubeadm's
/// when its etcd CA was not taken over. Names the node groups' command.
/// Ok(true): an adopted kubeadm control plane is in the selection, and
/// [`refuse_kubeadm_control_plane`] is to be asked of the running cluster.
pub async fn refuse_adopted_control_plane(
    cluster: &Cluster,
    store: &crate::state::Store,
    groups: &[String],
) -> Result<bool> {
    let Some((bytes, _)) = store.get(crate::adopt::CLAIMS_KEY).await? else { return Ok(false) };
    let record = serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_default();
    let picked = |g: &&crate::spec::InstanceGroup| groups.is_empty() || groups.contains(&g.name);
    let all = &cluster.spec.instance_groups;
    let control_plane: Vec<&str> =
        all.iter().filter(picked).filter(|g| g.role == Role::ControlPlane).map(|g| g.name.as_str()).collect();
    if control_plane.is_empty() {
        return Ok(false);
    }
    let pki = crate::state::pki::Pki::load(store).await?;
    let etcd_ca_from = pki.as_ref().and_then(|p| p.etcd_ca_from.clone());
    let file_control_plane: Vec<&str> =
        all.iter().filter(|g| g.role == Role::ControlPlane).map(|g| g.name.as_str()).collect();
    let etcd_manager = crate::adopt::etcd_manager::load(store).await?;
    // kops's Secrets' keys, each held by the PKI new machines get.
    let lacking: Vec<&str> = etcd_manager
        .iter()
        .flat_map(|em| &em.encryption_keys)
        .filter(|k| !pki.iter().flat_map(|p| &p.encryption_keys).any(|h| h == *k))
        .map(|k| k.name.as_str())
        .collect();
    let why = match (record["kopsName"].as_str(), record["from"].as_str().and_then(|f| f.strip_prefix("ec2:"))) {
        (Some(kops), _) => match &etcd_manager {
            Some(_) if !lacking.is_empty() => format!(
                "{} was adopted from kops ({kops}): its control plane ({}) is not rolled: the PKI ({}) lacks kops's Secrets' encryption key(s) {}, so its new API servers could not read the Secrets; `pinfleet adopt {} --yes` takes them",
                cluster.metadata.name,
                control_plane.join(", "),
                store.describe(crate::state::pki::PKI_KEY),
                lacking.join(", "),
                cluster.metadata.name
            ),
            Some(em) => match em.members_problem(&file_control_plane) {
                None => return Ok(false),
                Some(why) => format!(
                    "{} was adopted from kops ({kops}): its control plane ({}) is not rolled: {why} ({})",
                    cluster.metadata.name,
                    control_plane.join(", "),
                    store.describe(crate::adopt::etcd_manager::KEY)
                ),
            },
            None => {
                // What the adopt said of it, when it said why.
                let said = record["claims"]["etcdManager"]["said"]
                    .as_str()
                    .filter(|_| record["claims"]["etcdManager"]["taken"] == false)
                    .map(|s| format!(" (adopt said: {})", crate::escape::escaped(s, false)))
                    .unwrap_or_default();
                format!(
                    "{} was adopted from kops ({kops}) without etcd-manager's material (its CAs, manifests and Secrets' keys){said}: its control plane ({}) is not rolled; `pinfleet adopt {} --yes` takes it once kops's state store holds it whole",
                    cluster.metadata.name,
                    control_plane.join(", "),
                    cluster.metadata.name
                )
            }
        },
        (None, Some(_)) if etcd_ca_from.is_some() => return Ok(true),
        (None, Some(tag)) => format!(
            "{} was adopted from kubeadm on EC2 (machines tagged {tag}) without its etcd CA: its control plane ({}) is not rolled (new machines could not join its etcd); the CA is taken by an adopt whose --pki DIR holds kubeadm's etcd/ca.crt and etcd/ca.key",
            cluster.metadata.name,
            control_plane.join(", ")
        ),
        (None, None) => format!(
            "{} was adopted ({}): its control plane ({}) is not rolled",
            cluster.metadata.name,
            store.describe(crate::adopt::CLAIMS_KEY),
            control_plane.join(", ")
        ),
    };
    let nodes: Vec<String> =
        all.iter().filter(|g| g.role != Role::ControlPlane).map(|g| format!("--instance-group {}", g.name)).collect();
    anyhow::bail!(
        "{why}; roll the node groups: `pinfleet upgrade {} --yes {}`. Nothing was changed",
        cluster.metadata.name,
        nodes.join(" ")
    )
}

/// Refuses the roll of a control plane taken over from kops (in the
/// selection `groups`) whose Secrets' keys kops changed since the adopt:
/// kops's `secrets/encryptionconfig`, read again now, holds a key the PKI
/// lacks (kops rotated it), so pinfleet's API servers could not read what
/// kops's wrote under it. Kops's state store gone (after the take-over):
/// nothing to compare, nothing refused.
pub async fn refuse_kops_keys_changed(
    cluster: &Cluster,
    store: &crate::state::Store,
    s3: Option<&dyn crate::state::S3Access>,
    groups: &[String],
) -> Result<()> {
    let picked = |g: &&crate::spec::InstanceGroup| groups.is_empty() || groups.contains(&g.name);
    if !cluster.spec.instance_groups.iter().filter(picked).any(|g| g.role == Role::ControlPlane) {
        return Ok(());
    }
    let Some(em) = crate::adopt::etcd_manager::load(store).await? else { return Ok(()) };
    let Some(now) = crate::adopt::etcd_manager::kops_keys_now(&em, s3).await? else { return Ok(()) };
    let held = crate::state::pki::Pki::load(store).await?.map(|p| p.encryption_keys).unwrap_or_default();
    let lacking: Vec<String> =
        now.iter().filter(|k| !held.contains(k)).map(|k| format!("{} ({})", k.name, k.provider.name())).collect();
    if !lacking.is_empty() {
        anyhow::bail!(
            "kops's Secrets' keys changed since {} was adopted: {}/{} now holds {}, which the PKI lacks, so its new API servers could not read the Secrets written under it; `pinfleet adopt {} --yes` takes it. Nothing was changed",
            cluster.metadata.name,
            em.from,
            crate::adopt::etcd_manager::ENCRYPTION_CONFIG_KEY,
            lacking.join(", "),
            cluster.metadata.name
        );
    }
    Ok(())
}

/// Refuses the roll of a control plane taken over from kubeadm that new
/// machines could not take over from: its ClusterConfiguration (which
/// every joining control-plane machine runs) has no stable endpoint, or
/// one that is a running Node's own address, or names files only the
/// running machines hold ([`crate::kube::kubeadm::control_plane_join_blockers`]).
/// Read from the running cluster before the roll's first write.
pub async fn refuse_kubeadm_control_plane(cluster: &Cluster, client: &kube::Client) -> Result<()> {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    let api = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let at = format!("kube-system/{}", crate::kube::kubeadm::CONFIG_MAP);
    let cm = api.get_opt(crate::kube::kubeadm::CONFIG_MAP).await.with_context(|| format!("reading {at}"))?;
    let name = &cluster.metadata.name;
    let Some(doc) = cm.as_ref().and_then(|c| c.data.as_ref()).and_then(|d| d.get("ClusterConfiguration")) else {
        anyhow::bail!(
            "{at}: no ClusterConfiguration: the control plane of {name} joins with kubeadm's configuration, and there is none. Nothing was changed"
        );
    };
    let nodes = kube::Api::<Node>::all(client.clone()).list(&Default::default()).await.context("listing Nodes")?;
    let addresses: Vec<(String, String)> = nodes
        .items
        .iter()
        .flat_map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let addresses = n.status.iter().flat_map(|s| s.addresses.iter().flatten()).map(|a| a.address.clone());
            // A Node's name is its machine's too (often the host name).
            std::iter::once(name.clone()).chain(addresses).map(move |a| (name.clone(), a))
        })
        .collect();
    let why =
        crate::kube::kubeadm::control_plane_join_blockers(doc, &addresses).map_err(|e| anyhow::anyhow!("{at}: {e}"))?;
    if !why.is_empty() {
        anyhow::bail!(
            "{at}: the control plane of {name} is not rolled: {}. Roll the node groups with --instance-group. Nothing was changed",
            why.join("; ")
        );
    }
    Ok(())
}

/// What each selected group looks like now.
pub fn status(
    cluster: &Cluster,
    p: &Prepared,
    nodes: &BTreeMap<String, NodeState>,
    opts: &Options,
) -> Vec<GroupStatus> {
    let versions = versions(p);
    selected(cluster, opts)
        .into_iter()
        .map(|g| {
            let ms: Vec<_> =
                p.observed.instances.iter().filter(|i| i.is_live() && i.group.as_deref() == Some(&g.name)).collect();
            let needs = |i: &&&crate::cloud::observed::ObservedInstance| {
                opts.force
                    || i.launch_template_version.is_none()
                    || i.launch_template_version != versions.get(&g.name).copied()
                    || nodes.get(&i.id).is_some_and(|n| n.needs_update)
            };
            GroupStatus {
                group: g.name.clone(),
                role: g.role,
                machines: ms.len(),
                needs_update: ms.iter().filter(needs).count(),
                ready: ms.iter().filter(|i| nodes.get(&i.id).is_some_and(|n| n.ready)).count(),
                min: g.min_size,
                desired: g.desired.unwrap_or(g.min_size),
                max: g.max_size,
                nodes: ms.iter().filter_map(|i| nodes.get(&i.id).map(|n| n.name.clone())).collect(),
            }
        })
        .collect()
}

/// The groups' roll settings: control planes first (one at a time), then
/// node groups with their surge, unavailability and a canary.
pub fn group_rolls(cluster: &Cluster, p: &Prepared, opts: &Options) -> (Vec<GroupRoll>, Vec<GroupRoll>) {
    let (mut cp, mut nodes) = (Vec::new(), Vec::new());
    for g in selected(cluster, opts) {
        let desired = g.desired.unwrap_or(g.min_size);
        let force_ids: BTreeSet<String> = if opts.force {
            p.observed.instances.iter().filter(|i| i.group.as_deref() == Some(&g.name)).map(|i| i.id.clone()).collect()
        } else {
            BTreeSet::new()
        };
        // kops's etcd-manager: a member's volume moves from the old
        // machine to its replacement, so the old one goes first (never
        // surged), one machine of the whole control plane at a time.
        let etcd_manager = (g.role == Role::ControlPlane)
            .then_some(p.observed.adopted.as_ref())
            .flatten()
            .filter(|a| a.from.starts_with("kops:"))
            .map(|_| {
                cluster
                    .spec
                    .instance_groups
                    .iter()
                    .filter(|g| g.role == Role::ControlPlane)
                    .map(|g| g.desired.unwrap_or(g.min_size) as usize)
                    .sum::<usize>()
            });
        let limits = match g.role {
            Role::ControlPlane if etcd_manager.is_some() => {
                policy::Limits { desired, surge: 0, floor: desired.saturating_sub(1), canary: false }
            }
            Role::ControlPlane => policy::control_plane_limits(desired),
            Role::Node => policy::node_group_limits(
                desired,
                g.min_size,
                &g.rollout.max_surge,
                &g.rollout.max_unavailable,
                opts.canary,
            ),
        };
        let roll = GroupRoll {
            group: g.name.clone(),
            limits,
            drain_timeout: g.rollout.drain_timeout.0,
            force_drain: opts.force_drain,
            boot_timeout: opts.boot_timeout,
            validate_count: opts.validate_count,
            validate_interval: opts.validate_interval,
            validation_timeout: g.rollout.validation_timeout.0,
            force_ids,
            etcd_members: g.role == Role::ControlPlane && opts.etcd_member_removal && etcd_manager.is_none(),
            etcd_manager,
        };
        match g.role {
            Role::ControlPlane => cp.push(roll),
            Role::Node => nodes.push(roll),
        }
    }
    (cp, nodes)
}

/// Rolls the selected groups of the cluster.
pub async fn roll(
    aws: &Aws,
    cluster: &Cluster,
    p: &Prepared,
    client: kube::Client,
    opts: &Options,
    revision: u64,
    on: &dyn Fn(Event),
) -> Result<Vec<GroupReport>> {
    let machines = AwsMachines::new(aws, cluster, p, revision);
    let nodes = KubeNodes::new(client.clone());
    let (cp, ng) = group_rolls(cluster, p, opts);
    // The groups in roll order: after one, those behind it are still to come.
    let order: Vec<String> = cp.iter().chain(ng.iter()).map(|g| g.group.clone()).collect();
    let after_group = |group: String| -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<()>> + '_>> {
        let client = client.clone();
        let rolling: BTreeSet<String> = order.iter().skip_while(|g| **g != group).skip(1).cloned().collect();
        // As long as the group's own validation may take.
        let settle = cluster
            .spec
            .instance_groups
            .iter()
            .find(|g| g.name == group)
            .map(|g| g.rollout.validation_timeout.0)
            .unwrap_or(Duration::from_secs(300));
        Box::pin(async move {
            gate_with(cluster, &client, &[crate::e2e::Phase::Cluster], &format!("group {group}"), settle, rolling, on)
                .await
        })
    };
    let gate_fn: driver::Gate<'_> = &after_group;
    let kops = adopted_from_kops(cluster, p, cp.iter().chain(ng.iter()).map(|g| g.group.as_str()));
    // A run killed after kops's last machine left its group finds the group empty now.
    if let Some((name, groups)) = &kops {
        sweep_kops(aws, name, groups, on).await?;
    }
    let reports =
        driver::roll(&machines, &nodes, &cp, &ng, opts.max_parallel_groups, on, opts.e2e.then_some(gate_fn)).await?;
    if let Some((name, groups)) = &kops {
        sweep_kops(aws, name, groups, on).await?;
    }
    Ok(reports)
}

/// For a cluster taken over from kops: kops's name for it and the kops
/// instance groups behind the pinfleet groups rolled (the import keeps
/// each one's name in the `kops.k8s.io/instancegroup` label).
fn adopted_from_kops<'a>(
    cluster: &Cluster,
    p: &Prepared,
    rolled: impl Iterator<Item = &'a str>,
) -> Option<(String, Vec<String>)> {
    let name = p.observed.adopted.as_ref()?.from.strip_prefix("kops:")?.to_string();
    let groups = rolled
        .filter_map(|g| cluster.spec.instance_groups.iter().find(|x| x.name == g))
        .map(|g| g.labels.get(crate::cloud::tags::KOPS_INSTANCE_GROUP).cloned().unwrap_or_else(|| g.name.clone()))
        .collect();
    Some((name, groups))
}

/// Deletes kops's groups the roll left empty, saying so.
async fn sweep_kops(aws: &Aws, kops_name: &str, groups: &[String], on: &dyn Fn(Event)) -> Result<()> {
    let swept = crate::cloud::aws::autoscaling::sweep(aws, kops_name, groups).await?;
    for g in &swept.groups {
        on(Event::Kops { message: format!("Auto Scaling group {g} is empty: deleted") });
    }
    for t in &swept.launch_templates {
        on(Event::Kops { message: format!("its launch template {t}: deleted") });
    }
    Ok(())
}

/// One roll under the cluster lock, as `upgrade` and the AMI job run it:
/// the pending changes applied first (new launch-template versions,
/// recorded in history like any apply), then the roll, its progress kept
/// in the state store as it happens ([`crate::rollout::progress`]). When
/// `spec.kubernetesVersion` is not what the cluster runs, the roll is the
/// version upgrade's steps ([`versions`]), each applied and rolled in turn.
/// `on` sees every event (the command shows them).
#[allow(clippy::too_many_arguments)]
pub async fn upgrade(
    aws: &Aws,
    cluster: &Cluster,
    store: &crate::state::Store,
    pki: &Pki,
    client: kube::Client,
    opts: &Options,
    why: &str,
    command: &str,
    on: &dyn Fn(Event),
) -> Result<Vec<GroupReport>> {
    use crate::rollout::progress::{self, Outcome, RollProgress};
    // Whoever asks (upgrade, a fleet rollout, the image job), an adopted
    // cluster's control plane is not rolled.
    if refuse_adopted_control_plane(cluster, store, &opts.groups).await? {
        refuse_kubeadm_control_plane(cluster, &client).await?;
    }
    // A taken-over cluster's machines join by its own API name.
    let adopted = store.get(crate::adopt::CLAIMS_KEY).await?.is_some();
    if adopted {
        crate::kube::kubeadm_join::refuse_another_api_name(&client, cluster).await?;
    }
    // A change to the control plane needs a fresh, verified etcd backup
    // (checked before anything is written).
    let backup = backup_gate(cluster, store, opts, why, on).await?;
    // Replacements join with a token minted now (and the files the
    // control plane's replacements fetch), before any machine is launched.
    crate::state::join::publish_files(store, pki).await?;
    let token = crate::state::join::ensure_fresh(Some(&client), store, chrono::Utc::now()).await?;
    // A cluster taken over gets what kubeadm's joins read.
    let etcd_manager = match adopted {
        true => crate::adopt::etcd_manager::load(store).await?,
        false => None,
    };
    if let Some(em) = &etcd_manager {
        crate::adopt::etcd_manager::publish(store, em).await?;
    }
    let prepared = match adopted {
        true => {
            crate::kube::kubeadm_join::ensure(&client, cluster, &pki.ca_cert, &token.token, etcd_manager.is_some())
                .await?
        }
        false => Vec::new(),
    };
    for line in prepared {
        on(Event::Kops { message: format!("for kubeadm's joins: {line}") });
    }
    let (running, steps) = version_steps(cluster, &client).await?;
    if !steps.is_empty() && !opts.groups.is_empty() {
        anyhow::bail!(
            "a Kubernetes version upgrade rolls every group in its order (control plane first); --instance-group cannot choose"
        );
    }
    // Progress lands in the state store as it happens, from its own task so
    // a slow write never holds up the roll.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    let writer_store = store.clone();
    let mut record = RollProgress::new(why, chrono::Utc::now());
    let writer = tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            if record.record(&e, chrono::Utc::now()) {
                if let Err(err) = writer_store.put_json(progress::KEY, &record).await {
                    tracing::warn!("recording roll progress: {err:#}");
                }
            }
        }
        record
    });
    let forward = |e: Event| {
        let _ = tx.send(e.clone());
        on(e);
    };
    // The backup this change stands on (or why it has none) is said and is history.
    if let Some(line) = backup {
        forward(Event::Backup { message: line.clone() });
        let revision = store.next_revision().await?;
        let record = crate::state::HistoryRecord::of_actions(revision, command, vec![line]);
        store.record(&record.acting_as(aws.caller_identity().await), cluster).await?;
    }
    if !opts.e2e {
        let revision = store.next_revision().await?;
        let record = crate::state::HistoryRecord::of_actions(
            revision,
            command,
            vec!["e2e gates skipped for this roll (--skip-e2e)".into()],
        );
        store.record(&record.acting_as(aws.caller_identity().await), cluster).await?;
    }
    let result = match running {
        Some(running) if !steps.is_empty() => {
            version_upgrade(aws, cluster, store, &client, opts, command, &running, &steps, &forward).await
        }
        _ => match apply_recorded(aws, cluster, store, command, false).await {
            Ok((p, revision)) => roll(aws, cluster, &p, client.clone(), opts, revision, &forward).await,
            Err(e) => Err(e),
        },
    };
    // The platform smoke once the machines are rolled.
    let result = match result {
        Ok(r) if opts.e2e => {
            let phases = [crate::e2e::Phase::Cluster, crate::e2e::Phase::Smoke];
            let settle = opts.boot_timeout;
            gate(cluster, &client, &phases, "the roll", settle, &forward).await.map(|()| r)
        }
        other => other,
    };
    drop(tx);
    let mut record = writer.await.unwrap_or_else(|_| RollProgress::new(why, chrono::Utc::now()));
    let outcome = match &result {
        Ok(r) => Outcome::Done { groups: r.clone() },
        Err(e) => Outcome::Halted { error: format!("{e:#}") },
    };
    record.finish(outcome, chrono::Utc::now());
    store.put_json(progress::KEY, &record).await?;
    result
}

/// Applies what is pending for `cluster` as a new revision, recorded in
/// history; the fresh observation and the revision.
async fn apply_recorded(
    aws: &Aws,
    cluster: &Cluster,
    store: &crate::state::Store,
    command: &str,
    version_step: bool,
) -> Result<(Prepared, u64)> {
    use std::io::Write as _;
    let revision = store.next_revision().await?;
    let (p, applied) = apply_pending(aws, cluster, revision, version_step).await?;
    if let Some(plan) = applied {
        let record = plan.history(revision, command).acting_as(aws.caller_identity().await);
        store.record(&record, cluster).await?;
        writeln!(
            anstream::stderr(),
            "applied the pending changes as revision {revision} (new launch-template versions)"
        )?;
    }
    Ok((p, revision))
}

/// Carries out a version upgrade's steps: the cluster configuration and
/// kubeadm's addons through the API, and each machine step as an apply of
/// the cluster at that step's versions followed by a roll of its groups.
#[allow(clippy::too_many_arguments)]
async fn version_upgrade(
    aws: &Aws,
    cluster: &Cluster,
    store: &crate::state::Store,
    client: &kube::Client,
    opts: &Options,
    command: &str,
    running: &Running,
    steps: &[VStep],
    on: &dyn Fn(Event),
) -> Result<Vec<GroupReport>> {
    let control_planes: Vec<String> =
        cluster.spec.instance_groups.iter().filter(|g| g.role == Role::ControlPlane).map(|g| g.name.clone()).collect();
    // The version each group's launch template carries as the steps go.
    let mut at: BTreeMap<String, Version> = control_planes.iter().map(|g| (g.clone(), running.control_plane)).collect();
    at.extend(running.node_groups.clone());
    let mut reports = Vec::new();
    for step in steps {
        on(Event::VersionStep { step: step.to_string() });
        let groups: Vec<String> = match step {
            VStep::ClusterConfiguration { version } => {
                crate::kube::kubeadm::set_cluster_version(client, *version).await?;
                continue;
            }
            VStep::ClusterAddons { version } => {
                let changed = crate::kube::kubeadm::upgrade_addons(client, *version).await?;
                if !changed.is_empty() {
                    tracing::info!("updated {}", changed.join(", "));
                }
                continue;
            }
            VStep::ControlPlane { version } => {
                for g in &control_planes {
                    at.insert(g.clone(), *version);
                }
                control_planes.clone()
            }
            VStep::NodeGroups { version, groups } => {
                for g in groups {
                    at.insert(g.clone(), *version);
                }
                groups.clone()
            }
        };
        let c = cluster_at(cluster, &at);
        let (p, revision) = apply_recorded(aws, &c, store, command, true).await?;
        let step_opts = Options { groups, ..opts.clone() };
        reports.extend(roll(aws, &c, &p, client.clone(), &step_opts, revision, on).await?);
    }
    Ok(reports)
}
