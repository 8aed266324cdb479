//! When a cron fires: a cron pattern in a time zone (croner), or `@every <duration>`.
//!
//! `@every 10m` fires at the multiples of its interval counted from the Unix epoch, so its
//! firings are the same seconds whenever the daemon starts, and the firings missed while it
//! was down can be counted.

use std::str::FromStr as _;
use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// The shortest `@every` interval.
const MIN_EVERY: Duration = Duration::from_secs(1);
/// The longest `@every` interval: a year and a day.
const MAX_EVERY: Duration = Duration::from_secs(366 * 24 * 3600);
/// The units `@every` takes: seconds to weeks. (Months and years have no fixed length, and
/// `M` would read as minutes to many.)
const EVERY_UNITS: [&str; 23] = [
    "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute", "minutes", "h", "hr",
    "hrs", "hour", "hours", "d", "day", "days", "w", "week", "weeks", "ms", "msec",
];

/// A parsed schedule.
#[derive(Debug, Clone)]
pub enum Schedule {
    /// A cron pattern, evaluated in its time zone.
    Pattern {
        cron: Box<croner::Cron>,
        zone: TimeZone,
    },
    /// `@every <duration>`: whole seconds.
    Every(Duration),
}

/// Why a schedule is not one.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "`{0}` is not a schedule: {1}. Write 5 fields (`0 */6 * * *`), 6 with seconds first, @hourly / @daily / @weekly / @monthly / @yearly, or `@every 10m`"
    )]
    Pattern(String, String),
    #[error(
        "`{0}`: the interval of @every must be whole seconds, from 1s to 366d, in s, m, h, d or w (`@every 30s`, `@every 10m`, `@every 2h 30m`)"
    )]
    Every(String),
    #[error("`{0}` is not an IANA time zone (`UTC`, `Europe/Paris`, `America/New_York`)")]
    Timezone(String),
}

impl Schedule {
    /// Parses `schedule`, evaluated in `timezone` (default UTC).
    pub fn parse(schedule: &str, timezone: Option<&str>) -> Result<Self, ScheduleError> {
        let zone = match timezone {
            None => TimeZone::UTC,
            Some(name) => {
                TimeZone::get(name).map_err(|_| ScheduleError::Timezone(name.to_string()))?
            }
        };
        let text = schedule.trim();
        if let Some(every) = text.strip_prefix("@every") {
            let units_known = every
                .split(|c: char| !c.is_ascii_alphabetic())
                .filter(|unit| !unit.is_empty())
                .all(|unit| EVERY_UNITS.contains(&unit));
            let interval = humantime::parse_duration(every.trim())
                .ok()
                .filter(|_| units_known)
                .ok_or_else(|| ScheduleError::Every(text.to_string()))?;
            if !(MIN_EVERY..=MAX_EVERY).contains(&interval) || interval.subsec_nanos() != 0 {
                return Err(ScheduleError::Every(text.to_string()));
            }
            return Ok(Self::Every(interval));
        }
        let fields = text.split_whitespace().count();
        if !text.starts_with('@') && !(5..=6).contains(&fields) {
            return Err(ScheduleError::Pattern(
                text.to_string(),
                format!(
                    "it has {fields} field{}",
                    if fields == 1 { "" } else { "s" }
                ),
            ));
        }
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .build()
            .parse(text)
            .map_err(|err| {
                // croner's own words, without its trailing dots.
                let said = err.to_string();
                ScheduleError::Pattern(text.to_string(), said.trim_end_matches('.').to_string())
            })?;
        // A pattern that never matches (the 31st of February) is refused now, not at start.
        let probe = Timestamp::now().to_zoned(zone.clone());
        cron.find_next_occurrence(&probe, false).map_err(|err| {
            ScheduleError::Pattern(text.to_string(), format!("it never fires ({err})"))
        })?;
        Ok(Self::Pattern {
            cron: Box::new(cron),
            zone,
        })
    }

