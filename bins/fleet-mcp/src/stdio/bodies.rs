//! What the guard writes besides the lines it passes: bodies a tool parked to be
//! written verbatim in place of a placeholder, and a standard output that grows its
//! pipe to fit a large answer.

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWrite;

/// The key of a placeholder object; see [`Bodies`].
pub(super) const PLACEHOLDER_KEY: &str = "fleet_mcp_body";

/// A parked body not written within this long belongs to an answer that will never be
/// sent (its session ended); it is dropped at the next [`Bodies::park`].
const ABANDONED: Duration = Duration::from_secs(600);

/// JSON bodies that the guard writes verbatim in place of a small placeholder.
///
/// The SDK carries a tool's structured content as a `serde_json::Value` tree. For a
/// 10 000-worker snapshot, building that tree, writing it out and freeing it was most of
/// the server's work (allocations for some 150 000 map entries and strings). A tool
/// answering through the guard instead writes its body to bytes once, straight from its
/// own types, and parks it here; the SDK gets a placeholder object
/// (`{"fleet_mcp_body": "NONCE-N"}`), and the guard's writer puts the body in its place
/// as the line goes out. The placeholder is an object, so the SDK treats the result like
/// any other. Its text can only occur unescaped in an outgoing line as that object
/// (inside a JSON string its quotes are escaped), and the per-process nonce and
/// sequence number name exactly one parked body: anything else passes untouched.
#[derive(Debug)]
pub struct Bodies {
    /// `{"fleet_mcp_body":"NONCE-`: the start of every placeholder of this process.
    prefix: String,
    pub(super) nonce: String,
    next: AtomicU64,
    parked: Mutex<Vec<Parked>>,
}

#[derive(Debug)]
struct Parked {
    seq: u64,
    at: Instant,
    body: Vec<u8>,
}

impl Bodies {
    /// A store with a nonce of its own.
    pub fn new() -> Arc<Self> {
        // The standard library seeds every `RandomState` from the OS's randomness.
        let nonce =
            format!("{:016x}", std::collections::hash_map::RandomState::new().build_hasher().finish());
        Arc::new(Self {
            prefix: format!(r#"{{"{PLACEHOLDER_KEY}":"{nonce}-"#),
            nonce,
            next: AtomicU64::new(0),
            parked: Mutex::new(Vec::new()),
        })
    }

    /// Parks `body` (the JSON text of one value) and returns the placeholder to answer
    /// with in its place. Only a transport made by [`super::guard`] with this store replaces it.
    pub fn park(&self, body: Vec<u8>) -> Value {
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let mut parked = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        parked.retain(|p| p.at.elapsed() < ABANDONED);
        parked.push(Parked { seq, at: Instant::now(), body });
        json!({ PLACEHOLDER_KEY: format!("{}-{seq}", self.nonce) })
    }

    /// Where `line` holds the placeholder of a parked body: the bytes before it, the
    /// body (taken from the store), and the bytes after it.
    pub(super) fn take<'l>(&self, line: &'l [u8]) -> Option<(&'l [u8], Vec<u8>, &'l [u8])> {
        let start = memchr::memmem::find(line, self.prefix.as_bytes())?;
        let rest = &line[start + self.prefix.len()..];
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        let tail = rest[digits..].strip_prefix(br#""}"#)?;
        let seq: u64 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
        let mut parked = self.parked.lock().unwrap_or_else(PoisonError::into_inner);
        let index = parked.iter().position(|p| p.seq == seq)?;
        Some((&line[..start], parked.swap_remove(index).body, tail))
    }
}

/// Standard output that grows its pipe to fit a large answer.
///
/// A pipe holds 64 KiB by default, so a 4 MB answer (a 10 000-worker snapshot) crossed
/// it in some 70 fills, each a sleep and a wake-up of server and client. Before a write
/// larger than the pipe, this asks for a pipe that fits it, up to 1 MiB (or the
/// system's `/proc/sys/fs/pipe-max-size`, if lower). Only a server that sends such an
/// answer grows its pipe: every pipe's size counts against its user's allowance
/// (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB by default), past which each new pipe
/// the user makes gets a single page, so five servers per launch must not all take
/// 1 MiB up front. Stdout that is not a pipe, or a refused size, stays as it is.
///
/// It writes through its own descriptor for standard output as a plain file: the
/// standard library's `Stdout` is line-buffered, and searched each 4 MB answer for its
/// last newline before passing it on (4% of a 10 000-worker snapshot call).
#[derive(Debug)]
pub struct GrowingStdout {
    inner: tokio::fs::File,
    /// The pipe's size now, or `usize::MAX` once it cannot or need not grow further.
    capacity: usize,
    /// The largest size to ask for.
    max: usize,
}

impl GrowingStdout {
    /// Standard output, not grown yet.
    ///
    /// # Errors
    /// When standard output is closed (its descriptor cannot be duplicated).
    pub fn new() -> std::io::Result<Self> {
        use nix::fcntl::{FcntlArg, fcntl};
        use std::os::fd::AsFd as _;
        let file = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
        let capacity = fcntl(std::io::stdout(), FcntlArg::F_GETPIPE_SZ)
            .ok()
            .and_then(|size| usize::try_from(size).ok())
            .unwrap_or(usize::MAX);
        let max = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|text| text.trim().parse::<usize>().ok())
            .map_or(1 << 20, |max| max.min(1 << 20));
        Ok(Self { inner: tokio::fs::File::from_std(file), capacity, max })
    }

    /// Grows the pipe to fit a write of `len` bytes, as far as it may.
    fn fit(&mut self, len: usize) {
        use nix::fcntl::{FcntlArg, fcntl};
        if len <= self.capacity {
            return;
        }
        let wanted = len.next_power_of_two().min(self.max);
        let grown = i32::try_from(wanted)
            .ok()
            .and_then(|size| fcntl(std::io::stdout(), FcntlArg::F_SETPIPE_SZ(size)).ok())
            .and_then(|size| usize::try_from(size).ok());
        self.capacity = match grown {
            Some(size) if size < self.max => size,
            // At the largest size it may have, or refused: never asked again.
            _ => usize::MAX,
        };
    }
}

impl AsyncWrite for GrowingStdout {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        this.fit(buf.len());
        std::pin::Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
