//! The views a snapshot is made of, borrowed from the rows it was taken of, and their
//! hand-written serialisations (one object per view, fields in report order).

use fleet_identity::{Namespace, Timestamp, TrustVerdict, WorkerIdentity};
use fleet_model::ProcessVerdict;
use fleet_model::WorkerRow;
use serde::Serialize;

use crate::findings::{Finding, FindingCode};

fleet_identity::outward_codes! {
    /// How the snapshot judges one row.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum WorkerState ("worker state") {
        /// Active, heartbeat within its TTL, and not proved gone.
        Live = "live",
        /// Active, but its heartbeat expired (or cannot be read) or its process is gone.
        Stale = "stale",
        /// Released, superseded or retired.
        Historical = "historical",
    }
}

/// One row as the snapshot sees it: the row, borrowed from the rows the snapshot was
/// taken of, with what the snapshot judged of it.
///
/// Serialised as one object: the row's `worker_identity`, `client_instance_id`,
/// `namespace`, then `state`, the row's `status`, `ownership_state`, `pid`, `host_id`,
/// `generation_id` and `last_heartbeat_at`, then `expires_at` and `liveness`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WorkerView<'rows> {
    /// The row.
    pub row: &'rows WorkerRow,
    /// Live, stale or historical.
    pub state: WorkerState,
    /// When the row's heartbeat lapses (`None` without a parsable heartbeat and a TTL).
    pub expires_at: Option<Timestamp>,
    /// The row's heartbeat, read (`None` when it has none or it does not parse).
    pub heartbeat: Option<Timestamp>,
    /// The probe's verdict on the row's process (`None` when it was not probed).
    pub liveness: Option<ProcessVerdict>,
}

impl<'rows> WorkerView<'rows> {
    /// The row's worker identity.
    pub fn worker_identity(&self) -> &'rows WorkerIdentity {
        &self.row.worker_identity
    }

    /// The instance ID the row claims, as it spells it.
    pub fn client_instance_id(&self) -> Option<&'rows str> {
        self.row.client_instance_id.as_deref()
    }
}

impl Serialize for WorkerView<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let row = self.row;
        let mut out = s.serialize_struct("WorkerView", 12)?;
        out.serialize_field("worker_identity", &row.worker_identity)?;
        out.serialize_field("client_instance_id", &row.client_instance_id)?;
        out.serialize_field("namespace", &row.namespace)?;
        out.serialize_field("state", &self.state)?;
        out.serialize_field("status", &row.status)?;
        out.serialize_field("ownership_state", &row.ownership_state)?;
        out.serialize_field("pid", &row.pid)?;
        out.serialize_field("host_id", &row.host_id)?;
        out.serialize_field("generation_id", &row.generation_id)?;
        out.serialize_field("last_heartbeat_at", &row.last_heartbeat_at)?;
        out.serialize_field("expires_at", &self.expires_at)?;
        out.serialize_field("liveness", &self.liveness)?;
        out.end()
    }
}

/// One instance: the active workers that claim its ID.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceView<'rows> {
    /// The ID as the rows spell it (`null` for workers without one).
    pub client_instance_id: Option<&'rows str>,
    /// The client type its workers report (the first, when they disagree).
    pub client_type: Option<&'rows str>,
    /// Whether the ID is trusted, and if not, why not.
    pub trust: TrustVerdict,
    /// On the manifest (`null` when no manifest was supplied).
    pub manifested: Option<bool>,
    /// The live workers of each namespace.
    pub namespaces: NamespaceWorkers<'rows>,
    /// Expected namespaces (the manifest's, else all five) with no live worker.
    pub missing_namespaces: Vec<Namespace>,
    /// Active workers of this instance that are stale.
    pub stale_workers: Vec<&'rows WorkerIdentity>,
    /// The active-blocker codes that concern this instance.
    pub blockers: Vec<FindingCode>,
}

/// The live workers of one instance, by namespace: serialised as an object from each
/// namespace that has one to its workers (in identity order), as a map of lists would
/// be, and held as one list.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NamespaceWorkers<'rows> {
    /// Ordered by namespace, then as the rows were.
    workers: Vec<&'rows WorkerIdentity>,
    /// Where each namespace's workers end in `workers`, in [`Namespace::ALL`] order
    /// (which is the namespaces' own order, and their numbering).
    ends: [usize; Namespace::ALL.len()],
}

