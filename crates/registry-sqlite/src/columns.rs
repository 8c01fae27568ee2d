//! The mapping between [`WorkerRow`] / [`InstanceRecord`] / [`LeaseRecord`] and SQL
//! columns, through [`fleet_registry::columns`]. A value in the file that does not
//! validate is reported as corruption, naming row and column.

use std::sync::OnceLock;

use fleet_lease::LeaseRecord;
use fleet_registry::columns::{self, RowColumns};
use fleet_registry::{InstanceRecord, StoreError, WorkerRow};
use rusqlite::Row;
use rusqlite::types::{Value, ValueRef};

/// Every column of `worker_registrations`, in the order of [`values`] and [`read_worker`].
pub(crate) use fleet_registry::WORKER_COLUMNS as COLUMNS;

/// The columns as a `SELECT` list.
pub(crate) static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| columns::list(&COLUMNS));

pub(crate) static INSTANCE_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::list(&columns::INSTANCE_COLUMNS));

/// A row's next `change_seq`: above every row's, by a random step (schema version 4,
/// `migrations.rs`). The heartbeat sets it itself, so the trigger that sets it for any
/// other write does not write the row a second time on the hot path.
pub(crate) const NEXT_CHANGE: &str =
    "(SELECT coalesce(max(change_seq), 0) + 1 + (random() & 65535) FROM worker_registrations)";

/// Parameters are numbered; `IS` compares NULL with NULL.
pub(crate) const SQLITE: columns::Dialect = columns::Dialect { param: |n, _| format!("?{n}"), same: "IS" };

pub(crate) fn insert_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::insert_sql(SQLITE, "worker_registrations", &COLUMNS, &columns::WORKER_INTEGER_COLUMNS)
    })
}

pub(crate) fn replace_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::replace_sql(SQLITE, "worker_registrations", &COLUMNS, &columns::WORKER_INTEGER_COLUMNS)
    })
}

pub(crate) fn heartbeat_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "UPDATE worker_registrations SET last_heartbeat_at = ?1, ownership_state = ?5, \
             change_seq = {NEXT_CHANGE} WHERE worker_identity = ?2 AND generation_id = ?3 \
             AND token_fingerprint = ?4 AND status = 'active' AND {}",
            columns::unfenced_sql("worker_registrations.host_id", "worker_registrations.boot_id")
        )
    })
}

/// `DELETE … WHERE every column IS its expected value`: a compare-and-delete.
pub(crate) fn delete_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::delete_sql(SQLITE, "worker_registrations", &COLUMNS, &columns::WORKER_INTEGER_COLUMNS)
    })
}

/// A worker row's values, in [`COLUMNS`] order (see [`columns::worker_cells`]).
pub(crate) fn values(row: &WorkerRow) -> Vec<Value> {
    sqlite_values(columns::worker_cells(row))
}

/// Cells as SQLite values.
pub(crate) fn sqlite_values(cells: impl IntoIterator<Item = columns::Cell>) -> Vec<Value> {
    cells
        .into_iter()
        .map(|cell| match cell {
            columns::Cell::Text(s) => Value::Text(s),
            columns::Cell::Integer(n) => Value::Integer(n),
            columns::Cell::Null => Value::Null,
        })
        .collect()
}

struct Columns<'r, 's>(&'r Row<'s>);

impl RowColumns for Columns<'_, '_> {
    /// The text in column `idx`, borrowed from SQLite's buffer.
    fn text(&self, idx: usize) -> Result<Option<&str>, String> {
        text_of(self.0.get_ref(idx).map_err(|e| e.to_string())?)
    }

    fn integer(&self, idx: usize) -> Result<Option<i64>, String> {
        integer_of(self.0.get_ref(idx).map_err(|e| e.to_string())?)
    }
}

/// A column's value as text; `None` for NULL.
pub(crate) fn text_of(value: ValueRef<'_>) -> Result<Option<&str>, String> {
    value.as_str_or_null().map_err(|e| e.to_string())
}

/// A column's value as an integer; `None` for NULL. A REAL such as 900.0 reads back as
/// its integer value.
pub(crate) fn integer_of(value: ValueRef<'_>) -> Result<Option<i64>, String> {
    match value {
        ValueRef::Null => Ok(None),
        ValueRef::Integer(n) => Ok(Some(n)),
        ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
            #[allow(clippy::cast_possible_truncation)]
            let n = f as i64;
            Ok(Some(n))
        }
        ValueRef::Real(f) => Err(format!("{:?} is not an integer", Value::Real(f))),
        ValueRef::Text(t) => match std::str::from_utf8(t) {
            Ok(text) => Err(format!("{:?} is not an integer", Value::Text(text.to_owned()))),
            Err(e) => Err(e.to_string()),
        },
        ValueRef::Blob(b) => Err(format!("{:?} is not an integer", Value::Blob(b.to_vec()))),
    }
}

pub(crate) fn read_worker(row: &Row<'_>) -> rusqlite::Result<Result<WorkerRow, StoreError>> {
    Ok(columns::read_worker(&Columns(row)))
}

pub(crate) fn read_instance(row: &Row<'_>) -> rusqlite::Result<Result<InstanceRecord, StoreError>> {
    Ok(columns::read_instance(&Columns(row)))
}

pub(crate) fn read_host_fence(
    row: &Row<'_>,
) -> rusqlite::Result<Result<fleet_registry::HostFence, StoreError>> {
    Ok(columns::read_host_fence(&Columns(row)))
}

pub(crate) fn read_host_boot(
    row: &Row<'_>,
) -> rusqlite::Result<Result<fleet_registry::HostBoot, StoreError>> {
    Ok(columns::read_host_boot(&Columns(row)))
}

pub(crate) fn read_lease(row: &Row<'_>) -> rusqlite::Result<Result<LeaseRecord, StoreError>> {
    Ok(columns::read_lease(&Columns(row)))
}
