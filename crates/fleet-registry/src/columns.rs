//! Rows to a store's columns and back, written once for every backend: the column
//! lists, each row as the values of its columns, the compare-and-swap statements built
//! from the lists, and the reading of each value, checked as an import checks it (one
//! that does not validate is reported as corruption naming the row and the column).

use std::fmt::Display;
use std::str::FromStr;

use fleet_identity::{Pid, PidNamespace, ProcessStartTime};
use fleet_lease::{FencingEpoch, InitState, InitStatus, LEASE_COLUMNS, LeaseRecord, LeaseState};
use fleet_model::{HostBoot, HostFence, InstanceRecord, WORKER_COLUMNS, WorkerRow};

use crate::StoreError;

/// The columns of `instances`, in the order [`read_instance`] reads them.
pub const INSTANCE_COLUMNS: [&str; 5] =
    ["client_instance_id", "client_type", "fleet_run_id", "minted_at", "host_id"];

/// The columns of `host_fences`, in the order [`read_host_fence`] reads them; every one
/// holds text. `boot_id` is a boot id, or `*` for every boot of the host.
pub const HOST_FENCE_COLUMNS: [&str; 7] =
    ["host_id", "boot_id", "reason", "fenced_by", "fenced_at", "lifted_at", "lifted_by"];

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
    /// What the row is, in an error ("registry row", "lease").
    noun: &'static str,
    /// The column names; the first names the row in an error.
    columns: &'r [&'r str],
}

