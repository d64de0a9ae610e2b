//! The sim as a local cluster (`--target sim`): a background `pinfleet sim`
//! with the cluster's nodes declared, its objects kept in a snapshot across
//! restarts, and its kubeconfig and pid under the local home, where the
//! Kubernetes commands and the scripts' cleanup find them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::spec::Cluster;

/// Where a local sim cluster's kubeconfig is.
pub fn kubeconfig(cluster: &str) -> PathBuf {
    sim_dir(cluster).join("kubeconfig.yaml")
}

fn sim_dir(cluster: &str) -> PathBuf {
    crate::state::home().join("sim").join(cluster)
}

/// Whether the process runs: a zombie (ended, not yet reaped by a parent
/// that may never reap it) is not alive.
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn read_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join("pid")).ok()?.trim().parse().ok()
}

/// Starts the cluster's sim in the background (or finds it running) and
/// returns its kubeconfig. Objects persist in a snapshot across restarts.
pub async fn up(cluster: &Cluster, cluster_arg: &str, clusters_dir: &Path, addons_dir: &Path) -> Result<PathBuf> {
    let name = &cluster.metadata.name;
    let dir = sim_dir(name);
    let kubeconfig = kubeconfig(name);
    if let Some(pid) = read_pid(&dir).filter(|p| pid_alive(*p)) {
        if kubeconfig.exists() && crate::kube::apply::connect(&kubeconfig).await.is_ok() {
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
        .arg(clusters_dir)
        .arg("--addons-dir")
        .arg(addons_dir)
        // pinfleet's own containers (the controller, the e2e and AMI jobs) run as processes here.
        .arg("--pods-dir")
        .arg(dir.join("pods"))
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

/// On the sim, a machine's addresses are its Node's: the controller's
/// serving-certificate approver reads them there (unless the cluster file
/// chose), as there is no EC2 behind the sim's kubelets.
pub fn for_the_sim(cluster: &mut crate::spec::Cluster) {
    let addons = &mut cluster.spec.addons;
    if !addons.iter().any(|a| a.name == "workload-controller") {
        addons.push(crate::spec::AddonRef {
            name: "workload-controller".into(),
            version: None,
            enabled: true,
            values: Default::default(),
        });
    }
    for a in addons.iter_mut().filter(|a| a.name == "workload-controller") {
        a.values.entry("servingAddresses").or_insert_with(|| serde_json::json!("node"));
    }
}

/// Stops the cluster's sim and removes its files. Returns whether one ran.
pub async fn down(cluster: &str) -> Result<bool> {
    let dir = sim_dir(cluster);
    let running = match read_pid(&dir) {
        Some(pid) if pid_alive(pid) => {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            // It stops its pods first (each given the kubelet's grace,
            // then killed): its files go only once it has ended, so a
            // destroy that times out is tried again whole.
            let start = Instant::now();
            while pid_alive(pid) && start.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if pid_alive(pid) {
                bail!(
                    "the sim for {cluster} (pid {pid}) has not stopped within 30s of SIGTERM; its files in {} are kept: run destroy again",
                    dir.display()
                );
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
