//! `pinfleet gateway serve`: the submission gateway's API and console on
//! a host cluster (or an embedded sim), its quotas seeded from a file.

mod config;

#[allow(unused_imports)]
use super::*;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The host cluster that keeps the records (default: an embedded sim, for local work).
    #[arg(long, env = "PINFLEET_GATEWAY_HOST_KUBECONFIG")]
    pub host_kubeconfig: Option<PathBuf>,
    /// The namespace on the host that holds the records (and the leader's Lease).
    #[arg(long, default_value = crate::gateway::records::NAMESPACE)]
    pub namespace: String,
    /// A member cluster to place work on: NAME=KUBECONFIG (repeat).
    #[arg(long = "member", value_name = "NAME=KUBECONFIG")]
    pub members: Vec<String>,
    #[arg(long, default_value = "127.0.0.1:8480")]
    pub listen: String,
    /// Write the gateway's URL here once it serves.
    #[arg(long)]
    pub url_file: Option<PathBuf>,
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Accept client certificates signed by this CA (CN the user, O the groups).
    #[arg(long, requires = "tls_cert")]
    pub client_ca: Option<PathBuf>,
    /// The OIDC issuer whose tokens identify developers.
    #[arg(long, requires = "oidc_audience")]
    pub oidc_issuer: Option<String>,
    #[arg(long)]
    pub oidc_audience: Option<String>,
    /// The issuer's JWKS (default: from its discovery document).
    #[arg(long)]
    pub oidc_jwks_url: Option<String>,
    #[arg(long, default_value = "groups")]
    pub groups_claim: String,
    #[arg(long, default_value = "email")]
    pub username_claim: String,
    /// Groups naming teams start with this (`team:search` is team search).
    #[arg(long, default_value = "team:")]
    pub team_prefix: String,
    /// Members of this group edit quotas and act for every team.
    #[arg(long, default_value = "pinfleet:admins")]
    pub admin_group: String,
    /// Do not ask the host cluster about service-account tokens (TokenReview).
    #[arg(long)]
    pub no_token_review: bool,
    /// Local work only: callers without credentials are USER of TEAM[,TEAM] (loopback only).
    #[arg(long, value_name = "USER:TEAMS")]
    pub anonymous_as: Option<String>,
    /// Images must come from one of these registries (`HOST/` or
    /// `HOST/PATH/`: the host compared exactly, the path by components; repeat).
    #[arg(long = "allowed-registry")]
    pub allowed_registries: Vec<String>,
    /// The Pod Security Standards level every team's pods meet unless named below.
    #[arg(long, default_value = "baseline", value_parser = crate::kube::podsecurity::Level::parse)]
    pub pod_security_default: crate::kube::podsecurity::Level,
    /// A team's own level, TEAM=LEVEL (restricted, or privileged: a platform admin's policy; repeat).
    #[arg(long = "pod-security", value_name = "TEAM=LEVEL", value_parser = crate::gateway::intake::PodSecurity::parse_team)]
    pub pod_security: Vec<(String, crate::kube::podsecurity::Level)>,
    /// A DNS domain a team's Ingress hosts may use, TEAM=DOMAIN (and its subdomains; repeat).
    #[arg(long = "team-domain", value_name = "TEAM=DOMAIN", value_parser = crate::gateway::intake::parse_team_domain)]
    pub team_domains: Vec<(String, String)>,
    /// Taint keys a team's pods may tolerate, TEAM=KEY[,KEY]: the node groups the admins open to it
    /// (repeat; default: none beyond node conditions and the extended resources a pod asks for;
    /// the control plane's never).
    #[arg(long = "team-tolerations", value_name = "TEAM=KEY[,KEY]", value_parser = crate::gateway::intake::parse_team_tolerations)]
    pub team_tolerations: Vec<(String, Vec<String>)>,
    /// An IngressClass Ingresses may name, [TEAM=]CLASS: for one team, or for every team the flag
    /// names no class for (repeat; default: none, only the cluster's default class).
    #[arg(long = "ingress-class", value_name = "[TEAM=]CLASS", value_parser = crate::gateway::intake::parse_ingress_class)]
    pub ingress_classes: Vec<(Option<String>, String)>,
    /// A team's trust policy, TEAM=FILE (YAML: mode enforce|warn, keys, builders, repositories, refs,
    /// parameters): its images must be signed and carry SLSA provenance (repeat per team).
    #[arg(long = "trust-policy", value_name = "TEAM=FILE", value_parser = crate::registry::parse_trust_policy)]
    pub trust_policies: Vec<(String, crate::provenance::TrustPolicy)>,
    /// One check waived for one team, TEAM:CHECK (the standard's check name; repeat).
    #[arg(long = "pod-security-exception", value_name = "TEAM:CHECK", value_parser = crate::gateway::intake::PodSecurity::parse_exception)]
    pub pod_security_exceptions: Vec<(String, String)>,
    /// A priority class submitters may name: NAME=VALUE[,team=TEAM]…[,tier=TIER]…
    /// (repeat; default: low=-100 and normal=0 for all, high=100 for Reserved work).
    #[arg(long = "priority-class", value_name = "NAME=VALUE[,team=T][,tier=T]", value_parser = crate::gateway::intake::PriorityClass::parse)]
    pub priority_classes: Vec<crate::gateway::intake::PriorityClass>,
    /// Team quotas to write on start (TeamQuota YAML documents), for local work.
    #[arg(long)]
    pub quotas: Option<PathBuf>,
    /// This replica's name in the Lease (default: host name and pid).
    #[arg(long)]
    pub identity: Option<String>,
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How long a placed gang's pods (a TrainingJob's, a JobSet's) have to
    /// be all Running and Ready before it is evicted from its member and
    /// requeued (Kueue's waitForPodsReady timeout).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub pods_ready_timeout: Duration,
    /// An evicted gang is tried again after this, doubled at each eviction
    /// (Kueue's backoffBaseSeconds).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub requeue_backoff_base: Duration,
    /// The longest wait between an evicted gang's tries (Kueue's backoffMaxSeconds).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    pub requeue_backoff_max: Duration,
    /// Evictions after which a gang fails, saying why, instead of being requeued.
    #[arg(long, default_value_t = crate::gateway::gang::DEFAULT_BACKOFF_LIMIT)]
    pub requeue_limit: u32,
    /// Submissions of one team not finished at once (queued, admitted,
    /// placed, running): past it a new one is answered 429 with Retry-After.
    #[arg(long, default_value_t = crate::gateway::records::MAX_OPEN_PER_TEAM)]
    pub max_open_per_team: usize,
    /// What one team keeps on the gateway's host at most, in MiB: its
    /// records and their bodies, finished ones included (past it its oldest
    /// finished records go before their week is out).
    #[arg(long, default_value_t = crate::gateway::records::KEPT_PER_TEAM >> 20)]
    pub max_kept_mib_per_team: u64,
    /// How often the members' figures are read again (their nodes are watched).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub member_refresh: Duration,
    /// Requests to the host cluster's API in flight at once (watches aside):
    /// a thousand submissions at once wait here, not at the API server.
    #[arg(long, default_value_t = crate::kube::budget::Budget::GATEWAY.in_flight)]
    pub api_in_flight: usize,
    /// Requests to the host cluster's API started per second (unlimited
    /// when unset), with --api-burst at once after a quiet spell.
    #[arg(long)]
    pub api_qps: Option<f64>,
    #[arg(long, default_value_t = 100)]
    pub api_burst: u32,
    /// Serve the API (its JSON views under /v1/views included) without the
    /// web console's pages.
    #[arg(long)]
    pub no_console: bool,
    /// Append the audit trail (one JSON line per decision) to this file
    /// instead of standard error.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// Connections open at once, in all (kept below the open-file limit);
    /// past it a new connection closes the oldest one with no request in flight.
    #[arg(long, default_value_t = crate::gateway::listen::Limits::default().connections)]
    pub max_connections: usize,
    /// Connections open at once from one address.
    #[arg(long, default_value_t = crate::gateway::listen::Limits::default().per_peer)]
    pub max_connections_per_peer: usize,
    /// A connection with nothing read or written for this long is closed.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// The console shows the fleet's rollouts: fleet.yaml in the clusters
    /// folder, read from its state store on --target every --member-refresh.
    #[arg(long)]
    pub fleet_rollouts: bool,
    /// The deliveries' state store (s3://bucket/prefix or file://dir): the
    /// versions a delivery marked bad are refused at submission.
    #[arg(long)]
    pub delivery_store: Option<String>,
    #[command(flatten)]
    pub cloud: crate::cli::cloud::CloudArgs,
}

