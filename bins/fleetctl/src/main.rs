//! `fleetctl`: the operator's tool. Thin by design: parse arguments, open the registry,
//! call a library, print a table or JSON.

mod connector_cmd;
mod demo;
mod examples;
mod host_cmd;
mod http;
mod init_cmd;
mod lease_cmd;
mod metrics_cmd;
mod notify;
mod observe;
mod output;
mod registry_cmd;
mod replication_cmd;
mod retire_cmd;
mod serve_cmd;
mod snapshot_cmd;
mod status_page;
mod table;
mod watch;
mod worker_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fleet_cli::Failure;
use fleet_runtime::RegistryLocation;

/// mimalloc: a snapshot, plan or answer of a large fleet makes hundreds of thousands of
/// small allocations, which it serves in about half the time of the system allocator
/// (docs/PERFORMANCE.md, "What makes it so").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const EXAMPLES: &str = "Examples:
  fleetctl demo                                   a guided tour on a throw-away registry
  fleetctl snapshot --gate                        exit 1 unless the fleet is safe to mutate
  fleetctl worker list --namespace reconciler     who is registered, one namespace
  fleetctl retire plan                            a dry run; then retire apply with its tokens
  fleetctl lease show --key init:schema           an initialization's status and version
  fleetctl completions bash > ~/.local/share/bash-completion/completions/fleetctl";

#[derive(Debug, Parser)]
#[command(
    name = "fleetctl",
    version = fleet_runtime::version_line(),
    about = "Keep a fleet of agent worker processes honest",
    after_help = format!("{EXAMPLES}\n\n{}", fleet_cli::EXIT_CODES_HELP)
)]
struct Cli {
    /// How log events are written to stderr; RUST_LOG chooses which (default warn,
    /// info shows every mutation and refusal).
    #[arg(long, global = true, value_enum, default_value_t = fleet_cli::LogFormat::Human)]
    log_format: fleet_cli::LogFormat,
    /// Registry location: a SQLite file, sqlite://PATH or postgres://…
    /// (default: $XDG_STATE_HOME/fleetward/registry.sqlite3).
    #[arg(long, global = true, env = "FLEET_REGISTRY", hide_env_values = true)]
    registry: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Create, back up, restore and sweep the registry.
    #[command(subcommand)]
    Registry(registry_cmd::RegistryCmd),
    /// Run a worker under registration, or list the registered workers.
    #[command(subcommand)]
    Worker(worker_cmd::WorkerCmd),
    /// Take the fleet health snapshot: is the fleet safe to mutate, and if not, why.
    Snapshot(snapshot_cmd::SnapshotArgs),
    /// List the fleet's hosts, and fence one that is gone for good.
    #[command(subcommand)]
    Host(host_cmd::HostCmd),
    /// Retire stale rows on proof that their process is gone: plan first, then apply.
    #[command(subcommand)]
    Retire(retire_cmd::RetireCmd),
    /// Acquire, renew, release, take over, show and audit fenced leases.
    #[command(subcommand)]
    Lease(lease_cmd::LeaseCmd),
    /// Hold a connector binding and run a command under a validated execution grant.
    #[command(subcommand)]
    Connector(connector_cmd::ConnectorCmd),
    /// Run CMD exactly once per version across any number of concurrent starters.
    Initialize(init_cmd::InitArgs),
    /// A guided tour on a throw-away registry: a real small fleet, a crash, the sweep.
    Demo {
        /// Keep the demo's registry in this directory instead of a temporary one.
        #[arg(long)]
        keep: Option<std::path::PathBuf>,
    },
    /// Print the fleet in the Prometheus text exposition format.
    Metrics(metrics_cmd::MetricsArgs),
    /// Serve the metrics at http://ADDR/metrics for Prometheus to scrape (loopback by default).
    Serve(serve_cmd::ServeArgs),
    /// Print shell completions for fleetctl.
    Completions {
        /// The shell.
        shell: fleet_cli::manuals::Shell,
    },
    /// Print fleetctl's manual page (roff), or with --dir write a page for fleetctl and
    /// one for every subcommand into DIR, e.g. `fleetctl man --dir ~/.local/share/man/man1`.
    Man {
        /// Where to write every page (fleetctl.1, fleetctl-registry.1, …).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        dir: Option<std::path::PathBuf>,
    },
    /// Internal: hold a worker until `worker run` has registered it, then become it.
    #[command(name = "__gate", hide = true)]
    Gate {
        #[arg(long)]
        owner_pid: i32,
        #[arg(required = true, last = true)]
        command: Vec<std::ffi::OsString>,
    },
    /// Internal: run a command as the keeper of its whole process tree.
    #[command(name = "__keep", hide = true)]
    Keep {
        #[arg(long)]
        owner_pid: i32,
        #[arg(long, requires = "grace_ms")]
        lease_fd: Option<i32>,
        #[arg(long)]
        grace_ms: Option<u64>,
        #[arg(required = true, last = true)]
        command: Vec<std::ffi::OsString>,
    },
}

