//! Alerts that roll a delivery back (effects at the edge, the reading
//! pure): a running delivery serves Alertmanager's webhook; a firing alert
//! whose labels name the workload (`namespace` and `workload`, or
//! `service` for the name) ends the wave it is in and takes every touched
//! cluster back. The receiver refuses a caller without the shared token
//! (Alertmanager's `http_config.authorization`), bodies over 256 KiB and
//! anything that is not a webhook payload, each with its reason and an
//! audit line (the edge's refusals and its own alike).
//!
//! ```text
//! Alertmanager ─POST /alerts─▶ serve ─▶ firing_for (pure) ─▶ watch ─▶ delivery::run (rollback)
//! ```

use std::net::SocketAddr;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::watch;

/// The first firing alert in an Alertmanager payload that names the
/// workload, as a reason; None when none does.
pub fn firing_for(payload: &Value, namespace: &str, workload: &str) -> Result<Option<String>, String> {
    let alerts = payload
        .get("alerts")
        .and_then(Value::as_array)
        .ok_or("not an Alertmanager webhook payload: no `alerts` list")?;
    for a in alerts {
        if a["status"] != "firing" {
            continue;
        }
        let label = |k: &str| a["labels"][k].as_str();
        let name = label("workload").or_else(|| label("service"));
        if label("namespace") == Some(namespace) && name == Some(workload) {
            let alertname = label("alertname").unwrap_or("an alert");
            let summary = a["annotations"]["summary"].as_str().map(|s| format!(": {s}")).unwrap_or_default();
            let cluster = label("cluster").map(|c| format!(" on {c}")).unwrap_or_default();
            let text: String = format!("alert {alertname} firing{cluster}{summary}")
                .chars()
                .filter(|c| !c.is_control())
                .take(300)
                .collect();
            return Ok(Some(text));
        }
    }
    Ok(None)
}

