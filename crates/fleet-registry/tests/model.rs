//! The retirement apply, checked exhaustively for small bounds with `stateright`.
//!
//! Two workers of one trusted launch live, pause, resume, die, heartbeat and take
//! workflow leases while time passes, the sweep runs, and a reconciler plans and
//! applies. Planning is `fleet_retirement::plan`; applying is the real
//! `Registry::apply_retirement` (the code every backend runs), over a store that keeps
//! its tables in the model's state — each transaction works on a copy and commits it
//! whole, as SQLite's and PostgreSQL's do. The liveness probe answers from the model's
//! world of processes.
//!
//! Between plan and apply anything may happen: heartbeats (the candidate's own or a live
//! worker's), a process coming back, a lease, a sweep, the launch's ledger entry lost (as
//! a restored older backup loses it).
//!
//! Properties, over every reachable state:
//! * apply never retires a row whose process is alive;
//! * apply never retires a row whose owner holds a live workflow lease;
//! * apply never retires a row whose instance the ledger does not hold;
//! * apply retires only rows exactly as the plan saw them;
//! * apply is all-or-nothing: a refusal or a rollback (a lease appearing inside its
//!   transaction) writes nothing;
//! * and it is not vacuous: a crashed worker is retired, also after the registry moved
//!   since the plan (a live worker's heartbeat).

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{
    BootId, ClientInstanceId, ClientType, GenerationId, HostId, Namespace, Pid, PidNamespace,
    ProcessStartTime, Repository, Timestamp, WorkerIdentity,
};
use fleet_lease::{LeaseKey, LeaseKind, LeaseRecord};
use fleet_registry::{
    ApplyOutcome, ApplyRequest, AuditContext, AuditEntry, BeforeWrite, HeartbeatTtl, InstanceRecord,
    InstanceRef, LivenessProbe, ProcessIdentity, ProcessVerdict, Registration, Registry, Revisions, Store,
    StoreError, Tx, WorkerCredential, WorkerRow, WorkerStatus, WorkerToken,
};
use fleet_retirement::{Evidence, RetirementContext, plan};
use stateright::{Checker, Model, Property};

const WORKERS: usize = 2;
const TTL_S: u32 = 2;
const LAST_TICK: i64 = 3;
const HOST: &str = "0123456789abcdef0123456789abcdef";
const BOOT: &str = "11111111-2222-3333-4444-555555555555";
const INSTANCE: &str = "inst-codex-20260730T120000Z-abc123def456";

/// The store's tables, all of them, as plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Tables {
    workers: BTreeMap<WorkerIdentity, WorkerRow>,
    instances: BTreeMap<ClientInstanceId, InstanceRecord>,
    leases: BTreeMap<LeaseKey, LeaseRecord>,
    audit: Vec<AuditEntry>,
    now: Option<Timestamp>,
    high_water: BTreeMap<String, u64>,
    fences: BTreeMap<(String, String), fleet_model::HostFence>,
    host_boots: BTreeMap<(String, String), fleet_model::HostBoot>,
}

/// A store whose transactions copy the tables and commit the copy whole.
#[derive(Debug)]
struct MemoryStore(Tables);

struct MemoryTx<'a>(&'a mut Tables);

