//! `pinfleet sim`: run the local Kubernetes API emulator until Ctrl-C,
//! writing a kubeconfig for it (and, with --snapshot, saving its objects
//! on exit and loading them on start).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::Args;

use super::GlobalArgs;
use crate::sim::{load_snapshot, Controllers, Inner, Sim};

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The Kubernetes version to answer as (`/version`, the minor's
    /// validation rules and messages, the kubelets' versions). Default: the
    /// cluster's `spec.kubernetesVersion` with --cluster or --nodes-for,
    /// else pinfleet's default.
    #[arg(long, value_name = "VERSION")]
    pub kubernetes_version: Option<String>,
    /// Image repositories run as local processes of this binary (pinfleet's
    /// own image, as the addons name it); other images are simulated.
    #[arg(long = "own-image", value_name = "REPOSITORY", default_value = crate::sim::procs::OWN_REPOSITORY)]
    pub own_images: Vec<String>,
    /// Simulate pinfleet's own containers too (run no process).
    #[arg(long)]
    pub no_processes: bool,
    /// Where the processes keep their files (logs, kubeconfig); default: a
    /// temporary folder removed when the sim stops.
    #[arg(long, value_name = "DIR")]
    pub pods_dir: Option<PathBuf>,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = ".pinfleet/sim/kubeconfig.yaml")]
    pub kubeconfig: PathBuf,
    /// Load objects from this file at start and save them there on exit.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// Simulated controllers to switch off.
    #[arg(long, value_delimiter = ',', value_parser = ["scheduler", "kubelet", "replicasets", "deployments", "daemonsets", "statefulsets", "jobs", "cronjobs", "endpoints"])]
    pub disable: Vec<String>,
    /// How long a scheduled pod takes to become Ready.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub pod_start: std::time::Duration,
    /// How long a Job's pods run before they succeed.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub job_run: std::time::Duration,
    /// Declare this many Ready nodes (sim-node-0…).
    #[arg(long, default_value_t = 0)]
    pub nodes: u32,
    /// Register a Node for every running EC2 instance of this cluster (AWS
    /// from the usual environment, e.g. AWS_ENDPOINT_URL for moto).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Declare Ready nodes for this cluster file's instance groups (desired
    /// counts, labels, taints, capacity), without EC2.
    #[arg(long, conflicts_with = "cluster")]
    pub nodes_for: Option<String>,
    /// How long an instance takes to boot and become a Ready node.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub boot_delay: std::time::Duration,
    /// Fraction of machines (0..1) that never become Ready.
    #[arg(long, default_value_t = 0.0)]
    pub fail_fraction: f64,
    /// Whether a cluster's machines (--cluster, --nodes-for) come with a pod
    /// network (`preinstalled`) or wait for the pod-network addon (`cni`,
    /// as kubeadm machines do).
    #[arg(long, value_enum, default_value_t = Network::Cni)]
    pub network: Network,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Network {
    Cni,
    Preinstalled,
}

/// A version the sim can answer as: a full version of a minor in the
/// versions table (`1.36` alone is refused, naming the patch to use).
fn version_to_serve(v: &str) -> Result<crate::spec::versions::Version> {
    let Some(parsed) = crate::spec::versions::Version::parse(v) else {
        let hint = crate::spec::validate::parse_kubernetes_version(&format!("{v}.0"))
            .and_then(|(_, m, _)| crate::spec::versions::minor(m))
            .map(|m| format!(" (the newest patch of 1.{} is 1.{}.{})", m.minor, m.minor, m.newest_patch))
            .unwrap_or_default();
        anyhow::bail!("--kubernetes-version {v} is not a version like {}{hint}", crate::spec::versions::DEFAULT);
    };
    if parsed.major != 1 || crate::spec::versions::minor(parsed.minor).is_none() {
        let (oldest, newest) = crate::spec::versions::range();
        anyhow::bail!("the sim answers as Kubernetes 1.{oldest} to 1.{newest}, not {v}");
    }
    Ok(parsed)
}

