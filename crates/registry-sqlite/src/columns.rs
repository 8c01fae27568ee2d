//! The mapping between [`WorkerRow`] / [`InstanceRecord`] and SQL columns. A value in
//! the file that does not validate is reported as corruption, naming row and column.

use std::str::FromStr;
use std::sync::OnceLock;

use fleet_identity::Timestamp;
use fleet_registry::{InstanceRecord, StoreError, WorkerRow};
use rusqlite::Row;
use rusqlite::types::Value;

/// Every column of `worker_registrations`, in the order of [`values`] and [`read_worker`].
pub(crate) use fleet_registry::WORKER_COLUMNS as COLUMNS;

/// The columns as a `SELECT` list.
pub(crate) static LIST: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| COLUMNS.join(", "));

pub(crate) const INSTANCE_LIST: &str = "client_instance_id, client_type, fleet_run_id, minted_at, host_id";

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

/// Reads columns of one row, turning invalid values into a corruption error.
struct Reader<'r, 's> {
    row: &'r Row<'s>,
    /// The column that names the row in an error (its first).
    columns: &'static [&'static str],
}

impl Reader<'_, '_> {
    fn corrupt(&self, column: &str, detail: impl std::fmt::Display) -> StoreError {
        // The key is read only when there is an error to report.
        let key = self.row.get_ref(0).ok().and_then(|v| v.as_str().ok()).unwrap_or("?").to_owned();
        StoreError::corrupt(format!("registry row {key} has an invalid {column}: {detail}"))
    }

    /// The text in column `idx`, borrowed from SQLite's buffer.
    fn raw_str(&self, idx: usize) -> Result<Option<&str>, StoreError> {
        let value = self.row.get_ref(idx).map_err(|e| self.corrupt(self.columns[idx], e))?;
        value.as_str_or_null().map_err(|e| self.corrupt(self.columns[idx], e))
    }

    fn raw_text(&self, idx: usize) -> Result<Option<String>, StoreError> {
        Ok(self.raw_str(idx)?.map(str::to_owned))
    }

    fn parsed<T>(&self, idx: usize) -> Result<Option<T>, StoreError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.raw_str(idx)?.map(|s| s.parse::<T>().map_err(|e| self.corrupt(self.columns[idx], e))).transpose()
    }

    fn required<T>(&self, idx: usize) -> Result<T, StoreError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        self.parsed(idx)?.ok_or_else(|| self.corrupt(self.columns[idx], "missing"))
    }

    fn integer<T: TryFrom<i64>>(&self, idx: usize) -> Result<Option<T>, StoreError> {
        // A REAL such as 900.0 reads back as its integer value.
        let column = self.columns[idx];
        let value: Option<Value> = self.row.get(idx).map_err(|e| self.corrupt(column, e))?;
        let n = match value {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Integer(n)) => n,
            Some(Value::Real(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
                #[allow(clippy::cast_possible_truncation)]
                let n = f as i64;
                n
            }
            Some(other) => return Err(self.corrupt(column, format!("{other:?} is not an integer"))),
        };
        T::try_from(n).map(Some).map_err(|_| self.corrupt(column, format!("{n} is out of range")))
    }
}

pub(crate) fn read_worker(row: &Row<'_>) -> rusqlite::Result<Result<WorkerRow, StoreError>> {
    let r = Reader { row, columns: &COLUMNS };
    Ok((|| {
        Ok(WorkerRow {
            worker_identity: r.required(0)?,
            client_type: r.parsed(1)?,
            client_instance_id: r.raw_text(2)?,
            instance_provenance: r.raw_text(3)?,
            fleet_run_id: r.parsed(4)?,
            namespace: r.required(5)?,
            profile: r.parsed(6)?,
            session_id: r.parsed(7)?,
            generation_id: r.parsed(8)?,
            host_id: r.parsed(9)?,
            boot_id: r.parsed(10)?,
            pid: r
                .integer::<i64>(11)?
                .map(fleet_identity::Pid::new)
                .transpose()
                .map_err(|e| r.corrupt("pid", e))?,
            process_start_time: r
                .integer::<i64>(12)?
                .map(fleet_identity::ProcessStartTime::try_from)
                .transpose()
                .map_err(|e| r.corrupt("process_start_time", e))?,
            repository: r.parsed(13)?,
            status: r.required(14)?,
            ownership_state: r.parsed(15)?,
            registered_at: r.required::<Timestamp>(16)?,
            last_heartbeat_at: r.raw_text(17)?,
            heartbeat_ttl_s: r.integer(18)?,
            fencing_epoch: r.integer(19)?,
            token_fingerprint: r.raw_text(20)?,
            code_revision: r.raw_text(21)?,
            config_revision: r.raw_text(22)?,
            profile_revision: r.raw_text(23)?,
            schema_revision: r.raw_text(24)?,
            retired_at: r.parsed(25)?,
            retired_by: r.raw_text(26)?,
            retirement_reason: r.raw_text(27)?,
            pid_namespace: r
                .integer::<i64>(28)?
                .map(fleet_identity::PidNamespace::try_from)
                .transpose()
                .map_err(|e| r.corrupt("pid_namespace", e))?,
        })
    })())
}

/// The columns of [`INSTANCE_LIST`], by index.
const INSTANCE_COLUMNS: [&str; 5] =
    ["client_instance_id", "client_type", "fleet_run_id", "minted_at", "host_id"];

pub(crate) fn read_instance(row: &Row<'_>) -> rusqlite::Result<Result<InstanceRecord, StoreError>> {
    let r = Reader { row, columns: &INSTANCE_COLUMNS };
    Ok((|| {
        Ok(InstanceRecord {
            client_instance_id: r.required(0)?,
            client_type: r.required(1)?,
            fleet_run_id: r.parsed(2)?,
            minted_at: r.required(3)?,
            host_id: r.parsed(4)?,
        })
    })())
}
