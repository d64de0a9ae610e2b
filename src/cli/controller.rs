//! `pinfleet controller`: run the workload controllers against a cluster
//! (in-cluster config, or --kubeconfig).

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
    #[command(flatten)]
    pub cloud: super::cloud::CloudArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServingAddresses {
    Ec2,
    Node,
    Off,
}

/// Where the approver reads machine addresses, decided before anything runs.
enum Approval {
    Off,
    Node,
    Ec2(crate::cloud::aws::Aws),
}

/// How long the probe of AWS access may take (credentials from the
/// environment answer at once; an instance role through IMDS within a
/// second or two; outside AWS, IMDS does not answer at all).
const AWS_PROBE: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether EC2 can be asked: a region and credentials that STS accepts.
async fn aws_access() -> Result<crate::cloud::aws::Aws> {
    let probe = async {
        let opts = crate::cloud::aws::AwsOptions::from_env(crate::cloud::aws::Target::Aws, None)?;
        let aws = crate::cloud::aws::Aws::connect(&opts).await?;
        match aws.sts.get_caller_identity().send().await {
            Ok(_) => Ok(aws),
            Err(e) => anyhow::bail!("{}", crate::cloud::aws::client::describe_sdk_error(&e)),
        }
    };
    match tokio::time::timeout(AWS_PROBE, probe).await {
        Ok(r) => r,
        Err(_) => anyhow::bail!("no answer from AWS within {}", humantime::format_duration(AWS_PROBE)),
    }
}

/// The approver's address source: as asked, or (unset) EC2 when AWS can be
/// reached and otherwise off, said in one line. `ec2` asked for explicitly
/// without AWS access stops the start: the operator wanted approval.
async fn approval(asked: Option<ServingAddresses>) -> Result<Approval> {
    match asked {
        Some(ServingAddresses::Off) => Ok(Approval::Off),
        Some(ServingAddresses::Node) => Ok(Approval::Node),
        Some(ServingAddresses::Ec2) => aws_access().await.map(Approval::Ec2).map_err(|e| {
            anyhow::anyhow!(
                "--serving-addresses ec2 needs AWS access, and there is none: {e:#} (on a local cluster, use --serving-addresses node)"
            )
        }),
        None => match aws_access().await {
            Ok(aws) => Ok(Approval::Ec2(aws)),
            Err(e) => {
                let why = format!("{e:#}").lines().next().unwrap_or_default().to_string();
                tracing::warn!(
                    "kubelet serving certificates are not approved: no AWS access ({why}); on a local cluster pass --serving-addresses node, or off to say so"
                );
                Ok(Approval::Off)
            }
        },
    }
}

/// The approver with its address source (it runs on every replica: a
/// decision is one conditional write, and a decided CSR is skipped).
async fn approver(client: kube::Client, approval: Approval) {
    use crate::controller::serving;
    match approval {
        Approval::Off => {}
        Approval::Node => serving::run(client, serving::FromNode).await,
        Approval::Ec2(aws) => serving::run(client, serving::FromEc2(aws)).await,
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
    let say = |line: &str| {
        let _ = writeln!(anstream::stderr(), "{}", crate::views::text::safe(line));
    };
    // The capacity ledger as metrics, read at each scrape.
    let (url, aws) = (s.loaded.cluster.spec.state_store.clone(), s.aws.clone());
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" })).route(
        "/metrics",
        axum::routing::get(move || {
            let (url, aws) = (url.clone(), aws.clone());
            async move {
                match crate::state::capacity::all(&url, Some(&aws)).await {
                    Ok(ledgers) => (axum::http::StatusCode::OK, crate::capacity::metrics(&ledgers, chrono::Utc::now())),
                    Err(e) => (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        format!("# the capacity ledger could not be read: {}\n", e.to_string().replace('\n', " ")),
                    ),
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(&args.metrics_addr)
        .await
        .with_context(|| format!("serving metrics on --metrics-addr {}", args.metrics_addr))?;
    if let Ok(a) = listener.local_addr() {
        say(&format!("machine-health: capacity metrics on http://{a}/metrics"));
    }
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let work = healer.run(&on, &say);
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
    // The API protected: the controller's requests within a budget (429s
    // are backed off by the client, honouring Retry-After).
    let client = crate::kube::budget::wrap(
        client,
        crate::kube::budget::Budget { in_flight: args.api_in_flight, qps: Some(args.api_qps), burst: args.api_burst },
    );
    let approval = approval(args.serving_addresses).await?;
    let ctx = crate::controller::Ctx::new(client.clone(), &args.cluster);
    if let Some(ns) = &args.watch_namespace {
        ctx.only_in(ns);
    }
    ctx.profiles_in(&args.profile_namespace);
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
                    out.push_str(&crate::e2e::recorded_metrics(&c.client).await);
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
                api: kube::Api::namespaced(client.clone(), &args.lease_namespace),
                name: "pinfleet-controller".into(),
                identity: args.identity.clone().unwrap_or_else(|| format!("{host}-{}-{user}", std::process::id())),
                lease_duration: args.lease_duration,
                renew_every: args.renew_every,
            };
            // Every replica watches and keeps its caches warm; the leader acts.
            let c = ctx.standby();
            let elected = move || {
                let c = c.clone();
                async move {
                    let _leading = c.lead();
                    futures::future::pending::<()>().await
                }
            };
            futures::join!(
                crate::controller::leader::run_elected(lock, leading.clone(), elected),
                crate::controller::run(ctx.clone())
            );
        } else {
            crate::controller::run(ctx.clone()).await;
        }
    };
    tokio::select! {
        _ = work => {}
        _ = approver(client.clone(), approval) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}
