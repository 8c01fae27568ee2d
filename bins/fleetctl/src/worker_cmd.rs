//! `fleetctl worker run` registers a child process as a namespace worker, heartbeats
//! while it runs and releases it when it exits; `fleetctl worker list` shows the rows.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::Subcommand;
use fleet_cli::Failure;
use fleet_cli::out;
use fleet_identity::{Namespace, Pid, Repository, Timestamp, WorkerIdentity};
use fleet_registry::{HeartbeatTtl, Revisions, WorkerRow};
use fleet_runtime::{Fleet, InstanceEnv, RegistryLocation, WorkerOptions, WorkerSession, now};

use crate::output::{self, OutputArgs};
use crate::table;
use crate::watch::WatchArgs;
use fleet_runtime::keeper::HeldChild;

#[derive(Debug, Subcommand)]
pub(crate) enum WorkerCmd {
    /// Run CMD as a namespace worker of the launch in the environment.
    Run {
        /// The namespace the worker serves.
        #[arg(long, env = "FLEET_NAMESPACE", value_parser = fleet_cli::namespace_parser())]
        namespace: Namespace,
        /// Seconds a heartbeat stays valid; the worker beats every third of it.
        #[arg(long, default_value_t = 30, value_parser = parse_ttl)]
        ttl: u32,
        /// Repository the worker is bound to (default: the current directory).
        #[arg(long, env = "FLEET_REPOSITORY")]
        repository: Option<String>,
        /// The worker command and its arguments.
        #[arg(required = true, last = true)]
        command: Vec<OsString>,
    },
    /// List the registered workers.
    List {
        /// Only the workers of this instance.
        #[arg(long)]
        instance: Option<String>,
        /// Only the workers of this namespace.
        #[arg(long, value_parser = fleet_cli::namespace_parser())]
        namespace: Option<Namespace>,
        /// Only rows of this status.
        #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["active", "released", "superseded", "retired"]))]
        status: Option<String>,
        /// Only the live fleet, as the snapshot reads it: the active rows and the other
        /// rows of their launches, from the index, without the history of ended launches.
        #[arg(long)]
        live: bool,
        /// At most N rows (those the filters select), in identity order, read a page at
        /// a time: a registry of any history is listed in bounded memory. When more
        /// remain, stderr says the --after that lists the next ones.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        limit: Option<u64>,
        /// Only rows whose identity comes after this one (the --after a limited listing
        /// printed).
        #[arg(long, value_name = "WORKER")]
        after: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        watch: WatchArgs,
    },
}

fn parse_ttl(s: &str) -> Result<u32, String> {
    let secs: u32 = s.parse().map_err(|_| format!("{s:?} is not a whole number of seconds"))?;
    HeartbeatTtl::from_secs(secs).map(|t| t.secs()).map_err(|e| e.to_string())
}

