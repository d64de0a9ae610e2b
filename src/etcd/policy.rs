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

/// The most revisions a second a lost store is taken to have written after
/// the last record of it, unless an agent measured more
/// ([`write_ceiling`]): etcd's own figure for what one cluster sustains
/// (its README: "benchmarked at 10,000 writes/sec"). A control plane's
/// writes come through its API servers, a small part of that.
pub const WRITE_CEILING: f64 = 10_000.0;

/// A measured rate above this is a broken measurement (a flush timed over
/// a millisecond), not a store: etcd has never been measured near it.
const CREDIBLE_RATE: f64 = 1_000_000.0;

/// What a record may trail its store by (a watch's delivery, a flush's
/// upload) and the machines' clocks may disagree by (NTP keeps them well
/// within it): the bound adds this long at the ceiling.
const SLACK: Duration = Duration::from_secs(1);

/// The least margin any bump adds.
const MARGIN: i64 = 1_000;

/// What etcdutl's `--bump-revision` adds beyond the records' bound: more
/// than a day of writes at the ceiling (10⁹ at 10,000/s is 28 h), for a
/// store that runs on until its members stop and for a ceiling too low.
/// A bump there costs nothing (no write reaches the store), and 10⁹ a
/// restore leaves room for nine million restores below 2⁵³, where a
/// JavaScript client reading resourceVersion as a number loses precision.
pub const ETCDUTL_HEADROOM: i64 = 1_000_000_000;

/// The ceiling a bump reckons with: [`WRITE_CEILING`], or the rate an
/// agent measured if it is higher (the store has shown it can).
pub fn write_ceiling(seen: Option<&Seen>) -> f64 {
    let measured = seen.map(|s| s.rate).filter(|r| r.is_finite() && *r <= CREDIBLE_RATE).unwrap_or(0.0);
    WRITE_CEILING.max(measured)
}

/// A revision the state store recorded of a store (of any timeline, the
/// lost one or one an earlier restore abandoned), and when: the store had
/// reached about that revision then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub revision: i64,
    pub at: DateTime<Utc>,
    /// What recorded it: `backup …`, `a delta`, `the agent on cp-a`, …
    pub what: String,
}

/// What a restore's bump is decided from, once the deltas are replayed.
#[derive(Debug, Clone)]
pub struct Bumping<'a> {
    /// The restored store's revision now (after the replay, past what
    /// etcdutl added).
    pub current: i64,
    /// What etcdutl's `--bump-revision` added as it restored the members
    /// (0: not used).
    pub etcdutl: i64,
    /// Every revision the state store recorded; those made before `began`
    /// count.
    pub records: &'a [Record],
    /// The agents' word with the highest revision, as read when the
    /// restore began (the bump before the records was sized from it).
    pub seen: Option<&'a Seen>,
    pub delta_interval: Duration,
    /// When the restore began: a record made later may be the restored
    /// store's own (an agent reporting on it), lower than the lost one's.
    pub began: DateTime<Utc>,
    /// The most writes a second the lost store could take ([`write_ceiling`]).
    pub ceiling: f64,
}

/// The revision a restore bumps to, and why no client can have seen one
/// as high.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bump {
    /// The revision the throwaway key's writes reach (the store's own when
    /// it is past already).
    pub to: i64,
    /// Writes of the throwaway key that take the store there.
    pub writes: i64,
    /// Why that is enough, in a sentence.
    pub why: String,
}

