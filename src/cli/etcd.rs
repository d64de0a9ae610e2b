//! `pinfleet etcd …`: the control plane's etcd backups. `agent` runs on the
//! control-plane machines (the project's image); `backup`, `backups`,
//! `verify`, `gc` and `restore` are the operator's. The work is
//! [`crate::etcd`]'s; this file reads flags and prints.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use serde::Serialize;

use super::GlobalArgs;
use crate::cloud::aws::{Aws, AwsOptions, Target};
use crate::etcd::agent::{self, Taking};
use crate::etcd::conn::EtcdArgs;
use crate::etcd::manifest::{self, Backup};
use crate::etcd::policy::{self, Fate};
use crate::etcd::restore::{self, Phases, Target as Member};
use crate::etcd::scratch::Binaries;
use crate::output::{print_data, table, Format};
use crate::spec::types::BackupSpec;
use crate::state::blob::Retention;
use crate::state::lock::Lock;
use crate::state::Store;

#[derive(Debug, Args)]
pub struct EtcdCmdArgs {
    #[command(subcommand)]
    pub command: EtcdCommand,
}

#[derive(Debug, Subcommand)]
pub enum EtcdCommand {
    /// Take backups on a control-plane machine: a full snapshot every
    /// interval, deltas in between, each verified where etcd's binaries are.
    Agent(AgentArgs),
    /// Take one full backup now, and verify it.
    Backup(AgentArgs),
    /// The cluster's backups: age, revision, size, verified.
    Backups(StoreArgs),
    /// Restore a backup into a scratch etcd and compare it with the live store.
    Verify(VerifyArgs),
    /// Collect the backups the retention tiers no longer keep.
    Gc(StoreArgs),
    /// Bring the control plane's etcd back from a backup.
    Restore(RestoreArgs),
    /// A new encryption key for Secrets at rest (and rewrite them with it).
    RotateKey(RotateArgs),
}

/// The cluster and where its backups are.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    pub cluster: String,
    /// The state store (`s3://bucket/prefix` or `file://dir`); default: the
    /// cluster file's `stateStore`.
    #[arg(long, env = "PINFLEET_STATE_STORE")]
    pub state: Option<String>,
    /// The store's region, with `--state s3://…` (default: the cluster file's).
    #[arg(long, env = "AWS_REGION")]
    pub region: Option<String>,
}

#[derive(Debug, Args)]
pub struct AgentArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// The cluster's Kubernetes version, for the manifest.
    #[arg(long, env = "PINFLEET_KUBERNETES_VERSION", default_value = "unknown")]
    pub kubernetes_version: String,
    /// A full snapshot this often (default: the cluster's `etcd.backups.interval`, else 15m).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub interval: Option<Duration>,
    /// Deltas flushed this often (the RPO; default 30s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub delta_interval: Option<Duration>,
    /// S3 Object Lock for each backup: MODE:DAYS (GOVERNANCE:30, COMPLIANCE:365).
    #[arg(long)]
    pub object_lock: Option<String>,
    /// Do not verify (etcd's binaries are not on this machine).
    #[arg(long)]
    pub no_verify: bool,
    /// The API server's EncryptionConfiguration: its key names are recorded
    /// with each backup (a restore needs them).
    #[arg(long, default_value = "/etc/kubernetes/pki/encryption-config.yaml")]
    pub encryption_config: PathBuf,
    /// Serve the agent's figures for Prometheus at /metrics here.
    #[arg(long)]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The member on this machine, NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]:
    /// the agent carries out `pinfleet etcd restore`'s orders for it.
    #[arg(long, env = "PINFLEET_ETCD_RESTORE_AS")]
    pub restore_as: Option<String>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The backup (default: the newest).
    #[arg(long)]
    pub backup: Option<String>,
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Judge the snapshot alone, without the live store.
    #[arg(long)]
    pub offline: bool,
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The backup (default: the newest verified).
    #[arg(long)]
    pub backup: Option<String>,
    /// Each member to restore. Without this flag the agents restore their
    /// own machines' members (those the backup recorded; each agent runs
    /// with `--restore-as`), the order going through the state store.
    /// NAME=PEER_URL (through the agents, instead of the backup's list), or
    /// NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR] (here, where the data folders
    /// are): the folder is restored (the old data kept aside); with a
    /// static-pod folder, etcd's and the API server's manifests are moved
    /// out while the folder is restored and back after.
    #[arg(long = "member")]
    pub members: Vec<String>,
    /// Replay the deltas after the backup only up to this revision (a point
    /// in time before a mistake: the deltas hold the mistake too).
    #[arg(long, conflicts_with = "no_deltas")]
    pub until: Option<i64>,
    /// Replay no delta: the store comes back as the backup has it.
    #[arg(long)]
    pub no_deltas: bool,
    /// Where the restored members answer (to replay, bump and compact).
    #[command(flatten)]
    pub etcd: EtcdArgs,
    /// Restore even though the live store answers healthy, or from an
    /// unverified or failed backup.
    #[arg(long)]
    pub force: bool,
    /// Leave the revision as the backup has it (not recommended: clients'
    /// caches keep what the restore undid).
    #[arg(long)]
    pub no_bump: bool,
    /// How long the restored members have to answer.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub start_timeout: Duration,
}

