//! How binaries end: one line on stderr and the exit code of DESIGN.md
//! (0 success, 1 a check said no, 2 bad input, 3 the store could not be used).

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

use fleet_registry::{StoreError, StoreErrorKind};

/// A failure a binary reports and exits with.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    /// A check that ran and said no (exit 1).
    pub fn refused(message: impl Into<String>) -> Self {
        Self { code: 1, message: message.into() }
    }

    /// Bad input or usage (exit 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self { code: 2, message: message.into() }
    }

    /// The store could not be used (exit 3).
    pub fn store(message: impl Into<String>) -> Self {
        Self { code: 3, message: message.into() }
    }

    /// Stopped by signal `sig` as asked: exit `128 + sig`, as a shell reports it, with
    /// nothing to say.
    pub fn signalled(sig: usize) -> Self {
        Self { code: u8::try_from(128 + sig).unwrap_or(255), message: String::new() }
    }

    /// Standard output could not be written. A closed pipe (`fleetctl … | head`) ends
    /// the program quietly with success, as ripgrep does; any other failure (a full disk)
    /// is an error that exits 3.
    pub fn output(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Self { code: 0, message: String::new() }
        } else {
            Self { code: 3, message: format!("cannot write output: {e}") }
        }
    }

    /// The exit code.
    pub fn code(&self) -> u8 {
        self.code
    }

    /// Prints the message as one line on stderr, prefixed with the program name, and
    /// returns the exit code.
    pub fn report(&self, program: &str) -> ExitCode {
        if self.message.is_empty() {
            return ExitCode::from(self.code);
        }
        let line = self.message.replace('\n', " ");
        if fleet_runtime::diagnostics_are_json() {
            // One JSON object like every other event on stderr, for a log collector.
            tracing::error!(target: "fleet", program, exit_code = self.code, "{line}");
            return ExitCode::from(self.code);
        }
        // If even stderr cannot be written there is no one left to tell.
        let _ = writeln!(io::stderr().lock(), "{program}: error: {line}");
        ExitCode::from(self.code)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let code = match e.kind() {
            StoreErrorKind::Invalid | StoreErrorKind::NotFound => 2,
            StoreErrorKind::Conflict | StoreErrorKind::Fenced | StoreErrorKind::NotDurable => 1,
            _ => 3,
        };
        Self { code, message: fleet_registry::with_causes(&e) }
    }
}

impl From<fleet_runtime::EnvError> for Failure {
    fn from(e: fleet_runtime::EnvError) -> Self {
        Self::usage(e.to_string())
    }
}

/// A host whose identity cannot be read is a failure of the host (exit 3); a repository
/// or current directory that cannot be read is bad input (exit 2).
impl From<fleet_runtime::ContextError> for Failure {
    fn from(e: fleet_runtime::ContextError) -> Self {
        match e {
            fleet_runtime::ContextError::HostIdentity(_) => Self::store(e.to_string()),
            _ => Self::usage(e.to_string()),
        }
    }
}

/// A key that names no changeable lease is bad input (exit 2); the store's own
/// failures keep their codes.
impl From<fleet_runtime::LeaseError> for Failure {
    fn from(e: fleet_runtime::LeaseError) -> Self {
        match e {
            fleet_runtime::LeaseError::Store(e) => e.into(),
            e => Self::usage(e.to_string()),
        }
    }
}

/// An export that cannot be written first is bad input (exit 2), as any output path.
impl From<fleet_runtime::PruneError> for Failure {
    fn from(e: fleet_runtime::PruneError) -> Self {
        match e {
            fleet_runtime::PruneError::Store(e) => e.into(),
            e => Self::usage(e.to_string()),
        }
    }
}

/// A binding not held, or its authority ended, is a check that said no (exit 1); a
/// policy or command that cannot be used is bad input (exit 2); this host failing its
/// part is exit 3.
impl From<fleet_runtime::ConnectorError> for Failure {
    fn from(e: fleet_runtime::ConnectorError) -> Self {
        use fleet_runtime::ConnectorError as E;
        match e {
            E::Store(e) => e.into(),
            E::Refused(_) => Self::refused(e.to_string()),
            E::Policy(_) | E::Command(_) => Self::usage(e.to_string()),
            _ => Self::store(e.to_string()),
        }
    }
}

impl From<fleet_runtime::LocationError> for Failure {
    fn from(e: fleet_runtime::LocationError) -> Self {
        Self::usage(e.to_string())
    }
}

/// Parses the command line. Help and version print as usual; a usage error prints
/// clap's whole message (what was wrong, the valid values, a "did you mean" hint and the
/// usage line) on stderr and exits 2.
pub fn parse_args<T: clap::Parser>() -> Result<T, Failure> {
    parse_args_with::<T>(|cmd| cmd)
}

/// [`parse_args`] with the command `decorate` makes of the derived one (examples added
/// to every subcommand's help, say).
pub fn parse_args_with<T: clap::Parser>(
    decorate: impl FnOnce(clap::Command) -> clap::Command,
) -> Result<T, Failure> {
    let parsed = decorate(<T as clap::CommandFactory>::command())
        .try_get_matches()
        .and_then(|mut matches| <T as clap::FromArgMatches>::from_arg_matches_mut(&mut matches));
    parsed.map_err(|e| {
        use clap::error::ErrorKind;
        match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                let _ = e.print();
                Failure { code: if e.use_stderr() { 2 } else { 0 }, message: String::new() }
            }
            // Asked for JSON logs, a usage error is one JSON event like every other line
            // on stderr: clap's whole message (what was wrong, the usage, a suggestion)
            // in one field.
            _ if json_logs_asked() => {
                init_logging(LogFormat::Json);
                let text = e.render().to_string();
                let message =
                    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
                let program = std::env::args().next().unwrap_or_default();
                let program = program.rsplit('/').next().unwrap_or_default();
                tracing::error!(target: "fleet", program, exit_code = 2, "{message}");
                Failure { code: 2, message: String::new() }
            }
            _ => {
                let _ = e.print();
                Failure { code: 2, message: String::new() }
            }
        }
    })
}

