//! `fleet-mcp --namespace NS`: one namespace worker per process, an MCP server on stdio.
//! It registers itself from the instance environment, heartbeats, serves the fleet
//! tools under profiles.json, and releases its registration when stdin closes or it is
//! told to stop. A worker that cannot register still serves diagnostic reads.

use fleet_mcp::registration::{AttemptError, Registrar};
use fleet_mcp::{profiles, server, stdio};

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::Parser;
use fleet_cli::Failure;
use fleet_identity::{Namespace, Repository};
use fleet_registry::{HeartbeatTtl, Revisions};
use fleet_runtime::{
    AgentClient, EnvError, InstanceEnv, RegistryLocation, WorkerOptions, WorkerSession, vars,
};
use rmcp::ServiceExt;

/// mimalloc: a snapshot, plan or answer of a large fleet makes hundreds of thousands of
/// small allocations, which it serves in about half the time of the system allocator
/// (docs/PERFORMANCE.md, "What makes it so").
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "fleet-mcp",
    version = fleet_runtime::version_line(),
    about = "Fleetward MCP server: one namespace worker on stdio",
    after_help = format!(
        "Agent clients start it from the entries `fleet-launch install --client X` writes; each session\n\
         starts with `fleet-launch run --client TYPE -- APP`, which hands it the launch's identity.\n\n\
         Examples:\n  \
         fleet-launch install --client codex && fleet-launch run --client codex -- codex\n  \
         fleet-mcp --namespace reconciler --profiles ~/.config/fleetward/profiles.json\n\n{}",
        fleet_cli::SERVER_EXIT_CODES_HELP
    )
)]
struct Cli {
    /// How log events are written to stderr; RUST_LOG chooses which (default warn,
    /// info shows every mutation and refusal).
    #[arg(long, value_enum, default_value_t = fleet_cli::LogFormat::Human)]
    log_format: fleet_cli::LogFormat,
    /// The namespace this worker serves.
    #[arg(long, value_parser = fleet_cli::namespace_parser(), required_unless_present_any = ["completions", "man"])]
    namespace: Option<Namespace>,
    /// Registry location: a SQLite file, sqlite://PATH or postgres://…
    #[arg(long, env = "FLEET_REGISTRY", hide_env_values = true)]
    registry: Option<String>,
    /// profiles.json (default: built-in profiles, gitea.read only, per namespace).
    #[arg(long, env = "FLEET_PROFILES")]
    profiles: Option<String>,
    /// Seconds a heartbeat stays valid.
    #[arg(long, default_value_t = 30)]
    ttl: u32,
    /// The largest structured answer to send, in bytes (at least 65536); a larger one is
    /// refused (`answer_too_large`). The default fits the TypeScript SDK's 10 MiB message
    /// limit (Claude Code, Gemini CLI, the MCP Inspector).
    #[arg(long, value_name = "BYTES", default_value_t = server::DEFAULT_MAX_ANSWER_BYTES,
          value_parser = answer_limit)]
    max_answer_bytes: usize,
    /// The agent client whose config started this server (the entries `fleet-launch
    /// install` writes say so), so a missing variable is explained in its terms.
    #[arg(long, value_enum)]
    config_client: Option<AgentClient>,
    /// Print shell completions for fleet-mcp, and exit.
    #[arg(long, value_name = "SHELL")]
    completions: Option<fleet_cli::manuals::Shell>,
    /// Print fleet-mcp's manual page (roff), and exit.
    #[arg(long)]
    man: bool,
}

/// `--max-answer-bytes`: a number of bytes, at least 64 KiB (a default summary must fit).
fn answer_limit(text: &str) -> Result<usize, String> {
    const LEAST: usize = 64 * 1024;
    let bytes: usize = text.parse().map_err(|e| format!("{text:?} is not a number of bytes: {e}"))?;
    if bytes < LEAST {
        return Err(format!("{bytes} is less than the least limit, {LEAST} bytes"));
    }
    Ok(bytes)
}

fn main() -> ExitCode {
    match fleet_cli::parse_args::<Cli>().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => f.report("fleet-mcp"),
    }
}

/// What registering needs, checked before the first attempt: a launch identity from a
/// trusted launcher, and this process's evidence.
fn registration_options(
    env: &Result<InstanceEnv, String>,
    cli: &Cli,
    namespace: Namespace,
) -> Result<(InstanceEnv, WorkerOptions, fleet_runtime::Lineage), String> {
    let env = env.as_ref().map_err(Clone::clone)?;
    let lineage = fleet_runtime::check_launch_lineage(env.client_type.as_str()).map_err(|e| e.to_string())?;
    // Read through /proc/self: right in any PID namespace, where our own pid number is
    // not our entry in the /proc we see.
    let process = fleet_runtime::process::current_process()
        .map_err(|e| format!("cannot read process evidence: {e}"))?;
    let repository = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .ok()
        .and_then(|p| Repository::new(p.display().to_string()).ok());
    let options = WorkerOptions {
        namespace,
        process,
        heartbeat_ttl: HeartbeatTtl::from_secs(cli.ttl).map_err(|e| e.to_string())?,
        repository,
        revisions: Revisions {
            code: Some(env!("CARGO_PKG_VERSION").to_owned()),
            schema: Some(fleet_registry::SCHEMA_VERSION.to_string()),
            ..Revisions::default()
        },
        launch: fleet_runtime::LaunchProcess::from_env().map_err(|e| e.to_string())?,
    };
    Ok((env.clone(), options, lineage))
}

