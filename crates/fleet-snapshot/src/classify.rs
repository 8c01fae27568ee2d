//! Classification: rows, ledger, manifest, probe results and `now` in; the snapshot out.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{
    ClientInstanceId, InstanceClaim, Ledger, Namespace, Repository, Timestamp, TrustVerdict, WorkerIdentity,
};
use fleet_model::{HeartbeatJudge, ProcessVerdict};
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use serde::Serialize;

use crate::findings::{Finding, FindingCode};
use crate::keys::{Arena, KeyTable, Span};
use crate::manifest::Manifest;

/// Liveness probe results, by worker. Rows without an entry were not probed (another
/// host, or no probe available): the heartbeat alone speaks for them.
pub type ProbeResults = BTreeMap<WorkerIdentity, ProcessVerdict>;

/// What the operator expects of every live worker, beyond the manifest.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// The repository every worker should be bound to; others are `foreign_repository`.
    pub canonical_repository: Option<Repository>,
    /// The code revision every worker should run (the manifest's, when it names one,
    /// wins); others are `old_revision`.
    pub expected_code_revision: Option<String>,
}

/// Everything the snapshot is computed from: the rows it borrows its views from
/// (`'rows`), and the rest, read only while it is taken (`'a`).
#[derive(Debug, Clone, Copy)]
pub struct SnapshotInput<'rows, 'a> {
    /// Every registry row.
    pub rows: &'rows [WorkerRow],
    /// The launcher's ledger.
    pub ledger: &'a [InstanceRecord],
    /// The approved manifest, when one is supplied.
    pub manifest: Option<&'a Manifest>,
    /// Liveness probe results.
    pub probes: &'a ProbeResults,
    /// Expectations beyond the manifest.
    pub policy: &'a Policy,
    /// The time the snapshot is taken at.
    pub now: Timestamp,
}

/// How the snapshot judges one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Active, heartbeat within its TTL, and not proved gone.
    Live,
    /// Active, but its heartbeat expired (or cannot be read) or its process is gone.
    Stale,
    /// Released, superseded or retired.
    Historical,
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
    fn new(workers: impl Iterator<Item = (Namespace, &'rows WorkerIdentity)> + Clone) -> Self {
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
#[allow(missing_docs)]
pub struct Counts {
    pub total_rows: usize,
    pub active_worker_count: usize,
    pub live_worker_count: usize,
    pub stale_worker_count: usize,
    pub historical_row_count: usize,
    pub instance_count: usize,
    pub finding_count: usize,
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

/// When a row's heartbeat lapses, and whether the row is live, stale or history.
fn judge(
    row: &WorkerRow,
    probe: Option<ProcessVerdict>,
    heartbeats: &HeartbeatJudge,
) -> (Option<Timestamp>, WorkerState) {
    // The registry's TTL rule, on the heartbeat parsed once.
    let judged = row.heartbeat().zip(row.heartbeat_ttl_s).map(|(beat, ttl)| heartbeats.judge(beat, ttl));
    let expires_at = judged.map(|(expiry, _)| expiry);
    if row.status != WorkerStatus::Active {
        return (expires_at, WorkerState::Historical);
    }
    // No parsable heartbeat or no TTL: nothing vouches for the row.
    let expired = judged.is_none_or(|(_, lapsed)| lapsed);
    let gone = matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused));
    if expired || gone || row.ownership_state == Some(OwnershipState::Stale) {
        (expires_at, WorkerState::Stale)
    } else {
        (expires_at, WorkerState::Live)
    }
}

/// The active rows that claim one instance ID, with what the ID claims, read and judged
/// against the ledger once for all of them, and what its rows agree on, gathered as
/// each row is read.
struct Group<'rows> {
    key: Option<&'rows str>,
    /// The key's number in the snapshot's [`KeyTable`].
    instance: usize,
    claim: InstanceClaim,
    trust: TrustVerdict,
    /// Each member with its state and namespace (kept here, so that building the
    /// instance's view later need not read the row again).
    members: Vec<(&'rows WorkerRow, WorkerState, Namespace)>,
    /// The first client type a member reports.
    client_type: Option<&'rows str>,
    /// The launch fields (see [`launch_fields`]) every live member must match: the first
    /// live value of each, or for the host the ledger's, when it records one; copied
    /// into the snapshot's arena of launch values (see [`crate::keys`]).
    launch: [Option<Span>; 5],
    /// Some live member's launch field differs from `launch`.
    launch_disagrees: bool,
    /// The namespaces with a live member, as bits.
    live_namespaces: u8,
    /// Some namespace has two live members.
    duplicate_namespace: bool,
}

impl<'rows> Group<'rows> {
    fn new(
        key: Option<&'rows str>,
        instance: usize,
        ledger: &LedgerIndex<'_>,
        ledger_host: Option<&str>,
        values: &mut Arena,
    ) -> Self {
        let claim = InstanceClaim::read(key);
        let trust = claim.trust(ledger);
        let mut launch = [None; 5];
        launch[HOST] = ledger_host.map(|host| values.put(host));
        Self {
            key,
            instance,
            claim,
            trust,
            // A launch has one worker per namespace.
            members: Vec::with_capacity(Namespace::ALL.len()),
            client_type: None,
            launch,
            launch_disagrees: false,
            live_namespaces: 0,
            duplicate_namespace: false,
        }
    }

    fn push(&mut self, row: &'rows WorkerRow, state: WorkerState, values: &mut Arena) {
        self.members.push((row, state, row.namespace));
        if self.client_type.is_none() {
            self.client_type = row.client_type.as_ref().map(|c| c.as_str());
        }
        if state != WorkerState::Live {
            return;
        }
        // Rows without a field do not vote.
        for (agreed, (_, value)) in self.launch.iter_mut().zip(launch_fields(row)) {
            match (*agreed, value) {
                (None, value) => *agreed = value.map(|v| values.put(v)),
                (Some(agreed), Some(value)) if values.get(agreed) != value => self.launch_disagrees = true,
                _ => {}
            }
        }
        let bit = 1u8 << (row.namespace as u8);
        self.duplicate_namespace |= self.live_namespaces & bit != 0;
        self.live_namespaces |= bit;
    }

    fn live(&self) -> impl Iterator<Item = &'rows WorkerRow> + '_ {
        self.members.iter().filter(|(_, state, _)| *state == WorkerState::Live).map(|(row, _, _)| *row)
    }
}

/// What the pass files under one instance ID: where its group is, when it has an
/// active row, and its historical rows.
#[derive(Default)]
struct Filed<'rows> {
    group: Option<usize>,
    historical: Vec<&'rows WorkerRow>,
}

