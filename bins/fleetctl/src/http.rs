//! The smallest HTTP/1.1 server `fleetctl serve` needs, with every resource bounded.
//!
//! One thread reads request heads from every connection at once (`poll` on non-blocking
//! sockets), so a client that sends its head slowly, or never, holds a buffer and a
//! descriptor, never a thread. A head must arrive whole within a few seconds of the
//! connection (a total deadline, not one per read) and within 8 KiB. At most
//! [`MAX_PENDING`] connections wait for their heads, [`MAX_PER_PEER`] of them from one
//! address: past either bound the oldest such connection is closed to make room, so a
//! flood of half-requests cannot keep a scrape out. Complete heads go to a fixed number
//! of threads through a bounded queue (past it the connection is closed at once), and
//! each answer must be taken within a few seconds. One request per connection
//! (`Connection: close`). A full descriptor table closes the oldest waiting connection
//! instead of ending the server; any other failure to accept ends it with an error.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads answering requests.
const THREADS: usize = 4;
/// Complete requests waiting for a thread.
const QUEUE: usize = 64;
/// The largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// Connections waiting for their request heads, in all.
pub(crate) const MAX_PENDING: usize = 256;
/// Connections waiting for their request heads from one address.
pub(crate) const MAX_PER_PEER: usize = 64;
/// How long a client has to send its whole request head, and to take each write of
/// the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A request's method and path.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    /// What follows `?` in the target (empty without one).
    pub(crate) query: &'a str,
}

/// An answer: status, content type and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
    /// Methods to name in `Allow` (a 405).
    pub(crate) allow: Option<&'static str>,
    /// Server-sent events to stream instead of a body.
    pub(crate) events: Option<Events>,
}

impl Response {
    /// A plain-text answer.
    pub(crate) fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
            allow: None,
            events: None,
        }
    }
}

/// A stream of server-sent events: asked about once a second while the client stays
/// connected; `Some(data)` is sent as one event.
pub(crate) struct Events(pub(crate) Box<dyn FnMut() -> Option<String> + Send>);

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Events")
    }
}

