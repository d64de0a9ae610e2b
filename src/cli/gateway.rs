//! `pinfleet gateway serve` (the submission gateway) and the developers'
//! commands that speak to it: `submit`, `workloads`, `queue`, `quota`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::GlobalArgs;
use crate::gateway::client::{Client, Credentials};
use crate::gateway::identity::{Identity, OidcSettings, Settings};
use crate::gateway::intake::{Caller, Policy};
use crate::gateway::{http, render, service};
use crate::output::Format;

#[derive(Debug, Args)]
pub struct GatewayArgs {
    #[command(subcommand)]
    pub command: GatewayCommand,
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Serve the submission gateway's API.
    Serve(ServeArgs),
    /// Install the gateway's CRDs and namespace on a host cluster.
    Install {
        #[arg(long, env = "PINFLEET_GATEWAY_HOST_KUBECONFIG")]
        host_kubeconfig: PathBuf,
        /// The namespace on the host that holds the records.
        #[arg(long, default_value = crate::gateway::records::NAMESPACE)]
        namespace: String,
    },
}

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
    /// Images must come from one of these registries (prefixes; repeat).
    #[arg(long = "allowed-registry")]
    pub allowed_registries: Vec<String>,
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
    /// Serve the API alone, without the web console at /.
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
    #[command(flatten)]
    pub cloud: super::cloud::CloudArgs,
}

impl ServeArgs {
    fn api_budget(&self) -> crate::kube::budget::Budget {
        crate::kube::budget::Budget { in_flight: self.api_in_flight, qps: self.api_qps, burst: self.api_burst }
    }
}

/// Where and as whom the developers' commands speak.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The gateway's URL.
    #[arg(long, env = "PINFLEET_GATEWAY")]
    pub gateway: Option<String>,
    /// A bearer token (OIDC or a service account's).
    #[arg(long, env = "PINFLEET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A credentials file (gateway, token, caFile, clientCertificate, clientKey).
    #[arg(long, env = "PINFLEET_CREDENTIALS")]
    pub credentials: Option<PathBuf>,
}