#[derive(Clone)]
struct Receiver {
    token: String,
    namespace: String,
    workload: String,
    tx: watch::Sender<Option<String>>,
    /// Where its refusals are written (the edge's and its own).
    audit: Option<std::sync::Arc<dyn crate::edge::Audit>>,
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn receive(
    State(r): State<Receiver>,
    peer: Option<axum::Extension<crate::edge::PeerAddr>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> (StatusCode, axum::Json<Value>) {
    let refuse = |status: StatusCode, why: &str| {
        if let Some(a) = &r.audit {
            let ip = peer.map_or(std::net::IpAddr::from([0, 0, 0, 0]), |p| p.0 .0);
            a.refused(None, ip, "POST", "/alerts", status.as_u16(), why);
        }
        (status, axum::Json(json!({"error": why})))
    };
    let given = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    match given {
        None => return refuse(StatusCode::UNAUTHORIZED, "a bearer token is required"),
        Some(t) if !same(t.as_bytes(), r.token.as_bytes()) => {
            return refuse(StatusCode::UNAUTHORIZED, "the token is not the receiver's")
        }
        Some(_) => {}
    }
    let Ok(payload) = serde_json::from_slice::<Value>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    match firing_for(&payload, &r.namespace, &r.workload) {
        Err(e) => refuse(StatusCode::BAD_REQUEST, &e),
        Ok(None) => (StatusCode::OK, axum::Json(json!({"rollback": false}))),
        Ok(Some(why)) => {
            r.tx.send_if_modified(|cur| {
                if cur.is_none() {
                    *cur = Some(why.clone());
                    true
                } else {
                    false
                }
            });
            (StatusCode::OK, axum::Json(json!({"rollback": true, "reason": why})))
        }
    }
}

/// Serves the webhook on `listen` until the returned task is aborted;
/// a firing alert for the workload is sent on `tx`. The edge's refusals
/// (a stranger's body, budgets full, a panic) are written to `audit`.
pub async fn serve(
    listen: &str,
    token: String,
    namespace: &str,
    workload: &str,
    tx: watch::Sender<Option<String>>,
    audit: Option<std::sync::Arc<dyn crate::edge::Audit>>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    if token.trim().is_empty() {
        anyhow::bail!(
            "the alert receiver needs a token (--alerts-token-file): an empty one would let anyone roll back"
        );
    }
    let state = Receiver {
        token: token.trim().to_string(),
        namespace: namespace.into(),
        workload: workload.into(),
        tx,
        audit: audit.clone(),
    };
    let gate: std::sync::Arc<dyn crate::edge::Gate> = std::sync::Arc::new(state.clone());
    let app = Router::new().route("/alerts", post(receive)).layer(DefaultBodyLimit::max(BODY)).with_state(state);
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| anyhow::anyhow!("listening on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    // The same edge as the gateway's: a stranger's flood neither blocks
    // Alertmanager nor takes the delivery's descriptors.
    let task = tokio::spawn(async move {
        if let Err(e) =
            crate::edge::serve(app, listener, None, limits(), Some(gate), audit, std::future::pending()).await
        {
            tracing::warn!("the alert receiver stopped: {e:#}");
        }
    });
    Ok((addr, task))
}

/// The receiver `pinfleet delivery apply --alerts-listen` serves for the
/// delivery's workload, with the token read from `token_file`.
pub async fn serve_for(
    spec: &super::spec::DeliverySpec,
    listen: &str,
    token_file: &std::path::Path,
    tx: watch::Sender<Option<String>>,
    audit: Option<std::sync::Arc<dyn crate::edge::Audit>>,
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    use anyhow::Context as _;
    let token = std::fs::read_to_string(token_file).with_context(|| format!("reading {}", token_file.display()))?;
    serve(listen, token, &spec.workload.namespace, &spec.workload.name, tx, audit).await
}

/// The largest webhook payload read (Alertmanager groups alerts: a few KiB each).
const BODY: usize = 256 * 1024;

/// The receiver's edge: Alertmanager holds a connection or two; strangers
/// get little and wait for nothing.
pub fn limits() -> crate::edge::Limits {
    crate::edge::Limits {
        connections: 64,
        per_peer: 16,
        per_user: 16,
        per_team: 16,
        bodies_in_flight: 4 * BODY,
        body_per_holder: 2 * BODY,
        // Strangers' headers and bodies: a pool of their own, as small.
        strangers_in_flight: 4 * BODY,
        stranger_per_peer: BODY / 4,
        h2_streams: 4,
        ..crate::edge::Limits::default()
    }
}

/// Who may send a body: the holder of the receiver's token (a stranger
/// gets the edge's few KiB and a 401).
impl crate::edge::Gate for Receiver {
    fn principal<'a>(&'a self, parts: &'a http::request::Parts) -> futures::future::BoxFuture<'a, Option<String>> {
        let given = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::to_string);
        Box::pin(async move {
            let ok = given.is_some_and(|t| same(t.as_bytes(), self.token.as_bytes()));
            if ok {
                let _ = crate::edge::CONNECTION_TRUST.try_with(|t| t.trust("alertmanager", None));
            }
            ok.then(|| "alertmanager".to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_firing_alert_naming_the_workload_counts() {
        let p = |status: &str, ns: &str, w: &str| {
            json!({"version": "4", "status": status, "alerts": [
                {"status": "resolved", "labels": {"alertname": "Old", "namespace": "feeds", "workload": "web"}},
                {"status": status, "labels": {"alertname": "SLOErrorBudgetBurnFast", "namespace": ns, "workload": w, "cluster": "north"},
                 "annotations": {"summary": "burning\u{7}fast"}}]})
        };
        assert_eq!(
            firing_for(&p("firing", "feeds", "web"), "feeds", "web").unwrap().unwrap(),
            "alert SLOErrorBudgetBurnFast firing on north: burningfast"
        );
        assert_eq!(firing_for(&p("resolved", "feeds", "web"), "feeds", "web").unwrap(), None);
        assert_eq!(firing_for(&p("firing", "ads", "web"), "feeds", "web").unwrap(), None);
        assert!(firing_for(&json!({"receiver": "x"}), "feeds", "web").unwrap_err().contains("no `alerts` list"));
        assert!(firing_for(&json!([1, 2]), "feeds", "web").is_err());
    }
}
