//! Launcher instance IDs: `inst-<client_type>-<YYYYMMDDTHHMMSSZ>-<12 lowercase hex>`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::macros::format_description;
use time::{OffsetDateTime, PrimitiveDateTime, UtcOffset};

use crate::names::{ClientType, IdentityError};

/// How many random bytes a minted instance ID carries (12 hex digits).
pub const INSTANCE_DIGEST_BYTES: usize = 6;

const PREFIX: &str = "inst-";
const STAMP_LEN: usize = "YYYYMMDDTHHMMSSZ".len();
const DIGEST_LEN: usize = INSTANCE_DIGEST_BYTES * 2;

/// Why a string is not a launcher instance ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstanceIdError {
    /// The string does not start with `inst-`.
    #[error("instance id {0:?} does not start with \"inst-\"")]
    MissingPrefix(String),
    /// The string has the prefix but not the three parts.
    #[error("instance id {0:?} is not inst-<client>-<YYYYMMDDTHHMMSSZ>-<12 hex>")]
    Shape(String),
    /// The client part is not a valid client type.
    #[error("instance id {value:?} has an invalid client type: {source}")]
    ClientType {
        /// The refused instance ID.
        value: String,
        /// Why the client part was refused.
        source: IdentityError,
    },
    /// The timestamp part is not a real UTC second.
    #[error("instance id {0:?} has an invalid timestamp")]
    Timestamp(String),
    /// The digest part is not 12 lowercase hex digits.
    #[error("instance id {0:?} has a digest that is not 12 lowercase hex digits")]
    Digest(String),
    /// The mint time is outside the years 0000-9999 that the format can spell.
    #[error("mint time is outside the years the instance id format can spell")]
    Unspellable,
}

/// A well-formed launcher instance ID. Its existence says nothing about trust: only the
/// launcher's ledger makes an ID trusted (see [`crate::assess_instance_id`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientInstanceId {
    text: String,
    client_type: ClientType,
    minted_at: OffsetDateTime,
    digest: [u8; INSTANCE_DIGEST_BYTES],
}

impl ClientInstanceId {
    /// Mints the ID of one launch from its client type, the launch time (cut to the
    /// second, in UTC) and random bytes the caller drew.
    pub fn mint(
        client_type: &ClientType,
        now: OffsetDateTime,
        random: [u8; INSTANCE_DIGEST_BYTES],
    ) -> Result<Self, InstanceIdError> {
        let minted_at =
            now.to_offset(UtcOffset::UTC).replace_nanosecond(0).map_err(|_| InstanceIdError::Unspellable)?;
        let stamp = minted_at
            .format(format_description!("[year][month][day]T[hour][minute][second]Z"))
            .map_err(|_| InstanceIdError::Unspellable)?;
        if stamp.len() != STAMP_LEN {
            return Err(InstanceIdError::Unspellable);
        }
        let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
        Ok(Self {
            text: format!("{PREFIX}{client_type}-{stamp}-{hex}"),
            client_type: client_type.clone(),
            minted_at,
            digest: random,
        })
    }

    /// Parses and validates an instance ID.
    pub fn parse(value: &str) -> Result<Self, InstanceIdError> {
        let rest =
            value.strip_prefix(PREFIX).ok_or_else(|| InstanceIdError::MissingPrefix(value.to_owned()))?;
        // The client type never contains '-', so the two last '-' separate the parts.
        let shape = || InstanceIdError::Shape(value.to_owned());
        let (rest, digest) = rest.rsplit_once('-').ok_or_else(shape)?;
        let (client, stamp) = rest.rsplit_once('-').ok_or_else(shape)?;
        let client_type = ClientType::new(client)
            .map_err(|source| InstanceIdError::ClientType { value: value.to_owned(), source })?;
        let minted_at = parse_stamp(stamp).ok_or_else(|| InstanceIdError::Timestamp(value.to_owned()))?;
        let digest = parse_digest(digest).ok_or_else(|| InstanceIdError::Digest(value.to_owned()))?;
        Ok(Self { text: value.to_owned(), client_type, minted_at, digest })
    }

    /// The ID as text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The client type the ID was minted for.
    pub fn client_type(&self) -> &ClientType {
        &self.client_type
    }

    /// When the ID was minted, to the second, in UTC.
    pub fn minted_at(&self) -> OffsetDateTime {
        self.minted_at
    }

    /// The random bytes of the ID.
    pub fn digest(&self) -> [u8; INSTANCE_DIGEST_BYTES] {
        self.digest
    }
}

/// Reads `YYYYMMDDTHHMMSSZ` (a real calendar date and time of day, in UTC): what the
/// format `[year][month][day]T[hour][minute][second]Z` reads from 16 bytes, without the
/// general parser, which costs more than the rest of the ID together.
fn parse_stamp(stamp: &str) -> Option<OffsetDateTime> {
    let b = stamp.as_bytes();
    if b.len() != STAMP_LEN || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<u16> {
        b[from..to].iter().try_fold(0u16, |n, &c| c.is_ascii_digit().then(|| n * 10 + u16::from(c - b'0')))
    };
    let two = |from: usize| number(from, from + 2).and_then(|n| u8::try_from(n).ok());
    let month = time::Month::try_from(two(4)?).ok()?;
    let date = time::Date::from_calendar_date(i32::from(number(0, 4)?), month, two(6)?).ok()?;
    let time = time::Time::from_hms(two(9)?, two(11)?, two(13)?).ok()?;
    Some(PrimitiveDateTime::new(date, time).assume_utc())
}

