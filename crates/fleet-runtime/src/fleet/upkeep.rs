//! The registry's upkeep as a session does it: listing every worker row, export and
//! import, pruning history (written down first), marking expired heartbeats stale, and
//! a PostgreSQL registry's replication.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use fleet_identity::{Timestamp, WorkerIdentity};
use fleet_registry::{
    AuditEntry, AuditQuery, HistoryAcceptance, ImportSummary, OpenMode, RegistryBackup, ReplicationPolicy,
    ReplicationStatus, RestoreError, StoreError, WorkerRow,
};

use super::Fleet;
use crate::clock::now;
use crate::location::{RegistryLocation, open_registry};

impl Fleet {
    /// Every worker row the registry holds, history included.
    pub fn all_workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        self.with_registry(|registry| registry.workers())
    }

    /// Up to `limit` worker rows after `after` (history included), in identity order:
    /// a page of [`Fleet::all_workers`], read from the store's index.
    pub fn workers_page(
        &mut self,
        after: Option<&WorkerIdentity>,
        limit: usize,
    ) -> Result<Vec<WorkerRow>, StoreError> {
        self.with_registry(|registry| registry.workers_page(after, limit))
    }

    /// The live fleet's worker rows (every active row, and every row of a launch that
    /// still has one), read now.
    pub fn live_workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        self.with_registry(|registry| Ok(registry.live()?.worker_registrations))
    }

    /// The whole registry as `registry export` writes it.
    pub fn export(&mut self) -> Result<RegistryBackup, StoreError> {
        self.with_registry(|registry| registry.backup())
    }

    /// Marks every active row whose heartbeat expired stale, by the store's clock:
    /// the workers marked.
    pub fn mark_expired_stale(&mut self) -> Result<Vec<WorkerIdentity>, StoreError> {
        self.with_registry(|registry| registry.mark_expired_stale(now()))
    }

    /// A PostgreSQL registry's replication as its grants meet it, after setting
    /// `policy` when one is given; `None` for a SQLite file, which does not replicate.
    pub fn replication(
        &mut self,
        policy: Option<ReplicationPolicy>,
    ) -> Result<Option<ReplicationStatus>, StoreError> {
        self.with_registry(|registry| {
            if let Some(policy) = policy {
                registry.set_replication_policy(policy)?;
            }
            registry.replication()
        })
    }

    /// Accepts the server's current history after a failover the registry could not
    /// prove lost no grant, raising the epoch floor `gap` past every epoch.
    pub fn accept_history(
        &mut self,
        gap: u64,
        by: &str,
        reason: &str,
    ) -> Result<HistoryAcceptance, StoreError> {
        self.with_registry(|registry| registry.accept_server_history(gap, by, reason))
    }

    /// Prunes history as `request` asks: what goes is written down first, durably and
    /// privately, to `request.export`; with `dry_run`, or with nothing to prune, it is
    /// only counted and no file is written.
    pub fn prune(&mut self, request: &PruneRequest) -> Result<PruneReport, PruneError> {
        let rows = match request.before {
            Some(before) => self.with_registry(|registry| registry.prunable(before))?,
            None => Vec::new(),
        };
        // Entries written after this moment are never part of this run.
        let through = self.lease_audit_page(&AuditQuery::newest(1))?.first().map_or(0, |e| e.id);
        let audit = request.audit_before.map(|t| (t, through));
        // A run with nothing to prune (a retention timer's most days) writes no file.
        let nothing =
            rows.is_empty() && !audit.map(|a| self.any_audit_entry_before(a)).transpose()?.unwrap_or(false);
        let mut report = PruneReport {
            dry_run: request.dry_run,
            before: request.before,
            audit_before: request.audit_before,
            terminal_rows: rows.len(),
            pruned: Vec::new(),
            audit_entries: 0,
            audit_entries_pruned: 0,
            export: None,
        };
        match (&request.export, request.dry_run || nothing) {
            (Some(export), false) => {
                let export = export_file(export)?;
                let exported = self.write_prune_export(&export, &rows, audit)?;
                report.pruned = self.with_registry(|registry| registry.prune(&rows))?;
                if let Some(before) = request.audit_before.filter(|_| exported > 0) {
                    report.audit_entries_pruned =
                        self.with_registry(|registry| registry.prune_audit(through, before))?;
                }
                report.audit_entries = report.audit_entries_pruned;
                report.export = Some(export);
            }
            _ => {
                if let Some(audit) = audit {
                    self.each_audit_entry_before(audit, |_| {
                        report.audit_entries += 1;
                        Ok(())
                    })?;
                }
            }
        }
        Ok(report)
    }

    /// Whether any audit entry was written before `audit.0`, up to position `audit.1`.
    fn any_audit_entry_before(&mut self, (until, through): (Timestamp, i64)) -> Result<bool, StoreError> {
        let query = AuditQuery {
            key: None,
            since: None,
            until: Some(until),
            after: 0,
            newest_first: false,
            limit: 1,
        };
        Ok(self.lease_audit_page(&query)?.first().is_some_and(|e| e.id <= through))
    }

    /// Calls `visit` with each audit entry written before `audit.0`, up to position
    /// `audit.1`, in log order, a page at a time.
    fn each_audit_entry_before(
        &mut self,
        (until, through): (Timestamp, i64),
        mut visit: impl FnMut(&AuditEntry) -> Result<(), PruneError>,
    ) -> Result<(), PruneError> {
        let mut query = AuditQuery {
            key: None,
            since: None,
            until: Some(until),
            after: 0,
            newest_first: false,
            limit: 1000,
        };
        loop {
            let page = self.lease_audit_page(&query)?;
            let page: Vec<_> = page.into_iter().filter(|e| e.id <= through).collect();
            let Some(last) = page.last() else { return Ok(()) };
            query.after = last.id;
            page.iter().try_for_each(&mut visit)?;
        }
    }

    /// Writes what a prune removes to `path` (created new and private, synced to disk),
    /// as an export `registry import` reads: the terminal `rows`, and with `audit` (a
    /// time and the newest position this run may touch) every audit entry written
    /// before that time, read and written a page at a time. Returns how many audit
    /// entries it wrote.
    fn write_prune_export(
        &mut self,
        path: &Path,
        rows: &[WorkerRow],
        audit: Option<(Timestamp, i64)>,
    ) -> Result<usize, PruneError> {
        let fail = |e: std::io::Error| PruneError::Export { path: path.to_owned(), error: e };
        // Created new (never through a link planted at the path), readable by its owner
        // alone: it holds what the registry held.
        let file =
            std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(fail)?;
        let mut out = std::io::BufWriter::new(file);
        let rows = serde_json::to_string(rows).unwrap_or_else(|_| "[]".into());
        write!(
            out,
            "{{\"instances\": [], \"worker_registrations\": {rows}, \"leases\": [], \"lease_audit_log\": ["
        )
        .map_err(fail)?;
        let mut written = 0;
        if let Some(audit) = audit {
            self.each_audit_entry_before(audit, |entry| {
                let text = serde_json::to_string(entry).unwrap_or_default();
                write!(out, "{}\n{text}", if written == 0 { "" } else { "," }).map_err(fail)?;
                written += 1;
                Ok(())
            })?;
        }
        writeln!(out, "]}}").map_err(fail)?;
        let file = out.into_inner().map_err(|e| fail(e.into_error()))?;
        file.sync_all().map_err(fail)?;
        Ok(written)
    }
}

