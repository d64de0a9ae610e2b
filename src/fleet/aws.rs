//! The fleet driver's clusters on AWS: each cluster read from its launch
//! templates, rolled by the same roll `upgrade` runs (under the cluster's
//! own lock, with its e2e gates), and gated with `pinfleet e2e`'s cluster
//! and smoke phases. A rollout's target becomes each cluster's snapshot
//! here: an AMI id checked in the cluster's region, `newest` (each group's
//! own selector), or a name pattern resolved with each group's owners and
//! architecture.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use chrono::{DateTime, Utc};

use super::rollout::Snapshot;
use super::run::Fleet;
use super::Target;
use crate::cloud::aws::{images, observe, Aws};
use crate::rollout::driver::Event;
use crate::spec::{Cluster, Image, ImageSelector};
use crate::state::lock::Lock;
use crate::state::Store;

pub struct Member {
    pub cluster: Cluster,
    pub aws: Aws,
    pub kubeconfig: PathBuf,
}

/// Shows one cluster's roll events.
pub type OnEvent = Box<dyn Fn(&str, Event) + Send + Sync>;

pub struct AwsFleet {
    pub members: BTreeMap<String, Member>,
    /// Clusters whose account refused (the role could not be assumed, it
    /// landed elsewhere, or the account denies its calls), and why: only
    /// they stop; the fleet goes on with the rest where the stage allows.
    pub refused: std::sync::Mutex<BTreeMap<String, String>>,
    pub roll: crate::rollout::run::Options,
    pub command: String,
    /// Each cluster's roll events.
    pub on: OnEvent,
}

