//! How a Fleetward binary meets a person: the exit codes of DESIGN.md and the one line
//! a failure prints ([`Failure`]), standard output that never panics (`out!`, `outln!`,
//! [`print_json`]), logging on stderr, argument parsing, and the shell completions and
//! manual pages of a binary's commands. Only the binaries link it: nothing below them
//! knows an exit code.

#![warn(missing_docs)]

mod exit;
pub mod manuals;

pub use exit::{
    EXIT_CODES_HELP, Failure, LAUNCHER_EXIT_CODES_HELP, LogFormat, SERVER_EXIT_CODES_HELP,
    agent_client_parser, flush_stdout, init_logging, namespace_parser, parse_args, parse_args_with,
    print_json, write_stdout,
};
pub use fleet_runtime::warn;
