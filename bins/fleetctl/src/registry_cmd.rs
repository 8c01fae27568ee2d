//! `fleetctl registry init|export|import|sweep`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use fleet_registry::OpenMode;
use fleet_registry::{RegistryBackup, RegistryDump};
use fleet_runtime::outln;
use fleet_runtime::{Failure, RegistryLocation, now, open_registry};

#[derive(Debug, Subcommand)]
pub(crate) enum RegistryCmd {
    /// Create the registry (or bring an existing one up to date).
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
    Prune {
        /// An RFC 3339 time, or a date (YYYY-MM-DD, its first instant UTC): rows whose last
        /// sign of life is before it go.
        #[arg(long)]
        before: String,
        /// Where the pruned rows are written first (a registry export; it must not exist).
        #[arg(long)]
        export: PathBuf,
        /// Print the outcome as JSON.
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
            let value =
                fleet_runtime::input::read_json(&file, "import file", max_input_bytes, "--max-input-bytes")
                    .map_err(Failure::usage)?;
            let backup = RegistryBackup::from_value(value)
                .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
            let summary = open_registry(location, OpenMode::CreateIfMissing)?.restore(&backup)?;
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
        RegistryCmd::Prune { before, export, json } => {
            let before = crate::table::instant("--before", &before)?;
            let mut registry = open_registry(location, OpenMode::MustExist)?;
            let rows = registry.prunable(before)?;
            // Written down, durably, before anything is removed.
            let dump = RegistryDump { instances: Vec::new(), worker_registrations: rows.clone() };
            write_new_file(&export, &dump.to_json())?;
            let pruned = registry.prune(&rows)?;
            if json {
                let report = serde_json::json!({
                    "pruned": pruned,
                    "terminal_rows": rows.len(),
                    "before": before,
                    "export": export.display().to_string(),
                });
                outln!("{report}")?;
            } else {
                outln!(
                    "pruned {} of {} terminal rows last seen before {before}; they are in {}",
                    pruned.len(),
                    rows.len(),
                    export.display()
                )?;
            }
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

/// Creates `path` (refusing to overwrite) with `text`, synced to disk.
fn write_new_file(path: &std::path::Path, text: &str) -> Result<(), Failure> {
    use std::io::Write;
    let fail = |e: std::io::Error| Failure::usage(format!("cannot write {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(fail)?;
    file.write_all(text.as_bytes()).and_then(|()| file.sync_all()).map_err(fail)
}
