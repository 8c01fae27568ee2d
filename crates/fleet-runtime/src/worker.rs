//! A worker's life in the registry: register from the instance environment, heartbeat
//! on a background thread every third of the TTL (now and then sweeping the fleet's
//! lapsed rows stale after a beat, on the same connection), then release on a clean
//! exit or stop heartbeating (and leave the row for the TTL to lapse) after a crash.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fleet_identity::{GenerationId, Namespace, Repository};
use fleet_probe::LocalProbe;
use fleet_registry::OpenMode;
use fleet_registry::{
    HeartbeatTtl, ProcessIdentity, Registration, Revisions, StoreError, StoreErrorKind, WorkerCredential,
    WorkerRow, WorkerToken,
};

use crate::AnyStore;
use crate::clock::now;
use crate::env::InstanceEnv;
use crate::location::{RegistryLocation, open_registry};

type Registry = fleet_registry::Registry<AnyStore>;

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

/// What the worker asks of its heartbeat thread.
enum Ask {
    /// Stop beating and hand the connection back.
    Stop,
    /// Beat now, and say how it went.
    Beat(mpsc::Sender<Result<(), StoreError>>),
}

/// A registered worker with its heartbeat thread running. The worker keeps one
/// connection to the registry for its whole life: it registers on it, the heartbeat
/// thread beats and sweeps on it, and it releases on it (a PostgreSQL registry sees one
/// server session per worker process).
#[derive(Debug)]
pub struct WorkerSession {
    location: RegistryLocation,
    row: WorkerRow,
    credential: WorkerCredential,
    lost: Arc<std::sync::OnceLock<String>>,
    stop: Option<mpsc::Sender<Ask>>,
    /// The heartbeat thread, which hands its connection back when it ends.
    thread: Option<JoinHandle<Option<Registry>>>,
}

impl std::fmt::Debug for Ask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Stop => "Stop",
            Self::Beat(_) => "Beat",
        })
    }
}

impl WorkerOptions {
    /// Registering this very process in `namespace`, as a tool embedding a worker does:
    /// its own process evidence, a TTL of 30 s, and owned the way `fleetctl worker run`
    /// owns its rows: by the launch that started it (`GITEA_MCP_LAUNCH_PROCESS`, as
    /// `fleet-launch run` sets it), or outside one by this process itself, a tool that
    /// is its own launch's client. The repository and revisions start empty: set them
    /// on the result.
    pub fn this_process(namespace: Namespace) -> Result<Self, StoreError> {
        let lineage = |e: crate::LineageError| StoreError::invalid(e.to_string());
        let launch = match crate::LaunchProcess::from_env().map_err(lineage)? {
            Some(launch) => launch,
            None => crate::LaunchProcess::parse(&crate::launch_process_value()?).map_err(lineage)?,
        };
        Ok(Self {
            namespace,
            process: fleet_probe::current_process().map_err(probe_error)?,
            heartbeat_ttl: HeartbeatTtl::from_secs(30)?,
            repository: None,
            revisions: Revisions::default(),
            launch: Some(launch),
        })
    }
}

