//! The fleet as one process sees it: [`Fleet`], a session over one open registry, its
//! kept rows and this host's probe. Each use case is one call of it: the snapshot
//! (here), retirement (`retire`), leases (`leases`) and the registry's upkeep
//! (`upkeep`).

use fleet_identity::Timestamp;
use fleet_probe::{LocalProbe, TrackingProbe};
use fleet_registry::OpenMode;
use fleet_registry::{
    ReadMark, Registry, RegistryDump, StoreError, StoreErrorKind, WorkerRow, probe_active_rows, probe_places,
    probed_places,
};
use fleet_snapshot::{
    FleetSnapshot, Judgement, Manifest, MovedHeartbeats, Policy, ProbeResults, SnapshotInput, snapshot,
};

use crate::location::{AnyStore, RegistryLocation, open_registry};
use crate::worker_json::WorkerJson;

mod leases;
mod retire;
mod upkeep;

pub(crate) use leases::binding_name;
pub use leases::{KeptAlive, LeaseChange, LeaseError, PolicyError, connector_policy};
pub use upkeep::{PruneError, PruneReport, PruneRequest, import_registry};

pub use retire::{
    AfterApply, Applied, ContextError, WorkerApplyRefused, WorkerMayNotMutate, retirement_audit,
    retirement_context,
};

/// Probes every active row that this machine can speak for; others stay unprobed.
pub fn probe_local(rows: &[WorkerRow]) -> ProbeResults {
    let Ok(probe) = LocalProbe::new() else { return ProbeResults::new() };
    probe_active_rows(rows, &probe)
}

/// Reads the registry, probes the rows this machine can speak for, classifies, and
/// hands the snapshot to `read` (it borrows the rows, which live for this call). A
/// registry that cannot be read fails closed: never an empty, safe fleet.
pub fn take_snapshot<T>(
    location: &RegistryLocation,
    manifest: Option<&Manifest>,
    policy: &Policy,
    at: Timestamp,
    read: impl FnOnce(&FleetSnapshot<'_>) -> T,
) -> Result<T, StoreError> {
    // One read of the live fleet, nothing kept: no versions for a next read, no
    // verdicts to follow.
    let dump = open_registry(location, OpenMode::MustExist)?.live()?;
    let probes = probe_local(&dump.worker_registrations);
    let taken = snapshot(SnapshotInput {
        rows: &dump.worker_registrations,
        ledger: &dump.instances,
        manifest,
        probes: &probes,
        policy,
        now: at,
    });
    Ok(read(&taken))
}

/// One session over the fleet: the registry it keeps open, the rows it last read and
/// this host's liveness probe. Every surface (the CLI, the MCP server, the demo) takes
/// its snapshots, plans and applies through one, and maps the outcomes to exit codes or
/// tool results.
///
/// It reads the rows again only when the store's change marker has moved (or the store
/// cannot tell). Probes and classification run on every snapshot, because processes die
/// and heartbeats lapse without any write to the store. A session made
/// [`Fleet::tracking_processes`] probes local processes through a [`TrackingProbe`],
/// which asks a pidfd for each process it has verified alive instead of reading `/proc`
/// again. It also keeps each worker's JSON from the last [`Fleet::json_snapshot`]
/// written, for the next.
#[derive(Debug)]
pub struct Fleet {
    location: RegistryLocation,
    /// How the registry is opened: it must exist, unless made [`Fleet::creating_registry`].
    mode: OpenMode,
    registry: Option<Registry<AnyStore>>,
    /// The rows last read.
    last: Option<LastRead>,
    /// Whether to keep a [`TrackingProbe`] (else each snapshot probes with a fresh
    /// [`LocalProbe`], the cheaper choice for a single read).
    track: bool,
    /// The tracking probe, once made.
    tracking: Option<TrackingProbe>,
    /// This host's probe for plans and applies, once made.
    local: Option<LocalProbe>,
    /// The places of the rows the tracking probe speaks for, and the rows' generation
    /// they stand for (carried along while only heartbeats move, as `judged` is).
    probed: Option<(u64, Vec<usize>)>,
    /// Moves each time rows are read: rows of one generation are the same.
    generation: u64,
    /// What the last snapshot rested on (none after one taken with a manifest).
    judged: Option<KeptJudgement>,
    /// The number the next snapshot that judges anew takes.
    next_number: u64,
    /// Each worker's JSON, for the rows in `last`.
    json: WorkerJson,
}

/// The judgement of the last snapshot a [`Fleet`] classified, and what it follows.
#[derive(Debug)]
struct KeptJudgement {
    /// The snapshot's number (see [`Taken`]).
    number: u64,
    /// The rows' generation it stands for: the one it was taken of, or a later one in
    /// which only heartbeats of live workers moved (and it followed them).
    generation: u64,
    judgement: Judgement,
}

/// The rows a [`Fleet`] last read, and where the store stood then.
#[derive(Debug)]
struct LastRead {
    /// The change marker, read just before the rows.
    marker: Option<u128>,
    /// The store's position in its history of changes and the rows' versions, read
    /// with the rows.
    mark: Option<ReadMark>,
    dump: RegistryDump,
    /// When the registry was last read whole for these rows.
    whole_at: std::time::Instant,
}

/// A snapshot, or word that it would say what the last one said.
#[derive(Debug)]
pub enum Taken<'r> {
    /// Taken now, with its number.
    Fresh(u64, JsonSnapshot<'r>),
    /// Snapshot number `.0`, taken earlier by this session, rests on exactly what a
    /// snapshot now would: the same rows (but for the heartbeats of workers live then
    /// and now), probe answers and policy, no manifest, and no heartbeat has lapsed or
    /// become believable since. Only its time and consistency token would move, and
    /// the heartbeats and expiries of the workers in `moved`; here they are.
    Unchanged {
        /// The earlier snapshot's number.
        number: u64,
        /// When this snapshot is taken.
        snapshot_at: Timestamp,
        /// Its consistency token (and registry revision).
        consistency_token: String,
        /// The workers whose heartbeat moved since snapshot `number`.
        moved: MovedHeartbeats<'r>,
    },
}

/// A snapshot taken by a [`Fleet`], with what it needs to write the snapshot as
/// JSON: [`JsonSnapshot::write_json`] writes each worker judged as at the last write
/// from the bytes it wrote then (while the session's rows stayed the same).
#[derive(Debug)]
pub struct JsonSnapshot<'r> {
    /// The snapshot.
    pub snapshot: FleetSnapshot<'r>,
    rows: &'r [WorkerRow],
    json: &'r mut WorkerJson,
}

