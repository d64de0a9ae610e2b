//! Every fetch pinfleet makes from a server a team names (effects, the
//! outermost layer, beside the edge): a delivery's Prometheus read for the
//! console's error budget and for a wave's analysis. What such a server can
//! make pinfleet hold or say is bounded here, in one place:
//!
//! ```text
//! fetch(team, url, bounds) ─▶ a place among the team's own (per_team; waits
//!    │                        within the time bound, then "busy")
//!    ▼
//! GET ─▶ redirects only on the URL's own host (scheme, host and port)
//!    │ ─▶ the answer's length refused past max_bytes before it is read,
//!    │    and a body without one cut off there as it arrives
//!    ▼
//! (status, bytes) within `timeout`, from the wait to the last byte
//! ```
//!
//! A failure is said in pinfleet's own words ([`Failed`]): never the
//! server's text, its URL's query or its redirect's target. One team's slow
//! or huge server holds only that team's places: another team's fetches
//! never wait behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// What one kind of fetch may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The answer's body, at most.
    pub max_bytes: usize,
    /// From asking for a place to the answer's last byte.
    pub timeout: Duration,
    /// Fetches of one team under way at once (the rest wait, within `timeout`).
    pub per_team: usize,
}

/// A Prometheus instant query: its answer is one number, in a few KiB (1
/// MiB leaves room for labels); Prometheus' own default query timeout is
/// 2 minutes, but a page or a wave's analysis waits no more than 10 s.
pub const PROMETHEUS: Bounds = Bounds { max_bytes: 1 << 20, timeout: Duration::from_secs(10), per_team: 4 };

/// Redirects followed on the same host before giving up.
const REDIRECTS_MAX: usize = 5;

/// Why a fetch gave nothing, in pinfleet's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failed {
    #[error("it gave no complete answer within {}", humantime::format_duration(*.0))]
    Timeout(Duration),
    #[error("its answer is larger than {0} bytes, the most read")]
    TooLarge(usize),
    #[error("it redirected to another host, which is not followed")]
    OffHost,
    #[error("it redirected more than {REDIRECTS_MAX} times")]
    Redirects,
    #[error("it could not be reached ({0})")]
    Unreachable(&'static str),
    #[error("not a URL pinfleet fetches (http or https with a host)")]
    NotHttp,
}

/// The one client for fetches on a team's behalf, and each team's places.
pub struct Outbound {
    http: reqwest::Client,
    teams: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// Redirects on the first URL's own scheme, host and port only: a server
/// cannot send pinfleet's request elsewhere (an internal address).
pub fn same_host_only(most: usize) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let same = attempt.previous().first().is_some_and(|first| {
            let to = attempt.url();
            first.scheme() == to.scheme()
                && first.host_str() == to.host_str()
                && first.port_or_known_default() == to.port_or_known_default()
        });
        if !same {
            attempt.stop()
        } else if attempt.previous().len() > most {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    })
}

impl Outbound {
    pub fn new() -> Outbound {
        let http = reqwest::Client::builder()
            .redirect(same_host_only(REDIRECTS_MAX))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .unwrap_or_default();
        Outbound { http, teams: Mutex::new(HashMap::new()) }
    }

    /// The process's one outbound client.
    pub fn shared() -> &'static Outbound {
        static ONE: OnceLock<Outbound> = OnceLock::new();
        ONE.get_or_init(Outbound::new)
    }

    fn places(&self, team: &str, bounds: &Bounds) -> Arc<tokio::sync::Semaphore> {
        let mut teams = self.teams.lock().unwrap_or_else(|e| e.into_inner());
        // A team whose places are all free holds nothing worth keeping.
        if teams.len() > 4096 {
            teams.retain(|_, s| s.available_permits() < bounds.per_team.max(1));
        }
        teams
            .entry(team.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(bounds.per_team.max(1))))
            .clone()
    }

    /// GETs `url` for `team` within `bounds`: the status and the body.
    pub async fn get(&self, team: &str, url: url::Url, bounds: &Bounds) -> Result<(u16, bytes::Bytes), Failed> {
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(Failed::NotHttp);
        }
        let places = self.places(team, bounds);
        let whole = async {
            let _place = places.acquire_owned().await.map_err(|_| Failed::Unreachable("closed"))?;
            let mut resp = self.http.get(url.clone()).send().await.map_err(|e| said(&e))?;
            if resp.status().is_redirection() {
                return Err(Failed::OffHost);
            }
            if resp.content_length().is_some_and(|n| n > bounds.max_bytes as u64) {
                return Err(Failed::TooLarge(bounds.max_bytes));
            }
            let status = resp.status().as_u16();
            let mut body = bytes::BytesMut::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| said(&e))? {
                if body.len().saturating_add(chunk.len()) > bounds.max_bytes {
                    return Err(Failed::TooLarge(bounds.max_bytes));
                }
                body.extend_from_slice(&chunk);
            }
            Ok((status, body.freeze()))
        };
        tokio::time::timeout(bounds.timeout, whole).await.map_err(|_| Failed::Timeout(bounds.timeout))?
    }
}

impl Default for Outbound {
    fn default() -> Self {
        Outbound::new()
    }
}

/// A client error in pinfleet's words: its kind, never its text (which
/// names the URL and can carry what the server sent).
fn said(e: &reqwest::Error) -> Failed {
    if e.is_timeout() {
        Failed::Unreachable("timed out")
    } else if e.is_redirect() {
        Failed::Redirects
    } else if e.is_connect() {
        Failed::Unreachable("the connection was refused or failed")
    } else if e.is_body() || e.is_decode() {
        Failed::Unreachable("its answer broke off")
    } else {
        Failed::Unreachable("the request failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_said_without_the_servers_words() {
        let f = Failed::TooLarge(1 << 20);
        assert_eq!(f.to_string(), "its answer is larger than 1048576 bytes, the most read");
        assert_eq!(Failed::Timeout(Duration::from_secs(10)).to_string(), "it gave no complete answer within 10s");
    }
}
