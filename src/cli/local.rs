//! Local dry runs of a cluster's Kubernetes side: a kind cluster (Docker)
//! or a background `pinfleet sim` with the cluster's nodes declared. Both
//! leave a kubeconfig where `--target kind|sim` looks for it, so `addons`
//! and the other Kubernetes commands find them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use super::cloud::{home, Target};
use super::GlobalArgs;
use crate::spec::Cluster;

fn sim_dir(cluster: &str) -> PathBuf {
    home().join("sim").join(cluster)
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn read_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()
}

/// Starts the cluster's sim in the background (or finds it running) and
/// returns its kubeconfig. Objects persist in a snapshot across restarts.
pub async fn sim_up(g: &GlobalArgs, cluster: &Cluster, cluster_arg: &str) -> Result<PathBuf> {
    let name = &cluster.metadata.name;
    let dir = sim_dir(name);
    let kubeconfig = Target::Sim.kubeconfig(name);
    if let Some(pid) = read_pid(&dir).filter(|p| pid_alive(*p)) {
        if kubeconfig.exists() && crate::addons::install::connect(&kubeconfig).await.is_ok() {
            writeln!(anstream::stderr(), "sim for {name} already running (pid {pid})")?;
            return Ok(kubeconfig);
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let _ = std::fs::remove_file(&kubeconfig);
    let log = std::fs::File::create(dir.join("sim.log"))?;
    let exe = std::env::current_exe().context("finding the pinfleet binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("sim")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--snapshot")
        .arg(dir.join("snapshot.json"))
        .arg("--nodes-for")
        .arg(cluster_arg)
        .arg("--clusters-dir")
        .arg(&g.clusters_dir)
        .arg("--addons-dir")
        .arg(&g.addons_dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group: the sim outlives this command and a Ctrl-C here.
        cmd.process_group(0);
    }
    let child = cmd.spawn().context("starting pinfleet sim")?;
    std::fs::write(dir.join("pid"), child.id().to_string())?;
    let start = Instant::now();
    while !kubeconfig.exists() {
        if start.elapsed() > Duration::from_secs(30) || !pid_alive(child.id()) {
            let log = std::fs::read_to_string(dir.join("sim.log")).unwrap_or_default();
            bail!("the sim for {name} did not start:\n{log}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    writeln!(anstream::stderr(), "sim for {name} started (pid {}, kubeconfig {})", child.id(), kubeconfig.display())?;
    Ok(kubeconfig)
}

/// Stops the cluster's sim and removes its files. Returns whether one ran.
pub async fn sim_down(cluster: &str) -> Result<bool> {
    let dir = sim_dir(cluster);
    let running = match read_pid(&dir) {
        Some(pid) if pid_alive(pid) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            let start = Instant::now();
            while pid_alive(pid) && start.elapsed() < Duration::from_secs(10) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            true
        }
        _ => false,
    };
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    Ok(running)
}

fn have(binary: &str, args: &[&str]) -> bool {
    Command::new(binary).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
}

/// Creates the cluster in kind (from the rendered kind config) unless it
/// exists, and returns its kubeconfig.
pub fn kind_up(cluster: &Cluster) -> Result<PathBuf> {
    let name = &cluster.metadata.name;
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed (https://kind.sigs.k8s.io); `--target sim` runs the same dry run without it");
    }
    if !have("docker", &["info"]) {
        bail!("Docker is not running (kind needs it); `--target sim` runs the same dry run without it");
    }
    let kubeconfig = Target::Kind.kubeconfig(name);
    let dir = kubeconfig.parent().expect("has a parent").to_path_buf();
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("kind.yaml");
    std::fs::write(&config, crate::render::Renderer::new().kind_config(cluster)?)?;
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
pub fn kind_down(cluster: &str) -> Result<bool> {
    if !have("kind", &["version"]) {
        bail!("`kind` is not installed");
    }
    let status = Command::new("kind").args(["delete", "cluster", "--name", cluster]).status()?;
    if !status.success() {
        bail!("kind delete cluster {cluster} failed ({status})");
    }
    let _ = std::fs::remove_dir_all(home().join("kind").join(cluster));
    Ok(true)
}
