//! The runtime's own diagnostics on standard error (a heartbeat that failed and will
//! retry, a command that could not start): one line each, or one JSON event each when
//! the binary logs JSON.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether diagnostics are JSON events (`--log-format json`).
static JSON: AtomicBool = AtomicBool::new(false);

/// Makes every diagnostic a `tracing` event (for a process whose stderr carries one
/// JSON object per line) or, with `false`, a plain line again.
pub fn json_diagnostics(enabled: bool) {
    JSON.store(enabled, Ordering::Relaxed);
}

/// Whether diagnostics are `tracing` events (see [`json_diagnostics`]).
pub fn diagnostics_are_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// One line on standard error that never panics: a diagnostic nobody can read is dropped.
/// Under JSON diagnostics it is a `WARN` event, one JSON object like every other.
pub fn warn(args: fmt::Arguments<'_>) {
    if diagnostics_are_json() {
        tracing::warn!(target: "fleet", "{args}");
        return;
    }
    line(args);
}

/// `args` as one line on standard error; a line nobody can read is dropped.
fn line(args: fmt::Arguments<'_>) {
    let mut err = io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
}

/// A line that says what the process is doing (a server's address at start), not that
/// anything went wrong: a plain line on standard error, or under JSON diagnostics an
/// `INFO` event (shown when `RUST_LOG` lets info through).
pub fn notice(args: fmt::Arguments<'_>) {
    if diagnostics_are_json() {
        tracing::info!(target: "fleet", "{args}");
        return;
    }
    line(args);
}
