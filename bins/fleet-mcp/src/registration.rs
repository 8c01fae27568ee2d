//! This server's own registration, made in the background. A registry that is busy (a
//! writer stalled while holding its lock) or unreachable for a while must not hold the
//! client's `initialize`: clients give a server a few seconds to start (Codex's
//! `startup_timeout_sec` defaults to 10) and then drop it. The server waits for the
//! first attempt at most [`FIRST_ATTEMPT_WAIT`] (on a healthy registry it lands in
//! milliseconds, so a client sees the worker registered once it is initialized), then
//! answers, serves diagnostic reads, and its mutating tools refuse
//! `registration_pending` until the registration lands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fleet_registry::{StoreErrorKind, WorkerRow};
use fleet_runtime::WorkerSession;

/// What this server knows of its own registration, shared by the tools and the thread
/// that makes it.
#[derive(Debug, Clone)]
pub struct Registration(Arc<(Mutex<Slot>, Condvar)>);

/// How long the server waits for its first registration attempt before it serves: on
/// a healthy registry the attempt lands in milliseconds, so a client sees its worker
/// registered once initialized; behind stalled writers `initialize` waits no longer.
pub const FIRST_ATTEMPT_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug)]
enum Slot {
    /// Not registered yet; the last attempt's error, if one failed and will be retried.
    Pending(Option<String>),
    /// Registered, or refused for good.
    Settled(Box<Result<WorkerRow, String>>),
}

impl Registration {
    /// A registration already decided (tests, and a server that never registers).
    pub fn settled(result: Result<WorkerRow, String>) -> Self {
        Self(Arc::new((Mutex::new(Slot::Settled(Box::new(result))), Condvar::new())))
    }

    fn pending() -> Self {
        Self(Arc::new((Mutex::new(Slot::Pending(None)), Condvar::new())))
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.0.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, slot: Slot) {
        *self.slot() = slot;
        self.0.1.notify_all();
    }

    /// Waits until the first attempt has ended (registered, refused, or failed and
    /// retrying), at most `timeout`.
    pub fn wait_first_attempt(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut slot = self.slot();
        while matches!(*slot, Slot::Pending(None)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            slot = self.0.1.wait_timeout(slot, left).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// Whether the registration is still under way (no row yet, and attempts go on).
    pub fn is_pending(&self) -> bool {
        matches!(*self.slot(), Slot::Pending(_))
    }

    /// The row as registered, or why there is none (yet).
    pub fn row(&self) -> Result<WorkerRow, String> {
        match &*self.slot() {
            Slot::Settled(result) => (**result).clone(),
            Slot::Pending(None) => Err("registration pending: the first attempt is under way".into()),
            Slot::Pending(Some(e)) => Err(format!("registration pending, retrying: {e}")),
        }
    }
}

/// Why an attempt failed, and whether another attempt can succeed.
#[derive(Debug)]
pub struct AttemptError {
    /// What went wrong, for the operator and the agent.
    pub message: String,
    /// The registry was busy or unreachable: a later attempt may succeed.
    pub transient: bool,
}

impl AttemptError {
    /// A failure no retry can mend (a bad identity, a refused launch).
    pub fn permanent(message: impl Into<String>) -> Self {
        Self { message: message.into(), transient: false }
    }
}

impl From<fleet_registry::StoreError> for AttemptError {
    fn from(e: fleet_registry::StoreError) -> Self {
        let transient = matches!(e.kind(), StoreErrorKind::Busy | StoreErrorKind::Unavailable);
        Self { message: e.to_string(), transient }
    }
}

/// The thread that registers this server, retrying while the registry is busy or
/// unreachable, until it succeeds, fails for good, or the server stops.
#[derive(Debug)]
pub struct Registrar {
    registration: Registration,
    stopping: Arc<AtomicBool>,
    thread: JoinHandle<Option<WorkerSession>>,
}

/// The first pause between attempts; each next one doubles, up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(500);
const MAX_PAUSE: Duration = Duration::from_secs(10);

impl Registrar {
    /// Starts registering with `attempt` on a thread of its own.
    pub fn start(
        attempt: impl Fn() -> Result<WorkerSession, AttemptError> + Send + 'static,
    ) -> std::io::Result<Self> {
        let registration = Registration::pending();
        let stopping = Arc::new(AtomicBool::new(false));
        let thread = {
            let (registration, stopping) = (registration.clone(), Arc::clone(&stopping));
            std::thread::Builder::new()
                .name("fleet-register".into())
                .spawn(move || register_until_settled(&attempt, &registration, &stopping))?
        };
        Ok(Self { registration, stopping, thread })
    }

    /// The registration the tools read.
    pub fn registration(&self) -> Registration {
        self.registration.clone()
    }

    /// Stops retrying and hands back the session, if one was made: an attempt under way
    /// runs to its end first (bounded by the registry's lock and connect timeouts), so a
    /// row it writes is released, never left active.
    pub fn finish(self) -> Option<WorkerSession> {
        self.stopping.store(true, Ordering::SeqCst);
        self.thread.thread().unpark();
        self.thread.join().ok().flatten()
    }
}

fn register_until_settled(
    attempt: &dyn Fn() -> Result<WorkerSession, AttemptError>,
    registration: &Registration,
    stopping: &AtomicBool,
) -> Option<WorkerSession> {
    let mut pause = FIRST_PAUSE;
    loop {
        match attempt() {
            Ok(session) => {
                registration.set(Slot::Settled(Box::new(Ok(session.row().clone()))));
                return Some(session);
            }
            Err(e) if e.transient && !stopping.load(Ordering::SeqCst) => {
                fleet_cli::warn(format_args!(
                    "fleet-mcp: not registered yet, retrying in {:.1} s: {}",
                    pause.as_secs_f64(),
                    e.message
                ));
                registration.set(Slot::Pending(Some(e.message)));
                std::thread::park_timeout(pause);
                if stopping.load(Ordering::SeqCst) {
                    registration
                        .set(Slot::Settled(Box::new(Err("the server stopped before it registered".into()))));
                    return None;
                }
                pause = (pause * 2).min(MAX_PAUSE);
            }
            Err(e) => {
                fleet_cli::warn(format_args!(
                    "fleet-mcp: not registered, serving diagnostic reads only: {}",
                    e.message
                ));
                registration.set(Slot::Settled(Box::new(Err(e.message))));
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_registration_says_so_and_a_settled_one_is_final() {
        let pending = Registration::pending();
        assert!(pending.row().unwrap_err().starts_with("registration pending"));
        pending.set(Slot::Pending(Some("registry busy".into())));
        assert_eq!(pending.row().unwrap_err(), "registration pending, retrying: registry busy");
        let refused = Registration::settled(Err("no identity".into()));
        assert_eq!(refused.row().unwrap_err(), "no identity");
    }

    #[test]
    fn a_permanent_failure_is_not_retried_and_stopping_ends_the_retries() {
        let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&tries);
        let registrar = Registrar::start(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Err(AttemptError::permanent("refused"))
        })
        .unwrap();
        let registration = registrar.registration();
        assert!(registrar.finish().is_none());
        assert_eq!(tries.load(Ordering::SeqCst), 1);
        assert_eq!(registration.row().unwrap_err(), "refused");

        let registrar =
            Registrar::start(|| Err(AttemptError { message: "busy".into(), transient: true })).unwrap();
        let registration = registrar.registration();
        assert!(registrar.finish().is_none());
        assert!(registration.row().is_err());
    }
}