impl<R: RowColumns + ?Sized> Reader<'_, R> {
    fn corrupt(&self, idx: usize, detail: impl Display) -> StoreError {
        // The key is read only when there is an error to report.
        let key = self.row.text(0).ok().flatten().unwrap_or("?");
        StoreError::corrupt(format!("{} {key} has an invalid {}: {detail}", self.noun, self.columns[idx]))
    }

    /// A text column holding one of `values`, by its name.
    fn one_of<T: Copy>(
        &self,
        idx: usize,
        values: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Option<T>, StoreError> {
        let Some(text) = self.raw_str(idx)? else { return Ok(None) };
        values.iter().copied().find(|v| name(*v) == text).map(Some).ok_or_else(|| self.corrupt(idx, text))
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
    let r = Reader { row, noun: "registry row", columns: &WORKER_COLUMNS };
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
    let r = Reader { row, noun: "ledger entry", columns: &INSTANCE_COLUMNS };
    Ok(InstanceRecord {
        client_instance_id: r.required(0)?,
        client_type: r.required(1)?,
        fleet_run_id: r.parsed(2)?,
        minted_at: r.required(3)?,
        host_id: r.parsed(4)?,
    })
}

/// A host fence from its columns, in [`HOST_FENCE_COLUMNS`] order.
pub fn read_host_fence(row: &(impl RowColumns + ?Sized)) -> Result<HostFence, StoreError> {
    let r = Reader { row, noun: "host fence", columns: &HOST_FENCE_COLUMNS };
    Ok(HostFence {
        host_id: r.required(0)?,
        boot_id: r.required(1)?,
        reason: r.raw_text(2)?.unwrap_or_default(),
        fenced_by: r.raw_text(3)?.unwrap_or_default(),
        fenced_at: r.required(4)?,
        lifted_at: r.parsed(5)?,
        lifted_by: r.raw_text(6)?,
    })
}

/// A host fence as the values of its columns, in [`HOST_FENCE_COLUMNS`] order.
pub fn host_fence_cells(fence: &HostFence) -> [Cell; HOST_FENCE_COLUMNS.len()] {
    [
        Cell::Text(fence.host_id.to_string()),
        Cell::Text(fence.boot_id.as_str().to_owned()),
        Cell::Text(fence.reason.clone()),
        Cell::Text(fence.fenced_by.clone()),
        Cell::Text(fence.fenced_at.to_string()),
        text(fence.lifted_at.map(|t| t.to_string())),
        text(fence.lifted_by.as_ref()),
    ]
}

/// The columns of `host_boots`, in the order [`read_host_boot`] reads them.
pub const HOST_BOOT_COLUMNS: [&str; 6] =
    ["host_id", "boot_id", "hostname", "first_seen_at", "last_seen_at", "clock_offset_ms"];

/// A host boot from its columns, in [`HOST_BOOT_COLUMNS`] order.
pub fn read_host_boot(row: &(impl RowColumns + ?Sized)) -> Result<HostBoot, StoreError> {
    let r = Reader { row, noun: "host boot", columns: &HOST_BOOT_COLUMNS };
    Ok(HostBoot {
        host_id: r.required(0)?,
        boot_id: r.required(1)?,
        hostname: r.raw_text(2)?,
        first_seen_at: r.required(3)?,
        last_seen_at: r.required(4)?,
        clock_offset_ms: r.integer(5)?,
    })
}

/// A host boot as the values of its columns, in [`HOST_BOOT_COLUMNS`] order.
pub fn host_boot_cells(boot: &HostBoot) -> [Cell; HOST_BOOT_COLUMNS.len()] {
    [
        Cell::Text(boot.host_id.to_string()),
        Cell::Text(boot.boot_id.to_string()),
        text(boot.hostname.as_ref()),
        Cell::Text(boot.first_seen_at.to_string()),
        Cell::Text(boot.last_seen_at.to_string()),
        integer(boot.clock_offset_ms),
    ]
}

/// Records a host boot: inserts it, or keeps its first sighting and replaces the rest.
pub fn note_host_boot_sql(d: Dialect) -> String {
    format!(
        "{} ON CONFLICT (host_id, boot_id) DO UPDATE SET hostname = excluded.hostname, \
         last_seen_at = excluded.last_seen_at, clock_offset_ms = excluded.clock_offset_ms",
        insert_sql(d, "host_boots", &HOST_BOOT_COLUMNS, &["clock_offset_ms"])
    )
}

/// Every host boot, in host and boot order.
pub fn host_boots_sql() -> String {
    format!("SELECT {} FROM host_boots ORDER BY host_id, boot_id", list(&HOST_BOOT_COLUMNS))
}

/// Writes a host fence whole: inserts it, or replaces the fence of its host and boot.
pub fn put_host_fence_sql(d: Dialect) -> String {
    let update: Vec<String> = HOST_FENCE_COLUMNS[2..].iter().map(|c| format!("{c} = excluded.{c}")).collect();
    format!(
        "{} ON CONFLICT (host_id, boot_id) DO UPDATE SET {}",
        insert_sql(d, "host_fences", &HOST_FENCE_COLUMNS, &[]),
        update.join(", ")
    )
}

/// Every fence, in host and boot order.
pub fn host_fences_sql() -> String {
    format!("SELECT {} FROM host_fences ORDER BY host_id, boot_id", list(&HOST_FENCE_COLUMNS))
}

/// The condition a write by a process of host `host` and boot `boot` (SQL expressions)
/// passes only when no fence stands against that host and boot: a fence of that boot,
/// or of every boot of the host, not lifted.
pub fn unfenced_sql(host: &str, boot: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM host_fences WHERE host_fences.host_id = {host} \
         AND host_fences.boot_id IN ({boot}, '*') AND host_fences.lifted_at IS NULL)"
    )
}