/// Whether the command line asks for JSON logs (`--log-format json`), read before clap
/// has parsed it: for the one line a usage error writes.
fn json_logs_asked() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--log-format=json")
        || args.windows(2).any(|w| w[0] == "--log-format" && w[1] == "json")
}

/// Writes to standard output without ever panicking: the `out!` and `outln!` macros
/// call it, and a failure becomes a [`Failure`] (see [`Failure::output`]).
pub fn write_stdout(args: fmt::Arguments<'_>, newline: bool) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| if newline { out.write_all(b"\n") } else { Ok(()) })
        .map_err(Failure::output)
}

/// Prints `value` as indented JSON and a newline on standard output, streamed through a
/// buffer rather than built as one string first (a 100k-row snapshot is tens of
/// megabytes). Write failures are reported as [`write_stdout`]'s are.
pub fn print_json(value: &impl serde::Serialize) -> Result<(), Failure> {
    let mut out = io::BufWriter::with_capacity(1 << 16, io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, value).map_err(|e| {
        if e.is_io() {
            // The original I/O error, as write_stdout would report it.
            Failure::output(io::Error::from(e))
        } else {
            Failure::store(format!("cannot write the answer as JSON: {e}"))
        }
    })?;
    out.write_all(b"\n").and_then(|()| out.flush()).map_err(Failure::output)
}

/// Flushes standard output at the end of a command, so a write that fails only at the
/// final flush is reported too.
pub fn flush_stdout() -> Result<(), Failure> {
    io::stdout().lock().flush().map_err(Failure::output)
}

/// `print!` that returns `Result<(), Failure>` instead of panicking when stdout fails.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_stdout(format_args!($($arg)*), false) };
}

/// `println!` that returns `Result<(), Failure>` instead of panicking when stdout fails.
#[macro_export]
macro_rules! outln {
    () => { $crate::write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::write_stdout(format_args!($($arg)*), true) };
}

/// `fleetctl`'s exit codes, for its `--help`.
pub const EXIT_CODES_HELP: &str = "Exit codes:
  0  success
  1  a check ran and said no (an unsafe fleet under --gate, a refused lease, an apply that retired nothing)
  2  bad input or usage
  3  the registry (or an output) could not be used";

/// `fleet-launch`'s exit codes, for its `--help`: `run` becomes the client, whose own
/// code is the launch's.
pub const LAUNCHER_EXIT_CODES_HELP: &str = "Exit codes:
  0  success
  2  bad input or usage
  3  the registry (or an output) could not be used
  run exits with the client's own code (it becomes the client)";

/// `fleet-mcp`'s exit codes, for its `--help`.
pub const SERVER_EXIT_CODES_HELP: &str = "Exit codes:
  0  the client ended the session (stdin closed)
  2  bad input or usage
  3  the registry or the client's pipes could not be used
  128+N  stopped by signal N (the registration is released first)";

/// The `--namespace` parser: clap lists the five values in help and errors and suggests
/// the nearest one for a typo.
pub fn namespace_parser() -> impl clap::builder::TypedValueParser<Value = fleet_identity::Namespace> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(fleet_identity::Namespace::ALL.map(|ns| ns.as_str()))
        .try_map(|s| s.parse::<fleet_identity::Namespace>())
}

/// The `--client` parser of an agent client: clap lists each with what it is in help,
/// accepts its aliases, and suggests the nearest name for a typo.
pub fn agent_client_parser() -> impl clap::builder::TypedValueParser<Value = fleet_runtime::AgentClient> {
    use clap::builder::{PossibleValue, TypedValueParser};
    let values = fleet_runtime::AgentClient::ALL
        .map(|c| PossibleValue::new(c.as_str()).help(c.about()).aliases(c.aliases().iter().copied()));
    clap::builder::PossibleValuesParser::new(values).try_map(|s| s.parse::<fleet_runtime::AgentClient>())
}

/// How log events are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per event, for log collectors.
    Json,
}

/// Starts structured logging on stderr. `RUST_LOG` chooses what is logged (default
/// `warn`; `RUST_LOG=info` shows every mutation and every refusal, each one event with
/// its reason code). A logger that cannot start is not worth failing a command for.
pub fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    use std::io::IsTerminal;
    let colour = io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(io::stderr).with_ansi(colour);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => {
            let started = builder.json().try_init();
            fleet_runtime::json_diagnostics(started.is_ok());
            started
        }
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_store_error_prints_every_cause_it_does_not_already_say() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "permission denied (os error 13)");
        let e = fleet_registry::StoreError::with_source(
            fleet_registry::StoreErrorKind::Unavailable,
            "cannot open the registry",
            io,
        );
        let failure = super::Failure::from(e);
        assert_eq!(failure.to_string(), "cannot open the registry: permission denied (os error 13)");
        assert_eq!(failure.code(), 3);
    }
}