pub async fn run(g: &GlobalArgs, args: EtcdCmdArgs) -> Result<ExitCode> {
    match args.command {
        EtcdCommand::Agent(a) => agent_cmd(g, a, false).await,
        EtcdCommand::Backup(a) => agent_cmd(g, a, true).await,
        EtcdCommand::Backups(a) => backups(g, a).await,
        EtcdCommand::Verify(a) => verify(g, a).await,
        EtcdCommand::Gc(a) => gc(g, a).await,
        EtcdCommand::Restore(a) => restore_cmd(g, a).await,
        EtcdCommand::RotateKey(a) => rotate(g, a).await,
    }
}

/// The store, and the cluster's backup settings when its file is here.
async fn open(g: &GlobalArgs, a: &StoreArgs) -> Result<(Store, BackupSpec)> {
    open_for(g, a, false).await
}

/// `create`: a writer makes a missing bucket (versioned, encrypted, private).
async fn open_for(g: &GlobalArgs, a: &StoreArgs, create: bool) -> Result<(Store, BackupSpec)> {
    let loaded = super::render::load_one(g, &a.cluster).ok();
    let spec = loaded.as_ref().map(|l| l.cluster.spec.etcd.backups.clone()).unwrap_or_default();
    let url = match (&a.state, &loaded) {
        (Some(u), _) => u.clone(),
        (None, Some(l)) => l.cluster.spec.state_store.clone(),
        (None, None) => bail!(
            "no cluster file for {} in {} and no --state: say where its backups are (--state s3://bucket/prefix)",
            a.cluster,
            g.clusters_dir.display()
        ),
    };
    let region = a.region.clone().or_else(|| loaded.as_ref().map(|l| l.cluster.spec.cloud.region.clone()));
    let store = if url.starts_with("s3://") {
        let aws = Aws::connect(&AwsOptions::from_env(Target::Aws, region)?).await?;
        if create {
            Store::open(&url, &a.cluster, Some(&aws)).await?
        } else {
            Store::open_existing(&url, &a.cluster, Some(&aws))
                .await?
                .with_context(|| format!("{url}: no such bucket"))?
        }
    } else {
        Store::open(&url, &a.cluster, None).await?
    };
    Ok((store, spec))
}

fn retention(s: Option<&str>) -> Result<Option<Retention>> {
    let Some(s) = s else { return Ok(None) };
    let (mode, days) = s.split_once(':').with_context(|| format!("--object-lock {s}: expected MODE:DAYS"))?;
    let mode = mode.to_ascii_uppercase();
    if mode != "GOVERNANCE" && mode != "COMPLIANCE" {
        bail!("--object-lock {s}: the mode is GOVERNANCE or COMPLIANCE");
    }
    let days: u32 = days.parse().with_context(|| format!("--object-lock {s}: DAYS is a whole number"))?;
    Ok(Some(Retention { mode, until: chrono::Utc::now() + chrono::Duration::days(i64::from(days)) }))
}

