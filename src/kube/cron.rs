//! Five-field cron schedules (`minute hour day-of-month month day-of-week`)
//! with `*`, `*/n`, `a-b`, `a-b/n` and lists, plus the `@hourly`-style
//! aliases Kubernetes accepts; used by the API validation rules (a CronJob
//! whose schedule does not parse is refused) and the simulated CronJob
//! controller.

use chrono::{DateTime, Datelike, Duration, Timelike, Utc};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    fields: [Vec<u32>; 5],
}

const RANGES: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];

fn parse_field(f: &str, (lo, hi): (u32, u32)) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in f.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| format!("bad step in {part:?}"))?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("zero step in {part:?}"));
        }
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (
                a.parse().map_err(|_| format!("bad range {range:?}"))?,
                b.parse().map_err(|_| format!("bad range {range:?}"))?,
            )
        } else {
            let v: u32 = range.parse().map_err(|_| format!("bad value {range:?}"))?;
            (v, if part.contains('/') { hi } else { v })
        };
        // Day of week 7 is Sunday too.
        let (a, b) = if hi == 6 { (a % 7, if b == 7 { 6.max(a % 7) } else { b }) } else { (a, b) };
        if a < lo || b > hi || a > b {
            return Err(format!("{part:?} is outside {lo}-{hi}"));
        }
        out.extend((a..=b).step_by(step as usize));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Month (`JAN`) and weekday (`MON`) names, as robfig/cron accepts them.
fn names(field: &str, index: usize) -> String {
    const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
    const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let mut out = field.to_ascii_uppercase();
    match index {
        3 => MONTHS.iter().enumerate().for_each(|(i, m)| out = out.replace(m, &(i + 1).to_string())),
        4 => DAYS.iter().enumerate().for_each(|(i, d)| out = out.replace(d, &i.to_string())),
        _ => {}
    }
    out
}

impl Schedule {
    pub fn parse(s: &str) -> Result<Self, String> {
        let expanded = match s.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let parts: Vec<&str> = expanded.split_whitespace().collect();
        if parts.len() != 5 {
            // robfig/cron's wording, as the API server reports it.
            return Err(format!("expected exactly 5 fields, found {}: [{}]", parts.len(), parts.join(" ")));
        }
        let mut fields: [Vec<u32>; 5] = Default::default();
        for (i, p) in parts.iter().enumerate() {
            let named = names(p, i);
            fields[i] = parse_field(&named, RANGES[i])?;
        }
        Ok(Schedule { fields })
    }

    pub fn matches(&self, t: DateTime<Utc>) -> bool {
        let [min, hour, dom, month, dow] = &self.fields;
        min.contains(&t.minute())
            && hour.contains(&t.hour())
            && dom.contains(&t.day())
            && month.contains(&t.month())
            && dow.contains(&t.weekday().num_days_from_sunday())
    }

    /// The most runs that start within any `window` (at most a year): how
    /// many Jobs of a CronJob with `concurrencyPolicy: Allow` can be alive
    /// at once when each ends by its `activeDeadlineSeconds`. Counted over
    /// two calendar years from a leap year's first day, each day's matching
    /// hours and minutes taken from the fields rather than minute by minute.
    pub fn most_in_window(&self, window: Duration) -> usize {
        let [min, hour, _, _, _] = &self.fields;
        let window = window.min(Duration::days(366)).num_minutes().max(1);
        let start = DateTime::parse_from_rfc3339("2028-01-01T00:00:00Z").expect("date").with_timezone(&Utc);
        let mut fires: Vec<i64> = Vec::new();
        for day in 0..731 {
            let d = start + Duration::days(day);
            // A day matches when its midnight would, but for the time fields.
            let midnight = d.with_minute(min[0]).and_then(|t| t.with_hour(hour[0]));
            if !midnight.is_some_and(|t| self.matches(t)) {
                continue;
            }
            for h in hour {
                for m in min {
                    fires.push(day * 1440 + i64::from(*h) * 60 + i64::from(*m));
                }
            }
        }
        let (mut most, mut first) = (0, 0);
        for last in 0..fires.len() {
            while fires[last] - fires[first] >= window {
                first += 1;
            }
            most = most.max(last - first + 1);
        }
        most
    }

    /// The latest scheduled minute in (after, now], looking back at most a day.
    pub fn last_between(&self, after: DateTime<Utc>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = after.max(now - Duration::days(1));
        let mut t = now.with_second(0)?.with_nanosecond(0)?;
        while t > start {
            if self.matches(t) {
                return Some(t);
            }
            t -= Duration::minutes(1);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_alive_at_once_are_counted_from_the_schedule_and_the_deadline() {
        let n = |s: &str, minutes: i64| Schedule::parse(s).unwrap().most_in_window(Duration::minutes(minutes));
        assert_eq!(n("*/5 * * * *", 1), 1);
        assert_eq!(n("*/5 * * * *", 5), 1);
        assert_eq!(n("*/5 * * * *", 6), 2);
        assert_eq!(n("* * * * *", 60), 60);
        assert_eq!(n("@daily", 60 * 24 * 3), 3);
        assert_eq!(n("0 9,10 * * MON", 120), 2);
        assert_eq!(n("@monthly", 60 * 24 * 31), 2);
        // Every minute for a year is bounded by the year.
        assert_eq!(n("0 0 29 2 *", 60 * 24 * 366 * 5), 1);
    }

    use chrono::TimeZone;

    #[test]
    fn parses_and_matches() {
        let s = Schedule::parse("*/15 2 * * 1-5").unwrap();
        let monday_0230 = Utc.with_ymd_and_hms(2026, 11, 23, 2, 30, 0).unwrap();
        assert!(s.matches(monday_0230));
        assert!(!s.matches(monday_0230 + Duration::minutes(1)));
        assert!(!s.matches(Utc.with_ymd_and_hms(2026, 11, 22, 2, 30, 0).unwrap()), "Sunday");
        assert!(Schedule::parse("@hourly").unwrap().matches(Utc.with_ymd_and_hms(2026, 1, 1, 5, 0, 0).unwrap()));
        assert!(Schedule::parse("61 * * * *").is_err());
        assert!(Schedule::parse("* * *").is_err());
    }

    #[test]
    fn last_between_finds_the_latest_slot() {
        let s = Schedule::parse("*/10 * * * *").unwrap();
        let now = Utc.with_ymd_and_hms(2026, 1, 1, 5, 27, 13).unwrap();
        assert_eq!(
            s.last_between(now - Duration::hours(1), now),
            Some(Utc.with_ymd_and_hms(2026, 1, 1, 5, 20, 0).unwrap())
        );
        assert_eq!(s.last_between(Utc.with_ymd_and_hms(2026, 1, 1, 5, 20, 0).unwrap(), now), None);
    }
}
