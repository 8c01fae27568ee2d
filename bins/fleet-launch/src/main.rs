//! `fleet-launch`: the trusted launcher. Every ID it prints or passes on is first
//! recorded in the registry's ledger, so the workers it reaches are trusted.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use clap::{Parser, Subcommand};
use fleet_cli::Failure;
use fleet_cli::{out, outln};
use fleet_identity::{ClientType, FleetRunId, SessionId};
use fleet_runtime::{Launch, RegistryLocation, vars};
use serde_json::json;

use fleet_runtime::AgentClient as Client;

use fleet_launch::clients::{self, ClientConfig, EditError, ReadOnlyApproval, Scope};

#[derive(Debug, Parser)]
#[command(
    name = "fleet-launch",
    version = fleet_runtime::version_line(),
    about = "Mint a trusted instance identity and hand it to the five namespace workers",
    after_help = format!(
        "Examples:\n  \
         fleet-launch install --client codex            merge the five servers into ~/.codex/config.toml\n  \
         fleet-launch install --client claude_code      the same for .mcp.json (also: cursor, gemini, vscode)\n  \
         fleet-launch run --client codex -- codex       one session: a fresh, recorded identity\n  \
         fleet-launch config --client vscode            print the entries instead of installing them\n\n{}",
        fleet_cli::LAUNCHER_EXIT_CODES_HELP
    )
)]
struct Cli {
    /// How log events are written to stderr; RUST_LOG chooses which (default warn,
    /// info shows every mutation and refusal).
    #[arg(long, global = true, value_enum, default_value_t = fleet_cli::LogFormat::Human)]
    log_format: fleet_cli::LogFormat,
    /// Registry location: a SQLite file, sqlite://PATH or postgres://…
    #[arg(long, global = true, env = "FLEET_REGISTRY", hide_env_values = true)]
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

#[derive(Debug, clap::Args)]
struct ConfigArgs {
    /// The agent client whose config format to write.
    #[arg(long, value_parser = fleet_cli::agent_client_parser())]
    client: Client,
    /// The MCP server each entry starts (default: fleet-mcp beside this binary).
    #[arg(long)]
    server_command: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct FileArgs {
    /// The user's config file, or the project's in the current directory (default:
    /// user for Codex, project for the others).
    #[arg(long, value_enum)]
    scope: Option<Scope>,
    /// Edit this file instead of the client's usual one.
    #[arg(long, conflicts_with = "scope")]
    file: Option<PathBuf>,
    /// Write a project's config even when it is a link to a file outside the project
    /// (refused by default: a cloned project must not choose what is edited).
    #[arg(long)]
    follow_project_links: bool,
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
    /// Print the five server entries in a client's config format. The output holds no
    /// identity and is the same on every call: commit it, share it.
    Config {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Merge the five server entries into the client's config file, keeping everything
    /// else in it. Running it again changes nothing.
    Install {
        #[command(flatten)]
        config: ConfigArgs,
        #[command(flatten)]
        file: FileArgs,
        /// Also let the read-only tools (runtime context, snapshot, plan) run without a
        /// prompt, by the client's own setting: Codex's per-tool approval_mode, Claude
        /// Code's permissions.allow. Tools that write still ask.
        #[arg(long)]
        allow_read_only: bool,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove the five server entries from the client's config file, and nothing else.
    Uninstall {
        /// The agent client whose config file to edit.
        #[arg(long, value_parser = fleet_cli::agent_client_parser())]
        client: Client,
        #[command(flatten)]
        file: FileArgs,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print shell completions for fleet-launch.
    Completions {
        /// The shell.
        shell: fleet_cli::manuals::Shell,
    },
    /// Print fleet-launch's manual page (roff), or with --dir write one page per
    /// subcommand into DIR.
    Man {
        /// Where to write every page (fleet-launch.1, fleet-launch-install.1, …).
        #[arg(long, value_hint = clap::ValueHint::DirPath)]
        dir: Option<PathBuf>,
    },
    /// Mint an instance ID, then run APP with the instance environment: start every
    /// agent session this way, and its servers register under a launch of their own.
    Run {
        #[command(flatten)]
        launch: LaunchArgs,
        /// The application and its arguments.
        #[arg(required = true, last = true)]
        app: Vec<OsString>,
    },
}

/// An example for every subcommand's help (and so its manual page), by command path.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "mint",
        "fleet-launch mint --client codex
fleet-launch mint --client claude_code --json",
    ),
    ("config", "fleet-launch config --client gemini > .gemini/settings.json"),
    (
        "install",
        "fleet-launch install --client codex --allow-read-only
fleet-launch install --client claude_code --scope user --json",
    ),
    ("uninstall", "fleet-launch uninstall --client codex"),
    (
        "run",
        "fleet-launch run --client codex -- codex
fleet-launch run --client claude_code -- claude -p \"check the fleet\"",
    ),
    (
        "completions",
        "fleet-launch completions bash > ~/.local/share/bash-completion/completions/fleet-launch",
    ),
    ("man", "fleet-launch man --dir ~/.local/share/man/man1"),
];

/// fleet-launch's command with an example in every subcommand's help.
fn command_with_examples(cmd: clap::Command) -> clap::Command {
    fleet_cli::manuals::with_examples(cmd, EXAMPLES)
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
    match fleet_cli::parse_args_with::<Cli>(command_with_examples)
        .and_then(run)
        .and_then(|done| fleet_cli::flush_stdout().map(|()| done))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("fleet-launch"),
    }
}

fn mint_and_record(registry: Option<&str>, args: LaunchArgs) -> Result<Launch, Failure> {
    let location = RegistryLocation::resolve(registry)?;
    Ok(Launch::mint(&location, &args.client, args.fleet_run_id, args.session)?)
}

/// The first executable `name` on `path` (a `PATH` value), as the shell would run it.
fn on_path(name: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(path).map(|dir| dir.join(name)).find(|candidate| {
        std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The command the entries run. The bare `fleet-mcp` when the one on `PATH` is the
/// binary beside this launcher (or there is none beside it): a file naming it works on
/// every machine with Fleetward installed, so it can be committed. Otherwise the
/// absolute path of the one beside the launcher, with a warning that the file then
/// names this machine's build.
fn default_server_command() -> (String, Option<String>) {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join("fleet-mcp")));
    let Some(beside) = beside.filter(|p| p.exists()) else {
        return ("fleet-mcp".to_owned(), None);
    };
    let found = std::env::var_os("PATH").and_then(|path| on_path("fleet-mcp", &path));
    let same = |p: &Path| std::fs::canonicalize(p).ok() == std::fs::canonicalize(&beside).ok();
    match found {
        Some(found) if same(&found) => ("fleet-mcp".to_owned(), None),
        found => {
            let why = found.map_or_else(
                || "fleet-mcp is not on PATH".to_owned(),
                |other| format!("the fleet-mcp on PATH ({}) is another build", other.display()),
            );
            let path = beside.display().to_string();
            let warning = format!(
                "{why}, so the entries run {path}: the file works on this machine only; put this build's \
                 fleet-mcp on PATH before sharing it"
            );
            (path, Some(warning))
        }
    }
}

/// The command the entries run, and a warning when the file will not work elsewhere.
fn server_command(config: &ConfigArgs) -> (String, Option<String>) {
    config.server_command.as_ref().map_or_else(default_server_command, |p| (p.display().to_string(), None))
}

/// Lets the read-only tools run without a prompt by `client`'s own setting; says what
/// was done.
fn allow_read_only_tools(client: Client, config: &Path) -> Result<String, Failure> {
    Ok(match clients::read_only_approval(client) {
        ReadOnlyApproval::CodexPerTool => {
            format!(
                "read-only tools run without approval: approval_mode = \"approve\" per tool in {}",
                config.display()
            )
        }
        ReadOnlyApproval::ClaudePermissions => {
            let settings = clients::claude_settings_path(config);
            edit_config(&settings, |text| clients::allow_read_only_claude(text, &settings))?;
            format!("read-only tools run without approval: permissions.allow rules in {}", settings.display())
        }
        ReadOnlyApproval::GeminiPolicy => {
            let policy = clients::gemini_policy_path(&home_dir()?);
            edit_config(&policy, |text| clients::gemini_policy_edit(text, &policy))?;
            format!("read-only tools run without approval: policy rules in {}", policy.display())
        }
        ReadOnlyApproval::NoSetting => format!(
            "{} keeps tool approvals in its own interface: nothing written; approve the read-only tools there",
            client.as_str()
        ),
    })
}

/// How to start a session of `client` so its servers get the launch's identity.
fn run_hint(client: Client) -> String {
    format!("fleet-launch run --client {} -- {}", client.as_str(), client.program())
}

/// The config file `install` and `uninstall` edit: the one given, or the client's own
/// of the scope chosen. A project's file (and Claude Code's project settings beside it)
/// that links outside the project is refused unless `--follow-project-links`.
fn config_file(client: Client, file: FileArgs) -> Result<PathBuf, Failure> {
    if let Some(path) = file.file {
        return Ok(path);
    }
    let path = client_config(client, &file)?;
    if file.scope.unwrap_or_else(|| client.default_scope()) == Scope::Project && !file.follow_project_links {
        let project =
            std::env::current_dir().map_err(|e| Failure::usage(format!("no current directory: {e}")))?;
        stays_in_project(&path, &project)?;
        if client == Client::ClaudeCode {
            stays_in_project(&clients::claude_settings_path(&path), &project)?;
        }
    }
    Ok(path)
}

/// Refuses a project file whose write would land outside `project` (a link, or a
/// linked directory, pointing elsewhere), naming where it would land.
fn stays_in_project(path: &Path, project: &Path) -> Result<(), Failure> {
    let fail = |e: &dyn std::fmt::Display| Failure::usage(format!("cannot resolve {}: {e}", path.display()));
    let project = std::fs::canonicalize(project).map_err(|e| fail(&e))?;
    let target = fleet_runtime::user_file::final_target(path).map_err(|e| fail(&e))?;
    if target.starts_with(&project) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{} leads to {}, outside this project ({}); refusing to write there (pass --follow-project-links to write through it)",
        path.display(),
        target.display(),
        project.display()
    )))
}

