//! Usage limits of the agent CLIs Canopy launches: how a platform says its agent hit one
//! (`[platforms.NAME.limit]`), and when the limit resets, read from what the CLI printed.
//!
//! A limit is not a failure: the spec waits for the reset and runs again (see the engine's
//! driver). The reset time is read from the line that reported the limit, in the forms the
//! agent CLIs print it: a Unix time after a `|` (`Claude AI usage limit reached|1762952400`),
//! a time of day with an optional zone (`resets at 3pm (America/Santiago)`, `try again at 3:28
//! PM`), a date (`try again at Aug 8th, 2026 12:30 PM`), a span (`try again in 3 days 6 hours
//! 57 minutes`) or an RFC 3339 time. When none is printed (or it has passed), the platform's
//! back-off applies.

use std::sync::LazyLock;
use std::time::Duration;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan, Zoned};
use regex::Regex;
use serde::{Deserialize, Serialize};

/// The wait when a limit is hit and no reset time was printed.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(30 * 60);

/// The longest back-off a platform may declare.
const MAX_BACKOFF: Duration = Duration::from_secs(7 * 24 * 3600);

/// The furthest ahead a printed reset time is believed: the longest limit window the agent
/// CLIs have is a week. A time further out (a garbled line, an agent printing a made-up one)
/// would park the run for months; the back-off applies instead.
const MAX_AHEAD: jiff::SignedDuration = jiff::SignedDuration::from_hours(8 * 24);

/// Characters of the reported line kept in a blocker.
const LINE_LIMIT: usize = 300;

/// How a platform's CLI reports a usage limit, as `canopy.toml` declares it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitDecl {
    pattern: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    backoff: Option<String>,
}

/// A platform's usage-limit rule, checked: a process of the platform whose output matches
/// `pattern` (and, when one is declared, that exited with `exit_code`) hit its limit.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "LimitDecl", into = "LimitDecl")]
pub struct LimitRule {
    pattern: Regex,
    exit_code: Option<i32>,
    backoff: Duration,
}

/// Two rules are the same when they are declared the same (a reload compares them).
impl PartialEq for LimitRule {
    fn eq(&self, other: &Self) -> bool {
        self.pattern.as_str() == other.pattern.as_str()
            && self.exit_code == other.exit_code
            && self.backoff == other.backoff
    }
}

impl Eq for LimitRule {}

impl TryFrom<LimitDecl> for LimitRule {
    type Error = String;

    fn try_from(decl: LimitDecl) -> Result<Self, String> {
        if decl.pattern.trim().is_empty() {
            return Err("field `pattern` is empty; give a regex that matches the line the CLI prints when it hits its limit".to_string());
        }
        let pattern = Regex::new(&decl.pattern)
            .map_err(|err| format!("field `pattern` is not a valid regex: {err}"))?;
        let backoff = match decl.backoff.as_deref() {
            None => DEFAULT_BACKOFF,
            Some(text) => {
                let backoff = humantime::parse_duration(text).map_err(|_| {
                    format!("field `backoff`: `{text}` is not a duration (like `30m`, `2h`)")
                })?;
                if backoff < Duration::from_secs(1) || backoff > MAX_BACKOFF {
                    return Err(format!(
                        "field `backoff`: `{text}` is out of range; allowed is 1s to 7days"
                    ));
                }
                backoff
            }
        };
        Ok(Self {
            pattern,
            exit_code: decl.exit_code,
            backoff,
        })
    }
}

impl From<LimitRule> for LimitDecl {
    fn from(rule: LimitRule) -> Self {
        Self {
            pattern: rule.pattern.as_str().to_string(),
            exit_code: rule.exit_code,
            backoff: (rule.backoff != DEFAULT_BACKOFF)
                .then(|| humantime::format_duration(rule.backoff).to_string()),
        }
    }
}

