//! `pinfleet import kops --state s3://BUCKET/NAME [--out FILE]`: a
//! cluster kops runs, as a pinfleet cluster file. The reading is
//! [`crate::adopt::read_kops`], the mapping [`crate::adopt::kops`]; a
//! refusal writes nothing. `pinfleet import aws --tag KEY=VALUE
//! --kubeconfig FILE`: a cluster made by hand with kubeadm on EC2, read
//! from EC2 ([`crate::adopt::aws::seen_by_tag`]) and its API, mapped by
//! [`crate::adopt::ec2`].

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
    /// A cluster made by hand with kubeadm on EC2: what EC2 shows of the
    /// machines carrying a tag, and the cluster's own kubeadm-config and
    /// Nodes (read through --kubeconfig).
    Aws(AwsArgs),
}

#[derive(Debug, Args)]
pub struct AwsArgs {
    /// The tag every machine of the cluster carries (control plane and
    /// workers): KEY=VALUE.
    #[arg(long, value_name = "KEY=VALUE")]
    pub tag: String,
    /// The running cluster's kubeconfig (its kubeadm-config and Nodes are
    /// read; nothing is written there).
    #[arg(long, value_name = "FILE", env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Where pinfleet keeps the cluster's own state (`spec.stateStore`).
    #[arg(long, value_name = "URL")]
    pub state_store: String,
    #[command(flatten)]
    pub write: WriteArgs,
    /// The pinfleet cluster's name (default: the tag's value).
    #[arg(long)]
    pub name: Option<String>,
    /// The team that owns the cluster (`spec.owner`).
    #[arg(long, value_name = "TEAM")]
    pub owner: Option<String>,
    /// The machines' region (default: AWS_REGION or the profile's).
    #[arg(long)]
    pub region: Option<String>,
}

/// Where an import writes its cluster file: the same for every source.
#[derive(Debug, Args)]
pub struct WriteArgs {
    /// Write the cluster file here (default: print it). An existing file is
    /// kept unless --force.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace --out if it exists.
    #[arg(long, requires = "out")]
    pub force: bool,
}