/// Takes the snapshot.
pub fn snapshot<'rows>(input: SnapshotInput<'rows, '_>) -> FleetSnapshot<'rows> {
    // Stores return rows in identity order. The pass takes them as given and checks the
    // order as it first reads each identity (checking it beforehand read every identity
    // twice); rows out of order, or sharing an identity (ordered then by content), are
    // sorted and the pass taken again.
    let ledger = LedgerIndex::new(input.ledger);
    if let Some(snapshot) = take(input, &ledger, input.rows.iter(), true) {
        return snapshot;
    }
    let ordered = ordered(input.rows);
    take(input, &ledger, ordered.iter().copied(), false)
        .unwrap_or_else(|| unreachable!("only a checked order is refused"))
}

/// The snapshot of `rows`, which are in [`ordered`] order; or with `check_order`, `None`
/// as soon as a row does not follow the one before it in strictly increasing identity
/// order.
fn take<'rows>(
    input: SnapshotInput<'rows, '_>,
    ledger: &LedgerIndex<'_>,
    rows: impl ExactSizeIterator<Item = &'rows WorkerRow>,
    check_order: bool,
) -> Option<FleetSnapshot<'rows>> {
    let expected_revision = input
        .manifest
        .and_then(|m| m.code_revision.as_deref())
        .or(input.policy.expected_code_revision.as_deref());

    // One pass over the rows while each is in cache: its view, its state, its own
    // findings, its instance's group, its reuse keys and its share of the token. Later
    // steps read only what this pass gathered, and the rows of the few findings.
    // Rows are ordered by identity, as the probe results are: one merged walk finds each
    // row's verdict without a tree lookup per row.
    let mut probes = input.probes.iter().peekable();
    let mut views = Vec::with_capacity(rows.len());
    let mut findings = Vec::new();
    // Sized for launches of five: growing these tables row by row copied them whole
    // each time they doubled.
    let launches = rows.len() / Namespace::ALL.len() + 1;
    // About the length of a minted instance ID, and of the five launch values.
    let mut instances = KeyTable::with_capacity(launches, 48);
    let mut values = Arena::with_capacity(launches * 128);
    let mut filed: Vec<Filed<'rows>> = Vec::with_capacity(launches);
    // Identities begin with the namespace, and minted ones then with a time: past the
    // first namespace's rows, a row's instance is most often the one numbered after the
    // instance of the namespace's previous row. The guess is checked against the key.
    let mut next_instance = [0usize; Namespace::ALL.len()];
    let mut groups: Vec<Group<'rows>> = Vec::with_capacity(launches);
    let mut reuse = ReuseKeys::with_capacity(rows.len());
    let heartbeats = HeartbeatJudge::at(input.now);
    let mut token = Token::new(input.now);
    let mut previous: Option<&WorkerIdentity> = None;
    for row in rows {
        if check_order {
            if previous.is_some_and(|p| *p >= row.worker_identity) {
                return None;
            }
            previous = Some(&row.worker_identity);
        }
        while probes.next_if(|(id, _)| **id < row.worker_identity).is_some() {}
        let liveness = probes.peek().filter(|(id, _)| **id == row.worker_identity).map(|(_, v)| **v);
        let (expires_at, state) = judge(row, liveness, &heartbeats);
        let view = WorkerView { row, state, expires_at, liveness };
        token.row(row);
        let key = view.client_instance_id();
        let guess = &mut next_instance[row.namespace as usize];
        let (instance, new) = instances.number_guessing(key, *guess);
        *guess = instance + 1;
        if new {
            filed.push(Filed::default());
        }
        let filed = &mut filed[instance];
        if view.state == WorkerState::Historical {
            filed.historical.push(row);
        } else {
            let at = *filed.group.get_or_insert_with(|| {
                let ledger_host = key.and_then(|k| ledger.host(k)).map(|h| h.as_str());
                groups.push(Group::new(key, instance, ledger, ledger_host, &mut values));
                groups.len() - 1
            });
            let group = &mut groups[at];
            group.push(row, view.state, &mut values);
            row_findings(row, &view, group, input.policy, expected_revision, &mut findings);
            reuse.push(row, instance);
        }
        views.push(view);
    }

    // Instances in ID order: their historical findings, and their groups (found in about
    // that order when instance IDs and worker identities both begin with a time).
    let mut rank = vec![0; filed.len()];
    for (place, at) in instances.in_key_order().into_iter().enumerate() {
        rank[at] = place;
        if !filed[at].historical.is_empty() {
            findings.push(historical_finding(instances.key(at), &filed[at].historical));
        }
    }
    drop(filed);
    groups.sort_unstable_by_key(|g| rank[g.instance]);
    let groups = Groups(groups);
    for group in &groups.0 {
        instance_findings(group, ledger, &mut findings);
    }
    reuse.report(&mut findings);
    if let Some(manifest) = input.manifest {
        manifest_findings(manifest, &groups, &mut findings);
    }
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));

    let instances = instance_views(&groups, input.manifest, &findings);
    let mut counts = Counts {
        total_rows: views.len(),
        instance_count: instances.len(),
        finding_count: findings.len(),
        active_blocker_count: findings.iter().filter(|f| f.active_blocker).count(),
        ..Counts::default()
    };
    for view in &views {
        match view.state {
            WorkerState::Live => counts.live_worker_count += 1,
            WorkerState::Stale => counts.stale_worker_count += 1,
            WorkerState::Historical => counts.historical_row_count += 1,
        }
    }
    counts.active_worker_count = counts.live_worker_count + counts.stale_worker_count;
    let token = token.finish();
    Some(FleetSnapshot {
        snapshot_at: input.now,
        consistency_token: token.clone(),
        registry_revision: token,
        live_fleet_safe: counts.active_blocker_count == 0,
        manifest_supplied: input.manifest.is_some(),
        counts,
        instances,
        workers: views,
        findings,
    })
}

