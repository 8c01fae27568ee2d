//! systemd's service notification protocol (`sd_notify(3)`), for `fleetctl serve` under
//! `Type=notify`: `READY=1` once the port is bound, and, when the unit sets
//! `WatchdogSec=`, `WATCHDOG=1` at half that interval for as long as requests are
//! answered through the registry (a server whose answering path hangs stops pinging and
//! systemd restarts it). Outside systemd (`NOTIFY_SOCKET` unset) nothing is sent.

use std::io::{Read as _, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

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

/// Pings the watchdog at half the interval systemd asks for (`WATCHDOG_USEC`) when a
/// request was answered through the registry since the last ping (`answered` moved);
/// when none was, it asks one itself: `GET /readyz` of `addr`, which takes the path every
/// request takes (the request loop, an answering thread, the server's session over the
/// registry) and must answer within a quarter of the interval. A registry that refuses
/// is an answer (a 503): the server is not hung, a restart would not help. One that
/// stops answering, or answering threads all stuck, is no answer: the pings stop and
/// systemd restarts the server. Does nothing without a watchdog.
pub(crate) fn watch(addr: SocketAddr, answered: impl Fn() -> u64 + Send + 'static) {
    let Some(interval) = watchdog() else { return };
    let period = (interval / 2).max(Duration::from_millis(20));
    let _ = std::thread::Builder::new().name("fleetctl-watchdog".into()).spawn(move || {
        let mut pinged = answered();
        loop {
            let started = Instant::now();
            if answered() == pinged {
                self_check(addr, period / 2);
            }
            let now = answered();
            if now != pinged {
                send("WATCHDOG=1");
                pinged = now;
            }
            std::thread::sleep(period.saturating_sub(started.elapsed()));
        }
    });
}

/// Asks the server at `addr` for `/readyz`; whether its answer began within `within`.
fn self_check(addr: SocketAddr, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, within) else { return false };
    let sent = stream
        .set_write_timeout(Some(within))
        .and_then(|()| stream.write_all(b"GET /readyz HTTP/1.0\r\nHost: watchdog\r\n\r\n"));
    let left = deadline.saturating_duration_since(Instant::now());
    if sent.is_err() || left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
        return false;
    }
    let mut status = [0u8; 9];
    stream.read_exact(&mut status).is_ok() && &status == b"HTTP/1.1 "
}

/// Where the server answers itself: the address it is bound to, or loopback where it
/// is bound to every address.
pub(crate) fn own_address(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::from((Ipv4Addr::LOCALHOST, bound.port())),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::from((Ipv6Addr::LOCALHOST, bound.port())),
        _ => bound,
    }
}
