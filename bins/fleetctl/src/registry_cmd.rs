//! `fleetctl registry init|upgrade|export|import|sweep|prune|replication|accept-history`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use fleet_cli::Failure;
use fleet_cli::outln;
use fleet_registry::OpenMode;
use fleet_registry::{AuditQuery, RestoreError};
use fleet_runtime::{RegistryLocation, now, open_registry};

#[derive(Debug, Subcommand)]
pub(crate) enum RegistryCmd {
    /// Create the registry; an existing one is checked (and what holds no rows of its
    /// own rebuilt), never upgraded: see `registry upgrade`.
    Init {
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the whole registry as JSON, a backup: the ledger, every worker row, every
    /// lease (initialization versions, connector bindings) and the lease audit log.
    Export,
    /// Add the rows of an export to the registry, all or nothing.
    Import {
        /// The JSON file to read (`-` for stdin).
        file: PathBuf,
        /// The largest file read, in bytes; a larger one is refused before anything is
        /// imported.
        #[arg(long, value_name = "BYTES", default_value_t = MAX_IMPORT_BYTES)]
        max_input_bytes: u64,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mark active rows whose heartbeat TTL lapsed as stale.
    Sweep {
        /// Print the marked worker identities as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove released, superseded and retired rows last seen before DATE, after writing
    /// them to an export file. Active rows and the lease audit log are never pruned.
    #[command(group = clap::ArgGroup::new("what").required(true).multiple(true).args(["before", "audit_before"]))]
    Prune {
        /// An RFC 3339 time, or a date (YYYY-MM-DD, its first instant UTC): terminal worker
        /// rows whose last sign of life is before it go.
        #[arg(long)]
        before: Option<String>,
        /// Lease audit entries written before this time go (retention), oldest first.
        #[arg(long)]
        audit_before: Option<String>,
        /// Where what is pruned is written first (a registry export that `registry import`
        /// reads; it must not exist).
        #[arg(long)]
        export: PathBuf,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Bring the registry's schema up to this build's, the one command that changes it:
    /// it keeps a copy first (SQLite: a file beside the registry; PostgreSQL: each table
    /// copied as TABLE_schema_vN beside it) and prints each step. Upgrade once every
    /// build that uses the registry reads the new version (docs/UPGRADING.md).
    Upgrade {
        /// Print the steps and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take no copy first.
        #[arg(long)]
        no_backup: bool,
        /// Print what was done as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show what the registry's grants (lease tenures, registrations) meet on a
    /// PostgreSQL server that replicates: its history (system and timeline), its
    /// standbys, the recorded history and the replication policy; or set the policy.
    Replication {
        /// Set the policy first: `local` (the default: grants refused while an
        /// asynchronous standby streams), `synchronous` (every grant confirmed by a
        /// synchronous standby; a failover carries over on its own) or `asynchronous`
        /// (grants beside asynchronous standbys, each warned of).
        #[arg(long, value_parser = crate::replication_cmd::parse_policy)]
        policy: Option<fleet_registry::ReplicationPolicy>,
        /// Print it as JSON.
        #[arg(long)]
        json: bool,
    },
    /// After a failover or restore the registry could not prove lost no grant: accept
    /// the server's new history, raising every new fencing epoch above every epoch the
    /// old history could have handed out. Run it once no holder of the old history acts.
    AcceptHistory {
        /// Why, for the record (what was checked).
        #[arg(long)]
        reason: String,
        /// Who accepts it (default: $USER@hostname).
        #[arg(long)]
        by: Option<String>,
        /// How far above the highest epoch the registry knows every new epoch starts:
        /// more than the grants any one key could have had on the lost history.
        #[arg(long, value_name = "N", default_value_t = fleet_registry::DEFAULT_EPOCH_GAP)]
        epoch_gap: u64,
        /// Print what was accepted as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(location: &RegistryLocation, cmd: RegistryCmd) -> Result<ExitCode, Failure> {
    match cmd {
        RegistryCmd::Init { json } => {
            fleet_runtime::init_registry(location)?;
            if json {
                let ready = serde_json::json!({
                    "outcome": "ready",
                    "registry": location.to_string(),
                    "schema_version": fleet_registry::SCHEMA_VERSION,
                });
                outln!("{ready}")?;
            } else {
                outln!("registry ready at {location}")?;
            }
        }
        RegistryCmd::Export => {
            let backup = open_registry(location, OpenMode::MustExist)?.backup()?;
            outln!("{}", backup.to_json())?;
        }
        RegistryCmd::Import { file, max_input_bytes, json } => {
            // Rows are checked and written as the file streams in, in one transaction:
            // a bad row anywhere, or a file past its limit, leaves the registry as it was.
            // A registry file the import had to create is removed again when it fails.
            let created = match location {
                RegistryLocation::Sqlite(path) if !path.exists() => Some(path.clone()),
                _ => None,
            };
            let imported = fleet_runtime::input::read_streamed(
                &file,
                "import file",
                max_input_bytes,
                "--max-input-bytes",
                |reader| {
                    open_registry(location, OpenMode::CreateIfMissing)
                        .map(|mut r| r.restore_from_reader(reader))
                },
            )
            .map_err(Failure::usage)??
            .map_err(|e| match e {
                RestoreError::NotJson(e) => {
                    Failure::usage(format!("import file {} is not valid JSON: {e}", file.display()))
                }
                RestoreError::Input(e) => Failure::usage(format!("{}: {e}", file.display())),
                RestoreError::Store(e) => Failure::from(e),
            });
            if let (Err(_), Some(path)) = (&imported, &created) {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(file);
                }
            }
            let summary = imported?;
            if json {
                outln!("{}", serde_json::to_string(&summary).unwrap_or_default())?;
            } else {
                outln!(
                    "imported {} instances ({} already present), {} workers, {} leases and {} audit entries",
                    summary.instances,
                    summary.instances_unchanged,
                    summary.workers,
                    summary.leases,
                    summary.audit_entries
                )?;
            }
        }
        RegistryCmd::Prune { before, audit_before, export, json } => {
            let before = before.map(|t| crate::table::instant("--before", &t)).transpose()?;
            let audit_before =
                audit_before.map(|t| crate::table::instant("--audit-before", &t)).transpose()?;
            let mut registry = open_registry(location, OpenMode::MustExist)?;
            let rows = match before {
                Some(before) => registry.prunable(before)?,
                None => Vec::new(),
            };
            // Entries written after this moment are never part of this run.
            let newest = AuditQuery::newest(1);
            let through = registry.lease_audit_page(&newest)?.first().map_or(0, |e| e.id);
            // Written down, durably, before anything is removed.
            let exported =
                write_prune_export(&export, &rows, &mut registry, audit_before.map(|t| (t, through)))?;
            let pruned = registry.prune(&rows)?;
            let audit_removed = match audit_before {
                Some(t) if exported > 0 => registry.prune_audit(through, t)?,
                _ => 0,
            };
            if json {
                let report = serde_json::json!({
                    "pruned": pruned,
                    "terminal_rows": rows.len(),
                    "before": before,
                    "audit_entries_pruned": audit_removed,
                    "audit_before": audit_before,
                    "export": export.display().to_string(),
                });
                outln!("{report}")?;
            } else {
                if let Some(before) = before {
                    outln!(
                        "pruned {} of {} terminal rows last seen before {before}",
                        pruned.len(),
                        rows.len()
                    )?;
                }
                if let Some(t) = audit_before {
                    outln!("pruned {audit_removed} audit entries written before {t}")?;
                }
                outln!("what was pruned is in {}", export.display())?;
            }
        }
        RegistryCmd::Upgrade { dry_run, no_backup, json } => {
            let report = fleet_runtime::upgrade_registry(location, dry_run, !no_backup)?;
            if json {
                outln!("{}", serde_json::to_string(&report).unwrap_or_default())?;
            } else if report.from >= report.to {
                outln!("registry {location} is at schema version {}: nothing to upgrade", report.from)?;
            } else {
                let verb = if report.dry_run { "would upgrade" } else { "upgraded" };
                outln!("{verb} registry {location} from schema version {} to {}", report.from, report.to)?;
                for step in &report.steps {
                    outln!("  step {step}")?;
                }
                match (&report.backup, report.dry_run) {
                    (Some(copy), true) => outln!("a copy of it as it is would be kept: {copy}")?,
                    (Some(copy), false) => outln!("a copy of it as it was is kept: {copy}")?,
                    (None, _) => outln!("no copy taken")?,
                }
            }
        }
        RegistryCmd::Replication { policy, json } => {
            return crate::replication_cmd::show(location, policy, json);
        }
        RegistryCmd::AcceptHistory { reason, by, epoch_gap, json } => {
            return crate::replication_cmd::accept(location, &reason, by, epoch_gap, json);
        }
        RegistryCmd::Sweep { json } => {
            let marked = open_registry(location, OpenMode::MustExist)?.mark_expired_stale(now())?;
            if json {
                outln!("{}", serde_json::json!({ "marked_stale": marked }))?;
            } else if marked.is_empty() {
                outln!("no heartbeat has expired")?;
            } else {
                for id in &marked {
                    outln!("stale: {id}")?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The largest import read by default (1 GiB: a registry with millions of audit entries).
const MAX_IMPORT_BYTES: u64 = 1 << 30;

/// Writes what a prune removes to `path` (created new, synced to disk), as an export
/// `registry import` reads: the terminal `rows`, and with `audit` (a time and the newest
/// position this run may touch) every audit entry written before that time, read and
/// written a page at a time. Returns how many audit entries it wrote.
fn write_prune_export(
    path: &std::path::Path,
    rows: &[fleet_registry::WorkerRow],
    registry: &mut fleet_registry::Registry<fleet_runtime::AnyStore>,
    audit: Option<(fleet_identity::Timestamp, i64)>,
) -> Result<usize, Failure> {
    use std::io::Write;
    let fail = |e: std::io::Error| Failure::usage(format!("cannot write {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(fail)?;
    let mut out = std::io::BufWriter::new(file);
    let rows = serde_json::to_string(rows).unwrap_or_else(|_| "[]".into());
    write!(
        out,
        "{{\"instances\": [], \"worker_registrations\": {rows}, \"leases\": [], \"lease_audit_log\": ["
    )
    .map_err(fail)?;
    let mut written = 0;
    if let Some((until, through)) = audit {
        let mut query = AuditQuery {
            key: None,
            since: None,
            until: Some(until),
            after: 0,
            newest_first: false,
            limit: 1000,
        };
        loop {
            let page = registry.lease_audit_page(&query)?;
            let page: Vec<_> = page.into_iter().filter(|e| e.id <= through).collect();
            let Some(last) = page.last() else { break };
            query.after = last.id;
            for entry in &page {
                let text = serde_json::to_string(entry).unwrap_or_default();
                write!(out, "{}\n{text}", if written == 0 { "" } else { "," }).map_err(fail)?;
                written += 1;
            }
        }
    }
    writeln!(out, "]}}").map_err(fail)?;
    let file = out.into_inner().map_err(|e| fail(e.into_error()))?;
    file.sync_all().map_err(fail)?;
    Ok(written)
}
