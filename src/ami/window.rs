//! Maintenance windows for scheduled rollouts (pure): `Sat 02:00-06:00 UTC`,
//! `Sat,Sun 02:00-06:00 UTC`, `Mon-Fri 22:00-02:00 UTC` (a window may cross
//! midnight; it then ends on the next day).

use chrono::{DateTime, Datelike, NaiveTime, Utc, Weekday};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub days: Vec<Weekday>,
    pub start: NaiveTime,
    pub end: NaiveTime,
}

fn day(s: &str) -> Result<Weekday, String> {
    s.parse::<Weekday>().map_err(|_| format!("`{s}` is not a day (Mon, Tue, … Sun)"))
}

impl std::str::FromStr for Window {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parts: Vec<&str> = s.split_whitespace().collect();
        let [days, times, tz] = parts[..] else {
            return Err(format!("`{s}`: expected DAYS HH:MM-HH:MM UTC, e.g. \"Sat 02:00-06:00 UTC\""));
        };
        if !tz.eq_ignore_ascii_case("UTC") {
            return Err(format!("`{s}`: windows are in UTC"));
        }
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
        Ok(Window { days: out, start, end })
    }
}

impl Window {
    pub fn contains(&self, now: DateTime<Utc>) -> bool {
        let t = now.time();
        let today = self.days.contains(&now.weekday());
        if self.start < self.end {
            today && t >= self.start && t < self.end
        } else {
            (today && t >= self.start) || (self.days.contains(&now.weekday().pred()) && t < self.end)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

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
        assert!("Sat 02:00-06:00 CET".parse::<Window>().is_err());
        assert!("Caturday 02:00-06:00 UTC".parse::<Window>().unwrap_err().contains("not a day"));
    }
}
