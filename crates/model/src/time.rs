//! Canopy's one timestamp type: an instant in UTC with microsecond precision.
//!
//! Every record, event and API answer carries its times as a [`Timestamp`]. Its text form is
//! RFC 3339 in UTC with exactly six fractional digits (`2026-12-07T08:48:39.123456Z`): a fixed
//! width, so the store can compare and order the text it keeps and the order is the order in
//! time. Reading accepts any RFC 3339 instant (any offset, any fraction) and keeps microseconds.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant in UTC, to the microsecond. Ordered in time; its text form (`Display`, serde,
/// the store's column) is RFC 3339 with six fractional digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(jiff::Timestamp);

/// A text that is not an RFC 3339 instant.
#[derive(Debug, Clone, thiserror::Error)]
#[error("`{text}` is not an RFC 3339 timestamp (such as 2026-12-07T08:48:39Z): {reason}")]
pub struct TimestampError {
    text: String,
    reason: String,
}

impl Timestamp {
    /// The Unix epoch.
    pub const UNIX_EPOCH: Timestamp = Timestamp(jiff::Timestamp::UNIX_EPOCH);

    /// Now, to the microsecond.
    pub fn now() -> Self {
        Self::from_jiff(jiff::Timestamp::now())
    }

    /// The instant `ms` milliseconds after the Unix epoch; `None` outside the range.
    pub fn from_unix_millis(ms: i64) -> Option<Self> {
        jiff::Timestamp::from_millisecond(ms)
            .ok()
            .map(Self::from_jiff)
    }

    /// `at`, to the microsecond (finer digits are dropped).
    pub fn from_jiff(at: jiff::Timestamp) -> Self {
        let micros = at.as_microsecond();
        Timestamp(jiff::Timestamp::from_microsecond(micros).unwrap_or(at))
    }

    /// `at`, to the microsecond. A time outside jiff's range (years -9999 to 9999) is clamped
    /// to its end.
    pub fn from_system(at: SystemTime) -> Self {
        let at = jiff::Timestamp::try_from(at).unwrap_or_else(|_| {
            if at > SystemTime::UNIX_EPOCH {
                jiff::Timestamp::MAX
            } else {
                jiff::Timestamp::MIN
            }
        });
        Self::from_jiff(at)
    }

    /// The time `ago` before now (the epoch if that is before it).
    pub fn ago(ago: Duration) -> Self {
        Self::now().saturating_sub(ago).max(Self::UNIX_EPOCH)
    }

    /// The time `span` before this one (the earliest instant jiff knows if that is before it).
    pub fn saturating_sub(self, span: Duration) -> Self {
        let span = jiff::SignedDuration::try_from(span).unwrap_or(jiff::SignedDuration::MAX);
        Timestamp(self.0.saturating_sub(span).unwrap_or(jiff::Timestamp::MIN))
    }

    /// The time `span` after this one (the last instant jiff knows if that is past it).
    pub fn saturating_add(self, span: Duration) -> Self {
        let span = jiff::SignedDuration::try_from(span).unwrap_or(jiff::SignedDuration::MAX);
        Timestamp(self.0.saturating_add(span).unwrap_or(jiff::Timestamp::MAX))
    }

    /// How long after `earlier` this is; zero when it is not after it.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        let span = self.0.duration_since(earlier.0);
        Duration::try_from(span).unwrap_or(Duration::ZERO)
    }

    /// How long ago this was; zero when it is in the future.
    pub fn elapsed(self) -> Duration {
        Timestamp::now().duration_since(self)
    }

    /// As jiff's timestamp (for time-zone arithmetic and formatting in local time).
    pub fn as_jiff(self) -> jiff::Timestamp {
        self.0
    }

    /// As a system time.
    pub fn as_system(self) -> SystemTime {
        SystemTime::from(self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}", self.0)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The store's own form, `YYYY-MM-DDTHH:MM:SS.ffffffZ`, read without the general parser: a
/// large view reads thousands of stored times. `None` for any other text (the general parser
/// then decides), including an impossible date.
fn fixed_width(text: &[u8]) -> Option<Timestamp> {
    if text.len() != 27
        || text[4] != b'-'
        || text[7] != b'-'
        || text[10] != b'T'
        || text[13] != b':'
        || text[16] != b':'
        || text[19] != b'.'
        || text[26] != b'Z'
    {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        text[from..to].iter().try_fold(0i64, |n, digit| {
            digit
                .is_ascii_digit()
                .then(|| n * 10 + i64::from(digit - b'0'))
        })
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let micros = number(20, 26)?;
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    jiff::Timestamp::from_microsecond(seconds * 1_000_000 + micros)
        .ok()
        .map(Timestamp)
}

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(at) = fixed_width(text.as_bytes()) {
            return Ok(at);
        }
        text.trim()
            .parse::<jiff::Timestamp>()
            .map(Self::from_jiff)
            .map_err(|err| TimestampError {
                text: text.to_owned(),
                reason: err.to_string(),
            })
    }
}

