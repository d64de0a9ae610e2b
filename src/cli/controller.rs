//! `pinfleet controller`: run the workload controllers against a cluster
//! (in-cluster config, or --kubeconfig).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use super::GlobalArgs;

#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// Kubeconfig to use (default: in-cluster configuration or the usual lookup).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Cluster name injected into workloads (CLUSTER env).
    #[arg(long, env = "PINFLEET_CLUSTER", default_value = "local")]
    pub cluster: String,
}

pub async fn run(_g: &GlobalArgs, args: ControllerArgs) -> Result<ExitCode> {
    let client = match &args.kubeconfig {
        Some(p) => crate::kube::client_from_kubeconfig(p, crate::kube::Retry::Default).await?,
        None => {
            crate::kube::install_crypto_provider();
            kube::Client::try_default().await?
        }
    };
    let ctx = crate::controller::Ctx::new(client, &args.cluster);
    tokio::select! {
        _ = crate::controller::run(ctx) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}
