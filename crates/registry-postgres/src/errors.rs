//! How the server's errors become the registry's: each SQLSTATE that means a conflict,
//! a busy store or refused input mapped to its kind, a server that stopped answering or
//! closed the connection said as such, and a COMMIT whose outcome cannot be known told
//! apart from one that was rolled back.

use fleet_registry::{StoreError, StoreErrorKind};
use tokio_postgres::error::SqlState;

use crate::bounded;

pub(crate) fn map_error(e: impl Into<bounded::Error>) -> StoreError {
    let e = match e.into() {
        bounded::Error::Pg(e) => e,
        bounded::Error::NoAnswer(deadline) => {
            return StoreError::new(
                StoreErrorKind::Unavailable,
                format!(
                    "registry error: the PostgreSQL server did not answer within {} s (stalled or stopped); \
                     the connection was dropped",
                    deadline.as_secs()
                ),
            );
        }
        bounded::Error::Abandoned => {
            return StoreError::new(
                StoreErrorKind::Unavailable,
                "registry error: this connection was dropped after the server missed a deadline",
            );
        }
        bounded::Error::Runtime(e) => {
            return StoreError::new(StoreErrorKind::Unavailable, format!("registry error: {e}"));
        }
    };
    let kind = match e.code() {
        Some(c) if *c == SqlState::UNIQUE_VIOLATION => StoreErrorKind::Conflict,
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED => {
            StoreErrorKind::Busy
        }
        Some(c) if *c == SqlState::CHECK_VIOLATION || *c == SqlState::RAISE_EXCEPTION => {
            StoreErrorKind::Invalid
        }
        // Another session held what we needed past lock_timeout, or a statement ran past
        // statement_timeout: the store is busy, and nothing was written.
        Some(c) if *c == SqlState::LOCK_NOT_AVAILABLE || *c == SqlState::QUERY_CANCELED => {
            StoreErrorKind::Busy
        }
        _ => StoreErrorKind::Unavailable,
    };
    let message = match e.as_db_error() {
        Some(db) => format!("registry error: {} ({})", db.message(), db.code().code()),
        // The server went away mid-conversation: terminated by an administrator,
        // restarted, or cut off. An open transaction is rolled back by the server.
        None if e.is_closed() => format!(
            "registry error: the PostgreSQL server closed the connection (terminated, restarted or cut off): {}",
            fleet_registry::with_causes(&e)
        ),
        None => format!("registry error: {}", fleet_registry::with_causes(&e)),
    };
    StoreError::with_source(kind, message, e)
}

/// A COMMIT the server answered with an error (severity ERROR: a deferred constraint, a
/// serialization failure) was rolled back. One it never answered (the connection closed
/// or stalled after COMMIT was sent), or answered by ending the session (FATAL: a
/// terminated backend, a shutdown; PostgreSQL then may have committed locally, as it
/// says of a cancelled wait for a synchronous standby) may have committed.
pub(crate) fn commit_error(e: bounded::Error) -> StoreError {
    let answered = e
        .as_db_error()
        .is_some_and(|db| db.parsed_severity() == Some(tokio_postgres::error::Severity::Error));
    let e = map_error(e);
    if answered {
        return e;
    }
    StoreError::new(
        StoreErrorKind::OutcomeUnknown,
        format!("the connection was lost after COMMIT was sent, so the write may have committed or not: {e}"),
    )
}
