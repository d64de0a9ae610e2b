//! `pinfleet apply CLUSTER [--yes]` (and the shared body of `bootstrap`):
//! plan under the cluster lock, then walk the plan.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context as _, Result};
use clap::Args;
use owo_colors::OwoColorize;

use super::cloud::{home, CloudArgs, Session};
use super::GlobalArgs;
use crate::apply::{self, prepare};
use crate::output::{print_data, Format};
use crate::render::{KubeconfigParams, Renderer};
use crate::state::lock::Lock;
use crate::state::pki::Pki;
use crate::state::HistoryRecord;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    pub cluster: String,
    /// Make the changes (without it, only show the plan).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Changes to run at once.
    #[arg(long, default_value_t = apply::DEFAULT_PARALLELISM)]
    pub parallelism: usize,
    #[command(flatten)]
    pub cloud: CloudArgs,
    /// Leave the addon set alone (install it later with `pinfleet addons apply`).
    #[arg(long, env = "PINFLEET_SKIP_ADDONS")]
    pub skip_addons: bool,
    /// Install the addons through this kubeconfig (default: the target's,
    /// e.g. the one this command writes for an AWS cluster).
    #[arg(long)]
    pub addons_kubeconfig: Option<std::path::PathBuf>,
    /// How long to wait for each addon to be ready.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub addons_timeout: std::time::Duration,
    /// How long to wait for a new cluster's API server to answer before the
    /// addons (machines boot, kubeadm init runs: minutes on real AWS).
    #[arg(long, default_value = "20m", value_parser = humantime::parse_duration)]
    pub api_timeout: std::time::Duration,
}

pub async fn run(g: &GlobalArgs, args: ApplyArgs) -> Result<ExitCode> {
    run_apply(g, args, false).await
}

fn show(g: &GlobalArgs, plan: &crate::plan::Plan) -> Result<()> {
    match g.output {
        Format::Text => write!(anstream::stdout(), "{}", crate::plan::show::text(plan, true))?,
        other => print_data(other, plan)?,
    }
    Ok(())
}

/// Writes `<home>/kubeconfig/<cluster>.yaml` (mode 0600) for the admin user.
pub fn write_kubeconfig(cluster: &crate::spec::Cluster, pki: &Pki, api_host: &str) -> Result<std::path::PathBuf> {
    let dir = home().join("kubeconfig");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{}.yaml", cluster.metadata.name));
    let text = Renderer::new().kubeconfig(
        cluster,
        &KubeconfigParams {
            server: format!("https://{api_host}:{}", cluster.spec.api.port),
            ca_data: Pki::b64(&pki.ca_cert),
            user: format!("{}-admin", cluster.metadata.name),
            client_cert_data: Pki::b64(&pki.admin_cert),
            client_key_data: Pki::b64(&pki.admin_key),
        },
    )?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(path)
}