fn row_findings(
    row: &WorkerRow,
    view: &WorkerView<'_>,
    group: &Group<'_>,
    policy: &Policy,
    expected_revision: Option<&str>,
    out: &mut Vec<Finding>,
) {
    let instance = row.client_instance_id.as_deref();
    let me = std::iter::once(&row.worker_identity);
    let base = |code, detail: String| {
        Finding::new(code, detail).instance(instance).namespace(row.namespace).workers(me.clone())
    };

    if view.state == WorkerState::Stale {
        out.push(
            base(
                FindingCode::StaleWorker,
                format!("{} is marked active but nothing vouches for it", row.worker_identity),
            )
            .evidence("last_heartbeat_at", &row.last_heartbeat_at)
            .evidence("heartbeat_ttl_s", row.heartbeat_ttl_s)
            .evidence("expires_at", view.expires_at)
            .evidence("ownership_state", row.ownership_state)
            .evidence("liveness", view.liveness),
        );
    }
    match row.ownership_state {
        Some(OwnershipState::Orphaned) => out.push(base(
            FindingCode::OrphanedWorker,
            format!("{} is active but its ownership is orphaned", row.worker_identity),
        )),
        Some(OwnershipState::Unowned) => out.push(base(
            FindingCode::UnownedWorker,
            format!("{} is active but no process owns it", row.worker_identity),
        )),
        _ => {}
    }

    let mut missing: Vec<&str> = Vec::new();
    for (field, present) in [
        ("generation_id", row.generation_id.is_some()),
        ("host_id", row.host_id.is_some()),
        ("boot_id", row.boot_id.is_some()),
        ("pid", row.pid.is_some()),
        ("process_start_time", row.process_start_time.is_some()),
    ] {
        if !present {
            missing.push(field);
        }
    }
    let claim_kind = match &group.claim {
        InstanceClaim::Missing => Some("missing"),
        InstanceClaim::Legacy(_) => Some("legacy_placeholder"),
        InstanceClaim::Malformed(_) => Some("malformed"),
        InstanceClaim::WellFormed(_) => None,
    };
    if claim_kind.is_some() || !missing.is_empty() {
        out.push(
            base(
                FindingCode::LegacyIncompleteIdentity,
                format!("{} lacks trusted instance or process evidence", row.worker_identity),
            )
            .evidence("instance_claim", claim_kind.unwrap_or("well_formed"))
            .evidence("missing_fields", &missing),
        );
    }
    if let InstanceClaim::WellFormed(id) = &group.claim {
        if group.trust == TrustVerdict::Unminted {
            out.push(
                base(
                    FindingCode::UnmintedInstanceId,
                    format!("{id} is well-formed but the launcher never minted it"),
                )
                .evidence("trust", TrustVerdict::Unminted),
            );
        }
        if row.client_type.as_ref() != Some(id.client_type()) {
            out.push(
                base(
                    FindingCode::UnknownClient,
                    format!("{} reports a client type its instance ID contradicts", row.worker_identity),
                )
                .evidence("client_type", &row.client_type)
                .evidence("instance_client_type", id.client_type()),
            );
        }
    } else if row.client_type.is_none() {
        out.push(
            base(FindingCode::UnknownClient, format!("{} reports no client type", row.worker_identity))
                .evidence("client_type", &row.client_type),
        );
    }
    if let Some(canonical) = &policy.canonical_repository
        && row.repository.as_ref() != Some(canonical)
    {
        out.push(
            base(
                FindingCode::ForeignRepository,
                format!("{} is bound to another repository", row.worker_identity),
            )
            .evidence("repository", &row.repository)
            .evidence("canonical_repository", canonical),
        );
    }
    if let Some(expected) = expected_revision
        && row.code_revision.as_deref() != Some(expected)
    {
        out.push(
            base(FindingCode::OldRevision, format!("{} runs another code revision", row.worker_identity))
                .evidence("code_revision", &row.code_revision)
                .evidence("expected_code_revision", expected),
        );
    }
}

