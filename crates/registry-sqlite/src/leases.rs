//! The lease rows and the audit log in SQLite.

use fleet_identity::Timestamp;
use fleet_lease::{LEASE_COLUMNS, LeaseKey, LeaseKind, LeaseRecord};
use fleet_registry::{AuditEntry, StoreError};
use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params};

use crate::columns::{read_lease, sqlite_values};
use crate::map_error;

/// A lease's values, in [`LEASE_COLUMNS`] order (see [`fleet_registry::columns::lease_cells`]).
fn values(lease: &LeaseRecord) -> Vec<Value> {
    sqlite_values(fleet_registry::columns::lease_cells(lease))
}

/// The columns as a `SELECT` list.
static LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| fleet_registry::columns::list(&LEASE_COLUMNS));

/// The store's clock: the wall clock of the host the file lives on, as its kernel keeps
/// it ([`fleet_probe::host_now`]). Every process that opens the file runs on that
/// host, so they share it, and none whose own clock was set back or ahead (a preloaded
/// time library, which SQLite's `'now'` would follow) judges a lease's expiry by it.
pub(crate) fn store_now() -> Timestamp {
    fleet_probe::host_now()
}

pub(crate) fn lease(conn: &Connection, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| format!("SELECT {} FROM leases WHERE lease_key = ?1", *LIST));
    let mut stmt = conn.prepare_cached(sql).map_err(map_error)?;
    stmt.query_row([key.as_str()], read_lease).optional().map_err(map_error)?.transpose()
}

pub(crate) fn leases(conn: &Connection, kind: Option<LeaseKind>) -> Result<Vec<LeaseRecord>, StoreError> {
    let mut stmt = conn
        .prepare_cached(&format!(
            "SELECT {} FROM leases WHERE ?1 IS NULL OR kind = ?1 ORDER BY lease_key",
            *LIST
        ))
        .map_err(map_error)?;
    let rows = stmt.query_map([kind.map(LeaseKind::as_str)], read_lease).map_err(map_error)?;
    rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
}

/// `INSERT OR IGNORE` of a whole lease row.
fn insert_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        let marks: Vec<String> = (1..=COLUMN_COUNT).map(|i| format!("?{i}")).collect();
        format!("INSERT OR IGNORE INTO leases ({}) VALUES ({})", *LIST, marks.join(", "))
    })
}

/// `UPDATE … SET every column WHERE every column IS its expected value`: the
/// compare-and-swap on the whole row, built as the worker rows' is.
fn swap_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        fleet_registry::columns::replace_sql(crate::columns::SQLITE, "leases", &LEASE_COLUMNS, &[])
    })
}

/// How many columns a lease row has.
const COLUMN_COUNT: usize = LEASE_COLUMNS.len();

pub(crate) fn put_lease(
    conn: &Connection,
    expected: Option<&LeaseRecord>,
    new: &LeaseRecord,
) -> Result<bool, StoreError> {
    let changed = match expected {
        None => {
            let mut stmt = conn.prepare_cached(insert_sql()).map_err(map_error)?;
            stmt.execute(rusqlite::params_from_iter(values(new))).map_err(map_error)?
        }
        Some(old) => {
            let mut stmt = conn.prepare_cached(swap_sql()).map_err(map_error)?;
            stmt.execute(rusqlite::params_from_iter(values(new).into_iter().chain(values(old))))
                .map_err(map_error)?
        }
    };
    Ok(changed == 1)
}

