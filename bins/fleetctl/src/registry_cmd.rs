//! `fleetctl registry init|upgrade|export|import|sweep|prune|replication|accept-history`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use fleet_cli::Failure;
use fleet_cli::outln;
use fleet_registry::RestoreError;
use fleet_runtime::{Fleet, PruneRequest, RegistryLocation};

use crate::output::{self, ResultArgs, ResultFormat};

#[derive(Debug, Subcommand)]
pub(crate) enum RegistryCmd {
    /// Create the registry; an existing one is checked (and what holds no rows of its
    /// own rebuilt), never upgraded: see `registry upgrade`.
    Init {
        #[command(flatten)]
        output: ResultArgs,
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
        #[command(flatten)]
        output: ResultArgs,
    },
    /// Mark active rows whose heartbeat TTL lapsed as stale.
    Sweep {
        #[command(flatten)]
        output: ResultArgs,
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
        #[command(flatten)]
        output: ResultArgs,
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
        #[command(flatten)]
        output: ResultArgs,
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
        #[command(flatten)]
        output: ResultArgs,
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
        #[command(flatten)]
        output: ResultArgs,
    },
}

pub(crate) fn run(location: &RegistryLocation, cmd: RegistryCmd) -> Result<ExitCode, Failure> {
    match cmd {
        RegistryCmd::Init { output } => {
            fleet_runtime::init_registry(location)?;
            if let Some(format) = output.format() {
                let ready = serde_json::json!({
                    "outcome": "ready",
                    "registry": location.to_string(),
                    "schema_version": location.schema_version(),
                });
                output::print_result(format, &ready)?;
            } else {
                outln!("registry ready at {location}")?;
            }
        }
        RegistryCmd::Export => {
            let backup = Fleet::new(location.clone()).export()?;
            outln!("{}", backup.to_json())?;
        }
        RegistryCmd::Import { file, max_input_bytes, output } => {
            // Rows are checked and written as the file streams in, in one transaction:
            // a bad row anywhere, or a file past its limit, leaves the registry as it was.
            let summary = fleet_runtime::input::read_streamed(
                &file,
                "import file",
                max_input_bytes,
                "--max-input-bytes",
                |reader| fleet_runtime::import_registry(location, reader),
            )
            .map_err(Failure::usage)?
            .map_err(|e| match e {
                RestoreError::NotJson(e) => {
                    Failure::usage(format!("import file {} is not valid JSON: {e}", file.display()))
                }
                RestoreError::Input(e) => Failure::usage(format!("{}: {e}", file.display())),
                RestoreError::Store(e) => Failure::from(e),
                other => Failure::usage(format!("{}: {other}", file.display())),
            })?;
            if let Some(format) = output.format() {
                output::print_result(format, &summary)?;
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
        RegistryCmd::Prune { before, audit_before, export, dry_run, output } => {
            let format = output.format();
            return prune(location, before.as_deref(), audit_before.as_deref(), export, dry_run, format);
        }
        RegistryCmd::Upgrade { dry_run, no_backup, output } => {
            let report = fleet_runtime::upgrade_registry(location, dry_run, !no_backup)?;
            if let Some(format) = output.format() {
                output::print_result(format, &report)?;
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
        RegistryCmd::Replication { policy, output } => {
            return crate::replication_cmd::show(location, policy, output.format());
        }
        RegistryCmd::AcceptHistory { reason, by, epoch_gap, output } => {
            return crate::replication_cmd::accept(location, &reason, by, epoch_gap, output.format());
        }
        RegistryCmd::Sweep { output } => {
            let marked = Fleet::new(location.clone()).mark_expired_stale()?;
            if let Some(format) = output.format() {
                output::print_result(format, &serde_json::json!({ "marked_stale": marked }))?;
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
    format: Option<ResultFormat>,
) -> Result<ExitCode, Failure> {
    let before = before.map(|t| crate::table::instant("--before", t)).transpose()?;
    let audit_before = audit_before.map(|t| crate::table::instant("--audit-before", t)).transpose()?;
    let request = PruneRequest { before, audit_before, export, dry_run };
    let report = Fleet::new(location.clone()).prune(&request)?;
    if let Some(format) = format {
        output::print_result(format, &report)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would prune" } else { "pruned" };
    if let Some(before) = before {
        let count = if dry_run { report.terminal_rows } else { report.pruned.len() };
        outln!("{verb} {count} of {} terminal rows last seen before {before}", report.terminal_rows)?;
    }
    if let Some(t) = audit_before {
        outln!("{verb} {} audit entries written before {t}", report.audit_entries)?;
    }
    if let Some(export) = &report.export {
        outln!("what was pruned is in {}", export.display())?;
    }
    Ok(ExitCode::SUCCESS)
}
