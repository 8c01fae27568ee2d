//! The trust verdict on an instance ID: only an ID the launcher recorded is trusted.

use crate::instance::{ClientInstanceId, LegacyPlaceholder};

/// The launcher's ledger of minted instance IDs, as far as trust needs it.
pub trait Ledger {
    /// Whether the launcher recorded `id` when it minted it.
    fn holds(&self, id: &ClientInstanceId) -> bool;
}

impl<S: std::hash::BuildHasher> Ledger for std::collections::HashSet<ClientInstanceId, S> {
    fn holds(&self, id: &ClientInstanceId) -> bool {
        self.contains(id)
    }
}

/// A set of borrowed IDs, as a caller indexes a ledger it already holds.
impl<S: std::hash::BuildHasher> Ledger for std::collections::HashSet<&ClientInstanceId, S> {
    fn holds(&self, id: &ClientInstanceId) -> bool {
        self.contains(id)
    }
}

impl Ledger for std::collections::BTreeSet<ClientInstanceId> {
    fn holds(&self, id: &ClientInstanceId) -> bool {
        self.contains(id)
    }
}

/// What an instance-ID string claims to be, before the ledger is consulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InstanceClaim {
    /// No ID at all.
    Missing,
    /// A pre-launcher placeholder.
    Legacy(LegacyPlaceholder),
    /// Something that is neither an instance ID nor a placeholder.
    Malformed(String),
    /// A well-formed launcher ID.
    WellFormed(ClientInstanceId),
}

impl InstanceClaim {
    /// Reads a raw value; an empty or all-blank string counts as missing.
    pub fn read(raw: Option<&str>) -> Self {
        let Some(raw) = raw.map(str::trim).filter(|s| !s.is_empty()) else {
            return Self::Missing;
        };
        if let Some(legacy) = LegacyPlaceholder::parse(raw) {
            return Self::Legacy(legacy);
        }
        match ClientInstanceId::parse(raw) {
            Ok(id) => Self::WellFormed(id),
            Err(_) => Self::Malformed(raw.to_owned()),
        }
    }

    /// Judges the claim against the launcher's ledger.
    pub fn trust(&self, ledger: &dyn Ledger) -> TrustVerdict {
        match self {
            Self::Missing => TrustVerdict::Missing,
            Self::Legacy(_) => TrustVerdict::LegacyPlaceholder,
            Self::Malformed(_) => TrustVerdict::Malformed,
            Self::WellFormed(id) if ledger.holds(id) => TrustVerdict::Trusted,
            Self::WellFormed(_) => TrustVerdict::Unminted,
        }
    }
}

crate::outward_codes! {
    /// Whether an instance ID can be trusted, and if not, why not.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum TrustVerdict ("trust verdict") {
        /// Well-formed and recorded in the launcher's ledger.
        Trusted = "trusted",
        /// No instance ID was given.
        Missing = "missing",
        /// A `legacy-pid-*` / `pid-*` / `proc-*` placeholder.
        LegacyPlaceholder = "legacy_placeholder",
        /// Not an instance ID.
        Malformed = "malformed",
        /// Well-formed, but the launcher never minted it.
        Unminted = "unminted",
    }
}

impl TrustVerdict {
    /// Whether the verdict is [`TrustVerdict::Trusted`].
    pub fn is_trusted(self) -> bool {
        self == TrustVerdict::Trusted
    }
}

/// Judges a raw instance-ID string against the launcher's ledger.
pub fn assess_instance_id(raw: Option<&str>, ledger: &dyn Ledger) -> TrustVerdict {
    InstanceClaim::read(raw).trust(ledger)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;

    use super::*;

    fn ledger_with(ids: &[&str]) -> BTreeSet<ClientInstanceId> {
        ids.iter().map(|s| ClientInstanceId::parse(s).unwrap()).collect()
    }

    #[test]
    fn each_verdict_is_reached() {
        let minted = "inst-codex-20260730T120000Z-abc123def456";
        let copied = "inst-codex-20260730T120000Z-000000000000";
        let ledger = ledger_with(&[minted]);
        let cases = [
            (Some(minted), TrustVerdict::Trusted),
            (Some(copied), TrustVerdict::Unminted),
            (None, TrustVerdict::Missing),
            (Some("   "), TrustVerdict::Missing),
            (Some("legacy-pid-4242"), TrustVerdict::LegacyPlaceholder),
            (Some("pid-99"), TrustVerdict::LegacyPlaceholder),
            (Some("my-own-instance"), TrustVerdict::Malformed),
        ];
        for (raw, expected) in cases {
            assert_eq!(assess_instance_id(raw, &ledger), expected, "{raw:?}");
        }
    }

    proptest! {
        #[test]
        fn no_random_string_is_trusted(raw in ".{0,80}", shaped in "inst-[a-z]{1,8}-20[0-9]{6}T[0-9]{6}Z-[0-9a-f]{12}") {
            let ledger = ledger_with(&["inst-codex-20260730T120000Z-abc123def456"]);
            prop_assume!(raw != "inst-codex-20260730T120000Z-abc123def456");
            prop_assume!(shaped != "inst-codex-20260730T120000Z-abc123def456");
            prop_assert!(!assess_instance_id(Some(&raw), &ledger).is_trusted());
            prop_assert!(!assess_instance_id(Some(&shaped), &ledger).is_trusted());
        }
    }
}
