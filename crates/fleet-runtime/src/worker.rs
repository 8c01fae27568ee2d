//! A worker's life in the registry: register from the instance environment, heartbeat
//! on a background thread every third of the TTL (asking a sweep thread of its own, on
//! the same tick, to mark the fleet's lapsed rows stale), then release on a clean exit
//! or stop heartbeating (and leave the row for the TTL to lapse) after a crash.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fleet_identity::{GenerationId, Namespace, Repository, Timestamp};
use fleet_probe::LocalProbe;
use fleet_registry::OpenMode;
use fleet_registry::{
    HeartbeatTtl, ProcessIdentity, Registration, Revisions, StoreError, StoreErrorKind, WorkerCredential,
    WorkerRow, WorkerToken,
};

use crate::clock::now;
use crate::env::InstanceEnv;
use crate::location::{RegistryLocation, open_registry};

/// What a worker registers beyond its instance environment.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The namespace it serves.
    pub namespace: Namespace,
    /// The process the row describes (`fleet_probe::current_process` for the caller
    /// itself, `fleet_probe::process_identity` for a child).
    pub process: ProcessIdentity,
    /// How long a heartbeat stays valid.
    pub heartbeat_ttl: HeartbeatTtl,
    /// The repository it is bound to.
    pub repository: Option<Repository>,
    /// The revisions it runs.
    pub revisions: Revisions,
    /// The launch's client that started it (`LaunchProcess::from_env`), watched on every
    /// heartbeat: `None` for a worker started outside any launch, which then registers
    /// as unowned.
    pub launch: Option<crate::LaunchProcess>,
}

enum Stop {
    Now,
}

/// A registered worker with its heartbeat thread running.
#[derive(Debug)]
pub struct WorkerSession {
    location: RegistryLocation,
    row: WorkerRow,
    credential: WorkerCredential,
    lost: Arc<std::sync::OnceLock<String>>,
    stop: Option<mpsc::Sender<Stop>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stop")
    }
}

fn probe_error(e: fleet_probe::ProbeError) -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, format!("cannot read process evidence: {e}"))
}

impl WorkerSession {
    /// Registers the worker and starts heartbeating. The registry is created if missing.
    pub fn start(
        location: &RegistryLocation,
        env: &InstanceEnv,
        options: WorkerOptions,
    ) -> Result<Self, StoreError> {
        Self::start_sweeping(location, env, options, |me| stale_sweep(location.clone(), me.clone()))
    }

