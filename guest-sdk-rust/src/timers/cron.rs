//! The 5-field cron dialect of the timers, written for the SDK (no
//! dependencies): the same rules as the Go SDK's `timers.ParseCron`.

use std::fmt;

/// A parsed 5-field cron expression, evaluated in UTC.
///
/// The fields are minute (0-59), hour (0-23), day of month (1-31), month
/// (1-12 or `JAN`-`DEC`) and day of week (0-7 or `SUN`-`SAT`; 0 and 7 are
/// Sunday). Each field is `*` or a comma-separated list of values, ranges
/// (`1-5`) and steps (`*/15`, `1-30/2`, and `5/10` meaning 5 to the field's
/// maximum by 10). Names are case-insensitive; a range cannot wrap
/// (`FRI-MON` is refused). `@yearly` (or `@annually`), `@monthly`,
/// `@weekly`, `@daily` (or `@midnight`) and `@hourly` stand for their usual
/// five fields.
///
/// Days follow Vixie cron: when both the day of month and the day of week
/// are restricted (neither field starts with `*`), a day matches if either
/// does; otherwise it must match both. An expression that can never match
/// (such as `0 0 30 2 *`) is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronSchedule {
    spec: String,
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64, // bits 0-6, Sunday is 0
    dom_star: bool,
    dow_star: bool,
}

/// Why an expression was refused; its message names the expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronError(String);

impl fmt::Display for CronError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CronError {}

struct Field {
    name: &'static str,
    min: u64,
    max: u64,
    names: &'static [&'static str], // names[i] is the value min+i
}