impl Tx for MemoryTx<'_> {
    fn workers(&mut self) -> Result<Vec<WorkerRow>, StoreError> {
        Ok(self.0.workers.values().cloned().collect())
    }
    fn worker(&mut self, id: &WorkerIdentity) -> Result<Option<WorkerRow>, StoreError> {
        Ok(self.0.workers.get(id).cloned())
    }
    fn slot(&mut self, instance: &str, namespace: Namespace) -> Result<Vec<WorkerRow>, StoreError> {
        Ok(self
            .0
            .workers
            .values()
            .filter(|r| r.client_instance_id.as_deref() == Some(instance) && r.namespace == namespace)
            .cloned()
            .collect())
    }
    fn insert_worker(&mut self, row: &WorkerRow) -> Result<(), StoreError> {
        if self.0.workers.insert(row.worker_identity.clone(), row.clone()).is_some() {
            return Err(StoreError::conflict("worker exists"));
        }
        Ok(())
    }
    fn replace_worker(&mut self, expected: &WorkerRow, new: &WorkerRow) -> Result<bool, StoreError> {
        match self.0.workers.get_mut(&expected.worker_identity) {
            Some(row) if row == expected => {
                *row = new.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }
    fn delete_worker(&mut self, expected: &WorkerRow) -> Result<bool, StoreError> {
        if self.0.workers.get(&expected.worker_identity) == Some(expected) {
            self.0.workers.remove(&expected.worker_identity);
            return Ok(true);
        }
        Ok(false)
    }
    fn instances(&mut self) -> Result<Vec<InstanceRecord>, StoreError> {
        Ok(self.0.instances.values().cloned().collect())
    }
    fn instance(&mut self, id: &ClientInstanceId) -> Result<Option<InstanceRecord>, StoreError> {
        Ok(self.0.instances.get(id).cloned())
    }
    fn insert_instance(&mut self, record: &InstanceRecord) -> Result<(), StoreError> {
        self.0.instances.insert(record.client_instance_id.clone(), record.clone());
        Ok(())
    }
    fn high_water(&mut self, scope: &str) -> Result<u64, StoreError> {
        Ok(self.0.high_water.get(scope).copied().unwrap_or(0))
    }
    fn high_waters(&mut self) -> Result<Vec<(String, u64)>, StoreError> {
        Ok(self.0.high_water.iter().map(|(s, e)| (s.clone(), *e)).collect())
    }
    fn raise_high_water(&mut self, scope: &str, epoch: u64) -> Result<(), StoreError> {
        let mark = self.0.high_water.entry(scope.to_owned()).or_default();
        *mark = (*mark).max(epoch);
        Ok(())
    }
    fn host_fences(&mut self) -> Result<Vec<fleet_model::HostFence>, StoreError> {
        Ok(self.0.fences.values().cloned().collect())
    }
    fn put_host_fence(&mut self, fence: &fleet_model::HostFence) -> Result<(), StoreError> {
        let key = (fence.host_id.to_string(), fence.boot_id.as_str().to_owned());
        self.0.fences.insert(key, fence.clone());
        Ok(())
    }
    fn host_boots(&mut self) -> Result<Vec<fleet_model::HostBoot>, StoreError> {
        Ok(self.0.host_boots.values().cloned().collect())
    }
    fn note_host_boot(&mut self, boot: &fleet_model::HostBoot) -> Result<(), StoreError> {
        let key = (boot.host_id.to_string(), boot.boot_id.to_string());
        let first = self.0.host_boots.get(&key).map_or(boot.first_seen_at, |b| b.first_seen_at);
        self.0.host_boots.insert(key, fleet_model::HostBoot { first_seen_at: first, ..boot.clone() });
        Ok(())
    }
    fn registry_id(&mut self) -> Result<fleet_registry::RegistryId, StoreError> {
        fleet_registry::RegistryId::new("0123456789abcdef0123456789abcdef")
    }
    fn store_now(&mut self) -> Result<Timestamp, StoreError> {
        self.0.now.ok_or_else(|| StoreError::invalid("the model sets the store's clock"))
    }
    fn lease(&mut self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        Ok(self.0.leases.get(key).cloned())
    }
    fn leases(&mut self, kind: Option<LeaseKind>) -> Result<Vec<LeaseRecord>, StoreError> {
        Ok(self.0.leases.values().filter(|l| kind.is_none_or(|k| l.kind == k)).cloned().collect())
    }
    fn put_lease(&mut self, expected: Option<&LeaseRecord>, new: &LeaseRecord) -> Result<bool, StoreError> {
        if self.0.leases.get(&new.lease_key) != expected {
            return Ok(false);
        }
        self.0.leases.insert(new.lease_key.clone(), new.clone());
        Ok(true)
    }
    fn append_audit(&mut self, entry: &AuditEntry) -> Result<(), StoreError> {
        self.0.audit.push(entry.clone());
        Ok(())
    }
    fn audit(&mut self, key: Option<&LeaseKey>) -> Result<Vec<AuditEntry>, StoreError> {
        Ok(self.0.audit.iter().filter(|e| key.is_none_or(|k| e.lease_key == k.as_str())).cloned().collect())
    }
}

impl Store for MemoryStore {
    fn after_bulk_load(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn write<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        let mut copy = self.0.clone();
        let result = f(&mut MemoryTx(&mut copy));
        if result.is_ok() {
            self.0 = copy;
        }
        result
    }
    fn read<T, E, F>(&mut self, f: F) -> Result<T, E>
    where
        E: From<StoreError>,
        F: FnOnce(&mut dyn Tx) -> Result<T, E>,
    {
        f(&mut MemoryTx(&mut self.0.clone()))
    }
    fn touch_heartbeat(
        &mut self,
        who: &WorkerCredential,
        now: Timestamp,
        claim: fleet_registry::Claim,
    ) -> Result<bool, StoreError> {
        let Some(row) = self.0.workers.get_mut(&who.worker_identity) else { return Ok(false) };
        if row.status != WorkerStatus::Active || row.generation_id.as_ref() != Some(&who.generation_id) {
            return Ok(false);
        }
        row.last_heartbeat_at = Some(now.to_string());
        row.ownership_state = Some(claim.state());
        Ok(true)
    }
}

/// What a worker's process is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Process {
    Running,
    Paused,
    Dead,
}

