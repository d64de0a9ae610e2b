//! A cluster's bootstrap, apply and destroy on AWS as library operations:
//! the chain prepare → context → execute under the cluster lock, with the
//! PKI, the kubeconfig and the history record. The commands parse their
//! arguments and call these; the roll (`rollout::upgrade`) reuses the same
//! prepare and execute steps.
//!
//! Effects: AWS through [`Aws`], the state store, and the admin kubeconfig
//! in the local home. What is shown to a person (the plan, progress) goes
//! through the `on_plan` callback and the executor's progress lines.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context as _, Result};

use super::{prepare, Options as ExecOptions, Report};
use crate::cloud::aws::observe::observe;
use crate::cloud::aws::Aws;
use crate::cloud::model;
use crate::plan::Plan;
use crate::render::{KubeconfigParams, Renderer};
use crate::spec::Cluster;
use crate::state::lock::Lock;
use crate::state::pki::Pki;
use crate::state::{home, Store};

/// How one bootstrap or apply runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// First apply: the PKI is created when missing.
    pub bootstrap: bool,
    pub parallelism: usize,
    /// The command line, for the lock and the history record.
    pub command: String,
}

/// What an apply did.
#[derive(Debug)]
pub struct Outcome {
    /// None when the cluster already matched its definition.
    pub report: Option<Report>,
    pub kubeconfig: Option<PathBuf>,
}

/// The plan an apply would run, changing nothing (no bucket, no PKI, no lock).
pub async fn preview(aws: &Aws, cluster: &Cluster, store: Option<&Store>, bootstrap: bool) -> Result<Plan> {
    let pki = match store {
        Some(store) => Pki::load(store).await?,
        None => None,
    };
    let name = &cluster.metadata.name;
    if !bootstrap && pki.is_none() {
        anyhow::bail!("cluster {name} has not been bootstrapped yet: run `pinfleet bootstrap {name}`");
    }
    Ok(prepare::prepare(aws, cluster).await?.plan)
}

/// Makes AWS match the definition: under the lock, with the PKI (created on
/// bootstrap), the plan shown through `on_plan` before anything changes,
/// the admin kubeconfig written, and the revision recorded.
pub async fn apply(
    aws: &Aws,
    cluster: &Cluster,
    store: &Store,
    opts: &Options,
    on_plan: impl Fn(&Plan) -> Result<()>,
) -> Result<Outcome> {
    let name = &cluster.metadata.name;
    Lock::with(store, &opts.command, async {
        let pki = if opts.bootstrap {
            let (pki, created) = Pki::load_or_create(store).await?;
            if created {
                writeln!(anstream::stderr(), "generated the cluster PKI and join token in {}", store.describe("pki/"))?;
            }
            pki
        } else {
            Pki::load(store).await?.with_context(|| {
                format!("cluster {name} has not been bootstrapped yet: run `pinfleet bootstrap {name}`")
            })?
        };
        let prepared = prepare::prepare(aws, cluster).await?;
        for w in &prepared.warnings {
            tracing::warn!("{w}");
        }
        on_plan(&prepared.plan)?;
        join_material(cluster, store, &pki, &prepared).await?;
        let revision = store.next_revision().await?;
        let mut applied = None;
        if !prepared.plan.is_empty() {
            writeln!(anstream::stderr(), "\napplying revision {revision}:")?;
            let ctx = prepared.context(aws, cluster, revision);
            let exec = ExecOptions { parallelism: opts.parallelism, ..Default::default() };
            let report = super::execute(&prepared.plan, ctx.clone(), &exec).await?;
            let host = ctx.lb_dns.lock().await.clone();
            applied = Some((report, host));
        }
        // The API endpoint: a taken-over cluster's own name (its
        // certificates carry no other), else what this run made, else what exists.
        let adopted = prepared.desired.join_host(prepared.observed.adopted.is_some()).map(str::to_string);
        let host = adopted.or_else(|| applied.as_ref().and_then(|(_, h)| h.clone())).or_else(|| {
            match prepared.desired.api_address {
                true => prepared.observed.api_address().and_then(|a| a.public_ip.clone()),
                false => prepared.observed.load_balancer.as_ref().map(|l| l.dns_name.clone()),
            }
        });
        let kubeconfig = match host {
            Some(h) => Some(write_kubeconfig(cluster, &pki, &h)?),
            None => None,
        };
        let plan = &prepared.plan;
        if !plan.is_empty() {
            let record = plan.history(revision, &opts.command).acting_as(aws.caller_identity().await);
            store.record(&record, cluster).await?;
        } else if store.get(crate::state::SPEC_KEY).await?.is_none() {
            store.put_json(crate::state::SPEC_KEY, cluster).await?;
        }
        Ok(Outcome { report: applied.map(|(r, _)| r), kubeconfig })
    })
    .await
}