/// What a cluster's machines run, in words (pure): each group's images with
/// how many machines run each, `general: ami-1 ×2, ami-2 ×1; cp: ami-1 ×3`.
pub fn machines_run(by_group: &BTreeMap<String, BTreeMap<String, usize>>) -> String {
    if by_group.is_empty() {
        return "no machine".to_string();
    }
    by_group
        .iter()
        .map(|(g, images)| {
            let images: Vec<String> = images.iter().map(|(i, n)| format!("{i} ×{n}")).collect();
            format!("{g}: {}", images.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Each named cluster's AWS connection, in its region and its account
/// (one per region and account: one assumed role per account and region,
/// named for the clusters it serves), or why its account refused. A fleet
/// reads and writes each cluster's own things (its machines, its state
/// store, its locks) as that cluster's account, never as the caller's.
pub async fn connections(
    folder: &super::Folder,
    names: &[String],
    target: crate::cloud::aws::Target,
) -> Result<BTreeMap<String, std::result::Result<Aws, String>>> {
    let chosen: Vec<&crate::spec::Loaded> =
        folder.loaded.iter().filter(|l| names.contains(&l.cluster.metadata.name)).collect();
    type Place = (String, Option<crate::spec::Account>);
    let mut places: BTreeMap<Place, Vec<String>> = BTreeMap::new();
    for l in &chosen {
        let c = &l.cluster;
        places
            .entry((c.spec.cloud.region.clone(), c.spec.cloud.account.clone()))
            .or_default()
            .push(c.metadata.name.clone());
    }
    let mut out = BTreeMap::new();
    for ((region, account), clusters) in places {
        let mut opts = crate::cloud::aws::AwsOptions::from_env(target, Some(region.clone()))?;
        opts.role = account.clone().map(|account| crate::cloud::aws::account::RoleFor {
            account,
            cluster: clusters.join(","),
            command: "fleet".into(),
        });
        let connected = match Aws::connect(&opts).await {
            Ok(a) => Ok(a),
            // Without an account of its own, the caller's credentials
            // failing is the whole fleet's problem.
            Err(e) if account.is_none() => return Err(e),
            Err(e) => Err(format!("{e:#}")),
        };
        for name in clusters {
            out.insert(name, connected.clone());
        }
    }
    Ok(out)
}

/// Each cluster's connection, as [`connections`] made them.
pub type Connections = BTreeMap<String, std::result::Result<Aws, String>>;

impl AwsFleet {
    /// The named clusters of the folder, each with an AWS connection in its
    /// region (one per region) and its kubeconfig.
    pub async fn connect(
        folder: &super::Folder,
        names: &[String],
        target: crate::cloud::aws::Target,
        kubeconfig: &dyn Fn(&str) -> PathBuf,
        roll: crate::rollout::run::Options,
        command: String,
        on: OnEvent,
    ) -> Result<AwsFleet> {
        let chosen: Vec<&crate::spec::Loaded> =
            folder.loaded.iter().filter(|l| names.contains(&l.cluster.metadata.name)).collect();
        let mut connections = connections(folder, names, target).await?;
        let mut members = BTreeMap::new();
        let mut refused = BTreeMap::new();
        for l in chosen {
            let c = &l.cluster;
            let name = c.metadata.name.clone();
            match connections.remove(&name) {
                Some(Ok(aws)) => {
                    members.insert(name.clone(), Member { cluster: c.clone(), aws, kubeconfig: kubeconfig(&name) });
                }
                Some(Err(why)) => {
                    refused.insert(name, why);
                }
                None => {}
            }
        }
        Ok(AwsFleet { members, refused: std::sync::Mutex::new(refused), roll, command, on })
    }

    fn member(&self, name: &str) -> Result<&Member> {
        if let Some(why) = self.refused.lock().expect("refused").get(name) {
            bail!("cluster {name}'s account refused: {why}");
        }
        self.members.get(name).with_context(|| format!("cluster {name} is not in the clusters folder"))
    }

    /// The clusters whose account refused, and why.
    pub fn refusals(&self) -> BTreeMap<String, String> {
        self.refused.lock().expect("refused").clone()
    }

    async fn client(&self, m: &Member) -> Result<kube::Client> {
        crate::kube::client_from_kubeconfig(&m.kubeconfig, crate::kube::Retry::Never)
            .await
            .with_context(|| format!("connecting to {} with {}", m.cluster.metadata.name, m.kubeconfig.display()))
    }

    /// The plan with each cluster's from (what it runs now, or why that
    /// could not be read) and to (the target there).
    pub async fn plan(
        &self,
        folder: &super::Folder,
        target: &Target,
        to: &BTreeMap<String, Snapshot>,
    ) -> super::FleetPlan {
        // Every cluster read at once (each is an observation and an API call).
        let staged = folder.staged();
        let reads = futures::future::join_all(staged.iter().map(|name| self.current(name))).await;
        let present: BTreeMap<String, Result<Snapshot>> = staged.into_iter().zip(reads).collect();
        let from: BTreeMap<String, String> = present
            .iter()
            .map(|(name, read)| {
                let now = match read {
                    Ok(s) => s.summary(),
                    Err(e) => format!("? ({e:#})"),
                };
                (name.clone(), now)
            })
            .collect();
        let mut p = super::plan(&folder.spec, &folder.members, target, &from, Utc::now());
        for c in p.stages.iter_mut().flat_map(|s| s.clusters.iter_mut()) {
            if let Some(t) = to.get(&c.cluster) {
                c.to = match present.get(&c.cluster) {
                    Some(Ok(now)) => t.over(now).summary(),
                    _ => t.summary(),
                };
            }
        }
        p
    }

    /// Each cluster's target snapshot (reads only).
    pub async fn targets(&self, target: &Target, now: DateTime<Utc>) -> Result<BTreeMap<String, Snapshot>> {
        let reads = self.members.iter().map(|(name, m)| async move {
            let read = to(m, target, now).await.with_context(|| format!("cluster {name}"));
            (name.clone(), m.aws.account().is_some(), read)
        });
        let mut to: BTreeMap<String, Snapshot> = BTreeMap::new();
        for (name, own_account, read) in futures::future::join_all(reads).await {
            match read {
                Ok(snap) => {
                    to.insert(name, snap);
                }
                // A cluster in an account of its own that refuses stops
                // alone; the others' targets stand.
                Err(e) if own_account && crate::cloud::aws::account::is_refusal(&e) => {
                    self.refused.lock().expect("refused").insert(name, format!("{e:#}"));
                }
                Err(e) => return Err(e),
            }
        }
        if let Target::Channel(rc) = target {
            if to.values().all(|s| s.images.is_empty()) {
                bail!(
                    "no instance group of the fleet follows channel {rc} (a group follows one with `image: {{channel: CHANNEL, recipe: RECIPE}}`)"
                );
            }
        }
        Ok(to)
    }
}

/// What `target` means for one cluster.
async fn to(m: &Member, target: &Target, now: DateTime<Utc>) -> Result<Snapshot> {
    let groups = &m.cluster.spec.instance_groups;
    let images = match target {
        Target::Workload(w) => {
            bail!("workload {w} is delivered to member clusters (`pinfleet delivery`), not rolled onto machines")
        }
        Target::KubernetesVersion(v) => {
            if crate::spec::versions::Version::parse(v).is_none() {
                bail!("--kubernetes-version {v} is not a version like 1.33.4");
            }
            return Ok(Snapshot { kubernetes_version: Some(v.clone()), ..Default::default() });
        }
        Target::Ami(id) if id.starts_with("ami-") => {
            let region = &m.cluster.spec.cloud.region;
            let found = match crate::cloud::aws::sdk(
                "DescribeImages",
                m.aws.ec2.describe_images().image_ids(id).send().await,
            ) {
                Ok(o) => o.images().iter().any(|i| i.image_id() == Some(id.as_str())),
                // EC2 answers an unknown or malformed id with an error, not an empty list.
                Err(e) if format!("{e:#}").contains("InvalidAMIID") => false,
                Err(e) => return Err(e),
            };
            if !found {
                bail!("image {id} does not exist in {region} (AMI ids are per region)");
            }
            groups.iter().map(|g| (g.name.clone(), id.clone())).collect()
        }
        Target::Channel(rc) => {
            let Some((recipe, channel)) = target.channel() else {
                bail!("--channel {rc} is not RECIPE/CHANNEL (e.g. node/stable)")
            };
            let region = &m.cluster.spec.cloud.region;
            let following: Vec<&str> = groups
                .iter()
                .filter(|g| g.image.channel.as_deref() == Some(channel) && g.image.recipe.as_deref() == Some(recipe))
                .map(|g| g.name.as_str())
                .collect();
            if following.is_empty() {
                // Nothing of this cluster follows the channel: its target is what it runs.
                return Ok(Snapshot::default());
            }
            let Some(id) = crate::cloud::aws::channels::current(&m.aws, recipe, channel).await? else {
                bail!(
                    "channel {channel} of recipe {recipe} has never been written in {region} (`pinfleet ami promote`)"
                )
            };
            following.into_iter().map(|g| (g.to_string(), id.clone())).collect()
        }
        Target::Ami(newest) if newest == "newest" => {
            let (resolved, _) = images::resolve(&m.aws, &m.cluster, now).await?;
            resolved.into_iter().map(|(g, i)| (g, i.id)).collect()
        }
        Target::Ami(pattern) => {
            let mut out = BTreeMap::new();
            for g in groups {
                let Some(sel) = &g.image.selector else {
                    bail!("group {} pins its image by id; a name pattern needs a selector's owners", g.name)
                };
                let sel = ImageSelector { name: pattern.clone(), ..sel.clone() };
                let found = images::candidates(&m.aws, &sel).await?;
                let Some(i) = crate::ami::select(&found, pattern, sel.architecture.as_str(), now) else {
                    bail!("no available image named {pattern} owned by {} for group {}", sel.owners.join(", "), g.name)
                };
                out.insert(g.name.clone(), i.id.clone());
            }
            out
        }
    };
    Ok(Snapshot { images, ..Default::default() })
}

/// The cluster as the rollout rolls it: each group on its target image, the
/// target Kubernetes version.
pub fn cluster_at(cluster: &Cluster, to: &Snapshot) -> Cluster {
    let mut c = cluster.clone();
    for g in &mut c.spec.instance_groups {
        if let Some(id) = to.images.get(&g.name) {
            let accelerator = g.image.accelerator;
            g.image = Image { id: Some(id.clone()), selector: None, channel: None, recipe: None, accelerator };
        }
    }
    if let Some(v) = &to.kubernetes_version {
        c.spec.kubernetes_version = v.clone();
    }
    c
}

impl Fleet for AwsFleet {
    async fn current(&self, name: &str) -> Result<Snapshot> {
        let m = self.member(name)?;
        let observed = observe::observe(&m.aws, name, None).await?;
        let mut snap = Snapshot::default();
        for t in &observed.launch_templates {
            if let Some(d) = &t.latest {
                snap.images.insert(t.group.clone(), d.image_id.clone());
                snap.launch_template_versions.insert(t.group.clone(), t.latest_version);
            }
        }
        if snap.images.is_empty() {
            bail!("cluster {name} has no launch templates: bootstrap it first");
        }
        // The version the control plane runs; the file's when the API cannot say.
        let running = match self.client(m).await {
            Ok(client) => crate::kube::kubeadm::running(&client).await.ok().flatten(),
            Err(_) => None,
        };
        snap.kubernetes_version =
            Some(running.map_or_else(|| m.cluster.spec.kubernetes_version.clone(), |r| r.control_plane.to_string()));
        Ok(snap)
    }

    async fn running(&self, name: &str) -> Result<String> {
        let m = self.member(name)?;
        let observed = observe::observe(&m.aws, name, None).await?;
        let mut by_group: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for i in observed.instances.iter().filter(|i| matches!(i.state.as_str(), "running" | "pending")) {
            let group = i.group.clone().unwrap_or_else(|| "(no group)".into());
            *by_group.entry(group).or_default().entry(i.image_id.clone()).or_default() += 1;
        }
        Ok(machines_run(&by_group))
    }

    async fn roll(&self, name: &str, to: &Snapshot, why: &str) -> Result<()> {
        let m = self.member(name)?;
        let cluster = cluster_at(&m.cluster, to);
        let url = &cluster.spec.state_store;
        let store = Store::open(url, name, Some(&m.aws)).await.with_context(|| format!("opening state store {url}"))?;
        let pki = crate::state::pki::Pki::load(&store)
            .await?
            .with_context(|| format!("cluster {name} has not been bootstrapped"))?;
        let client = self.client(m).await?;
        let on = |e: Event| (self.on)(name, e);
        Lock::with(&store, &self.command, async {
            crate::rollout::run::upgrade(&m.aws, &cluster, &store, &pki, client, &self.roll, why, &self.command, &on)
                .await
                .map(|_| ())
        })
        .await
    }

    async fn gate(&self, name: &str) -> Result<()> {
        let m = self.member(name)?;
        let client = self.client(m).await?;
        let phases = [crate::e2e::Phase::Cluster, crate::e2e::Phase::Smoke];
        let on = |e: Event| (self.on)(name, e);
        crate::rollout::run::gate(&m.cluster, &client, &phases, "the stage's soak", self.roll.boot_timeout, &on).await
    }
}

/// The fleet's book (its state store, in the first staged cluster's region)
/// and that AWS connection; no cluster's API is contacted. `create`: make
/// a missing S3 bucket (else a missing one means no rollout was started).
pub async fn open_book(
    folder: &super::Folder,
    target: crate::cloud::aws::Target,
    create: bool,
) -> Result<(super::run::Book, Aws)> {
    let staged = folder.staged();
    let url = folder.state_store(&staged)?;
    let region = folder
        .loaded
        .iter()
        .find(|l| staged.contains(&l.cluster.metadata.name))
        .map(|l| l.cluster.spec.cloud.region.clone());
    let aws = Aws::connect(&crate::cloud::aws::AwsOptions::from_env(target, region)?).await?;
    let store = if create {
        Some(Store::open(&url, crate::state::lock::FLEET, Some(&aws)).await)
    } else {
        Store::open_existing(&url, crate::state::lock::FLEET, Some(&aws)).await.transpose()
    };
    let store = store
        .with_context(|| format!("the fleet's state store {url} does not exist: no fleet rollout has been started"))?
        .with_context(|| format!("opening the fleet's state store {url}"))?;
    Ok((super::run::Book { store }, aws))
}

/// Each rolling cluster's roll progress record (from its own state store),
/// when it belongs to this attempt.
pub async fn rolling_progress(
    folder: &super::Folder,
    r: &super::rollout::FleetRollout,
    aws: &Connections,
) -> Result<BTreeMap<String, Option<crate::rollout::progress::RollProgress>>> {
    use crate::rollout::progress::{RollProgress, KEY};
    let mut out = BTreeMap::new();
    for (_, c) in r.clusters().filter(|(_, c)| c.state == super::rollout::ClusterState::Rolling) {
        let Some(l) = folder.loaded.iter().find(|l| l.cluster.metadata.name == c.name) else { continue };
        // A cluster whose account refused shows no progress (its row says the refusal).
        let Some(Ok(aws)) = aws.get(&c.name) else { continue };
        let Some(store) = Store::open_existing(&l.cluster.spec.state_store, &c.name, Some(aws)).await? else {
            continue;
        };
        let progress = store.get_json::<RollProgress>(KEY).await?;
        // An older roll's record says nothing of this one.
        let progress =
            progress.filter(|p| c.started_at.is_some_and(|t| p.started_at >= t - chrono::Duration::seconds(5)));
        out.insert(c.name.clone(), progress);
    }
    Ok(out)
}

/// The cluster locks held on clusters the rollout has not rolled yet (by
/// an `upgrade`, an AMI job, another tool's run): each such cluster waits
/// for that run to end.
pub async fn pending_locks(
    folder: &super::Folder,
    r: &super::rollout::FleetRollout,
    aws: &Connections,
) -> Result<BTreeMap<String, crate::state::lock::LockInfo>> {
    use crate::state::lock::{LockInfo, LOCK_KEY};
    let mut out = BTreeMap::new();
    for (_, c) in r.clusters().filter(|(_, c)| c.state == super::rollout::ClusterState::Pending) {
        let Some(l) = folder.loaded.iter().find(|l| l.cluster.metadata.name == c.name) else { continue };
        let Some(Ok(aws)) = aws.get(&c.name) else { continue };
        let Some(store) = Store::open_existing(&l.cluster.spec.state_store, &c.name, Some(aws)).await? else {
            continue;
        };
        if let Some(info) = store.get_json::<LockInfo>(LOCK_KEY).await? {
            out.insert(c.name.clone(), info);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_machines_run_names_each_groups_images_with_their_counts() {
        let mut by: std::collections::BTreeMap<String, std::collections::BTreeMap<String, usize>> = Default::default();
        assert_eq!(super::machines_run(&by), "no machine");
        by.entry("general".into()).or_default().insert("ami-new".into(), 1);
        by.entry("general".into()).or_default().insert("ami-old".into(), 2);
        by.entry("control-plane".into()).or_default().insert("ami-new".into(), 3);
        assert_eq!(super::machines_run(&by), "control-plane: ami-new ×3; general: ami-new ×1, ami-old ×2");
    }
}
