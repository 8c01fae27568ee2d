//! The fleet as one process sees it: [`Fleet`], a session over one open registry, its
//! kept rows and this host's probe, offering the snapshot, the retirement plan and its
//! apply (with the rules an acting worker must pass), and the registry for leases,
//! initialization and the connector gateway.

use std::collections::BTreeMap;

use fleet_identity::{Repository, Timestamp, WorkerIdentity};
use fleet_probe::{LocalProbe, TrackingProbe};
use fleet_registry::OpenMode;
use fleet_registry::{
    ApplyReport, ApplyRequest, ReadMark, Registry, RegistryDump, StoreError, StoreErrorKind, WorkerRow,
    probe_active_rows, probe_places, probed_places,
};
use fleet_retirement::{Plan, RetirementContext};
use fleet_snapshot::{
    FindingCode, FleetSnapshot, GateReason, Judgement, Manifest, MovedHeartbeats, Policy, ProbeResults,
    SnapshotInput, mutation_gate, snapshot,
};

use crate::clock::now;
use crate::location::{AnyStore, RegistryLocation, open_registry};
use crate::stable::StableRuntime;
use crate::worker_json::WorkerJson;

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
        let registry = open(&mut self.registry, &self.location)?;
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
) -> Result<&'r mut Registry<AnyStore>, StoreError> {
    match slot {
        Some(registry) => Ok(registry),
        None => Ok(slot.insert(open_registry(location, OpenMode::MustExist)?)),
    }
}

fn not_read() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "the registry was not read")
}

/// Why the context of a retirement could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// This host's identity (its machine and boot ids) could not be read: the host, not
    /// the input, is at fault.
    #[error("cannot read this host's identity: {0}")]
    HostIdentity(#[source] fleet_probe::ProbeError),
    /// The current directory, the default repository, could not be read.
    #[error("cannot read the current directory: {0}")]
    CurrentDirectory(#[source] std::io::Error),
    /// The repository given is not one.
    #[error(transparent)]
    Repository(#[from] fleet_identity::IdentityError),
}

/// Where retirement runs: this host and boot, the canonical repository (default: the
/// current directory), now.
pub fn retirement_context(repository: Option<&str>) -> Result<RetirementContext, ContextError> {
    let probe = LocalProbe::new().map_err(ContextError::HostIdentity)?;
    let repository = match repository {
        Some(r) => r.to_owned(),
        None => std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map(|p| p.display().to_string())
            .map_err(ContextError::CurrentDirectory)?,
    };
    Ok(RetirementContext {
        host_id: probe.host_id().clone(),
        boot_id: Some(probe.boot_id().clone()),
        canonical_repository: Repository::new(repository)?,
        now: now(),
    })
}

/// Seed 004's audit context of a plan or apply, checked: `remote` must be one of
/// `FLEET_REMOTES` when the operator lists them. The error names the argument.
pub fn retirement_audit(
    remote: Option<String>,
    host: Option<String>,
    org: Option<String>,
    repo: Option<String>,
) -> Result<fleet_registry::RetirementAudit, fleet_registry::AuditFieldError> {
    let known: Option<Vec<String>> = std::env::var(crate::vars::REMOTES)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned).collect());
    fleet_registry::RetirementAudit::new(remote, host, org, repo, known.as_deref())
}

/// Why a worker may not act on the fleet now (seed 004's rules for a mutating tool
/// call), checked in this order.
#[derive(Debug)]
pub enum WorkerMayNotMutate {
    /// The registry could not be read.
    Registry(StoreError),
    /// The worker's mutation gate is closed, for these reasons.
    GateClosed(Vec<GateReason>),
    /// The binary this worker runs was replaced since it started.
    RuntimeUnstable(String),
    /// The worker's instance runs more than one worker in a namespace.
    CohortNotUnique,
    /// The workflow leases, the apply's external fence, cannot be read.
    LeasesUnreadable(StoreError),
}

