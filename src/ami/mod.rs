//! Images: made ([`recipe`], [`bake`]), proven ([`gate`]), promoted
//! through channels ([`channel`]) and waves ([`waves`]), collected by
//! reference ([`gc`]); and selection (pure, below): which AMI a group's
//! selector resolves to.
//!
//! Newest creation date among available images matching owners, name and
//! architecture; deprecated images are skipped (AWS deprecates public AMIs
//! after two years and filtered lookups stop returning them — the failure
//! kops users hit), unless pinned by id, which only warns.

pub mod bake;
pub mod channel;
pub mod gate;
pub mod gc;
pub mod job;
pub mod recipe;
pub mod waves;
pub mod window;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub id: String,
    pub name: String,
    pub owner: String,
    pub architecture: String,
    pub state: String,
    pub root_device: String,
    pub created: Option<DateTime<Utc>>,
    pub deprecated_at: Option<DateTime<Utc>>,
}

impl ImageInfo {
    pub fn is_deprecated(&self, now: DateTime<Utc>) -> bool {
        self.deprecated_at.is_some_and(|d| d <= now)
    }
}

/// Shell-style wildcard match (`*` any run, `?` one character), as
/// DescribeImages' name filter does.
pub fn wildcard_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The image a selector resolves to now: newest available, not deprecated.
pub fn select<'a>(
    candidates: &'a [ImageInfo],
    name: &str,
    architecture: &str,
    now: DateTime<Utc>,
) -> Option<&'a ImageInfo> {
    candidates
        .iter()
        .filter(|i| {
            i.state == "available"
                && i.architecture == architecture
                && wildcard_match(name, &i.name)
                && !i.is_deprecated(now)
        })
        .max_by(|a, b| a.created.cmp(&b.created).then_with(|| a.id.cmp(&b.id)))
}

/// Warnings for an image pinned by id: deprecated, or older than `max_age`.
pub fn pinned_warnings(image: &ImageInfo, now: DateTime<Utc>, max_age: chrono::Duration) -> Vec<String> {
    let mut w = Vec::new();
    if image.is_deprecated(now) {
        w.push(format!("pinned image {} ({}) is deprecated", image.id, image.name));
    }
    if let Some(c) = image.created {
        if now - c > max_age {
            w.push(format!("pinned image {} ({}) is {} days old", image.id, image.name, (now - c).num_days()));
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(id: &str, name: &str, days_old: i64, deprecated_days_ago: Option<i64>, now: DateTime<Utc>) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            name: name.into(),
            owner: "099720109477".into(),
            architecture: "x86_64".into(),
            state: "available".into(),
            root_device: "/dev/sda1".into(),
            created: Some(now - chrono::Duration::days(days_old)),
            deprecated_at: deprecated_days_ago.map(|d| now - chrono::Duration::days(d)),
        }
    }

    #[test]
    fn newest_non_deprecated_wins() {
        let now = Utc::now();
        let images = vec![
            img("ami-old", "ubuntu-22.04-20240101", 300, None, now),
            img("ami-newest-deprecated", "ubuntu-22.04-20241101", 10, Some(1), now),
            img("ami-new", "ubuntu-22.04-20241001", 40, None, now),
            img("ami-other", "debian-12-20241120", 2, None, now),
        ];
        assert_eq!(select(&images, "ubuntu-22.04-*", "x86_64", now).unwrap().id, "ami-new");
        assert!(select(&images, "ubuntu-22.04-*", "arm64", now).is_none());
        // Deprecation in the future does not count yet.
        let later = vec![img("ami-x", "ubuntu-22.04-1", 1, Some(-5), now)];
        assert_eq!(select(&later, "ubuntu-*", "x86_64", now).unwrap().id, "ami-x");
    }

    #[test]
    fn pinned_images_warn_when_deprecated_or_old() {
        let now = Utc::now();
        let w = pinned_warnings(&img("ami-1", "x", 400, Some(3), now), now, chrono::Duration::days(180));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(pinned_warnings(&img("ami-2", "x", 10, None, now), now, chrono::Duration::days(180)).is_empty());
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_match(
            "ubuntu/images/hvm-ssd*/ubuntu-*-amd64-server-*",
            "ubuntu/images/hvm-ssd/ubuntu-xenial-16.04-amd64-server-20170721"
        ));
        assert!(wildcard_match("a?c", "abc") && !wildcard_match("a?c", "abbc"));
        assert!(wildcard_match("*", "") && !wildcard_match("x*", ""));
    }
}