const MINUTE: Field = Field { name: "minute", min: 0, max: 59, names: &[] };
const HOUR: Field = Field { name: "hour", min: 0, max: 23, names: &[] };
const DOM: Field = Field { name: "day of month", min: 1, max: 31, names: &[] };
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
};
// 7 is Sunday too; it is folded into 0 after parsing.
const DOW: Field = Field { name: "day of week", min: 0, max: 7, names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"] };

impl Field {
    /// Parses one field into a bit set (bit n: value n matches).
    fn parse(&self, s: &str) -> Result<u64, String> {
        let mut set = 0u64;
        for item in s.split(',') {
            if item.is_empty() {
                return Err(format!("{} {:?}: empty list item", self.name, s));
            }
            let (rng, step) = match item.find('/') {
                Some(i) => (&item[..i], Some(&item[i + 1..])),
                None => (item, None),
            };
            let (mut lo, mut hi) = (self.min, self.max);
            if rng == "*" {
                if self.max == 7 {
                    hi = 6; // day of week: * is 0-6
                }
            } else if let Some(i) = rng.find('-') {
                lo = self.value(&rng[..i])?;
                hi = self.value(&rng[i + 1..])?;
                if lo > hi {
                    return Err(format!("{} {:?}: range {} runs backwards", self.name, s, rng));
                }
            } else {
                lo = self.value(rng)?;
                hi = lo;
                if step.is_some() {
                    // "5/10": from 5 to the maximum (Saturday for days of week).
                    hi = if self.max == 7 { 6 } else { self.max };
                }
            }
            let step = match step {
                None => 1,
                Some(st) => match digits(st.strip_prefix('+').unwrap_or(st)) {
                    Some(n) if n >= 1 => n,
                    _ => return Err(format!("{} {:?}: step {:?} is not a positive number", self.name, s, st)),
                },
            };
            let mut v = lo;
            while v <= hi {
                set |= 1 << v;
                v = v.saturating_add(step);
            }
        }
        Ok(set)
    }

    /// Parses one number or name of the field.
    fn value(&self, s: &str) -> Result<u64, String> {
        for (i, n) in self.names.iter().enumerate() {
            if s.eq_ignore_ascii_case(n) {
                return Ok(self.min + i as u64);
            }
        }
        match digits(s) {
            None => Err(format!("{}: {:?} is not a number", self.name, s)),
            Some(v) if v < self.min || v > self.max => {
                Err(format!("{}: {} is outside {}-{}", self.name, v, self.min, self.max))
            }
            Some(v) => Ok(v),
        }
    }
}

/// A run of ASCII digits as a number; None for anything else or overflow.
fn digits(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl CronSchedule {
    /// Parses a 5-field cron expression (see [`CronSchedule`]).
    pub fn parse(spec: &str) -> Result<CronSchedule, CronError> {
        let fail = |why: String| CronError(format!("timers: cron {:?}: {}", spec, why));
        let mut expr = spec.trim();
        if expr.starts_with('@') {
            expr = match expr.to_ascii_lowercase().as_str() {
                "@yearly" | "@annually" => "0 0 1 1 *",
                "@monthly" => "0 0 1 * *",
                "@weekly" => "0 0 * * 0",
                "@daily" | "@midnight" => "0 0 * * *",
                "@hourly" => "0 * * * *",
                _ => return Err(fail("unknown macro (want @yearly, @monthly, @weekly, @daily or @hourly)".into())),
            };
        }
        let f: Vec<&str> = expr.split_whitespace().collect();
        if f.len() != 5 {
            return Err(fail(format!(
                "want 5 fields (minute hour day-of-month month day-of-week), got {}",
                f.len()
            )));
        }
        let mut c = CronSchedule {
            spec: spec.to_string(),
            minute: MINUTE.parse(f[0]).map_err(fail)?,
            hour: HOUR.parse(f[1]).map_err(fail)?,
            dom: DOM.parse(f[2]).map_err(fail)?,
            month: MONTH.parse(f[3]).map_err(fail)?,
            dow: DOW.parse(f[4]).map_err(fail)?,
            dom_star: f[2].starts_with('*'),
            dow_star: f[4].starts_with('*'),
        };
        if c.dow & (1 << 7) != 0 {
            c.dow = (c.dow & !(1 << 7)) | 1;
        }
        if !c.dom_star && c.dow_star && !c.dom_fits_a_month() {
            return Err(fail("never matches (no month in it has such a day)".into()));
        }
        Ok(c)
    }

    /// The expression as given to [`parse`](CronSchedule::parse).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Whether some month of the expression has its smallest day of month
    /// (February counting 29 days, which leap years have).
    fn dom_fits_a_month(&self) -> bool {
        let first = self.dom.trailing_zeros();
        (1..=12u32).any(|m| self.month & (1 << m) != 0 && first <= days_in(2000, m))
    }

    /// The first time strictly after `after_ms` (Unix ms), on a whole
    /// minute, that the expression matches, in Unix ms. `None` only when
    /// there is none within nine years (never, for a parsed expression).
    pub fn next_after_ms(&self, after_ms: i64) -> Option<i64> {
        const MIN: i64 = 60_000;
        const HOUR_MS: i64 = 3_600_000;
        const DAY: i64 = 86_400_000;
        let mut t = after_ms.div_euclid(MIN) * MIN + MIN;
        let limit = civil_from_days(t.div_euclid(DAY)).0 + 9;
        loop {
            let days = t.div_euclid(DAY);
            let (y, m, d) = civil_from_days(days);
            if y > limit {
                return None;
            }
            let in_day = t - days * DAY;
            let (hour, minute) = (in_day / HOUR_MS, in_day % HOUR_MS / MIN);
            if self.month & (1 << m) == 0 {
                let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                t = days_from_civil(ny, nm, 1) * DAY;
            } else if !self.day_matches(d, (days + 4).rem_euclid(7)) {
                t = (days + 1) * DAY;
            } else if self.hour & (1 << hour) == 0 {
                t = t.div_euclid(HOUR_MS) * HOUR_MS + HOUR_MS;
            } else if self.minute & (1 << minute) == 0 {
                t += MIN;
            } else {
                return Some(t);
            }
        }
    }

    /// Whether the minute starting at `t` (Unix ms) matches.
    #[cfg(test)]
    pub(crate) fn matches(&self, t: i64) -> bool {
        let days = t.div_euclid(86_400_000);
        let (_, m, d) = civil_from_days(days);
        let in_day = t - days * 86_400_000;
        self.minute & (1 << (in_day % 3_600_000 / 60_000)) != 0
            && self.hour & (1 << (in_day / 3_600_000)) != 0
            && self.month & (1 << m) != 0
            && self.day_matches(d, (days + 4).rem_euclid(7))
    }

    fn day_matches(&self, day: u32, weekday: i64) -> bool {
        let dom = self.dom & (1 << day) != 0;
        let dow = self.dow & (1 << weekday) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

impl fmt::Display for CronSchedule {
    /// The expression as given.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spec)
    }
}

/// Formats Unix milliseconds as RFC 3339 in UTC to the second
/// (`2025-05-01T08:01:00Z`; the milliseconds are dropped), as Go's
/// `time.RFC3339` layout prints a UTC time.
pub fn format_utc(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let secs = ms.rem_euclid(86_400_000) / 1000;
    let (y, m, d) = civil_from_days(days);
    format!("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", y, m, d, secs / 3600, secs % 3600 / 60, secs % 60)
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar.
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12; // March is 0
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day counted from 1970-01-01: year, month (1-12), day.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

fn days_in(y: i64, m: u32) -> u32 {
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (days_from_civil(ny, nm, 1) - days_from_civil(y, m, 1)) as u32
}
