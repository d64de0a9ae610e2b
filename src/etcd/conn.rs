//! How the agent and the commands reach etcd: its client URLs, and on a
//! control-plane machine the node's etcd client certificate (kubeadm's
//! `/etc/kubernetes/pki/etcd/healthcheck-client.crt`, the CA beside it).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

/// Where etcd answers.
#[derive(Debug, Clone, Args)]
pub struct EtcdArgs {
    /// etcd's client URLs (comma-separated); the first answering is used.
    #[arg(long, value_delimiter = ',', default_value = "https://127.0.0.1:2379", env = "PINFLEET_ETCD_ENDPOINTS")]
    pub endpoints: Vec<String>,
    /// The CA that signed etcd's serving certificate.
    #[arg(long, default_value = "/etc/kubernetes/pki/etcd/ca.crt")]
    pub cacert: PathBuf,
    /// A client certificate etcd trusts, and its key.
    #[arg(long, default_value = "/etc/kubernetes/pki/etcd/healthcheck-client.crt")]
    pub cert: PathBuf,
    #[arg(long, default_value = "/etc/kubernetes/pki/etcd/healthcheck-client.key")]
    pub key: PathBuf,
}

impl EtcdArgs {
    pub fn plain(endpoints: Vec<String>) -> EtcdArgs {
        EtcdArgs { endpoints, cacert: PathBuf::new(), cert: PathBuf::new(), key: PathBuf::new() }
    }

    /// A client of one endpoint (a snapshot is one member's).
    pub async fn connect_to(&self, endpoint: &str) -> Result<Client> {
        let mut opts = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(60))
            .with_keep_alive(Duration::from_secs(10), Duration::from_secs(10));
        if endpoint.starts_with("https://") {
            let read = |p: &PathBuf| std::fs::read(p).with_context(|| format!("reading {} (etcd's TLS)", p.display()));
            let tls = TlsOptions::new()
                .ca_certificate(Certificate::from_pem(read(&self.cacert)?))
                .identity(Identity::from_pem(read(&self.cert)?, read(&self.key)?));
            opts = opts.with_tls(tls);
        }
        Client::connect([endpoint], Some(opts)).await.with_context(|| format!("connecting to etcd at {endpoint}"))
    }

    /// The first endpoint that answers a status call, with its client.
    pub async fn first_answering(&self) -> Result<(String, Client)> {
        let mut errors = Vec::new();
        for e in &self.endpoints {
            match self.connect_to(e).await {
                Ok(mut c) => match tokio::time::timeout(Duration::from_secs(5), c.status()).await {
                    Ok(Ok(_)) => return Ok((e.clone(), c)),
                    Ok(Err(err)) => errors.push(format!("{e}: {err}")),
                    Err(_) => errors.push(format!("{e}: no answer within 5s")),
                },
                Err(err) => errors.push(format!("{err:#}")),
            }
        }
        bail!("no etcd endpoint answered: {}", errors.join("; "))
    }
}
