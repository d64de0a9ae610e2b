//! The gateway's audit trail (an effect at the edge): one JSON line per
//! decision — accepted, refused (401, 403, 404, 409, 415, 421, 422),
//! cancelled, re-prioritised, a quota written — with who, verb, object,
//! answer and reason. Written whatever the log level: to `--audit-log
//! FILE` when given (appended, one line per write, flushed), else to
//! standard error beside the logs.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::Serialize;

use super::intake::Caller;

/// One audited decision.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Entry {
    pub at: String,
    /// The caller, or empty when none was established (a 401).
    pub user: String,
    pub via: String,
    pub teams: Vec<String>,
    pub verb: String,
    /// `team/id`, a submission's record name, a team for quota edits, a path.
    pub object: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub artifact: String,
    /// The HTTP status answered.
    pub answer: u16,
    /// accepted, refused, cancelled, written, …: and why, for a refusal.
    pub reason: String,
}

impl Entry {
    pub fn new(caller: Option<&Caller>, verb: &str, object: &str, answer: u16, reason: &str) -> Entry {
        Entry {
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            user: caller.map(|c| c.user.clone()).unwrap_or_default(),
            via: caller.map(|c| c.via.clone()).unwrap_or_default(),
            teams: caller.map(|c| c.teams.clone()).unwrap_or_default(),
            verb: verb.into(),
            object: object.into(),
            artifact: String::new(),
            answer,
            reason: reason.into(),
        }
    }

    pub fn artifact(mut self, artifact: &str) -> Entry {
        self.artifact = artifact.into();
        self
    }
}

/// `s` with every hidden character (control, bidirectional, zero-width)
/// written as its escape (`\u{202e}`), as the terminal views write them.
pub fn clean(s: &str) -> String {
    crate::views::text::escaped(s, false).into_owned()
}

tokio::task_local! {
    /// Set when the request in scope wrote its own audit line.
    pub static AUDITED: std::sync::Arc<std::sync::atomic::AtomicBool>;
}

/// Every refusal is audited, by construction: a request answered 4xx
/// without an audit line of its own (a refusal on a path no handler
/// audits: the console's pages, `/v1/views`, `/login`) gets one here, with
/// the answer and its reason.
pub async fn refusals(
    axum::extract::State(log): axum::extract::State<std::sync::Arc<AuditLog>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let verb = req.method().to_string();
    let object = req.uri().path().to_string();
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = AUDITED.scope(flag.clone(), next.run(req)).await;
    let status = r.status();
    if !status.is_client_error() || flag.load(std::sync::atomic::Ordering::SeqCst) {
        return r;
    }
    // The reason is the answer's own message (bodies of refusals are short).
    let (parts, body) = r.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let reason = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_string))
        .unwrap_or_else(|| {
            let t: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
            if t.trim().is_empty() || t.trim_start().starts_with('<') {
                status.canonical_reason().unwrap_or("refused").to_string()
            } else {
                t.trim().to_string()
            }
        });
    log.write(&Entry::new(None, &verb.to_lowercase(), &object, status.as_u16(), &reason));
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Where audit lines go.
pub struct AuditLog {
    file: Option<Mutex<std::fs::File>>,
}

impl AuditLog {
    /// Lines to `path` (appended; created when missing), or to stderr.
    pub fn open(path: Option<&Path>) -> Result<AuditLog> {
        let file = match path {
            Some(p) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .with_context(|| format!("opening the audit log {}", p.display()))?,
            )),
            None => None,
        };
        Ok(AuditLog { file })
    }

    pub fn stderr() -> AuditLog {
        AuditLog { file: None }
    }

    pub fn write(&self, e: &Entry) {
        let _ = AUDITED.try_with(|a| a.store(true, std::sync::atomic::Ordering::SeqCst));
        // No raw control, bidirectional or zero-width character reaches a
        // line: each is written as its code point (serde_json would escape
        // the controls, not a right-to-left override).
        let mut e = e.clone();
        for f in [&mut e.user, &mut e.via, &mut e.verb, &mut e.object, &mut e.artifact, &mut e.reason] {
            *f = clean(f);
        }
        for t in &mut e.teams {
            *t = clean(t);
        }
        let mut line = serde_json::to_string(&serde_json::json!({"audit": e})).unwrap_or_default();
        line.push('\n');
        match &self.file {
            Some(f) => {
                let mut f = f.lock().expect("audit log");
                if let Err(err) = f.write_all(line.as_bytes()).and_then(|_| f.flush()) {
                    tracing::error!("gateway: the audit log could not be written: {err}");
                }
            }
            None => {
                let _ = std::io::stderr().lock().write_all(line.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_holds_who_what_answer_and_why_and_stays_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(Some(&path)).unwrap();
        let c =
            Caller { user: "eve\n{\"forged\":1}".into(), teams: vec!["red".into()], admin: false, via: "oidc".into() };
        log.write(&Entry::new(Some(&c), "cancel", "blue/x", 403, "eve may not act for team blue"));
        log.write(&Entry::new(None, "submit", "/v1/submissions", 401, "no credentials"));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["audit"]["answer"], 403);
        // A control character is written as its code point: the line holds no raw one.
        assert_eq!(lines[0]["audit"]["user"], "eve\\u{a}{\"forged\":1}");
        assert_eq!(lines[1]["audit"]["reason"], "no credentials");
    }

    #[test]
    fn no_hidden_character_reaches_a_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(Some(&path)).unwrap();
        log.write(&Entry::new(
            None,
            "submit",
            "red/x",
            422,
            "spec.owner.team: \"blue\u{202e}der\u{200b}\" is not a team",
        ));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            !text.chars().any(crate::views::text::hidden) || text.chars().filter(|c| *c == '\n').count() == 1,
            "{text:?}"
        );
        assert!(!text.contains('\u{202e}') && !text.contains('\u{200b}'), "{text:?}");
        assert!(text.contains("\\\\u{202e}") && text.contains("\\\\u{200b}"), "{text:?}");
    }
}