/// A limit a process hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LimitHit {
    /// The line that reported it (bounded).
    pub line: String,
    /// When the work runs again.
    #[schemars(with = "crate::time::Timestamp")]
    pub resets_at: Timestamp,
    /// The reset time is the one the CLI printed (else: the platform's back-off from now).
    pub printed: bool,
}

impl LimitHit {
    /// The reason of work that cannot wait for the reset (a hook, a cron action, a webhook
    /// handler): it failed, saying why and when the limit resets.
    pub fn as_failure(&self) -> String {
        format!(
            "the agent platform reported a usage limit (it resets at {}): {}",
            self.resets_at
                .round(jiff::Unit::Second)
                .unwrap_or(self.resets_at),
            self.line
        )
    }

    /// What a blocker says of it, `now` being the time of the pause.
    pub fn describe(&self, now: Timestamp) -> String {
        let wait = self
            .resets_at
            .duration_since(now)
            .max(jiff::SignedDuration::ZERO);
        let wait = Duration::from_secs(wait.as_secs().unsigned_abs());
        let why = if self.printed {
            "the reset time it printed"
        } else {
            "it printed no reset time within the next 8 days, so the platform's back-off applies"
        };
        format!(
            "usage limit reached: {}\nresumes by itself at {}, {} after the pause ({why})",
            self.line,
            self.resets_at
                .round(jiff::Unit::Second)
                .unwrap_or(self.resets_at),
            humantime::format_duration(wait)
        )
    }
}

impl LimitRule {
    /// [`Self::check`] for a process that ended now, in the daemon's time zone.
    pub fn check_now(&self, exit_code: Option<i32>, outputs: &[&str]) -> Option<LimitHit> {
        self.check(exit_code, outputs, &Zoned::now())
    }

    /// Whether a process that exited with `exit_code` and printed `outputs` (stdout, stderr)
    /// hit the limit, and when it resets, `now` being the time it ended.
    pub fn check(&self, exit_code: Option<i32>, outputs: &[&str], now: &Zoned) -> Option<LimitHit> {
        if self.exit_code.is_some_and(|code| exit_code != Some(code)) {
            return None;
        }
        let (text, found) = outputs
            .iter()
            .find_map(|text| self.pattern.captures(text).map(|caps| (*text, caps)))?;
        let whole = found.get(0)?;
        let line_start = text[..whole.start()].rfind('\n').map_or(0, |at| at + 1);
        let line_end = text[whole.end()..]
            .find('\n')
            .map_or(text.len(), |at| whole.end() + at);
        // The reset may be said on the line after (`... to your admin.\nor try again at 3pm`).
        let after_end = text[line_end..]
            .char_indices()
            .skip(1)
            .find(|(_, c)| *c == '\n')
            .map_or(text.len(), |(at, _)| line_end + at);
        let printed = match found.name("reset") {
            Some(reset) => parse_reset(reset.as_str(), now),
            None => find_reset(&text[whole.start()..after_end], now),
        }
        .filter(|at| {
            *at > now.timestamp()
                && now
                    .timestamp()
                    .checked_add(MAX_AHEAD)
                    .is_ok_and(|latest| *at <= latest)
        });
        let line = crate::text::head(text[line_start..line_end].trim(), LINE_LIMIT);
        let resets_at = printed.unwrap_or_else(|| {
            now.timestamp()
                .checked_add(jiff::SignedDuration::from_secs(
                    i64::try_from(self.backoff.as_secs()).unwrap_or(i64::MAX),
                ))
                .unwrap_or(Timestamp::MAX)
        });
        Some(LimitHit {
            line,
            resets_at,
            printed: printed.is_some(),
        })
    }
}

/// Where a reset time is said, after the words that announce it.
static ANNOUNCED: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\|\s*(\d{10}(?:\d{3})?)\b|\b(?:resets?|try again|retry)(?:\s+(?:at|on|after))?\s+(.{1,80})")
        .expect("a valid pattern")
});

