//! Maintenance windows (pure): `Sat 02:00-06:00 UTC`, `Sat,Sun 02:00-06:00
//! UTC`, `Mon-Fri 22:00-02:00 UTC` (a window may cross midnight; it then
//! ends on the next day), in any IANA time zone: `Tue,Thu 02:00-05:00
//! America/Los_Angeles` opens at 02:00 local time on both sides of a DST
//! change. A start that falls into a spring-forward gap opens when the
//! clocks resume; an end in an autumn repeat closes at its first passing.

use chrono::{DateTime, Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, TimeZone, Utc, Weekday};
use chrono_tz::Tz;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub days: Vec<Weekday>,
    pub start: NaiveTime,
    pub end: NaiveTime,
    pub tz: Tz,
}

fn day(s: &str) -> Result<Weekday, String> {
    s.parse::<Weekday>().map_err(|_| format!("`{s}` is not a day (Mon, Tue, … Sun)"))
}

impl std::str::FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split_whitespace().collect();
        let [days, times, tz] = parts[..] else {
            return Err(format!(
                "`{s}`: expected DAYS HH:MM-HH:MM ZONE, e.g. \"Sat 02:00-06:00 UTC\" or \"Tue,Thu 02:00-05:00 America/Los_Angeles\""
            ));
        };
        let tz: Tz = if tz.eq_ignore_ascii_case("UTC") {
            Tz::UTC
        } else {
            tz.parse().map_err(|_| {
                format!("`{tz}` is not an IANA time zone (e.g. Europe/Berlin, America/Los_Angeles, UTC)")
            })?
        };
        let mut out = Vec::new();
        for d in days.split(',') {
            match d.split_once('-') {
                Some((a, b)) => {
                    let (mut x, y) = (day(a)?, day(b)?);
                    out.push(x);
                    while x != y {
                        x = x.succ();
                        out.push(x);
                    }
                }
                None => out.push(day(d)?),
            }
        }
        let (a, b) = times.split_once('-').ok_or_else(|| format!("`{times}`: expected HH:MM-HH:MM"))?;
        let t = |x: &str| NaiveTime::parse_from_str(x, "%H:%M").map_err(|_| format!("`{x}` is not a time (HH:MM)"));
        let (start, end) = (t(a)?, t(b)?);
        if start == end {
            return Err(format!("`{times}`: the window is empty"));
        }
        Ok(Window { days: out, start, end, tz })
    }
}

impl std::fmt::Display for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let days: Vec<String> = self.days.iter().map(|d| d.to_string()).collect();
        write!(f, "{} {}-{} {}", days.join(","), self.start.format("%H:%M"), self.end.format("%H:%M"), self.tz)
    }
}

impl Window {
    /// The instant local wall time `t` on `date` names: in a gap (spring
    /// forward), the moment the clocks resume; in a repeat, the first.
    fn instant(&self, date: NaiveDate, t: NaiveTime) -> DateTime<Utc> {
        let mut local: NaiveDateTime = date.and_time(t);
        for _ in 0..180 {
            if let Some(x) = self.tz.from_local_datetime(&local).earliest() {
                return x.with_timezone(&Utc);
            }
            local += Duration::minutes(1);
        }
        Utc.from_utc_datetime(&local)
    }