pub(super) async fn serve(s: ServeArgs, fleet: Option<crate::console::observe::FleetSource>) -> Result<ExitCode> {
    let listener = tokio::net::TcpListener::bind(&s.listen).await.with_context(|| format!("binding {}", s.listen))?;
    let addr = listener.local_addr()?;
    if s.tls_cert.is_none() && !addr.ip().is_loopback() {
        bail!("{addr}: without --tls-cert the gateway serves on a loopback address only");
    }
    if s.anonymous_as.is_some() && !addr.ip().is_loopback() {
        bail!("--anonymous-as is for local work: serve on a loopback address");
    }
    // The host cluster: given, or an embedded sim.
    let mut sim = None;
    let host = match &s.host_kubeconfig {
        Some(k) => crate::kube::apply::connect(k).await?,
        None => {
            let sm = crate::sim::Sim::start(0).await?;
            eprintln!("host cluster: an embedded sim at {} (records last as long as this process)", sm.url());
            let dir = std::env::temp_dir().join(format!("pinfleet-gateway-{}", std::process::id()));
            std::fs::create_dir_all(&dir)?;
            let kc = dir.join("host-kubeconfig.yaml");
            sm.write_kubeconfig(&kc)?;
            let c = crate::kube::apply::connect(&kc).await?;
            sim = Some(sm);
            c
        }
    };
    service::install(&host, &s.namespace).await?;
    if let Some(q) = &s.quotas {
        let n = service::seed_quotas(&host, &s.namespace, q).await?;
        eprintln!("wrote {n} team quotas from {}", q.display());
    }
    let mut members = Vec::new();
    for m in &s.members {
        let (name, path) = m.split_once('=').context(format!("--member {m:?}: expected NAME=KUBECONFIG"))?;
        let client =
            crate::kube::apply::connect(std::path::Path::new(path)).await.with_context(|| format!("member {name}"))?;
        members.push(service::MemberCluster { name: name.to_string(), client, labels: BTreeMap::new(), weight: 1 });
    }
    let identity = Identity::new(s.identity_settings()?, Some(host.clone()));
    let config = service::Config {
        namespace: s.namespace.clone(),
        identity: s.identity.clone().unwrap_or_else(|| format!("{}-{}", crate::state::whoami().1, std::process::id())),
        policy: s.policy(),
        interval: s.interval,
        lease_duration: s.lease_duration,
        member_refresh: s.member_refresh,
        api: s.api_budget(),
        audit_log: s.audit_log.clone(),
    };
    let svc = service::Service::start(host, members, identity, config).await?;
    if let Some(url) = &s.delivery_store {
        let _ = svc.delivery_line.set(crate::delivery::run::line_at(url).await?);
    }
    let audit = svc.audit_log.clone();
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let leader = tokio::spawn(svc.clone().run(stopping));
    let scheme = if s.tls_cert.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    if let Some(f) = &s.url_file {
        // Written whole and renamed into place: a reader waiting for the
        // file (a script, a test) never reads it empty.
        let tmp = f.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &url).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, f).with_context(|| format!("writing {}", f.display()))?;
    }
    eprintln!("gateway serving at {url}");
    let tls = match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => Some(http::Tls { cert: c, key: k, client_ca: s.client_ca.as_deref() }),
        _ => None,
    };
    // The views are the API's as much as the pages': built either way,
    // only the pages are switched off.
    let console = crate::console::Console::new(Arc::clone(&svc), fleet, s.member_refresh, s.tls_cert.is_some());
    let closing = Arc::clone(&console);
    let app = if s.no_console {
        crate::console::api(console)
    } else {
        eprintln!("console at {url}/");
        crate::console::app(console)
    };
    let shutdown = async move {
        crate::cli::shutdown_signal().await;
        // The leader stops its work and releases its Lease while the
        // connections drain.
        let _ = stop.send(true);
        // Live-update streams stay open until told: end them, or the
        // graceful shutdown waits for every open browser tab.
        closing.close();
    };
    // A lower cap cuts each user's and team's share with it.
    let limits = crate::gateway::listen::Limits {
        per_peer: s.max_connections_per_peer,
        idle: s.idle_timeout,
        ..Default::default()
    }
    .with_connections(s.max_connections);
    let gate: Arc<dyn crate::gateway::listen::Gate> = svc.identity.clone();
    http::serve_with(app, listener, tls, limits, Some(audit), Some(gate), shutdown).await?;
    // Bounded by the release's own deadline (two thirds of the lease).
    let _ = tokio::time::timeout(s.lease_duration, leader).await;
    if let Some(sm) = sim {
        sm.stop().await;
        // The embedded sim's kubeconfig lived as long as it did.
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("pinfleet-gateway-{}", std::process::id())));
    }
    Ok(ExitCode::SUCCESS)
}