pub(crate) fn run(location: &RegistryLocation, cmd: WorkerCmd) -> Result<ExitCode, Failure> {
    match cmd {
        WorkerCmd::Run { namespace, ttl, repository, command } => {
            run_worker(location, namespace, ttl, repository, &command)
        }
        WorkerCmd::List { instance, namespace, status, live, limit, after, output, watch } => {
            let after = after
                .map(|a| WorkerIdentity::new(a).map_err(|e| Failure::usage(format!("--after: {e}"))))
                .transpose()?;
            let keep = |r: &WorkerRow| {
                instance.as_deref().is_none_or(|i| r.client_instance_id.as_deref() == Some(i))
                    && namespace.is_none_or(|ns| r.namespace == ns)
                    && status.as_deref().is_none_or(|s| r.status.as_str() == s)
            };
            let mut fleet = Fleet::new(location.clone());
            let mut frame = || -> Result<String, Failure> {
                let rows = match (limit, &after) {
                    (None, None) => {
                        let mut rows = if live { fleet.live_workers()? } else { fleet.all_workers()? };
                        rows.retain(keep);
                        rows
                    }
                    _ => {
                        let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
                        let (rows, more) = page_of(&mut fleet, live, after.clone(), limit, keep)?;
                        if let Some(next) = more {
                            fleet_cli::warn(format_args!(
                                "fleetctl: more rows: list them with --after {next}"
                            ));
                        }
                        rows
                    }
                };
                let at = now();
                let table = |wide| if wide { list_table_wide(&rows, at) } else { list_table(&rows, at) };
                let names = sorted(&rows).into_iter().map(|r| r.worker_identity.as_str());
                output::listing(output.format(), table, &rows, "worker", names)
            };
            if watch.watch {
                crate::watch::watch(&watch, frame)?;
            } else {
                out!("{}", frame()?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Up to `limit` rows after `after` that `keep` selects, in identity order, read from
/// the store a page at a time (the live fleet, read whole, is cut the same way); and the
/// identity to list on from when more may remain.
fn page_of(
    fleet: &mut Fleet,
    live: bool,
    mut after: Option<WorkerIdentity>,
    limit: usize,
    keep: impl Fn(&WorkerRow) -> bool,
) -> Result<(Vec<WorkerRow>, Option<WorkerIdentity>), Failure> {
    /// Rows read from the store at a time.
    const PAGE: usize = 1000;
    let mut rows = Vec::new();
    if live {
        let mut live_rows = fleet.live_workers()?;
        live_rows.retain(|r| after.as_ref().is_none_or(|a| r.worker_identity > *a) && keep(r));
        let more = live_rows.len() > limit;
        live_rows.truncate(limit);
        let next = more.then(|| live_rows.last().map(|r| r.worker_identity.clone())).flatten();
        return Ok((live_rows, next));
    }
    loop {
        let page = fleet.workers_page(after.as_ref(), PAGE)?;
        let full = page.len() == PAGE;
        after = page.last().map(|r| r.worker_identity.clone());
        for row in page {
            if rows.len() == limit {
                // A selected row past the limit: there are more.
                if keep(&row) {
                    let next = rows.last().map(|r: &WorkerRow| r.worker_identity.clone());
                    return Ok((rows, next));
                }
                continue;
            }
            if keep(&row) {
                rows.push(row);
            }
        }
        if !full {
            return Ok((rows, None));
        }
    }
}

fn run_worker(
    location: &RegistryLocation,
    namespace: Namespace,
    ttl: u32,
    repository: Option<String>,
    command: &[OsString],
) -> Result<ExitCode, Failure> {
    // Everything that can be refused is checked before the registry is touched.
    let env = InstanceEnv::from_process()?;
    let heartbeat_ttl = HeartbeatTtl::from_secs(ttl).map_err(|e| Failure::usage(e.to_string()))?;
    let repository = match repository {
        Some(r) => r,
        None => std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map(|p| p.display().to_string())
            .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?,
    };
    let repository = Repository::new(repository).map_err(|e| Failure::usage(e.to_string()))?;
    let (program, args) = command.split_first().ok_or_else(|| Failure::usage("no worker command"))?;
    fleet_runtime::keeper::check_executable(program).map_err(Failure::usage)?;

    // The worker process is created held: registered first, then let run, so it never
    // runs unregistered; and it dies with this supervisor.
    let held = HeldChild::spawn(program, args)
        .map_err(|e| Failure::usage(format!("cannot start {}: {e}", program.to_string_lossy())))?;
    let child_pid = i32::try_from(held.id()).unwrap_or(0);
    // Watched from before the registration, so a stop asked for at any moment reaches
    // the worker (or its gate) and counts as asked for.
    // Forwarded to the worker (or its gate) and noted as asked for.
    let asked = match fleet_runtime::keeper::watch_stop_signals(Some(child_pid)) {
        Ok(asked) => asked,
        Err(e) => {
            held.abort();
            return Err(Failure::store(format!("cannot watch signals to forward: {e}")));
        }
    };
    let registered =
        Pid::new(i64::from(child_pid)).map_err(|e| Failure::usage(e.to_string())).and_then(|pid| {
            let process = fleet_runtime::process::process_identity(pid)
                .map_err(|e| Failure::store(format!("cannot read the worker's process evidence: {e}")))?;
            let options = WorkerOptions {
                namespace,
                process,
                heartbeat_ttl,
                repository: Some(repository),
                revisions: revisions(),
                launch: fleet_runtime::LaunchProcess::from_env()
                    .map_err(|e| Failure::usage(e.to_string()))?,
            };
            Ok(WorkerSession::start(location, &env, options)?)
        });
    let session = match registered {
        Ok(session) => session,
        Err(e) => {
            // Nothing was registered: the worker never runs.
            held.abort();
            return Err(e);
        }
    };
    let mut child = match held.release() {
        Ok(child) => child,
        Err(e) => {
            let _ = session.release();
            return Err(Failure::store(format!("cannot start the registered worker: {e}")));
        }
    };

    // No worker runs unseen: once its row is retired, superseded or removed behind its
    // back (the heartbeat says so within one beat), its command is ended.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if session.registration_lost() => {
                fleet_runtime::keeper::stop_kept(&mut child);
                let worker = session.row().worker_identity.clone();
                let why = session.lost_because().unwrap_or("retired, superseded or removed").to_owned();
                session.abandon();
                return Err(Failure::refused(format!(
                    "worker {worker} is no longer registered ({why}); its command was stopped"
                )));
            }
            Ok(None) => {
                // As a container's pid 1, the orphans the kernel hands this process.
                if fleet_runtime::keeper::is_namespace_init() {
                    fleet_runtime::keeper::reap_orphans_but(child.id());
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(Failure::store(format!("cannot wait for the worker: {e}"))),
        }
    };
    match (status.code(), status.signal()) {
        (Some(code), _) => {
            session.release()?;
            Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
        }
        (None, Some(sig)) if sig == asked.load(Ordering::SeqCst) => {
            // Stopped by the signal an operator or supervisor sent (and this supervisor
            // forwarded): a clean stop, so the row is released.
            session.release()?;
            Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)))
        }
        (None, Some(sig)) => {
            // Death by a signal nobody asked for is a crash: the row stays until its TTL
            // lapses and the sweep marks it stale, so the crash stays visible.
            session.abandon();
            Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(255)))
        }
        (None, None) => {
            session.abandon();
            Ok(ExitCode::from(1))
        }
    }
}