fn parse_digest(text: &str) -> Option<[u8; INSTANCE_DIGEST_BYTES]> {
    if text.len() != DIGEST_LEN || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    // Every byte is a lowercase hex digit (checked above).
    let nibble = |b: u8| if b.is_ascii_digit() { b - b'0' } else { b - b'a' + 10 };
    let mut out = [0u8; INSTANCE_DIGEST_BYTES];
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        *byte = nibble(pair[0]) << 4 | nibble(pair[1]);
    }
    Some(out)
}

impl FromStr for ClientInstanceId {
    type Err = InstanceIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ClientInstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for ClientInstanceId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for ClientInstanceId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// A placeholder instance ID written by workers that predate the trusted launcher
/// (`legacy-pid-*`, `pid-*` or `proc-*`, seed 004's legacy identities). It can be
/// recorded and reported, never trusted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LegacyPlaceholder(String);

impl LegacyPlaceholder {
    /// Recognises a legacy placeholder.
    pub fn parse(value: &str) -> Option<Self> {
        let shaped = ["legacy-pid-", "pid-", "proc-"].iter().any(|prefix| value.starts_with(prefix))
            && value.len() <= 256
            && !value.chars().any(|c| c.is_whitespace() || c.is_control());
        shaped.then(|| Self(value.to_owned()))
    }

    /// The placeholder as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LegacyPlaceholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use time::macros::datetime;

    use super::*;

    #[test]
    fn minting_spells_the_documented_format() {
        let id = ClientInstanceId::mint(
            &ClientType::new("codex").unwrap(),
            datetime!(2026-07-30 12:00:00.75 UTC),
            [0xab, 0xc1, 0x23, 0xde, 0xf4, 0x56],
        )
        .unwrap();
        assert_eq!(id.as_str(), "inst-codex-20260730T120000Z-abc123def456");
    }

    #[test]
    fn parse_rejects_each_broken_part() {
        let cases = [
            ("codex-20260730T120000Z-abc123def456", "does not start"),
            ("inst-codex", "is not inst-"),
            ("inst-Codex-20260730T120000Z-abc123def456", "invalid client type"),
            ("inst-codex-20261330T120000Z-abc123def456", "invalid timestamp"),
            ("inst-codex-2026073T120000Z-abc123def456", "invalid timestamp"),
            ("inst-codex-20260730T120000Z-ABC123DEF456", "digest"),
            ("inst-codex-20260730T120000Z-abc123def45", "digest"),
        ];
        for (input, needle) in cases {
            let err = ClientInstanceId::parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
        }
    }

    #[test]
    fn legacy_placeholders_are_recognised() {
        assert!(LegacyPlaceholder::parse("legacy-pid-4242").is_some());
        assert!(LegacyPlaceholder::parse("pid-17").is_some());
        assert!(LegacyPlaceholder::parse("proc-17").is_some(), "seed 004 names pid- and proc- identities");
        assert!(LegacyPlaceholder::parse("process-17").is_none());
    }

    fn client_type() -> impl Strategy<Value = ClientType> {
        "[a-z][a-z0-9_]{0,31}".prop_map(|s| ClientType::new(s).unwrap())
    }

    /// What the general parser makes of a stamp of the stamp's length (longer ones, such
    /// as a signed year, are refused before it), for comparison.
    fn general(stamp: &str) -> Option<OffsetDateTime> {
        let format = format_description!("[year][month][day]T[hour][minute][second]Z");
        let parsed = PrimitiveDateTime::parse(stamp, format).ok().map(PrimitiveDateTime::assume_utc);
        parsed.filter(|_| stamp.len() == STAMP_LEN)
    }

    #[test]
    fn the_stamp_reader_refuses_what_the_general_parser_refuses() {
        for stamp in [
            "20260730T120000Z",
            "20260230T120000Z",
            "20240229T235959Z",
            "20250229T000000Z",
            "20261301T000000Z",
            "20260001T000000Z",
            "20260100T000000Z",
            "20260101T240000Z",
            "20260101T006000Z",
            "20260101T000060Z",
            "00000101T000000Z",
            "+2026073T120000Z",
            "2026-730T120000Z",
            "20260730t120000Z",
            "20260730T120000z",
            "2026073OT120000Z",
            "20260730T12000Z",
        ] {
            assert_eq!(parse_stamp(stamp), general(stamp), "{stamp}");
        }
    }

    proptest! {
        #[test]
        fn the_stamp_reader_reads_as_the_general_parser(stamp in "[0-9T+-]{0,3}[0-9]{4}[0-3][0-9][0-3][0-9][T ][0-2][0-9][0-6][0-9][0-6][0-9][Z ]") {
            prop_assert_eq!(parse_stamp(&stamp), general(&stamp));
        }

        #[test]
        fn every_minted_id_parses_back_to_the_same_parts(
            client in client_type(),
            secs in 0i64..253_402_300_799,
            random in any::<[u8; INSTANCE_DIGEST_BYTES]>(),
        ) {
            let now = OffsetDateTime::from_unix_timestamp(secs).unwrap();
            let id = ClientInstanceId::mint(&client, now, random).unwrap();
            let parsed = ClientInstanceId::parse(id.as_str()).unwrap();
            prop_assert_eq!(parsed.client_type(), &client);
            prop_assert_eq!(parsed.minted_at(), now);
            prop_assert_eq!(parsed.digest(), random);
            prop_assert_eq!(parsed, id);
        }
    }
}