impl ClientArgs {
    pub fn client(&self) -> Result<Client> {
        let mut creds = match &self.credentials {
            Some(p) => Credentials::load(p)?,
            None => match Credentials::default_path().filter(|p| p.exists()) {
                Some(p) => Credentials::load(&p)?,
                None => Credentials::default(),
            },
        };
        if self.token.is_some() {
            creds.token = self.token.clone();
        }
        let url = self
            .gateway
            .clone()
            .or(creds.gateway.clone())
            .context("no gateway: pass --gateway URL, set PINFLEET_GATEWAY, or write it in the credentials file")?;
        Client::new(&url, &creds)
    }
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The workload (a PinterestService, JobSet, CronJob, TrainingJob or StatefulSet).
    pub file: PathBuf,
    /// The submission's id (a retry with the same id is the same submission;
    /// default: the workload's name and a digest of the file).
    #[arg(long)]
    pub id: Option<String>,
    /// A priority class the admins defined (default: normal); the gateway
    /// says which classes the workload's team may use.
    #[arg(long)]
    pub priority_class: Option<String>,
    /// Check everything and say what admission would decide now; record nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Args)]
pub struct WorkloadsArgs {
    #[command(subcommand)]
    pub command: WorkloadsCommand,
}

#[derive(Debug, Subcommand)]
pub enum WorkloadsCommand {
    /// Your teams' submissions.
    List {
        #[arg(long)]
        team: Option<String>,
        #[arg(long)]
        phase: Option<String>,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// One submission: where it is, why it waits, its latency.
    Describe {
        /// TEAM/ID
        submission: String,
        #[command(flatten)]
        client: ClientArgs,
    },
    /// Cancel a submission (released and removed from its clusters).
    Cancel {
        /// TEAM/ID
        submission: String,
        #[command(flatten)]
        client: ClientArgs,
    },
}

#[derive(Debug, Args)]
pub struct QueueArgs {
    #[arg(long)]
    pub team: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn print(g: &GlobalArgs, v: &Value, text: impl Fn(&Value) -> String) -> Result<()> {
    match g.output {
        Format::Text => {
            print!("{}", crate::views::text::safe(&text(v)));
            Ok(())
        }
        f => crate::output::print_data(f, v),
    }
}

fn team_id(s: &str) -> Result<(&str, &str)> {
    s.split_once('/')
        .filter(|(t, i)| !t.is_empty() && !i.is_empty())
        .context(format!("{s:?}: name a submission as TEAM/ID"))
}

pub async fn submit(g: &GlobalArgs, a: SubmitArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let node = crate::spec::yaml::parse_single(&text, &a.file)?;
    let workload = node.to_json();
    let id = match a.id {
        Some(id) => id,
        None => {
            use sha2::Digest as _;
            let name = workload.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("workload");
            format!("{name}-{}", &hex::encode(sha2::Sha256::digest(text.as_bytes()))[..10])
        }
    };
    let client = a.client.client()?;
    let path = if a.dry_run { "/v1/submissions?dryRun=true" } else { "/v1/submissions" };
    let ans = client
        .call(
            "POST",
            path,
            Some(&{
                let mut body = json!({"id": id, "workload": workload});
                if let Some(c) = &a.priority_class {
                    body["priorityClass"] = json!(c);
                }
                body
            }),
        )
        .await?;
    if ans.status == 401 || ans.status == 403 || ans.status >= 500 {
        ans.ok()?;
        unreachable!("an error status");
    }
    print(g, &ans.body, render::decision)?;
    Ok(if (200..300).contains(&ans.status) { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

pub async fn workloads(g: &GlobalArgs, a: WorkloadsArgs) -> Result<ExitCode> {
    match a.command {
        WorkloadsCommand::List { team, phase, client } => {
            let mut q = Vec::new();
            if let Some(t) = team {
                q.push(format!("team={t}"));
            }
            if let Some(p) = phase {
                q.push(format!("phase={p}"));
            }
            let path =
                if q.is_empty() { "/v1/submissions".to_string() } else { format!("/v1/submissions?{}", q.join("&")) };
            let v = client.client()?.call("GET", &path, None).await?.ok()?;
            print(g, &v, render::list)?;
        }
        WorkloadsCommand::Describe { submission, client } => {
            // The console's workload view: what was made of it, placement and
            // why, latency, its wait.
            let (t, i) = team_id(&submission)?;
            let seg = crate::views::html::seg;
            let path = format!("/v1/views/workloads/{}/{}", seg(t), seg(i));
            let v = client.client()?.call("GET", &path, None).await?.ok()?;
            if g.output != Format::Text {
                crate::output::print_data(g.output, &v)?;
            } else {
                let w: crate::views::workload::WorkloadView = serde_json::from_value(v).context(OLDER)?;
                print!("{}", crate::views::text::safe(&w.text()));
            }
        }
        WorkloadsCommand::Cancel { submission, client } => {
            let (t, i) = team_id(&submission)?;
            let v = client.client()?.call("DELETE", &format!("/v1/submissions/{t}/{i}"), None).await?.ok()?;
            print(g, &v, |v| {
                format!("{}: {}\n", v["name"].as_str().unwrap_or(""), v["message"].as_str().unwrap_or(""))
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What a view that does not parse says.
const OLDER: &str = "the gateway's view (is the gateway older than this client?)";

/// The team views a command shows: the team named, else every team the
/// caller may see (as the quota API lists them). With `-o`, their JSON.
async fn team_views(g: &GlobalArgs, a: &QueueArgs) -> Result<Option<Vec<crate::views::team::TeamView>>> {
    let client = a.client.client()?;
    let teams: Vec<String> = match &a.team {
        Some(t) => vec![t.clone()],
        None => client.call("GET", "/v1/quota", None).await?.ok()?["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["team"].as_str().map(str::to_string))
            .collect(),
    };
    let mut raw = Vec::new();
    for t in &teams {
        raw.push(client.call("GET", &format!("/v1/views/teams/{}", crate::views::html::seg(t)), None).await?.ok()?);
    }
    if g.output != Format::Text {
        crate::output::print_data(g.output, &json!({"items": raw}))?;
        return Ok(None);
    }
    let views = raw.into_iter().map(serde_json::from_value).collect::<Result<Vec<_>, _>>().context(OLDER)?;
    Ok(Some(views))
}

/// Each team's queue, from the team view the console shows.
pub async fn queue(g: &GlobalArgs, a: QueueArgs) -> Result<ExitCode> {
    if let Some(views) = team_views(g, &a).await? {
        if views.is_empty() {
            println!("no teams to show");
        }
        for (i, v) in views.iter().enumerate() {
            if i > 0 {
                println!();
            }
            if !v.queue.is_empty() {
                println!("team {}", crate::views::text::safe(&v.team));
            }
            print!("{}", crate::views::text::safe(&v.queue_text()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Each team's quota per tier, from the team view the console shows.
pub async fn quota(g: &GlobalArgs, a: QueueArgs) -> Result<ExitCode> {
    if let Some(views) = team_views(g, &a).await? {
        if views.is_empty() {
            println!("no teams to show");
        }
        for v in &views {
            print!("{}", crate::views::text::safe(&v.quota_text()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Debug, Args)]
pub struct ViewArgs {
    #[command(subcommand)]
    pub what: ViewWhat,
    #[command(flatten)]
    pub client: ClientArgs,
}

#[derive(Debug, Subcommand)]
pub enum ViewWhat {
    /// Every member cluster: reachable, version, images, nodes, last e2e run, drift.
    Fleet,
    /// One cluster: machines, addons, the last e2e run's checks, workloads placed there.
    Cluster { name: String },
    /// One team: quota per tier, its queue with positions, estimates and reasons.
    Team { team: String },
    /// One workload (TEAM/ID): placement and why, status per cluster, latency, what was made.
    Workload { submission: String },
}

/// The console's views, drawn for the terminal (or as JSON/YAML with -o).
pub async fn view(g: &GlobalArgs, a: ViewArgs) -> Result<ExitCode> {
    use crate::views;
    let seg = views::html::seg;
    let path = match &a.what {
        ViewWhat::Fleet => "/v1/views/fleet".to_string(),
        ViewWhat::Cluster { name } => format!("/v1/views/clusters/{}", seg(name)),
        ViewWhat::Team { team } => format!("/v1/views/teams/{}", seg(team)),
        ViewWhat::Workload { submission } => {
            let (t, i) = team_id(submission)?;
            format!("/v1/views/workloads/{}/{}", seg(t), seg(i))
        }
    };
    let v = a.client.client()?.call("GET", &path, None).await?.ok()?;
    if g.output != Format::Text {
        crate::output::print_data(g.output, &v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let what = OLDER;
    let text = match a.what {
        ViewWhat::Fleet => serde_json::from_value::<views::fleet::FleetView>(v).context(what)?.text(),
        ViewWhat::Cluster { .. } => serde_json::from_value::<views::cluster::ClusterView>(v).context(what)?.text(),
        ViewWhat::Team { .. } => serde_json::from_value::<views::team::TeamView>(v).context(what)?.text(),
        ViewWhat::Workload { .. } => serde_json::from_value::<views::workload::WorkloadView>(v).context(what)?.text(),
    };
    print!("{}", crate::views::text::safe(&text));
    Ok(ExitCode::SUCCESS)
}

pub async fn run(_g: &GlobalArgs, a: GatewayArgs) -> Result<ExitCode> {
    match a.command {
        GatewayCommand::Install { host_kubeconfig, namespace } => {
            let host = crate::kube::apply::connect(&host_kubeconfig).await?;
            service::install(&host, &namespace).await?;
            println!("installed the gateway's CRDs and namespace {namespace} on {}", host_kubeconfig.display());
            Ok(ExitCode::SUCCESS)
        }
        GatewayCommand::Serve(s) => {
            // The fleet is loaded (and refused with located errors) before anything starts.
            let fleet = if s.fleet_rollouts {
                let opts = crate::spec::LoadOptions { known_addons: super::validate::known_addons(&_g.addons_dir) };
                let folder = crate::fleet::Folder::load(&_g.clusters_dir, &opts)?;
                let target =
                    s.cloud.target.aws().context(
                        "--fleet-rollouts reads the fleet's state store on AWS (--target aws or localstack)",
                    )?;
                let packages = crate::addons::load_all(&_g.addons_dir)?;
                Some(crate::console::observe::FleetSource { folder, target, packages })
            } else {
                None
            };
            serve(s, fleet).await
        }
    }
}

/// TeamQuota documents from a YAML file (for local work and the demo).
async fn seed_quotas(host: &kube::Client, namespace: &str, path: &std::path::Path) -> Result<usize> {
    use kube::api::{Api, Patch, PatchParams};
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let docs = crate::spec::yaml::parse_documents(&text, path)?;
    let api: Api<crate::gateway::records::TeamQuota> = Api::namespaced(host.clone(), namespace);
    let mut n = 0;
    for d in docs {
        let mut v = d.to_json();
        v["metadata"]["namespace"] = json!(namespace);
        let tq: crate::gateway::records::TeamQuota = serde_path_to_error::deserialize(v.clone()).map_err(|e| {
            let p = e.path().to_string();
            anyhow::anyhow!("{}: {p}: {}", d.locate(&p), e.into_inner())
        })?;
        let name = tq
            .metadata
            .name
            .clone()
            .context(format!("{}: a TeamQuota needs metadata.name (the team)", path.display()))?;
        api.patch(&name, &PatchParams::apply(service::MANAGER).force(), &Patch::Apply(&v))
            .await
            .with_context(|| format!("writing team {name}'s quota"))?;
        n += 1;
    }
    Ok(n)
}

async fn serve(s: ServeArgs, fleet: Option<crate::console::observe::FleetSource>) -> Result<ExitCode> {
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
        let n = seed_quotas(&host, &s.namespace, q).await?;
        eprintln!("wrote {n} team quotas from {}", q.display());
    }
    let mut members = Vec::new();
    for m in &s.members {
        let (name, path) = m.split_once('=').context(format!("--member {m:?}: expected NAME=KUBECONFIG"))?;
        let client =
            crate::kube::apply::connect(std::path::Path::new(path)).await.with_context(|| format!("member {name}"))?;
        members.push(service::MemberCluster { name: name.to_string(), client, labels: BTreeMap::new(), weight: 1 });
    }
    let anonymous = match &s.anonymous_as {
        Some(a) => {
            let (user, teams) = a.split_once(':').context("--anonymous-as USER:TEAM[,TEAM]")?;
            Some(Caller {
                user: user.into(),
                teams: teams.split(',').map(str::to_string).collect(),
                admin: false,
                via: "loopback".into(),
            })
        }
        None => None,
    };
    let settings = Settings {
        oidc: s.oidc_issuer.clone().map(|issuer| OidcSettings {
            issuer,
            audience: s.oidc_audience.clone().unwrap_or_default(),
            jwks_url: s.oidc_jwks_url.clone(),
            groups_claim: s.groups_claim.clone(),
            username_claim: s.username_claim.clone(),
        }),
        token_review: !s.no_token_review,
        team_prefix: s.team_prefix.clone(),
        admin_group: s.admin_group.clone(),
        anonymous,
    };
    let identity = Identity::new(settings, Some(host.clone()));
    let config = service::Config {
        namespace: s.namespace.clone(),
        identity: s.identity.clone().unwrap_or_else(|| format!("{}-{}", hostname(), std::process::id())),
        policy: Policy {
            allowed_registries: s.allowed_registries.clone(),
            priority_classes: s.priority_classes.clone(),
        },
        interval: s.interval,
        lease_duration: s.lease_duration,
        member_refresh: s.member_refresh,
        api: s.api_budget(),
        audit_log: s.audit_log.clone(),
    };
    let svc = service::Service::start(host, members, identity, config).await?;
    let audit = svc.audit_log.clone();
    tokio::spawn(svc.clone().run());
    let scheme = if s.tls_cert.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{addr}");
    if let Some(f) = &s.url_file {
        std::fs::write(f, &url).with_context(|| format!("writing {}", f.display()))?;
    }
    eprintln!("gateway serving at {url}");
    let mut closing = None;
    let tls = match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => Some(http::Tls { cert: c, key: k, client_ca: s.client_ca.as_deref() }),
        _ => None,
    };
    let app = if s.no_console {
        http::router(Arc::clone(&svc))
    } else {
        let console = crate::console::Console::new(Arc::clone(&svc), fleet, s.member_refresh, s.tls_cert.is_some());
        eprintln!("console at {url}/");
        let c = Arc::clone(&console);
        closing = Some(c);
        crate::console::app(console)
    };
    let shutdown = async move {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a signal handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
        // Live-update streams stay open until told: end them, or the
        // graceful shutdown waits for every open browser tab.
        if let Some(c) = closing {
            c.close();
        }
    };
    let limits = crate::gateway::listen::Limits {
        connections: s.max_connections,
        per_peer: s.max_connections_per_peer,
        idle: s.idle_timeout,
        ..Default::default()
    };
    http::serve_with(app, listener, tls, limits, Some(audit), shutdown).await?;
    if let Some(sm) = sim {
        sm.stop().await;
        // The embedded sim's kubeconfig lived as long as it did.
        let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("pinfleet-gateway-{}", std::process::id())));
    }
    Ok(ExitCode::SUCCESS)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "gateway".into())
}
