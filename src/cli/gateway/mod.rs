//! `pinfleet gateway serve` (the submission gateway) and the developers'
//! commands that speak to it: `submit`, `workloads`, `queue`, `quota`.
//! One file per command: `serve` (and `install`), `submit`, `workloads`,
//! `queue` and `quota`, `view`; this one holds what they share.

mod queue;
mod serve;
mod submit;
mod view;
mod workloads;

pub use queue::{queue, quota, QueueArgs};
pub use serve::ServeArgs;
pub use submit::{submit, SubmitArgs};
pub use view::{view, ViewArgs, ViewWhat};
pub use workloads::{workloads, WorkloadsArgs, WorkloadsCommand};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::GlobalArgs;
use crate::gateway::client::{Client, Credentials};
use crate::gateway::identity::Identity;
use crate::gateway::{http, render, service};
use crate::output::Format;

#[derive(Debug, Args)]
pub struct GatewayArgs {
    #[command(subcommand)]
    pub command: GatewayCommand,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Serve the submission gateway's API.
    Serve(ServeArgs),
    /// Install the gateway's CRDs and namespace on a host cluster.
    Install {
        #[arg(long, env = "PINFLEET_GATEWAY_HOST_KUBECONFIG")]
        host_kubeconfig: PathBuf,
        /// The namespace on the host that holds the records.
        #[arg(long, default_value = crate::gateway::records::NAMESPACE)]
        namespace: String,
    },
}

/// Where and as whom the developers' commands speak.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The gateway's URL.
    #[arg(long, env = "PINFLEET_GATEWAY")]
    pub gateway: Option<String>,
    /// A bearer token (OIDC or a service account's).
    #[arg(long, env = "PINFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A credentials file (gateway, token, caFile, clientCertificate, clientKey).
    #[arg(long, env = "PINFLEET_CREDENTIALS")]
    pub credentials: Option<PathBuf>,
}

impl ClientArgs {
    pub fn client(&self) -> Result<Client> {
        let mut creds = match &self.credentials {
            Some(p) => Credentials::load(p)?,
            None => match Credentials::default_path().filter(|p| p.exists()) {
                Some(p) => Credentials::load(&p)?,
                None => Credentials::default(),
            },
        };
        if self.token.is_some() {
            creds.token = self.token.clone();
        }
        let url = self
            .gateway
            .clone()
            .or(creds.gateway.clone())
            .context("no gateway: pass --gateway URL, set PINFLEET_GATEWAY, or write it in the credentials file")?;
        Client::new(&url, &creds)
    }
}

fn print(g: &GlobalArgs, v: &Value, text: impl Fn(&Value) -> String) -> Result<()> {
    match g.output {
        Format::Text => {
            print!("{}", crate::views::text::safe(&text(v)));
            Ok(())
        }
        f => crate::output::print_data(f, v),
    }
}

fn team_id(s: &str) -> Result<(&str, &str)> {
    s.split_once('/')
        .filter(|(t, i)| !t.is_empty() && !i.is_empty())
        .context(format!("{s:?}: name a submission as TEAM/ID"))
}

/// What a view that does not parse says.
const OLDER: &str = "the gateway's view (is the gateway older than this client?)";

pub async fn run(_g: &GlobalArgs, a: GatewayArgs) -> Result<ExitCode> {
    match a.command {
        GatewayCommand::Install { host_kubeconfig, namespace } => {
            let host = crate::kube::apply::connect(&host_kubeconfig).await?;
            service::install(&host, &namespace).await?;
            println!("installed the gateway's CRDs and namespace {namespace} on {}", host_kubeconfig.display());
            Ok(ExitCode::SUCCESS)
        }
        GatewayCommand::Serve(s) => {
            // The fleet is loaded (and refused with located errors) before anything starts.
            let fleet = if s.fleet_rollouts {
                let opts = super::validate::load_options(&_g.addons_dir);
                let folder = crate::fleet::Folder::load(&_g.clusters_dir, &opts)?;
                let target =
                    s.cloud.target.aws().context(
                        "--fleet-rollouts reads the fleet's state store on AWS (--target aws or localstack)",
                    )?;
                let packages = crate::addons::load_all(&_g.addons_dir)?;
                Some(crate::console::observe::FleetSource { folder, target, packages })
            } else {
                None
            };
            serve::serve(s, fleet).await
        }
    }
}