impl JsonSnapshot<'_> {
    /// Appends the snapshot to `out` as JSON, the same bytes as
    /// `serde_json::to_writer(out, &self.snapshot)`.
    ///
    /// # Errors
    /// As `serde_json::to_writer`.
    pub fn write_json(&mut self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        self.json.write(self.rows, &self.snapshot, out)
    }
}

impl Fleet {
    /// A session over the registry at `location`; nothing is opened until the first read.
    pub fn new(location: RegistryLocation) -> Self {
        Self {
            location,
            mode: OpenMode::MustExist,
            registry: None,
            last: None,
            track: false,
            tracking: None,
            local: None,
            probed: None,
            generation: 0,
            judged: None,
            next_number: 0,
            json: WorkerJson::default(),
        }
    }

    /// This session, creating the registry at its first use when none exists: for the
    /// use cases that may be a fleet's first write (acquiring a lease, holding a
    /// connector binding). Every other session refuses a registry that is not there.
    #[must_use]
    pub fn creating_registry(mut self) -> Self {
        self.mode = OpenMode::CreateIfMissing;
        self
    }

    /// This session, keeping a [`TrackingProbe`] across snapshots: for a process that
    /// takes many (a server, `--watch`), each later probe of a live local worker is one
    /// `poll` of its pidfd. It holds one descriptor per live local worker.
    #[must_use]
    pub fn tracking_processes(mut self) -> Self {
        self.track = true;
        self
    }

    /// Every ledger entry and worker row as the store holds them now.
    pub fn dump(&mut self) -> Result<&RegistryDump, StoreError> {
        self.read()?;
        self.rows()
    }

    /// The rows last read.
    fn rows(&self) -> Result<&RegistryDump, StoreError> {
        self.last.as_ref().map(|last| &last.dump).ok_or_else(not_read)
    }

    /// Brings the rows up to date with the store.
    fn read(&mut self) -> Result<(), StoreError> {
        let was_open = self.registry.is_some();
        if let Err(e) = self.refresh() {
            // Another session holds what the read needs (past lock_timeout): a fresh
            // connection would wait for the same lock again. The connection is sound.
            if e.kind() == StoreErrorKind::Busy {
                self.last = None;
                return Err(e);
            }
            // A registry that could not even be opened is not opened twice: the caller
            // hears within one connection's deadline.
            if !was_open {
                (self.registry, self.last) = (None, None);
                return Err(e);
            }
            // A failed connection is not reused, and nothing read before is trusted: the
            // registry is opened afresh (it may have been replaced), once.
            (self.registry, self.last) = (None, None);
            if let Err(e) = self.refresh() {
                (self.registry, self.last) = (None, None);
                return Err(e);
            }
        }
        Ok(())
    }