fn main() -> ExitCode {
    match fleet_cli::parse_args_with::<Cli>(command_with_examples)
        .and_then(run)
        .and_then(|done| fleet_cli::flush_stdout().map(|()| done))
    {
        Ok(code) => code,
        Err(failure) => failure.report("fleetctl"),
    }
}

/// fleetctl's command with an example in every subcommand's help.
fn command_with_examples(cmd: clap::Command) -> clap::Command {
    fleet_cli::manuals::with_examples(cmd, examples::EXAMPLES)
}

fn run(cli: Cli) -> Result<ExitCode, Failure> {
    // The internal commands run inside a child's environment and need no registry.
    match &cli.command {
        Cmd::Gate { owner_pid, command } => return Ok(fleet_runtime::keeper::gate(*owner_pid, command)),
        Cmd::Keep { owner_pid, lease_fd, grace_ms, command } => {
            let lease = lease_fd.zip(grace_ms.map(std::time::Duration::from_millis));
            return Ok(fleet_runtime::keeper::keep(
                fleet_runtime::keeper::KeepOptions { owner: *owner_pid, lease },
                command,
            ));
        }
        _ => {}
    }
    fleet_cli::init_logging(cli.log_format);
    if matches!(cli.command, Cmd::Demo { .. }) && cli.registry.is_some() {
        fleet_cli::warn(format_args!(
            "fleetctl: the demo runs on a throw-away registry of its own; --registry / FLEET_REGISTRY are not used"
        ));
    }
    let location = RegistryLocation::resolve(cli.registry.as_deref())?;
    match cli.command {
        Cmd::Registry(cmd) => registry_cmd::run(&location, cmd),
        Cmd::Worker(cmd) => worker_cmd::run(&location, cmd),
        Cmd::Snapshot(args) => snapshot_cmd::run(&location, args),
        Cmd::Lease(cmd) => lease_cmd::run(&location, cmd),
        Cmd::Retire(cmd) => retire_cmd::run(&location, cmd),
        Cmd::Host(cmd) => host_cmd::run(&location, cmd),
        Cmd::Initialize(args) => init_cmd::run(&location, args),
        Cmd::Connector(cmd) => connector_cmd::run(&location, cmd),
        Cmd::Demo { keep } => demo::run(keep),
        Cmd::Gate { .. } | Cmd::Keep { .. } => Ok(ExitCode::SUCCESS),
        Cmd::Metrics(args) => metrics_cmd::print(&location, &args),
        Cmd::Serve(args) => serve_cmd::serve(&location, args),
        Cmd::Completions { shell } => {
            let command = command_with_examples(<Cli as clap::CommandFactory>::command());
            fleet_cli::out!("{}", fleet_cli::manuals::completions(command, shell))?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Man { dir } => {
            let command = command_with_examples(<Cli as clap::CommandFactory>::command());
            match dir {
                Some(dir) => {
                    for page in fleet_cli::manuals::write_manuals(command, &dir)? {
                        fleet_cli::outln!("{}", page.display())?;
                    }
                }
                None => fleet_cli::out!("{}", fleet_cli::manuals::manual(command)?)?,
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
