//! `pinfleet etcd import-kops CLUSTER`: one of etcd-manager's backups, from
//! the kops state store the cluster was imported from, copied in as the
//! cluster's own backup, to verify and restore as any other. The reading
//! and writing is [`crate::etcd::kops`]'s; this file chooses and prints.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::Args;

use super::{open_for, StoreArgs};
use crate::cli::GlobalArgs;
use crate::etcd::agent::Taking;
use crate::etcd::kops;
use crate::output::{print_data, Format};
use crate::state::Store;

#[derive(Debug, Args)]
pub struct ImportKopsArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// kops's state store and the cluster's name in it (`s3://BUCKET/NAME`,
    /// `file://DIR/NAME`); default: the cluster file's
    /// `pinfleet.dev/imported-from` (what `pinfleet import kops` read).
    #[arg(long, value_name = "URL")]
    pub kops_state: Option<String>,
    /// etcd-manager's backup, by its folder's name
    /// (`2026-11-29T10:00:00Z-000001`); default: the newest.
    #[arg(long)]
    pub backup: Option<String>,
    /// List etcd-manager's backups; import nothing.
    #[arg(long)]
    pub list: bool,
    /// Lock the import as backups are locked, MODE:DAYS (default: the
    /// cluster file's `etcd.backups.objectLock`).
    #[arg(long, value_name = "MODE:DAYS")]
    pub object_lock: Option<String>,
}

pub async fn run(g: &GlobalArgs, a: ImportKopsArgs) -> Result<ExitCode> {
    let loaded = crate::cli::render::load_one(g, &a.store.cluster).ok();
    let url = match (&a.kops_state, &loaded) {
        (Some(u), _) => u.clone(),
        (None, Some(l)) => match l.cluster.metadata.annotations.get("pinfleet.dev/imported-from") {
            Some(u) => u.clone(),
            None => bail!(
                "{}: no metadata.annotations[pinfleet.dev/imported-from] (the file `pinfleet import kops` writes has it): say where kops's state store is with --kops-state",
                a.store.cluster
            ),
        },
        (None, None) => bail!("no cluster file for {}: say where kops's state store is with --kops-state", a.store.cluster),
    };
    let kops = open_kops(&url, &a.store).await?;
    let names = kops::list(&kops).await?;
    if a.list {
        match g.output {
            Format::Text => {
                let mut out = anstream::stdout();
                if names.is_empty() {
                    writeln!(out, "no backup of etcd-manager's under {}", kops.describe(kops::MAIN))?;
                }
                for n in &names {
                    writeln!(out, "{n}")?;
                }
            }
            other => print_data(other, &names)?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    let name = match &a.backup {
        Some(b) if names.contains(b) => b.clone(),
        Some(b) => bail!(
            "{}{b}/: no backup of etcd-manager's there (`pinfleet etcd import-kops {} --list` lists them): nothing was imported",
            kops.describe(kops::MAIN),
            a.store.cluster
        ),
        None => names.last().cloned().with_context(|| {
            format!("no backup of etcd-manager's under {}: nothing was imported", kops.describe(kops::MAIN))
        })?,
    };
    let (store, spec) = open_for(g, &a.store, true).await?;
    let lock = super::lock_for(a.object_lock.as_deref(), &spec)?;
    let taking = Taking {
        kubernetes_version: loaded.as_ref().map(|l| l.cluster.spec.kubernetes_version.to_string()).unwrap_or_default(),
        taken_by: format!("pinfleet etcd import-kops on {}", crate::state::whoami().1),
        retention: lock,
        encryption_keys: Vec::new(),
    };
    let work = std::env::temp_dir().join(format!("pinfleet-import-kops-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let imported = kops::import(&store, &kops, &name, &taking, &work).await;
    let _ = std::fs::remove_dir_all(&work);
    let imported = imported?;
    let m = &imported.manifest;
    // A restore refuses a backup whose Secrets were written under a key the
    // PKI does not hold (kops's encryption keys are not carried over).
    let held = crate::state::pki::Pki::load(&store).await?.map(|p| p.encryption_key_names()).unwrap_or_default();
    let missing: Vec<&String> = m.encryption_keys.iter().filter(|k| !held.contains(k)).collect();
    match g.output {
        Format::Text => {
            let mut out = anstream::stdout();
            let keys: u64 = m.keys.values().sum();
            if imported.already {
                writeln!(
                    out,
                    "etcd-manager's backup {name} holds what backup {} (imported before) holds: nothing was written",
                    m.id
                )?;
            } else {
                writeln!(
                    out,
                    "imported etcd-manager's backup {name} as {} (revision {}, {keys} keys, etcd {}, {} bytes)",
                    m.id, m.revision, m.etcd_version, m.size
                )?;
            }
            writeln!(
                out,
                "not verified yet: `pinfleet etcd verify {c} --backup {id} --offline`, then `pinfleet etcd restore {c} --backup {id}`",
                c = a.store.cluster,
                id = m.id
            )?;
            if !missing.is_empty() {
                let keys: Vec<&str> = missing.iter().map(|k| k.as_str()).collect();
                writeln!(
                    anstream::stderr(),
                    "warning: its Secrets were written under encryption key(s) {} that {}'s PKI does not hold (`pinfleet adopt --yes` takes kops's secrets/encryptionconfig into it): `pinfleet etcd restore` refuses it until the PKI holds them",
                    keys.join(", "),
                    a.store.cluster
                )?;
            }
        }
        other => print_data(
            other,
            &serde_json::json!({"backup": name, "already": imported.already, "manifest": m, "missingEncryptionKeys": missing}),
        )?,
    }
    Ok(ExitCode::SUCCESS)
}

/// kops's cluster folder, read only.
async fn open_kops(url: &str, a: &StoreArgs) -> Result<Store> {
    let (base, name) = crate::cli::import::split_state(url)?;
    let aws = match base.starts_with("s3://") {
        true => Some(
            crate::cloud::aws::Aws::connect(&crate::cloud::aws::AwsOptions::from_env(
                crate::cloud::aws::Target::Aws,
                a.region.clone(),
            )?)
            .await
            .context("connecting to AWS for kops's state store")?,
        ),
        false => None,
    };
    Store::open_existing(&base, &name, aws.as_ref().map(|x| x as &dyn crate::state::S3Access))
        .await
        .with_context(|| format!("opening {url}"))?
        .with_context(|| format!("{url}: no such bucket"))
}