    fn refresh(&mut self) -> Result<(), StoreError> {
        let registry = open(&mut self.registry, &self.location, self.mode)?;
        let marker = registry.change_marker()?;
        // A marker that stands still proves nothing changed only for as long as what
        // fools the proof of a follow may be served: the rows are read whole at least
        // every WHOLE_READ_EVERY, marker or not.
        if let (Some(now), Some(LastRead { marker: Some(then), whole_at, .. })) = (marker, &self.last)
            && now == *then
            && whole_at.elapsed() < fleet_registry::WHOLE_READ_EVERY
        {
            return Ok(());
        }
        let read = registry.read_since(self.last.as_mut().and_then(|last| last.mark.take()))?;
        let whole = matches!(read.changes, fleet_registry::RegistryChanges::Everything(_));
        let last = self.last.get_or_insert_with(|| LastRead {
            marker: None,
            mark: None,
            dump: RegistryDump::default(),
            whole_at: std::time::Instant::now(),
        });
        if whole {
            last.whole_at = std::time::Instant::now();
        }
        // Only a judgement (or probed places) that stands for the rows as they were is
        // brought along a heartbeat: without one, the rows are not compared.
        let current = self.judged.as_mut().filter(|j| j.generation == self.generation);
        let probed = self.probed.as_mut().filter(|(generation, _)| *generation == self.generation);
        let beats = if current.is_some() || probed.is_some() {
            read.changes.heartbeats_only(&last.dump)
        } else {
            None
        };
        let (mark, origins) = read.apply(&mut last.dump);
        self.json.follow(&origins);
        self.generation += 1;
        if let (Some(probed), Some(_)) = (probed, &beats) {
            probed.0 = self.generation;
        }
        if let (Some(judged), Some(places)) = (current, beats) {
            judged.judgement.follow(&last.dump.worker_registrations, &places);
            judged.generation = self.generation;
        }
        (last.marker, last.mark) = (marker, mark);
        Ok(())
    }

    /// Reads (when the store moved), probes the rows this machine can speak for, and
    /// classifies, as [`take_snapshot`] does. The snapshot borrows the rows this session
    /// keeps.
    pub fn snapshot(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<FleetSnapshot<'_>, StoreError> {
        Ok(self.json_snapshot(manifest, policy, at)?.snapshot)
    }

    /// A snapshot as [`Fleet::snapshot`] takes it, ready to be written as JSON with
    /// the worker JSON this session kept from the last one written.
    pub fn json_snapshot(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<JsonSnapshot<'_>, StoreError> {
        Ok(self.numbered_json_snapshot(manifest, policy, at)?.1)
    }

