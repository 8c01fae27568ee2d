//! Fleet-wide reads every surface shares: the snapshot with local probes, and the
//! retirement context and plan.

use std::collections::BTreeSet;

use fleet_identity::HostId;
use fleet_identity::{ClientInstanceId, Repository, Timestamp};
use fleet_probe::{LocalProbe, TrackingProbe};
use fleet_registry::LivenessProbe;
use fleet_registry::OpenMode;
use fleet_registry::{
    ApplyReport, ApplyRequest, ReadMark, Registry, RegistryDump, Store, StoreError, StoreErrorKind,
    WorkerRow, WorkerStatus, active_workflow_owners_in,
};
use fleet_retirement::{Evidence, Plan, RetirementContext, plan};
use fleet_snapshot::{FleetSnapshot, Manifest, Policy, ProbeResults, SnapshotInput, snapshot};

use crate::exit::Failure;
use crate::location::{AnyStore, RegistryLocation, open_registry};
use crate::worker::now;
use crate::worker_json::WorkerJson;

/// Probes every active row that this machine can speak for; others stay unprobed.
pub fn probe_local(rows: &[WorkerRow]) -> ProbeResults {
    let Ok(probe) = LocalProbe::new() else { return ProbeResults::new() };
    probe_rows(&probe, probe.host_id(), rows)
}

/// Probes with `probe` every active row of `host`.
fn probe_rows(probe: &impl LivenessProbe, host: &HostId, rows: &[WorkerRow]) -> ProbeResults {
    rows.iter()
        .filter(|r| r.status == WorkerStatus::Active && r.host_id.as_ref() == Some(host))
        .filter_map(|r| Some((r.worker_identity.clone(), probe.probe(&r.process()?))))
        .collect()
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
    let mut reader = FleetReader::new(location.clone());
    Ok(read(&reader.snapshot(manifest, policy, at)?))
}

/// A long-lived reader of the fleet, for servers that answer many snapshot calls: it
/// keeps the registry open and the rows it last read, and reads the rows again only when
/// the store's change marker has moved (or the store cannot tell). Probes and
/// classification run on every call, because processes die and heartbeats lapse
/// without any write to the store. A reader made [`FleetReader::tracking_processes`]
/// probes local processes through a [`TrackingProbe`], which asks a pidfd for each
/// process it has verified alive instead of reading `/proc` again. It also keeps each
/// worker's JSON from the last [`FleetReader::json_snapshot`] written, for the next.
#[derive(Debug)]
pub struct FleetReader {
    location: RegistryLocation,
    registry: Option<Registry<AnyStore>>,
    /// The rows last read.
    last: Option<LastRead>,
    /// Whether to keep a [`TrackingProbe`] (else each snapshot probes with a fresh
    /// [`LocalProbe`], the cheaper choice for a single read).
    track: bool,
    /// The tracking probe, once made.
    tracking: Option<TrackingProbe>,
    /// Each worker's JSON, for the rows in `last`.
    json: WorkerJson,
}

/// The rows a [`FleetReader`] last read, and where the store stood then.
#[derive(Debug)]
struct LastRead {
    /// The change marker, read just before the rows.
    marker: Option<u128>,
    /// The store's position in its history of changes and the rows' versions, read
    /// with the rows.
    mark: Option<ReadMark>,
    dump: RegistryDump,
}

/// A snapshot taken by a [`FleetReader`], with what it needs to write the snapshot as
/// JSON: [`JsonSnapshot::write_json`] writes each worker judged as at the last write
/// from the bytes it wrote then (while the reader's rows stayed the same).
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

impl FleetReader {
    /// A reader of the registry at `location`; nothing is opened until the first read.
    pub fn new(location: RegistryLocation) -> Self {
        Self {
            location,
            registry: None,
            last: None,
            track: false,
            tracking: None,
            json: WorkerJson::default(),
        }
    }

