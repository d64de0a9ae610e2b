//! `pinfleet controller --machines CLUSTER`: the machine-health loop with
//! its interruption listener, and the capacity ledger's metrics.

#[allow(unused_imports)]
use super::*;

/// `--machines CLUSTER`: the machine-health loop, each pass shown on stderr.
pub(super) async fn machines(g: &GlobalArgs, args: &ControllerArgs, cluster: &str) -> Result<ExitCode> {
    use std::io::Write as _;
    let s = crate::cli::cloud::Session::open(g, cluster, &args.cloud).await?;
    let kubeconfig = args.cloud.target.kubeconfig_or(args.kubeconfig.as_deref(), s.name());
    let (store, _pki, client) = s.roll_target(&kubeconfig).await?;
    let cfg = crate::rollout::health::Config {
        node_startup: args.node_startup_timeout,
        unhealthy: args.unhealthy_timeout,
        max_unhealthy: args.max_unhealthy,
        skip_backup: args.skip_backup.clone(),
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
    // The capacity ledger as metrics, read at most every 10 s however often
    // it is scraped (a loop of scrapes is not a loop of reads of S3).
    let (url, aws) = (s.loaded.cluster.spec.state_store.clone(), s.aws.clone());
    type Read = (axum::http::StatusCode, String);
    let cached: std::sync::Arc<tokio::sync::Mutex<Option<(std::time::Instant, Read)>>> = Default::default();
    let app = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" })).route(
        "/metrics",
        axum::routing::get(move || {
            let (url, aws, cached) = (url.clone(), aws.clone(), cached.clone());
            async move {
                let mut cached = cached.lock().await;
                if let Some((_, read)) =
                    cached.as_ref().filter(|(at, _)| at.elapsed() < std::time::Duration::from_secs(10))
                {
                    return read.clone();
                }
                let read: Read = match crate::state::capacity::all(&url, Some(&aws)).await {
                    Ok(ledgers) => (axum::http::StatusCode::OK, crate::capacity::metrics(&ledgers, chrono::Utc::now())),
                    Err(e) => (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        format!("# the capacity ledger could not be read: {}\n", e.to_string().replace('\n', " ")),
                    ),
                };
                *cached = Some((std::time::Instant::now(), read.clone()));
                read
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(&args.metrics_addr)
        .await
        .with_context(|| format!("serving metrics on --metrics-addr {}", args.metrics_addr))?;
    if let Ok(a) = listener.local_addr() {
        say(&format!("machine-health: capacity metrics on http://{a}/metrics"));
    }
    // Behind the edge, as every listener pinfleet opens.
    tokio::spawn(async move {
        let limits = crate::edge::Limits::for_metrics();
        if let Err(e) = crate::edge::serve(app, listener, None, limits, None, None, std::future::pending()).await {
            tracing::warn!("machine-health: the metrics listener stopped: {e:#}");
        }
    });
    let work = healer.run(&on, &say);
    tokio::select! {
        _ = work => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}
