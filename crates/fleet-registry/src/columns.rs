//! Reading rows back from a store's columns, written once for every backend: each value
//! is checked as an import checks it, and one that does not validate is reported as
//! corruption naming the row and the column.

use std::fmt::Display;
use std::str::FromStr;

use fleet_identity::{Pid, PidNamespace, ProcessStartTime};
use fleet_model::{InstanceRecord, WORKER_COLUMNS, WorkerRow};

use crate::StoreError;

/// The columns of `instances`, in the order [`read_instance`] reads them.
pub const INSTANCE_COLUMNS: [&str; 5] =
    ["client_instance_id", "client_type", "fleet_run_id", "minted_at", "host_id"];

/// One stored row's columns, as a backend reads them (for a worker row, in
/// [`WORKER_COLUMNS`] order). An `Err` says why the column cannot be read as asked.
pub trait RowColumns {
    /// The text in column `idx`; `None` for NULL.
    fn text(&self, idx: usize) -> Result<Option<&str>, String>;
    /// The integer in column `idx`; `None` for NULL.
    fn integer(&self, idx: usize) -> Result<Option<i64>, String>;
}

struct Reader<'r, R: ?Sized> {
    row: &'r R,
    /// The column names; the first names the row in an error.
    columns: &'r [&'r str],
}

impl<R: RowColumns + ?Sized> Reader<'_, R> {
    fn corrupt(&self, idx: usize, detail: impl Display) -> StoreError {
        // The key is read only when there is an error to report.
        let key = self.row.text(0).ok().flatten().unwrap_or("?");
        StoreError::corrupt(format!("registry row {key} has an invalid {}: {detail}", self.columns[idx]))
    }

    fn raw_str(&self, idx: usize) -> Result<Option<&str>, StoreError> {
        self.row.text(idx).map_err(|e| self.corrupt(idx, e))
    }

    fn raw_text(&self, idx: usize) -> Result<Option<String>, StoreError> {
        Ok(self.raw_str(idx)?.map(str::to_owned))
    }

    fn parsed<T: FromStr<Err: Display>>(&self, idx: usize) -> Result<Option<T>, StoreError> {
        self.raw_str(idx)?.map(|s| s.parse::<T>().map_err(|e| self.corrupt(idx, e))).transpose()
    }

    fn required<T: FromStr<Err: Display>>(&self, idx: usize) -> Result<T, StoreError> {
        self.parsed(idx)?.ok_or_else(|| self.corrupt(idx, "missing"))
    }

    fn integer<T: TryFrom<i64>>(&self, idx: usize) -> Result<Option<T>, StoreError> {
        let Some(n) = self.row.integer(idx).map_err(|e| self.corrupt(idx, e))? else {
            return Ok(None);
        };
        T::try_from(n).map(Some).map_err(|_| self.corrupt(idx, format!("{n} is out of range")))
    }

    /// An integer column through a checked constructor of its own.
    fn checked<T, E: Display>(
        &self,
        idx: usize,
        new: impl FnOnce(i64) -> Result<T, E>,
    ) -> Result<Option<T>, StoreError> {
        self.integer::<i64>(idx)?.map(new).transpose().map_err(|e| self.corrupt(idx, e))
    }
}

/// A worker row from its columns, in [`WORKER_COLUMNS`] order.
pub fn read_worker(row: &(impl RowColumns + ?Sized)) -> Result<WorkerRow, StoreError> {
    let r = Reader { row, columns: &WORKER_COLUMNS };
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
        pid: r.checked(11, Pid::new)?,
        process_start_time: r.checked(12, ProcessStartTime::try_from)?,
        repository: r.parsed(13)?,
        status: r.required(14)?,
        ownership_state: r.parsed(15)?,
        registered_at: r.required(16)?,
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
        pid_namespace: r.checked(28, PidNamespace::try_from)?,
    })
}

/// A ledger entry from its columns, in [`INSTANCE_COLUMNS`] order.
pub fn read_instance(row: &(impl RowColumns + ?Sized)) -> Result<InstanceRecord, StoreError> {
    let r = Reader { row, columns: &INSTANCE_COLUMNS };
    Ok(InstanceRecord {
        client_instance_id: r.required(0)?,
        client_type: r.required(1)?,
        fleet_run_id: r.parsed(2)?,
        minted_at: r.required(3)?,
        host_id: r.parsed(4)?,
    })
}
