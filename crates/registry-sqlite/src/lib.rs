//! The SQLite backend of the registry: one database file, created with mode 0600, in WAL
//! mode with a busy timeout, its schema brought up to date by versioned migrations.
//!
//! WAL with `synchronous = NORMAL` means a crashed process never corrupts the file: a
//! transaction is either in the log whole or not at all. (A power loss may drop the
//! last transactions, never corrupt the earlier ones.) Lease transactions commit with
//! `synchronous = FULL` instead, so a fencing epoch once handed out survives a power
//! loss and is never handed out again.
//!
//! A registry in a file, with the rules of `fleet-registry` over it: a worker registers
//! (its own process as evidence), heartbeats with its credential, and releases.
//!
//! ```
//! use fleet_identity::{ClientType, GenerationId, Namespace, Timestamp};
//! use fleet_registry::{
//!     Claim, HeartbeatTtl, InstanceRef, OpenMode, Registration, Registry, Revisions, WorkerCredential,
//!     WorkerStatus, WorkerToken,
//! };
//! use registry_sqlite::SqliteStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let mut registry = Registry::new(SqliteStore::open(&dir.path().join("registry.sqlite3"), OpenMode::CreateIfMissing)?);
//! let generation_id = GenerationId::new("gen-1")?;
//! let registration = Registration {
//!     client_type: ClientType::new("codex")?,
//!     instance: InstanceRef::Legacy(fleet_identity::LegacyPlaceholder::parse("pid-4242").unwrap()),
//!     instance_provenance: None,
//!     fleet_run_id: None,
//!     namespace: Namespace::Author,
//!     profile: None,
//!     session_id: None,
//!     generation_id: generation_id.clone(),
//!     process: fleet_probe::current_process()?,
//!     repository: None,
//!     heartbeat_ttl: HeartbeatTtl::from_secs(30)?,
//!     revisions: Revisions::default(),
//!     claim: Claim::Unowned,
//!     hostname: None,
//! };
//! let token = WorkerToken::generate()?;
//! let probe = fleet_probe::LocalProbe::new()?;
//! let now = Timestamp::parse("2026-07-30T12:00:00Z")?;
//! let row = registry.register(&registration, &token, now, &probe)?.row;
//!
//! let me = WorkerCredential { worker_identity: row.worker_identity.clone(), generation_id, token };
//! registry.heartbeat(&me, now.saturating_add(time::Duration::seconds(10)))?;
//! let released = registry.release(&me, now.saturating_add(time::Duration::seconds(20)))?;
//! assert_eq!(released.status, WorkerStatus::Released);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
// Store crates convert between Rust and SQL integers; every such cast must be checked.
#![warn(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_possible_wrap)]

mod columns;
mod leases;
mod migrations;
mod open;
mod two_threads;

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleet_identity::{ClientInstanceId, Namespace, Timestamp, WorkerIdentity};
use fleet_registry::{
    ChangePosition, Claim, InstanceRecord, Store, StoreError, StoreErrorKind, Tx, VersionsDigest,
    WorkerCredential, WorkerRow,
};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

pub use migrations::SCHEMA_VERSION;
use open::{disk_trouble, file_identity};

/// How long a writer waits for another writer before reporting `Busy`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// A registry in one SQLite file.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    /// The file the connection opened (device and inode), to tell when the path has
    /// since been moved away or replaced.
    file: Option<(u64, u64)>,
    /// The write-ahead log the connection uses (device and inode), once there is one.
    /// Removed while the connection is open (a file copied back in place with its
    /// `-wal` and `-shm` deleted), the connection would go on reading its own deleted
    /// log while writers write another: it would never see a commit again.
    log: Option<(u64, u64)>,
}

/// The log kept in place is emptied by the last connection to close it: a file restored
/// in place of this one must never meet frames of this one's log. Set only now, since a
/// limit in force while writing truncates the log at every reset, which doubles the
/// cost of a durable commit.
impl Drop for SqliteStore {
    fn drop(&mut self) {
        let _ = self.conn.pragma_update(None, "journal_size_limit", 0);
    }
}

