//! The view models every screen draws: one per domain (fleet, cluster,
//! team, workload), typed and serializable, each drawn as text (the
//! terminal), JSON or YAML (pipelines) and HTML (the console).
//!
//! ```text
//! gateway (what it last saw of the members, its records, its queue)
//!     ▼
//! console::build (effects: reads the service) ─► views (pure data)
//!     ▼                                            │
//! pages (html) · /v1/views (json) · pinfleet view (text, -o json|yaml)
//! ```
//!
//! Arrows run down: this module knows nothing of HTTP, Kubernetes or the
//! gateway; whoever has the data builds a view, and every screen draws it
//! with the same functions, so a column added here shows everywhere.

pub mod cluster;
pub mod fleet;
pub mod html;
pub mod images;
pub mod orphans;
pub mod team;
pub mod text;
pub mod workload;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How a status reads at a glance. Drawn as a word and a symbol, never as
/// a colour alone (the colours are a second cue for those who see them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tone {
    Ok,
    Progress,
    Warn,
    Bad,
    Stale,
    Unknown,
}

impl Tone {
    pub fn symbol(self) -> &'static str {
        match self {
            Tone::Ok => "✓",
            Tone::Progress => "◔",
            Tone::Warn => "!",
            Tone::Bad => "✗",
            Tone::Stale => "◌",
            Tone::Unknown => "?",
        }
    }
}

/// A status is an answer to a question: what it is, and why, and where the
/// reason is shown in full.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub tone: Tone,
    pub label: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where the reason is explained (a console path, with an anchor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

impl Status {
    pub fn new(tone: Tone, label: impl Into<String>) -> Status {
        Status { tone, label: label.into(), reason: None, link: None }
    }

    pub fn because(mut self, reason: impl Into<String>) -> Status {
        self.reason = Some(reason.into());
        self
    }

    pub fn at(mut self, link: impl Into<String>) -> Status {
        self.link = Some(link.into());
        self
    }

    /// `✓ ok` or `✗ failed: why`, for the terminal.
    pub fn text(&self) -> String {
        match &self.reason {
            Some(r) => format!("{} {}: {r}", self.tone.symbol(), self.label),
            None => format!("{} {}", self.tone.symbol(), self.label),
        }
    }
}

/// Who is looking, as the page says it (and what the identity lets them see).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Viewer {
    pub user: String,
    pub teams: Vec<String>,
    /// oidc, serviceaccount, certificate, loopback.
    pub via: String,
    pub admin: bool,
    /// The token the sign-out form carries (bound to this viewer and the
    /// serving process; a page elsewhere cannot know it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub csrf: String,
}

impl Viewer {
    /// One line: who, through what, which teams; an unauthenticated
    /// loopback viewer is said to be one.
    pub fn note(&self) -> String {
        let teams = if self.admin { "every team (admin)".to_string() } else { self.teams.join(", ") };
        if self.via == "loopback" {
            format!("no identity: local work on loopback, shown as {} of {teams}", self.user)
        } else {
            format!("{} (by {}), teams: {teams}", self.user, self.via)
        }
    }
}

/// Where a member cluster's figures come from: read just now, or kept from
/// the last time it answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Reach {
    Live {
        seen: DateTime<Utc>,
    },
    /// Not answering: the figures are the last ones seen (`since` is when).
    Stale {
        since: Option<DateTime<Utc>>,
        error: String,
    },
}

impl Reach {
    pub fn status(&self) -> Status {
        match self {
            Reach::Live { .. } => Status::new(Tone::Ok, "reachable"),
            Reach::Stale { since, error } => Status::new(
                Tone::Stale,
                match since {
                    Some(t) => format!("stale since {}", t.format("%Y-%m-%d %H:%M:%S UTC")),
                    None => "never reached".to_string(),
                },
            )
            .because(error.clone()),
        }
    }

    pub fn stale(&self) -> bool {
        matches!(self, Reach::Stale { .. })
    }
}

/// A length of time as people say it: 45s, 12m, 3h20m, 2d4h.
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=3599 => format!("{}m", s / 60),
        3600..=86_399 => {
            let m = (s % 3600) / 60;
            if m == 0 {
                format!("{}h", s / 3600)
            } else {
                format!("{}h{m}m", s / 3600)
            }
        }
        _ => {
            let h = (s % 86_400) / 3600;
            if h == 0 {
                format!("{}d", s / 86_400)
            } else {
                format!("{}d{h}h", s / 86_400)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        let cases =
            [(5, "5s"), (119, "119s"), (120, "2m"), (3600, "1h"), (4500, "1h15m"), (90_000, "1d1h"), (-3, "0s")];
        for (s, want) in cases {
            assert_eq!(age(s), want, "{s} seconds");
        }
    }

    #[test]
    fn a_loopback_viewer_is_said_to_have_no_identity() {
        let v = Viewer {
            user: "alice".into(),
            teams: vec!["search".into()],
            via: "loopback".into(),
            admin: false,
            csrf: String::new(),
        };
        assert_eq!(v.note(), "no identity: local work on loopback, shown as alice of search");
        let v = Viewer { via: "oidc".into(), ..v };
        assert_eq!(v.note(), "alice (by oidc), teams: search");
    }
}