/// The finding over one instance's released, superseded and retired rows.
fn historical_finding(instance: Option<&str>, rows: &[&WorkerRow]) -> Finding {
    // How many rows of each status, by name: counted in a small list (one instance has
    // few rows and fewer statuses), then written into the JSON map.
    let mut counts: Vec<(&str, usize)> = Vec::with_capacity(1);
    for row in rows {
        let status = row.status.as_str();
        match counts.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += 1,
            None => counts.push((status, 1)),
        }
    }
    // In name order, also where serde_json keeps maps in insertion order.
    counts.sort_unstable();
    let mut statuses = serde_json::Map::new();
    for (status, n) in counts {
        statuses.insert(status.to_owned(), n.into());
    }
    Finding::new(FindingCode::HistoricalDead, format!("{} released, superseded or retired rows", rows.len()))
        .instance(instance)
        .workers(rows.iter().map(|r| &r.worker_identity))
        .evidence_value("statuses", statuses.into())
}

/// The groups, ordered by instance ID.
struct Groups<'rows>(Vec<Group<'rows>>);

impl<'rows> Groups<'rows> {
    fn get(&self, key: Option<&str>) -> Option<&Group<'rows>> {
        let at = self.0.binary_search_by(|g| g.key.cmp(&key)).ok()?;
        Some(&self.0[at])
    }
}

fn instance_findings(group: &Group<'_>, ledger: &LedgerIndex<'_>, out: &mut Vec<Finding>) {
    // Most launches have one live worker per namespace and agree on who launched them:
    // the pass that gathered the group settled that without building anything here.
    if !group.duplicate_namespace && !group.launch_disagrees {
        return;
    }
    let instance = group.key;
    let live: Vec<&WorkerRow> = group.live().collect();
    let mut by_namespace: BTreeMap<Namespace, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live {
        by_namespace.entry(row.namespace).or_default().push(row);
    }
    for (ns, rows) in by_namespace.iter().filter(|(_, rows)| rows.len() > 1) {
        out.push(
            Finding::new(
                FindingCode::DuplicateNamespaceWorker,
                format!("{} live {ns} workers claim one instance", rows.len()),
            )
            .instance(instance)
            .namespace(*ns)
            .workers(rows.iter().map(|r| &r.worker_identity))
            .evidence("pids", rows.iter().map(|r| r.pid).collect::<Vec<_>>()),
        );
    }

    // Workers of one launch share who launched them; disagreement is two launches on one
    // ID. A field conflicts when two live rows (or a row and the ledger's host) hold
    // different values; rows without the field do not vote.
    let Some(id) = instance else { return };
    if !group.launch_disagrees {
        return;
    }
    let mut conflicts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for row in &live {
        for (field, value) in launch_fields(row) {
            if let Some(value) = value {
                conflicts.entry(field).or_default().insert(value);
            }
        }
    }
    if let Some(host) = ledger.host(id)
        && live.iter().any(|r| r.host_id.as_ref().is_some_and(|h| h != host))
    {
        conflicts.entry("host_id").or_default().insert(host.as_str());
    }
    conflicts.retain(|_, values| values.len() > 1);
    if !conflicts.is_empty() {
        out.push(
            Finding::new(
                FindingCode::ClientInstanceCollision,
                format!(
                    "live workers of {id} disagree on {}",
                    conflicts.keys().copied().collect::<Vec<_>>().join(", ")
                ),
            )
            .instance(Some(id))
            .workers(live.iter().map(|r| &r.worker_identity))
            .evidence("conflicting", conflicts),
        );
    }
}

/// The place of the host among [`launch_fields`].
const HOST: usize = 3;

