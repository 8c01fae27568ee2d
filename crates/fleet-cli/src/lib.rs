//! How a Fleetward binary meets a person: the exit codes of DESIGN.md and the one line
//! a failure prints ([`Failure`]), standard output that never panics (`out!`, `outln!`,
//! [`print_json`]), logging on stderr, argument parsing, and the shell completions and
//! manual pages of a binary's commands. Only the binaries link it: nothing below them
//! knows an exit code.
//!
//! ```
//! use fleet_cli::Failure;
//!
//! // Bad input is exit 2, a check that said no exit 1, a store that could not be used 3.
//! assert_eq!(Failure::usage("--ttl 0 is outside 1..=86400 seconds").code(), 2);
//! assert_eq!(Failure::refused("the lease is held").code(), 1);
//! assert_eq!(Failure::store("cannot open the registry").code(), 3);
//! ```

#![deny(missing_docs)]

mod exit;
pub mod manuals;

pub use exit::{
    EXIT_CODES_HELP, Failure, LAUNCHER_EXIT_CODES_HELP, LogFormat, SERVER_EXIT_CODES_HELP,
    agent_client_parser, flush_stdout, init_logging, namespace_parser, parse_args, parse_args_with,
    print_json, write_stdout,
};
pub use fleet_runtime::{notice, warn};

/// `n` and the noun that counts it: `1 candidate`, `2 candidates`, `0 audit entries`.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(super::count(1, "instance", "instances"), "1 instance");
        assert_eq!(super::count(0, "instance", "instances"), "0 instances");
        assert_eq!(super::count(2, "audit entry", "audit entries"), "2 audit entries");
    }
}
