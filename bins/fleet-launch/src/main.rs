//! `fleet-launch`: the trusted launcher. Every ID it prints or passes on is first
//! recorded in the registry's ledger, so the workers it reaches are trusted.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand, ValueEnum};
use fleet_identity::{ClientType, FleetRunId, Namespace, SessionId};
use fleet_runtime::{Failure, Launch, RegistryLocation, vars};
use serde_json::{Value, json};

#[derive(Debug, Parser)]
#[command(
    name = "fleet-launch",
    version,
    about = "Mint a trusted instance identity and hand it to the five namespace workers"
)]
struct Cli {
    /// Registry location: a SQLite file, sqlite://PATH or postgres://…
    #[arg(long, global = true, env = "FLEET_REGISTRY")]
    registry: Option<String>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Args)]
struct LaunchArgs {
    /// Client type of the application: codex, claude_code, gemini, grok, …
    #[arg(long, value_parser = parse_client)]
    client: ClientType,
    /// Operator-approved cohort this launch belongs to.
    #[arg(long, value_parser = parse_fleet_run)]
    fleet_run_id: Option<FleetRunId>,
    /// Client session that owns the launch (default: a fresh one).
    #[arg(long, value_parser = parse_session)]
    session: Option<SessionId>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Mint and record one instance ID, and print it.
    Mint {
        #[command(flatten)]
        launch: LaunchArgs,
        /// Print the whole instance environment as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Mint an instance ID and print the five-entry mcpServers configuration.
    Config {
        #[command(flatten)]
        launch: LaunchArgs,
        /// Output shape: Claude Code's .mcp.json, Codex's config.toml, or plain JSON.
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        /// The MCP server each entry starts (default: fleet-mcp beside this binary).
        #[arg(long)]
        server_command: Option<PathBuf>,
    },
    /// Mint an instance ID, then run APP with the instance environment.
    Run {
        #[command(flatten)]
        launch: LaunchArgs,
        /// The application and its arguments.
        #[arg(required = true, last = true)]
        app: Vec<OsString>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Claude,
    Codex,
    Json,
}

fn parse_client(s: &str) -> Result<ClientType, String> {
    ClientType::new(s).map_err(|e| e.to_string())
}
fn parse_fleet_run(s: &str) -> Result<FleetRunId, String> {
    FleetRunId::new(s).map_err(|e| e.to_string())
}
fn parse_session(s: &str) -> Result<SessionId, String> {
    SessionId::new(s).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    match fleet_runtime::parse_args::<Cli>().and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("fleet-launch"),
    }
}

fn mint_and_record(registry: Option<&str>, args: LaunchArgs) -> Result<Launch, Failure> {
    let location = RegistryLocation::resolve(registry)?;
    Ok(Launch::mint(&location, args.client, args.fleet_run_id, args.session)?)
}

fn server_entries(launch: &Launch, command: &str) -> BTreeMap<String, Value> {
    Namespace::ALL
        .into_iter()
        .map(|ns| {
            let mut env: BTreeMap<&str, String> = launch.vars().into_iter().collect();
            env.insert(vars::PROFILE, ns.as_str().to_owned());
            let entry = json!({ "command": command, "args": ["--namespace", ns.as_str()], "env": env });
            (format!("gitea-{ns}"), entry)
        })
        .collect()
}

fn default_server_command() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("fleet-mcp")))
        .filter(|p| p.exists())
        .map_or_else(|| "fleet-mcp".to_owned(), |p| p.display().to_string())
}

/// TOML basic strings share JSON's escapes for everything a path or ID can hold.
fn toml_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

fn codex_toml(servers: &BTreeMap<String, Value>) -> String {
    let mut out = String::new();
    for (name, entry) in servers {
        out.push_str(&format!("[mcp_servers.{name}]\n"));
        out.push_str(&format!("command = {}\n", entry["command"]));
        let args: Vec<String> = entry["args"]
            .as_array()
            .map(|a| a.iter().map(|v| toml_string(v.as_str().unwrap_or_default())).collect())
            .unwrap_or_default();
        out.push_str(&format!("args = [{}]\n\n", args.join(", ")));
        out.push_str(&format!("[mcp_servers.{name}.env]\n"));
        if let Some(env) = entry["env"].as_object() {
            for (k, v) in env {
                out.push_str(&format!("{k} = {}\n", toml_string(v.as_str().unwrap_or_default())));
            }
        }
        out.push('\n');
    }
    out
}

fn run(cli: Cli) -> Result<(), Failure> {
    let registry = cli.registry.as_deref();
    match cli.command {
        Cmd::Mint { launch, json } => {
            let launch = mint_and_record(registry, launch)?;
            if json {
                let env: BTreeMap<&str, String> = launch.vars().into_iter().collect();
                println!("{}", json!({ "client_instance_id": launch.id(), "env": env }));
            } else {
                println!("{}", launch.id());
            }
            Ok(())
        }
        Cmd::Config { launch, format, server_command } => {
            let launch = mint_and_record(registry, launch)?;
            let command = server_command.map_or_else(default_server_command, |p| p.display().to_string());
            let servers = server_entries(&launch, &command);
            match format {
                Format::Claude => println!("{:#}", json!({ "mcpServers": servers })),
                Format::Codex => print!("{}", codex_toml(&servers)),
                Format::Json => {
                    println!("{:#}", json!({ "client_instance_id": launch.id(), "mcpServers": servers }))
                }
            }
            Ok(())
        }
        Cmd::Run { launch, app } => {
            let launch = mint_and_record(registry, launch)?;
            let (program, args) = app.split_first().ok_or_else(|| Failure::usage("no application to run"))?;
            let mut command = Command::new(program);
            command.args(args).env_remove(vars::PROFILE);
            for (k, v) in launch.vars() {
                command.env(k, v);
            }
            // exec only returns on failure.
            let err = command.exec();
            Err(Failure::usage(format!("cannot run {}: {err}", program.to_string_lossy())))
        }
    }
}