pub async fn run_apply(g: &GlobalArgs, args: ApplyArgs, bootstrap: bool) -> Result<ExitCode> {
    if args.cloud.target.aws().is_none() {
        return run_local(g, args, bootstrap).await;
    }
    let s = Session::open(g, &args.cluster, &args.cloud).await?;
    // Rendered before anything changes: a broken manifest stops the run here.
    let addon_set = if args.skip_addons { Vec::new() } else { super::addons::rendered(g, &s.loaded.cluster)? };
    let command = if bootstrap { "bootstrap" } else { "apply" };
    if !args.yes {
        // A preview: no bucket, no PKI, no lock, no changes.
        let pki = match s.store(false).await? {
            Some(store) => Pki::load(&store).await?,
            None => None,
        };
        if !bootstrap && pki.is_none() {
            bail!("cluster {} has not been bootstrapped yet: run `pinfleet bootstrap {}`", s.name(), s.name());
        }
        let prepared = prepare::prepare(&s.aws, &s.loaded.cluster, pki.as_ref()).await?;
        show(g, &prepared.plan)?;
        if !prepared.plan.is_empty() {
            writeln!(
                anstream::stderr(),
                "\nNothing changed. Run `pinfleet {command} {} --yes` to make these changes.",
                s.name()
            )?;
        }
        s.report_calls(g);
        return Ok(ExitCode::SUCCESS);
    }
    // Everything the cluster needs from the endpoint is there, before the
    // first write (the state bucket, the PKI).
    prepare::preflight(&s.aws, &s.loaded.cluster).await?;
    let store = s.store(true).await?.context("state store")?;
    let cluster = s.loaded.cluster.clone();
    let full_command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = Lock::with(&store, &full_command, async {
        let pki = if bootstrap {
            let (pki, created) = Pki::load_or_create(&store).await?;
            if created {
                writeln!(anstream::stderr(), "generated the cluster PKI and join token in {}", store.describe("pki/"))?;
            }
            pki
        } else {
            Pki::load(&store).await?.with_context(|| {
                format!(
                    "cluster {} has not been bootstrapped yet: run `pinfleet bootstrap {}`",
                    cluster.metadata.name, cluster.metadata.name
                )
            })?
        };
        let prepared = prepare::prepare(&s.aws, &cluster, Some(&pki)).await?;
        for w in &prepared.warnings {
            tracing::warn!("{w}");
        }
        show(g, &prepared.plan)?;
        let revision = store.next_revision().await?;
        let mut applied = None;
        if !prepared.plan.is_empty() {
            writeln!(anstream::stderr(), "\napplying revision {revision}:")?;
            let ctx = prepare::context(
                &s.aws,
                &cluster,
                prepared.desired.clone(),
                &prepared.observed,
                prepared.init_user_data.clone(),
                revision,
            );
            let opts = apply::Options { parallelism: args.parallelism, ..Default::default() };
            let report = apply::execute(&prepared.plan, ctx.clone(), &opts).await?;
            let lb_dns = ctx.lb_dns.lock().await.clone();
            applied = Some((report, lb_dns));
        }
        let lb_dns = applied.as_ref().and_then(|(_, d)| d.clone()).or_else(|| match prepared.desired.api_address {
            true => prepared.observed.api_address().and_then(|a| a.public_ip.clone()),
            false => prepared.observed.load_balancer.as_ref().map(|l| l.dns_name.clone()),
        });
        if let Some(host) = lb_dns {
            let path = write_kubeconfig(&cluster, &pki, &host)?;
            writeln!(anstream::stderr(), "kubeconfig: {}", path.display())?;
        }
        let plan = &prepared.plan;
        if !plan.is_empty() {
            let record = HistoryRecord::of_plan(revision, &full_command, plan).acting_as(s.aws.caller_identity().await);
            store.record(&record, &cluster).await?;
        } else if store.get(crate::state::SPEC_KEY).await?.is_none() {
            store.put_json(crate::state::SPEC_KEY, &cluster).await?;
        }
        Ok(applied.map(|(r, _)| r))
    })
    .await?;
    match report {
        Some(r) => writeln!(
            anstream::stderr(),
            "{} {} change(s) applied to {}",
            "done:".green().bold(),
            r.done.len(),
            s.name()
        )?,
        None => writeln!(anstream::stderr(), "{} {} already matches its definition", "done:".green().bold(), s.name())?,
    }
    s.report_calls(g);
    if !args.skip_addons {
        let kubeconfig = args.cloud.target.kubeconfig_or(args.addons_kubeconfig.as_deref(), s.name());
        wait_for_api(&kubeconfig, args.api_timeout, s.name())
            .await
            .context("the machines are applied, but the addons are not")?;
        let report = install_addons(g, &s.loaded.cluster, &addon_set, &kubeconfig, &args).await?;
        super::addons::record(&s, &report).await?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn install_addons(
    g: &GlobalArgs,
    cluster: &crate::spec::Cluster,
    set: &[crate::addons::RenderedAddon],
    kubeconfig: &std::path::Path,
    args: &ApplyArgs,
) -> Result<crate::addons::install::Report> {
    use std::io::IsTerminal as _;
    let opts = crate::addons::install::Options {
        timeout: args.addons_timeout,
        prune_crds: false,
        progress: std::io::stderr().is_terminal(),
    };
    super::addons::install(g, set, kubeconfig, &opts).await.with_context(|| {
        format!("installing the addons (re-run, or `pinfleet addons apply {}`, to resume)", cluster.metadata.name)
    })
}

/// Waits until the API server behind `kubeconfig` answers: one progress
/// line (what is awaited, for how long, the limit), connection errors only
/// at debug level, and a clear stop with the next step at the limit.
async fn wait_for_api(kubeconfig: &std::path::Path, timeout: std::time::Duration, cluster: &str) -> Result<()> {
    use std::io::IsTerminal as _;
    const ATTEMPT: std::time::Duration = std::time::Duration::from_secs(5);
    const PAUSE: std::time::Duration = std::time::Duration::from_secs(5);
    let start = std::time::Instant::now();
    let server = kube::config::Kubeconfig::read_from(kubeconfig)
        .ok()
        .and_then(|k| k.clusters.first().and_then(|c| c.cluster.as_ref()).and_then(|c| c.server.clone()))
        .unwrap_or_else(|| kubeconfig.display().to_string());
    let limit = humantime::format_duration(timeout);
    let tty = std::io::stderr().is_terminal();
    let mut last_said = None::<std::time::Instant>;
    loop {
        let attempt = async {
            let client = crate::kube::client_from_kubeconfig(kubeconfig, crate::kube::Retry::Never).await?;
            tokio::time::timeout(ATTEMPT, client.apiserver_version())
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {}", humantime::format_duration(ATTEMPT)))??;
            anyhow::Ok(())
        };
        let err = match attempt.await {
            Ok(()) => {
                if tty && last_said.is_some() {
                    writeln!(anstream::stderr())?;
                }
                return Ok(());
            }
            Err(e) => e,
        };
        tracing::debug!("API server at {server} not answering yet: {err:#}");
        let waited = std::time::Duration::from_secs(start.elapsed().as_secs());
        if start.elapsed() >= timeout {
            if tty && last_said.is_some() {
                writeln!(anstream::stderr())?;
            }
            anyhow::bail!(
                "the API server at {server} did not answer within {limit} (last: {err:#}); \
                 check the first control-plane machine's boot (`aws ec2 get-console-output`), \
                 then run `pinfleet addons apply {cluster}`, or bootstrap again with a longer --api-timeout"
            );
        }
        // On a terminal one line, redrawn; in a log one line a minute.
        let line = format!("waiting for the API server at {server}: {} of {limit}", humantime::format_duration(waited));
        let due = last_said.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(60));
        if tty {
            write!(anstream::stderr(), "\r\x1b[2K{line}")?;
        } else if due {
            writeln!(anstream::stderr(), "{line}")?;
        }
        if due {
            last_said = Some(std::time::Instant::now());
        }
        tokio::time::sleep(PAUSE.min(timeout.saturating_sub(start.elapsed()))).await;
    }
}

/// `--target sim|kind`: the Kubernetes side only, on this machine.
async fn run_local(g: &GlobalArgs, args: ApplyArgs, bootstrap: bool) -> Result<ExitCode> {
    use super::cloud::Target;
    let loaded = super::render::load_one(g, &args.cluster)?;
    let cluster = &loaded.cluster;
    let name = &cluster.metadata.name;
    let set = super::addons::rendered(g, cluster)?;
    if !args.yes {
        let nodes = crate::sim::nodes::declared_for(cluster).len();
        let mut e = anstream::stderr();
        writeln!(
            e,
            "would {} {name} on {:?} with {nodes} node(s) and install:",
            if bootstrap { "create" } else { "update" },
            args.cloud.target
        )?;
        for a in &set {
            writeln!(e, "  {} {} ({} objects)", a.name, a.version, a.objects.len())?;
        }
        writeln!(e, "\nNothing changed. Run with --yes to do it.")?;
        return Ok(ExitCode::SUCCESS);
    }
    let kubeconfig = match (args.cloud.target, bootstrap) {
        (Target::Sim, true) => super::local::sim_up(g, cluster, &args.cluster).await?,
        (Target::Kind, true) => super::local::kind_up(cluster)?,
        (t, false) => {
            let k = t.kubeconfig(name);
            if !k.exists() {
                bail!(
                    "cluster {name} has not been bootstrapped on {t:?}: run `pinfleet bootstrap {name} --target {}`",
                    format!("{t:?}").to_lowercase()
                );
            }
            k
        }
        (Target::Aws | Target::Localstack, true) => unreachable!("AWS targets are handled by run_apply"),
    };
    writeln!(anstream::stderr(), "kubeconfig: {}", kubeconfig.display())?;
    if !args.skip_addons {
        install_addons(g, cluster, &set, &args.addons_kubeconfig.clone().unwrap_or(kubeconfig), &args).await?;
    }
    writeln!(anstream::stderr(), "{} {name} is up on {:?}", "done:".green().bold(), args.cloud.target)?;
    Ok(ExitCode::SUCCESS)
}