/// The destroy plan, changing nothing.
pub async fn destroy_plan(aws: &Aws, cluster: &Cluster) -> Result<Plan> {
    let name = &cluster.metadata.name;
    let observed = observe(aws, name, Some(&model::load_balancer_name(name))).await?;
    Ok(crate::plan::destroy(name, &observed))
}

/// Deletes everything tagged for the cluster, in dependency order, under
/// the lock; records the revision; removes the spec, the PKI and the local
/// kubeconfig (the history stays). An endpoint without ELBv2 has no load
/// balancer to delete, so what a refused bootstrap left goes too.
pub async fn destroy(
    aws: &Aws,
    cluster: &Cluster,
    store: &Store,
    command: &str,
    on_plan: impl Fn(&Plan) -> Result<()>,
) -> Result<Report> {
    let name = &cluster.metadata.name;
    Lock::with(store, command, async {
        let observed = observe(aws, name, Some(&model::load_balancer_name(name))).await?;
        let plan = crate::plan::destroy(name, &observed);
        on_plan(&plan)?;
        let desired = model::Desired::skeleton(cluster);
        let revision = store.next_revision().await?;
        let ctx = prepare::context(aws, cluster, desired, &observed, None, revision);
        let report = super::execute(&plan, ctx, &ExecOptions::default()).await?;
        if !plan.is_empty() {
            let record = plan.history(revision, command).acting_as(aws.caller_identity().await);
            store.put_json(&format!("{}{:08}.json", crate::state::HISTORY_PREFIX, revision), &record).await?;
        }
        store.delete(crate::state::SPEC_KEY).await?;
        store.delete(crate::state::pki::PKI_KEY).await?;
        crate::state::join::remove(store).await?;
        let _ = std::fs::remove_file(kubeconfig_path(name));
        Ok(report)
    })
    .await
}

/// Where the admin kubeconfig of an AWS cluster is written.
pub fn kubeconfig_path(cluster: &str) -> PathBuf {
    home().join("kubeconfig").join(format!("{cluster}.yaml"))
}

/// Writes `<home>/kubeconfig/<cluster>.yaml` (mode 0600) for the admin user.
pub fn write_kubeconfig(cluster: &Cluster, pki: &Pki, api_host: &str) -> Result<PathBuf> {
    let path = kubeconfig_path(&cluster.metadata.name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = Renderer::new().kubeconfig(
        cluster,
        &KubeconfigParams {
            server: format!("https://{api_host}:{}", cluster.spec.api.port),
            ca_data: Pki::b64(&pki.ca_cert),
            user: format!("{}-admin", cluster.metadata.name),
            client_cert_data: Pki::b64(&pki.admin_cert),
            client_key_data: Pki::b64(&pki.admin_key),
        },
    )?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(path)
}

/// What this run's machines fetch at boot, in the state store before the
/// first launch: the CA hash and control-plane files, and a bootstrap token
/// (the one `kubeadm init` will register, or, for a running cluster, a
/// fresh one minted through its API server, else the stored one while it
/// has time left).
async fn join_material(cluster: &Cluster, store: &Store, pki: &Pki, prepared: &prepare::Prepared) -> Result<()> {
    use crate::state::join;
    join::publish_files(store, pki).await?;
    let launches =
        prepared.plan.changes.iter().any(|c| matches!(c.op.op(), Some(crate::cloud::ops::Op::LaunchInstances { .. })));
    if !launches {
        return Ok(());
    }
    let control_plane: std::collections::BTreeSet<&str> = cluster
        .spec
        .instance_groups
        .iter()
        .filter(|g| g.role == crate::spec::Role::ControlPlane)
        .map(|g| g.name.as_str())
        .collect();
    let running = prepared
        .observed
        .instances
        .iter()
        .any(|i| i.is_live() && i.group.as_deref().is_some_and(|g| control_plane.contains(g)));
    let now = chrono::Utc::now();
    if !running {
        join::for_init(store, now).await?;
        return Ok(());
    }
    let path = kubeconfig_path(&cluster.metadata.name);
    let client = match path.exists() {
        true => crate::kube::client_from_kubeconfig(&path, crate::kube::Retry::Never).await.ok(),
        false => None,
    };
    match tokio::time::timeout(std::time::Duration::from_secs(15), join::ensure_fresh(client.as_ref(), store, now))
        .await
    {
        Ok(minted) => minted.map(|_| ()),
        // Without an answer in time, the stored token if it has time left.
        Err(_) if client.is_some() => {
            let r = join::ensure_fresh(None, store, now)
                .await
                .context("the cluster's API server did not answer within 15s")?;
            let why = join::NotMinted::Unreachable("no answer within 15s".into());
            tracing::warn!("{}", join::stored_instead(&why, &r));
            Ok(())
        }
        Err(_) => anyhow::bail!("the state store did not give the join token within 15s"),
    }
}