    /// [`Fleet::json_snapshot`], with the snapshot's number (see [`Taken`]).
    pub fn numbered_json_snapshot(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<(u64, JsonSnapshot<'_>), StoreError> {
        let probes = self.read_and_probe()?;
        self.classify(probes, manifest, policy, at)
    }

    /// A snapshot as [`Fleet::json_snapshot`] takes it — or, when the last snapshot this
    /// session took rests on exactly what one taken now would, word of that (see
    /// [`Taken::Unchanged`]), with no classification at all.
    pub fn json_snapshot_or_unchanged(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<Taken<'_>, StoreError> {
        let probes = self.read_and_probe()?;
        if let Some(number) = self.unchanged(&probes, manifest, policy, at) {
            let rows = &self.last.as_ref().ok_or_else(not_read)?.dump.worker_registrations;
            let judgement = &mut self.judged.as_mut().ok_or_else(not_read)?.judgement;
            let consistency_token = judgement.token_at(rows, at);
            let moved = judgement.moved(rows);
            return Ok(Taken::Unchanged { number, snapshot_at: at, consistency_token, moved });
        }
        let (number, snapshot) = self.classify(probes, manifest, policy, at)?;
        Ok(Taken::Fresh(number, snapshot))
    }

    /// The number of the last snapshot this session took (without a manifest, under
    /// `policy`) when it still says what one taken at `at` would: the rows are the same
    /// but for the heartbeats of live workers, every probe answers as it did, and no
    /// heartbeat lapsed. Reads only when the store moved and probes only this host's
    /// rows, classifying nothing: what a watcher asks before it renders again.
    pub fn standing(&mut self, policy: &Policy, at: Timestamp) -> Result<Option<u64>, StoreError> {
        let probes = self.read_and_probe()?;
        Ok(self.unchanged(&probes, None, policy, at))
    }

    /// The number of the last snapshot when one taken at `at` from `probes` would judge
    /// every row as it did.
    fn unchanged(
        &self,
        probes: &ProbeResults,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Option<u64> {
        let judged = self.judged.as_ref().filter(|j| j.generation == self.generation)?;
        judged.judgement.stands(probes, manifest.is_some(), policy, at).then_some(judged.number)
    }

    /// Brings the rows up to date and probes those this machine can speak for.
    fn read_and_probe(&mut self) -> Result<ProbeResults, StoreError> {
        if self.track && self.tracking.is_none() {
            self.tracking = TrackingProbe::new().ok();
        }
        self.read()?;
        let Some(LastRead { dump, .. }) = &self.last else { return Err(not_read()) };
        let rows = &dump.worker_registrations;
        Ok(match &self.tracking {
            Some(probe) => {
                let generation = self.generation;
                let places = match &mut self.probed {
                    Some((at, places)) if *at == generation => places,
                    slot => &mut slot.insert((generation, probed_places(rows, probe))).1,
                };
                probe.begin_round();
                let probes = probe_places(rows, places, probe);
                probe.end_round();
                probes
            }
            None => probe_local(rows),
        })
    }

    /// Classifies the rows read, and remembers what the snapshot rested on. A snapshot
    /// that judges every row as the last one did keeps its number.
    fn classify(
        &mut self,
        probes: ProbeResults,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<(u64, JsonSnapshot<'_>), StoreError> {
        let unchanged = self.unchanged(&probes, manifest, policy, at);
        let Some(LastRead { dump, .. }) = &self.last else { return Err(not_read()) };
        let snapshot = snapshot(SnapshotInput {
            rows: &dump.worker_registrations,
            ledger: &dump.instances,
            manifest,
            probes: &probes,
            policy,
            now: at,
        });
        let number = match unchanged {
            Some(number) => number,
            None => {
                let number = self.next_number;
                self.next_number += 1;
                // A manifest's verdicts are not kept: the next snapshot classifies again.
                self.judged = manifest.is_none().then(|| KeptJudgement {
                    number,
                    generation: self.generation,
                    judgement: Judgement::of(&snapshot, &dump.worker_registrations, probes, policy),
                });
                number
            }
        };
        Ok((number, JsonSnapshot { snapshot, rows: &dump.worker_registrations, json: &mut self.json }))
    }
}

/// The registry a session keeps in `slot`, opened now if it is not.
fn open<'r>(
    slot: &'r mut Option<Registry<AnyStore>>,
    location: &RegistryLocation,
    mode: OpenMode,
) -> Result<&'r mut Registry<AnyStore>, StoreError> {
    match slot {
        Some(registry) => Ok(registry),
        None => Ok(slot.insert(open_registry(location, mode)?)),
    }
}

fn not_read() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "the registry was not read")
}

impl Fleet {
    /// The registry this session keeps open, opened now if it is not, for the use
    /// cases beyond the fleet's reads (leases, retirement, upkeep). A connection that
    /// failed is closed, so the next call opens afresh. The binaries never see it: each
    /// use case is one call of this session.
    pub(crate) fn with_registry<T>(
        &mut self,
        work: impl FnOnce(&mut Registry<AnyStore>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = work(open(&mut self.registry, &self.location, self.mode)?);
        if result
            .as_ref()
            .is_err_and(|e| matches!(e.kind(), StoreErrorKind::Unavailable | StoreErrorKind::Missing))
        {
            (self.registry, self.last) = (None, None);
        }
        result
    }

    /// This host's probe (its host, boot and PID namespace, read once per session).
    fn local_probe(&mut self) -> Result<LocalProbe, StoreError> {
        if let Some(probe) = &self.local {
            return Ok(probe.clone());
        }
        let probe = LocalProbe::new().map_err(|e| {
            StoreError::new(StoreErrorKind::Unavailable, format!("cannot read this host's identity: {e}"))
        })?;
        Ok(self.local.insert(probe).clone())
    }
}