/// A plan the reconciler made, to apply later.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Planned {
    registry_fingerprint: fleet_retirement::RegistryFingerprint,
    candidate_fingerprint: fleet_retirement::CandidateFingerprint,
    candidates: Vec<WorkerIdentity>,
    /// The candidates' rows as the plan saw them.
    rows: Vec<WorkerRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    clock: i64,
    tables: Tables,
    processes: [Process; WORKERS],
    plan: Option<Planned>,
    /// Set when an apply broke a property; the properties read these.
    retired_a_live_process: bool,
    retired_a_lease_owner: bool,
    half_applied: bool,
    retired_untrusted: bool,
    retired_a_changed_row: bool,
    retired_any: bool,
    retired_after_the_registry_moved: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Action {
    Tick,
    Heartbeat(usize),
    Pause(usize),
    Resume(usize),
    Kill(usize),
    TakeLease(usize),
    Sweep,
    /// The launch's ledger entry is lost, as restoring an older backup loses it.
    LoseLedger,
    Plan,
    Apply,
    /// Apply while another writer takes a workflow lease for worker `n` inside the
    /// apply's transaction.
    ApplyAgainstLease(usize),
}

fn at(s: i64) -> Timestamp {
    Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
}

fn process_of(n: usize) -> ProcessIdentity {
    ProcessIdentity {
        host_id: HostId::new(HOST).unwrap(),
        boot_id: BootId::new(BOOT).unwrap(),
        pid: Pid::new(i64::try_from(100 + n).unwrap()).unwrap(),
        process_start_time: ProcessStartTime::new(5000 + n as u64).unwrap(),
        pid_namespace: Some(PidNamespace::new(4_026_531_836).unwrap()),
    }
}

fn generation(n: usize) -> GenerationId {
    GenerationId::new(format!("gen-{n}")).unwrap()
}

fn token(n: usize) -> WorkerToken {
    WorkerToken::from_bytes([u8::try_from(n + 1).unwrap(); 32])
}

/// The probe of the model's host: it sees exactly the world's processes.
struct World([Process; WORKERS]);

impl LivenessProbe for World {
    fn probe(&self, p: &ProcessIdentity) -> ProcessVerdict {
        let n = (p.pid.get() - 100) as usize;
        match self.0.get(n) {
            Some(Process::Dead) => ProcessVerdict::Gone,
            Some(_) => ProcessVerdict::Alive,
            None => ProcessVerdict::Unknown,
        }
    }
}

fn context(now: Timestamp) -> RetirementContext {
    RetirementContext {
        host_id: HostId::new(HOST).unwrap(),
        boot_id: Some(BootId::new(BOOT).unwrap()),
        canonical_repository: Repository::new("/srv/repo").unwrap(),
        now,
    }
}

fn lease_key(n: usize) -> LeaseKey {
    LeaseKey::new(format!("workflow:job-{n}")).unwrap()
}

/// Takes the workflow lease of worker `n` inside the apply's transaction.
struct LeaseInside(WorkerIdentity, usize);

impl BeforeWrite for LeaseInside {
    fn before_write(&self, tx: &mut dyn Tx, _: &WorkerIdentity) -> Result<(), StoreError> {
        let now = tx.store_now()?;
        let tenure = fleet_lease::Tenure {
            owner: self.0.to_string(),
            lease_id: fleet_lease::LeaseId::new(format!("lease-inside-{}", self.1)).unwrap(),
            ttl: time::Duration::seconds(60),
            scopes: Vec::new(),
            process: None,
        };
        let current = tx.lease(&lease_key(self.1))?;
        if let Ok((_, lease)) = fleet_lease::decide_acquire(
            current.as_ref(),
            &lease_key(self.1),
            LeaseKind::Workflow,
            &tenure,
            now,
        ) {
            tx.put_lease(current.as_ref(), &lease)?;
        }
        Ok(())
    }
}

struct Retirement;