/// The bump: past every revision any client can have seen, that is past
/// the highest revision recorded before the restore began plus the most
/// writes the store could have taken since that record (at the ceiling,
/// with a second's slack); never lower than the bump sized from the
/// agent's own rate alone (what it was before the records). Where etcdutl
/// bumped as it restored, the writes are only what that fell short.
pub fn bump_to(b: &Bumping<'_>, now: DateTime<Utc>) -> Bump {
    let base = b.current.saturating_sub(b.etcdutl.max(0));
    let (floor, by_rate) = by_the_agents_rate(base, b.seen, b.delta_interval, now);
    let (need, basis) = match past_records(b.records, b.began, b.ceiling, now) {
        Some((need, why)) if need >= floor => (need, why),
        Some((_, why)) => (floor, format!("{by_rate} (above the records' bound, {why})")),
        None => (floor, by_rate),
    };
    let to = need.max(b.current);
    let writes = to - b.current;
    let relist = "compacted there, every watch from an older revision is told so and relists";
    let why = if b.etcdutl > 0 && writes == 0 {
        format!(
            "etcdutl bumped the revision by {} as it restored the members (--bump-revision, etcd 3.5.8 and later) and marked it compacted: at {}, the store is past {need}, as far as it can have gone: {basis}; {relist}",
            b.etcdutl, b.current
        )
    } else if b.etcdutl > 0 {
        format!(
            "etcdutl bumped the revision by {} as it restored the members, to {}, short of {need}, as far as the store can have gone; {writes} writes of a throwaway key take it to {to}: {basis}; {relist}",
            b.etcdutl, b.current
        )
    } else {
        format!(
            "{writes} writes of a throwaway key take the revision from {} to {to}, as far as the store can have gone (without etcdutl's --bump-revision, which etcd 3.5.8 and later has): {basis}; {relist}",
            b.current
        )
    };
    Bump { to, writes, why }
}

/// What etcdutl's `--bump-revision` adds as it restores each member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdutlBump {
    pub amount: i64,
    /// Why that is enough, in a sentence.
    pub why: String,
}

/// etcdutl's bump for a snapshot at revision `snapshot`: past the records'
/// bound (as [`bump_to`] reckons it at `now`) by [`ETCDUTL_HEADROOM`]. Every
/// member is restored with the same amount, so the same inputs give it.
pub fn etcdutl_bump(
    snapshot: i64,
    records: &[Record],
    began: DateTime<Utc>,
    ceiling: f64,
    now: DateTime<Utc>,
) -> EtcdutlBump {
    let (need, basis) = match past_records(records, began, ceiling, now) {
        Some((need, why)) if need > snapshot => (need, why),
        _ => (snapshot, format!("no revision is recorded past the snapshot's, {snapshot}")),
    };
    let amount = need.saturating_sub(snapshot).saturating_add(ETCDUTL_HEADROOM);
    let why = format!(
        "etcdutl bumps the revision by {amount} as it restores each member: past {need} ({basis}) by {ETCDUTL_HEADROOM} more, over a day of writes at the ceiling, for the store running on until its members stop"
    );
    EtcdutlBump { amount, why }
}

/// Writes in `d` at `per_second`, rounded up and bounded.
fn writes_in(per_second: f64, d: Duration) -> i64 {
    (per_second.max(0.0) * d.as_secs_f64()).ceil().min(1e15) as i64
}

/// The revision no timeline can have passed by `now`, and why: the
/// highest revision recorded before `began`, plus `ceiling` writes a
/// second since that record and [`SLACK`] more. The highest is the lost
/// timeline's newest word (each restore bumps its timeline past the ones
/// before), and if an earlier restore fell short, a later word of the lost
/// timeline is lower and younger, so bounded by it too. Records made after
/// `began` are left out: they may be the restored store's own.
fn past_records(records: &[Record], began: DateTime<Utc>, ceiling: f64, now: DateTime<Utc>) -> Option<(i64, String)> {
    // Of equal revisions, the older record: the longer time since.
    let newest =
        records.iter().filter(|r| r.at < began).max_by(|a, b| a.revision.cmp(&b.revision).then(b.at.cmp(&a.at)))?;
    let since = age(now, newest.at);
    let unseen = writes_in(ceiling, since);
    let slack = writes_in(ceiling, SLACK).max(MARGIN);
    let need = newest.revision.saturating_add(unseen).saturating_add(slack);
    let why = format!(
        "the highest revision recorded before the restore began is {} ({}, {} earlier); at most {ceiling:.0} writes a second (etcd's practical ceiling) since then is {unseen} more, and {slack} for a record trailing its store and clocks a second apart: {need}",
        newest.revision,
        newest.what,
        humantime::format_duration(Duration::from_secs(since.as_secs())),
    );
    Some((need, why))
}