/// The fields every worker of one launch shares, by name.
fn launch_fields(row: &WorkerRow) -> [(&'static str, Option<&str>); 5] {
    [
        ("client_type", row.client_type.as_ref().map(|v| v.as_str())),
        ("session_id", row.session_id.as_ref().map(|v| v.as_str())),
        ("fleet_run_id", row.fleet_run_id.as_ref().map(|v| v.as_str())),
        ("host_id", row.host_id.as_ref().map(|v| v.as_str())),
        ("boot_id", row.boot_id.as_ref().map(|v| v.as_str())),
    ]
}

// The keys under which two active rows are one reuse finding (the worker identity is
// the seventh: rows are ordered by it, so rows that share one are neighbours).
fn session_key(r: &WorkerRow) -> Option<&str> {
    r.session_id.as_ref().map(|s| s.as_str())
}

fn generation_key(r: &WorkerRow) -> Option<&str> {
    r.generation_id.as_ref().map(|g| g.as_str())
}

fn process_key(r: &WorkerRow) -> Option<(&str, &str, fleet_identity::Pid, fleet_identity::ProcessStartTime)> {
    Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?, r.process_start_time?))
}

fn pid_key(r: &WorkerRow) -> Option<(&str, &str, fleet_identity::Pid)> {
    Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?))
}

fn slot_key(r: &WorkerRow) -> Option<(&str, Namespace, u64)> {
    Some((r.client_instance_id.as_deref()?, r.namespace, r.fencing_epoch?))
}

fn token_key(r: &WorkerRow) -> Option<&str> {
    r.token_fingerprint.as_deref()
}

/// The active rows in identity order, and each reuse key of each row hashed while the
/// row was read: a key's top 32 hash bits above the row's number among `active`.
struct ReuseKeys<'rows> {
    active: Vec<&'rows WorkerRow>,
    /// The number of each active row's instance ID (see [`KeyTable`]): comparing these
    /// tells rows of two instances apart without reading their IDs again.
    instances: Vec<usize>,
    /// Two neighbours among `active` share an identity.
    identity_shared: bool,
    /// session, generation, process, pid, slot, token.
    hashed: [Vec<u64>; 6],
}

impl<'rows> ReuseKeys<'rows> {
    fn with_capacity(rows: usize) -> Self {
        Self {
            active: Vec::with_capacity(rows),
            instances: Vec::with_capacity(rows),
            identity_shared: false,
            hashed: std::array::from_fn(|_| Vec::with_capacity(rows)),
        }
    }

    fn push(&mut self, row: &'rows WorkerRow, instance: usize) {
        fn pack(key: Option<impl std::hash::Hash>, at: u64) -> Option<u64> {
            use std::hash::BuildHasher;
            key.map(|k| (FxBuildHasher.hash_one(k) & !u64::from(u32::MAX)) | at)
        }
        // A row number past 32 bits is cut short here; `report_shared` checks every row
        // by its key then, and the numbers are not used.
        let at = u64::from(u32::try_from(self.active.len()).unwrap_or(u32::MAX));
        self.identity_shared |=
            self.active.last().is_some_and(|last| last.worker_identity == row.worker_identity);
        self.active.push(row);
        self.instances.push(instance);
        let keys = [
            pack(session_key(row), at),
            pack(generation_key(row), at),
            pack(process_key(row), at),
            pack(pid_key(row), at),
            pack(slot_key(row), at),
            pack(token_key(row), at),
        ];
        for (list, key) in self.hashed.iter_mut().zip(keys) {
            list.extend(key);
        }
    }

    fn report(self, out: &mut Vec<Finding>) {
        // Rows are compared by their numbers among `active`. Any two rows under one key
        // are a finding, whatever else they hold.
        let always = |a: usize, b: usize| a != b;
        let active = self.active.as_slice();
        let instances = self.instances.as_slice();
        // Only active rows are compared: history never makes a live fleet unsafe.
        if self.identity_shared {
            let runs = active.chunk_by(|a, b| a.worker_identity == b.worker_identity);
            for run in runs.filter(|r| r.len() > 1) {
                let shared = run[0].worker_identity.as_str();
                report_group(FindingCode::ReusedWorkerIdentity, "worker identity", shared, run, out);
            }
        }
        let [session, generation, process, pid, slot, token] = self.hashed;
        report_shared(
            active,
            session,
            session_key,
            |a, b| instances[a] != instances[b],
            FindingCode::ReusedSessionIdentity,
            "session across instances",
            out,
        );
        let generation_code = FindingCode::ReusedGenerationIdentity;
        report_shared(active, generation, generation_key, always, generation_code, "generation", out);
        report_shared(
            active,
            process,
            process_key,
            always,
            FindingCode::ReusedProcessIdentity,
            "process",
            out,
        );
        report_shared(
            active,
            pid,
            pid_key,
            |a, b| active[a].process_start_time != active[b].process_start_time,
            FindingCode::ReusedPid,
            "pid number with different start times",
            out,
        );
        let fencing = FindingCode::ReusedFencingIdentity;
        report_shared(active, slot, slot_key, always, fencing, "fencing epoch in one slot", out);
        report_shared(active, token, token_key, always, fencing, "worker token", out);
    }
}