fn revisions() -> Revisions {
    let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
    Revisions {
        code: Some(var("FLEET_CODE_REVISION").unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())),
        config: var("FLEET_CONFIG_REVISION"),
        profile: var("FLEET_PROFILE_REVISION"),
        schema: Some(fleet_registry::SCHEMA_VERSION.to_string()),
    }
}

fn heartbeat_cell(row: &WorkerRow, now: Timestamp) -> String {
    match (row.heartbeat(), row.expires_at()) {
        (Some(_), Some(expires)) if now > expires => format!("expired {}", table::relative(expires, now)),
        (Some(beat), _) => table::relative(beat, now),
        (None, _) => {
            row.last_heartbeat_at.clone().map_or_else(|| "-".into(), |raw| format!("unparsable {raw:?}"))
        }
    }
}

/// The rows in the order every listing shows them: by instance, namespace, identity.
fn sorted(rows: &[WorkerRow]) -> Vec<&WorkerRow> {
    let mut sorted: Vec<&WorkerRow> = rows.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.client_instance_id, a.namespace, &a.worker_identity).cmp(&(
            &b.client_instance_id,
            b.namespace,
            &b.worker_identity,
        ))
    });
    sorted
}

const LIST_HEADER: [&str; 7] = ["INSTANCE", "NAMESPACE", "WORKER", "PID", "STATUS", "OWNERSHIP", "HEARTBEAT"];

fn list_cells(row: &WorkerRow, now: Timestamp) -> Vec<String> {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    vec![
        opt(row.client_instance_id.clone()),
        row.namespace.to_string(),
        row.worker_identity.to_string(),
        opt(row.pid.map(|p| p.to_string())),
        row.status.to_string(),
        opt(row.ownership_state.map(|o| o.to_string())),
        heartbeat_cell(row, now),
    ]
}

pub(crate) fn list_table(rows: &[WorkerRow], now: Timestamp) -> String {
    let cells: Vec<Vec<String>> = sorted(rows).into_iter().map(|r| list_cells(r, now)).collect();
    table::render(&LIST_HEADER, &cells)
}

/// The table with every value whole, and where each worker runs and since when.
fn list_table_wide(rows: &[WorkerRow], now: Timestamp) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let cells: Vec<Vec<String>> = sorted(rows)
        .into_iter()
        .map(|r| {
            let mut cells = list_cells(r, now);
            cells.extend([
                opt(r.host_id.as_ref().map(ToString::to_string)),
                opt(r.generation_id.as_ref().map(ToString::to_string)),
                opt(r.fencing_epoch.map(|e| e.to_string())),
                r.registered_at.to_string(),
            ]);
            cells
        })
        .collect();
    let mut header = LIST_HEADER.to_vec();
    header.extend(["HOST", "GENERATION", "EPOCH", "REGISTERED"]);
    table::render_whole(&header, &cells)
}