/// What [`Fleet::prune`] removes.
#[derive(Debug, Clone, Default)]
pub struct PruneRequest {
    /// Terminal rows last seen before this time.
    pub before: Option<Timestamp>,
    /// Audit entries written before this time.
    pub audit_before: Option<Timestamp>,
    /// Where what goes is written first: a file, or a directory to make a new file
    /// in (`pruned-<moment>.json`). Without one, nothing is removed.
    pub export: Option<PathBuf>,
    /// Only count what would go.
    pub dry_run: bool,
}

/// What [`Fleet::prune`] did, or with `dry_run` would do.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Whether this was a dry run.
    pub dry_run: bool,
    /// The request's `before`.
    pub before: Option<Timestamp>,
    /// The request's `audit_before`.
    pub audit_before: Option<Timestamp>,
    /// How many terminal rows the request selects.
    pub terminal_rows: usize,
    /// The rows removed.
    pub pruned: Vec<WorkerIdentity>,
    /// How many audit entries the request selects (removed, unless a dry run).
    pub audit_entries: usize,
    /// How many audit entries were removed.
    pub audit_entries_pruned: usize,
    /// The file what was removed is written in.
    pub export: Option<PathBuf>,
}

/// Why a prune removed nothing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PruneError {
    /// The export was asked in a directory that does not exist (`DIR/`).
    #[error("--export {}: no such directory", .0.display())]
    NoSuchDirectory(PathBuf),
    /// The export file could not be written.
    #[error("cannot write {}: {error}", path.display())]
    Export {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The registry could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The file a prune writes: `path`, or in the directory `path` a new file named for
/// this moment.
fn export_file(path: &Path) -> Result<PathBuf, PruneError> {
    if !path.is_dir() {
        if path.as_os_str().to_string_lossy().ends_with('/') {
            return Err(PruneError::NoSuchDirectory(path.to_owned()));
        }
        return Ok(path.to_owned());
    }
    // 20261207T171755123Z: the date, the time to the millisecond, UTC.
    let stamp: String = now().to_string().chars().filter(char::is_ascii_alphanumeric).collect();
    Ok(path.join(format!("pruned-{stamp}.json")))
}

/// Imports an export into the registry at `location` (created if missing) as it
/// streams in from `reader`, in one transaction: a bad row anywhere leaves the registry
/// as it was, and a SQLite file the import had to create is removed again.
pub fn import_registry(
    location: &RegistryLocation,
    reader: impl std::io::Read,
) -> Result<ImportSummary, RestoreError> {
    let created = match location {
        RegistryLocation::Sqlite(path) if !path.exists() => Some(path.clone()),
        _ => None,
    };
    let imported = open_registry(location, OpenMode::CreateIfMissing)
        .map_err(RestoreError::Store)
        .and_then(|mut registry| registry.restore_from_reader(reader));
    if let (Err(_), Some(path)) = (&imported, &created) {
        for suffix in ["", "-wal", "-shm"] {
            let mut file = path.clone().into_os_string();
            file.push(suffix);
            let _ = std::fs::remove_file(file);
        }
    }
    imported
}
