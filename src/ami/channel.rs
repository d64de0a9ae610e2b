//! Image channels (pure): a channel is an SSM parameter
//! (`/pinfleet/images/RECIPE/CHANNEL`, data type `aws:ec2:image`) per
//! region, whose value is the image a group on the channel runs and whose
//! versions are the channel's history. Promotion writes a new version;
//! rollback writes the previous image again (one write, itself recorded).
//!
//! Data flow: the engine reads parameters and their histories
//! (`cloud::aws::channels`) → [`Channel`] → [`rollback_target`] and the
//! tables the CLI prints; groups with `image: {channel, recipe}` resolve
//! through the same parameter at their next plan.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The prefix under which every channel lives.
pub const ROOT: &str = "/pinfleet/images";

/// The parameter that holds `recipe`'s `channel`.
pub fn parameter(recipe: &str, channel: &str) -> String {
    format!("{ROOT}/{recipe}/{channel}")
}

/// (recipe, channel) from a parameter name under [`ROOT`].
pub fn parse_parameter(name: &str) -> Option<(String, String)> {
    let rest = name.strip_prefix(ROOT)?.strip_prefix('/')?;
    let (recipe, channel) = rest.split_once('/')?;
    (!channel.contains('/')).then(|| (recipe.to_string(), channel.to_string()))
}

/// One version of a channel's parameter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Version {
    pub version: i64,
    pub image: String,
    pub at: Option<DateTime<Utc>>,
    /// Who moved it and why (the parameter's description).
    pub note: String,
}

/// A channel in one region, its versions oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Channel {
    pub recipe: String,
    pub channel: String,
    pub region: String,
    pub history: Vec<Version>,
}

impl Channel {
    pub fn current(&self) -> Option<&Version> {
        self.history.last()
    }
}

/// The image a rollback writes: the newest earlier version holding a
/// different image than the current one.
pub fn rollback_target(c: &Channel) -> Result<&Version, String> {
    let Some(cur) = c.current() else {
        return Err(format!("channel {} of recipe {} has never been written in {}", c.channel, c.recipe, c.region));
    };
    c.history.iter().rev().skip(1).find(|v| v.image != cur.image).ok_or_else(|| {
        format!(
            "channel {} of recipe {} in {} has no previous image to roll back to (it has only ever held {})",
            c.channel, c.recipe, c.region, cur.image
        )
    })
}

/// When `image` left the channel for the last time: the time of the first
/// version after its last appearance (None while current or never held).
pub fn left_at(c: &Channel, image: &str) -> Option<Option<DateTime<Utc>>> {
    let last = c.history.iter().rposition(|v| v.image == image)?;
    c.history.get(last + 1).map(|v| v.at)
}

/// The note written with a promotion or rollback (parameter descriptions
/// hold 1,024 characters; control characters are dropped).
pub fn note(action: &str, by: &str, reason: &str) -> String {
    let clean = |s: &str| s.chars().filter(|c| !c.is_control()).collect::<String>();
    let mut s = format!("{action} by {}", clean(by));
    if !reason.is_empty() {
        s += &format!(": {}", clean(reason));
    }
    s.chars().take(1024).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ch(images: &[&str]) -> Channel {
        Channel {
            recipe: "node".into(),
            channel: "stable".into(),
            region: "us-east-1".into(),
            history: images
                .iter()
                .enumerate()
                .map(|(i, im)| Version { version: i as i64 + 1, image: im.to_string(), at: None, note: String::new() })
                .collect(),
        }
    }

    #[test]
    fn rollback_goes_to_the_previous_different_image() {
        assert_eq!(rollback_target(&ch(&["ami-a", "ami-b"])).unwrap().image, "ami-a");
        // A rollback is itself a version: rolling back again moves forward.
        assert_eq!(rollback_target(&ch(&["ami-a", "ami-b", "ami-a"])).unwrap().image, "ami-b");
        // Re-promoting the same image is not a previous version.
        assert_eq!(rollback_target(&ch(&["ami-a", "ami-b", "ami-b"])).unwrap().image, "ami-a");
        let e = rollback_target(&ch(&["ami-a"])).unwrap_err();
        assert!(e.contains("no previous image"), "{e}");
        let e = rollback_target(&ch(&[])).unwrap_err();
        assert!(e.contains("never been written"), "{e}");
    }

    #[test]
    fn names_and_departures() {
        assert_eq!(parameter("node", "stable"), "/pinfleet/images/node/stable");
        assert_eq!(parse_parameter("/pinfleet/images/node/stable"), Some(("node".into(), "stable".into())));
        assert_eq!(parse_parameter("/pinfleet/images/node"), None);
        assert_eq!(parse_parameter("/other/node/stable"), None);
        let c = ch(&["ami-a", "ami-b", "ami-a", "ami-c"]);
        assert_eq!(left_at(&c, "ami-a"), Some(None), "left at version 4 (no time here)");
        assert_eq!(left_at(&c, "ami-c"), None, "current");
        assert_eq!(left_at(&c, "ami-z"), None, "never held");
        assert_eq!(
            note("promoted from candidate", "arn:x\u{1b}[31m", "gate passed"),
            "promoted from candidate by arn:x[31m: gate passed"
        );
    }
}
