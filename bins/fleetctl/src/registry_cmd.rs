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
    /// Remove released, superseded and retired rows last seen before a time, after
    /// writing them to an export file. Active rows are never pruned; lease audit entries
    /// only with --audit-before. Run on a timer, it is the registry's retention
    /// (docs/OPERATIONS.md, "Retention").
    #[command(group = clap::ArgGroup::new("what").required(true).multiple(true).args(["before", "audit_before"]))]
    Prune {
        /// Terminal worker rows whose last sign of life is before this go: an RFC 3339
        /// time, a date (YYYY-MM-DD, its first instant UTC) or an age before now (90d).
        #[arg(long)]
        before: Option<String>,
        /// Lease audit entries written before this go, oldest first (a time, a date or
        /// an age before now).
        #[arg(long)]
        audit_before: Option<String>,
        /// Where what is pruned is written first, readable by its owner alone: a new file,
        /// or a directory in which one named for the moment is made
        /// (`pruned-20261207T171755123Z.json`). A registry export `registry import` reads.
        #[arg(long, required_unless_present = "dry_run")]
        export: Option<PathBuf>,
        /// Say what would be pruned, and change nothing.
        #[arg(long)]
        dry_run: bool,
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
                    "schema_version": location.schema_version(),
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
                    "imported {} ({} already present), {}, {} and {}",
                    fleet_cli::count(summary.instances, "instance", "instances"),
                    summary.instances_unchanged,
                    fleet_cli::count(summary.workers, "worker", "workers"),
                    fleet_cli::count(summary.leases, "lease", "leases"),
                    fleet_cli::count(summary.audit_entries, "audit entry", "audit entries")
                )?;
            }
        }
        RegistryCmd::Prune { before, audit_before, export, dry_run, json } => {
            return prune(location, before.as_deref(), audit_before.as_deref(), export, dry_run, json);
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

/// `registry prune`: what goes is written down, durably and privately, before anything
/// is removed; with `dry_run`, only counted.
fn prune(
    location: &RegistryLocation,
    before: Option<&str>,
    audit_before: Option<&str>,
    export: Option<PathBuf>,
    dry_run: bool,
    json: bool,
) -> Result<ExitCode, Failure> {
    let before = before.map(|t| crate::table::instant("--before", t)).transpose()?;
    let audit_before = audit_before.map(|t| crate::table::instant("--audit-before", t)).transpose()?;
    let mut registry = open_registry(location, OpenMode::MustExist)?;
    let rows = match before {
        Some(before) => registry.prunable(before)?,
        None => Vec::new(),
    };
    // Entries written after this moment are never part of this run.
    let through = registry.lease_audit_page(&AuditQuery::newest(1))?.first().map_or(0, |e| e.id);
    let audit = audit_before.map(|t| (t, through));
    // A run with nothing to prune (a retention timer's most days) writes no file.
    let nothing = rows.is_empty()
        && !audit.map(|a| any_audit_entry_before(&mut registry, a)).transpose()?.unwrap_or(false);
    let (pruned, audit_entries, export) = match (dry_run || nothing, export) {
        (false, Some(export)) => {
            let export = export_file(&export)?;
            let exported = write_prune_export(&export, &rows, &mut registry, audit)?;
            let pruned = registry.prune(&rows)?;
            let audit_removed = match audit_before {
                Some(t) if exported > 0 => registry.prune_audit(through, t)?,
                _ => 0,
            };
            (pruned, audit_removed, Some(export))
        }
        _ => {
            let mut counted = 0;
            if let Some(audit) = audit {
                each_audit_entry_before(&mut registry, audit, |_| {
                    counted += 1;
                    Ok(())
                })?;
            }
            (Vec::new(), counted, None)
        }
    };
    let verb = if dry_run { "would prune" } else { "pruned" };
    if json {
        let report = serde_json::json!({
            "dry_run": dry_run,
            "terminal_rows": rows.len(),
            "pruned": pruned,
            "before": before,
            "audit_entries": audit_entries,
            "audit_entries_pruned": if dry_run { 0 } else { audit_entries },
            "audit_before": audit_before,
            "export": export.as_ref().map(|e| e.display().to_string()),
        });
        outln!("{report}")?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(before) = before {
        let count = if dry_run { rows.len() } else { pruned.len() };
        outln!("{verb} {count} of {} terminal rows last seen before {before}", rows.len())?;
    }
    if let Some(t) = audit_before {
        outln!("{verb} {audit_entries} audit entries written before {t}")?;
    }
    if let Some(export) = export {
        outln!("what was pruned is in {}", export.display())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The file a prune writes: `path`, or in the directory `path` a new file named for
/// this moment.
fn export_file(path: &std::path::Path) -> Result<PathBuf, Failure> {
    if !path.is_dir() {
        if path.as_os_str().to_string_lossy().ends_with('/') {
            return Err(Failure::usage(format!("--export {}: no such directory", path.display())));
        }
        return Ok(path.to_owned());
    }
    // 20261207T171755123Z: the date, the time to the millisecond, UTC.
    let stamp: String = now().to_string().chars().filter(char::is_ascii_alphanumeric).collect();
    Ok(path.join(format!("pruned-{stamp}.json")))
}

/// Whether any audit entry was written before `audit.0`, up to position `audit.1`.
fn any_audit_entry_before(
    registry: &mut fleet_registry::Registry<fleet_runtime::AnyStore>,
    (until, through): (fleet_identity::Timestamp, i64),
) -> Result<bool, Failure> {
    let query =
        AuditQuery { key: None, since: None, until: Some(until), after: 0, newest_first: false, limit: 1 };
    Ok(registry.lease_audit_page(&query)?.first().is_some_and(|e| e.id <= through))
}

/// Calls `visit` with each audit entry written before `audit.0`, up to position
/// `audit.1`, in log order, a page at a time.
fn each_audit_entry_before(
    registry: &mut fleet_registry::Registry<fleet_runtime::AnyStore>,
    (until, through): (fleet_identity::Timestamp, i64),
    mut visit: impl FnMut(&fleet_registry::AuditEntry) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let mut query =
        AuditQuery { key: None, since: None, until: Some(until), after: 0, newest_first: false, limit: 1000 };
    loop {
        let page = registry.lease_audit_page(&query)?;
        let page: Vec<_> = page.into_iter().filter(|e| e.id <= through).collect();
        let Some(last) = page.last() else { return Ok(()) };
        query.after = last.id;
        page.iter().try_for_each(&mut visit)?;
    }
}

/// Writes what a prune removes to `path` (created new and private, synced to disk), as
/// an export `registry import` reads: the terminal `rows`, and with `audit` (a time and
/// the newest position this run may touch) every audit entry written before that time,
/// read and written a page at a time. Returns how many audit entries it wrote.
fn write_prune_export(
    path: &std::path::Path,
    rows: &[fleet_registry::WorkerRow],
    registry: &mut fleet_registry::Registry<fleet_runtime::AnyStore>,
    audit: Option<(fleet_identity::Timestamp, i64)>,
) -> Result<usize, Failure> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt as _;
    let fail = |e: std::io::Error| Failure::usage(format!("cannot write {}: {e}", path.display()));
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
        each_audit_entry_before(registry, audit, |entry| {
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
