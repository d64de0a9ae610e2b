//! kind as a local cluster (`--target kind`, needs Docker): created from the
//! cluster's rendered kind config, its kubeconfig under the local home.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use crate::spec::Cluster;

/// Where a kind cluster's kubeconfig is written.
pub fn kubeconfig(cluster: &str) -> PathBuf {
    crate::state::home().join("kind").join(cluster).join("kubeconfig.yaml")
}

fn have(binary: &str, args: &[&str]) -> bool {
    Command::new(binary).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Creates the cluster in kind from `config` (the cluster's rendered kind
/// config) unless it exists, and returns its kubeconfig.
pub fn up(cluster: &Cluster, config_text: &str) -> Result<PathBuf> {
    let name = &cluster.metadata.name;
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed (https://kind.sigs.k8s.io); `--target sim` runs the same dry run without it");
    }
    if !have("docker", &["info"]) {
        bail!("Docker is not running (kind needs it); `--target sim` runs the same dry run without it");
    }
    let kubeconfig = kubeconfig(name);
    let dir = kubeconfig.parent().expect("has a parent").to_path_buf();
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("kind.yaml");
    std::fs::write(&config, config_text)?;
    let existing = Command::new("kind").args(["get", "clusters"]).output().context("running kind get clusters")?;
    if String::from_utf8_lossy(&existing.stdout).lines().any(|l| l.trim() == name) {
        let out = Command::new("kind").args(["get", "kubeconfig", "--name", name]).output()?;
        std::fs::write(&kubeconfig, out.stdout)?;
        return Ok(kubeconfig);
    }
    let status = Command::new("kind")
        .args(["create", "cluster", "--name", name, "--wait", "180s", "--config"])
        .arg(&config)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .status()
        .context("running kind create cluster")?;
    if !status.success() {
        bail!("kind create cluster {name} failed ({status})");
    }
    Ok(kubeconfig)
}

/// Deletes the kind cluster. Returns whether kind was there to ask.
pub fn down(cluster: &str) -> Result<bool> {
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed");
    }
    let status = Command::new("kind").args(["delete", "cluster", "--name", cluster]).status()?;
    if !status.success() {
        bail!("kind delete cluster {cluster} failed ({status})");
    }
    let _ = std::fs::remove_dir_all(crate::state::home().join("kind").join(cluster));
    Ok(true)
}