impl From<jiff::Timestamp> for Timestamp {
    fn from(at: jiff::Timestamp) -> Self {
        Self::from_jiff(at)
    }
}

impl From<SystemTime> for Timestamp {
    fn from(at: SystemTime) -> Self {
        Self::from_system(at)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "format": "date-time",
            "description": "An instant in UTC, RFC 3339 with six fractional digits.",
            "examples": ["2026-12-07T08:48:39.123456Z"],
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn text_has_a_fixed_width_so_text_order_is_time_order() {
        let whole: Timestamp = "2026-12-07T08:48:39Z".parse().unwrap();
        assert_eq!(whole.to_string(), "2026-12-07T08:48:39.000000Z");
        let later = whole.saturating_add(Duration::from_micros(1));
        assert_eq!(later.to_string(), "2026-12-07T08:48:39.000001Z");
        assert!(whole.to_string() < later.to_string() && whole < later);
        let now = Timestamp::now().to_string();
        assert_eq!(now.len(), "2026-12-07T08:48:39.000000Z".len(), "{now}");
    }

    #[test]
    fn reads_any_offset_and_fraction_and_keeps_microseconds() {
        let at: Timestamp = "2026-12-07T09:48:39.1234567+01:00".parse().unwrap();
        assert_eq!(at.to_string(), "2026-12-07T08:48:39.123456Z");
        let round: Timestamp = at.to_string().parse().unwrap();
        assert_eq!(round, at);
        let json = serde_json::to_string(&at).unwrap();
        assert_eq!(json, "\"2026-12-07T08:48:39.123456Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), at);
    }

    #[test]
    fn refuses_what_is_not_an_instant_naming_the_form() {
        for text in ["", "yesterday", "2026-12-07", "2026-12-07T08:48:39"] {
            let err = text.parse::<Timestamp>().unwrap_err().to_string();
            assert!(err.contains("RFC 3339"), "{text}: {err}");
        }
        assert!(serde_json::from_str::<Timestamp>("12").is_err());
    }

    #[test]
    fn the_stores_own_form_reads_as_the_general_parser_reads_it() {
        // Every day of 1968-2101 (leap years and century rules), at several times of day.
        let mut at: Timestamp = "1968-01-01T00:00:00Z".parse().unwrap();
        let end: Timestamp = "2101-01-01T00:00:00Z".parse().unwrap();
        let step = Duration::from_secs(86_400) + Duration::from_micros(3_600_000_123);
        while at < end {
            let text = at.to_string();
            let general = Timestamp::from_jiff(text.parse::<jiff::Timestamp>().unwrap());
            assert_eq!(fixed_width(text.as_bytes()), Some(general), "{text}");
            at = at.saturating_add(step);
        }
        for text in [
            "2026-02-29T00:00:00.000000Z",
            "2024-13-01T00:00:00.000000Z",
            "2024-04-31T00:00:00.000000Z",
            "2024-01-01T24:00:00.000000Z",
            "2024-01-01T00:00:60.000000Z",
            "2024-01-01T00:00:00.00000xZ",
            "2024-01-01 00:00:00.000000Z",
        ] {
            assert_eq!(fixed_width(text.as_bytes()), None, "{text}");
        }
        assert!("2026-02-29T00:00:00.000000Z".parse::<Timestamp>().is_err());
    }

    #[test]
    fn arithmetic_saturates_and_durations_are_never_negative() {
        let at: Timestamp = "2026-12-07T08:48:39Z".parse().unwrap();
        let before = at.saturating_sub(Duration::from_secs(90));
        assert_eq!(at.duration_since(before), Duration::from_secs(90));
        assert_eq!(before.duration_since(at), Duration::ZERO);
        assert!(at.saturating_sub(Duration::MAX) < before);
        assert!(at.saturating_add(Duration::MAX) > at);
        let system = at.as_system();
        assert_eq!(Timestamp::from_system(system), at);
    }
}
