//! The decisions, pure: which backups the tiers keep and which gc collects
//! (a locked one waits for its lock), whether a change to the control plane
//! has a fresh enough verified backup, what a restore would lose, and the
//! revision a restore bumps to so that no client's revision is reused.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::manifest::{Backup, Seen, Trouble};
use crate::spec::types::BackupSpec;

/// What gc does with one backup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    Keep(&'static str),
    Collect,
    /// Past every tier, but its Object Lock holds until then.
    Locked(DateTime<Utc>),
}

pub fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> Duration {
    (now - t).to_std().unwrap_or_default()
}

/// Each backup's fate under the tiers: everything younger than `keepAll`;
/// the newest of each hour younger than `keepHourly`; the newest of each day
/// younger than `keepDaily`. The newest verified backup is always kept,
/// whatever its age: gc never leaves a cluster without one.
pub fn fates(backups: &[Backup], spec: &BackupSpec, now: DateTime<Utc>) -> Vec<(String, Fate)> {
    let mut sorted: Vec<&Backup> = backups.iter().collect();
    sorted.sort_by(|a, b| b.manifest.taken_at.cmp(&a.manifest.taken_at));
    let newest_verified = sorted.iter().find(|b| b.verified()).map(|b| b.manifest.id.clone());
    let mut hours = BTreeSet::new();
    let mut days = BTreeSet::new();
    sorted
        .iter()
        .map(|b| {
            let t = b.manifest.taken_at;
            let a = age(now, t);
            let hour = t.format("%Y%m%d%H").to_string();
            let day = t.format("%Y%m%d").to_string();
            // Newest first: the first seen of an hour (a day) is its newest.
            let first_of_hour = hours.insert(hour);
            let first_of_day = days.insert(day);
            let fate = if Some(&b.manifest.id) == newest_verified.as_ref() {
                Fate::Keep("the newest verified backup")
            } else if a <= spec.keep_all.0 {
                Fate::Keep("younger than keepAll")
            } else if a <= spec.keep_hourly.0 && first_of_hour {
                Fate::Keep("the newest of its hour")
            } else if a <= spec.keep_daily.0 && first_of_day {
                Fate::Keep("the newest of its day")
            } else {
                match b.manifest.retain_until {
                    Some(until) if until > now => Fate::Locked(until),
                    _ => Fate::Collect,
                }
            };
            (b.manifest.id.clone(), fate)
        })
        .collect()
}

/// Whether a change to the control plane may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fresh {
    /// This verified backup is young enough.
    Yes { id: String, age: Duration },
    /// None is: why (a new one must be taken first).
    No(String),
}

pub fn fresh(backups: &[Backup], fresh_for: Duration, now: DateTime<Utc>) -> Fresh {
    let newest = backups.iter().filter(|b| b.verified()).max_by_key(|b| b.manifest.taken_at);
    match newest {
        Some(b) if age(now, b.manifest.taken_at) <= fresh_for => {
            Fresh::Yes { id: b.manifest.id.clone(), age: age(now, b.manifest.taken_at) }
        }
        Some(b) => Fresh::No(format!(
            "the newest verified etcd backup ({}) is {} old (more than {})",
            b.manifest.id,
            humantime::format_duration(Duration::from_secs(age(now, b.manifest.taken_at).as_secs())),
            humantime::format_duration(fresh_for)
        )),
        None if backups.is_empty() => Fresh::No("there is no etcd backup".to_string()),
        None => Fresh::No(format!("none of the {} etcd backups is verified", backups.len())),
    }
}

/// The revision a restored store is bumped to: past the newest revision the
/// agent saw, plus what the live store may have written after that word
/// (its rate over twice the delta interval), plus a margin.
pub fn bump_to(restored: i64, seen: Option<&Seen>, delta_interval: Duration, now: DateTime<Utc>) -> i64 {
    const MARGIN: i64 = 1_000;
    let Some(seen) = seen else {
        return restored.saturating_add(MARGIN.saturating_mul(10));
    };
    let since = age(now, seen.at).min(Duration::from_secs(3600)).max(delta_interval.saturating_mul(2));
    let unseen = (seen.rate.max(0.0) * since.as_secs_f64()).ceil().min(1e9) as i64;
    seen.revision.max(restored).saturating_add(unseen).saturating_add(MARGIN)
}

/// What a restore from `backup` (plus deltas up to `delta_to`) would lose,
/// in words, as far as the store can tell.
pub fn loss(backup: &Backup, delta_to: Option<i64>, seen: Option<&Seen>, now: DateTime<Utc>) -> String {
    let base = backup.verdict.as_ref().map(|v| v.revision).filter(|r| *r > 0).unwrap_or(backup.manifest.revision);
    let upto = delta_to.unwrap_or(base).max(base);
    let mut s = format!(
        "backup {} is {} old (revision {base}",
        backup.manifest.id,
        humantime::format_duration(Duration::from_secs(age(now, backup.manifest.taken_at).as_secs()))
    );
    if upto > base {
        s.push_str(&format!("; with the deltas after it, revision {upto}"));
    }
    s.push(')');
    match seen {
        Some(seen) if seen.revision > upto => s.push_str(&format!(
            "; the live store was last seen at revision {} ({} ago): at least {} revisions of writes are lost",
            seen.revision,
            humantime::format_duration(Duration::from_secs(age(now, seen.at).as_secs())),
            seen.revision - upto
        )),
        Some(seen) => s.push_str(&format!(
            "; nothing the agent saw is lost (last seen at revision {}, {} ago), writes after that cannot be told",
            seen.revision,
            humantime::format_duration(Duration::from_secs(age(now, seen.at).as_secs()))
        )),
        None => s.push_str("; the writes since cannot be told (no agent reported the live revision)"),
    }
    s
}

