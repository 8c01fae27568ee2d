//! UTC timestamps as the registry stores them: RFC 3339 with milliseconds and a `Z`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::macros::format_description;
use time::{Duration, OffsetDateTime, UtcOffset};

/// Why a timestamp string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("timestamp {0:?} is not an RFC 3339 time")]
pub struct TimestampError(pub String);

/// A point in time, held in UTC to the millisecond. Its text form
/// (`2026-07-30T12:00:00.000Z`) sorts in time order, so stores can compare it as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(OffsetDateTime);

impl Timestamp {
    /// Wraps a time, converting it to UTC and cutting it to the millisecond.
    pub fn new(at: OffsetDateTime) -> Self {
        let utc = at.to_offset(UtcOffset::UTC);
        let millis = utc.millisecond();
        Self(utc.replace_millisecond(millis).unwrap_or(utc))
    }

    /// A time from whole milliseconds since the Unix epoch.
    pub fn from_unix_millis(millis: i64) -> Option<Self> {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(millis) * 1_000_000).ok().map(Self)
    }

    /// Parses any RFC 3339 time.
    pub fn parse(text: &str) -> Result<Self, TimestampError> {
        OffsetDateTime::parse(text, &Rfc3339).map(Self::new).map_err(|_| TimestampError(text.to_owned()))
    }

    /// The wrapped time.
    pub fn get(self) -> OffsetDateTime {
        self.0
    }

    /// Milliseconds since the Unix epoch.
    pub fn unix_millis(self) -> i64 {
        i64::try_from(self.0.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
    }

    /// This time moved by `by`, saturating at the ends of the representable range.
    pub fn saturating_add(self, by: Duration) -> Self {
        Self(self.0.checked_add(by).unwrap_or(self.0))
    }

    /// `self - earlier`.
    pub fn since(self, earlier: Timestamp) -> Duration {
        self.0 - earlier.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self
            .0
            .format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .map_err(|_| fmt::Error)?;
        f.write_str(&text)
    }
}

impl FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    #[test]
    fn text_form_is_utc_with_milliseconds() {
        let t = Timestamp::new(datetime!(2026-07-30 14:00:00.123456 +02:00));
        assert_eq!(t.to_string(), "2026-07-30T12:00:00.123Z");
        assert_eq!(Timestamp::parse(&t.to_string()).unwrap(), t);
    }

    #[test]
    fn offsets_and_precision_are_canonicalised() {
        let a = Timestamp::parse("2026-07-30T12:00:00Z").unwrap();
        let b = Timestamp::parse("2026-07-30T14:00:00.000+02:00").unwrap();
        assert_eq!(a, b);
        assert!(Timestamp::parse("yesterday").is_err());
    }
}
