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
        // serde_json escapes every control character: a line stays a line.
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
        assert_eq!(lines[0]["audit"]["user"], "eve\n{\"forged\":1}");
        assert_eq!(lines[1]["audit"]["reason"], "no credentials");
    }
}