/// Groups `rows` by `key` and reports each group with two rows that `differ` (asked of
/// their places in `rows`).
///
/// `hashed` holds each keyed row's key hash and number (see [`ReuseKeys`]). Of those
/// whose hash may repeat ([`sharing_candidates`]), sorted, runs of equal hashes in which
/// a row differs from the first are marked; only marked rows
/// are then grouped by the keys themselves, so a hash collision can never merge two
/// groups, and a fleet without reuse pays one sort. Equality is transitive, so "some row
/// differs from the first" is "two rows differ".
fn report_shared<'rows, K: Ord + Serialize>(
    rows: &[&'rows WorkerRow],
    hashed: Vec<u64>,
    key: impl Fn(&'rows WorkerRow) -> Option<K>,
    differ: impl Fn(usize, usize) -> bool,
    code: FindingCode,
    what: &str,
    out: &mut Vec<Finding>,
) {
    let marked: Vec<usize> = if u32::try_from(rows.len()).is_ok() {
        let hashed = sharing_candidates(hashed);
        let at = |packed: u64| usize::try_from(packed & u64::from(u32::MAX)).unwrap_or(usize::MAX);
        let mut marked = Vec::new();
        for run in hashed.chunk_by(|a, b| a >> 32 == b >> 32).filter(|run| run.len() > 1) {
            let first = at(run[0]);
            if run.iter().any(|&h| differ(first, at(h))) {
                marked.extend(run.iter().map(|&h| at(h)));
            }
        }
        marked.sort_unstable();
        marked
    } else {
        // Row numbers did not fit beside the hashes: every row is checked by its key.
        (0..rows.len()).collect()
    };
    if marked.is_empty() {
        return;
    }
    let mut run: Vec<(K, usize)> = marked.into_iter().filter_map(|i| Some((key(rows[i])?, i))).collect();
    run.sort_by(|a, b| a.0.cmp(&b.0));
    for group in run.chunk_by(|a, b| a.0 == b.0) {
        let first = group[0].1;
        if group.iter().any(|&(_, i)| differ(first, i)) {
            let rows: Vec<&WorkerRow> = group.iter().map(|&(_, i)| rows[i]).collect();
            report_group(code, what, &group[0].0, &rows, out);
        }
    }
}

/// The packed reuse entries (see [`ReuseKeys`]) whose hash another entry may share, in
/// hash order: every entry that shares its hash, and perhaps a few that do not.
///
/// Most keys (generations, processes, tokens) are unique in a healthy fleet, and
/// sorting them all only to find no neighbours cost more than anything else the reuse
/// checks do. One pass marks, a bit per hash prefix, the prefixes seen twice (a table of
/// about sixteen bits per entry, so few unique prefixes collide); only entries under
/// such a prefix are kept and sorted.
fn sharing_candidates(mut entries: Vec<u64>) -> Vec<u64> {
    if entries.len() < 4096 {
        entries.sort_unstable();
        return entries;
    }
    // 2^bits prefixes for n entries: bits = log2(n) + 4, so about 16 prefixes an entry,
    // up to two tables of 8 MiB (past four million entries, prefixes collide more).
    let bits = (usize::BITS - entries.len().leading_zeros() + 4).min(26);
    let prefix = |entry: u64| (entry >> (64 - bits)) as usize;
    let words = (1usize << bits) / 64;
    let (mut seen, mut again) = (vec![0u64; words], vec![0u64; words]);
    for &entry in &entries {
        let (word, bit) = (prefix(entry) / 64, 1u64 << (prefix(entry) % 64));
        again[word] |= seen[word] & bit;
        seen[word] |= bit;
    }
    entries.retain(|&entry| again[prefix(entry) / 64] & (1u64 << (prefix(entry) % 64)) != 0);
    sort_by_hash(&mut entries);
    entries
}

/// Orders packed reuse entries (see [`ReuseKeys`]) so that equal hashes are neighbours:
/// a byte of the hash at a time, least significant first (four counting passes, which
/// for a large fleet cost a fraction of a comparison sort); a small list is simply
/// sorted.
fn sort_by_hash(entries: &mut Vec<u64>) {
    if entries.len() < 4096 {
        entries.sort_unstable();
        return;
    }
    let mut scratch = vec![0u64; entries.len()];
    for shift in [32, 40, 48, 56] {
        let digit = |entry: u64| usize::from((entry >> shift) as u8);
        // Where each digit's entries start, after a count of each.
        let mut starts = [0usize; 256];
        for &entry in entries.iter() {
            starts[digit(entry)] += 1;
        }
        let mut total = 0;
        for start in &mut starts {
            (*start, total) = (total, total + *start);
        }
        for &entry in entries.iter() {
            let at = &mut starts[digit(entry)];
            scratch[*at] = entry;
            *at += 1;
        }
        std::mem::swap(entries, &mut scratch);
    }
}

/// The finding for `rows`, which share the key `shared`.
fn report_group(
    code: FindingCode,
    what: &str,
    shared: impl Serialize,
    rows: &[&WorkerRow],
    out: &mut Vec<Finding>,
) {
    let instances: BTreeSet<Option<&str>> = rows.iter().map(|r| r.client_instance_id.as_deref()).collect();
    let instance = if instances.len() == 1 { instances.into_iter().next().flatten() } else { None };
    out.push(
        Finding::new(code, format!("{} active rows share one {what}", rows.len()))
            .instance(instance)
            .workers(rows.iter().map(|r| &r.worker_identity))
            .evidence("shared", shared),
    );
}

fn manifest_findings(manifest: &Manifest, groups: &Groups<'_>, out: &mut Vec<Finding>) {
    let listed: FxHashSet<&str> = manifest.instances.iter().map(|i| i.client_instance_id.as_str()).collect();
    for expected in &manifest.instances {
        let id = expected.client_instance_id.as_str();
        let live: BTreeSet<Namespace> =
            groups.get(Some(id)).map(|g| g.live().map(|r| r.namespace).collect()).unwrap_or_default();
        if live.is_empty() {
            out.push(
                Finding::new(FindingCode::MissingExpected, format!("{id} is on the manifest but not live"))
                    .instance(Some(id))
                    .evidence("expected_namespaces", &expected.namespaces),
            );
            continue;
        }
        for ns in expected.namespaces.iter().filter(|ns| !live.contains(ns)) {
            out.push(
                Finding::new(FindingCode::MissingExpected, format!("{id} has no live {ns} worker"))
                    .instance(Some(id))
                    .namespace(*ns),
            );
        }
    }
    for group in &groups.0 {
        let live: Vec<&WorkerRow> = group.live().collect();
        if !live.is_empty() && !group.key.is_some_and(|k| listed.contains(k)) {
            out.push(
                Finding::new(FindingCode::Unmanifested, "a live instance is not on the manifest")
                    .instance(group.key)
                    .workers(live.iter().map(|r| &r.worker_identity)),
            );
        }
    }
}

fn instance_views<'rows>(
    groups: &Groups<'rows>,
    manifest: Option<&Manifest>,
    findings: &[Finding],
) -> Vec<InstanceView<'rows>> {
    let mut blockers: FxHashMap<Option<&str>, BTreeSet<FindingCode>> = FxHashMap::default();
    for f in findings.iter().filter(|f| f.active_blocker) {
        blockers.entry(f.client_instance_id.as_deref()).or_default().insert(f.code);
    }
    // The first manifest entry for each ID, as a linear search would find it.
    let mut listed: FxHashMap<&str, &crate::manifest::ManifestInstance> = FxHashMap::default();
    for entry in manifest.map(|m| m.instances.as_slice()).unwrap_or_default() {
        listed.entry(entry.client_instance_id.as_str()).or_insert(entry);
    }
    groups
        .0
        .iter()
        .map(|group| {
            let entry = group.key.and_then(|k| listed.get(k));
            let expected: &[Namespace] = entry.map_or(&Namespace::ALL, |i| &i.namespaces);
            let of = |wanted: WorkerState| {
                group
                    .members
                    .iter()
                    .filter(move |(_, state, _)| *state == wanted)
                    .map(|(row, _, ns)| (*ns, &row.worker_identity))
            };
            let namespaces = NamespaceWorkers::new(of(WorkerState::Live));
            let stale_workers = of(WorkerState::Stale).map(|(_, id)| id).collect();
            InstanceView {
                client_instance_id: group.key,
                client_type: group.client_type,
                trust: group.trust,
                manifested: manifest.map(|_| entry.is_some()),
                missing_namespaces: expected
                    .iter()
                    .copied()
                    .filter(|ns| namespaces.get(*ns).is_empty())
                    .collect(),
                namespaces,
                stale_workers,
                blockers: blockers.get(&group.key).map(|b| b.iter().copied().collect()).unwrap_or_default(),
            }
        })
        .collect()
}

