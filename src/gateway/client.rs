//! The developers' side of the gateway: an HTTP client with the user's
//! credentials (effects), used by `pinfleet submit|workloads|queue|quota`.
//!
//! Credentials come from a flag, the environment (`PINFLEET_TOKEN`,
//! `PINFLEET_GATEWAY`) or a credentials file (`~/.config/pinfleet/credentials.yaml`:
//! `gateway`, `token`, `caFile`, `clientCertificate`, `clientKey`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::Value;

/// A credentials file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    #[serde(default)]
    pub gateway: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub client_certificate: Option<PathBuf>,
    #[serde(default)]
    pub client_key: Option<PathBuf>,
}

impl Credentials {
    pub fn load(path: &Path) -> Result<Credentials> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let node = crate::spec::yaml::parse_single(&text, path)?;
        serde_path_to_error::deserialize(node.to_json()).map_err(|e| {
            let p = e.path().to_string();
            anyhow::anyhow!("{}: {p}: {}", node.locate(&p), e.into_inner())
        })
    }

    pub fn default_path() -> Option<PathBuf> {
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/pinfleet/credentials.yaml"))
    }
}

type Body = http_body_util::Full<bytes::Bytes>;

pub struct Client {
    base: String,
    token: Option<String>,
    http: hyper_util::client::legacy::Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Body,
    >,
}

/// An answer: what was asked, its status and JSON body (a body that is
/// not JSON is kept as a string).
#[derive(Debug)]
pub struct Answer {
    /// `GET /v1/views/fleet`: the method and path asked.
    pub asked: String,
    pub status: u16,
    pub body: Value,
}

impl Answer {
    /// The body, or the gateway's error as an error.
    pub fn ok(self) -> Result<Value> {
        if (200..300).contains(&self.status) {
            return Ok(self.body);
        }
        bail!("{}", refusal(&self.asked, self.status, &self.body))
    }
}

/// An error reply in words, never empty: the gateway's own `error` where
/// it gave one; otherwise (an empty body, a proxy's page, a path this
/// gateway does not serve) what was asked and the HTTP status, with the
/// body's first words if it had any.
pub fn refusal(asked: &str, status: u16, body: &Value) -> String {
    let said = body.get("error").and_then(Value::as_str).map(str::trim).filter(|m| !m.is_empty());
    if let Some(msg) = said {
        return match status {
            401 => format!("the gateway refused the credentials: {msg}"),
            403 => format!("not allowed: {msg}"),
            404 => msg.to_string(),
            _ => format!("the gateway answered {status}: {msg}"),
        };
    }
    let reason = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    let head = format!("{asked} answered {status} {reason}");
    let text = match body {
        Value::Null => String::new(),
        Value::String(s) => crate::sdk_error::one_line(s),
        other => crate::sdk_error::one_line(&other.to_string()),
    };
    if text.is_empty() {
        head.trim_end().to_string()
    } else {
        format!("{}: {text}", head.trim_end())
    }
}

impl Client {
    pub fn new(base: &str, creds: &Credentials) -> Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = &creds.ca_file {
            use rustls::pki_types::pem::PemObject;
            for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)
                .with_context(|| format!("reading {}", ca.display()))?
            {
                roots.add(c.with_context(|| format!("{}: not a PEM certificate", ca.display()))?)?;
            }
        } else {
            for c in rustls_native_certs_fallback() {
                let _ = roots.add(c);
            }
        }
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let tls = match (&creds.client_certificate, &creds.client_key) {
            (Some(cert), Some(key)) => {
                use rustls::pki_types::pem::PemObject;
                let certs = rustls::pki_types::CertificateDer::pem_file_iter(cert)
                    .with_context(|| format!("reading {}", cert.display()))?
                    .collect::<Result<Vec<_>, _>>()
                    .with_context(|| format!("{}: not a PEM certificate", cert.display()))?;
                let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key)
                    .with_context(|| format!("{}: not a PEM key", key.display()))?;
                builder.with_client_auth_cert(certs, key)?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => bail!("a client certificate needs both clientCertificate and clientKey"),
        };
        let conn =
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
        let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build(conn);
        Ok(Client { base: base.trim_end_matches('/').to_string(), token: creds.token.clone(), http })
    }

    pub async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut req = http::Request::builder().method(method).uri(&url).header("accept", "application/json");
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let body = match body {
            Some(b) => {
                req = req.header("content-type", "application/json");
                Body::from(serde_json::to_vec(b)?)
            }
            None => Body::default(),
        };
        let resp = tokio::time::timeout(Duration::from_secs(60), self.http.request(req.body(body)?))
            .await
            .with_context(|| format!("{url}: no answer within 60 s"))?
            .with_context(|| format!("{url}: the gateway cannot be reached"))?;
        let status = resp.status().as_u16();
        let bytes = resp.into_body().collect().await?.to_bytes();
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer { asked: format!("{method} {path}"), status, body })
    }
}

fn rustls_native_certs_fallback() -> Vec<rustls::pki_types::CertificateDer<'static>> {
    let mut out = Vec::new();
    for path in ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"] {
        use rustls::pki_types::pem::PemObject;
        if let Ok(it) = rustls::pki_types::CertificateDer::pem_file_iter(path) {
            out.extend(it.flatten());
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_error_reply_says_what_was_asked_and_how_it_was_answered() {
        let asked = "GET /v1/views/workloads/search/web";
        // No body (a path this gateway does not serve): the status and the question.
        assert_eq!(refusal(asked, 404, &json!("")), "GET /v1/views/workloads/search/web answered 404 Not Found");
        assert_eq!(refusal(asked, 404, &Value::Null), "GET /v1/views/workloads/search/web answered 404 Not Found");
        // A proxy's page: its title.
        let page = json!("<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>");
        assert_eq!(refusal(asked, 502, &page), format!("{asked} answered 502 Bad Gateway: 502 Bad Gateway"));
        // JSON without an error (or an empty one): the body, shortened.
        assert_eq!(
            refusal(asked, 500, &json!({"error": ""})),
            format!("{asked} answered 500 Internal Server Error: {{\"error\":\"\"}}")
        );
        // The gateway's own reason, as it gave it.
        assert_eq!(
            refusal(asked, 404, &json!({"error": "team search has no submission \"web\""})),
            "team search has no submission \"web\""
        );
        assert_eq!(
            refusal(asked, 403, &json!({"error": "bob may not see team search"})),
            "not allowed: bob may not see team search"
        );
        assert_eq!(refusal(asked, 401, &json!({"error": "expired"})), "the gateway refused the credentials: expired");
        assert_eq!(refusal(asked, 503, &json!({"error": "try again"})), "the gateway answered 503: try again");
        // Whatever the reply, never an empty message.
        for (status, body) in [(404, json!("")), (599, json!("")), (400, json!(" ")), (500, json!({}))] {
            let m = refusal(asked, status, &body);
            assert!(m.starts_with(asked) && m.contains(&status.to_string()), "{m}");
        }
    }
}