    /// The first firing strictly after `after`; `None` when there is none (never, for a
    /// pattern that parsed).
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Self::Every(interval) => {
                let step = i64::try_from(interval.as_secs()).ok()?;
                let secs = after.as_second();
                let next = (secs.div_euclid(step) + 1).checked_mul(step)?;
                Timestamp::from_second(next).ok()
            }
            Self::Pattern { cron, zone } => {
                let from: Zoned = after.to_zoned(zone.clone());
                cron.find_next_occurrence(&from, false)
                    .ok()
                    .map(|z| z.timestamp())
            }
        }
    }

    /// The firings in `(after, until]`: how many (counting at most `cap`), the first and the
    /// last.
    pub fn between(
        &self,
        after: Timestamp,
        until: Timestamp,
        cap: u64,
    ) -> Option<(u64, Timestamp, Timestamp)> {
        let first = self.next_after(after).filter(|t| *t <= until)?;
        match self {
            Self::Every(interval) => {
                let step = i64::try_from(interval.as_secs()).ok()?;
                let last = until.as_second().div_euclid(step).checked_mul(step)?;
                let count = u64::try_from((last - first.as_second()) / step + 1).ok()?;
                Some((count.min(cap), first, Timestamp::from_second(last).ok()?))
            }
            Self::Pattern { .. } => {
                let (mut count, mut last, mut at) = (1, first, first);
                while count < cap {
                    match self.next_after(at).filter(|t| *t <= until) {
                        Some(next) => {
                            count += 1;
                            last = next;
                            at = next;
                        }
                        None => break,
                    }
                }
                Some((count, first, last))
            }
        }
    }
}

impl std::str::FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text, None)
    }
}

/// Parses without a zone (tests and tools).
pub fn parse_utc(text: &str) -> Result<Schedule, ScheduleError> {
    Schedule::from_str(text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn five_and_six_field_patterns_nicknames_and_every() {
        let six_hourly = parse_utc("0 */6 * * *").unwrap();
        assert_eq!(
            six_hourly.next_after(at("2026-12-01T03:10:00Z")),
            Some(at("2026-12-01T06:00:00Z"))
        );
        let seconds = parse_utc("*/15 * * * * *").unwrap();
        assert_eq!(
            seconds.next_after(at("2026-12-01T03:10:00Z")),
            Some(at("2026-12-01T03:10:15Z"))
        );
        let hourly = parse_utc("@hourly").unwrap();
        assert_eq!(
            hourly.next_after(at("2026-12-01T03:10:00Z")),
            Some(at("2026-12-01T04:00:00Z"))
        );
        let every = parse_utc("@every 10m").unwrap();
        assert_eq!(
            every.next_after(at("2026-12-01T03:10:00Z")),
            Some(at("2026-12-01T03:20:00Z"))
        );
    }

    #[test]
    fn a_pattern_is_evaluated_in_its_zone() {
        let paris = Schedule::parse("0 9 * * *", Some("Europe/Paris")).unwrap();
        // 09:00 in Paris is 08:00 UTC in winter.
        assert_eq!(
            paris.next_after(at("2026-12-01T03:00:00Z")),
            Some(at("2026-12-01T08:00:00Z"))
        );
    }

    #[test]
    fn misses_are_counted_between_two_times() {
        let every = parse_utc("@every 1m").unwrap();
        let (count, first, last) = every
            .between(at("2026-12-01T03:00:30Z"), at("2026-12-01T03:10:00Z"), 1000)
            .unwrap();
        assert_eq!(
            (count, first, last),
            (10, at("2026-12-01T03:01:00Z"), at("2026-12-01T03:10:00Z"))
        );
        let pattern = parse_utc("*/5 * * * *").unwrap();
        let (count, ..) = pattern
            .between(at("2026-12-01T03:00:00Z"), at("2026-12-01T04:00:00Z"), 1000)
            .unwrap();
        assert_eq!(count, 12);
        assert!(
            pattern
                .between(at("2026-12-01T03:00:00Z"), at("2026-12-01T03:04:59Z"), 1000)
                .is_none()
        );
    }

    #[test]
    fn bad_schedules_say_what_is_allowed() {
        for (text, zone, expected) in [
            ("0 */6 * *", None, "is not a schedule"),
            ("61 * * * *", None, "is not a schedule"),
            ("@every 0s", None, "from 1s to 366d"),
            ("@every 1.5s", None, "whole seconds"),
            ("@every soon", None, "@every"),
            ("@every 9223372036854775808s", None, "from 1s to 366d"),
            ("@every 99999999999h", None, "from 1s to 366d"),
            ("@every 10M", None, "in s, m, h, d or w"),
            ("0 0 0 1 1 * 2030", None, "it has 7 fields"),
            ("0 */6 * *", None, "it has 4 fields"),
            ("0 0 31 2 *", None, "never fires"),
            ("@daily", Some("Mars/Olympus"), "IANA time zone"),
        ] {
            let err = Schedule::parse(text, zone).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