impl State {
    fn registry(&self) -> Registry<MemoryStore> {
        let mut tables = self.tables.clone();
        tables.now = Some(at(self.clock));
        Registry::new(MemoryStore(tables))
    }

    fn id(&self, n: usize) -> WorkerIdentity {
        self.tables
            .workers
            .values()
            .find(|r| r.generation_id == Some(generation(n)))
            .unwrap()
            .worker_identity
            .clone()
    }

    fn lease_owners(&self) -> BTreeSet<String> {
        let now = at(self.clock);
        self.tables
            .leases
            .values()
            .filter(|l| l.kind == LeaseKind::Workflow && l.is_live(now))
            .map(|l| l.owner.clone())
            .collect()
    }

    /// Applies the stored plan with `hook` and records what the properties check.
    fn apply(&mut self, hook: &dyn BeforeWrite) -> Option<()> {
        let planned = self.plan.clone()?;
        let mut registry = self.registry();
        let before = self.tables.workers.clone();
        let owners_before = self.lease_owners();
        let trusted = !self.tables.instances.is_empty();
        let request = ApplyRequest {
            registry_fingerprint: planned.registry_fingerprint,
            candidate_fingerprint: planned.candidate_fingerprint,
            worker_identities: planned.candidates,
            every_candidate: false,
            retired_by: "model".into(),
            registry_match: fleet_registry::RegistryMatch::Candidates,
            audit: Default::default(),
        };
        let now = at(self.clock);
        let report =
            registry.apply_retirement_with_hook(&request, &context(now), Some(&World(self.processes)), hook);
        let after = registry.store().0.clone();
        if report.outcome != ApplyOutcome::Applied && after.workers != before {
            self.half_applied = true;
        }
        for id in &report.retired {
            let n = (0..WORKERS).find(|n| &self.id(*n) == id)?;
            self.retired_a_live_process |= self.processes[n] != Process::Dead;
            self.retired_a_lease_owner |= owners_before.contains(id.as_str());
            self.retired_untrusted |= !trusted;
            self.retired_a_changed_row |= !planned.rows.iter().any(|r| Some(r) == before.get(id));
            self.retired_any = true;
            self.retired_after_the_registry_moved |= report.registry_moved == Some(true);
        }
        self.tables = Tables { now: None, ..after };
        self.plan = None;
        Some(())
    }
}