pub(crate) fn append_audit(conn: &Connection, e: &AuditEntry) -> Result<(), StoreError> {
    let mut stmt = conn
        .prepare_cached(
            "INSERT INTO lease_audit_log (event, outcome, reason, lease_key, kind, identity, binding, connector, \
             fencing_epoch, correlation_id, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        )
        .map_err(map_error)?;
    stmt.execute(params![
        e.event,
        e.outcome,
        e.reason,
        e.lease_key,
        e.kind.as_str(),
        e.identity,
        e.binding,
        e.connector,
        e.fencing_epoch.map(|v| i64::try_from(v).unwrap_or(i64::MAX)),
        e.correlation_id,
        e.at.to_string(),
    ])
    .map_err(map_error)?;
    Ok(())
}

/// The audit log (of one lease, when given) from after position `after`, in log order;
/// the position is the primary key, so a reader that keeps its place reads only what is new.
pub(crate) fn audit(
    conn: &Connection,
    key: Option<&LeaseKey>,
    after: i64,
) -> Result<Vec<AuditEntry>, StoreError> {
    let query = fleet_registry::AuditQuery {
        key,
        since: None,
        until: None,
        after,
        newest_first: false,
        limit: usize::MAX,
    };
    audit_page(conn, &query)
}

/// One page of the audit entries `query` selects, by the primary key (times are stored
/// in one fixed-width form, so they compare as text).
pub(crate) fn audit_page(
    conn: &Connection,
    query: &fleet_registry::AuditQuery<'_>,
) -> Result<Vec<AuditEntry>, StoreError> {
    const COLUMNS: &str = "SELECT id, event, outcome, reason, lease_key, kind, identity, binding, connector, \
        fencing_epoch, correlation_id, at FROM lease_audit_log \
        WHERE (?1 IS NULL OR lease_key = ?1) AND (?3 IS NULL OR at >= ?3) AND (?4 IS NULL OR at < ?4)";
    let sql = if query.newest_first {
        format!("{COLUMNS} AND id < ?2 ORDER BY id DESC LIMIT ?5")
    } else {
        format!("{COLUMNS} AND id > ?2 ORDER BY id LIMIT ?5")
    };
    let mut stmt = conn.prepare_cached(&sql).map_err(map_error)?;
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
    let params = rusqlite::params![
        query.key.map(LeaseKey::as_str),
        query.after,
        query.since.map(|t| t.to_string()),
        query.until.map(|t| t.to_string()),
        limit
    ];
    let rows = stmt
        .query_map(params, |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, Option<String>>(3)?,
                r.get::<_, String>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, Option<String>>(6)?,
                r.get::<_, Option<String>>(7)?,
                r.get::<_, Option<String>>(8)?,
                r.get::<_, Option<i64>>(9)?,
                r.get::<_, Option<String>>(10)?,
                r.get::<_, String>(11)?,
            ))
        })
        .map_err(map_error)?;
    rows.map(|r| {
        let (
            id,
            event,
            outcome,
            reason,
            lease_key,
            kind,
            identity,
            binding,
            connector,
            epoch,
            correlation_id,
            at,
        ) = r.map_err(map_error)?;
        Ok(AuditEntry {
            id,
            event,
            outcome,
            reason,
            kind: kind
                .parse()
                .map_err(|e: fleet_identity::UnknownCode| StoreError::corrupt(e.to_string()))?,
            lease_key,
            identity,
            binding,
            connector,
            fencing_epoch: epoch.and_then(|e| u64::try_from(e).ok()),
            correlation_id,
            at: Timestamp::parse(&at).map_err(|e| StoreError::corrupt(e.to_string()))?,
        })
    })
    .collect()
}

/// The trigger that keeps the log append-only against deletes, as the schema creates it.
const NO_DELETE: &str =
    "CREATE TRIGGER lease_audit_log_is_append_only_delete BEFORE DELETE ON lease_audit_log
        BEGIN SELECT RAISE(ABORT, 'lease_audit_log is append-only'); END;";

/// Retention inside the caller's write transaction: the delete trigger is dropped, the
/// exported entries deleted, and the trigger created again before the commit, so no
/// other writer ever sees the log without it.
pub(crate) fn prune_audit(conn: &Connection, through: i64, before: Timestamp) -> Result<usize, StoreError> {
    conn.execute_batch("DROP TRIGGER lease_audit_log_is_append_only_delete").map_err(map_error)?;
    let removed = conn
        .execute(
            "DELETE FROM lease_audit_log WHERE id <= ?1 AND at < ?2",
            rusqlite::params![through, before.to_string()],
        )
        .map_err(map_error)?;
    conn.execute_batch(NO_DELETE).map_err(map_error)?;
    Ok(removed)
}
