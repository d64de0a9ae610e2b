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
    let mut e = Entry::new(None, &verb.to_lowercase(), &object, status.as_u16(), &reason);
    // The caller where the request established one.
    if let Ok(Some(h)) = crate::edge::CONNECTION_TRUST.try_with(|s| s.holder.get().cloned()) {
        e.user = h.user;
        e.teams = h.team.into_iter().collect();
    }
    log.write(&e);
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Where audit lines go.
pub struct AuditLog {
    file: Option<Mutex<std::fs::File>>,
    /// Refusal lines written this second, per caller (or `-` for
    /// strangers), and how many were held back.
    refusals: Mutex<(u64, std::collections::HashMap<String, (u32, u32)>)>,
}

/// Refusal lines all strangers together may write a second; past it they
/// are counted and said in one line when the next second begins, so a flood
/// of bad requests cannot fill the disk (its bytes are the budget).
pub const REFUSALS_PER_SECOND: u32 = 20;
/// The same for one authenticated caller: every decision of a team's own
/// is worth its line, up to this many a second.
pub const CALLER_REFUSALS_PER_SECOND: u32 = 200;

/// The lines saying how many refusals each caller had held back.
fn held_back(counts: &std::collections::HashMap<String, (u32, u32)>) -> Vec<String> {
    let mut said: Vec<String> = counts
        .iter()
        .filter(|(_, (_, held))| *held > 0)
        .map(|(k, (_, held))| {
            let most = if k == "-" { REFUSALS_PER_SECOND } else { CALLER_REFUSALS_PER_SECOND };
            format!("{held} more refusal(s) of {k} in one second were not written (at most {most} a second)")
        })
        .collect();
    said.sort();
    said
}

/// At the end (a shutdown), the last second's held-back count is said too.
impl Drop for AuditLog {
    fn drop(&mut self) {
        let said = match self.refusals.get_mut() {
            Ok(r) => held_back(&r.1),
            Err(_) => return,
        };
        for s in said {
            self.write_line(&Entry::new(None, "suppressed", "", 429, &s));
        }
    }
}

/// The edge's own refusals (bodies, budgets, shares, panics) go to the same log.
impl crate::edge::Audit for AuditLog {
    fn flush(&self) {
        self.flush_suppressed();
    }

    fn refused(
        &self,
        holder: Option<&crate::edge::Holder>,
        peer: std::net::IpAddr,
        method: &str,
        path: &str,
        status: u16,
        why: &str,
    ) {
        let mut e = Entry::new(None, &method.to_lowercase(), path, status, why);
        match holder {
            Some(h) => {
                e.user = h.user.clone();
                e.teams = h.team.iter().cloned().collect();
            }
            None => e.via = format!("stranger {peer}"),
        }
        self.write(&e);
    }
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
        Ok(AuditLog { file, refusals: Mutex::default() })
    }

    pub fn stderr() -> AuditLog {
        AuditLog { file: None, refusals: Mutex::default() }
    }

    /// Whether a refusal of `who` may be written now; a line saying how
    /// many were held back when a new second begins.
    fn refusal_allowed(&self, who: &str) -> (bool, Vec<String>) {
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        let Ok(mut r) = self.refusals.lock() else { return (true, vec![]) };
        let mut said = Vec::new();
        if r.0 != now {
            said = held_back(&r.1);
            r.0 = now;
            r.1.clear();
        }
        // The table is bounded: past 10,000 callers in one second, all count as one.
        let key = if r.1.len() >= 10_000 && !r.1.contains_key(who) { "-" } else { who };
        let e = r.1.entry(key.to_string()).or_insert((0, 0));
        let most = if key == "-" { REFUSALS_PER_SECOND } else { CALLER_REFUSALS_PER_SECOND };
        if e.0 < most {
            e.0 = e.0.saturating_add(1);
            (true, said)
        } else {
            e.1 = e.1.saturating_add(1);
            (false, said)
        }
    }

    /// Says what was held back in a second now over, without waiting
    /// for a later line (the edge calls it every second and at shutdown).
    pub fn flush_suppressed(&self) {
        let now = chrono::Utc::now().timestamp().max(0) as u64;
        let said = {
            let Ok(mut r) = self.refusals.lock() else { return };
            if r.0 == now || r.1.is_empty() {
                return;
            }
            let said = held_back(&r.1);
            r.0 = now;
            r.1.clear();
            said
        };
        for s in said {
            self.write_line(&Entry::new(None, "suppressed", "", 429, &s));
        }
    }

    pub fn write(&self, e: &Entry) {
        let _ = AUDITED.try_with(|a| a.store(true, std::sync::atomic::Ordering::SeqCst));
        if e.answer >= 400 {
            let who = if e.user.is_empty() { "-" } else { e.user.as_str() };
            let (allowed, said) = self.refusal_allowed(who);
            for s in said {
                self.write_line(&Entry::new(None, "suppressed", "", 429, &s));
            }
            if !allowed {
                return;
            }
        }
        self.write_line(e);
    }

    fn write_line(&self, e: &Entry) {
        // No raw control, bidirectional or zero-width character reaches a
        // line: each is written as its code point (serde_json would escape
        // the controls, not a right-to-left override).
        let mut e = e.clone();
        for f in [&mut e.user, &mut e.via, &mut e.verb, &mut e.object, &mut e.artifact, &mut e.reason] {
            *f = clean(f);
        }
        // A path, an image or a reason is no longer than a reader needs.
        for f in [&mut e.object, &mut e.artifact, &mut e.reason, &mut e.user, &mut e.via, &mut e.verb] {
            if f.chars().count() > 512 {
                *f = f.chars().take(512).chain(['…']).collect();
            }
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
    fn a_floods_last_held_back_count_is_said_without_a_later_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let tried = REFUSALS_PER_SECOND * 3;
        {
            let log = AuditLog::open(Some(&path)).unwrap();
            for _ in 0..tried {
                log.write(&Entry::new(None, "submit", "/v1/submissions", 401, "no credentials"));
            }
            // No later line comes: the log is given up (a shutdown).
        }
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["audit"].clone())
            .collect();
        let written = lines.iter().filter(|l| l["verb"] == "submit").count() as u32;
        let held: u32 = lines
            .iter()
            .filter(|l| l["verb"] == "suppressed")
            .map(|l| l["reason"].as_str().unwrap().split(' ').next().unwrap().parse::<u32>().unwrap())
            .sum();
        assert!(held > 0, "{lines:?}");
        assert_eq!(written + held, tried, "every refusal is written or counted");
    }

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
