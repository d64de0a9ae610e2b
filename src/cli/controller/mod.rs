//! `pinfleet controller`: run the workload controllers against a cluster
//! (in-cluster config, or --kubeconfig).
//! Its modes each in a file: the workload controllers (here), the serving
//! certificate approver beside them (`approver`), the machine-health loop
//! (`machines`).

mod approver;
mod machines;

pub use approver::ServingAddresses;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
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
    /// Watch and reconcile this namespace only (default: every namespace).
    #[arg(long, env = "PINFLEET_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub metrics_addr: String,
    /// Run the controllers only while holding the Lease (one active replica).
    #[arg(long)]
    pub leader_elect: bool,
    /// A leader that has not renewed the Lease this long is replaced: a
    /// standby (its caches warm) takes over within this plus --renew-every.
    #[arg(long, default_value = "7s", value_parser = humantime::parse_duration)]
    pub lease_duration: std::time::Duration,
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub renew_every: std::time::Duration,
    /// The namespace of the Lease (it must exist).
    #[arg(long, default_value = crate::controller::SYSTEM_NAMESPACE)]
    pub lease_namespace: String,
    /// Where the runtime-support profiles are read (the `runtime-support` ConfigMap).
    #[arg(long, default_value = crate::controller::SYSTEM_NAMESPACE)]
    pub profile_namespace: String,
    /// The controller's request budget against the API server: requests
    /// started per second, at once after a quiet spell, and in flight.
    #[arg(long, default_value_t = 5000.0)]
    pub api_qps: f64,
    #[arg(long, default_value_t = 5000)]
    pub api_burst: u32,
    #[arg(long, default_value_t = 64)]
    pub api_in_flight: usize,
    /// This replica's identity in the Lease (default: host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Approve kubelet serving certificates, checking names against the
    /// machine's addresses from EC2 or from the Node (the sim); or off.
    /// Unset: EC2 when AWS can be reached, else off (said once). Set to
    /// `ec2`, the controller refuses to start without AWS access.
    #[arg(long, value_enum)]
    pub serving_addresses: Option<ServingAddresses>,
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
    /// Replace control-plane machines without a fresh, verified etcd backup
    /// (otherwise one is found or asked of the agent first, and without it
    /// the control plane is held); the reason is recorded in history.
    #[arg(long, value_name = "REASON", env = "PINFLEET_SKIP_BACKUP")]
    pub skip_backup: Option<String>,
    #[command(flatten)]
    pub cloud: super::cloud::CloudArgs,
}