/// Maps a SQLite failure onto the store's error kinds.
pub(crate) fn map_error(e: rusqlite::Error) -> StoreError {
    use rusqlite::ErrorCode as C;
    if e.sqlite_error_code() == Some(C::ReadOnly) {
        return StoreError::new(
            StoreErrorKind::Unavailable,
            "the registry is read-only to this user (its file mode or its mount); nothing was written",
        );
    }
    let kind = match e.sqlite_error_code() {
        Some(C::DatabaseBusy | C::DatabaseLocked) => StoreErrorKind::Busy,
        Some(C::ConstraintViolation) => StoreErrorKind::Conflict,
        Some(C::NotADatabase | C::DatabaseCorrupt) => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Unavailable,
    };
    let message = match kind {
        StoreErrorKind::Conflict => format!("registry refused a duplicate: {e}"),
        StoreErrorKind::Busy => format!(
            "registry busy: another connection held the write lock for more than {} s ({e}); nothing was written",
            BUSY_TIMEOUT.as_secs()
        ),
        _ => format!("registry error: {e}"),
    };
    StoreError::with_source(kind, message, e)
}

struct SqliteTx<'a> {
    conn: &'a Connection,
}

/// The launches that have an active row, from the index of active rows.
const LIVE_LAUNCHES: &str = "SELECT client_instance_id FROM worker_registrations WHERE status = 'active' AND client_instance_id IS NOT NULL";

impl SqliteTx<'_> {
    /// The count one `SELECT count(*) …` returns.
    fn count(&self, sql: &str, params: impl rusqlite::Params) -> Result<usize, StoreError> {
        let count: i64 = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut stmt| stmt.query_row(params, |row| row.get(0)))
            .map_err(map_error)?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    /// The worker rows `sql` selects (every column, in [`columns::COLUMNS`] order), into
    /// a vector of `count` rows' capacity.
    fn read_workers(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        count: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(map_error)?;
        if count >= two_threads::FROM_ROWS {
            return two_threads::read_workers(&mut stmt, params, count);
        }
        let rows = stmt.query_map(params, columns::read_worker).map_err(map_error)?;
        let mut out = Vec::with_capacity(count);
        for row in rows {
            out.push(row.map_err(map_error)??);
        }
        Ok(out)
    }
}

