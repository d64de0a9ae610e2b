//! kind as a local cluster (`--target kind`, needs Docker): created from the
//! cluster's rendered kind config, its kubeconfig under the local home the
//! command passes in (`state::home()`: a floor above this one).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context as _, Result};

use crate::spec::Cluster;

/// The folder of a kind cluster's files under `home`.
fn dir(home: &Path, cluster: &str) -> PathBuf {
    home.join("kind").join(cluster)
}

/// Where a kind cluster's kubeconfig is written, under `home`.
pub fn kubeconfig(home: &Path, cluster: &str) -> PathBuf {
    dir(home, cluster).join("kubeconfig.yaml")
}

fn have(binary: &str, args: &[&str]) -> bool {
    Command::new(binary).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Creates the cluster in kind from `config` (the cluster's rendered kind
/// config) unless it exists, and returns its kubeconfig (under `home`).
pub fn up(home: &Path, cluster: &Cluster, config_text: &str) -> Result<PathBuf> {
    let name = &cluster.metadata.name;
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed (https://kind.sigs.k8s.io); `--target sim` runs the same dry run without it");
    }
    if !have("docker", &["info"]) {
        bail!("Docker is not running (kind needs it); `--target sim` runs the same dry run without it");
    }
    let kubeconfig = kubeconfig(home, name);
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

/// Deletes the kind cluster and its files under `home`. Returns whether
/// kind was there to ask.
pub fn down(home: &Path, cluster: &str) -> Result<bool> {
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed");
    }
    let status = Command::new("kind").args(["delete", "cluster", "--name", cluster]).status()?;
    if !status.success() {
        bail!("kind delete cluster {cluster} failed ({status})");
    }
    let _ = std::fs::remove_dir_all(dir(home, cluster));
    Ok(true)
}
