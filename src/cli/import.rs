//! `pinfleet import kops --state s3://BUCKET/NAME [--out FILE]`: a
//! cluster kops runs, as a pinfleet cluster file. The reading is
//! [`crate::adopt::read_kops`], the mapping [`crate::adopt::kops`]; a
//! refusal writes nothing.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Subcommand};
use owo_colors::OwoColorize;
use serde::Serialize;

use super::GlobalArgs;
use crate::adopt::kops;
use crate::cloud::aws::{Aws, AwsOptions, Target};
use crate::output::{print_data, Format};
use crate::state::{S3Access, Store};

#[derive(Debug, Args)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub from: ImportFrom,
}

#[derive(Debug, Subcommand)]
pub enum ImportFrom {
    /// A kops cluster, from kops's state store: every setting mapped, or
    /// named (with its kops path and why) when the file cannot carry it.
    Kops(KopsArgs),
}

#[derive(Debug, Args)]
pub struct KopsArgs {
    /// The cluster's folder in kops's state store: `s3://BUCKET/NAME`
    /// (NAME is kops's cluster name, such as prod.k8s.example.com) or
    /// `file://DIR/NAME`.
    #[arg(long, value_name = "URL", required_unless_present = "mapping")]
    pub state: Option<String>,
    /// Write the cluster file here (default: print it). An existing file is
    /// kept unless --force.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace --out if it exists.
    #[arg(long, requires = "out")]
    pub force: bool,
    /// The pinfleet cluster's name (default: the first label of kops's).
    #[arg(long)]
    pub name: Option<String>,
    /// The team that owns the cluster (`spec.owner`; kops has none).
    #[arg(long, value_name = "TEAM")]
    pub owner: Option<String>,
    /// Where pinfleet keeps the cluster's own state (`spec.stateStore`;
    /// default: kops's bucket, under `pinfleet/`).
    #[arg(long, value_name = "URL")]
    pub state_store: Option<String>,
    /// The S3 bucket's region (default: AWS_REGION or the profile's).
    #[arg(long)]
    pub region: Option<String>,
    /// Print the kops → pinfleet mapping as a markdown table (the book's).
    #[arg(long)]
    pub mapping: bool,
}

/// What `-o json` prints.
#[derive(Serialize)]
struct Report<'a> {
    /// The cluster file's text.
    cluster: &'a str,
    unmapped: &'a [kops::Finding],
    notes: &'a [String],
}

pub async fn run(g: &GlobalArgs, args: ImportArgs) -> Result<ExitCode> {
    match args.from {
        ImportFrom::Kops(a) => from_kops(g, a).await,
    }
}

async fn from_kops(g: &GlobalArgs, a: KopsArgs) -> Result<ExitCode> {
    if a.mapping {
        write!(anstream::stdout(), "{}", kops::mapping_markdown())?;
        return Ok(ExitCode::SUCCESS);
    }
    let url = a.state.as_deref().context("--state is needed: kops's state store and the cluster's name")?;
    let (base, name) = split_state(url)?;
    if let Some(out) = a.out.as_ref().filter(|o| o.exists() && !a.force) {
        bail!("{} exists: pass --force to replace it", out.display());
    }
    let aws = if base.starts_with("s3://") {
        let opts = AwsOptions::from_env(Target::Aws, a.region.clone())?;
        Some(Aws::connect(&opts).await.context("connecting to AWS for kops's state store")?)
    } else {
        None
    };
    let store = Store::open_existing(&base, &name, aws.as_ref().map(|x| x as &dyn S3Access))
        .await
        .with_context(|| format!("opening {url}"))?
        .with_context(|| format!("{url}: no such bucket"))?;
    let state = crate::adopt::read_kops(&store).await?;
    let opts = kops::Options {
        name: a.name.clone(),
        owner: a.owner.clone(),
        state_store: a.state_store.clone().unwrap_or_else(|| beside(&base)),
        file: a.out.clone().unwrap_or_else(|| PathBuf::from(format!("{name}.yaml"))),
        validation: super::validate::load_options(&g.addons_dir),
    };
    let imported = kops::import(&state, &opts)?;
    if let Some(out) = &a.out {
        write_file(out, &imported.text).with_context(|| format!("writing {}", out.display()))?;
    }
    if g.output != Format::Text {
        let report = Report { cluster: &imported.text, unmapped: &imported.unmapped, notes: &imported.notes };
        print_data(g.output, &report)?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.out.is_none() {
        anstream::stdout().write_all(imported.text.as_bytes())?;
    }
    let mut err = anstream::stderr();
    for f in &imported.unmapped {
        writeln!(err, "{}", format!("warning: {f}").yellow())?;
    }
    for n in &imported.notes {
        writeln!(err, "note: {}", crate::escape::safe(n))?;
    }
    if let Some(out) = &a.out {
        writeln!(
            err,
            "wrote {} (cluster {}); {} kops setting(s) not carried over, named above",
            out.display(),
            imported.name,
            imported.unmapped.len()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `s3://BUCKET/NAME` → (`s3://BUCKET`, NAME), a query kept on the store's
/// URL (`s3://BUCKET/NAME?expectedBucketOwner=…`).
pub(super) fn split_state(url: &str) -> Result<(String, String)> {
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    let path = path.trim_end_matches('/');
    let scheme = path.find("://").map(|i| i + 3).unwrap_or(0);
    let Some((base, name)) = path.rsplit_once('/').filter(|(base, name)| base.len() > scheme && !name.is_empty())
    else {
        bail!(
            "`{url}` names no cluster: give kops's state store and the cluster's name, e.g. --state s3://BUCKET/prod.k8s.example.com"
        );
    };
    let base = match query {
        Some(q) => format!("{base}?{q}"),
        None => base.to_string(),
    };
    Ok((base, name.to_string()))
}

/// pinfleet's own state beside kops's: `s3://BUCKET` → `s3://BUCKET/pinfleet`.
fn beside(base: &str) -> String {
    let (path, query) = match base.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (base, None),
    };
    let mut out = format!("{}/pinfleet", path.trim_end_matches('/'));
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

/// Writes the file whole or not at all (a temporary file, renamed).
fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp-import");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_url_names_the_store_and_the_cluster() {
        assert_eq!(
            split_state("s3://b/prod.k8s.example.com").unwrap(),
            ("s3://b".into(), "prod.k8s.example.com".into())
        );
        assert_eq!(split_state("s3://b/kops/c.example.com/").unwrap(), ("s3://b/kops".into(), "c.example.com".into()));
        assert_eq!(
            split_state("s3://b/c.example.com?expectedBucketOwner=111122223333").unwrap(),
            ("s3://b?expectedBucketOwner=111122223333".into(), "c.example.com".into())
        );
        assert_eq!(
            split_state("file:///tmp/kops/c.example.com").unwrap(),
            ("file:///tmp/kops".into(), "c.example.com".into())
        );
        assert!(split_state("s3://b").is_err() && split_state("s3://b/").is_err());
        assert_eq!(
            beside("s3://b?expectedBucketOwner=111122223333"),
            "s3://b/pinfleet?expectedBucketOwner=111122223333"
        );
        assert_eq!(beside("file:///tmp/kops"), "file:///tmp/kops/pinfleet");
    }
}
