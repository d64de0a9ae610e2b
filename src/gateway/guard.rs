//! Requests a browser was tricked into sending, refused before any route
//! (effects-free middleware between the listener and the router).
//!
//! ```text
//! listener ─► guard: Host a loopback name of this port (plain HTTP)?
//!                    a state change from this origin only?
//!                    an API body declared as JSON?
//!          ─► router
//! ```
//!
//! Plain HTTP is served on loopback only, where anonymous mode and the
//! console's cookie make credentials ambient: a page elsewhere could
//! otherwise post to `http://127.0.0.1:8480` (cross-site request forgery)
//! or rebind a name of its own to 127.0.0.1 and read the answers (DNS
//! rebinding, which the Host header gives away). So, as the Kubernetes API
//! server's and Jupyter's local servers do: the Host must name loopback and
//! this port; a POST, PUT, PATCH or DELETE carrying `Origin` must come from
//! the origin being served and one carrying `Sec-Fetch-Site` must be
//! same-origin; and an API body must say `application/json` (a form or
//! `text/plain` is what a cross-site page can send without asking).
//! Command-line clients send none of the browser headers and pass.

use std::net::SocketAddr;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

pub use crate::edge::BODY_LIMIT;

#[derive(Clone)]
pub struct Guard {
    /// The address the listener is bound to.
    pub local: SocketAddr,
    /// Plain HTTP (loopback only): the Host is checked.
    pub plain: bool,
    /// Where refusals are audited (None: the log, at warn).
    pub audit: Option<std::sync::Arc<super::audit::AuditLog>>,
}

fn refuse(guard: &Guard, method: &Method, path: &str, status: StatusCode, why: &str) -> Response {
    match &guard.audit {
        Some(log) => log.write(&super::audit::Entry::new(None, method.as_str(), path, status.as_u16(), why)),
        None => tracing::warn!(answer = status.as_u16(), reason = why, "gateway: refused {method} {path}"),
    }
    (status, Json(json!({"error": why}))).into_response()
}

/// `host[:port]` → (host, port); IPv6 in brackets.
fn split_host(h: &str) -> (&str, Option<&str>) {
    if let Some(rest) = h.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((ip, tail)) => (ip, tail.strip_prefix(':')),
            None => (h, None),
        };
    }
    match h.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (h, None),
    }
}

/// Is `host` (a Host header) a loopback name of this listener?
pub fn loopback_host(host: &str, port: u16) -> bool {
    let (name, p) = split_host(host);
    let name_ok =
        name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let port_ok = match p {
        Some(p) => p.parse::<u16>().is_ok_and(|p| p == port),
        None => port == 80,
    };
    name_ok && port_ok
}

/// The decision, pure: `None` lets the request through.
pub fn decide(
    guard: &Guard,
    method: &Method,
    path: &str,
    host: Option<&str>,
    origin: Option<&str>,
    fetch_site: Option<&str>,
    content_type: Option<&str>,
) -> Option<(StatusCode, String)> {
    if guard.plain && !host.is_some_and(|h| loopback_host(h, guard.local.port())) {
        return Some((
            StatusCode::MISDIRECTED_REQUEST,
            format!(
                "this gateway answers to 127.0.0.1:{0} and localhost:{0} only (Host {1:?})",
                guard.local.port(),
                host.unwrap_or("")
            ),
        ));
    }
    let changes = matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
    if !changes {
        return None;
    }
    // Sec-Fetch-Site, where the browser sends it, says it outright (a page
    // served with `Referrer-Policy: no-referrer` posts `Origin: null`
    // even to itself); otherwise the Origin must be this one.
    match fetch_site {
        Some("same-origin" | "none") => return content_check(guard, method, path, content_type),
        Some(site) => return Some((StatusCode::FORBIDDEN, format!("a {site} request may not change anything here"))),
        None => {}
    }
    if let Some(origin) = origin {
        let scheme = if guard.plain { "http" } else { "https" };
        let same = host.is_some_and(|h| origin.eq_ignore_ascii_case(&format!("{scheme}://{h}")));
        if !same {
            return Some((
                StatusCode::FORBIDDEN,
                "a request from another origin may not change anything here".to_string(),
            ));
        }
    }
    content_check(guard, method, path, content_type)
}