/// The user's home directory (`HOME`).
fn home_dir() -> Result<PathBuf, Failure> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| Failure::usage("HOME is not set; pass --file"))
}

/// The client's own config file of the scope chosen.
fn client_config(client: Client, file: &FileArgs) -> Result<PathBuf, Failure> {
    let home = home_dir()?;
    let project =
        std::env::current_dir().map_err(|e| Failure::usage(format!("no current directory: {e}")))?;
    let codex_home = std::env::var_os("CODEX_HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let scope = file.scope.unwrap_or_else(|| client.default_scope());
    Ok(client.config_path(scope, &home, &project, codex_home.as_deref()))
}

/// The largest client config read (16 MiB; Claude Code's `~/.claude.json` keeps every
/// project's history and grows to a few MiB).
const MAX_CONFIG_BYTES: u64 = 16 << 20;

/// Writes `text` to `path` by the project's one rule for user files
/// (`fleet_runtime::user_file`): never through a planted file, keeping mode and owner,
/// atomically.
fn write_config(path: &Path, text: &str) -> Result<(), Failure> {
    fleet_runtime::user_file::replace(path, text.as_bytes())
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))
}

/// Removes the policy file `install --client gemini --allow-read-only` wrote, if it is
/// there and still ours; reports whether it was removed.
fn remove_gemini_policy() -> Result<bool, Failure> {
    let Ok(home) = home_dir() else { return Ok(false) };
    let policy = clients::gemini_policy_path(&home);
    let Ok(text) = fleet_runtime::user_file::read_for_edit(&policy, MAX_CONFIG_BYTES) else {
        return Ok(false);
    };
    if !text.starts_with(clients::GEMINI_POLICY_HEADER) {
        return Ok(false);
    }
    std::fs::remove_file(&policy)
        .map(|()| true)
        .map_err(|e| Failure::usage(format!("cannot remove {}: {e}", policy.display())))
}

