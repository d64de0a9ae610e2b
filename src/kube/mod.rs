//! Kubernetes mechanics, in one place: clients from a kubeconfig (the
//! sim's or a real cluster's, with or without kube-rs's own retries),
//! server-side apply with discovery and dry-run ([`apply`]), the
//! API server's validation rules ([`validation`], [`cron`]), server-side
//! apply's field semantics ([`fields`]), resource quantities ([`quantity`]), readiness ([`ready`]), cluster
//! validation ([`cluster`]), drain through evictions ([`drain`]), the
//! control plane's etcd membership ([`etcd`]) and
//! waiting for a new API server ([`wait`]). Addons, the controller,
//! federation and rollouts call these; nothing here imports the sim.

pub mod apply;
pub mod budget;
pub mod cluster;
pub mod cron;
pub mod drain;
pub mod etcd;
pub mod fields;
pub mod kind;
pub mod kubeadm;
pub mod kubeadm_join;
pub mod podsecurity;
pub mod quantity;
pub mod ready;
pub mod scheduling;
pub mod schema;
pub mod validation;
pub mod wait;

use std::path::Path;
use std::sync::Once;

use anyhow::{Context as _, Result};

/// The label on every object an addon installs (its value: the addon), by
/// which the installer prunes and cluster validation finds addon workloads.
pub const ADDON_LABEL: &str = "pinfleet.dev/addon";

/// Both rustls crypto backends are linked (ring via kube, aws-lc via the
/// AWS SDK), so the process must name one before the first TLS client.
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// How a client treats 429/503/504 answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// kube-rs's default: retry with backoff (up to 15 times).
    Default,
    /// Return them at once. Drains need this: an eviction blocked by a
    /// PodDisruptionBudget answers 429, and the caller decides how long to
    /// wait and when to report the blocking budget.
    Never,
}

/// A client for the cluster a kubeconfig file names (its current context).
pub async fn client_from_kubeconfig(path: &Path, retry: Retry) -> Result<kube::Client> {
    install_crypto_provider();
    let kc =
        kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    config.default_retry = retry == Retry::Default;
    kube::Client::try_from(config).context("building a Kubernetes client")
}

/// A client from `path`, or, in a pod without that file, the in-cluster
/// configuration (the addons that run pinfleet).
pub async fn client_or_in_cluster(path: &Path, retry: Retry) -> Result<kube::Client> {
    if !path.exists() && std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        // A pod's own credentials: a KUBECONFIG its runtime gave it (the
        // sim's kubelet does), else the service account's mounted token.
        if let Some(k) = std::env::var_os("KUBECONFIG").filter(|k| Path::new(k).exists()) {
            return client_from_kubeconfig(Path::new(&k), retry).await;
        }
        install_crypto_provider();
        let mut config = kube::Config::incluster().context("in-cluster configuration")?;
        config.default_retry = retry == Retry::Default;
        return kube::Client::try_from(config).context("building a Kubernetes client");
    }
    client_from_kubeconfig(path, retry).await
}
