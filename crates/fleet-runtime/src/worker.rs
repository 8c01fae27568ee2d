//! A worker's life in the registry: register from the instance environment, heartbeat
//! on a background thread every third of the TTL (sweeping the fleet's lapsed rows to
//! stale on the same tick), then release on a clean exit or stop heartbeating (and leave
//! the row for the TTL to lapse) after a crash.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;

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
    lost: Arc<AtomicBool>,
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
        };
        let token = WorkerToken::generate()?;
        let mut registry = open_registry(location, OpenMode::CreateIfMissing)?;
        let registered = registry.register(&registration, &token, now(), &probe)?;
        let credential = WorkerCredential {
            worker_identity: registered.row.worker_identity.clone(),
            generation_id,
            token,
        };
        let lost = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel();
        let thread = {
            let location = location.clone();
            let credential = credential.clone();
            let lost = Arc::clone(&lost);
            let interval = options.heartbeat_ttl.interval();
            let launch = options.launch;
            std::thread::Builder::new()
                .name("fleet-heartbeat".into())
                .spawn(move || heartbeat_loop(&location, &credential, launch, interval, &stopped, &lost))
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
        self.lost.load(Ordering::SeqCst)
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

/// Whether this worker's clock agrees with the store's and with the fleet's live
/// heartbeats (see [`crate::clock`]).
fn clock_agrees(
    reg: &mut fleet_registry::Registry<crate::AnyStore>,
    me: &fleet_identity::WorkerIdentity,
    at: Timestamp,
) -> Result<Result<(), crate::clock::ClockDisagreement>, StoreError> {
    let (rows, store_now) = reg.workers_at_store_clock()?;
    let host = rows.iter().find(|r| &r.worker_identity == me).and_then(|r| r.host_id.clone());
    Ok(crate::clock::against_store(at, store_now)
        .and_then(|()| crate::clock::against_fleet(&rows, host.as_ref(), at)))
}

fn heartbeat_loop(
    location: &RegistryLocation,
    credential: &WorkerCredential,
    launch: Option<crate::LaunchProcess>,
    interval: std::time::Duration,
    stopped: &mpsc::Receiver<Stop>,
    lost: &AtomicBool,
) {
    let mut registry = None;
    // The fleet's size as of this worker's last sweep; every worker sweeps until it knows.
    let mut active_workers = 0;
    loop {
        match stopped.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Stop::Now) | Err(RecvTimeoutError::Disconnected) => return,
        }
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
                if sweeps_this_tick(active_workers, random_u32()) {
                    // A clock the fleet does not agree with must not judge its heartbeats.
                    let at = now();
                    let swept = match clock_agrees(reg, &credential.worker_identity, at) {
                        Ok(Ok(())) => reg.sweep(at).map(Some),
                        Ok(Err(disagreement)) => {
                            crate::warn(format_args!(
                                "fleet: worker {} does not sweep: {disagreement}; check this host's clock",
                                credential.worker_identity
                            ));
                            Ok(None)
                        }
                        Err(e) => Err(e),
                    };
                    match swept {
                        Ok(Some(sweep)) => active_workers = sweep.active_workers,
                        Ok(None) => {}
                        Err(e) => crate::warn(format_args!("fleet: stale sweep failed, will retry: {e}")),
                    }
                }
            }
            Err(e) if matches!(e.kind(), StoreErrorKind::NotFound | StoreErrorKind::Conflict) => {
                crate::warn(format_args!("fleet: registration lost: {e}"));
                lost.store(true, Ordering::SeqCst);
                return;
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
}

#[cfg(test)]
mod tests {
    use super::{SWEEPERS_PER_TICK, sweeps_this_tick};

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