impl Model for Retirement {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut registry = Registry::new(MemoryStore(Tables { now: Some(at(0)), ..Tables::default() }));
        let id = ClientInstanceId::parse(INSTANCE).unwrap();
        registry
            .record_instance(&InstanceRecord {
                client_instance_id: id.clone(),
                client_type: ClientType::new("codex").unwrap(),
                fleet_run_id: None,
                minted_at: at(0),
                host_id: None,
            })
            .unwrap();
        let world = World([Process::Running; WORKERS]);
        for (n, namespace) in [Namespace::Author, Namespace::Reviewer].into_iter().enumerate() {
            let registration = Registration {
                client_type: ClientType::new("codex").unwrap(),
                instance: InstanceRef::Minted(id.clone()),
                instance_provenance: Some("trusted_launcher".into()),
                fleet_run_id: None,
                namespace,
                profile: None,
                session_id: None,
                generation_id: generation(n),
                process: process_of(n),
                repository: Some(Repository::new("/srv/repo").unwrap()),
                heartbeat_ttl: HeartbeatTtl::from_secs(TTL_S).unwrap(),
                revisions: Revisions::default(),
                claim: fleet_registry::Claim::Owned,
                hostname: None,
            };
            registry.register(&registration, &token(n), at(0), &world).unwrap();
        }
        let tables = Tables { now: None, audit: Vec::new(), ..registry.store().0.clone() };
        vec![State {
            clock: 0,
            tables,
            processes: [Process::Running; WORKERS],
            plan: None,
            retired_a_live_process: false,
            retired_a_lease_owner: false,
            half_applied: false,
            retired_untrusted: false,
            retired_a_changed_row: false,
            retired_any: false,
            retired_after_the_registry_moved: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.clock < LAST_TICK {
            actions.push(Action::Tick);
        }
        for n in 0..WORKERS {
            match state.processes[n] {
                Process::Running => {
                    actions.extend([
                        Action::Heartbeat(n),
                        Action::Pause(n),
                        Action::Kill(n),
                        Action::TakeLease(n),
                    ]);
                }
                Process::Paused => actions.extend([Action::Resume(n), Action::Kill(n)]),
                Process::Dead => {}
            }
            if state.plan.is_some() {
                actions.push(Action::ApplyAgainstLease(n));
            }
        }
        actions.extend([Action::Sweep, Action::Plan]);
        if !state.tables.instances.is_empty() {
            actions.push(Action::LoseLedger);
        }
        if state.plan.is_some() {
            actions.push(Action::Apply);
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        let now = at(state.clock);
        match action {
            Action::Tick => next.clock += 1,
            Action::Pause(n) => next.processes[n] = Process::Paused,
            Action::Resume(n) => next.processes[n] = Process::Running,
            Action::Kill(n) => next.processes[n] = Process::Dead,
            Action::Heartbeat(n) => {
                let mut registry = state.registry();
                let who = WorkerCredential {
                    worker_identity: state.id(n),
                    generation_id: generation(n),
                    token: token(n),
                };
                registry.heartbeat(&who, now).ok()?;
                next.tables = Tables { now: None, ..registry.store().0.clone() };
            }
            Action::TakeLease(n) => {
                let mut registry = state.registry();
                let owner = state.id(n).to_string();
                let ttl = time::Duration::seconds(i64::from(TTL_S));
                registry
                    .acquire_lease(
                        &lease_key(n),
                        LeaseKind::Workflow,
                        &owner,
                        ttl,
                        &[],
                        &AuditContext::default(),
                    )
                    .ok()?
                    .ok()?;
                next.tables = Tables { now: None, ..registry.store().0.clone() };
            }
            Action::Sweep => {
                let mut registry = state.registry();
                if registry.mark_expired_stale(now).ok()?.is_empty() {
                    return None;
                }
                next.tables = Tables { now: None, ..registry.store().0.clone() };
            }
            Action::LoseLedger => next.tables.instances.clear(),
            Action::Plan => {
                let rows: Vec<WorkerRow> = state.tables.workers.values().cloned().collect();
                let ledger: BTreeSet<ClientInstanceId> = state.tables.instances.keys().cloned().collect();
                let owners = state.lease_owners();
                let world = World(state.processes);
                let probes = rows
                    .iter()
                    .filter_map(|r| Some((r.worker_identity.clone(), world.probe(&r.process()?))))
                    .collect();
                let p = plan(&Evidence::new(&rows, &ledger, &owners, &probes), &context(now));
                if p.candidate_worker_identities.is_empty() {
                    return None;
                }
                let planned_rows = rows
                    .iter()
                    .filter(|r| p.candidate_worker_identities.contains(&r.worker_identity))
                    .cloned()
                    .collect();
                next.plan = Some(Planned {
                    registry_fingerprint: p.registry_fingerprint,
                    candidate_fingerprint: p.candidate_fingerprint,
                    candidates: p.candidate_worker_identities,
                    rows: planned_rows,
                });
            }
            Action::Apply => next.apply(&())?,
            Action::ApplyAgainstLease(n) => {
                let hook = LeaseInside(state.id(n), n);
                next.apply(&hook)?;
            }
        }
        // The audit log only grows and lease ids are random; neither matters to any
        // property, so both are normalized out of the state.
        next.tables.audit.clear();
        for lease in next.tables.leases.values_mut() {
            lease.lease_id =
                fleet_lease::LeaseId::new(format!("lease-{}-{}", lease.fencing_epoch, lease.owner)).unwrap();
        }
        Some(next)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("apply never retires a live process", |_, s: &State| !s.retired_a_live_process),
            Property::always("apply never retires a workflow-lease owner", |_, s: &State| {
                !s.retired_a_lease_owner
            }),
            Property::always("apply never retires a row of an untrusted instance", |_, s: &State| {
                !s.retired_untrusted
            }),
            Property::always("apply retires only rows as the plan saw them", |_, s: &State| {
                !s.retired_a_changed_row
            }),
            Property::always("apply is all-or-nothing", |_, s: &State| !s.half_applied),
            Property::sometimes("a crashed worker is retired", |_, s: &State| s.retired_any),
            Property::sometimes("a crashed worker is retired after the registry moved", |_, s: &State| {
                s.retired_after_the_registry_moved
            }),
        ]
    }
}

#[test]
fn the_retirement_apply_holds_in_every_reachable_state() {
    let checker = Retirement.checker().spawn_bfs().join();
    checker.assert_properties();
    eprintln!("the retirement model explored {} states", checker.unique_state_count());
    assert!(
        checker.unique_state_count() > 1_000,
        "the model explored {} states",
        checker.unique_state_count()
    );
}