    /// The window's openings (start, end) that begin on `date` (local).
    fn opening(&self, date: NaiveDate) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        if !self.days.contains(&date.weekday()) {
            return None;
        }
        let end_date = if self.start < self.end { date } else { date.succ_opt()? };
        Some((self.instant(date, self.start), self.instant(end_date, self.end)))
    }

    pub fn contains(&self, now: DateTime<Utc>) -> bool {
        let today = now.with_timezone(&self.tz).date_naive();
        [today.pred_opt(), Some(today)]
            .into_iter()
            .flatten()
            .filter_map(|d| self.opening(d))
            .any(|(a, b)| a <= now && now < b)
    }

    /// When the opening that contains `now` ends (None: closed now).
    pub fn closes(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let today = now.with_timezone(&self.tz).date_naive();
        [today.pred_opt(), Some(today)]
            .into_iter()
            .flatten()
            .filter_map(|d| self.opening(d))
            .filter(|(a, b)| *a <= now && now < *b)
            .map(|(_, b)| b)
            .max()
    }

    /// When the window next opens at or after `now` (now, when open).
    pub fn next_open(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.contains(now) {
            return Some(now);
        }
        let today = now.with_timezone(&self.tz).date_naive();
        (0..9)
            .filter_map(|i| today.checked_add_signed(Duration::days(i)))
            .filter_map(|d| self.opening(d))
            .map(|(a, _)| a)
            .find(|a| *a >= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(d: u32, h: u32, m: u32) -> DateTime<Utc> {
        // 2026-11-21 is a Saturday.
        Utc.with_ymd_and_hms(2026, 11, d, h, m, 0).unwrap()
    }

    #[test]
    fn windows() {
        let w: Window = "Sat 02:00-06:00 UTC".parse().unwrap();
        assert!(w.contains(at(21, 2, 0)) && w.contains(at(21, 5, 59)));
        assert!(!w.contains(at(21, 6, 0)) && !w.contains(at(22, 3, 0)));
        let w: Window = "Mon-Fri 22:00-02:00 UTC".parse().unwrap();
        assert_eq!(w.days.len(), 5);
        assert!(w.contains(at(23, 23, 0)), "Monday night");
        assert!(w.contains(at(21, 1, 0)), "Saturday 01:00 ends Friday's window");
        assert!(!w.contains(at(22, 23, 0)), "Sunday night");
        assert!("Sat 02:00-06:00 Mars/Olympus".parse::<Window>().unwrap_err().contains("IANA"));
        assert!("Caturday 02:00-06:00 UTC".parse::<Window>().unwrap_err().contains("not a day"));
        assert_eq!(w.next_open(at(21, 12, 0)), Some(at(23, 22, 0)), "Saturday noon: Monday 22:00");
    }

    #[test]
    fn local_time_across_dst_changes() {
        let w: Window = "Tue,Thu 02:00-05:00 America/Los_Angeles".parse().unwrap();
        // 2026-03-08: the US springs forward. Tuesday 03-03 02:00 PST = 10:00 UTC;
        // Tuesday 03-10 02:00 PDT = 09:00 UTC.
        let before = Utc.with_ymd_and_hms(2026, 3, 3, 10, 0, 0).unwrap();
        let after = Utc.with_ymd_and_hms(2026, 3, 10, 9, 0, 0).unwrap();
        assert!(w.contains(before) && w.contains(after));
        assert!(!w.contains(Utc.with_ymd_and_hms(2026, 3, 10, 8, 59, 0).unwrap()), "01:59 PDT");
        assert_eq!(w.next_open(Utc.with_ymd_and_hms(2026, 3, 6, 0, 0, 0).unwrap()), Some(after));
        // Autumn: 2026-11-01 falls back. Tuesday 11-03 02:00 PST = 10:00 UTC.
        assert_eq!(
            w.next_open(Utc.with_ymd_and_hms(2026, 10, 30, 0, 0, 0).unwrap()),
            Some(Utc.with_ymd_and_hms(2026, 11, 3, 10, 0, 0).unwrap())
        );
        // A window starting in the spring-forward gap (02:30 does not exist on
        // 2026-03-08) opens when the clocks resume at 03:00 PDT (10:00 UTC).
        let g: Window = "Sun 02:30-04:00 America/Los_Angeles".parse().unwrap();
        assert_eq!(
            g.next_open(Utc.with_ymd_and_hms(2026, 3, 8, 0, 0, 0).unwrap()),
            Some(Utc.with_ymd_and_hms(2026, 3, 8, 10, 0, 0).unwrap())
        );
        // Across midnight in a zone east of UTC: Sat 23:00 – Sun 01:00 Berlin.
        let m: Window = "Sat 23:00-01:00 Europe/Berlin".parse().unwrap();
        assert!(m.contains(Utc.with_ymd_and_hms(2026, 11, 21, 23, 30, 0).unwrap()), "Sun 00:30 CET");
        assert!(!m.contains(Utc.with_ymd_and_hms(2026, 11, 22, 0, 30, 0).unwrap()), "Sun 01:30 CET");
    }
}