/// A fresh generation id, as a worker's registration takes one per process boot:
/// `gen-` and a UUID v7 (time-ordered, random below the time). A tool that registers
/// through `fleet_registry` directly mints its own this way.
pub fn new_generation_id() -> Result<GenerationId, fleet_identity::IdentityError> {
    GenerationId::new(format!("gen-{}", uuid::Uuid::now_v7()))
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
        let generation_id = new_generation_id().map_err(|e| StoreError::invalid(e.to_string()))?;
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
            let beats = Beats {
                location: location.clone(),
                credential: credential.clone(),
                launch: options.launch,
                interval: options.heartbeat_ttl.interval(),
            };
            let lost = Arc::clone(&lost);
            std::thread::Builder::new()
                .name("fleet-heartbeat".into())
                .spawn(move || beats.run(registry, &stopped, &lost))
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

    /// Beats now, on the heartbeat thread's connection, and waits for it: for a tool
    /// that drives its own loop (a beat before each unit of work, say) besides the
    /// thread's own cadence, which carries on. An error says why this beat did not
    /// land; a registration lost for good also shows in [`WorkerSession::lost_because`].
    pub fn heartbeat(&self) -> Result<(), StoreError> {
        let gone = || match self.lost.get() {
            Some(why) => StoreError::not_found(format!("registration lost: {why}")),
            None => StoreError::new(StoreErrorKind::Unavailable, "the heartbeat thread has stopped"),
        };
        let (reply, answer) = mpsc::channel();
        let stop = self.stop.as_ref().ok_or_else(gone)?;
        stop.send(Ask::Beat(reply)).map_err(|_| gone())?;
        answer.recv().map_err(|_| gone())?
    }

    /// Stops the heartbeat thread and takes back its connection, if it has one.
    fn stop_heartbeats(&mut self) -> Option<Registry> {
        if let Some(stop) = self.stop.take() {
            // The thread may already have ended; then there is nothing to stop.
            let _ = stop.send(Ask::Stop);
        }
        self.thread.take().and_then(|thread| thread.join().ok().flatten())
    }

    /// Stops heartbeating and releases the registration: the clean-exit path. It
    /// releases on the heartbeat's connection, or on a new one where that one failed.
    pub fn release(mut self) -> Result<WorkerRow, StoreError> {
        if let Some(mut registry) = self.stop_heartbeats() {
            match registry.release(&self.credential, now()) {
                Err(e) if e.kind() == StoreErrorKind::Unavailable => {}
                done => return done,
            }
        }
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

/// A worker asks whether its build may still use the registry's schema on every this
/// many beats: once per TTL (it beats every third of it).
const SCHEMA_CHECK_EVERY: u64 = 3;

/// How many workers, fleet-wide, sweep on each tick period on average.
const SWEEPERS_PER_TICK: u32 = 8;

/// Whether a worker of a fleet of `active_workers` sweeps on this tick, given a random
/// `roll`: always in a small fleet; in a larger one with probability
/// [`SWEEPERS_PER_TICK`] / `active_workers`, so the fleet as a whole reads the registry a
/// bounded number of times per tick period however large it grows, and a lapsed row is
/// still found within about one period (no worker at all sweeping in a period has
/// probability about e⁻⁸).
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

/// The heartbeat thread's work: a beat every interval and, on the same connection
/// after a beat, now and then a sweep of the fleet's lapsed rows.
struct Beats {
    location: RegistryLocation,
    credential: WorkerCredential,
    launch: Option<crate::LaunchProcess>,
    interval: Duration,
}

impl Beats {
    /// Beats until told to stop or the registration is lost; returns the connection.
    fn run(
        self,
        registry: Registry,
        asks: &mpsc::Receiver<Ask>,
        lost: &std::sync::OnceLock<String>,
    ) -> Option<Registry> {
        let mut registry = Some(registry);
        // The fleet's size as of this worker's last sweep; every worker sweeps until it knows.
        let mut active_workers = 0;
        let mut beats: u64 = 0;
        // Beats keep their cadence: the next is due one interval after the last was due,
        // however long the last took, so a slow beat never stretches the gap between two.
        let mut next_beat = Instant::now() + self.interval;
        loop {
            let reply = match asks.recv_timeout(next_beat.saturating_duration_since(Instant::now())) {
                Err(RecvTimeoutError::Timeout) => {
                    next_beat = (next_beat + self.interval).max(Instant::now());
                    None
                }
                Ok(Ask::Beat(reply)) => Some(reply),
                Ok(Ask::Stop) | Err(RecvTimeoutError::Disconnected) => break,
            };
            // Once per TTL (every third beat) the schema is asked after: an upgrade that
            // moved it past this build ends the worker as a lost registration.
            let schema_due = beats.is_multiple_of(SCHEMA_CHECK_EVERY);
            beats += 1;
            let beat = self.beat(&mut registry, &mut active_workers, schema_due, lost);
            if let Some(reply) = reply {
                let _ = reply.send(beat);
            }
            // A registration lost for good ends the thread.
            if lost.get().is_some() {
                break;
            }
        }
        registry
    }

    /// One beat (and now and then a sweep) on `registry`, opened again first where the
    /// last beat closed it. A registration lost for good is recorded in `lost`.
    fn beat(
        &self,
        registry: &mut Option<Registry>,
        active_workers: &mut usize,
        schema_due: bool,
        lost: &std::sync::OnceLock<String>,
    ) -> Result<(), StoreError> {
        if registry.is_none() {
            match open_registry(&self.location, OpenMode::MustExist) {
                Ok(opened) => *registry = Some(opened),
                // A schema this build may not use, or a registry that is gone, is not
                // coming back: the worker ends as one whose registration was lost, saying
                // why. (A registry that cannot be reached for a while is retried.)
                Err(e) if matches!(e.kind(), StoreErrorKind::NewerSchema | StoreErrorKind::Missing) => {
                    crate::warn(format_args!("fleet: registration lost: {e}"));
                    let _ = lost.set(e.to_string());
                    return Err(e);
                }
                Err(e) => {
                    crate::warn(format_args!("fleet: heartbeat cannot open registry: {e}"));
                    return Err(e);
                }
            }
        }
        let Some(reg) = registry.as_mut() else {
            return Err(StoreError::new(StoreErrorKind::Unavailable, "no registry"));
        };
        // A worker whose launch's client died says so on every beat: orphaned.
        let beat = if schema_due { reg.check_schema() } else { Ok(()) }
            .and_then(|()| reg.heartbeat_claiming(&self.credential, now(), crate::claim_of(self.launch)));
        match beat {
            // The fleet keeps itself honest: every live worker, on its own tick, marks the
            // rows whose heartbeat lapsed stale, so retirement needs no operator.
            Ok(()) => {
                if sweeps_this_tick(*active_workers, random_u32()) {
                    match self.sweep(reg) {
                        Ok(Some(active)) => *active_workers = active,
                        Ok(None) => {}
                        Err(e) => {
                            crate::warn(format_args!("fleet: stale sweep failed, will retry: {e}"));
                            if e.kind() != StoreErrorKind::Busy {
                                *registry = None;
                            }
                        }
                    }
                }
                Ok(())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    StoreErrorKind::NotFound
                        | StoreErrorKind::Conflict
                        | StoreErrorKind::Fenced
                        | StoreErrorKind::NewerSchema
                        | StoreErrorKind::Missing
                ) =>
            {
                crate::warn(format_args!("fleet: registration lost: {e}"));
                let _ = lost.set(e.to_string());
                Err(e)
            }
            // A busy or briefly unreachable registry: try again next beat, on a fresh
            // connection when this one may be the broken part (a PostgreSQL backend that
            // was terminated stays dead).
            Err(e) => {
                crate::warn(format_args!("fleet: heartbeat failed, will retry: {e}"));
                if e.kind() != StoreErrorKind::Busy {
                    *registry = None;
                }
                Err(e)
            }
        }
    }

    /// One sweep of the fleet's lapsed rows to stale, bounded by one beat interval (a
    /// sweep held up by another writer gives up, busy, and the next beat is on time);
    /// returns the fleet's active worker count when it learned it.
    fn sweep(&self, reg: &mut Registry) -> Result<Option<usize>, StoreError> {
        reg.set_call_deadline(Some(self.interval));
        let swept = self.sweep_within(reg);
        reg.set_call_deadline(None);
        swept
    }

    fn sweep_within(&self, reg: &mut Registry) -> Result<Option<usize>, StoreError> {
        // A clock the fleet does not agree with must not judge its heartbeats: one read
        // of the store's clock, not of the fleet's rows.
        let at = now();
        if let Err(disagreement) = crate::clock::against_store(at, reg.store_now()?) {
            crate::warn(format_args!(
                "fleet: worker {} does not sweep: {disagreement}; check this host's clock",
                self.credential.worker_identity
            ));
            return Ok(None);
        }
        Ok(Some(reg.sweep(at)?.active_workers))
    }
}

#[cfg(test)]
mod tests {
    use super::{SWEEPERS_PER_TICK, sweeps_this_tick};

    /// A generation id minted for a tool that registers itself: a new one per call, in
    /// the shape the runtime gives its own workers.
    #[test]
    fn generation_ids_are_new_each_time() {
        let (a, b) = (super::new_generation_id().unwrap(), super::new_generation_id().unwrap());
        assert!(a.as_str().starts_with("gen-") && a != b, "{a} {b}");
    }

    /// A tool driving its own loop beats when it asks, on the session's connection, and
    /// is told the moment its registration is gone (here its row retired behind its
    /// back, as stale retirement would): the error says why, and so does the session.
    #[test]
    fn an_explicit_heartbeat_lands_and_says_when_the_registration_is_lost() {
        use crate::{Launch, RegistryLocation, open_registry};
        use fleet_registry::OpenMode;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("registry.sqlite3");
        let location = RegistryLocation::Sqlite(path.clone());
        let launch =
            Launch::mint(&location, &fleet_identity::ClientType::new("codex").unwrap(), None, None).unwrap();
        let options = super::WorkerOptions::this_process(fleet_identity::Namespace::Author).unwrap();
        let session = super::WorkerSession::start(&location, &launch.env, options).unwrap();
        let id = session.row().worker_identity.clone();
        let beat_of = || {
            let row = open_registry(&location, OpenMode::MustExist).unwrap().worker(&id).unwrap().unwrap();
            row.last_heartbeat_at.unwrap()
        };
        let registered = beat_of();
        std::thread::sleep(std::time::Duration::from_millis(5));
        session.heartbeat().unwrap();
        assert!(beat_of() > registered, "the asked-for beat was written");

        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute(
            "UPDATE worker_registrations SET status = 'retired' WHERE worker_identity = ?1",
            [id.as_str()],
        )
        .unwrap();
        let refused = session.heartbeat().unwrap_err();
        assert!(refused.to_string().contains("retired"), "{refused}");
        assert!(session.registration_lost());
        assert!(session.lost_because().is_some_and(|why| why.contains("retired")));
        // The thread has ended: a later ask says the registration is gone.
        assert!(session.heartbeat().unwrap_err().to_string().contains("registration lost"));
    }

    /// A sweep held up by another writer (PostgreSQL: a session holding the registry's
    /// write lock, which a heartbeat does not take) gives up within a beat interval, so
    /// the worker's own heartbeat, on the same connection, keeps landing: the row cannot
    /// lapse and close its own gate. Once the writer lets go the lapsed row is swept.
    /// Needs `FLEET_TEST_POSTGRES_URL`; skips, saying so, without it.
    #[test]
    fn a_sweep_held_up_by_a_writer_does_not_stop_the_heartbeat() {
        use std::time::{Duration, Instant};

        use crate::{Launch, RegistryLocation, open_registry};
        use fleet_registry::{HeartbeatTtl, OpenMode, Revisions};

        let Some(base) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
            eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
            return;
        };
        let schema = format!("fleet_worker_{}", uuid::Uuid::now_v7().simple());
        let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        admin.batch_execute(&format!("CREATE SCHEMA {schema}")).unwrap();
        let sep = if base.contains('?') { '&' } else { '?' };
        let location = RegistryLocation::Postgres(format!("{base}{sep}options=-csearch_path%3D{schema}"));
        let client_type = fleet_identity::ClientType::new("codex").unwrap();
        let launch = Launch::mint(&location, &client_type, None, None).unwrap();
        let options = |namespace| super::WorkerOptions {
            namespace,
            process: fleet_probe::current_process().unwrap(),
            // A beat every third of a second.
            heartbeat_ttl: HeartbeatTtl::from_secs(1).unwrap(),
            repository: None,
            revisions: Revisions::default(),
            launch: None,
        };
        // A row that lapses: a worker that stopped beating.
        let gone =
            super::WorkerSession::start(&location, &launch.env, options(fleet_identity::Namespace::Author))
                .unwrap();
        let gone_id = gone.row().worker_identity.clone();
        gone.abandon();
        let session = super::WorkerSession::start(
            &location,
            &launch.env,
            options(fleet_identity::Namespace::Reconciler),
        )
        .unwrap();
        // Registered; from now on another session holds the write lock (before the
        // abandoned row lapses, a second after its last beat).
        let mut registry = open_registry(&location, OpenMode::MustExist).unwrap();
        let key = registry.registry_id().unwrap().lock_key();
        let mut writer = postgres::Client::connect(&base, postgres::NoTls).unwrap();
        writer.query_one("SELECT pg_advisory_lock($1)", &[&key]).unwrap();
        let me = session.row().worker_identity.clone();
        let mut row = |id| registry.worker(id).unwrap().unwrap();
        let mut beats = vec![row(&me).last_heartbeat_at];
        let give_up = Instant::now() + Duration::from_secs(30);
        while beats.len() < 6 && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(50));
            let at = row(&me).last_heartbeat_at;
            if beats.last() != Some(&at) {
                beats.push(at);
            }
        }
        assert_eq!(beats.len(), 6, "five beats landed while every sweep was held up: {beats:?}");
        assert_ne!(
            row(&gone_id).ownership_state,
            Some(fleet_registry::OwnershipState::Stale),
            "no sweep wrote while the writer held the lock"
        );

        writer.query_one("SELECT pg_advisory_unlock($1)", &[&key]).unwrap();
        let swept = Instant::now() + Duration::from_secs(30);
        while row(&gone_id).ownership_state != Some(fleet_registry::OwnershipState::Stale) {
            assert!(Instant::now() < swept, "the lapsed row was never swept once the writer let go");
            std::thread::sleep(Duration::from_millis(50));
        }
        session.release().unwrap();
        admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
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
