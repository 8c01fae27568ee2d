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
        if let Some(at) = Self::parse_canonical(text) {
            return Ok(at);
        }
        OffsetDateTime::parse(text, &Rfc3339).map(Self::new).map_err(|_| TimestampError(text.to_owned()))
    }

    /// The text form this type writes (`2026-07-30T12:00:00.000Z`), read without the
    /// general RFC 3339 parser: stores hold every heartbeat in it, and the snapshot reads
    /// one per row. `None` for any other spelling, which the general parser then reads.
    fn parse_canonical(text: &str) -> Option<Self> {
        let b = text.as_bytes();
        if b.len() != 24 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' {
            return None;
        }
        if b[16] != b':' || b[19] != b'.' || b[23] != b'Z' {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<u32> {
            b[range].iter().try_fold(0u32, |n, d| d.is_ascii_digit().then(|| n * 10 + u32::from(d - b'0')))
        };
        let month = time::Month::try_from(u8::try_from(num(5..7)?).ok()?).ok()?;
        let date = time::Date::from_calendar_date(
            i32::try_from(num(0..4)?).ok()?,
            month,
            u8::try_from(num(8..10)?).ok()?,
        )
        .ok()?;
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        // RFC 3339 allows a leap second (`:60`); the general parser decides what it means.
        if second > 59 {
            return None;
        }
        let time = time::Time::from_hms_milli(
            u8::try_from(hour).ok()?,
            u8::try_from(minute).ok()?,
            u8::try_from(second).ok()?,
            u16::try_from(num(20..23)?).ok()?,
        )
        .ok()?;
        Some(Self(date.with_time(time).assume_utc()))
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

impl Timestamp {
    /// The text form of a time in years 0 to 9999 (every time a registry holds), written
    /// digit by digit into a stack buffer: a snapshot or plan writes two per worker, and
    /// the formatting machinery's padding took most of that time. `None` for other years.
    fn canonical_text(&self) -> Option<[u8; 24]> {
        let (date, time) = (self.0.date(), self.0.time());
        let year = u32::try_from(date.year()).ok().filter(|y| *y <= 9999)?;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        let mut put = |end: usize, digits: usize, mut n: u32| {
            for slot in out[end - digits..end].iter_mut().rev() {
                // A digit: n % 10 < 10.
                *slot = b'0' + (n % 10) as u8;
                n /= 10;
            }
        };
        put(4, 4, year);
        put(7, 2, u32::from(u8::from(date.month())));
        put(10, 2, u32::from(date.day()));
        put(13, 2, u32::from(time.hour()));
        put(16, 2, u32::from(time.minute()));
        put(19, 2, u32::from(time.second()));
        put(23, 3, u32::from(time.millisecond()));
        Some(out)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(text) = self.canonical_text() {
            // Every byte is an ASCII digit or separator.
            return f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?);
        }
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
        match self.canonical_text() {
            Some(text) => s.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?),
            None => s.collect_str(self),
        }
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
    fn the_canonical_reader_agrees_with_the_general_parser() {
        for text in [
            "2026-07-30T12:00:00.123Z",
            "0000-01-01T00:00:00.000Z",
            "9999-12-31T23:59:59.999Z",
            "2024-02-29T01:02:03.004Z",
        ] {
            let general = Timestamp::new(OffsetDateTime::parse(text, &Rfc3339).unwrap());
            assert_eq!(Timestamp::parse_canonical(text), Some(general), "{text}");
            assert_eq!(general.to_string(), text);
        }
        // Not the canonical form, or not a time: left to the general parser.
        for text in [
            "2026-07-30T12:00:00Z",
            "2026-07-30T12:00:60.000Z",
            "2025-02-29T00:00:00.000Z",
            "2026-13-01T00:00:00.000Z",
            "2026-07-30T24:00:00.000Z",
            "2026-07-30t12:00:00.000Z",
            "+026-07-30T12:00:00.000Z",
        ] {
            assert_eq!(Timestamp::parse_canonical(text), None, "{text}");
        }
    }

    #[test]
    fn years_outside_four_digits_still_print() {
        let early = Timestamp::from_unix_millis(-62_198_755_200_000).unwrap();
        assert_eq!(early.to_string(), general(early));
    }

    #[test]
    fn offsets_and_precision_are_canonicalised() {
        let a = Timestamp::parse("2026-07-30T12:00:00Z").unwrap();
        let b = Timestamp::parse("2026-07-30T14:00:00.000+02:00").unwrap();
        assert_eq!(a, b);
        assert!(Timestamp::parse("yesterday").is_err());
    }

    /// The general formatter's text for `at`.
    fn general(at: Timestamp) -> String {
        at.get()
            .format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .unwrap()
    }

    proptest::proptest! {
        /// The digit-by-digit writer says what the general formatter says, as text and
        /// as JSON, for any millisecond from year -9999 to 9999 (and reads back from year 0).
        #[test]
        fn the_canonical_writer_agrees_with_the_general_formatter(
            millis in -377_705_116_800_000_i64..253_402_300_800_000,
        ) {
            let at = Timestamp::from_unix_millis(millis).unwrap();
            proptest::prop_assert_eq!(at.to_string(), general(at));
            proptest::prop_assert_eq!(serde_json::to_string(&at).unwrap(), format!("{:?}", general(at)));
            if at.get().year() >= 0 {
                proptest::prop_assert_eq!(Timestamp::parse(&at.to_string()).unwrap(), at);
            }
        }
    }
}
