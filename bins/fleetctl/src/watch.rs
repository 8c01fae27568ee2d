//! `--watch` on a listing (`worker list`, `lease show`, `host list`): drawn again every
//! `--interval` seconds until SIGINT or SIGTERM, as kubectl's `-w` and `watch(1)` do —
//! redrawn in place on a terminal, and on a pipe printed again only when it changed, so
//! a reader of the pipe gets one listing per change.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fleet_cli::{Failure, out};

/// `--watch` and `--interval`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WatchArgs {
    /// Draw the listing again every --interval seconds until Ctrl-C: in place on a
    /// terminal; on a pipe, again only when it changed.
    #[arg(short = 'w', long)]
    pub(crate) watch: bool,
    /// Seconds between looks under --watch (0.2 to 3600).
    #[arg(long, default_value_t = 2.0, requires = "watch")]
    pub(crate) interval: f64,
}

/// Draws `frame` until a stop signal. A frame that fails (the registry unreachable for
/// a while) is shown as its one line, and the next look tries again.
pub(crate) fn watch(
    args: &WatchArgs,
    mut frame: impl FnMut() -> Result<String, Failure>,
) -> Result<(), Failure> {
    if !(0.2..=3600.0).contains(&args.interval) {
        return Err(Failure::usage(format!("--interval {} is outside 0.2..=3600 seconds", args.interval)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| Failure::store(format!("cannot watch for Ctrl-C: {e}")))?;
    }
    let in_place = std::io::stdout().is_terminal();
    let interval = Duration::from_secs_f64(args.interval);
    let mut last: Option<String> = None;
    while !stop.load(Ordering::SeqCst) {
        let text = frame().unwrap_or_else(|failure| format!("{failure}\n"));
        if in_place {
            out!("\x1b[H\x1b[2J{text}")?;
        } else if last.as_ref() != Some(&text) {
            out!("{text}")?;
        }
        fleet_cli::flush_stdout()?;
        last = Some(text);
        let deadline = Instant::now() + interval;
        while Instant::now() < deadline && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}