/// An agent's failure as a change's refusal and `etcd backups` say it.
pub fn trouble_line(t: &Trouble, now: DateTime<Utc>) -> String {
    format!(
        "the agent on {} failed {} ago ({} in a row): {}",
        t.host,
        humantime::format_duration(Duration::from_secs(age(now, t.at).as_secs())),
        t.failures,
        t.error
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::manifest::{Manifest, Verdict};

    fn at(h: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-27T12:00:00Z").unwrap().with_timezone(&Utc) + chrono::Duration::minutes(h)
    }

    fn backup(minute: i64, verified: bool) -> Backup {
        let t = at(minute);
        Backup {
            manifest: Manifest {
                id: crate::etcd::manifest::backup_id(t, minute),
                cluster: "c".into(),
                taken_at: t,
                revision: minute.max(1),
                member: "m".into(),
                etcd_version: "3.5.1".into(),
                kubernetes_version: "1.33.4".into(),
                size: 1,
                sha256: String::new(),
                keys: Default::default(),
                retain_until: None,
                encryption_keys: vec![],
                taken_by: "test".into(),
                members: vec![],
            },
            verdict: verified.then(|| Verdict {
                verified_at: t,
                ok: true,
                revision: minute.max(1),
                checks: vec![],
                problems: vec![],
                restore_seconds: 0.0,
                etcd_version: "3.5.1".into(),
            }),
        }
    }

    #[test]
    fn tiers_keep_everything_young_then_one_an_hour_then_one_a_day() {
        // Every 15 minutes for 10 days.
        let backups: Vec<Backup> = (0..10 * 24 * 4).map(|i| backup(-i * 15, true)).collect();
        let now = at(0);
        let fates = fates(&backups, &BackupSpec::default(), now);
        let all = fates.iter().filter(|(_, f)| matches!(f, Fate::Keep("younger than keepAll"))).count();
        let hourly = fates.iter().filter(|(_, f)| matches!(f, Fate::Keep("the newest of its hour"))).count();
        let daily = fates.iter().filter(|(_, f)| matches!(f, Fate::Keep("the newest of its day"))).count();
        // 24 h of 15-minute backups (96, plus the one at exactly 24 h), less the newest kept as "newest verified".
        assert_eq!(all, 96);
        // Days 1 to 7: the newest of each hour not already kept.
        assert_eq!(hourly, 6 * 24);
        // Days 7 to 10: one a day.
        assert!((3..=4).contains(&daily), "{daily}");
        assert!(fates.iter().any(|(_, f)| *f == Fate::Collect));
    }

    #[test]
    fn the_newest_verified_backup_is_never_collected_and_a_lock_holds() {
        let mut old = backup(-400 * 24 * 60, true);
        let mut older = backup(-401 * 24 * 60, false);
        older.manifest.retain_until = Some(at(60));
        let fates = fates(&[old.clone(), older.clone()], &BackupSpec::default(), at(0));
        assert_eq!(fates[0].1, Fate::Keep("the newest verified backup"));
        assert_eq!(fates[1].1, Fate::Locked(at(60)));
        old.verdict = None;
        older.manifest.retain_until = None;
        let fates = super::fates(&[old, older], &BackupSpec::default(), at(0));
        assert!(fates.iter().all(|(_, f)| *f == Fate::Collect), "{fates:?}");
    }

    #[test]
    fn freshness_needs_a_verified_backup_young_enough() {
        let fifteen = Duration::from_secs(900);
        assert_eq!(fresh(&[], fifteen, at(0)), Fresh::No("there is no etcd backup".into()));
        assert_eq!(
            fresh(&[backup(-5, false)], fifteen, at(0)),
            Fresh::No("none of the 1 etcd backups is verified".into())
        );
        assert!(matches!(fresh(&[backup(-5, true)], fifteen, at(0)), Fresh::Yes { .. }));
        let Fresh::No(why) = fresh(&[backup(-30, true)], fifteen, at(0)) else { panic!() };
        assert!(why.contains("30m old"), "{why}");
    }

    #[test]
    fn the_bump_passes_every_revision_a_client_can_have_seen() {
        let seen = Seen { member: "a".into(), revision: 5_000, at: at(-1), rate: 100.0 };
        let to = bump_to(4_000, Some(&seen), Duration::from_secs(30), at(0));
        // 60 s (at least twice the delta interval; here the word is 60 s old) at 100/s, plus the margin.
        assert_eq!(to, 5_000 + 6_000 + 1_000);
        assert_eq!(bump_to(4_000, None, Duration::from_secs(30), at(0)), 14_000);
        // A rate out of range is bounded, never an overflow.
        let wild = Seen { rate: f64::INFINITY, ..seen };
        assert!(bump_to(i64::MAX - 5, Some(&wild), Duration::from_secs(30), at(0)) > 0);
    }

    #[test]
    fn the_loss_says_what_it_can_tell() {
        let b = backup(-10, true);
        let seen = Seen { member: "a".into(), revision: 900, at: at(-1), rate: 1.0 };
        let s = loss(&b, Some(700), Some(&seen), at(0));
        assert!(s.contains("10m old") && s.contains("revision 700") && s.contains("200 revisions"), "{s}");
        assert!(loss(&b, None, None, at(0)).contains("cannot be told"));
    }
}
