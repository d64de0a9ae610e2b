//! What the cloud commands share: the `--target` flag, loading a cluster
//! with an AWS connection in its region, and its state store.

use std::io::Write;

use anyhow::{Context as _, Result};
use clap::Args;

use super::GlobalArgs;
use crate::cloud::aws::{Aws, AwsOptions};
use crate::spec::Loaded;
use crate::state::Store;

/// Where a cluster lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Target {
    /// AWS itself, or whatever `AWS_ENDPOINT_URL` names (moto, a proxy).
    #[default]
    Aws,
    /// LocalStack's default endpoint with dummy credentials.
    Localstack,
    /// A local kind cluster (Docker): a dry run of the Kubernetes side.
    Kind,
    /// The pinfleet sim with nodes declared from the cluster file: the same
    /// dry run without Docker.
    Sim,
}

impl Target {
    /// The cluster as this target runs it: on the sim, with the sim's addon
    /// settings ([`crate::sim::local::for_the_sim`]); elsewhere as written.
    pub fn cluster_as_run(self, mut cluster: crate::spec::Cluster) -> crate::spec::Cluster {
        if self == Target::Sim {
            crate::sim::local::for_the_sim(&mut cluster);
        }
        cluster
    }

    /// The AWS endpoint, for targets that have one.
    pub fn aws(self) -> Option<crate::cloud::aws::Target> {
        match self {
            Target::Aws => Some(crate::cloud::aws::Target::Aws),
            Target::Localstack => Some(crate::cloud::aws::Target::Localstack),
            Target::Kind | Target::Sim => None,
        }
    }

    /// The kubeconfig given on the command line, else the target's.
    pub fn kubeconfig_or(self, given: Option<&std::path::Path>, cluster: &str) -> std::path::PathBuf {
        given.map_or_else(|| self.kubeconfig(cluster), std::path::Path::to_path_buf)
    }

    /// Where the admin kubeconfig of a cluster on this target is written.
    pub fn kubeconfig(self, cluster: &str) -> std::path::PathBuf {
        match self {
            Target::Aws | Target::Localstack => crate::apply::cluster::kubeconfig_path(cluster),
            Target::Kind => crate::kube::kind::kubeconfig(&home(), cluster),
            Target::Sim => crate::sim::local::kubeconfig(cluster),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct CloudArgs {
    /// Where the cluster lives: AWS (honours AWS_ENDPOINT_URL, profiles, the
    /// credential chain), LocalStack's default endpoint, or a local dry run
    /// on kind or the sim.
    #[arg(long, value_enum, default_value_t = Target::Aws, env = "PINFLEET_TARGET")]
    pub target: Target,
}

pub struct Session {
    pub loaded: Loaded,
    pub aws: Aws,
}

impl Session {
    pub async fn open(g: &GlobalArgs, cluster: &str, cloud: &CloudArgs) -> Result<Session> {
        let loaded = super::render::load_one(g, cluster)?;
        let target = cloud.target.aws().with_context(|| {
            format!("this command works on AWS clusters; --target {:?} has no AWS side", cloud.target)
        })?;
        let aws = Aws::connect(&AwsOptions::for_cluster(target, &loaded.cluster, &g.command)?)
            .await
            .with_context(|| format!("connecting to AWS for cluster {}", loaded.cluster.metadata.name))?;
        Ok(Session { loaded, aws })
    }

    pub fn name(&self) -> &str {
        &self.loaded.cluster.metadata.name
    }

    /// The state store; `create` makes a missing S3 bucket (read-only
    /// commands pass false and see an empty store instead).
    pub async fn store(&self, create: bool) -> Result<Option<Store>> {
        let url = &self.loaded.cluster.spec.state_store;
        let opened = if create {
            Store::open(url, self.name(), Some(&self.aws)).await.map(Some)
        } else {
            Store::open_existing(url, self.name(), Some(&self.aws)).await
        };
        opened.with_context(|| format!("opening state store {url}"))
    }

    /// What a roll needs: the state store and PKI of a bootstrapped cluster,
    /// and a client for its API server.
    pub async fn roll_target(
        &self,
        kubeconfig: &std::path::Path,
    ) -> Result<(Store, crate::state::pki::Pki, kube::Client)> {
        let name = self.name();
        let store = self
            .store(false)
            .await?
            .with_context(|| format!("cluster {name} has no state store yet: bootstrap it first"))?;
        let pki = crate::state::pki::Pki::load(&store)
            .await?
            .with_context(|| format!("cluster {name} has not been bootstrapped"))?;
        let client = crate::kube::client_from_kubeconfig(kubeconfig, crate::kube::Retry::Never).await?;
        Ok((store, pki, client))
    }

    /// Records installed addon versions in the state store, if it exists.
    pub async fn record_addons(&self, report: &crate::addons::install::Report) -> Result<()> {
        match self.store(false).await? {
            Some(store) => crate::addons::record(&store, report).await,
            None => Ok(()),
        }
    }

    /// Prints the AWS calls made (always under -v).
    pub fn report_calls(&self, g: &GlobalArgs) {
        if g.verbose == 0 {
            return;
        }
        let calls = self.aws.calls.snapshot();
        let total: u64 = calls.values().sum();
        let detail: Vec<String> = calls.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(anstream::stderr(), "AWS calls: {total} ({})", detail.join(", "));
    }
}

pub use crate::state::home;
