//! Rows to SQL parameters and back. Worker rows, ledger entries and leases go through
//! `fleet_registry::columns`, as the SQLite backend's do: one column list, one mapping
//! each way, and the compare-and-swap statements built from the lists.

use std::sync::OnceLock;

use fleet_lease::{LEASE_COLUMNS, LeaseRecord};
use fleet_registry::columns::{self, RowColumns};
use fleet_registry::{AuditEntry, InstanceRecord, StoreError, WorkerRow};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use fleet_registry::WORKER_COLUMNS;

use fleet_registry::columns::{Cell, WORKER_INTEGER_COLUMNS as WORKER_INTEGERS};

use fleet_registry::columns::LEASE_INTEGER_COLUMNS as LEASE_INTEGERS;

/// Parameters are numbered and typed; `IS NOT DISTINCT FROM` compares NULL with NULL.
const POSTGRES: columns::Dialect = columns::Dialect {
    param: |n, integer| format!("${n}::{}", if integer { "BIGINT" } else { "TEXT" }),
    same: "IS NOT DISTINCT FROM",
};

pub(crate) static LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::list(&WORKER_COLUMNS));
pub(crate) static LEASE_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::list(&LEASE_COLUMNS));
pub(crate) static INSTANCE_LIST: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| columns::list(&columns::INSTANCE_COLUMNS));

pub(crate) fn insert_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::insert_sql(POSTGRES, "worker_registrations", &WORKER_COLUMNS, &WORKER_INTEGERS)
    })
}

/// `INSERT … SELECT * FROM unnest($1::TEXT[], $2::BIGINT[], …)`: every row of an import
/// in one statement of one parameter per column, which PostgreSQL plans once.
pub(crate) fn insert_unnest_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let arrays: Vec<String> = WORKER_COLUMNS
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!("${}::{}[]", i + 1, if WORKER_INTEGERS.contains(c) { "BIGINT" } else { "TEXT" })
            })
            .collect();
        format!("INSERT INTO worker_registrations ({}) SELECT * FROM unnest({})", *LIST, arrays.join(", "))
    })
}

/// The worker rows as one array per column, for [`insert_unnest_sql`].
pub(crate) fn worker_columns(rows: &[WorkerRow]) -> Vec<Box<dyn ToSql + Sync>> {
    let cells: Vec<_> = rows.iter().map(columns::worker_cells).collect();
    WORKER_COLUMNS
        .iter()
        .enumerate()
        .map(|(i, c)| -> Box<dyn ToSql + Sync> {
            let column = cells.iter().map(|row| &row[i]);
            if WORKER_INTEGERS.contains(c) {
                Box::new(
                    column
                        .map(|cell| if let Cell::Integer(n) = cell { Some(*n) } else { None })
                        .collect::<Vec<_>>(),
                )
            } else {
                Box::new(
                    column
                        .map(|cell| if let Cell::Text(s) = cell { Some(s.clone()) } else { None })
                        .collect::<Vec<_>>(),
                )
            }
        })
        .collect()
}

pub(crate) fn replace_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::replace_sql(POSTGRES, "worker_registrations", &WORKER_COLUMNS, &WORKER_INTEGERS)
    })
}

/// `DELETE … WHERE every column IS NOT DISTINCT FROM its expected value`.
pub(crate) fn delete_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        columns::delete_sql(POSTGRES, "worker_registrations", &WORKER_COLUMNS, &WORKER_INTEGERS)
    })
}

pub(crate) fn lease_insert_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let insert = columns::insert_sql(POSTGRES, "leases", &LEASE_COLUMNS, &LEASE_INTEGERS);
        format!("{insert} ON CONFLICT (lease_key) DO NOTHING")
    })
}

pub(crate) fn put_host_fence_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| columns::put_host_fence_sql(POSTGRES))
}

/// A host fence's parameters (every column text).
pub(crate) fn host_fence_values(fence: &fleet_registry::HostFence) -> Values {
    Values::of_cells(columns::host_fence_cells(fence), &columns::HOST_FENCE_COLUMNS, &[])
}

pub(crate) fn read_host_fence(row: &Row) -> Result<fleet_registry::HostFence, StoreError> {
    columns::read_host_fence(&Columns(row))
}

pub(crate) fn note_host_boot_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| columns::note_host_boot_sql(POSTGRES))
}

