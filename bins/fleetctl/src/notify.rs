//! systemd's service notification protocol (`sd_notify(3)`), for `fleetctl serve` under
//! `Type=notify`: `READY=1` once the port is bound, and, when the unit sets
//! `WatchdogSec=`, `WATCHDOG=1` at half that interval for as long as the server's loop
//! keeps turning (a hung server stops pinging and systemd restarts it). Outside systemd
//! (`NOTIFY_SOCKET` unset) nothing is sent.

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sends `state` to the service manager, if there is one.
pub(crate) fn send(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let Ok(sender) = UnixDatagram::unbound() else { return };
    let text = socket.to_string_lossy();
    // An abstract socket is named with a leading '@'.
    let sent = match text.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt as _;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|addr| sender.send_to_addr(state.as_bytes(), &addr))
        }
        None => sender.send_to(state.as_bytes(), &*text),
    };
    if let Err(e) = sent {
        fleet_cli::warn(format_args!("fleetctl: cannot notify the service manager at {text}: {e}"));
    }
}

/// The interval systemd's watchdog asks for (`WATCHDOG_USEC`), if any.
fn watchdog() -> Option<Duration> {
    std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|u| *u > 0)
        .map(Duration::from_micros)
}

/// How long the server's loop may wait before it turns again: a second, or a quarter of
/// the watchdog's interval where that is shorter, so that every ping (at half the
/// interval) finds the loop turned since the last.
pub(crate) fn turn_every() -> Duration {
    watchdog()
        .map_or(Duration::from_secs(1), |w| (w / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)))
}

/// Pings the watchdog at half the interval systemd asks for (`WATCHDOG_USEC`), while
/// `turns` keeps moving between two pings; does nothing without a watchdog.
pub(crate) fn watch(turns: &'static AtomicU64) {
    let Some(interval) = watchdog() else { return };
    let period = (interval / 2).max(Duration::from_millis(20));
    let _ = std::thread::Builder::new().name("fleetctl-watchdog".into()).spawn(move || {
        let mut last = turns.load(Ordering::Relaxed);
        loop {
            std::thread::sleep(period);
            let now = turns.load(Ordering::Relaxed);
            if now != last {
                send("WATCHDOG=1");
            }
            last = now;
        }
    });
}