pub async fn run(g: &GlobalArgs, args: ControllerArgs) -> Result<ExitCode> {
    if let Some(cluster) = args.machines.clone() {
        return machines::machines(g, &args, &cluster).await;
    }
    let client = match &args.kubeconfig {
        Some(p) => crate::kube::client_from_kubeconfig(p, crate::kube::Retry::Default).await?,
        None => {
            crate::kube::install_crypto_provider();
            kube::Client::try_default().await?
        }
    };
    // The API protected: the controller's requests within a budget (429s
    // are backed off by the client, honouring Retry-After).
    let client = crate::kube::budget::wrap(
        client,
        crate::kube::budget::Budget { in_flight: args.api_in_flight, qps: Some(args.api_qps), burst: args.api_burst },
    );
    let approval = approver::approval(args.serving_addresses).await?;
    let ctx = crate::controller::Ctx::new(client.clone(), &args.cluster);
    if let Some(ns) = &args.watch_namespace {
        ctx.only_in(ns);
    }
    ctx.profiles_in(&args.profile_namespace);
    let leading = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(!args.leader_elect));
    // Health and metrics.
    let (c, l) = (ctx.clone(), leading.clone());
    // The last e2e run's figures, read from the API at most every 10 s
    // however often /metrics is asked (a stranger's loop of scrapes is not
    // a loop of reads of the member's API).
    let recorded: std::sync::Arc<tokio::sync::Mutex<Option<(std::time::Instant, String)>>> = Default::default();
    let app = axum::Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let (c, l, recorded) = (c.clone(), l.clone(), recorded.clone());
                async move {
                    let mut out = c.metrics(l.load(std::sync::atomic::Ordering::SeqCst));
                    // The last end-to-end run, as the e2e addon's job left it.
                    let mut cached = recorded.lock().await;
                    let fresh = cached.as_ref().filter(|(at, _)| at.elapsed() < std::time::Duration::from_secs(10));
                    let text = match fresh {
                        Some((_, text)) => text.clone(),
                        None => {
                            let text = crate::e2e::recorded_metrics(&c.client).await;
                            *cached = Some((std::time::Instant::now(), text.clone()));
                            text
                        }
                    };
                    out.push_str(&text);
                    out
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(&args.metrics_addr).await?;
    // Behind the edge, as every listener pinfleet opens: a scraper and a
    // kubelet's probes hold a connection or two; strangers' unfinished
    // headers and bodies hold little and are closed first.
    let limits = crate::edge::Limits::for_metrics();
    tokio::spawn(async move {
        if let Err(e) = crate::edge::serve(app, listener, None, limits, None, None, std::future::pending()).await {
            tracing::warn!("the controller's metrics listener stopped: {e:#}");
        }
    });
    // SIGTERM (a pod's end) or Ctrl-C: the controllers stop, and a leader
    // releases the Lease before the process ends.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        super::shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let work = async {
        if args.leader_elect {
            let (user, host) = crate::state::whoami();
            let identity = args.identity.clone().unwrap_or_else(|| format!("{host}-{}-{user}", std::process::id()));
            // Every replica watches and keeps its caches warm; the leader acts.
            let c = ctx.standby();
            let elected = move || {
                let c = c.clone();
                async move {
                    let _leading = c.lead();
                    futures::future::pending::<()>().await
                }
            };
            // The election runs on a thread and a client of its own, outside
            // the request budget: a renewal queued behind the controller's
            // own writes, or waiting for a runtime busy with its reconciles,
            // lost the lease in a busy spell and started the other replica's
            // full pass, the loop that made leadership flap.
            let (kubeconfig, namespace) = (args.kubeconfig.clone(), args.lease_namespace.clone());
            let (lease_duration, renew_every) = (args.lease_duration, args.renew_every);
            let (leading, stop) = (leading.clone(), stop_rx.clone());
            let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
            let spawned = std::thread::Builder::new().name("leader-election".into()).spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
                rt.block_on(async move {
                    let client = match &kubeconfig {
                        Some(p) => crate::kube::client_from_kubeconfig(p, crate::kube::Retry::Default).await,
                        None => kube::Client::try_default().await.map_err(anyhow::Error::from),
                    };
                    match client {
                        Ok(client) => {
                            let lock = crate::controller::leader::LeaseLock {
                                api: kube::Api::namespaced(client, &namespace),
                                name: "pinfleet-controller".into(),
                                identity,
                                lease_duration,
                                renew_every,
                            };
                            crate::controller::leader::run_elected(lock, leading, elected, stop).await;
                        }
                        Err(e) => tracing::error!("leader election: no client: {e:#}"),
                    }
                });
                let _ = done_tx.send(());
            });
            if let Err(e) = spawned {
                tracing::error!("leader election: cannot start its thread: {e}");
                return;
            }
            tokio::select! {
                _ = done_rx => {}
                _ = crate::controller::run(ctx.clone()) => {}
            }
        } else {
            let mut stop = stop_rx.clone();
            tokio::select! {
                _ = crate::controller::run(ctx.clone()) => {}
                _ = crate::controller::leader::stopped(&mut stop) => {}
            }
        }
    };
    tokio::select! {
        _ = work => {}
        _ = approver::approver(client.clone(), approval) => {}
    }
    Ok(ExitCode::SUCCESS)
}
