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
        let mut parts = rest.rsplitn(3, '-');
        let (Some(digest), Some(stamp), Some(client)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(InstanceIdError::Shape(value.to_owned()));
        };
        let client_type = ClientType::new(client)
            .map_err(|source| InstanceIdError::ClientType { value: value.to_owned(), source })?;
        if stamp.len() != STAMP_LEN {
            return Err(InstanceIdError::Timestamp(value.to_owned()));
        }
        let minted_at = PrimitiveDateTime::parse(
            stamp,
            format_description!("[year][month][day]T[hour][minute][second]Z"),
        )
        .map_err(|_| InstanceIdError::Timestamp(value.to_owned()))?
        .assume_utc();
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

fn parse_digest(text: &str) -> Option<[u8; INSTANCE_DIGEST_BYTES]> {
    if text.len() != DIGEST_LEN || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    let mut out = [0u8; INSTANCE_DIGEST_BYTES];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[i * 2..i * 2 + 2], 16).ok()?;
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
/// (`legacy-pid-*` or `pid-*`). It can be recorded and reported, never trusted.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LegacyPlaceholder(String);

impl LegacyPlaceholder {
    /// Recognises a legacy placeholder.
    pub fn parse(value: &str) -> Option<Self> {
        let shaped = (value.starts_with("legacy-pid-") || value.starts_with("pid-"))
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
        assert!(LegacyPlaceholder::parse("proc-17").is_none());
    }

    fn client_type() -> impl Strategy<Value = ClientType> {
        "[a-z][a-z0-9_]{0,31}".prop_map(|s| ClientType::new(s).unwrap())
    }

    proptest! {
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