impl Tx for SqliteTx<'_> {
    fn workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        // Counted first (in the same read transaction), so the rows are read into a
        // vector of their final size: grown by doubling, a 10 000-row read copied its
        // rows some twice over.
        let count = self.count("SELECT count(*) FROM worker_registrations", [])?;
        let sql = format!("SELECT {} FROM worker_registrations ORDER BY worker_identity", *columns::LIST);
        self.read_workers(&sql, [], count)
    }

    /// From the primary key's index: SQLite compares text bytewise, as the rows are
    /// ordered everywhere else.
    fn workers_page(
        &mut self,
        after: Option<&WorkerIdentity>,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM worker_registrations WHERE worker_identity > ?1 ORDER BY worker_identity LIMIT ?2",
            *columns::LIST
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.read_workers(&sql, rusqlite::params![after.map_or("", |a| a.as_str()), limit], 0)
    }

    /// Found from the index of active rows: the active rows, then the other rows of
    /// their launches (from the slot index), sorted here (a sort in SQLite built a
    /// temporary tree of every row).
    fn live_workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        let count = self.count("SELECT count(*) FROM worker_registrations WHERE status = 'active'", [])?;
        let sql = format!(
            "SELECT {cols} FROM worker_registrations WHERE status = 'active' \
             UNION ALL SELECT {cols} FROM worker_registrations \
             WHERE status <> 'active' AND client_instance_id IN ({LIVE_LAUNCHES})",
            cols = *columns::LIST
        );
        let mut rows = self.read_workers(&sql, [], count)?;
        rows.sort_unstable_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
        Ok(rows)
    }

    fn live_instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!(
            "SELECT {} FROM instances WHERE client_instance_id IN ({LIVE_LAUNCHES}) ORDER BY client_instance_id",
            *columns::INSTANCE_LIST
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let rows = stmt.query_map([], columns::read_instance).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
    }

    fn live_worker_versions(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let sql = format!(
            "SELECT worker_identity, change_seq FROM worker_registrations WHERE status = 'active' \
             UNION ALL SELECT worker_identity, change_seq FROM worker_registrations \
             WHERE status <> 'active' AND client_instance_id IN ({LIVE_LAUNCHES})"
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error)).collect()
    }

    fn launch_history(
        &mut self,
        launches: &[&str],
    ) -> Result<(Vec<WorkerRow>, fleet_registry::RowVersions), StoreError> {
        let sql = format!(
            "SELECT {}, change_seq FROM worker_registrations \
             WHERE client_instance_id = ?1 AND status <> 'active'",
            *columns::LIST
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let at = columns::COLUMNS.len();
        let (mut rows, mut versions) = (Vec::new(), Vec::new());
        for launch in launches {
            let found = stmt
                .query_map([launch], |r| Ok((columns::read_worker(r)?, r.get::<_, i64>(at)?)))
                .map_err(map_error)?;
            for entry in found {
                let (row, version) = entry.map_err(map_error)?;
                let row = row?;
                versions.push((row.worker_identity.to_string(), version));
                rows.push(row);
            }
        }
        Ok((rows, versions))
    }

    /// Seconds are compared whole: a row whose heartbeat lapsed by a millisecond passes
    /// (`floor(beat) + ttl <= floor(now)` whenever `beat + ttl < now`), and one whose
    /// heartbeat SQLite cannot read is passed on for the sweep to judge.
    fn sweep_candidates(&mut self, now: Timestamp) -> Result<(Vec<WorkerRow>, usize), StoreError> {
        let active = self.count("SELECT count(*) FROM worker_registrations WHERE status = 'active'", [])?;
        let sql = format!(
            "SELECT {} FROM worker_registrations \
             WHERE status = 'active' AND ownership_state IS NOT 'stale' \
             AND (unixepoch(last_heartbeat_at) IS NULL \
                  OR unixepoch(last_heartbeat_at) + heartbeat_ttl_s <= unixepoch(?1))",
            *columns::LIST
        );
        let candidates = self.read_workers(&sql, [now.to_string()], 0)?;
        Ok((candidates, active))
    }

    fn change_position(&mut self) -> Result<Option<ChangePosition>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT (SELECT coalesce(max(change_seq), 0) FROM worker_registrations), \
                 worker_removals, instances, (SELECT schema_version FROM pragma_schema_version) \
                 FROM registry_changes",
            )
            .map_err(map_error)?;
        // Without its one row (removed by hand), the history cannot be trusted: every
        // read then reads everything.
        stmt.query_row([], |row| {
            Ok(ChangePosition {
                workers: row.get(0)?,
                worker_removals: row.get(1)?,
                instances: row.get(2)?,
                history: row.get(3)?,
            })
        })
        .optional()
        .map_err(map_error)
    }

    fn workers_changed_since(&mut self, since: &ChangePosition) -> Result<Vec<WorkerRow>, StoreError> {
        let count =
            self.count("SELECT count(*) FROM worker_registrations WHERE change_seq > ?1", [since.workers])?;
        let sql = format!("SELECT {} FROM worker_registrations WHERE change_seq > ?1", *columns::LIST);
        self.read_workers(&sql, [since.workers], count)
    }

    fn worker_versions_since(
        &mut self,
        since: Option<&ChangePosition>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT worker_identity, change_seq FROM worker_registrations WHERE change_seq > ?1",
            )
            .map_err(map_error)?;
        let rows = stmt
            .query_map([since.map_or(i64::MIN, |s| s.workers)], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(map_error)?;
        rows.map(|r| r.map_err(map_error)).collect()
    }

    /// The digest of every row, as triggers keep it in `registry_changes`, less that of
    /// the rows written since `upto` (found by the `change_seq` index): the cost of the
    /// rows that changed, not of every row. Without the history's row there is none.
    fn versions_digest_upto(&mut self, upto: &ChangePosition) -> Result<Option<VersionsDigest>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT worker_rows - (SELECT count(*) FROM worker_registrations WHERE change_seq > ?1), \
                 worker_version_sum - (SELECT coalesce(sum(change_seq & 4294967295), 0) \
                                       FROM worker_registrations WHERE change_seq > ?1) \
                 FROM registry_changes",
            )
            .map_err(map_error)?;
        stmt.query_row([upto.workers], |r| Ok(VersionsDigest { rows: r.get(0)?, sum: r.get(1)? }))
            .optional()
            .map_err(map_error)
    }

    fn worker(&mut self, id: &WorkerIdentity) -> Result<Option<WorkerRow>, StoreError> {
        let sql = format!("SELECT {} FROM worker_registrations WHERE worker_identity = ?1", *columns::LIST);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        stmt.query_row([id.as_str()], columns::read_worker).optional().map_err(map_error)?.transpose()
    }

    fn slot(&mut self, instance: &str, namespace: Namespace) -> Result<Vec<WorkerRow>, StoreError> {
        let sql = format!(
            "SELECT {} FROM worker_registrations WHERE client_instance_id = ?1 AND namespace = ?2 \
             ORDER BY worker_identity",
            *columns::LIST
        );
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let rows =
            stmt.query_map(params![instance, namespace.as_str()], columns::read_worker).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
    }

    fn insert_worker(&mut self, row: &WorkerRow) -> Result<(), StoreError> {
        let mut stmt = self.conn.prepare_cached(columns::insert_sql()).map_err(map_error)?;
        stmt.execute(rusqlite::params_from_iter(columns::values(row))).map_err(map_error)?;
        Ok(())
    }

    fn replace_worker(&mut self, expected: &WorkerRow, new: &WorkerRow) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(columns::replace_sql()).map_err(map_error)?;
        let values = columns::values(new).into_iter().chain(columns::values(expected));
        let changed = stmt.execute(rusqlite::params_from_iter(values)).map_err(map_error)?;
        Ok(changed == 1)
    }

    fn delete_worker(&mut self, expected: &WorkerRow) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(columns::delete_sql()).map_err(map_error)?;
        let changed =
            stmt.execute(rusqlite::params_from_iter(columns::values(expected))).map_err(map_error)?;
        Ok(changed == 1)
    }

    fn instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {} FROM instances ORDER BY client_instance_id", *columns::INSTANCE_LIST);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        let rows = stmt.query_map([], columns::read_instance).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
    }

    fn instance(&mut self, id: &ClientInstanceId) -> Result<Option<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {} FROM instances WHERE client_instance_id = ?1", *columns::INSTANCE_LIST);
        let mut stmt = self.conn.prepare_cached(&sql).map_err(map_error)?;
        stmt.query_row([id.as_str()], columns::read_instance).optional().map_err(map_error)?.transpose()
    }

    fn insert_instance(&mut self, record: &InstanceRecord) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO instances (client_instance_id, client_type, fleet_run_id, minted_at, host_id) \
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(map_error)?;
        stmt.execute(params![
            record.client_instance_id.as_str(),
            record.client_type.as_str(),
            record.fleet_run_id.as_ref().map(|f| f.as_str()),
            record.minted_at.to_string(),
            record.host_id.as_ref().map(|h| h.as_str()),
        ])
        .map_err(|e| {
            let err = map_error(e);
            if err.kind() == StoreErrorKind::Conflict {
                StoreError::conflict(format!("instance {} is already recorded", record.client_instance_id))
            } else {
                err
            }
        })?;
        Ok(())
    }

    fn store_now(&mut self) -> Result<Timestamp, StoreError> {
        Ok(leases::store_now())
    }

    fn high_water(&mut self, scope: &str) -> Result<u64, StoreError> {
        let epoch: Option<i64> = self
            .conn()
            .query_row("SELECT epoch FROM fencing_high_water WHERE scope = ?1", [scope], |r| r.get(0))
            .optional()
            .map_err(map_error)?;
        Ok(epoch.map_or(0, i64::cast_unsigned))
    }

    fn high_waters(&mut self) -> Result<Vec<(String, u64)>, StoreError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT scope, epoch FROM fencing_high_water ORDER BY scope")
            .map_err(map_error)?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))).map_err(map_error)?;
        rows.map(|r| r.map(|(scope, epoch)| (scope, epoch.cast_unsigned())).map_err(map_error)).collect()
    }

    fn raise_high_water(&mut self, scope: &str, epoch: u64) -> Result<(), StoreError> {
        let epoch = i64::try_from(epoch).map_err(|_| StoreError::invalid("a fencing epoch past i64"))?;
        self.conn()
            .execute(
                "INSERT INTO fencing_high_water (scope, epoch) VALUES (?1, ?2) \
                 ON CONFLICT (scope) DO UPDATE SET epoch = max(epoch, excluded.epoch)",
                params![scope, epoch],
            )
            .map_err(map_error)?;
        Ok(())
    }

    fn registry_id(&mut self) -> Result<fleet_registry::RegistryId, StoreError> {
        let id: Option<String> = self
            .conn()
            .query_row("SELECT registry_id FROM registry_identity WHERE id = 1", [], |r| r.get(0))
            .optional()
            .map_err(map_error)?;
        let id =
            id.ok_or_else(|| StoreError::corrupt("the registry's id (table registry_identity) is missing"))?;
        fleet_registry::RegistryId::new(id)
    }

    fn host_fences(&mut self) -> Result<Vec<fleet_registry::HostFence>, StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(fleet_registry::columns::host_fences_sql);
        let mut stmt = self.conn().prepare_cached(&SQL).map_err(map_error)?;
        let rows = stmt.query_map([], columns::read_host_fence).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
    }

    fn put_host_fence(&mut self, fence: &fleet_registry::HostFence) -> Result<(), StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| fleet_registry::columns::put_host_fence_sql(columns::SQLITE));
        let values = columns::sqlite_values(fleet_registry::columns::host_fence_cells(fence));
        self.conn().execute(&SQL, rusqlite::params_from_iter(values)).map_err(map_error)?;
        Ok(())
    }

    fn host_boots(&mut self) -> Result<Vec<fleet_registry::HostBoot>, StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(fleet_registry::columns::host_boots_sql);
        let mut stmt = self.conn().prepare_cached(&SQL).map_err(map_error)?;
        let rows = stmt.query_map([], columns::read_host_boot).map_err(map_error)?;
        rows.map(|r| r.map_err(map_error).and_then(|r| r)).collect()
    }

    fn note_host_boot(&mut self, boot: &fleet_registry::HostBoot) -> Result<(), StoreError> {
        static SQL: std::sync::LazyLock<String> =
            std::sync::LazyLock::new(|| fleet_registry::columns::note_host_boot_sql(columns::SQLITE));
        let values = columns::sqlite_values(fleet_registry::columns::host_boot_cells(boot));
        self.conn().execute(&SQL, rusqlite::params_from_iter(values)).map_err(map_error)?;
        Ok(())
    }

    fn lease(&mut self, key: &fleet_lease::LeaseKey) -> Result<Option<fleet_lease::LeaseRecord>, StoreError> {
        leases::lease(self.conn(), key)
    }

    fn leases(
        &mut self,
        kind: Option<fleet_lease::LeaseKind>,
    ) -> Result<Vec<fleet_lease::LeaseRecord>, StoreError> {
        leases::leases(self.conn(), kind)
    }

    fn put_lease(
        &mut self,
        expected: Option<&fleet_lease::LeaseRecord>,
        new: &fleet_lease::LeaseRecord,
    ) -> Result<bool, StoreError> {
        leases::put_lease(self.conn(), expected, new)
    }

    fn append_audit(&mut self, entry: &fleet_registry::AuditEntry) -> Result<(), StoreError> {
        leases::append_audit(self.conn(), entry)
    }

    fn audit(
        &mut self,
        key: Option<&fleet_lease::LeaseKey>,
    ) -> Result<Vec<fleet_registry::AuditEntry>, StoreError> {
        leases::audit(self.conn(), key, 0)
    }

    fn audit_after(&mut self, after: i64) -> Result<Vec<fleet_registry::AuditEntry>, StoreError> {
        leases::audit(self.conn(), None, after)
    }

    fn audit_page(
        &mut self,
        query: &fleet_registry::AuditQuery<'_>,
    ) -> Result<Vec<fleet_registry::AuditEntry>, StoreError> {
        leases::audit_page(self.conn(), query)
    }

    fn prune_audit(&mut self, through: i64, before: Timestamp) -> Result<usize, StoreError> {
        leases::prune_audit(self.conn(), through, before)
    }

    fn decision_counts(&mut self) -> Result<Option<Vec<fleet_registry::DecisionCount>>, StoreError> {
        let mut stmt = self
            .conn()
            .prepare_cached("SELECT event, outcome, reason, n FROM lease_decision_counts")
            .map_err(map_error)?;
        let rows = stmt
            .query_map([], |r| {
                let reason: String = r.get(2)?;
                Ok(fleet_registry::DecisionCount {
                    event: r.get(0)?,
                    outcome: r.get(1)?,
                    reason: (!reason.is_empty()).then_some(reason),
                    n: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                })
            })
            .map_err(map_error)?;
        rows.map(|r| r.map_err(map_error)).collect::<Result<_, _>>().map(Some)
    }
}

