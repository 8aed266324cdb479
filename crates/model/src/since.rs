//! The one parser of `since`: an RFC 3339 instant, or a duration back from now (`10m`, `2h`),
//! as the store writes times. The feed also takes a cursor first; that is its own business.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::time::Timestamp;

/// Why a `since` value was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinceError {
    /// Neither a time nor a duration.
    NotATime,
    /// A time or a duration that reaches back before 1970-01-01, the earliest the store holds;
    /// `max_years` is the longest duration back that is still after it.
    BeforeEpoch { max_years: u64 },
}

impl SinceError {
    /// The message for a parameter named `name` (`query parameter \`since\``), saying what
    /// was wrong and what is allowed; `forms` names what the parameter takes when it is not a
    /// time at all.
    pub fn message(&self, name: &str, text: &str, forms: &str) -> String {
        match self {
            Self::NotATime => format!("{name}: `{text}` is neither {forms}"),
            Self::BeforeEpoch { max_years } => format!(
                "{name}: `{text}` reaches back before 1970-01-01T00:00:00Z; give a duration of at most {max_years}y or a time from 1970 on"
            ),
        }
    }
}

/// `text` as an instant at or after 1970-01-01: an RFC 3339 time, or a duration back from
/// `now`.
pub fn instant(text: &str, now: SystemTime) -> Result<Timestamp, SinceError> {
    let text = text.trim();
    // humantime's year is 365.25 days.
    let before_epoch = || SinceError::BeforeEpoch {
        max_years: now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs() / 31_557_600),
    };
    let instant = match humantime::parse_rfc3339_weak(text) {
        Ok(instant) => instant,
        Err(_) if crate::text::rfc3339_before_epoch(text) => return Err(before_epoch()),
        Err(_) => {
            let span = humantime::parse_duration(text).map_err(|_| SinceError::NotATime)?;
            now.checked_sub(span).ok_or_else(before_epoch)?
        }
    };
    if instant < UNIX_EPOCH {
        return Err(before_epoch());
    }
    Ok(Timestamp::from_system(instant))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn times_and_durations_back_are_instants_and_before_1970_is_said_so() {
        let now = UNIX_EPOCH + Duration::from_secs(50 * 31_557_600);
        assert_eq!(
            instant("2020-01-31T12:00:00Z", now).map(|at| at.to_string()),
            Ok("2020-01-31T12:00:00.000000Z".to_string())
        );
        assert_eq!(
            instant("2h", now).map(|at| at.to_string()),
            Ok("2020-01-01T10:00:00.000000Z".to_string())
        );
        assert_eq!(instant("soon", now), Err(SinceError::NotATime));
        for before in ["1900-01-01T00:00:00Z", "60y", "18446744073709551615s"] {
            assert_eq!(
                instant(before, now),
                Err(SinceError::BeforeEpoch { max_years: 50 }),
                "{before}"
            );
        }
    }
}
