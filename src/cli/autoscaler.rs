//! `pinfleet autoscaler serve CLUSTER`: serve cluster-autoscaler's
//! externalgrpc cloud provider over the cluster's node groups.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand};

use super::cloud::{CloudArgs, Session};
use super::GlobalArgs;

#[derive(Debug, Args)]
pub struct AutoscalerArgs {
    #[command(subcommand)]
    pub command: AutoscalerCommand,
}

#[derive(Debug, Subcommand)]
pub enum AutoscalerCommand {
    /// Serve the externalgrpc cloud provider until Ctrl-C.
    Serve(ServeArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    pub cluster: String,
    /// Address to listen on (cluster-autoscaler's cloud-config names it).
    #[arg(long, default_value = "127.0.0.1:8086")]
    pub listen: String,
    /// Kubeconfig of the cluster (default: the one bootstrap wrote; in-cluster
    /// configuration when run as the addon).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub cloud: CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: AutoscalerArgs) -> Result<ExitCode> {
    let AutoscalerCommand::Serve(a) = args.command;
    let s = Session::open(g, &a.cluster, &a.cloud).await?;
    let kubeconfig = a.cloud.target.kubeconfig_or(a.kubeconfig.as_deref(), s.name());
    let store = s.store(false).await?.with_context(|| format!("cluster {} has no state store yet", s.name()))?;
    // In a pod (the addon) without a kubeconfig: the in-cluster configuration.
    let client = crate::kube::client_or_in_cluster(&kubeconfig, crate::kube::Retry::Default).await?;
    let listener =
        tokio::net::TcpListener::bind(&a.listen).await.with_context(|| format!("listening on {}", a.listen))?;
    writeln!(
        anstream::stderr(),
        "serving cluster-autoscaler's externalgrpc provider for {} on {}",
        s.name(),
        listener.local_addr()?
    )?;
    let provider = crate::autoscale::Provider::new(s.aws.clone(), s.loaded.cluster.clone(), store, client);
    crate::autoscale::serve(provider, listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(ExitCode::SUCCESS)
}
