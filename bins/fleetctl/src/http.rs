//! The smallest HTTP/1.1 server `fleetctl serve` needs, with every resource bounded: a
//! fixed number of threads answer, a bounded queue holds the connections waiting for
//! them (past it a connection is closed at once), a request head may be 8 KiB, and each
//! connection gets a few seconds to send its request and to take its answer. One
//! request per connection (`Connection: close`), so a client that pipelines requests
//! and never reads holds one thread until its write timeout, never the others. A full
//! descriptor table pauses accepting instead of ending the server; any other failure to
//! accept ends it with an error.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Threads answering requests.
const THREADS: usize = 4;
/// Connections accepted and waiting for a thread.
const QUEUE: usize = 64;
/// The largest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// How long a client has to send its request, and to take each write of the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// A request's method and path.
#[derive(Debug)]
pub(crate) struct Request<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
}

/// An answer: status, content type and body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) content_type: &'static str,
    pub(crate) body: String,
    /// Methods to name in `Allow` (a 405).
    pub(crate) allow: Option<&'static str>,
}

impl Response {
    /// A plain-text answer.
    pub(crate) fn text(status: u16, body: impl Into<String>) -> Self {
        Self { status, content_type: "text/plain; charset=utf-8", body: body.into(), allow: None }
    }
}

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

/// Serves `handle` on `listener` until accepting fails for a reason other than a
/// passing shortage; returns that error.
pub(crate) fn serve<H>(listener: TcpListener, handle: H) -> io::Error
where
    H: Fn(&Request<'_>) -> Response + Send + Sync + 'static,
{
    let handle = Arc::new(handle);
    let (queue, waiting) = mpsc::sync_channel::<TcpStream>(QUEUE);
    let waiting = Arc::new(Mutex::new(waiting));
    for n in 0..THREADS {
        let waiting = Arc::clone(&waiting);
        let handle = Arc::clone(&handle);
        let spawned = std::thread::Builder::new().name(format!("fleetctl-http-{n}")).spawn(move || {
            loop {
                let next = waiting.lock().map_err(|_| ()).and_then(|w| w.recv().map_err(|_| ()));
                let Ok(stream) = next else { return };
                answer(stream, handle.as_ref());
            }
        });
        if let Err(e) = spawned {
            return e;
        }
    }
    accept(&listener, &queue)
}

fn accept(listener: &TcpListener, queue: &SyncSender<TcpStream>) -> io::Error {
    loop {
        match listener.accept() {
            Ok((stream, _)) => match queue.try_send(stream) {
                // Every thread busy and the queue full: closing the connection at once is
                // the answer a scraper retries on.
                Ok(()) | Err(TrySendError::Full(_)) => {}
                Err(TrySendError::Disconnected(_)) => {
                    return io::Error::other("every answering thread stopped");
                }
            },
            Err(e) if passing(&e) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return e,
        }
    }
}

/// A failure to accept that passes: out of descriptors or memory for now, or a
/// connection that went away before it was accepted.
fn passing(e: &io::Error) -> bool {
    use nix::libc;
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    ) || matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

fn answer(mut stream: TcpStream, handle: &(dyn Fn(&Request<'_>) -> Response + Send + Sync)) {
    if stream.set_read_timeout(Some(CLIENT_TIMEOUT)).is_err()
        || stream.set_write_timeout(Some(CLIENT_TIMEOUT)).is_err()
    {
        return;
    }
    let (response, head_only) = match read_head(&mut stream) {
        Ok(head) => match parse(&head) {
            Some(request) => (handle(&request), request.method == "HEAD"),
            None => (Response::text(400, "bad request\n"), false),
        },
        Err(Head::TooLarge) => (Response::text(431, "request head too large\n"), false),
        Err(Head::TimedOut) => (Response::text(408, "request timeout\n"), false),
        Err(Head::Gone) => return,
    };
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
    head.push_str("\r\n");
    // A client that hung up, or does not read within the timeout, is its own business.
    let body = if head_only { &[][..] } else { response.body.as_bytes() };
    let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body));
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

enum Head {
    TooLarge,
    TimedOut,
    Gone,
}

/// Reads up to the blank line that ends a request head.
fn read_head(stream: &mut TcpStream) -> Result<String, Head> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(0) => return Err(Head::Gone),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(Head::TimedOut);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Head::Gone),
        };
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(String::from_utf8_lossy(&head).into_owned());
        }
        if head.len() > MAX_HEAD {
            return Err(Head::TooLarge);
        }
    }
}

/// The method and path of a request line `METHOD PATH HTTP/1.x`.
fn parse(head: &str) -> Option<Request<'_>> {
    let line = head.lines().next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/1.") || method.is_empty() {
        return None;
    }
    let path = target.split('?').next().unwrap_or(target);
    Some(Request { method, path })
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