/// The API takes JSON bodies only.
fn content_check(
    _guard: &Guard,
    method: &Method,
    path: &str,
    content_type: Option<&str>,
) -> Option<(StatusCode, String)> {
    let has_body = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if has_body && path.starts_with("/v1/") {
        let json = content_type
            .and_then(|c| c.split(';').next())
            .is_some_and(|c| c.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Some((StatusCode::UNSUPPORTED_MEDIA_TYPE, "the API takes application/json bodies only".into()));
        }
    }
    None
}

pub async fn check(State(guard): State<Guard>, req: Request, next: Next) -> Response {
    let refusal = {
        let headers = req.headers();
        // A declared body past the limit is refused before it is read (a
        // client that never sends it would otherwise hold the connection).
        let declared = headers.get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > BODY_LIMIT as u64) {
            let why = format!("a request body is at most {} KiB", BODY_LIMIT / 1024);
            return refuse(&guard, req.method(), req.uri().path(), StatusCode::PAYLOAD_TOO_LARGE, &why);
        }
        let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let host = h("host").map(str::to_string).or_else(|| req.uri().authority().map(|a| a.to_string()));
        decide(
            &guard,
            req.method(),
            req.uri().path(),
            host.as_deref(),
            h("origin"),
            h("sec-fetch-site"),
            h("content-type"),
        )
        .map(|(status, why)| refuse(&guard, req.method(), req.uri().path(), status, &why))
    };
    match refusal {
        Some(r) => r,
        None => next.run(req).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_elsewhere_cannot_change_anything_and_a_rebound_name_is_refused() {
        let g = Guard { local: "127.0.0.1:8480".parse().unwrap(), plain: true, audit: None };
        let ok = |m: Method, path: &str, host: &str, origin: Option<&str>, site: Option<&str>, ct: Option<&str>| {
            decide(&g, &m, path, Some(host), origin, site, ct).map(|(s, _)| s.as_u16())
        };
        let json = Some("application/json");
        // The CLI: no browser headers.
        assert_eq!(ok(Method::POST, "/v1/submissions", "127.0.0.1:8480", None, None, json), None);
        assert_eq!(ok(Method::GET, "/", "localhost:8480", None, None, None), None);
        assert_eq!(ok(Method::DELETE, "/v1/submissions/a/b", "[::1]:8480", None, None, None), None);
        // The console itself.
        assert_eq!(
            ok(
                Method::POST,
                "/login",
                "127.0.0.1:8480",
                Some("http://127.0.0.1:8480"),
                Some("same-origin"),
                Some("application/x-www-form-urlencoded")
            ),
            None
        );
        // DNS rebinding: another name for 127.0.0.1.
        assert_eq!(
            ok(Method::DELETE, "/v1/submissions/a/b", "rebind.attacker.example:8480", None, None, None),
            Some(421)
        );
        assert_eq!(ok(Method::GET, "/v1/submissions", "127.0.0.1:9999", None, None, None), Some(421));
        // Cross-site forms and text/plain posts.
        assert_eq!(
            ok(Method::POST, "/login", "127.0.0.1:8480", Some("http://attacker.example"), Some("cross-site"), None),
            Some(403)
        );
        assert_eq!(
            ok(Method::POST, "/v1/submissions", "127.0.0.1:8480", Some("null"), None, Some("text/plain")),
            Some(403)
        );
        assert_eq!(ok(Method::POST, "/v1/submissions", "127.0.0.1:8480", None, Some("same-site"), json), Some(403));
        assert_eq!(ok(Method::POST, "/v1/submissions", "127.0.0.1:8480", None, None, Some("text/plain")), Some(415));
        // Over TLS the Host is not the guard's business (the certificate is).
        let t = Guard { local: "0.0.0.0:8443".parse().unwrap(), plain: false, audit: None };
        assert_eq!(decide(&t, &Method::GET, "/", Some("gw.example.com"), None, None, None), None);
        assert_eq!(
            decide(&t, &Method::POST, "/logout", Some("gw.example.com"), Some("https://evil.example"), None, None)
                .map(|d| d.0.as_u16()),
            Some(403)
        );
    }
}