/// The reset time said in `text` (the rest of the line that reported the limit).
fn find_reset(text: &str, now: &Zoned) -> Option<Timestamp> {
    ANNOUNCED.captures_iter(text).find_map(|caps| {
        caps.get(1)
            .or_else(|| caps.get(2))
            .and_then(|m| parse_reset(m.as_str(), now))
    })
}

static EPOCH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(\d{10}|\d{13})\b").expect("a valid pattern"));
static RFC3339: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})")
        .expect("a valid pattern")
});
/// One `<count> <unit>` of a span, after what came before it.
static SPAN_PART: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[\s,]*(?:and\s+)?(\d+)\s*([a-z]+)").expect("a valid pattern")
});
static CALENDAR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)^
        (?:(?P<month>jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?\s+
           (?P<day>\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(?P<year>\d{4}))?,?\s*)?
        (?:(?:at\s+)?(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s*(?P<ampm>[ap]\.?m\b\.?)?)?
        \s*(?:\(?(?P<zone>UTC|GMT|[A-Za-z]+/[A-Za-z0-9_+\-/]+)\)?)?",
    )
    .expect("a valid pattern")
});

/// A reset time as an agent CLI prints it (see the module's docs), `now` giving the date and
/// the zone of a time said without them. `None` when `text` does not start with one.
pub fn parse_reset(text: &str, now: &Zoned) -> Option<Timestamp> {
    let text = text.trim();
    if let Some(caps) = EPOCH.captures(text) {
        let digits: i64 = caps[1].parse().ok()?;
        return if caps[1].len() == 13 {
            Timestamp::from_millisecond(digits).ok()
        } else {
            Timestamp::from_second(digits).ok()
        };
    }
    if let Some(found) = RFC3339.find(text) {
        return found.as_str().replace(' ', "T").parse().ok();
    }
    if let Some(seconds) = span_seconds(text) {
        return now
            .timestamp()
            .checked_add(jiff::SignedDuration::from_secs(seconds))
            .ok();
    }
    calendar(text, now)
}

/// The seconds of a span at the start of `text` (`in 3 days 6 hours`, `45 minutes`, `2h30m`).
fn span_seconds(text: &str) -> Option<i64> {
    let mut rest = text
        .strip_prefix("in ")
        .or_else(|| text.strip_prefix("In "))
        .unwrap_or(text);
    let mut seconds: Option<i64> = None;
    while let Some(part) = SPAN_PART.captures(rest) {
        let unit = match part[2].to_ascii_lowercase().as_str() {
            "d" | "day" | "days" => 86_400,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600,
            "m" | "min" | "mins" | "minute" | "minutes" => 60,
            "s" | "sec" | "secs" | "second" | "seconds" => 1,
            _ => break,
        };
        let count: i64 = part[1].parse().ok()?;
        seconds = Some(seconds.unwrap_or(0).checked_add(count.checked_mul(unit)?)?);
        rest = &rest[part.get(0)?.end()..];
    }
    seconds
}