impl Fleet {
    /// The registry this session keeps open, opened now if it is not, for the
    /// operations beyond the fleet's reads (leases, initialization, the connector
    /// gateway). A connection that failed is closed, so the next call opens afresh.
    pub fn with_registry<T>(
        &mut self,
        work: impl FnOnce(&mut Registry<AnyStore>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let result = work(open(&mut self.registry, &self.location)?);
        if result.as_ref().is_err_and(|e| e.kind() == StoreErrorKind::Unavailable) {
            (self.registry, self.last) = (None, None);
        }
        result
    }

    /// The repository binding an apply of `workers` uses when none is given: the one
    /// its plan bound them to. A plan's candidates all carry the plan's binding (a row
    /// bound elsewhere is preserved as `repository_binding_ambiguous`), so it travels in
    /// the plan with them, and where the apply is run from changes nothing. `None` when
    /// the rows requested do not share one repository (then the caller's default holds,
    /// and the apply re-plans and refuses what does not match).
    pub fn binding_of(&mut self, workers: &[WorkerIdentity]) -> Result<Option<String>, StoreError> {
        let rows = self.with_registry(|registry| {
            workers.iter().map(|w| registry.worker(w)).collect::<Result<Vec<_>, _>>()
        })?;
        let mut repositories =
            rows.iter().flatten().filter_map(|r| r.repository.as_ref()).map(|r| r.as_str());
        let Some(first) = repositories.next() else { return Ok(None) };
        Ok(repositories.all(|r| r == first).then(|| first.to_owned()))
    }

    /// The repository binding an apply of `request` uses when none is given: the one
    /// its plan was made for. For named workers, the binding they share
    /// ([`Fleet::binding_of`]); for every candidate, the repository, among those the
    /// active rows are bound to, whose plan now has the candidates the request's
    /// fingerprint names. `None` when none does (then the caller's default holds, and
    /// the apply refuses what does not match).
    pub fn plan_binding(&mut self, request: &ApplyRequest) -> Result<Option<String>, StoreError> {
        if !request.worker_identities.is_empty() {
            return self.binding_of(&request.worker_identities);
        }
        let repositories: std::collections::BTreeSet<String> = self
            .dump()?
            .worker_registrations
            .iter()
            .filter(|r| r.status == fleet_registry::WorkerStatus::Active)
            .filter_map(|r| r.repository.as_ref().map(|r| r.as_str().to_owned()))
            .collect();
        for repository in repositories {
            let Ok(ctx) = retirement_context(Some(&repository)) else { continue };
            let plan = self.plan(&ctx)?;
            if plan.candidate_count > 0 && plan.candidate_fingerprint == request.candidate_fingerprint {
                return Ok(Some(repository));
            }
        }
        Ok(None)
    }

    /// A retirement dry run over the rows and ledger this session keeps (read again only
    /// when the store moved), with the workflow leases and host fences read now and this
    /// host's probe: what a watcher shows, without a second copy of every row. An apply
    /// plans again from one read inside its own transaction, whatever this says.
    pub fn plan_kept(&mut self, ctx: &RetirementContext) -> Result<Plan, StoreError> {
        let probe = self.local_probe()?;
        let (owners, fences) = self.with_registry(|registry| {
            Ok((registry.active_workflow_owners()?.owners, registry.host_fences()?))
        })?;
        self.read()?;
        let dump = self.rows()?;
        Ok(fleet_registry::plan_rows(
            &dump.worker_registrations,
            &dump.instances,
            &owners,
            &fences,
            &probe,
            ctx,
        ))
    }

    /// Plans retirement from one consistent read of rows, ledger and workflow leases,
    /// with this host's probe. Writes nothing.
    pub fn plan(&mut self, ctx: &RetirementContext) -> Result<Plan, StoreError> {
        let probe = self.local_probe()?;
        self.with_registry(|registry| registry.plan_retirement(ctx, &probe))
    }

    /// Whether `worker` may act on the fleet now: its mutation gate is open, its
    /// binary is the one it started with (`runtime`), its instance runs one worker per
    /// namespace, and the workflow leases that fence an apply can be read.
    pub fn worker_may_mutate(
        &mut self,
        worker: &WorkerRow,
        runtime: &StableRuntime,
    ) -> Result<(), WorkerMayNotMutate> {
        let mine = worker.client_instance_id.as_deref();
        let snap = self.snapshot(None, &Policy::default(), now()).map_err(WorkerMayNotMutate::Registry)?;
        let gate = mutation_gate(&snap, &worker.worker_identity);
        let cohort_not_unique = snap
            .findings_of(FindingCode::DuplicateNamespaceWorker)
            .any(|f| f.client_instance_id.as_deref() == mine);
        if !gate.mutation_allowed {
            return Err(WorkerMayNotMutate::GateClosed(gate.reasons));
        }
        runtime.check().map_err(WorkerMayNotMutate::RuntimeUnstable)?;
        if cohort_not_unique {
            return Err(WorkerMayNotMutate::CohortNotUnique);
        }
        self.with_registry(|registry| registry.active_workflow_owners())
            .map_err(WorkerMayNotMutate::LeasesUnreadable)?;
        Ok(())
    }

    /// Applies a retirement plan from this host as of `ctx.now`, in one transaction on
    /// the registry this session keeps open, re-probing each candidate with this host's
    /// probe, then reads what the fleet looks like after it. The apply's outcome stands
    /// even when that second read fails ([`AfterApply::Unread`]).
    pub fn apply(&mut self, request: &ApplyRequest, ctx: &RetirementContext) -> Result<Applied, StoreError> {
        let probe = self.local_probe()?;
        let report = self.with_registry(|registry| Ok(registry.apply_retirement(request, ctx, &probe)))?;
        let after = match self.snapshot(None, &Policy::default(), now()) {
            Ok(snap) => AfterApply::of(&snap),
            Err(e) => AfterApply::Unread { error: e.to_string() },
        };
        Ok(Applied { report, after })
    }

    /// Seed 004's apply as an acting worker makes it, whole: the worker's mutation
    /// gate, stable runtime, unique cohort and readable workflow leases
    /// ([`Fleet::worker_may_mutate`]); the plan's repository binding unless `repository`
    /// names one ([`Fleet::plan_binding`]); the retirement context; `still_allowed`,
    /// asked immediately before the write (a capability withdrawn during the call stops
    /// it); then the apply and the fleet right after it ([`Fleet::apply`]). Each step
    /// reuses this session's reads and probe.
    pub fn apply_as(
        &mut self,
        worker: &WorkerRow,
        runtime: &StableRuntime,
        request: &ApplyRequest,
        repository: Option<&str>,
        still_allowed: impl FnOnce() -> bool,
    ) -> Result<Applied, WorkerApplyRefused> {
        self.worker_may_mutate(worker, runtime).map_err(WorkerApplyRefused::MayNotMutate)?;
        let binding = match repository {
            Some(given) => Some(given.to_owned()),
            None => self.plan_binding(request).map_err(WorkerApplyRefused::Registry)?,
        };
        let ctx = retirement_context(binding.as_deref()).map_err(WorkerApplyRefused::Context)?;
        if !still_allowed() {
            return Err(WorkerApplyRefused::Revoked);
        }
        self.apply(request, &ctx).map_err(WorkerApplyRefused::Registry)
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

/// Why [`Fleet::apply_as`] wrote nothing before the apply's own transaction.
#[derive(Debug)]
pub enum WorkerApplyRefused {
    /// The worker may not act on the fleet now.
    MayNotMutate(WorkerMayNotMutate),
    /// The registry could not be read or written.
    Registry(StoreError),
    /// The retirement context could not be made (this host, or the repository given).
    Context(ContextError),
    /// The caller's permission was withdrawn before the write.
    Revoked,
}

/// An apply and the fleet right after it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Applied {
    /// What the apply did.
    #[serde(flatten)]
    pub report: ApplyReport,
    /// The fleet right after it (`post_apply` in an answer).
    #[serde(rename = "post_apply")]
    pub after: AfterApply,
}

/// What the fleet looks like right after an apply.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum AfterApply {
    /// The fleet as read again.
    Read {
        /// Whether the live fleet is safe now.
        live_fleet_safe: bool,
        /// How many of each active blocker remain.
        remaining_blockers: BTreeMap<FindingCode, usize>,
        /// How many workers are still stale.
        stale_worker_count: usize,
    },
    /// The fleet could not be read again, and why.
    Unread {
        /// Why.
        error: String,
    },
}

impl AfterApply {
    fn of(snap: &FleetSnapshot<'_>) -> Self {
        let mut remaining_blockers = BTreeMap::new();
        for f in snap.findings.iter().filter(|f| f.active_blocker) {
            *remaining_blockers.entry(f.code).or_default() += 1;
        }
        Self::Read {
            live_fleet_safe: snap.live_fleet_safe,
            remaining_blockers,
            stale_worker_count: snap.counts.stale_worker_count,
        }
    }
}

impl std::fmt::Display for AfterApply {
    /// The compact JSON of the summary, as `retire apply` prints it after `after:`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let json = serde_json::to_string(self).map_err(|_| std::fmt::Error)?;
        f.write_str(&json)
    }
}
