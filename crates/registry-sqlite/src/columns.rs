//! The mapping between [`WorkerRow`] / [`InstanceRecord`] and SQL columns. A value in
//! the file that does not validate is reported as corruption, naming row and column.

use std::sync::OnceLock;

use fleet_registry::columns::{self, RowColumns};
use fleet_registry::{InstanceRecord, StoreError, WorkerRow};
use rusqlite::Row;
use rusqlite::types::Value;

/// Every column of `worker_registrations`, in the order of [`values`] and [`read_worker`].
pub(crate) use fleet_registry::WORKER_COLUMNS as COLUMNS;

/// The columns as a `SELECT` list.
pub(crate) static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| COLUMNS.join(", "));

pub(crate) const INSTANCE_LIST: &str = "client_instance_id, client_type, fleet_run_id, minted_at, host_id";

/// A row's next `change_seq`: above every row's, by a random step (schema version 4,
/// `migrations.rs`). The heartbeat sets it itself, so the trigger that sets it for any
/// other write does not write the row a second time on the hot path.
pub(crate) const NEXT_CHANGE: &str =
    "(SELECT coalesce(max(change_seq), 0) + 1 + (random() & 65535) FROM worker_registrations)";

pub(crate) fn insert_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let marks: Vec<String> = (1..=COLUMNS.len()).map(|i| format!("?{i}")).collect();
        format!("INSERT INTO worker_registrations ({}) VALUES ({})", *LIST, marks.join(", "))
    })
}

/// `UPDATE … SET every column WHERE every column IS its expected value` — a
/// compare-and-swap on the whole row. `IS` compares NULLs as equal.
pub(crate) fn replace_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let n = COLUMNS.len();
        let set: Vec<String> = COLUMNS.iter().enumerate().map(|(i, c)| format!("{c} = ?{}", i + 1)).collect();
        let guard: Vec<String> =
            COLUMNS.iter().enumerate().map(|(i, c)| format!("{c} IS ?{}", n + i + 1)).collect();
        format!("UPDATE worker_registrations SET {} WHERE {}", set.join(", "), guard.join(" AND "))
    })
}

/// The heartbeat: one guarded `UPDATE` of the worker's own active row.
pub(crate) fn heartbeat_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "UPDATE worker_registrations SET last_heartbeat_at = ?1, ownership_state = ?5, \
             change_seq = {NEXT_CHANGE} WHERE worker_identity = ?2 AND generation_id = ?3 \
             AND token_fingerprint = ?4 AND status = 'active'"
        )
    })
}

/// `DELETE … WHERE every column IS its expected value`: a compare-and-delete.
pub(crate) fn delete_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let guard: Vec<String> =
            COLUMNS.iter().enumerate().map(|(i, c)| format!("{c} IS ?{}", i + 1)).collect();
        format!("DELETE FROM worker_registrations WHERE {}", guard.join(" AND "))
    })
}

fn text<T: AsRef<str>>(v: Option<&T>) -> Value {
    v.map_or(Value::Null, |s| Value::Text(s.as_ref().to_owned()))
}

fn int(v: Option<i64>) -> Value {
    v.map_or(Value::Null, Value::Integer)
}

/// The row's values in [`COLUMNS`] order.
pub(crate) fn values(row: &WorkerRow) -> Vec<Value> {
    vec![
        Value::Text(row.worker_identity.to_string()),
        text(row.client_type.as_ref()),
        text(row.client_instance_id.as_ref()),
        text(row.instance_provenance.as_ref()),
        text(row.fleet_run_id.as_ref()),
        Value::Text(row.namespace.as_str().to_owned()),
        text(row.profile.as_ref()),
        text(row.session_id.as_ref()),
        text(row.generation_id.as_ref()),
        text(row.host_id.as_ref()),
        text(row.boot_id.as_ref()),
        int(row.pid.map(i64::from)),
        int(row.process_start_time.map(i64::from)),
        text(row.repository.as_ref()),
        Value::Text(row.status.as_str().to_owned()),
        text(row.ownership_state.map(|o| o.as_str()).as_ref()),
        Value::Text(row.registered_at.to_string()),
        text(row.last_heartbeat_at.as_ref()),
        int(row.heartbeat_ttl_s.map(i64::from)),
        int(row.fencing_epoch.map(|e| i64::try_from(e).unwrap_or(i64::MAX))),
        text(row.token_fingerprint.as_ref()),
        text(row.code_revision.as_ref()),
        text(row.config_revision.as_ref()),
        text(row.profile_revision.as_ref()),
        text(row.schema_revision.as_ref()),
        text(row.retired_at.map(|t| t.to_string()).as_ref()),
        text(row.retired_by.as_ref()),
        text(row.retirement_reason.as_ref()),
        int(row.pid_namespace.map(i64::from)),
    ]
}

/// One row's columns as SQLite holds them.
struct Columns<'r, 's>(&'r Row<'s>);

impl RowColumns for Columns<'_, '_> {
    /// The text in column `idx`, borrowed from SQLite's buffer.
    fn text(&self, idx: usize) -> Result<Option<&str>, String> {
        let value = self.0.get_ref(idx).map_err(|e| e.to_string())?;
        value.as_str_or_null().map_err(|e| e.to_string())
    }

    fn integer(&self, idx: usize) -> Result<Option<i64>, String> {
        // A REAL such as 900.0 reads back as its integer value.
        let value: Option<Value> = self.0.get(idx).map_err(|e| e.to_string())?;
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Integer(n)) => Ok(Some(n)),
            Some(Value::Real(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                #[allow(clippy::cast_possible_truncation)]
                let n = f as i64;
                Ok(Some(n))
            }
            Some(other) => Err(format!("{other:?} is not an integer")),
        }
    }
}

pub(crate) fn read_worker(row: &Row<'_>) -> rusqlite::Result<Result<WorkerRow, StoreError>> {
    Ok(columns::read_worker(&Columns(row)))
}

pub(crate) fn read_instance(row: &Row<'_>) -> rusqlite::Result<Result<InstanceRecord, StoreError>> {
    Ok(columns::read_instance(&Columns(row)))
}