    /// [`start`](Self::start), with the heartbeat asking `sweep_of(worker)` for each of
    /// its sweeps: a function that sweeps once and returns the fleet's active worker
    /// count when it learned it.
    fn start_sweeping<F>(
        location: &RegistryLocation,
        env: &InstanceEnv,
        options: WorkerOptions,
        sweep_of: impl FnOnce(&fleet_identity::WorkerIdentity) -> F,
    ) -> Result<Self, StoreError>
    where
        F: FnMut() -> Option<usize> + Send + 'static,
    {
        let process = options.process;
        let probe = LocalProbe::new().map_err(probe_error)?;
        let generation_id = GenerationId::new(format!("gen-{}", uuid::Uuid::now_v7()))
            .map_err(|e| StoreError::invalid(e.to_string()))?;
        let registration = Registration {
            client_type: env.client_type.clone(),
            instance: env.instance.clone(),
            instance_provenance: env.provenance.clone(),
            fleet_run_id: env.fleet_run_id.clone(),
            namespace: options.namespace,
            profile: env.profile.clone(),
            session_id: env.session_id.clone(),
            generation_id: generation_id.clone(),
            process,
            repository: options.repository,
            heartbeat_ttl: options.heartbeat_ttl,
            revisions: options.revisions,
            claim: crate::claim_of(options.launch),
            hostname: std::fs::read_to_string("/proc/sys/kernel/hostname").ok(),
        };
        let token = WorkerToken::generate()?;
        let mut registry = open_registry(location, OpenMode::CreateIfMissing)?;
        let registered = registry.register(&registration, &token, now(), &probe)?;
        let credential = WorkerCredential {
            worker_identity: registered.row.worker_identity.clone(),
            generation_id,
            token,
        };
        let lost = Arc::new(std::sync::OnceLock::new());
        let (stop, stopped) = mpsc::channel();
        let thread = {
            let location = location.clone();
            let credential = credential.clone();
            let lost = Arc::clone(&lost);
            let interval = options.heartbeat_ttl.interval();
            let launch = options.launch;
            let sweep = sweep_of(&credential.worker_identity);
            std::thread::Builder::new()
                .name("fleet-heartbeat".into())
                .spawn(move || {
                    heartbeat_loop(&location, &credential, launch, interval, &stopped, &lost, sweep)
                })
                .map_err(|e| {
                    StoreError::new(StoreErrorKind::Unavailable, format!("cannot start heartbeat: {e}"))
                })?
        };
        Ok(Self {
            location: location.clone(),
            row: registered.row,
            credential,
            lost,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// The row as registered.
    pub fn row(&self) -> &WorkerRow {
        &self.row
    }

    /// Whether the registry stopped accepting this worker's heartbeats (its row was
    /// released, retired or taken by another generation).
    pub fn registration_lost(&self) -> bool {
        self.lost.get().is_some()
    }

    /// Why the registry refused this worker for good, once it has: its row retired,
    /// superseded or removed, or its host fenced (one line).
    pub fn lost_because(&self) -> Option<&str> {
        self.lost.get().map(String::as_str)
    }

    fn stop_heartbeats(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The thread may already have ended; then there is nothing to stop.
            let _ = stop.send(Stop::Now);
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Stops heartbeating and releases the registration: the clean-exit path.
    pub fn release(mut self) -> Result<WorkerRow, StoreError> {
        self.stop_heartbeats();
        let mut registry = open_registry(&self.location, OpenMode::MustExist)?;
        registry.release(&self.credential, now())
    }

    /// Stops heartbeating and leaves the row as it is: the crash path. The row stays
    /// active until its TTL lapses, then the sweep marks it stale.
    pub fn abandon(mut self) {
        self.stop_heartbeats();
    }
}

impl Drop for WorkerSession {
    fn drop(&mut self) {
        self.stop_heartbeats();
    }
}

/// How many workers, fleet-wide, sweep on each tick period on average.
const SWEEPERS_PER_TICK: u32 = 8;

/// Whether a worker of a fleet of `active_workers` sweeps on this tick, given a random
/// `roll`: always in a small fleet; in a larger one with probability
/// [`SWEEPERS_PER_TICK`] / `active_workers`, so the fleet as a whole reads the registry a
/// bounded number of times per tick period however large it grows (each sweep reads
/// every row), and a lapsed row is still found within about one period (no worker at all
/// sweeping in a period has probability about e⁻⁸).
fn sweeps_this_tick(active_workers: usize, roll: u32) -> bool {
    let fleet = u32::try_from(active_workers).unwrap_or(u32::MAX);
    fleet <= SWEEPERS_PER_TICK || roll % fleet < SWEEPERS_PER_TICK
}

/// A random number from the OS (0 if it cannot answer, which only makes a sweep likelier).
fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    let _ = getrandom::fill(&mut bytes);
    u32::from_le_bytes(bytes)
}

/// Whether this worker's clock agrees with the store's (see [`crate::clock`]): one read
/// of the store's clock, not of the fleet's rows.
fn clock_agrees(
    reg: &mut fleet_registry::Registry<crate::AnyStore>,
    at: Timestamp,
) -> Result<Result<(), crate::clock::ClockDisagreement>, StoreError> {
    Ok(crate::clock::against_store(at, reg.store_now()?))
}

fn heartbeat_loop(
    location: &RegistryLocation,
    credential: &WorkerCredential,
    launch: Option<crate::LaunchProcess>,
    interval: Duration,
    stopped: &mpsc::Receiver<Stop>,
    lost: &std::sync::OnceLock<String>,
    mut sweep_once: impl FnMut() -> Option<usize> + Send + 'static,
) {
    // The fleet's size as of this worker's last sweep; every worker sweeps until it knows.
    let active_workers = Arc::new(AtomicUsize::new(0));
    // Sweeps run on their own thread: a sweep reads every row, which at tens of
    // thousands of rows or behind a busy write lock takes longer than a beat, and a
    // worker's own heartbeat must never wait on it. A tick that finds the sweeper still
    // busy skips its sweep.
    let (sweep, sweeps) = mpsc::sync_channel::<()>(1);
    let sweeper = {
        let active_workers = Arc::clone(&active_workers);
        std::thread::Builder::new()
            .name("fleet-sweep".into())
            .spawn(move || {
                while sweeps.recv().is_ok() {
                    if let Some(active) = sweep_once() {
                        active_workers.store(active, Ordering::Relaxed);
                    }
                }
            })
            .map_err(|e| crate::warn(format_args!("fleet: cannot start the stale sweep: {e}")))
            .ok()
    };
    let mut registry = None;
    // Beats keep their cadence: the next is due one interval after the last was due,
    // however long the last took, so a slow beat never stretches the gap between two.
    let mut next_beat = Instant::now() + interval;
    // Until told to stop, or the session is gone.
    while let Err(RecvTimeoutError::Timeout) =
        stopped.recv_timeout(next_beat.saturating_duration_since(Instant::now()))
    {
        next_beat = (next_beat + interval).max(Instant::now());
        if registry.is_none() {
            registry = open_registry(location, OpenMode::MustExist)
                .map_err(|e| crate::warn(format_args!("fleet: heartbeat cannot open registry: {e}")))
                .ok();
        }
        let Some(reg) = registry.as_mut() else { continue };
        // A worker whose launch's client died says so on every beat: orphaned.
        match reg.heartbeat_claiming(credential, now(), crate::claim_of(launch)) {
            // The fleet keeps itself honest: every live worker, on its own tick, marks
            // the rows whose heartbeat lapsed stale, so retirement needs no operator.
            Ok(()) => {
                if sweeps_this_tick(active_workers.load(Ordering::Relaxed), random_u32()) {
                    // Full: the last sweep is still running, and this tick's is not needed.
                    let _ = sweep.try_send(());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    StoreErrorKind::NotFound | StoreErrorKind::Conflict | StoreErrorKind::Fenced
                ) =>
            {
                crate::warn(format_args!("fleet: registration lost: {e}"));
                let _ = lost.set(e.to_string());
                break;
            }
            // A busy or briefly unreachable registry: try again next beat, on a fresh
            // connection when this one may be the broken part (a PostgreSQL backend that
            // was terminated stays dead).
            Err(e) => {
                crate::warn(format_args!("fleet: heartbeat failed, will retry: {e}"));
                if e.kind() != StoreErrorKind::Busy {
                    registry = None;
                }
            }
        }
    }
    // The sweeper ends once its channel closes, after any sweep it is in.
    drop(sweep);
    if let Some(sweeper) = sweeper {
        let _ = sweeper.join();
    }
}

/// One sweep of the fleet's lapsed rows to stale by worker `me`, on a connection kept
/// between sweeps, returning the fleet's active worker count when it learned it.
fn stale_sweep(
    location: RegistryLocation,
    me: fleet_identity::WorkerIdentity,
) -> impl FnMut() -> Option<usize> {
    let mut registry = None;
    move || {
        if registry.is_none() {
            registry = open_registry(&location, OpenMode::MustExist)
                .map_err(|e| crate::warn(format_args!("fleet: the stale sweep cannot open registry: {e}")))
                .ok();
        }
        let reg = registry.as_mut()?;
        // A clock the fleet does not agree with must not judge its heartbeats.
        let at = now();
        let swept = match clock_agrees(reg, at) {
            Ok(Ok(())) => reg.sweep(at).map(Some),
            Ok(Err(disagreement)) => {
                crate::warn(format_args!(
                    "fleet: worker {me} does not sweep: {disagreement}; check this host's clock"
                ));
                Ok(None)
            }
            Err(e) => Err(e),
        };
        match swept {
            Ok(sweep) => sweep.map(|s| s.active_workers),
            Err(e) => {
                crate::warn(format_args!("fleet: stale sweep failed, will retry: {e}"));
                if e.kind() != StoreErrorKind::Busy {
                    registry = None;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{SWEEPERS_PER_TICK, sweeps_this_tick};

    /// A sweep that stalls (a read of every row over a network that stopped answering,
    /// or behind a long write) never stops the worker's own heartbeat: the row keeps
    /// beating while the sweep hangs, so it cannot lapse and close its own gate.
    #[test]
    fn a_stalled_sweep_does_not_stop_the_heartbeat() {
        use std::sync::mpsc;
        use std::time::{Duration, Instant};

        use crate::{Launch, RegistryLocation, open_registry};
        use fleet_registry::{HeartbeatTtl, OpenMode, Revisions};

        let dir = tempfile::tempdir().unwrap();
        let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
        let client_type = fleet_identity::ClientType::new("codex").unwrap();
        let launch = Launch::mint(&location, client_type, None, None).unwrap();
        let options = super::WorkerOptions {
            namespace: fleet_identity::Namespace::Reconciler,
            process: fleet_probe::current_process().unwrap(),
            // A beat every third of a second.
            heartbeat_ttl: HeartbeatTtl::from_secs(1).unwrap(),
            repository: None,
            revisions: Revisions::default(),
            launch: None,
        };
        let (entered, sweep_entered) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        let session = super::WorkerSession::start_sweeping(&location, &launch.env, options, |_| {
            move || {
                let _ = entered.send(());
                // Hangs until the test lets go.
                let _ = released.recv();
                None
            }
        })
        .unwrap();
        // Bound after the session, so dropped before it: a failing test lets the sweep
        // go before the session's drop waits for its threads.
        let release = release;
        let me = session.row().worker_identity.clone();
        sweep_entered.recv_timeout(Duration::from_secs(60)).expect("the first beat asks for a sweep");

        let mut registry = open_registry(&location, OpenMode::MustExist).unwrap();
        let beat = |registry: &mut fleet_registry::Registry<crate::AnyStore>| {
            registry.worker(&me).unwrap().unwrap().last_heartbeat_at
        };
        let mut beats = vec![beat(&mut registry)];
        let give_up = Instant::now() + Duration::from_secs(60);
        while beats.len() < 3 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(50));
            let at = beat(&mut registry);
            if beats.last() != Some(&at) {
                beats.push(at);
            }
        }
        assert_eq!(beats.len(), 3, "two beats landed while the sweep hung: {beats:?}");
        drop(release);
        session.release().unwrap();
    }

    #[test]
    fn a_small_fleet_sweeps_on_every_tick() {
        for fleet in 0..=8 {
            assert!((0..100).all(|roll| sweeps_this_tick(fleet, roll * 7919)), "{fleet}");
        }
    }

    #[test]
    fn a_large_fleet_sweeps_a_bounded_number_of_times_per_tick() {
        for fleet in [9usize, 100, 1_000, 10_000] {
            // Every roll modulo the fleet size, once: the fleet-wide expectation.
            let n = u32::try_from(fleet).unwrap();
            let sweeps = (0..n).filter(|&roll| sweeps_this_tick(fleet, roll)).count();
            assert_eq!(sweeps, SWEEPERS_PER_TICK as usize, "{fleet}");
        }
    }
}