pub async fn run(g: &GlobalArgs, args: SimArgs) -> Result<ExitCode> {
    let mut inner = match &args.snapshot {
        Some(p) if p.exists() => load_snapshot(p)?,
        _ => Inner::new(),
    };
    let of_cluster = match args.cluster.as_ref().or(args.nodes_for.as_ref()) {
        Some(c) => Some(super::render::load_one(g, c)?.cluster.spec.kubernetes_version.clone()),
        None => None,
    };
    let asked = args.kubernetes_version.clone().or(of_cluster).unwrap_or_else(|| crate::spec::versions::DEFAULT.into());
    inner.kubernetes = version_to_serve(&asked)?;
    for n in 0..args.nodes {
        let mut node = crate::sim::nodes::NodeSpec::simple(&format!("sim-node-{n}"));
        node.kubelet_version = format!("v{}", inner.kubernetes);
        crate::sim::nodes::declare(&mut inner, &node);
    }
    if let Some(cluster) = &args.nodes_for {
        let loaded = super::render::load_one(g, cluster)?;
        for mut n in crate::sim::nodes::declared_for(&loaded.cluster) {
            n.needs_cni = args.network == Network::Cni;
            crate::sim::nodes::declare(&mut inner, &n);
        }
    }
    let mut controllers = Controllers { pod_start: args.pod_start, job_run: args.job_run, ..Default::default() };
    for d in &args.disable {
        match d.as_str() {
            "scheduler" => controllers.scheduler = false,
            "kubelet" => controllers.kubelet = false,
            "replicasets" => controllers.replicasets = false,
            "deployments" => controllers.deployments = false,
            "daemonsets" => controllers.daemonsets = false,
            "statefulsets" => controllers.statefulsets = false,
            "cronjobs" => controllers.cronjobs = false,
            "endpoints" => controllers.endpoints = false,
            _ => controllers.jobs = false,
        }
    }
    let sim = Sim::start_with(args.port, inner, controllers).await?;
    if let Some(cluster) = &args.cluster {
        let loaded = super::render::load_one(g, cluster)?;
        // The cluster's machines, in its own account (through its role).
        let aws = crate::cloud::aws::Aws::connect(&crate::cloud::aws::AwsOptions::for_cluster(
            Default::default(),
            &loaded.cluster,
            &g.command,
        )?)
        .await?;
        let cfg = crate::sim::nodes::Ec2Nodes {
            cluster: loaded.cluster.clone(),
            boot_delay: args.boot_delay,
            fail_fraction: args.fail_fraction,
            poll: std::time::Duration::from_millis(500),
            needs_cni: args.network == Network::Cni,
            image_facts: Default::default(),
        };
        tokio::spawn(crate::sim::nodes::follow_ec2(sim.store.clone(), aws, cfg));
    }
    // pinfleet's own containers run as processes of this binary.
    let scratch = std::env::temp_dir().join(format!("pinfleet-sim-{}", std::process::id()));
    let mut runner = if args.no_processes {
        None
    } else {
        let dir = args.pods_dir.clone().unwrap_or_else(|| scratch.clone());
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let cfg = crate::sim::procs::OwnImages {
            repositories: args.own_images.iter().filter(|r| !r.is_empty()).cloned().collect(),
            // The running image itself (/proc/self/exe still runs it after the
            // file on disk was replaced, say by a rebuild).
            exe: if std::path::Path::new("/proc/self/exe").exists() {
                PathBuf::from("/proc/self/exe")
            } else {
                std::env::current_exe().context("finding the pinfleet binary")?
            },
            dir,
            // Machines that are EC2 instances reach EC2 as the sim does.
            machine_env: if args.cluster.is_some() {
                std::env::vars().filter(|(k, _)| k.starts_with("AWS_") || k == "PINFLEET_MOTO_ACCOUNT_ID").collect()
            } else {
                Vec::new()
            },
        };
        Some(crate::sim::procs::Runner::start(sim.store.clone(), sim.addr.port(), cfg))
    };
    sim.write_kubeconfig(&args.kubeconfig)?;
    writeln!(
        anstream::stderr(),
        "pinfleet sim serving {} (kubeconfig: {}); Ctrl-C to stop",
        sim.url(),
        args.kubeconfig.display()
    )?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    if let Some(p) = &args.snapshot {
        std::fs::write(p, serde_json::to_string(&sim.snapshot())?)?;
        writeln!(anstream::stderr(), "saved {} object(s) to {}", sim.snapshot().len(), p.display())?;
    }
    if let Some(r) = runner.as_mut() {
        r.stop();
    }
    let _ = std::fs::remove_dir_all(&scratch);
    sim.stop().await;
    Ok(ExitCode::SUCCESS)
}