/// A lease from its columns, in [`LEASE_COLUMNS`] order: `init` from its three
/// columns (present when its version and status are), the scopes from their JSON text.
pub fn read_lease(row: &(impl RowColumns + ?Sized)) -> Result<LeaseRecord, StoreError> {
    let r = Reader { row, noun: "lease", columns: &LEASE_COLUMNS };
    let missing = |idx: usize| r.corrupt(idx, "missing");
    let epoch = r.integer::<u64>(4)?.ok_or_else(|| missing(4))?;
    let statuses = [InitStatus::Initializing, InitStatus::Ready, InitStatus::Failed];
    let init = match (r.integer::<u64>(12)?, r.one_of(13, &statuses, InitStatus::as_str)?) {
        (Some(target_version), Some(status)) => {
            Some(InitState { target_version, status, failure_detail: r.raw_text(14)? })
        }
        _ => None,
    };
    let scopes = match r.raw_str(11)? {
        Some(text) => serde_json::from_str(text).map_err(|e| r.corrupt(11, e))?,
        None => Vec::new(),
    };
    Ok(LeaseRecord {
        lease_key: r.required(0)?,
        kind: r.required(1)?,
        owner: r.raw_text(2)?.ok_or_else(|| missing(2))?,
        lease_id: r.required(3)?,
        fencing_epoch: FencingEpoch::new(epoch).map_err(|e| r.corrupt(4, e))?,
        state: r
            .one_of(5, &[LeaseState::Held, LeaseState::Released], LeaseState::as_str)?
            .ok_or_else(|| missing(5))?,
        acquired_at: r.required(6)?,
        heartbeat_at: r.required(7)?,
        expires_at: r.required(8)?,
        released_at: r.parsed(9)?,
        updated_at: r.required(10)?,
        scopes,
        init,
        holder_process: match r.raw_str(15)? {
            Some(text) => Some(serde_json::from_str(text).map_err(|e| r.corrupt(15, e))?),
            None => None,
        },
    })
}

/// The columns of `leases` that hold integers; every other holds text.
pub const LEASE_INTEGER_COLUMNS: [&str; 2] = ["fencing_epoch", "target_version"];

/// A lease as the values of its columns, in [`LEASE_COLUMNS`] order ([`read_lease`]
/// reads it back).
pub fn lease_cells(lease: &LeaseRecord) -> [Cell; LEASE_COLUMNS.len()] {
    let init = lease.init.as_ref();
    [
        Cell::Text(lease.lease_key.to_string()),
        Cell::Text(lease.kind.as_str().to_owned()),
        Cell::Text(lease.owner.clone()),
        Cell::Text(lease.lease_id.to_string()),
        // An epoch is never past i64::MAX: its constructor refuses one.
        Cell::Integer(i64::try_from(lease.fencing_epoch.get()).unwrap_or(i64::MAX)),
        Cell::Text(lease.state.as_str().to_owned()),
        Cell::Text(lease.acquired_at.to_string()),
        Cell::Text(lease.heartbeat_at.to_string()),
        Cell::Text(lease.expires_at.to_string()),
        text(lease.released_at.map(|t| t.to_string())),
        Cell::Text(lease.updated_at.to_string()),
        Cell::Text(serde_json::to_string(&lease.scopes).unwrap_or_else(|_| "[]".to_owned())),
        integer(init.map(|i| i64::try_from(i.target_version).unwrap_or(i64::MAX))),
        text(init.map(|i| i.status.as_str())),
        text(init.and_then(|i| i.failure_detail.as_ref())),
        text(lease.holder_process.as_ref().and_then(|p| serde_json::to_string(p).ok())),
    ]
}

/// The columns of `worker_registrations` that hold integers; every other holds text.
pub const WORKER_INTEGER_COLUMNS: [&str; 5] =
    ["pid", "process_start_time", "heartbeat_ttl_s", "fencing_epoch", "pid_namespace"];

/// One stored value: every column of the registry holds text or an integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// A text column's value.
    Text(String),
    /// An integer column's value.
    Integer(i64),
    /// NULL.
    Null,
}

fn text<T: AsRef<str>>(v: Option<T>) -> Cell {
    v.map_or(Cell::Null, |s| Cell::Text(s.as_ref().to_owned()))
}

fn integer(v: Option<i64>) -> Cell {
    v.map_or(Cell::Null, Cell::Integer)
}