/// Applies `edit` to the file; reports whether anything changed.
fn edit_config(path: &Path, edit: impl FnOnce(&str) -> Result<String, EditError>) -> Result<bool, Failure> {
    // Held from the read to the write: a concurrent install or uninstall waits its turn
    // and then edits what this one wrote.
    let _turn = fleet_runtime::user_file::EditLock::take(path)
        .map_err(|e| Failure::usage(format!("cannot edit {}: {e}", path.display())))?;
    let before = fleet_runtime::user_file::read_for_edit(path, MAX_CONFIG_BYTES).map_err(Failure::usage)?;
    let after = edit(&before).map_err(|e| Failure::usage(e.to_string()))?;
    if after == before {
        return Ok(false);
    }
    write_config(path, &after)?;
    Ok(true)
}

fn run(cli: Cli) -> Result<(), Failure> {
    fleet_cli::init_logging(cli.log_format);
    let registry = cli.registry.as_deref();
    match cli.command {
        Cmd::Mint { launch, json } => {
            let launch = mint_and_record(registry, launch)?;
            if json {
                let env: BTreeMap<&str, String> = launch.vars().into_iter().collect();
                outln!("{}", json!({ "client_instance_id": launch.id(), "env": env }))?;
            } else {
                outln!("{}", launch.id())?;
            }
            Ok(())
        }
        Cmd::Config { config } => {
            let (command, warning) = server_command(&config);
            if let Some(warning) = warning {
                fleet_cli::warn(format_args!("fleet-launch: note: {warning}"));
            }
            out!("{}", clients::render(config.client, &command))?;
            Ok(())
        }
        Cmd::Install { config, file, allow_read_only, json } => {
            let client = config.client;
            let path = config_file(client, file)?;
            let (command, warning) = server_command(&config);
            if let Some(warning) = warning {
                fleet_cli::warn(format_args!("fleet-launch: note: {warning}"));
            }
            let codex_approvals = allow_read_only && client == Client::Codex;
            let changed = edit_config(&path, |text| {
                let merged = clients::merge(client, &command, text, &path)?;
                if codex_approvals { clients::approve_read_only_codex(&merged, &path) } else { Ok(merged) }
            })?;
            let approval = if allow_read_only { Some(allow_read_only_tools(client, &path)?) } else { None };
            if json {
                let report = json!({
                    "outcome": if changed { "installed" } else { "unchanged" },
                    "file": path.display().to_string(),
                    "command": command,
                    "read_only_approval": approval,
                    "run": run_hint(client),
                });
                outln!("{report}")?;
                return Ok(());
            }
            let what = if changed { "installed" } else { "already installed, unchanged:" };
            outln!("{what} 5 fleet-mcp entries in {}", path.display())?;
            if let Some(approval) = approval {
                outln!("{approval}")?;
            }
            outln!("start each session with: {}", run_hint(client))?;
            Ok(())
        }
        Cmd::Uninstall { client, file, json } => {
            let path = config_file(client, file)?;
            let changed = edit_config(&path, |text| clients::remove(client, text, &path))?;
            let settings = clients::claude_settings_path(&path);
            let rules_removed = match client {
                Client::ClaudeCode => {
                    settings.exists()
                        && edit_config(&settings, |text| clients::disallow_read_only_claude(text, &settings))?
                }
                Client::Gemini => remove_gemini_policy()?,
                _ => false,
            };
            let settings =
                if client == Client::Gemini { clients::gemini_policy_path(&home_dir()?) } else { settings };
            if json {
                let report = json!({
                    "outcome": if changed { "removed" } else { "absent" },
                    "file": path.display().to_string(),
                    "read_only_rules_removed_from": rules_removed.then(|| settings.display().to_string()),
                });
                outln!("{report}")?;
                return Ok(());
            }
            let what = if changed { "removed the fleet-mcp entries from" } else { "no fleet-mcp entries in" };
            outln!("{what} {}", path.display())?;
            if rules_removed {
                outln!("removed the read-only tool rules from {}", settings.display())?;
            }
            Ok(())
        }
        Cmd::Completions { shell } => {
            let command = command_with_examples(<Cli as clap::CommandFactory>::command());
            out!("{}", fleet_cli::manuals::completions(command, shell))?;
            Ok(())
        }
        Cmd::Man { dir } => {
            let command = command_with_examples(<Cli as clap::CommandFactory>::command());
            match dir {
                Some(dir) => {
                    for page in fleet_cli::manuals::write_manuals(command, &dir)? {
                        outln!("{}", page.display())?;
                    }
                }
                None => out!("{}", fleet_cli::manuals::manual(command)?)?,
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
            // The client this process becomes by exec: only servers it starts register
            // under the launch (a client nested in an agent's shell gets its own).
            command.env(vars::LAUNCH_PROCESS, fleet_runtime::launch_process_value()?);
            // exec only returns on failure.
            let err = command.exec();
            Err(Failure::usage(format!("cannot run {}: {err}", program.to_string_lossy())))
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn every_subcommand_has_an_example() {
        for path in fleet_cli::manuals::leaf_paths(&super::Cli::command()) {
            assert!(super::EXAMPLES.iter().any(|(p, _)| *p == path), "no example for `fleet-launch {path}`");
        }
    }
}