/// A date and/or a time of day, with an optional zone (`Aug 8th, 2026 12:30 PM`, `3pm
/// (Europe/Berlin)`, `15:00 UTC`): the next such instant from `now` when no date is given.
fn calendar(text: &str, now: &Zoned) -> Option<Timestamp> {
    let caps = CALENDAR.captures(text)?;
    let number = |name: &str| caps.name(name).and_then(|m| m.as_str().parse::<i64>().ok());
    let month = caps.name("month").map(|m| m.as_str().to_ascii_lowercase());
    let hour = number("hour");
    let minute = number("minute");
    let ampm = caps.name("ampm").map(|m| m.as_str().to_ascii_lowercase());
    // A bare number is not a time (`3`); a time needs its minutes or am/pm.
    let has_time = hour.is_some() && (minute.is_some() || ampm.is_some());
    if month.is_none() && !has_time {
        return None;
    }
    let zone = match caps.name("zone").map(|m| m.as_str()) {
        Some(name) if name.eq_ignore_ascii_case("utc") || name.eq_ignore_ascii_case("gmt") => {
            TimeZone::UTC
        }
        Some(name) => jiff::tz::db()
            .get(name)
            .unwrap_or_else(|_| now.time_zone().clone()),
        None => now.time_zone().clone(),
    };
    let here = now.with_time_zone(zone.clone());
    let (hour, minute) = if has_time {
        let mut hour = hour?;
        match ampm.as_deref().map(|s| s.starts_with('p')) {
            Some(_) if !(1..=12).contains(&hour) => return None,
            Some(true) if hour != 12 => hour += 12,
            Some(false) if hour == 12 => hour = 0,
            _ => {}
        }
        (hour, minute.unwrap_or(0))
    } else {
        (0, 0)
    };
    let time =
        jiff::civil::Time::new(i8::try_from(hour).ok()?, i8::try_from(minute).ok()?, 0, 0).ok()?;
    let date = match &month {
        Some(month) => {
            const MONTHS: [&str; 12] = [
                "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
            ];
            let index = MONTHS.iter().position(|m| month.starts_with(m))?;
            let month = i8::try_from(index + 1).ok()?;
            let day = i8::try_from(number("day")?).ok()?;
            match number("year") {
                Some(year) => Date::new(i16::try_from(year).ok()?, month, day).ok()?,
                None => {
                    let this_year = Date::new(here.year(), month, day).ok()?;
                    // A date without its year that is well past is next year's.
                    if this_year < here.date().checked_sub(1.day()).ok()? {
                        Date::new(here.year().checked_add(1)?, month, day).ok()?
                    } else {
                        this_year
                    }
                }
            }
        }
        None => here.date(),
    };
    let at = date.to_datetime(time).to_zoned(zone.clone()).ok()?;
    if month.is_none() && at.timestamp() <= now.timestamp() {
        // A time of day that has passed today is tomorrow's.
        return date
            .checked_add(1.day())
            .ok()?
            .to_datetime(time)
            .to_zoned(zone)
            .ok()
            .map(|z| z.timestamp());
    }
    Some(at.timestamp())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// 2026-12-07 10:00 in Berlin (09:00 UTC), a Monday.
    fn now() -> Zoned {
        "2026-12-07T10:00:00+01:00[Europe/Berlin]".parse().unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn rule(pattern: &str, exit_code: Option<i32>, backoff: Option<&str>) -> LimitRule {
        LimitRule::try_from(LimitDecl {
            pattern: pattern.to_string(),
            exit_code,
            backoff: backoff.map(str::to_string),
        })
        .unwrap()
    }

    #[test]
    fn the_forms_agent_clis_print_are_read() {
        let now = now();
        let cases = [
            ("1796637600", "2026-12-07T10:00:00Z"),
            ("1796637600000", "2026-12-07T10:00:00Z"),
            ("2026-12-07T12:30:00Z", "2026-12-07T12:30:00Z"),
            ("in 3 days 6 hours 57 minutes.", "2026-12-10T15:57:00Z"),
            ("45 minutes", "2026-12-07T09:45:00Z"),
            ("2h30m", "2026-12-07T11:30:00Z"),
            ("3pm (America/Santiago).", "2026-12-07T18:00:00Z"),
            ("3:28 PM.", "2026-12-07T14:28:00Z"),
            ("9pm (Europe/Berlin)", "2026-12-07T20:00:00Z"),
            ("15:00 UTC", "2026-12-07T15:00:00Z"),
            // Passed today: tomorrow's.
            ("8am", "2026-12-08T07:00:00Z"),
            ("12am", "2026-12-07T23:00:00Z"),
            ("Aug 8th, 2026 12:30 PM", "2026-08-08T10:30:00Z"),
            ("Dec 29th, 2026 10:15 PM", "2026-12-29T21:15:00Z"),
            // Without its year, a date well past is next year's.
            ("Aug 18.", "2027-08-17T22:00:00Z"),
        ];
        for (text, expected) in cases {
            assert_eq!(parse_reset(text, &now), Some(at(expected)), "{text}");
        }
    }

    #[test]
    fn what_is_not_a_time_is_none() {
        let now = now();
        for text in [
            "",
            "3",
            "later",
            "when your monthly cycle ends",
            "13pm",
            "25:00",
        ] {
            assert_eq!(parse_reset(text, &now), None, "{text}");
        }
    }

    #[test]
    fn a_limit_line_gives_its_reset_time_and_without_one_the_back_off() {
        let now = now();
        let claude = rule("(?i)usage limit reached|hit your limit", None, None);
        let hit = claude
            .check(
                Some(1),
                &["", "Claude AI usage limit reached|1796644800"],
                &now,
            )
            .unwrap();
        assert_eq!(hit.resets_at, at("2026-12-07T12:00:00Z"));
        assert!(hit.printed);
        assert_eq!(hit.line, "Claude AI usage limit reached|1796644800");

        let codex = rule("(?i)hit your usage limit", Some(1), Some("10m"));
        let out = "working\n■ You've hit your usage limit. To get more access now, send a request to your admin.\nor try again at 3:28 PM.\n";
        let hit = codex.check(Some(1), &[out, ""], &now).unwrap();
        assert_eq!(hit.resets_at, at("2026-12-07T14:28:00Z"));
        assert!(hit.line.starts_with("■ You've hit your usage limit."));
        // The declared exit code must match.
        assert_eq!(codex.check(Some(0), &[out], &now), None);
        assert_eq!(codex.check(None, &[out], &now), None);

        // No time printed (or one that passed): the back-off from now.
        let hit = codex
            .check(Some(1), &["You've hit your usage limit. Try later."], &now)
            .unwrap();
        assert_eq!(hit.resets_at, at("2026-12-07T09:10:00Z"));
        assert!(!hit.printed);
        let stale = claude
            .check(None, &["Claude AI usage limit reached|1700000000"], &now)
            .unwrap();
        assert!(!stale.printed);
        assert_eq!(stale.resets_at, at("2026-12-07T09:30:00Z"));
        // A reset too far ahead to be a usage window, or no time at all: the back-off.
        for line in [
            "Claude AI usage limit reached|9999999999",
            "Claude AI usage limit reached|9223372036854775807",
            "usage limit reached, try again in 9999999999999999999 days",
            "usage limit reached, try again at Dec 31st, 9999 11:59 PM",
        ] {
            let far = claude.check(None, &[line], &now).unwrap();
            assert!(!far.printed, "{line}");
            assert_eq!(far.resets_at, at("2026-12-07T09:30:00Z"), "{line}");
        }

        // A `reset` group says where the time is.
        let own = rule(r"quota gone until (?P<reset>\S+)", None, None);
        let hit = own
            .check(None, &["quota gone until 2026-12-07T11:00:00Z ok"], &now)
            .unwrap();
        assert_eq!(hit.resets_at, at("2026-12-07T11:00:00Z"));
        assert_eq!(claude.check(Some(1), &["all done"], &now), None);
    }

    #[test]
    fn a_bad_declaration_names_its_field() {
        let bad = |pattern: &str, backoff: Option<&str>| {
            LimitRule::try_from(LimitDecl {
                pattern: pattern.to_string(),
                exit_code: None,
                backoff: backoff.map(str::to_string),
            })
            .unwrap_err()
        };
        assert!(bad("(", None).starts_with("field `pattern` is not a valid regex"));
        assert!(bad(" ", None).starts_with("field `pattern` is empty"));
        assert!(bad("x", Some("soon")).contains("field `backoff`: `soon` is not a duration"));
        assert!(bad("x", Some("30days")).contains("out of range"));
        assert!(bad("x", Some("0s")).contains("out of range"));
    }
}