impl<'rows> NamespaceWorkers<'rows> {
    /// Files `workers` (in identity order) under their namespaces.
    pub(super) fn new(workers: impl Iterator<Item = (Namespace, &'rows WorkerIdentity)> + Clone) -> Self {
        const N: usize = Namespace::ALL.len();
        let mut counts = [0usize; N];
        for (ns, _) in workers.clone() {
            counts[ns as usize] += 1;
        }
        let (mut starts, mut ends) = ([0usize; N], [0usize; N]);
        let mut total = 0;
        for at in 0..N {
            starts[at] = total;
            total += counts[at];
            ends[at] = total;
        }
        // Every slot is written below; the first worker only fills them until then.
        let Some((_, first)) = workers.clone().next() else {
            return Self { workers: Vec::new(), ends };
        };
        let mut sorted = vec![first; total];
        for (ns, id) in workers {
            sorted[starts[ns as usize]] = id;
            starts[ns as usize] += 1;
        }
        Self { workers: sorted, ends }
    }

    /// The live workers of `ns`.
    pub fn get(&self, ns: Namespace) -> &[&'rows WorkerIdentity] {
        let at = ns as usize;
        let start = if at == 0 { 0 } else { self.ends[at - 1] };
        &self.workers[start..self.ends[at]]
    }

    /// The namespaces with a live worker, each with its workers, in namespace order.
    pub fn iter(&self) -> impl Iterator<Item = (Namespace, &[&'rows WorkerIdentity])> + '_ {
        Namespace::ALL.into_iter().map(|ns| (ns, self.get(ns))).filter(|(_, ids)| !ids.is_empty())
    }
}

impl Serialize for NamespaceWorkers<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

/// How many of each, by the name of the count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Counts {
    /// Every row the snapshot was taken of.
    pub total_rows: usize,
    /// Rows of status `active`: live and stale.
    pub active_worker_count: usize,
    /// Active rows something vouches for.
    pub live_worker_count: usize,
    /// Active rows nothing vouches for any longer.
    pub stale_worker_count: usize,
    /// Released, superseded and retired rows.
    pub historical_row_count: usize,
    /// Instances with an active row.
    pub instance_count: usize,
    /// Findings of every code.
    pub finding_count: usize,
    /// Findings that make the live fleet unsafe.
    pub active_blocker_count: usize,
}

/// The fleet health snapshot. Its views borrow from the rows it was taken of; the
/// findings are its own.
///
/// Serialised as one object of its fields in the order below (see
/// [`FleetSnapshot::with_workers`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSnapshot<'rows> {
    /// When it was taken.
    pub snapshot_at: Timestamp,
    /// Digest over `snapshot_at` and each row's identity, instance, status, heartbeat,
    /// fencing epoch and generation: an observation stamp that moves with time.
    pub consistency_token: String,
    /// The same digest, under the name the registry tools use.
    pub registry_revision: String,
    /// No active blocker.
    pub live_fleet_safe: bool,
    /// Whether an approved manifest was supplied.
    pub manifest_supplied: bool,
    /// How many rows, workers, instances and findings of each kind.
    pub counts: Counts,
    /// Instances with at least one active worker, by ID.
    pub instances: Vec<InstanceView<'rows>>,
    /// Every row, by worker identity.
    pub workers: Vec<WorkerView<'rows>>,
    /// Every finding, in report order.
    pub findings: Vec<Finding>,
}

impl<'rows> FleetSnapshot<'rows> {
    /// The findings of one code.
    pub fn findings_of(&self, code: FindingCode) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.code == code)
    }

    /// This snapshot, serialised with `workers` in place of its own `workers` list:
    /// for a writer that keeps each worker's serialised form from one snapshot of the
    /// same rows to the next. `workers` must serialise as this snapshot's list would.
    pub fn with_workers<'s, W: Serialize>(&'s self, workers: &'s W) -> WithWorkers<'s, 'rows, W> {
        WithWorkers { snapshot: self, workers }
    }
}

/// A [`FleetSnapshot`] with another serialisation of its workers list; see
/// [`FleetSnapshot::with_workers`].
#[derive(Debug, Clone, Copy)]
pub struct WithWorkers<'s, 'rows, W> {
    snapshot: &'s FleetSnapshot<'rows>,
    workers: &'s W,
}

impl<W: Serialize> Serialize for WithWorkers<'_, '_, W> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let snap = self.snapshot;
        let mut out = s.serialize_struct("FleetSnapshot", 9)?;
        out.serialize_field("snapshot_at", &snap.snapshot_at)?;
        out.serialize_field("consistency_token", &snap.consistency_token)?;
        out.serialize_field("registry_revision", &snap.registry_revision)?;
        out.serialize_field("live_fleet_safe", &snap.live_fleet_safe)?;
        out.serialize_field("manifest_supplied", &snap.manifest_supplied)?;
        out.serialize_field("counts", &snap.counts)?;
        out.serialize_field("instances", &snap.instances)?;
        out.serialize_field("workers", self.workers)?;
        out.serialize_field("findings", &snap.findings)?;
        out.end()
    }
}

impl Serialize for FleetSnapshot<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.with_workers(&self.workers).serialize(s)
    }
}