/// Event streams open at once; each has a thread of its own, so none holds one of the
/// threads that answer requests. Past this a stream is refused (503) and the client's
/// `EventSource` tries again.
const MAX_STREAMS: usize = 8;
/// How long one stream lasts; the client reconnects (`retry`), which bounds what a
/// forgotten page holds.
const STREAM_FOR: Duration = Duration::from_secs(300);
/// A comment is sent after this long without an event, so a client that went away is
/// noticed by the failed write.
const STREAM_QUIET: Duration = Duration::from_secs(15);
static STREAMS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Streams `events` to `stream` on a thread of its own, or refuses when as many streams
/// as allowed are open.
fn stream_events(mut stream: TcpStream, mut events: Events) {
    use std::sync::atomic::Ordering::SeqCst;
    if STREAMS.fetch_add(1, SeqCst) >= MAX_STREAMS {
        STREAMS.fetch_sub(1, SeqCst);
        let _ = stream.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 5\r\nConnection: close\r\n\r\n",
        );
        return;
    }
    struct Slot;
    impl Drop for Slot {
        fn drop(&mut self) {
            STREAMS.fetch_sub(1, SeqCst);
        }
    }
    let spawned = std::thread::Builder::new().name("fleetctl-events".into()).spawn(move || {
        let _slot = Slot;
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
                    Connection: close\r\n\r\nretry: 1000\n\n";
        if stream.write_all(head.as_bytes()).is_err() {
            return;
        }
        let (started, mut quiet_since) = (Instant::now(), Instant::now());
        while started.elapsed() < STREAM_FOR {
            // A client that hung up frees its slot within a second, not on the second
            // write that fails: its end of the connection reads as closed.
            if hung_up(&stream) {
                return;
            }
            let written = match (events.0)() {
                Some(data) => stream.write_all(format!("data: {data}\n\n").as_bytes()),
                None if quiet_since.elapsed() >= STREAM_QUIET => stream.write_all(b": still here\n\n"),
                None => {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                }
            };
            if written.is_err() {
                return;
            }
            quiet_since = Instant::now();
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    if spawned.is_err() {
        STREAMS.fetch_sub(1, SeqCst);
    }
}

/// Whether the client closed its end: an event stream's client sends nothing after its
/// request, so a read that would find the end of the stream means it is gone.
fn hung_up(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let closed = matches!(stream.peek(&mut byte), Ok(0));
    // Writes wait again as before (each within the write timeout).
    closed || stream.set_nonblocking(false).is_err()
}

/// What every answer tells the browser: run no script but the server's own page script,
/// load nothing from elsewhere, be framed by no one, and take each body for what its
/// type says.
const SECURITY_HEADERS: &str = "Content-Security-Policy: default-src 'none'; script-src 'self'; \
     connect-src 'self'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'\r\nX-Content-Type-Options: nosniff\r\n";

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// What the head reader hands an answering thread.
type Job = (TcpStream, Result<String, Head>);

/// Serves `handle` on `listener` until accepting fails for a reason other than a
/// passing shortage; returns that error.
pub(crate) fn serve<H>(listener: TcpListener, handle: H) -> io::Error
where
    H: Fn(&Request<'_>) -> Response + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let (queue, waiting) = mpsc::sync_channel::<Job>(QUEUE);
    let waiting = Arc::new(Mutex::new(waiting));
    for n in 0..THREADS {
        let waiting = Arc::clone(&waiting);
        let handle = Arc::clone(&handle);
        let spawned = std::thread::Builder::new().name(format!("fleetctl-http-{n}")).spawn(move || {
            loop {
                let next = waiting.lock().map_err(|_| ()).and_then(|w| w.recv().map_err(|_| ()));
                let Ok((stream, head)) = next else { return };
                answer(stream, head, handle.as_ref());
            }
        });
        if let Err(e) = spawned {
            return e;
        }
    }
    if let Err(e) = listener.set_nonblocking(true) {
        return e;
    }
    Heads::default().run(&listener, &queue)
}

/// A connection whose request head is still arriving.
struct Pending {
    stream: TcpStream,
    peer: Option<IpAddr>,
    since: Instant,
    head: Vec<u8>,
}

/// The connections whose heads are arriving, oldest first.
#[derive(Default)]
struct Heads {
    pending: VecDeque<Pending>,
}

impl Heads {
    fn run(mut self, listener: &TcpListener, queue: &SyncSender<Job>) -> io::Error {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        loop {
            let now = Instant::now();
            let wait = self
                .pending
                .front()
                .map_or(CLIENT_TIMEOUT, |p| (p.since + CLIENT_TIMEOUT).saturating_duration_since(now));
            let timeout = PollTimeout::try_from(wait + Duration::from_millis(1)).unwrap_or(PollTimeout::MAX);
            let ready: Vec<bool> = {
                let mut fds = Vec::with_capacity(self.pending.len() + 1);
                fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
                fds.extend(self.pending.iter().map(|p| PollFd::new(p.stream.as_fd(), PollFlags::POLLIN)));
                match poll(&mut fds, timeout) {
                    Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => return io::Error::from(e),
                }
                fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect()
            };
            // Heads first (their connections are the older ones), then new connections.
            let mut kept = VecDeque::with_capacity(self.pending.len());
            for (mut p, ready) in std::mem::take(&mut self.pending).into_iter().zip(ready.iter().skip(1)) {
                let outcome = if *ready { read_some(&mut p) } else { Ok(None) };
                match outcome {
                    Ok(None) if p.since.elapsed() >= CLIENT_TIMEOUT => {
                        dispatch(queue, p.stream, Err(Head::TimedOut))
                    }
                    Ok(None) => kept.push_back(p),
                    Ok(Some(head)) => dispatch(queue, p.stream, head),
                    // Gone: the client hung up.
                    Err(()) => {}
                }
            }
            self.pending = kept;
            if ready.first().copied().unwrap_or(false)
                && let Err(e) = self.accept(listener)
            {
                return e;
            }
        }
    }

    /// Accepts every connection waiting, making room for each as the bounds say.
    fn accept(&mut self, listener: &TcpListener) -> Result<(), io::Error> {
        loop {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let peer = Some(peer.ip());
                    let from_peer = self.pending.iter().filter(|p| p.peer == peer).count();
                    if from_peer >= MAX_PER_PEER
                        && let Some(oldest) = self.pending.iter().position(|p| p.peer == peer)
                    {
                        self.pending.remove(oldest);
                    }
                    if self.pending.len() >= MAX_PENDING {
                        self.pending.pop_front();
                    }
                    self.pending.push_back(Pending { stream, peer, since: Instant::now(), head: Vec::new() });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                // Out of descriptors: the oldest waiting connection makes room, else wait.
                Err(e) if passing(&e) => {
                    if self.pending.pop_front().is_none() {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads what has arrived on `p`: `Ok(Some(head))` once the head is whole (or too
/// large), `Ok(None)` while it is still arriving, `Err(())` when the client is gone.
fn read_some(p: &mut Pending) -> Result<Option<Result<String, Head>>, ()> {
    let mut buf = [0u8; 1024];
    loop {
        match p.stream.read(&mut buf) {
            Ok(0) => return Err(()),
            Ok(n) => p.head.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(()),
        }
        if let Some(end) = p.head.windows(4).position(|w| w == b"\r\n\r\n") {
            p.head.truncate(end);
            return Ok(Some(Ok(String::from_utf8_lossy(&p.head).into_owned())));
        }
        if p.head.len() > MAX_HEAD {
            return Ok(Some(Err(Head::TooLarge)));
        }
    }
}

/// Hands a connection to the answering threads; every one busy and the queue full,
/// closing it at once is the answer a scraper retries on.
fn dispatch(queue: &SyncSender<Job>, stream: TcpStream, head: Result<String, Head>) {
    match queue.try_send((stream, head)) {
        Ok(()) | Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {}
    }
}

/// A failure to accept that passes: out of descriptors or memory for now, or a
/// connection that went away before it was accepted.
fn passing(e: &io::Error) -> bool {
    use nix::libc;
    matches!(e.kind(), io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted)
        || matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

fn answer(
    mut stream: TcpStream,
    head: Result<String, Head>,
    handle: &(dyn Fn(&Request<'_>) -> Response + Send + Sync),
) {
    if stream.set_nonblocking(false).is_err() || stream.set_write_timeout(Some(CLIENT_TIMEOUT)).is_err() {
        return;
    }
    let (mut response, head_only) = match head {
        Ok(head) => match parse(&head) {
            Some(request) => (handle(&request), request.method == "HEAD"),
            None => (Response::text(400, "bad request\n"), false),
        },
        Err(Head::TooLarge) => (Response::text(431, "request head too large\n"), false),
        Err(Head::TimedOut) => (Response::text(408, "request timeout\n"), false),
    };
    if let Some(events) = response.events.take().filter(|_| !head_only) {
        return stream_events(stream, events);
    }
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    if let Some(allow) = response.allow {
        head.push_str(&format!("Allow: {allow}\r\n"));
    }
    head.push_str(SECURITY_HEADERS);
    head.push_str("\r\n");
    // A client that hung up, or does not read within the timeout, is its own business.
    let body = if head_only { &[][..] } else { response.body.as_bytes() };
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Why a head was not read whole.
#[derive(Debug)]
enum Head {
    TooLarge,
    TimedOut,
}

/// The method and path of a request line `METHOD PATH HTTP/1.x`.
fn parse(head: &str) -> Option<Request<'_>> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Some(Request { method, path, query })
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_request_line_gives_its_method_and_path_and_nothing_else_parses() {
        let r = parse("GET /metrics?x=1 HTTP/1.1\r\nHost: a").unwrap();
        assert_eq!((r.method, r.path), ("GET", "/metrics"));
        for bad in ["", "GET", "GET /metrics", "GET /metrics SPDY/3", "GET  /metrics HTTP/1.1", "\u{0}"] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
