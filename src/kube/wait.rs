//! Waiting for a Kubernetes API server that is still coming up (a new
//! cluster's machines boot and run kubeadm: minutes on real AWS), the way a
//! person would want to watch it: one line, the limit, no noise.

use std::io::Write;

use anyhow::{bail, Result};

/// Waits until the API server behind `kubeconfig` answers: one progress
/// line (what is awaited, for how long, the limit), connection errors only
/// at debug level, and a clear stop with the next step at the limit.
pub async fn api_server(kubeconfig: &std::path::Path, timeout: std::time::Duration, cluster: &str) -> Result<()> {
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
            bail!(
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