/// The consistency token, fed one row at a time. The fields go through one buffer,
/// hashed a block at a time: the same bytes as hashing each field alone, without a
/// hasher call per field.
struct Token {
    hasher: blake3::Hasher,
    buf: Vec<u8>,
}

impl Token {
    const BLOCK: usize = 64 * 1024;

    fn new(now: Timestamp) -> Self {
        let mut buf = Vec::with_capacity(Self::BLOCK + 1024);
        buf.extend_from_slice(now.to_string().as_bytes());
        Self { hasher: blake3::Hasher::new(), buf }
    }

    /// A length prefix keeps field boundaries unambiguous; absent differs from empty.
    fn field(&mut self, value: Option<&[u8]>) {
        match value {
            Some(v) => {
                self.buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
                self.buf.extend_from_slice(v);
            }
            None => self.buf.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }

    fn row(&mut self, row: &WorkerRow) {
        self.field(Some(row.worker_identity.as_str().as_bytes()));
        self.field(row.client_instance_id.as_deref().map(str::as_bytes));
        self.field(Some(row.status.as_str().as_bytes()));
        self.field(row.last_heartbeat_at.as_deref().map(str::as_bytes));
        // The epoch in decimal, written from the right.
        let mut digits = [0u8; 20];
        let epoch = row.fencing_epoch.map(|mut e| {
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (e % 10) as u8;
                e /= 10;
                if e == 0 {
                    break at;
                }
            }
        });
        self.field(epoch.map(|at| &digits[at..]));
        self.field(row.generation_id.as_ref().map(|g| g.as_str().as_bytes()));
        if self.buf.len() >= Self::BLOCK {
            self.hasher.update(&self.buf);
            self.buf.clear();
        }
    }