impl WriteArgs {
    /// Refuses, before anything is read, an --out that exists without --force.
    fn check(&self) -> Result<()> {
        if let Some(out) = self.out.as_ref().filter(|o| o.exists() && !self.force) {
            bail!("{} exists: pass --force to replace it", out.display());
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
pub struct KopsArgs {
    /// The cluster's folder in kops's state store: `s3://BUCKET/NAME`
    /// (NAME is kops's cluster name, such as prod.k8s.example.com) or
    /// `file://DIR/NAME`.
    #[arg(long, value_name = "URL", required_unless_present = "mapping")]
    pub state: Option<String>,
    #[command(flatten)]
    pub write: WriteArgs,
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
        ImportFrom::Aws(a) => from_aws(g, a).await,
    }
}

async fn from_aws(g: &GlobalArgs, a: AwsArgs) -> Result<ExitCode> {
    use crate::adopt::ec2;
    let tag = ec2::parse_tag(&a.tag).map_err(anyhow::Error::msg)?;
    a.write.check()?;
    let opts = AwsOptions::from_env(Target::Aws, a.region.clone())?;
    let aws = Aws::connect(&opts).await.context("connecting to AWS")?;
    let (machines, vpcs, subnets) = crate::adopt::aws::seen_by_tag(&aws, &tag.0, &tag.1).await?;
    let client = crate::kube::client_from_kubeconfig(&a.kubeconfig, crate::kube::Retry::Default)
        .await
        .with_context(|| format!("reading the cluster through {}", a.kubeconfig.display()))?;
    let api = server_of(&a.kubeconfig).unwrap_or_else(|| a.kubeconfig.display().to_string());
    let (kubeadm, nodes) = read_kubeadm(&client, &api).await?;
    let seen = ec2::Seen { tag, region: aws.region.clone(), api, machines, vpcs, subnets, nodes, kubeadm };
    let options = kops::Options {
        name: a.name.clone(),
        owner: a.owner.clone(),
        state_store: a.state_store.clone(),
        file: a.write.out.clone().unwrap_or_else(|| PathBuf::from("cluster.yaml")),
        validation: super::validate::load_options(&g.addons_dir),
    };
    let imported = ec2::import(&seen, &options)?;
    emit(g, &imported, a.write.out.as_deref(), "kubeadm or EC2")
}

/// The API server the kubeconfig's current context names (for messages).
fn server_of(path: &Path) -> Option<String> {
    let kc = kube::config::Kubeconfig::read_from(path).ok()?;
    let context = kc.current_context.as_deref()?;
    let ctx = kc.contexts.iter().find(|c| c.name == context)?.context.as_ref()?;
    let cluster = kc.clusters.iter().find(|c| c.name == ctx.cluster)?.cluster.as_ref()?;
    cluster.server.clone()
}

/// kube-system/kubeadm-config's ClusterConfiguration (None: no such
/// ConfigMap) and every Node, with the machine its providerID names.
async fn read_kubeadm(client: &kube::Client, api: &str) -> Result<(Option<String>, Vec<crate::adopt::ec2::Node>)> {
    use k8s_openapi::api::core::v1::{ConfigMap, Node};
    let cms = kube::Api::<ConfigMap>::namespaced(client.clone(), "kube-system");
    let kubeadm = match cms
        .get_opt("kubeadm-config")
        .await
        .with_context(|| format!("{api}: reading kube-system/kubeadm-config"))?
    {
        Some(cm) => match cm.data.and_then(|mut d| d.remove("ClusterConfiguration")) {
            Some(text) => Some(text),
            None => bail!("{api} kube-system/kubeadm-config: no ClusterConfiguration in it (kubeadm writes one)"),
        },
        None => None,
    };
    let nodes = kube::Api::<Node>::all(client.clone())
        .list(&Default::default())
        .await
        .with_context(|| format!("{api}: listing Nodes"))?;
    let nodes = nodes
        .items
        .into_iter()
        .map(|n| {
            let spec = n.spec.unwrap_or_default();
            crate::adopt::ec2::Node {
                name: n.metadata.name.unwrap_or_default(),
                instance: spec.provider_id.as_deref().and_then(crate::adopt::ec2::instance_of),
                labels: n.metadata.labels.unwrap_or_default(),
                taints: spec.taints.unwrap_or_default().into_iter().map(|t| (t.key, t.value, t.effect)).collect(),
            }
        })
        .collect();
    Ok((kubeadm, nodes))
}

async fn from_kops(g: &GlobalArgs, a: KopsArgs) -> Result<ExitCode> {
    if a.mapping {
        write!(anstream::stdout(), "{}", kops::mapping_markdown())?;
        return Ok(ExitCode::SUCCESS);
    }
    let url = a.state.as_deref().context("--state is needed: kops's state store and the cluster's name")?;
    let (base, name) = split_state(url)?;
    a.write.check()?;
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
        file: a.write.out.clone().unwrap_or_else(|| PathBuf::from(format!("{name}.yaml"))),
        validation: super::validate::load_options(&g.addons_dir),
    };
    let imported = kops::import(&state, &opts)?;
    emit(g, &imported, a.write.out.as_deref(), "kops")
}

/// Writes the file (or prints it), then what was not carried over.
fn emit(g: &GlobalArgs, imported: &kops::Imported, out: Option<&Path>, from: &str) -> Result<ExitCode> {
    if let Some(out) = out {
        write_file(out, &imported.text).with_context(|| format!("writing {}", out.display()))?;
    }
    if g.output != Format::Text {
        let report = Report { cluster: &imported.text, unmapped: &imported.unmapped, notes: &imported.notes };
        print_data(g.output, &report)?;
        return Ok(ExitCode::SUCCESS);
    }
    if out.is_none() {
        anstream::stdout().write_all(imported.text.as_bytes())?;
    }
    let mut err = anstream::stderr();
    for f in &imported.unmapped {
        writeln!(err, "{}", format!("warning: {f}").yellow())?;
    }
    for n in &imported.notes {
        writeln!(err, "note: {}", crate::escape::safe(n))?;
    }
    if let Some(out) = out {
        writeln!(
            err,
            "wrote {} (cluster {}); {} {from} setting(s) not carried over, named above",
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