/// Registers in the background, so `initialize` is answered whatever the registry does.
fn start_registering(
    location: &RegistryLocation,
    env: &Result<InstanceEnv, String>,
    cli: &Cli,
    namespace: Namespace,
) -> Result<Registrar, Failure> {
    let prepared = registration_options(env, cli, namespace);
    let location = location.clone();
    Registrar::start(move || {
        let (env, options, lineage) = prepared.clone().map_err(AttemptError::permanent)?;
        if lineage == fleet_runtime::Lineage::Descendant {
            let client = env.client_type.as_str();
            fleet_runtime::check_slot_unheld(&location, env.instance.as_str(), namespace, client)
                .map_err(AttemptError::permanent)?;
        }
        Ok(WorkerSession::start(&location, &env, options)?)
    })
    .map_err(|e| Failure::store(format!("cannot start registering: {e}")))
}

/// The instance environment, or why it is unusable; a missing variable is explained by
/// the forwarding rule of the client that started this server.
fn instance_env(client: Option<AgentClient>) -> Result<InstanceEnv, String> {
    InstanceEnv::from_process().map_err(|e| match (&e, client) {
        (EnvError::Missing(_), Some(client)) => format!("{e}. {}", client.forwarding_hint()),
        _ => e.to_string(),
    })
}

fn run(mut cli: Cli) -> Result<(), Failure> {
    if let Some(shell) = cli.completions {
        let command = <Cli as clap::CommandFactory>::command();
        return fleet_cli::out!("{}", fleet_cli::manuals::completions(command, shell));
    }
    if cli.man {
        return fleet_cli::out!("{}", fleet_cli::manuals::manual(<Cli as clap::CommandFactory>::command())?);
    }
    let namespace = cli.namespace.ok_or_else(|| Failure::usage("--namespace is required"))?;
    fleet_cli::init_logging(cli.log_format);
    // Client configs forward unset variables as empty strings: those mean "not given".
    cli.registry = cli.registry.filter(|r| !r.trim().is_empty());
    cli.profiles = cli.profiles.filter(|p| !p.is_empty());
    let location = RegistryLocation::resolve(cli.registry.as_deref())?.absolute();
    let env = instance_env(cli.config_client);
    // Stop signals are watched from before the registration: one that arrives before the
    // client's initialize (a client that gives up at once) still releases the row.
    let stopped = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register_usize(sig, Arc::clone(&stopped), usize::try_from(sig).unwrap_or(1))
            .map_err(|e| Failure::store(format!("cannot watch stop signals: {e}")))?;
    }
    let registrar = start_registering(&location, &env, &cli, namespace)?;
    registrar.registration().wait_first_attempt(fleet_mcp::registration::FIRST_ATTEMPT_WAIT);
    let profile =
        std::env::var(vars::PROFILE).ok().filter(|p| !p.is_empty()).unwrap_or_else(|| namespace.to_string());
    let ctx = server::Context {
        location,
        namespace,
        profile,
        profiles: profiles::Profiles::new(cli.profiles.clone().map(PathBuf::from)),
        env,
        registration: registrar.registration(),
        runtime: fleet_runtime::StableRuntime::capture(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failure::store(format!("cannot start the async runtime: {e}")))?;
    // Each snapshot call's probes hold a pidfd per live local worker.
    fleet_runtime::process::raise_open_file_limit();
    let bodies = stdio::Bodies::new();
    // Kept here, outside the runtime, until the runtime is gone: the last copy of the
    // server holds the registry, and a PostgreSQL client can close only outside it.
    let server =
        server::FleetServer::new(ctx).with_bodies(bodies.clone()).with_max_answer_bytes(cli.max_answer_bytes);
    let served = runtime.block_on(async {
        let stdout = stdio::GrowingStdout::new()
            .map_err(|e| Failure::store(format!("cannot write to standard output: {e}")))?;
        let (transport, writer) = stdio::guard(tokio::io::stdin(), stdout, bodies);
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Failure::store(format!("cannot watch SIGTERM: {e}")))?;
        let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| Failure::store(format!("cannot watch SIGINT: {e}")))?;
        if stopped.load(Ordering::SeqCst) != 0 {
            return Ok(());
        }
        let service = tokio::select! {
            served = server.clone().serve(transport) => {
                served.map_err(|e| Failure::usage(format!("MCP initialization failed: {e}")))?
            }
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
        };
        let cancel = service.cancellation_token();
        let waiting = service.waiting();
        tokio::pin!(waiting);
        tokio::select! {
            _ = &mut waiting => {}
            _ = term.recv() => {
                cancel.cancel();
                let _ = waiting.await;
            }
            _ = int.recv() => {
                cancel.cancel();
                let _ = waiting.await;
            }
        }
        // The session is over: what it wrote reaches stdout whole before the process ends
        // (bounded, for a client that stopped reading).
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
        Ok::<(), Failure>(())
    });
    // stdin closed, SIGTERM or Ctrl-C: release the registration either way.
    if let Some(session) = registrar.finish()
        && let Err(e) = session.release()
    {
        fleet_cli::warn(format_args!("fleet-mcp: could not release the registration: {e}"));
    }
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    drop(server);
    // Stopped by a signal: the exit status says so (128 + signal), as a shell reports it,
    // whatever the interrupted session made of it.
    match stopped.load(Ordering::SeqCst) {
        0 => served,
        sig => Err(Failure::signalled(sig)),
    }
}