    fn finish(mut self) -> String {
        self.hasher.update(&self.buf);
        format!("b3:{}", &self.hasher.finalize().to_hex().as_str()[..32])
    }
}

/// The rows ordered by identity, then by content for rows that share an identity, so
/// that every later step is independent of input order.
fn ordered(rows: &[WorkerRow]) -> Vec<&WorkerRow> {
    let mut out = fleet_model::rows_by_identity(rows);
    // Only rows that share an identity (a reuse finding) pay for this.
    for run in out.chunk_by_mut(|a, b| a.worker_identity == b.worker_identity).filter(|run| run.len() > 1) {
        run.sort_by_cached_key(|row| serde_json::to_string(row).unwrap_or_default());
    }
    out
}

/// The launcher's ledger: its IDs numbered in a [`KeyTable`], so that looking one up
/// compares copies kept together rather than the records' own strings, and the host
/// each ID's record names.
struct LedgerIndex<'a> {
    ids: KeyTable,
    hosts: Vec<Option<&'a fleet_identity::HostId>>,
}

impl<'a> LedgerIndex<'a> {
    fn new(ledger: &'a [InstanceRecord]) -> Self {
        let mut ids = KeyTable::with_capacity(ledger.len(), 48);
        let mut hosts = Vec::with_capacity(ledger.len());
        for record in ledger {
            let (at, new) = ids.number(Some(record.client_instance_id.as_str()));
            if new {
                hosts.push(None);
            }
            // An ID recorded twice takes the host of its last record that names one.
            if let Some(host) = &record.host_id {
                hosts[at] = Some(host);
            }
        }
        Self { ids, hosts }
    }

    /// The host the ledger records for the instance ID spelled `id`.
    fn host(&self, id: &str) -> Option<&'a fleet_identity::HostId> {
        self.ids.find(Some(id)).and_then(|at| self.hosts[at])
    }
}

impl Ledger for LedgerIndex<'_> {
    fn holds(&self, id: &ClientInstanceId) -> bool {
        // IDs are equal exactly when their text is: the rest is parsed from it.
        self.ids.find(Some(id.as_str())).is_some()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use fleet_identity::Namespace;

    use std::collections::{HashMap, HashSet};

    use super::{sharing_candidates, sort_by_hash};

    /// `NamespaceWorkers` numbers namespaces by their place in `Namespace::ALL` and
    /// writes them in that order, which must be the order a map of them would have.
    #[test]
    fn namespaces_are_numbered_and_listed_in_their_own_order() {
        for (at, ns) in Namespace::ALL.into_iter().enumerate() {
            assert_eq!(ns as usize, at, "{ns}");
        }
        assert!(Namespace::ALL.is_sorted());
    }

    proptest! {
        /// Large lists take the counting passes, small ones the comparison sort; both
        /// leave the same entries, equal hashes together and in hash order.
        #[test]
        fn sorting_by_hash_groups_equal_hashes(
            hashes in prop::collection::vec(0u32..64, 0..9000),
            spread in any::<u32>(),
        ) {
            let entries: Vec<u64> = hashes
                .iter()
                .zip(0u64..)
                .map(|(h, at)| (u64::from(h.wrapping_mul(spread | 1)) << 32) | at)
                .collect();
            let mut sorted = entries.clone();
            sort_by_hash(&mut sorted);
            prop_assert!(sorted.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32));
            let (mut a, mut b) = (entries, sorted);
            a.sort_unstable();
            b.sort_unstable();
            prop_assert_eq!(a, b);
        }

        /// Every entry whose hash another entry shares is a candidate, and candidates
        /// come in hash order; large lists (past the bit table's threshold) included.
        #[test]
        fn every_entry_sharing_its_hash_is_a_candidate(
            hashes in prop::collection::vec(any::<u32>(), 0..9000),
            repeats in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>()), 0..20),
        ) {
            let mut hashes = hashes;
            // Random hashes seldom repeat: copy some over others.
            for (from, to) in repeats {
                if !hashes.is_empty() {
                    let value = hashes[from.index(hashes.len())];
                    let at = to.index(hashes.len());
                    hashes[at] = value;
                }
            }
            let entries: Vec<u64> = hashes.iter().zip(0u64..).map(|(h, at)| (u64::from(*h) << 32) | at).collect();
            let candidates = sharing_candidates(entries.clone());
            prop_assert!(candidates.windows(2).all(|w| w[0] >> 32 <= w[1] >> 32));
            let mut count: HashMap<u32, usize> = HashMap::new();
            for h in &hashes {
                *count.entry(*h).or_default() += 1;
            }
            let candidates: HashSet<u64> = candidates.into_iter().collect();
            for (entry, h) in entries.iter().zip(&hashes) {
                prop_assert!(count[h] == 1 || candidates.contains(entry), "{entry:#x} shares its hash");
            }
        }
    }
}
