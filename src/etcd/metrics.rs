//! What the agent tells Prometheus (served through [`crate::edge`], like
//! every listener pinfleet opens): when the last backup was taken and
//! verified, whether its verification held, the interval it keeps, the
//! last delta flush. The monitoring addon's rules alert on them
//! (`EtcdBackupTooOld`, `EtcdBackupVerificationFailed`).

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use axum::routing::get;
use axum::Router;

/// The agent's figures (seconds since the epoch; 0: never).
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub cluster: String,
    pub interval_seconds: f64,
    pub last_backup: f64,
    pub last_backup_bytes: u64,
    pub last_verified: f64,
    /// 1 when the newest verification held, 0 when it failed, None before any.
    pub last_verification_ok: Option<bool>,
    pub last_delta_flush: f64,
    pub failures: u64,
}

pub type Shared = Arc<Mutex<Figures>>;

/// Prometheus' text format.
pub fn render(f: &Figures) -> String {
    let c = f.cluster.replace('\\', "\\\\").replace('"', "\\\"");
    let mut s = String::new();
    let mut gauge = |name: &str, help: &str, v: f64| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{cluster=\"{c}\"}} {v}");
    };
    gauge("pinfleet_etcd_backup_interval_seconds", "How often the agent takes a full backup.", f.interval_seconds);
    gauge(
        "pinfleet_etcd_backup_last_success_timestamp_seconds",
        "When the newest full backup was stored.",
        f.last_backup,
    );
    gauge("pinfleet_etcd_backup_last_size_bytes", "The newest full backup's size.", f.last_backup_bytes as f64);
    gauge(
        "pinfleet_etcd_backup_last_verified_timestamp_seconds",
        "When a backup was last proven by a restore.",
        f.last_verified,
    );
    if let Some(ok) = f.last_verification_ok {
        gauge(
            "pinfleet_etcd_backup_last_verification_ok",
            "1 when the newest verification held, 0 when it failed.",
            if ok { 1.0 } else { 0.0 },
        );
    }
    gauge(
        "pinfleet_etcd_delta_last_flush_timestamp_seconds",
        "When the agent last flushed what changed (the RPO's clock).",
        f.last_delta_flush,
    );
    let _ = writeln!(
        s,
        "# HELP pinfleet_etcd_backup_failures_total Backups that failed.\n# TYPE pinfleet_etcd_backup_failures_total counter\npinfleet_etcd_backup_failures_total{{cluster=\"{c}\"}} {}",
        f.failures
    );
    s
}

/// Serves `/metrics` on `listen` until the process ends.
pub async fn serve(listen: std::net::SocketAddr, figures: Shared) -> anyhow::Result<std::net::SocketAddr> {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let f = figures.lock().map(|f| f.clone()).unwrap_or_default();
            async move { ([("content-type", "text/plain; version=0.0.4")], render(&f)) }
        }),
    );
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| anyhow::anyhow!("listening on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let limits = crate::edge::Limits {
        connections: 32,
        per_peer: 8,
        per_user: 8,
        per_team: 8,
        h2_streams: 4,
        ..Default::default()
    };
    tokio::spawn(async move {
        if let Err(e) = crate::edge::serve(app, listener, None, limits, None, None, std::future::pending()).await {
            tracing::warn!("the agent's metrics stopped: {e:#}");
        }
    });
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_render_as_prometheus_reads_them() {
        let f = Figures {
            cluster: "prod\"use1".into(),
            interval_seconds: 900.0,
            last_backup: 1_700_000_000.0,
            last_backup_bytes: 1024,
            last_verified: 1_700_000_060.0,
            last_verification_ok: Some(false),
            last_delta_flush: 1_700_000_090.0,
            failures: 2,
        };
        insta::assert_snapshot!(render(&f));
    }
}