async fn agent_cmd(g: &GlobalArgs, a: AgentArgs, once: bool) -> Result<ExitCode> {
    let me: Option<Member> = a.restore_as.as_deref().map(str::parse).transpose().map_err(anyhow::Error::msg)?;
    // The agent waits out a store it cannot reach yet (the machine's network
    // or role still coming up); where its backups go must be known, though.
    let knows_where = a.store.state.is_some() || super::render::load_one(g, &a.store.cluster).is_ok();
    let mut failures = 0u32;
    let (store, mut spec) = loop {
        match open_for(g, &a.store, true).await {
            Ok(opened) => break opened,
            Err(e) if once || !knows_where => return Err(e),
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = agent::retry_after(failures);
                tracing::warn!(failures, "opening the state store: {e:#}; trying again in {wait:?}");
                tokio::time::sleep(wait).await;
            }
        }
    };
    if let Some(i) = a.interval {
        spec.interval.0 = i;
    }
    if let Some(i) = a.delta_interval {
        spec.delta_interval.0 = i;
    }
    let lock = match a.object_lock.as_deref() {
        Some(s) => retention(Some(s))?,
        None => spec.object_lock.as_ref().map(|l| Retention {
            mode: format!("{:?}", l.mode).to_ascii_uppercase(),
            until: chrono::Utc::now() + chrono::Duration::days(i64::from(l.days)),
        }),
    };
    let taking = Taking {
        kubernetes_version: a.kubernetes_version.clone(),
        taken_by: format!("pinfleet etcd {} on {}", if once { "backup" } else { "agent" }, crate::state::whoami().1),
        retention: lock,
        encryption_keys: std::fs::read_to_string(&a.encryption_config)
            .map(|t| agent::encryption_key_names(&t))
            .unwrap_or_default(),
    };
    let bins = if a.no_verify { None } else { Binaries::find() };
    if !a.no_verify && bins.is_none() {
        tracing::warn!(
            "etcd's binaries (etcd, etcdutl) are not here (PINFLEET_ETCD_DIR or PATH): backups are taken unverified"
        );
    }
    if once {
        let t0 = Instant::now();
        let (endpoint, _) = a.etcd.first_answering().await?;
        let m = agent::take(&store, &a.etcd, &endpoint, &taking).await?;
        let took = t0.elapsed();
        let verdict = match &bins {
            Some(b) => Some(crate::etcd::verify::verify(&store, &m, b, Some(&a.etcd)).await?),
            None => None,
        };
        let mut out = anstream::stdout();
        writeln!(
            out,
            "backup {} of {}: revision {}, {} bytes from {} in {:.1}s",
            m.id,
            m.cluster,
            m.revision,
            m.size,
            m.member,
            took.as_secs_f64()
        )?;
        match &verdict {
            Some(v) if v.ok => {
                writeln!(out, "verified by a restore in {:.1}s: {}", v.restore_seconds, v.checks.join("; "))?
            }
            Some(v) => {
                writeln!(out, "NOT verified: {}", v.problems.join("; "))?;
                return Ok(ExitCode::FAILURE);
            }
            None => writeln!(out, "not verified (no etcd binaries here)")?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let figures = crate::etcd::metrics::Shared::default();
    if let Some(listen) = a.metrics_listen {
        let at = crate::etcd::metrics::serve(listen, figures.clone()).await?;
        tracing::info!("the agent's metrics at http://{at}/metrics");
    }
    let stop = super::shutdown_signal();
    let orders = async {
        match &me {
            Some(me) => crate::etcd::order::follow_orders(&store, me, bins.as_ref(), &a.etcd).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = agent::serve(&store, &a.etcd, &spec, &taking, bins.as_ref(), Some(figures)) => r.map(|_| ExitCode::SUCCESS),
        _ = orders => Ok(ExitCode::SUCCESS),
        _ = stop => Ok(ExitCode::SUCCESS),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Row<'a> {
    #[serde(flatten)]
    backup: &'a Backup,
    age_seconds: i64,
    fate: String,
}

async fn backups(g: &GlobalArgs, a: StoreArgs) -> Result<ExitCode> {
    let (store, spec) = open(g, &a).await?;
    let list = agent::list(&store).await?;
    let now = chrono::Utc::now();
    let fates: std::collections::BTreeMap<String, Fate> = policy::fates(&list, &spec, now).into_iter().collect();
    let fate = |id: &str| match fates.get(id) {
        Some(Fate::Keep(why)) => format!("kept: {why}"),
        Some(Fate::Locked(until)) => format!("locked until {}", until.format("%Y-%m-%d")),
        Some(Fate::Collect) => "collected at the next gc".to_string(),
        None => String::new(),
    };
    if g.output != Format::Text {
        let rows: Vec<Row> = list
            .iter()
            .rev()
            .map(|b| Row {
                backup: b,
                age_seconds: (now - b.manifest.taken_at).num_seconds(),
                fate: fate(&b.manifest.id),
            })
            .collect();
        print_data(g.output, &rows)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .rev()
        .map(|b| {
            let age = Duration::from_secs((now - b.manifest.taken_at).num_seconds().max(0) as u64);
            vec![
                b.manifest.id.clone(),
                humantime::format_duration(age).to_string(),
                b.manifest.revision.to_string(),
                human_bytes(b.manifest.size),
                match &b.verdict {
                    Some(v) if v.ok => "yes".to_string(),
                    Some(_) => "FAILED".to_string(),
                    None => "not yet".to_string(),
                },
                fate(&b.manifest.id),
            ]
        })
        .collect();
    let mut out = anstream::stdout();
    if rows.is_empty() {
        writeln!(out, "no etcd backups of {} in {}", a.cluster, store.describe(manifest::BACKUPS))?;
    } else {
        write!(out, "{}", table(&["BACKUP", "AGE", "REVISION", "SIZE", "VERIFIED", "RETENTION"], &rows))?;
    }
    // Agents that failed since the newest backup say why none came.
    let newest = list.iter().map(|b| b.manifest.taken_at).max();
    for t in agent::troubles(&store, newest).await? {
        writeln!(out, "{}", crate::views::text::safe(&policy::trouble_line(&t, now)))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / f64::from(1u32 << 30)),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / f64::from(1u32 << 20)),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

fn pick<'a>(list: &'a [Backup], id: Option<&str>, cluster: &str) -> Result<&'a Backup> {
    match id {
        Some(id) => list
            .iter()
            .find(|b| b.manifest.id == id)
            .with_context(|| format!("no backup {id} of {cluster} (`pinfleet etcd backups {cluster}` lists them)")),
        None => list
            .iter()
            .rev()
            .find(|b| b.verified())
            .or(list.last())
            .with_context(|| format!("{cluster} has no etcd backup")),
    }
}

async fn verify(g: &GlobalArgs, a: VerifyArgs) -> Result<ExitCode> {
    let (store, _) = open(g, &a.store).await?;
    let list = agent::list(&store).await?;
    let b = match &a.backup {
        Some(_) => pick(&list, a.backup.as_deref(), &a.store.cluster)?,
        None => list.last().with_context(|| format!("{} has no etcd backup", a.store.cluster))?,
    };
    let bins =
        Binaries::find().context("verifying needs etcd's binaries (etcd, etcdutl) in PINFLEET_ETCD_DIR or on PATH")?;
    let v = crate::etcd::verify::verify(&store, &b.manifest, &bins, (!a.offline).then_some(&a.etcd)).await?;
    let mut out = anstream::stdout();
    writeln!(
        out,
        "{} {}: restored in {:.1}s",
        b.manifest.id,
        if v.ok { "verified" } else { "FAILED" },
        v.restore_seconds
    )?;
    for c in &v.checks {
        writeln!(out, "  ok    {c}")?;
    }
    for p in &v.problems {
        writeln!(out, "  FAIL  {p}")?;
    }
    Ok(if v.ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

async fn gc(g: &GlobalArgs, a: StoreArgs) -> Result<ExitCode> {
    let (store, spec) = open(g, &a).await?;
    let (collected, waiting) = agent::gc(&store, &spec).await?;
    let mut out = anstream::stdout();
    writeln!(
        out,
        "collected {} backup(s){}",
        collected.len(),
        if collected.is_empty() { String::new() } else { format!(": {}", collected.join(", ")) }
    )?;
    for w in waiting {
        writeln!(out, "kept: {w}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// How `--member` flags read: members restored here (their data folders),
/// or named for the agents.
enum Members {
    Here(Vec<Member>),
    ThroughAgents(Vec<manifest::Peer>),
}

fn members_of(flags: &[String]) -> Result<Members> {
    let here = flags.iter().filter(|f| f.matches('=').count() >= 2).count();
    if here > 0 && here < flags.len() {
        bail!("--member: give every member a data folder (NAME=PEER_URL=DATA_DIR, restored here) or none (NAME=PEER_URL, restored by the agents), not a mix");
    }
    if here > 0 {
        let m = flags.iter().map(|m| m.parse::<Member>()).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
        return Ok(Members::Here(m));
    }
    let peers = flags
        .iter()
        .map(|f| match f.split_once('=') {
            Some((n, u)) if !n.is_empty() && u.starts_with("http") => {
                Ok(manifest::Peer { name: n.to_string(), peer_url: u.to_string() })
            }
            _ => bail!("--member `{f}`: expected NAME=PEER_URL (e.g. cp-a=https://10.0.1.10:2380) or NAME=PEER_URL=DATA_DIR[=MANIFESTS_DIR]"),
        })
        .collect::<Result<_>>()?;
    Ok(Members::ThroughAgents(peers))
}

async fn restore_cmd(g: &GlobalArgs, a: RestoreArgs) -> Result<ExitCode> {
    let mut out = anstream::stdout();
    let mut phases = Phases::default();
    let t = Instant::now();
    // Every check comes before the first write.
    let members = members_of(&a.members)?;
    let (store, spec) = open(g, &a.store).await?;
    let list = agent::list(&store).await?;
    let b = pick(&list, a.backup.as_deref(), &a.store.cluster)?.clone();
    if b.manifest.cluster != a.store.cluster {
        bail!(
            "backup {} is of cluster {}, not {}: refusing to restore another cluster's data",
            b.manifest.id,
            b.manifest.cluster,
            a.store.cluster
        );
    }
    match &b.verdict {
        Some(v) if v.ok => {}
        Some(v) if !a.force => bail!(
            "backup {} failed its verification ({}): refusing without --force",
            b.manifest.id,
            v.problems.join("; ")
        ),
        None if !a.force => bail!(
            "backup {} is not verified (`pinfleet etcd verify {} --backup {}`): refusing without --force",
            b.manifest.id,
            a.store.cluster,
            b.manifest.id
        ),
        _ => writeln!(out, "restoring from an unverified backup (--force)")?,
    }
    if !b.manifest.encryption_keys.is_empty() {
        let have = crate::state::pki::Pki::load(&store).await?.map(|p| p.encryption_key_names()).unwrap_or_default();
        for k in &b.manifest.encryption_keys {
            if !have.contains(k) {
                bail!(
                    "backup {} was written under encryption key {k}, which the cluster's PKI no longer holds: its Secrets could not be read. Nothing was restored",
                    b.manifest.id
                );
            }
        }
    }
    let mut deltas = if a.no_deltas { Vec::new() } else { agent::deltas_after(&store, b.manifest.revision).await? };
    if let Some(u) = a.until {
        if u < b.restored_revision() {
            bail!(
                "--until {u} is before backup {} (revision {}): pick an older backup (`pinfleet etcd backups {}`)",
                b.manifest.id,
                b.restored_revision(),
                a.store.cluster
            );
        }
        deltas.retain(|d| d.from <= u);
    }
    let delta_to = deltas.last().map(|d| a.until.map_or(d.to, |u| d.to.min(u)));
    let all_seen = agent::seen_all(&store).await?;
    let seen = all_seen.iter().max_by_key(|s| s.revision).cloned();
    let seen_lately = all_seen.iter().max_by_key(|s| s.at).cloned();
    let now = chrono::Utc::now();
    writeln!(out, "what will be lost: {}", policy::loss(&b, delta_to, seen.as_ref(), now))?;
    let members = match members {
        Members::Here(m) => m,
        Members::ThroughAgents(given) => {
            let peers = crate::etcd::order::members_for(&b.manifest, &given)?;
            return through_agents(&a, &store, &b, peers, seen.as_ref(), seen_lately.as_ref(), &spec).await;
        }
    };
    if let Ok((endpoint, _)) = a.etcd.first_answering().await {
        if !a.force {
            bail!("etcd answers healthy at {endpoint}: refusing to restore over a live store without --force");
        }
        writeln!(out, "etcd answers at {endpoint}; restoring anyway (--force)")?;
    }
    let bins = Binaries::find().context("restoring needs etcd's binaries (etcdutl) in PINFLEET_ETCD_DIR or on PATH")?;
    phases.time("checks", t, ());

    let t = Instant::now();
    for m in &members {
        if let Some(dir) = &m.manifests_dir {
            restore::stop_static_pods(dir, &m.name)?;
        }
    }
    phases.time("control plane stopped (static pods moved out)", t, ());

    let t = Instant::now();
    let file = std::env::temp_dir().join(format!("pinfleet-restore-{}.db", std::process::id()));
    store.download(&manifest::snapshot_key(&b.manifest.id), &file).await?;
    let (held, sha) = crate::etcd::snapshot::trailer_holds(&file)?;
    if !held || sha != b.manifest.sha256 {
        let _ = std::fs::remove_file(&file);
        bail!("the stored snapshot of {} does not match its checksum: nothing was restored (the members are stopped: move their manifests back to start them as they were)", b.manifest.id);
    }
    phases.time("snapshot downloaded and checked", t, ());

    let t = Instant::now();
    let token = format!("{}-restore-{}", a.store.cluster, now.format("%Y%m%d%H%M%S"));
    let moved = restore::restore_members(&bins, &file, &members, &token);
    let _ = std::fs::remove_file(&file);
    let moved = moved?;
    phases.time(&format!("{} member folder(s) restored (cluster token {token})", members.len()), t, ());
    for m in &moved {
        writeln!(out, "the old data folder was kept at {}", m.display())?;
    }

    let t = Instant::now();
    // etcd first; the API servers once the store is whole again.
    for m in &members {
        if let Some(dir) = &m.manifests_dir {
            restore::start_static_pod(dir, &m.name, restore::ETCD_POD)?;
        }
    }
    writeln!(out, "waiting for the restored members at {}", a.etcd.endpoints.join(","))?;
    let deadline = Instant::now() + a.start_timeout;
    let mut client = loop {
        if let Ok((_, mut c)) = a.etcd.first_answering().await {
            if restore::revision(&mut c).await.is_ok() {
                break c;
            }
        }
        if Instant::now() > deadline {
            bail!("the restored members did not answer within {:?}", a.start_timeout);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    phases.time("members started and answering", t, ());

    let t = Instant::now();
    let r = restore::replay(&mut client, &deltas, b.restored_revision(), a.until).await?;
    phases.time(&format!("{} transaction(s) of deltas replayed (revision {})", r.applied, r.reached), t, ());

    if !a.no_bump {
        let t = Instant::now();
        let to = policy::bump_to(r.revision, seen.as_ref(), spec.delta_interval.0, chrono::Utc::now());
        restore::record_cut(&store, &b.manifest.id, r.reached, to).await?;
        let at = restore::bump_and_compact(&client, to).await?;
        phases.time(&format!("revision bumped to {at} and compacted there (watches relist)"), t, ());
    }
    let t = Instant::now();
    for m in &members {
        if let Some(dir) = &m.manifests_dir {
            restore::start_static_pod(dir, &m.name, restore::API_SERVER_POD)?;
        }
    }
    phases.time("API servers started", t, ());
    writeln!(out, "restored {} from backup {}; each phase's time:", a.store.cluster, b.manifest.id)?;
    write!(out, "{}", phases.render())?;
    Ok(ExitCode::SUCCESS)
}

/// The restore carried out by the agents ([`crate::etcd::order`]): the
/// order written, each member's reports printed as they come, the RTO.
async fn through_agents(
    a: &RestoreArgs,
    store: &Store,
    b: &Backup,
    peers: Vec<manifest::Peer>,
    seen: Option<&manifest::Seen>,
    seen_lately: Option<&manifest::Seen>,
    spec: &BackupSpec,
) -> Result<ExitCode> {
    use crate::etcd::order::{self, Heard, Order};
    let mut out = anstream::stdout();
    let now = chrono::Utc::now();
    // The agents' own word on the live store: one that read it lately says
    // it is up (the operator's machine often cannot reach etcd itself).
    let lately = spec.delta_interval.0.saturating_mul(2).max(Duration::from_secs(60));
    if let Some(s) = seen_lately.filter(|s| (now - s.at).to_std().is_ok_and(|age| age < lately)) {
        let age = humantime::format_duration(Duration::from_secs((now - s.at).num_seconds().max(0) as u64));
        if !a.force {
            bail!(
                "etcd answered the agent on {} {age} ago (revision {}): refusing to restore over a live store without --force",
                s.member,
                s.revision
            );
        }
        writeln!(out, "etcd answered the agent on {} {age} ago; restoring anyway (--force)", s.member)?;
    }
    let o = Order {
        id: format!("{}-{}", now.format("%Y%m%dT%H%M%S%.3fZ"), b.manifest.id),
        cluster: a.store.cluster.clone(),
        backup: b.manifest.id.clone(),
        sha256: b.manifest.sha256.clone(),
        revision: b.restored_revision(),
        token: format!("{}-restore-{}", a.store.cluster, now.format("%Y%m%d%H%M%S")),
        members: peers,
        issued_at: now,
        by: crate::state::whoami().0,
        bump: !a.no_bump,
        until: if a.no_deltas { Some(b.restored_revision()) } else { a.until },
        seen: seen.cloned(),
        delta_interval_seconds: spec.delta_interval.0.as_secs(),
    };
    let t0 = Instant::now();
    store.put_json(order::ORDER, &o).await?;
    writeln!(
        out,
        "restore order {} written: {} member(s) ({}) restore from backup {} through their agents",
        o.id,
        o.members.len(),
        o.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", "),
        o.backup
    )?;
    let render =
        |phases: &[(String, f64)]| -> String { phases.iter().map(|(n, s)| format!("  {s:>8.1}s  {n}\n")).collect() };
    let f = order::conduct(store, &o, a.start_timeout, &mut |heard| {
        let said = match heard {
            Heard::Prepared(m, r) if r.ok => {
                format!("member {m} prepared (its data not touched yet):\n{}", render(&r.phases))
            }
            Heard::Prepared(m, r) => format!("member {m} could not prepare: {}\n", r.error.clone().unwrap_or_default()),
            Heard::Decided(d) if d.go => "every member prepared: go\n".to_string(),
            Heard::Decided(d) => format!("called off: {}\n", d.reason),
            Heard::Restored(m, r) if r.ok => format!("member {m} restored:\n{}", render(&r.phases)),
            Heard::Restored(m, r) => format!("member {m} FAILED: {}\n", r.error.clone().unwrap_or_default()),
        };
        let _ = write!(anstream::stdout(), "{said}");
    })
    .await?;
    write!(out, "{}", render(&f.phases))?;
    if !f.ok {
        bail!(
            "the restore's last steps failed: {}; the API servers stay stopped: mend it and run the restore again",
            f.error.unwrap_or_default()
        );
    }
    writeln!(out, "restored {} from backup {} at revision {}; API servers started", o.cluster, o.backup, f.revision)?;
    writeln!(out, "  {:>8.1}s  in all, from the order to the store answering (the RTO)", t0.elapsed().as_secs_f64())?;
    Ok(ExitCode::SUCCESS)
}

/// `pinfleet etcd rotate-key CLUSTER`: a new encryption key for Secrets.
#[derive(Debug, Args)]
pub struct RotateArgs {
    pub cluster: String,
    /// Do it (without it: what would happen).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// After the API servers run with the new key, rewrite every Secret
    /// through this cluster's API (each is then encrypted with it).
    #[arg(long)]
    pub rewrite_secrets: bool,
    /// Kubeconfig of the cluster, for --rewrite-secrets.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub cloud: super::cloud::CloudArgs,
}

pub async fn rotate(g: &GlobalArgs, a: RotateArgs) -> Result<ExitCode> {
    let s = super::cloud::Session::open(g, &a.cluster, &a.cloud).await?;
    let name = s.name().to_string();
    let store =
        s.store(false).await?.with_context(|| format!("cluster {name} has no state store yet: bootstrap it first"))?;
    let mut out = anstream::stdout();
    if a.rewrite_secrets {
        let kubeconfig = a.cloud.target.kubeconfig_or(a.kubeconfig.as_deref(), &name);
        let client = crate::kube::client_from_kubeconfig(&kubeconfig, crate::kube::Retry::Never).await?;
        let pki = crate::state::pki::Pki::load(&store)
            .await?
            .with_context(|| format!("cluster {name} has not been bootstrapped"))?;
        let newest = pki.encryption_key_names().into_iter().next().context("the PKI holds no encryption key")?;
        let (n, already) = rewrite_secrets(&client, &newest).await?;
        writeln!(out, "rewrote {n} Secret(s) in {name} under key {newest} ({already} already were): each is written with the API servers' newest key")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut pki = crate::state::pki::Pki::load(&store)
        .await?
        .with_context(|| format!("cluster {name} has not been bootstrapped"))?;
    let key = crate::state::pki::EncryptionKey::generate(chrono::Utc::now());
    if !a.yes {
        writeln!(
            out,
            "would add encryption key {} before {} (kept: a backup written under an older key needs it)",
            key.name,
            pki.encryption_key_names().join(", ")
        )?;
        writeln!(out, "Nothing changed. Run `pinfleet etcd rotate-key {name} --yes`.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    Lock::with(&store, &command, async {
        pki.encryption_keys.insert(0, key.clone());
        store.put_json(crate::state::pki::PKI_KEY, &pki).await?;
        crate::state::join::publish_files(&store, &pki).await?;
        let revision = store.next_revision().await?;
        let rec = crate::state::HistoryRecord::of_actions(
            revision,
            &command,
            vec![format!(
                "encryption key {} added (Secrets are written with it once the API servers restart)",
                key.name
            )],
        );
        store.record(&rec.acting_as(s.aws.caller_identity().await), &s.loaded.cluster).await
    })
    .await?;
    writeln!(
        out,
        "added encryption key {} to {name}; the control-plane machines fetch it as they boot. Next:",
        key.name
    )?;
    writeln!(out, "  1. roll the control plane so every API server reads it: pinfleet upgrade {name} -g control-plane --force --yes")?;
    writeln!(out, "  2. rewrite every Secret with it: pinfleet etcd rotate-key {name} --rewrite-secrets")?;
    Ok(ExitCode::SUCCESS)
}

/// The annotation naming the key a Secret was last rewritten under.
pub const REWRITTEN_UNDER: &str = "pinfleet.dev/encryption-key";

/// Writes every Secret again, marked with `key` (so the write happens even
/// where the API server would skip an unchanged object, and a run cut off
/// resumes where it stopped): the API server encrypts each with its newest
/// key. A Secret changed meanwhile (a conflict) is read again and retried.
/// (rewritten, already under `key`).
pub async fn rewrite_secrets(client: &kube::Client, key: &str) -> Result<(usize, usize)> {
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::{Api, ListParams, PostParams};
    let all: Api<Secret> = Api::all(client.clone());
    let list = all.list(&ListParams::default()).await.context("listing Secrets")?;
    let mut n = 0usize;
    let mut already = 0usize;
    for sec in list.items {
        let (Some(ns), Some(name)) = (sec.metadata.namespace.clone(), sec.metadata.name.clone()) else { continue };
        if sec.metadata.annotations.as_ref().and_then(|a| a.get(REWRITTEN_UNDER)).is_some_and(|k| k == key) {
            already = already.saturating_add(1);
            continue;
        }
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let mut current = sec;
        for attempt in 0..5 {
            current
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(REWRITTEN_UNDER.to_string(), key.to_string());
            match api.replace(&name, &PostParams::default(), &current).await {
                Ok(_) => {
                    n = n.saturating_add(1);
                    break;
                }
                Err(kube::Error::Api(e)) if e.code == 409 && attempt < 4 => {
                    current = api.get(&name).await.with_context(|| format!("reading Secret {ns}/{name}"))?;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => break,
                Err(e) => return Err(anyhow::Error::new(e).context(format!("rewriting Secret {ns}/{name}"))),
            }
        }
    }
    Ok((n, already))
}
