//! The registry's own identity: an id minted once, when the registry is created, and
//! stored inside it. However a location spells the registry (a relative path, a symlinked
//! directory, `localhost` for `127.0.0.1`, a URL with or without its user), the id is the
//! same; two registries (two files, two PostgreSQL schemas of one database) never share
//! one. Whatever must name "this registry" outside it — the tenure marker a kept command
//! carries, PostgreSQL's advisory lock key — names it by this id.

use crate::error::StoreError;

/// A registry's id: 32 lowercase hexadecimal digits (128 random bits).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegistryId(String);

impl RegistryId {
    /// Validates a stored id.
    pub fn new(id: impl Into<String>) -> Result<Self, StoreError> {
        let id = id.into();
        if id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Self(id))
        } else {
            Err(StoreError::new(
                crate::StoreErrorKind::Corrupt,
                format!("registry id {:?} is not 32 lowercase hexadecimal digits", truncate(&id)),
            ))
        }
    }

    /// The id as stored.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A 64-bit key derived from the id, for a lock space shared by many registries
    /// (PostgreSQL's advisory locks of one database).
    pub fn lock_key(&self) -> i64 {
        let hash = blake3::hash(format!("fleetward write lock {}", self.0).as_bytes());
        let mut first = [0u8; 8];
        first.copy_from_slice(&hash.as_bytes()[..8]);
        i64::from_le_bytes(first)
    }
}

impl std::fmt::Display for RegistryId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn truncate(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_32_lowercase_hex_digits_are_an_id() {
        assert!(RegistryId::new("0123456789abcdef0123456789abcdef").is_ok());
        for bad in
            ["", "0123456789ABCDEF0123456789abcdef", "0123456789abcdef", "g123456789abcdef0123456789abcdef"]
        {
            assert!(RegistryId::new(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lock_keys_differ_between_ids() {
        let a = RegistryId::new("0123456789abcdef0123456789abcdef").unwrap();
        let b = RegistryId::new("0123456789abcdef0123456789abcdee").unwrap();
        assert_ne!(a.lock_key(), b.lock_key());
        assert_eq!(a.lock_key(), a.clone().lock_key());
    }
}