impl SqliteTx<'_> {
    fn conn(&self) -> &Connection {
        self.conn
    }
}

impl SqliteStore {
    /// Fails when the registry's path no longer names the file this connection opened:
    /// `Missing` when nothing is there any more (the registry was removed, and a write to
    /// the open file would reach no one), `Unavailable` when another file is.
    fn check_file(&self) -> Result<(), StoreError> {
        if self.file.is_none() {
            return Ok(());
        }
        let now = file_identity(&self.path);
        if now == self.file {
            return Ok(());
        }
        let (kind, what) = match now {
            None => (StoreErrorKind::Missing, "removed"),
            Some(_) => (StoreErrorKind::Unavailable, "moved or replaced"),
        };
        Err(StoreError::new(kind, format!("registry {} was {what} since it was opened", self.path.display())))
    }

    /// Fails when the write-ahead log this connection uses is no longer the one at its
    /// path: what it would read or write is no longer the registry.
    fn check_log(&mut self) -> Result<(), StoreError> {
        let mut log = self.path.clone().into_os_string();
        log.push("-wal");
        let now = file_identity(Path::new(&log));
        match (self.log, now) {
            (None, _) => self.log = now,
            (Some(then), Some(now)) if then == now => {}
            (Some(_), _) => {
                return Err(StoreError::new(
                    StoreErrorKind::Unavailable,
                    format!(
                        "the write-ahead log of registry {} was removed or replaced while it was open; \
                         reopen the registry",
                        self.path.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    fn run<T, E, F>(&mut self, behavior: TransactionBehavior, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.check_file()?;
        self.check_log()?;
        let path = self.path.clone();
        let fail = |e: rusqlite::Error| match disk_trouble(&path) {
            Some(why) => {
                StoreError::with_source(StoreErrorKind::Unavailable, format!("registry error: {e}: {why}"), e)
            }
            None => map_error(e),
        };
        let tx = self.conn.transaction_with_behavior(behavior).map_err(fail)?;
        let value = f(&mut SqliteTx { conn: &tx })?;
        tx.commit().map_err(fail)?;
        Ok(value)
    }
}

impl Store for SqliteStore {
    /// SQLite plans these reads from the indexes alone, statistics or not.
    fn after_bulk_load(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.run(TransactionBehavior::Immediate, f)
    }

    /// A write with `synchronous = FULL`: in WAL mode the log is synced at this commit,
    /// so the transaction survives a power loss. Only lease transactions pay for it;
    /// heartbeats and the rest stay on `NORMAL`.
    fn write_durable<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.conn.pragma_update(None, "synchronous", "FULL").map_err(|e| E::from(map_error(e)))?;
        let result = self.run(TransactionBehavior::Immediate, f);
        // Failing to step back down costs only speed; the next durable write sets it again.
        let _ = self.conn.pragma_update(None, "synchronous", "NORMAL");
        result
    }

    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        self.run(TransactionBehavior::Deferred, f)
    }

    /// Bounds how long a call waits for another writer's lock (the busy timeout).
    fn set_call_deadline(&mut self, deadline: Option<Duration>) {
        let bound = deadline.map_or(BUSY_TIMEOUT, |d| d.min(BUSY_TIMEOUT));
        let _ = self.conn.busy_timeout(bound);
    }

    /// The file's `user_version`, judged as at open.
    fn check_schema(&mut self) -> Result<(), StoreError> {
        let version: i64 = self.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(map_error)?;
        match version {
            v if v == SCHEMA_VERSION => Ok(()),
            v if v > SCHEMA_VERSION => migrations::usable_newer(&self.conn, v),
            v => Err(migrations::older(&self.conn, v)),
        }
    }

    /// SQLite's `data_version` (which moves when another connection, in any process,
    /// commits) with this connection's own change count. A registry path that no longer
    /// names the file this connection opened is an error: the open file is no longer the
    /// registry, and nothing read from it may be served.
    fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        if self.file.is_none() {
            return Ok(None);
        }
        self.check_file()?;
        self.check_log()?;
        let others: i64 = self.conn.query_row("PRAGMA data_version", [], |r| r.get(0)).map_err(map_error)?;
        let own = self.conn.total_changes();
        Ok(Some((u128::from(others.cast_unsigned()) << 64) | u128::from(own)))
    }

    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: Claim,
    ) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(columns::heartbeat_sql()).map_err(map_error)?;
        let changed = stmt
            .execute(params![
                now.to_string(),
                who.worker_identity.as_str(),
                who.generation_id.as_str(),
                who.token.fingerprint(),
                claim.as_str(),
            ])
            .map_err(map_error)?;
        Ok(changed == 1)
    }
}
