//! `pinfleet etcd rotate-key CLUSTER`: a new encryption key for Secrets at
//! rest, added before the older ones in the cluster's PKI (a backup
//! written under an older key still needs it), and with
//! `--rewrite-secrets` every Secret written again under it through the
//! cluster's API.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;

use crate::cli::GlobalArgs;
use crate::state::lock::Lock;

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
    pub cloud: crate::cli::cloud::CloudArgs,
}

pub async fn run(g: &GlobalArgs, a: RotateArgs) -> Result<ExitCode> {
    let s = crate::cli::cloud::Session::open(g, &a.cluster, &a.cloud).await?;
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
