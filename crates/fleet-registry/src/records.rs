//! What the store trades in, below every use of it: an audit-log row, the credential a
//! registered process presents, and the names of the high-water scopes. The store's
//! interface and every use case above it take these from here, so none of them takes
//! a type from another.

use std::fmt;

use fleet_identity::{GenerationId, Namespace, Timestamp, WorkerIdentity};
use fleet_lease::{LeaseKey, LeaseKind};
use serde::{Deserialize, Serialize};

use crate::error::{StoreError, StoreErrorKind};

/// One audit-log row. It stores who and what happened, never scopes, grants, payloads
/// or secrets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditEntry {
    /// Position in the log (assigned by the store).
    pub id: i64,
    /// The lifecycle event: `acquire`, `renew`, `release`, `takeover`, `init_start`,
    /// `init_finish`.
    pub event: String,
    /// The outcome code: an outcome (`acquired`, …) or `denied`.
    pub outcome: String,
    /// The denial code, when denied.
    pub reason: Option<String>,
    /// The lease.
    pub lease_key: String,
    /// Its kind.
    pub kind: LeaseKind,
    /// Who asked (owner or worker identity).
    pub identity: Option<String>,
    /// The connector binding, for connector leases.
    pub binding: Option<String>,
    /// The connector, for connector leases.
    pub connector: Option<String>,
    /// The epoch the lease is at after the event (or was at when denied).
    pub fencing_epoch: Option<u64>,
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// When, on the store's clock.
    pub at: Timestamp,
}

impl AuditEntry {
    /// Checks the entry by the rules its writers follow: a key that names a lease of the
    /// entry's kind.
    pub fn check(&self) -> Result<(), AuditEntryError> {
        let key = LeaseKey::new(self.lease_key.as_str())?;
        let (kind, _) = key.kind()?;
        if kind != self.kind {
            return Err(AuditEntryError::KindMismatch { id: self.id, kind: self.kind, key, key_kind: kind });
        }
        Ok(())
    }
}

/// Why an audit entry breaks a rule its writers follow ([`AuditEntry::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuditEntryError {
    /// Its key is not a valid key.
    #[error(transparent)]
    Malformed(#[from] fleet_identity::IdentityError),
    /// Its key names no lease.
    #[error(transparent)]
    Key(#[from] fleet_lease::LeaseKeyError),
    /// Its kind is not the one its key names.
    #[error("entry {id} is of kind {}, but its key {key} names a {} lease", kind.as_str(), key_kind.as_str())]
    KindMismatch {
        /// The entry's position in the log.
        id: i64,
        /// The entry's kind.
        kind: LeaseKind,
        /// Its key.
        key: LeaseKey,
        /// The kind the key names.
        key_kind: LeaseKind,
    },
}

/// What a registered process presents to heartbeat or release.
#[derive(Debug, Clone)]
pub struct WorkerCredential {
    /// The row.
    pub worker_identity: WorkerIdentity,
    /// The process boot that registered it.
    pub generation_id: GenerationId,
    /// The process's secret.
    pub token: WorkerToken,
}

/// A secret only the registered process holds. The registry keeps only its fingerprint,
/// so a heartbeat or release can come only from the process that registered.
#[derive(Clone, PartialEq, Eq)]
pub struct WorkerToken {
    // Only the fingerprint is kept, computed once: heartbeats present it on every beat.
    fingerprint: String,
}

impl WorkerToken {
    /// A fresh random token.
    pub fn generate() -> Result<Self, StoreError> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| StoreError::new(StoreErrorKind::Unavailable, format!("no randomness: {e}")))?;
        Ok(Self::from_bytes(bytes))
    }

    /// A token from known bytes (tests and benchmarks).
    pub fn from_bytes(secret: [u8; 32]) -> Self {
        let hex = blake3::hash(&secret).to_hex();
        Self { fingerprint: format!("b3:{}", &hex.as_str()[..32]) }
    }

    /// The fingerprint stored in `token_fingerprint`.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

impl fmt::Debug for WorkerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WorkerToken(..)")
    }
}

/// A unique-key conflict on inserting the worker row `id` means a row already has this
/// identity; any other error is itself. The backends report the conflict as their
/// database does, and the registry words it.
pub(crate) fn worker_conflict(e: StoreError, id: &WorkerIdentity) -> StoreError {
    match e.kind() {
        StoreErrorKind::Conflict => StoreError::conflict(format!("worker {id} is already registered")),
        _ => e,
    }
}

/// The high-water scope of a lease.
pub(crate) fn lease_scope(key: &LeaseKey) -> String {
    format!("lease {key}")
}

/// The high-water scope of a worker slot.
pub(crate) fn slot_scope(instance: &str, namespace: Namespace) -> String {
    format!("slot {instance} {namespace}")
}