/// A worker row as the values of its columns, in [`WORKER_COLUMNS`] order: the one way
/// a row is written, whichever backend writes it ([`read_worker`] reads it back).
pub fn worker_cells(row: &WorkerRow) -> [Cell; WORKER_COLUMNS.len()] {
    [
        Cell::Text(row.worker_identity.to_string()),
        text(row.client_type.as_ref()),
        text(row.client_instance_id.as_ref()),
        text(row.instance_provenance.as_ref()),
        text(row.fleet_run_id.as_ref()),
        Cell::Text(row.namespace.as_str().to_owned()),
        text(row.profile.as_ref()),
        text(row.session_id.as_ref()),
        text(row.generation_id.as_ref()),
        text(row.host_id.as_ref()),
        text(row.boot_id.as_ref()),
        integer(row.pid.map(i64::from)),
        integer(row.process_start_time.map(i64::from)),
        text(row.repository.as_ref()),
        Cell::Text(row.status.as_str().to_owned()),
        text(row.ownership_state.map(|o| o.as_str())),
        Cell::Text(row.registered_at.to_string()),
        text(row.last_heartbeat_at.as_ref()),
        integer(row.heartbeat_ttl_s.map(i64::from)),
        // A row never holds an epoch past i64::MAX: its constructors refuse one.
        integer(row.fencing_epoch.map(|e| i64::try_from(e).unwrap_or(i64::MAX))),
        text(row.token_fingerprint.as_ref()),
        text(row.code_revision.as_ref()),
        text(row.config_revision.as_ref()),
        text(row.profile_revision.as_ref()),
        text(row.schema_revision.as_ref()),
        text(row.retired_at.map(|t| t.to_string())),
        text(row.retired_by.as_ref()),
        text(row.retirement_reason.as_ref()),
        integer(row.pid_namespace.map(i64::from)),
    ]
}

/// How a backend's SQL names parameters and compares possibly-NULL values; the
/// statements below are built from the column lists with it, once per backend.
#[derive(Debug, Clone, Copy)]
pub struct Dialect {
    /// The `n`th parameter (from 1), typed for a column holding integers or not.
    pub param: fn(n: usize, integer: bool) -> String,
    /// The operator by which NULL equals NULL (`IS`; `IS NOT DISTINCT FROM`).
    pub same: &'static str,
}

/// The columns joined for a `SELECT` or `INSERT` list.
pub fn list(columns: &[&str]) -> String {
    columns.join(", ")
}

/// `INSERT INTO table (columns) VALUES (one parameter per column)`.
pub fn insert_sql(d: Dialect, table: &str, columns: &[&str], integers: &[&str]) -> String {
    let params: Vec<String> =
        columns.iter().enumerate().map(|(i, c)| (d.param)(i + 1, integers.contains(c))).collect();
    format!("INSERT INTO {table} ({}) VALUES ({})", list(columns), params.join(", "))
}

/// The compare-and-swap of a whole row: `UPDATE table SET every column to the first
/// parameters WHERE every column is the same as the next ones`, which changes nothing
/// unless the stored row is exactly the expected one.
pub fn replace_sql(d: Dialect, table: &str, columns: &[&str], integers: &[&str]) -> String {
    let n = columns.len();
    let set: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} = {}", (d.param)(i + 1, integers.contains(c))))
        .collect();
    let guard: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} {} {}", d.same, (d.param)(n + i + 1, integers.contains(c))))
        .collect();
    format!("UPDATE {table} SET {} WHERE {}", set.join(", "), guard.join(" AND "))
}