/// A host boot's parameters.
pub(crate) fn host_boot_values(boot: &fleet_registry::HostBoot) -> Values {
    Values::of_cells(columns::host_boot_cells(boot), &columns::HOST_BOOT_COLUMNS, &["clock_offset_ms"])
}

pub(crate) fn read_host_boot(row: &Row) -> Result<fleet_registry::HostBoot, StoreError> {
    columns::read_host_boot(&Columns(row))
}

pub(crate) fn lease_replace_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| columns::replace_sql(POSTGRES, "leases", &LEASE_COLUMNS, &LEASE_INTEGERS))
}

/// Owned parameter values of one row, in column order.
pub(crate) struct Values(Vec<Box<dyn ToSql + Sync>>);

impl Values {
    /// `cells` as parameters of the types of `columns` (`integers` hold BIGINT, the rest
    /// TEXT).
    fn of_cells(cells: impl IntoIterator<Item = Cell>, columns: &[&str], integers: &[&str]) -> Self {
        let values = cells
            .into_iter()
            .zip(columns)
            .map(|(cell, c)| -> Box<dyn ToSql + Sync> {
                match cell {
                    Cell::Integer(n) => Box::new(Some(n)),
                    Cell::Text(s) => Box::new(Some(s)),
                    Cell::Null if integers.contains(c) => Box::new(None::<i64>),
                    Cell::Null => Box::new(None::<String>),
                }
            })
            .collect();
        Self(values)
    }

    pub(crate) fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.0.iter().map(|b| b.as_ref()).collect()
    }
}

/// A worker row's parameters.
pub(crate) struct WorkerValues;

impl WorkerValues {
    /// See [`columns::worker_cells`].
    pub(crate) fn of(row: &WorkerRow) -> Values {
        Values::of_cells(columns::worker_cells(row), &WORKER_COLUMNS, &WORKER_INTEGERS)
    }
}

/// A lease's parameters.
pub(crate) struct LeaseValues;

impl LeaseValues {
    /// See [`columns::lease_cells`].
    pub(crate) fn of(lease: &LeaseRecord) -> Values {
        Values::of_cells(columns::lease_cells(lease), &LEASE_COLUMNS, &LEASE_INTEGERS)
    }
}

/// One row's columns as PostgreSQL returns them (text, and `BIGINT` for integers).
struct Columns<'r>(&'r Row);

impl RowColumns for Columns<'_> {
    fn text(&self, idx: usize) -> Result<Option<&str>, String> {
        self.0.try_get(idx).map_err(|e| e.to_string())
    }

    fn integer(&self, idx: usize) -> Result<Option<i64>, String> {
        self.0.try_get(idx).map_err(|e| e.to_string())
    }
}

pub(crate) fn read_worker(row: &Row) -> Result<WorkerRow, StoreError> {
    columns::read_worker(&Columns(row))
}

pub(crate) fn read_instance(row: &Row) -> Result<InstanceRecord, StoreError> {
    columns::read_instance(&Columns(row))
}

pub(crate) fn read_lease(row: &Row) -> Result<LeaseRecord, StoreError> {
    columns::read_lease(&Columns(row))
}

pub(crate) fn read_audit(row: &Row) -> Result<AuditEntry, StoreError> {
    let corrupt = |e: tokio_postgres::Error| StoreError::corrupt(format!("audit log: {e}"));
    let epoch: Option<i64> = row.try_get(9).map_err(corrupt)?;
    let kind: String = row.try_get(5).map_err(corrupt)?;
    let at: String = row.try_get(11).map_err(corrupt)?;
    Ok(AuditEntry {
        id: row.try_get(0).map_err(corrupt)?,
        event: row.try_get(1).map_err(corrupt)?,
        outcome: row.try_get(2).map_err(corrupt)?,
        reason: row.try_get(3).map_err(corrupt)?,
        lease_key: row.try_get(4).map_err(corrupt)?,
        kind: kind.parse().map_err(|e: fleet_identity::UnknownCode| StoreError::corrupt(e.to_string()))?,
        identity: row.try_get(6).map_err(corrupt)?,
        binding: row.try_get(7).map_err(corrupt)?,
        connector: row.try_get(8).map_err(corrupt)?,
        fencing_epoch: epoch.and_then(|e| u64::try_from(e).ok()),
        correlation_id: row.try_get(10).map_err(corrupt)?,
        at: fleet_identity::Timestamp::parse(&at).map_err(|e| StoreError::corrupt(e.to_string()))?,
    })
}
