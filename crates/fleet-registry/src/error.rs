//! The error every store operation returns, with a kind that says what went wrong
//! without naming the database that spoke.

use std::error::Error;

/// An error and each cause under it that it does not already say, one after another:
/// what an error at the edge prints (a driver's error alone often says only "db error",
/// and the why is in its sources).
pub fn with_causes(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

/// What kind of failure a store reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be opened or reached (missing file, permissions, network).
    Unavailable,
    /// Another writer held the store longer than the busy timeout.
    Busy,
    /// A write lost a race or would duplicate an existing row.
    Conflict,
    /// The row the operation names does not exist (or is no longer active).
    NotFound,
    /// The caller's input was refused.
    Invalid,
    /// The store holds data that is not a valid registry.
    Corrupt,
    /// The store was written by a newer Fleetward than this one, and its schema does not
    /// let this build use it.
    NewerSchema,
    /// The store's schema is older than this build's: only `fleetctl registry upgrade`
    /// changes a registry's schema, so nothing else opens it.
    OlderSchema,
    /// An operator fenced the caller's host (or its boot) as gone for good: the
    /// registry refuses every write from it, for good.
    Fenced,
    /// The store cannot promise that this write survives the failover its server is set
    /// up for (an asynchronous standby streams, or the server's history changed since the
    /// registry's last grant): an operator decides (see [`crate::ReplicationPolicy`]).
    NotDurable,
    /// The connection was lost after the commit was sent: the write may have committed
    /// or not, and nothing here can tell which.
    OutcomeUnknown,
    /// There is no registry where the location says (a SQLite file never created, or
    /// removed since it was opened): not a store that is down for a while.
    Missing,
}

/// A store failure: a kind, a one-line lowercase message, and the underlying cause.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn Error + Send + Sync>>,
}

impl StoreError {
    /// A failure of `kind` described by `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), source: None }
    }

    /// A failure of `kind` caused by `source`.
    pub fn with_source(
        kind: StoreErrorKind,
        message: impl Into<String>,
        source: impl Error + Send + Sync + 'static,
    ) -> Self {
        Self { kind, message: message.into(), source: Some(Box::new(source)) }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Refused input.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Invalid, message)
    }

    /// A missing or inactive row.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::NotFound, message)
    }

    /// A lost race or a duplicate.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Conflict, message)
    }

    /// Data that is not a valid registry.
    pub fn corrupt(message: impl Into<String>) -> Self {
        Self::new(StoreErrorKind::Corrupt, message)
    }
}