/// The guarded delete of a whole row: it removes the row only when every column is the
/// same as the parameters.
pub fn delete_sql(d: Dialect, table: &str, columns: &[&str], integers: &[&str]) -> String {
    let guard: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| format!("{c} {} {}", d.same, (d.param)(i + 1, integers.contains(c))))
        .collect();
    format!("DELETE FROM {table} WHERE {}", guard.join(" AND "))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Cells(Vec<Cell>);

    impl RowColumns for Cells {
        fn text(&self, idx: usize) -> Result<Option<&str>, String> {
            match &self.0[idx] {
                Cell::Text(s) => Ok(Some(s)),
                Cell::Null => Ok(None),
                Cell::Integer(n) => Err(format!("{n} is not text")),
            }
        }

        fn integer(&self, idx: usize) -> Result<Option<i64>, String> {
            match &self.0[idx] {
                Cell::Integer(n) => Ok(Some(*n)),
                Cell::Null => Ok(None),
                Cell::Text(s) => Err(format!("{s:?} is not an integer")),
            }
        }
    }

    /// What a row is written as reads back as the same row, with every integer column
    /// written as an integer.
    #[test]
    fn a_row_written_as_cells_reads_back_the_same() {
        let row: WorkerRow = serde_json::from_value(serde_json::json!({
            "worker_identity": "wkr-author-1", "client_type": "codex",
            "client_instance_id": "inst-codex-20260730T120000Z-0123456789ab",
            "instance_provenance": "trusted_launcher", "fleet_run_id": "canary-1",
            "namespace": "author", "profile": "author", "session_id": "sess-1",
            "generation_id": "gen-1", "host_id": "0123456789abcdef0123456789abcdef",
            "boot_id": "11111111-2222-3333-4444-555555555555", "pid": 4242,
            "process_start_time": 777, "repository": "/srv/repo", "status": "retired",
            "ownership_state": "stale", "registered_at": "2026-07-30T12:00:00Z",
            "last_heartbeat_at": "2026-07-30T12:00:05Z", "heartbeat_ttl_s": 30,
            "fencing_epoch": 3, "token_fingerprint": "b3:00", "code_revision": "0.1.0",
            "config_revision": "c", "profile_revision": "p", "schema_revision": "4",
            "retired_at": "2026-07-30T13:00:00Z", "retired_by": "fleetctl-pid-1",
            "retirement_reason": "eligible_stale_orphan", "pid_namespace": 4026531836u64,
        }))
        .unwrap();
        let cells = worker_cells(&row);
        for (cell, column) in cells.iter().zip(WORKER_COLUMNS) {
            assert_eq!(
                matches!(cell, Cell::Integer(_)),
                WORKER_INTEGER_COLUMNS.contains(&column),
                "{column}"
            );
        }
        assert_eq!(read_worker(&Cells(cells.to_vec())).unwrap(), row);
    }

    /// A lease written as cells, with `init` and without, reads back as the same lease,
    /// its integers in integer columns; a value that does not read is corruption naming
    /// the lease and the column.
    #[test]
    fn a_lease_written_as_cells_reads_back_the_same() {
        let with_init: LeaseRecord = serde_json::from_value(serde_json::json!({
            "lease_key": "init:schema", "kind": "initialization", "owner": "wkr-a", "lease_id": "lease-1",
            "fencing_epoch": 7, "state": "held", "acquired_at": "2026-07-30T12:00:00Z",
            "heartbeat_at": "2026-07-30T12:00:01Z", "expires_at": "2026-07-30T12:00:31Z",
            "released_at": null, "updated_at": "2026-07-30T12:00:01Z", "scopes": ["a", "b"],
            "init": { "target_version": 4, "status": "failed", "failure_detail": "disk full" },
        }))
        .unwrap();
        let mut without = with_init.clone();
        without.init = None;
        without.scopes = Vec::new();
        without.state = LeaseState::Released;
        without.released_at = Some(without.expires_at);
        for lease in [with_init, without] {
            let cells = lease_cells(&lease);
            for (cell, column) in cells.iter().zip(LEASE_COLUMNS) {
                if !matches!(cell, Cell::Null) {
                    assert_eq!(
                        matches!(cell, Cell::Integer(_)),
                        LEASE_INTEGER_COLUMNS.contains(&column),
                        "{column}"
                    );
                }
            }
            assert_eq!(read_lease(&Cells(cells.to_vec())).unwrap(), lease);
            let mut bad = cells.to_vec();
            bad[5] = Cell::Text("lost".into());
            let err = read_lease(&Cells(bad)).unwrap_err().to_string();
            assert!(err.contains("lease init:schema has an invalid state: lost"), "{err}");
        }
    }
}