    /// This reader, keeping a [`TrackingProbe`] across snapshots: for a process that
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
        let registry = match &mut self.registry {
            Some(registry) => registry,
            None => self.registry.insert(open_registry(&self.location, OpenMode::MustExist)?),
        };
        let marker = registry.store_mut().change_marker()?;
        if let (Some(now), Some(LastRead { marker: Some(then), .. })) = (marker, &self.last)
            && now == *then
        {
            return Ok(());
        }
        let read = registry.read_since(self.last.as_mut().and_then(|last| last.mark.take()))?;
        let last = self.last.get_or_insert_with(|| LastRead {
            marker: None,
            mark: None,
            dump: RegistryDump::default(),
        });
        let origins = read.changes.apply(&mut last.dump);
        self.json.follow(&origins);
        (last.marker, last.mark) = (marker, read.mark);
        Ok(())
    }

    /// Reads (when the store moved), probes the rows this machine can speak for, and
    /// classifies, as [`take_snapshot`] does. The snapshot borrows the rows this reader
    /// keeps.
    pub fn snapshot(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<FleetSnapshot<'_>, StoreError> {
        Ok(self.json_snapshot(manifest, policy, at)?.snapshot)
    }

    /// A snapshot as [`FleetReader::snapshot`] takes it, ready to be written as JSON with
    /// the worker JSON this reader kept from the last one written.
    pub fn json_snapshot(
        &mut self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        at: Timestamp,
    ) -> Result<JsonSnapshot<'_>, StoreError> {
        if self.track && self.tracking.is_none() {
            self.tracking = TrackingProbe::new().ok();
        }
        self.read()?;
        let Some(LastRead { dump, .. }) = &self.last else { return Err(not_read()) };
        let probes = match &self.tracking {
            Some(probe) => {
                probe.begin_round();
                let probes = probe_rows(probe, probe.host_id(), &dump.worker_registrations);
                probe.end_round();
                probes
            }
            None => probe_local(&dump.worker_registrations),
        };
        let snapshot = snapshot(SnapshotInput {
            rows: &dump.worker_registrations,
            ledger: &dump.instances,
            manifest,
            probes: &probes,
            policy,
            now: at,
        });
        Ok(JsonSnapshot { snapshot, rows: &dump.worker_registrations, json: &mut self.json })
    }
}

fn not_read() -> StoreError {
    StoreError::new(StoreErrorKind::Unavailable, "the registry was not read")
}

/// Where retirement runs: this host and boot, the canonical repository (default: the
/// current directory), now.
pub fn retirement_context(repository: Option<&str>) -> Result<(RetirementContext, LocalProbe), Failure> {
    let probe =
        LocalProbe::new().map_err(|e| Failure::store(format!("cannot read this host's identity: {e}")))?;
    let repository = match repository {
        Some(r) => r.to_owned(),
        None => std::env::current_dir()
            .and_then(std::fs::canonicalize)
            .map(|p| p.display().to_string())
            .map_err(|e| Failure::usage(format!("cannot read the current directory: {e}")))?,
    };
    let ctx = RetirementContext {
        host_id: probe.host_id().clone(),
        boot_id: Some(probe.boot_id().clone()),
        canonical_repository: Repository::new(repository).map_err(|e| Failure::usage(e.to_string()))?,
        now: now(),
    };
    Ok((ctx, probe))
}

/// Seed 004's audit context of a plan or apply, checked: `remote` must be one of
/// `FLEET_REMOTES` when the operator lists them. The error names the argument.
pub fn retirement_audit(
    remote: Option<String>,
    host: Option<String>,
    org: Option<String>,
    repo: Option<String>,
) -> Result<fleet_registry::RetirementAudit, (&'static str, String)> {
    let known: Option<Vec<String>> = std::env::var(crate::vars::REMOTES)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .map(|v| v.split(',').map(str::trim).filter(|r| !r.is_empty()).map(str::to_owned).collect());
    fleet_registry::RetirementAudit::new(remote, host, org, repo, known.as_deref())
}

/// Applies a retirement plan from this host: the context (this host and boot, the
/// canonical repository, now), the local probe, and one apply transaction.
pub fn apply_retirement(
    location: &RegistryLocation,
    request: &ApplyRequest,
    repository: Option<&str>,
) -> Result<ApplyReport, Failure> {
    let (ctx, probe) = retirement_context(repository)?;
    let mut registry = open_registry(location, OpenMode::MustExist)?;
    Ok(registry.apply_retirement(request, &ctx, Some(&probe), ctx.now, &()))
}

/// What the fleet looks like right after an apply, as the CLI and the MCP apply tool
/// report it (`post_apply`): whether it is safe now, how many workers are still stale,
/// and how many of each active blocker remain.
pub fn post_apply_summary(snap: &FleetSnapshot<'_>) -> serde_json::Value {
    let mut blockers: std::collections::BTreeMap<fleet_snapshot::FindingCode, usize> = Default::default();
    for f in snap.findings.iter().filter(|f| f.active_blocker) {
        *blockers.entry(f.code).or_default() += 1;
    }
    serde_json::json!({
        "live_fleet_safe": snap.live_fleet_safe,
        "stale_worker_count": snap.counts.stale_worker_count,
        "remaining_blockers": blockers,
    })
}

/// Plans retirement from one consistent read of rows, ledger and workflow leases.
pub fn plan_retirement(location: &RegistryLocation, ctx: &RetirementContext) -> Result<Plan, StoreError> {
    let mut registry = open_registry(location, OpenMode::MustExist)?;
    let (rows, ledger, owners) = registry.store_mut().read(|tx| {
        Ok::<_, StoreError>((tx.workers()?, tx.instances()?, active_workflow_owners_in(tx)?.owners))
    })?;
    let probes = probe_local(&rows);
    let ledger: BTreeSet<ClientInstanceId> = ledger.into_iter().map(|i| i.client_instance_id).collect();
    Ok(plan(&Evidence::new(&rows, &ledger, &owners, &probes), ctx))
}