/// The bump as it was sized before the records were read back, its floor:
/// past the agent's word by the agent's own rate over at least twice the
/// delta interval (an hour at most), plus a margin; with no word, the
/// restored revision and 10,000 more.
fn by_the_agents_rate(
    restored: i64,
    seen: Option<&Seen>,
    delta_interval: Duration,
    now: DateTime<Utc>,
) -> (i64, String) {
    let Some(seen) = seen else {
        let to = restored.saturating_add(MARGIN.saturating_mul(10));
        return (to, format!("the restored revision, {restored}, and 10,000 more: {to}"));
    };
    let since = age(now, seen.at).min(Duration::from_secs(3600)).max(delta_interval.saturating_mul(2));
    let unseen = (seen.rate.max(0.0) * since.as_secs_f64()).ceil().min(1e9) as i64;
    let to = seen.revision.max(restored).saturating_add(unseen).saturating_add(MARGIN);
    let why = format!(
        "the agent on {} saw revision {} {} ago, writing {:.0} a second: {unseen} more over {} and {MARGIN}: {to}",
        seen.member,
        seen.revision,
        humantime::format_duration(Duration::from_secs(age(now, seen.at).as_secs())),
        seen.rate.max(0.0),
        humantime::format_duration(Duration::from_secs(since.as_secs())),
    );
    (to, why)
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
            recovered: None,
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

    fn sec(s: i64) -> DateTime<Utc> {
        at(0) + chrono::Duration::seconds(s)
    }

    fn rec(revision: i64, s: i64, what: &str) -> Record {
        Record { revision, at: sec(s), what: what.into() }
    }

    /// A backup taken two minutes before the bump, the last delta flushed a
    /// minute before it; the restore began ten seconds before it.
    fn lost_timeline() -> Vec<Record> {
        vec![rec(19_000, -120, "backup b1"), rec(19_940, -60, "a delta")]
    }

    #[test]
    fn the_bump_passes_every_revision_a_client_can_have_seen() {
        struct Row {
            name: &'static str,
            current: i64,
            etcdutl: i64,
            records: Vec<Record>,
            seen: Option<Seen>,
            began: i64,
            // Expected: the revision, the writes, what the sentence says.
            to: i64,
            writes: i64,
            said: &'static [&'static str],
        }
        let agent = Seen { member: "cp-a".into(), revision: 20_000, at: sec(-1), rate: 5_000.0 };
        let mut after_it_began = lost_timeline();
        after_it_began.extend([rec(19_950, -2, "the agent on cp-a"), rec(1_000_019_950, -1, "a delta")]);
        let rows = [
            Row {
                // Clients saw past the last delta (the store went on after its
                // agent was lost): 60 s since it at 10,000/s, and a second's slack.
                name: "no agent's word: past the newest delta by the most writes since",
                current: 19_945,
                etcdutl: 0,
                records: lost_timeline(),
                seen: None,
                began: -10,
                to: 19_940 + 600_000 + 10_000,
                writes: 629_940 - 19_945,
                said: &[
                    "19940 (a delta, 1m earlier)",
                    "609995 writes of a throwaway key",
                    "without etcdutl's --bump-revision",
                ],
            },
            Row {
                // The first restore bumped to 10,401 and clients wrote after it:
                // the backup's revision and 10,000 more (10,405) is below them.
                name: "a second restore of the same backup: past the first one's bump and the writes since",
                current: 405,
                etcdutl: 0,
                records: vec![
                    rec(400, -600, "backup b1"),
                    rec(10_400, -40, "the cut of the restore from b1"),
                    rec(10_401, -30, "the bump of the restore from b1"),
                ],
                seen: None,
                began: -10,
                to: 10_401 + 300_000 + 10_000,
                writes: 320_401 - 405,
                said: &["10401 (the bump of the restore from b1, 30s earlier)"],
            },
            Row {
                name: "records made after the restore began are the restored store's own: left out",
                current: 19_945,
                etcdutl: 0,
                records: after_it_began,
                seen: None,
                began: -10,
                to: 629_940,
                writes: 609_995,
                said: &["19940 (a delta"],
            },
            Row {
                // 5,000/s over twice the delta interval (60 s) is above 10,000/s over 1 s.
                name: "never below the bump sized from the agent's own rate",
                current: 19_945,
                etcdutl: 0,
                records: vec![rec(20_000, -1, "the agent on cp-a")],
                seen: Some(agent),
                began: 0,
                to: 20_000 + 300_000 + 1_000,
                writes: 321_000 - 19_945,
                said: &["the agent on cp-a saw revision 20000 1s ago", "above the records' bound"],
            },
            Row {
                // etcdutl_bump's amount for these records (the next test).
                name: "etcdutl bumped far past the bound: no write",
                current: 19_000 + 1_000_510_940 + 945,
                etcdutl: 1_000_510_940,
                records: lost_timeline(),
                seen: None,
                began: -10,
                to: 1_000_530_885,
                writes: 0,
                said: &["etcdutl bumped the revision by 1000510940", "at 1000530885, the store is past 629940"],
            },
            Row {
                name: "etcdutl's bump fell short: writes make up the rest",
                current: 20_045,
                etcdutl: 100,
                records: lost_timeline(),
                seen: None,
                began: -10,
                to: 629_940,
                writes: 609_895,
                said: &["short of 629940", "609895 writes"],
            },
            Row {
                name: "nothing recorded and no word: the restored revision and 10,000 more",
                current: 4_000,
                etcdutl: 0,
                records: vec![],
                seen: None,
                began: -10,
                to: 14_000,
                writes: 10_000,
                said: &["the restored revision, 4000, and 10,000 more"],
            },
        ];
        for r in &rows {
            let b = bump_to(
                &Bumping {
                    current: r.current,
                    etcdutl: r.etcdutl,
                    records: &r.records,
                    seen: r.seen.as_ref(),
                    delta_interval: Duration::from_secs(30),
                    began: sec(r.began),
                    ceiling: WRITE_CEILING,
                },
                sec(0),
            );
            assert_eq!((b.to, b.writes), (r.to, r.writes), "{}: {}", r.name, b.why);
            for s in r.said {
                assert!(b.why.contains(s), "{}: `{s}` not in: {}", r.name, b.why);
            }
            assert!(b.why.contains("told so and relists"), "{}: {}", r.name, b.why);
        }
        // The second restore lands past what clients wrote after the first
        // (at most the ceiling's worth in the 30 s since), not on it again.
        assert!(rows[1].to > 10_401 + 3_000);

        // Out of range is bounded, never an overflow.
        let wild = Seen { member: "a".into(), revision: i64::MAX - 5, at: sec(-60), rate: f64::INFINITY };
        let records = [rec(i64::MAX - 5, -3600, "a delta")];
        let b = bump_to(
            &Bumping {
                current: i64::MAX - 10,
                etcdutl: 0,
                records: &records,
                seen: Some(&wild),
                delta_interval: Duration::from_secs(30),
                began: sec(-10),
                ceiling: f64::INFINITY,
            },
            sec(0),
        );
        assert_eq!((b.to, b.writes), (i64::MAX, 10));
    }

    #[test]
    fn etcdutl_bumps_past_the_records_by_a_day_of_writes_at_the_ceiling() {
        // Reckoned when the restore began, so every member reckons the same.
        let e = etcdutl_bump(19_000, &lost_timeline(), sec(-10), WRITE_CEILING, sec(-10));
        assert_eq!(e.amount, (19_940 + 500_000 + 10_000) - 19_000 + ETCDUTL_HEADROOM);
        assert!(e.why.contains("1000510940") && e.why.contains("past 529940 (the highest revision"), "{}", e.why);
        assert_eq!(e, etcdutl_bump(19_000, &lost_timeline(), sec(-10), WRITE_CEILING, sec(-10)));
        let e = etcdutl_bump(19_000, &[], sec(-10), WRITE_CEILING, sec(-10));
        assert_eq!(e.amount, ETCDUTL_HEADROOM);
        assert!(e.why.contains("no revision is recorded past the snapshot's, 19000"), "{}", e.why);
    }

    #[test]
    fn the_ceiling_is_etcds_unless_an_agent_measured_more() {
        let seen = |rate: f64| Seen { member: "a".into(), revision: 1, at: at(0), rate };
        for (rate, ceiling) in [
            (None, WRITE_CEILING),
            (Some(50.0), WRITE_CEILING),
            (Some(25_000.0), 25_000.0),
            (Some(f64::INFINITY), WRITE_CEILING),
            (Some(f64::NAN), WRITE_CEILING),
            (Some(5e6), WRITE_CEILING),
        ] {
            assert_eq!(write_ceiling(rate.map(seen).as_ref()), ceiling, "{rate:?}");
        }
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
