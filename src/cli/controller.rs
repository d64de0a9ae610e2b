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
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: String,
    /// Run the controllers only while holding the Lease (one active replica).
    #[arg(long)]
    pub leader_elect: bool,
    /// This replica's identity in the Lease (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Approve kubelet serving certificates, checking names against the
    /// machine's addresses from EC2 or from the Node (the sim); or off.
    #[arg(long, value_enum, default_value_t = ServingAddresses::Ec2)]
    pub serving_addresses: ServingAddresses,
    /// Run the machine-health loop for this cluster (from the clusters
    /// folder) instead of the workload controllers: replace machines whose
    /// instance stopped or whose Node is not Ready, keep groups at size.
    #[arg(long, value_name = "CLUSTER")]
    pub machines: Option<String>,
    /// A machine whose Node has not registered this long after launch is unhealthy.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub node_startup_timeout: std::time::Duration,
    /// A Node Ready=False/Unknown this long is unhealthy.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub unhealthy_timeout: std::time::Duration,
    /// Replace nothing in a group with more than this share (or number) unhealthy.
    #[arg(long, default_value = "40%", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<crate::spec::IntOrPercent>()))]
    pub max_unhealthy: crate::spec::IntOrPercent,
    /// Time between the machine-health loop's passes.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub machines_interval: std::time::Duration,
    #[command(flatten)]
    pub cloud: super::cloud::CloudArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServingAddresses {
    Ec2,
    Node,
    Off,
}

/// The approver with the chosen address source (it runs on every replica:
/// a decision is one conditional write, and a decided CSR is skipped).
/// Without AWS access it cannot check names: it says so once and stays
/// idle, and the workload controllers keep running.
async fn approver(client: kube::Client, source: ServingAddresses) {
    use crate::controller::serving;
    let ec2 = async {
        let opts = crate::cloud::aws::AwsOptions::from_env(crate::cloud::aws::Target::Aws, None)?;
        crate::cloud::aws::Aws::connect(&opts).await
    };
    match source {
        ServingAddresses::Off => {}
        ServingAddresses::Node => serving::run(client, serving::FromNode).await,
        ServingAddresses::Ec2 => match ec2.await {
            Ok(aws) => serving::run(client, serving::FromEc2(aws)).await,
            Err(e) => tracing::error!("kubelet serving certificates are not approved: no AWS access: {e:#}"),
        },
    }
    std::future::pending::<()>().await
}

/// `--machines CLUSTER`: the machine-health loop, each pass shown on stderr.
async fn machines(g: &GlobalArgs, args: &ControllerArgs, cluster: &str) -> Result<ExitCode> {
    use std::io::Write as _;
    let s = super::cloud::Session::open(g, cluster, &args.cloud).await?;
    let kubeconfig = args.cloud.target.kubeconfig_or(args.kubeconfig.as_deref(), s.name());
    let (store, _pki, client) = s.roll_target(&kubeconfig).await?;
    let cfg = crate::rollout::health::Config {
        node_startup: args.node_startup_timeout,
        unhealthy: args.unhealthy_timeout,
        max_unhealthy: args.max_unhealthy,
    };
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let on = |r: Result<&crate::rollout::health::Pass, &anyhow::Error>| {
        let mut err = anstream::stderr();
        match r {
            Ok(p) => {
                for line in p.lines() {
                    let _ = writeln!(err, "{line}");
                }
            }
            Err(e) => {
                let _ = writeln!(err, "machine-health: {e:#} (next pass retries)");
            }
        }
    };
    let healer = crate::rollout::health::Loop {
        aws: s.aws.clone(),
        cluster: s.loaded.cluster.clone(),
        store,
        client,
        cfg,
        interval: args.machines_interval,
        command,
    };
    let work = healer.run(&on);
    tokio::select! {
        _ = work => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn run(g: &GlobalArgs, args: ControllerArgs) -> Result<ExitCode> {
    if let Some(cluster) = args.machines.clone() {
        return machines(g, &args, &cluster).await;
    }
    let client = match &args.kubeconfig {
        Some(p) => crate::kube::client_from_kubeconfig(p, crate::kube::Retry::Default).await?,
        None => {
            crate::kube::install_crypto_provider();
            kube::Client::try_default().await?
        }
    };
    let ctx = crate::controller::Ctx::new(client.clone(), &args.cluster);
    let leading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!args.leader_elect));
    // Health and metrics.
    let (c, l) = (ctx.clone(), leading.clone());
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let (c, l) = (c.clone(), l.clone());
                async move {
                    let mut out = c.metrics(l.load(std::sync::atomic::Ordering::SeqCst));
                    // The last end-to-end run, as the e2e addon's job left it.
                    out.push_str(&crate::controller::e2e_metrics(&c.client).await);
                    out
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(&args.metrics_addr).await?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let work = async {
        if args.leader_elect {
            let (user, host) = crate::state::whoami();
            let lock = crate::controller::leader::LeaseLock {
                api: kube::Api::namespaced(client.clone(), crate::controller::SYSTEM_NAMESPACE),
                name: "pinfleet-controller".into(),
                identity: args.identity.clone().unwrap_or_else(|| format!("{host}-{}-{user}", std::process::id())),
                lease_duration: std::time::Duration::from_secs(15),
                renew_every: std::time::Duration::from_secs(5),
            };
            let c = ctx.clone();
            crate::controller::leader::run_elected(lock, leading.clone(), move || crate::controller::run(c.clone()))
                .await;
        } else {
            crate::controller::run(ctx.clone()).await;
        }
    };
    tokio::select! {
        _ = work => {}
        _ = approver(client.clone(), args.serving_addresses) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}
