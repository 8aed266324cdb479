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

impl FromStr for Timestamp {
    type Err = TimestampError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
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
