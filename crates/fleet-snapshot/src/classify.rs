//! Classification: rows, ledger, manifest, probe results and `now` in; the snapshot out.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{
    ClientInstanceId, InstanceClaim, Ledger, Namespace, Repository, Timestamp, TrustVerdict, WorkerIdentity,
    assess_instance_id,
};
use fleet_model::ProcessVerdict;
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};
use serde::Serialize;

use crate::findings::{Finding, FindingCode};
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

/// Everything the snapshot is computed from.
#[derive(Debug, Clone, Copy)]
pub struct SnapshotInput<'a> {
    /// Every registry row.
    pub rows: &'a [WorkerRow],
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

/// One row as the snapshot sees it: the row's own fields, its state, and the probe's
/// verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[allow(missing_docs)]
pub struct WorkerView {
    pub worker_identity: WorkerIdentity,
    pub client_instance_id: Option<String>,
    pub namespace: Namespace,
    pub state: WorkerState,
    pub status: WorkerStatus,
    pub ownership_state: Option<OwnershipState>,
    pub pid: Option<fleet_identity::Pid>,
    pub host_id: Option<fleet_identity::HostId>,
    pub generation_id: Option<fleet_identity::GenerationId>,
    pub last_heartbeat_at: Option<String>,
    pub expires_at: Option<Timestamp>,
    pub liveness: Option<ProcessVerdict>,
}

/// One instance: the active workers that claim its ID.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InstanceView {
    /// The ID as the rows spell it (`null` for workers without one).
    pub client_instance_id: Option<String>,
    /// The client type its workers report (the first, when they disagree).
    pub client_type: Option<String>,
    /// Whether the ID is trusted, and if not, why not.
    pub trust: TrustVerdict,
    /// On the manifest (`null` when no manifest was supplied).
    pub manifested: Option<bool>,
    /// The live workers of each namespace.
    pub namespaces: BTreeMap<Namespace, Vec<WorkerIdentity>>,
    /// Expected namespaces (the manifest's, else all five) with no live worker.
    pub missing_namespaces: Vec<Namespace>,
    /// Active workers of this instance that are stale.
    pub stale_workers: Vec<WorkerIdentity>,
    /// The active-blocker codes that concern this instance.
    pub blockers: Vec<FindingCode>,
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

/// The fleet health snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetSnapshot {
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
    pub instances: Vec<InstanceView>,
    /// Every row, by worker identity.
    pub workers: Vec<WorkerView>,
    /// Every finding, in report order.
    pub findings: Vec<Finding>,
}

impl FleetSnapshot {
    /// The findings of one code.
    pub fn findings_of(&self, code: FindingCode) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(move |f| f.code == code)
    }
}

/// Whether a row's heartbeat no longer vouches for it at `now`.
fn judge(
    row: &WorkerRow,
    beat: Option<Timestamp>,
    probe: Option<ProcessVerdict>,
    now: Timestamp,
) -> WorkerState {
    if row.status != WorkerStatus::Active {
        return WorkerState::Historical;
    }
    let expired = match (beat, row.heartbeat_ttl_s) {
        // The registry's TTL rule, on the heartbeat parsed once.
        (Some(beat), Some(ttl)) => fleet_model::heartbeat_lapsed(beat, ttl, now),
        // No parsable heartbeat or no TTL: nothing vouches for the row.
        _ => true,
    };
    let gone = matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused));
    if expired || gone || row.ownership_state == Some(OwnershipState::Stale) {
        WorkerState::Stale
    } else {
        WorkerState::Live
    }
}

/// Takes the snapshot.
pub fn snapshot(input: SnapshotInput<'_>) -> FleetSnapshot {
    let rows = ordered(input.rows);
    let ledger: LedgerIndex<'_> = input.ledger.iter().map(|i| &i.client_instance_id).collect();
    let ledger_hosts: FxHashMap<&str, &fleet_identity::HostId> = input
        .ledger
        .iter()
        .filter_map(|i| Some((i.client_instance_id.as_str(), i.host_id.as_ref()?)))
        .collect();

    // Rows are ordered by identity, as the probe results are: one merged walk finds each
    // row's verdict without a tree lookup per row.
    let mut probes = input.probes.iter().peekable();
    let views: Vec<WorkerView> = rows
        .iter()
        .map(|row| {
            while probes.next_if(|(id, _)| **id < row.worker_identity).is_some() {}
            let liveness = probes.peek().filter(|(id, _)| **id == row.worker_identity).map(|(_, v)| **v);
            let beat = row.heartbeat();
            let expires_at =
                beat.zip(row.heartbeat_ttl_s).map(|(b, ttl)| fleet_model::heartbeat_expiry(b, ttl));
            WorkerView {
                worker_identity: row.worker_identity.clone(),
                client_instance_id: row.client_instance_id.clone(),
                namespace: row.namespace,
                state: judge(row, beat, liveness, input.now),
                status: row.status,
                ownership_state: row.ownership_state,
                pid: row.pid,
                host_id: row.host_id.clone(),
                generation_id: row.generation_id.clone(),
                last_heartbeat_at: row.last_heartbeat_at.clone(),
                expires_at,
                liveness,
            }
        })
        .collect();

    let mut findings = Vec::new();
    let expected_revision = input
        .manifest
        .and_then(|m| m.code_revision.as_deref())
        .or(input.policy.expected_code_revision.as_deref());
    let pairs: Vec<(&WorkerRow, &WorkerView)> = rows.iter().copied().zip(&views).collect();
    // Each distinct instance ID is parsed once, however many workers claim it.
    let mut claims: FxHashMap<Option<&str>, InstanceClaim> = FxHashMap::default();
    for &(row, view) in &pairs {
        if view.state != WorkerState::Historical {
            let key = row.client_instance_id.as_deref();
            let claim = claims.entry(key).or_insert_with(|| InstanceClaim::read(key));
            row_findings(row, view, claim, &ledger, input.policy, expected_revision, &mut findings);
        }
    }
    historical_findings(&pairs, &mut findings);
    let groups = group_by_instance(&pairs);
    for (key, members) in groups.iter() {
        instance_findings(key, members, &ledger_hosts, &mut findings);
    }
    reuse_findings(&pairs, &mut findings);
    if let Some(manifest) = input.manifest {
        manifest_findings(manifest, &groups, &mut findings);
    }
    findings.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));

    let instances = instance_views(&groups, &ledger, input.manifest, &findings);
    let counts = Counts {
        total_rows: views.len(),
        active_worker_count: views.iter().filter(|v| v.state != WorkerState::Historical).count(),
        live_worker_count: views.iter().filter(|v| v.state == WorkerState::Live).count(),
        stale_worker_count: views.iter().filter(|v| v.state == WorkerState::Stale).count(),
        historical_row_count: views.iter().filter(|v| v.state == WorkerState::Historical).count(),
        instance_count: instances.len(),
        finding_count: findings.len(),
        active_blocker_count: findings.iter().filter(|f| f.active_blocker).count(),
    };
    let token = consistency_token(input.now, &rows);
    FleetSnapshot {
        snapshot_at: input.now,
        consistency_token: token.clone(),
        registry_revision: token,
        live_fleet_safe: counts.active_blocker_count == 0,
        manifest_supplied: input.manifest.is_some(),
        counts,
        instances,
        workers: views,
        findings,
    }
}

type Pair<'a> = (&'a WorkerRow, &'a WorkerView);

fn row_findings(
    row: &WorkerRow,
    view: &WorkerView,
    claim: &InstanceClaim,
    ledger: &LedgerIndex<'_>,
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
    let claim_kind = match claim {
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
    if let InstanceClaim::WellFormed(id) = claim {
        if !ledger.holds(id) {
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

fn historical_findings(pairs: &[Pair<'_>], out: &mut Vec<Finding>) {
    let mut by_instance: BTreeMap<Option<&str>, Vec<&WorkerRow>> = BTreeMap::new();
    for &(row, view) in pairs {
        if view.state == WorkerState::Historical {
            by_instance.entry(row.client_instance_id.as_deref()).or_default().push(row);
        }
    }
    for (instance, rows) in by_instance {
        let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
        for row in &rows {
            *statuses.entry(row.status.as_str()).or_default() += 1;
        }
        out.push(
            Finding::new(
                FindingCode::HistoricalDead,
                format!("{} released, superseded or retired rows", rows.len()),
            )
            .instance(instance)
            .workers(rows.iter().map(|r| &r.worker_identity))
            .evidence("statuses", statuses),
        );
    }
}

/// Active rows grouped by the instance ID they claim, ordered by ID.
struct Groups<'a>(Vec<(Option<&'a str>, Vec<Pair<'a>>)>);

impl<'a> Groups<'a> {
    fn get(&self, key: Option<&str>) -> Option<&[Pair<'a>]> {
        let at = self.0.binary_search_by(|(k, _)| (*k).cmp(&key)).ok()?;
        Some(&self.0[at].1)
    }

    fn iter(&self) -> impl Iterator<Item = (Option<&'a str>, &[Pair<'a>])> {
        self.0.iter().map(|(k, m)| (*k, m.as_slice()))
    }
}

/// Active rows grouped by the instance ID they claim.
fn group_by_instance<'a>(pairs: &[Pair<'a>]) -> Groups<'a> {
    let mut index: FxHashMap<Option<&'a str>, usize> = FxHashMap::default();
    let mut groups: Vec<(Option<&'a str>, Vec<Pair<'a>>)> = Vec::new();
    for &(row, view) in pairs {
        if view.state != WorkerState::Historical {
            let key = row.client_instance_id.as_deref();
            let at = *index.entry(key).or_insert_with(|| {
                groups.push((key, Vec::new()));
                groups.len() - 1
            });
            groups[at].1.push((row, view));
        }
    }
    groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    Groups(groups)
}

fn instance_findings(
    instance: Option<&str>,
    members: &[Pair<'_>],
    ledger_hosts: &FxHashMap<&str, &fleet_identity::HostId>,
    out: &mut Vec<Finding>,
) {
    let live: Vec<&WorkerRow> =
        members.iter().filter(|(_, v)| v.state == WorkerState::Live).map(|(r, _)| *r).collect();
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

    // Workers of one launch share who launched them; disagreement is two launches on one ID.
    let Some(id) = instance else { return };
    let fields = launch_fields;
    let ledger_host = ledger_hosts.get(id).map(|h| h.as_str());
    // A field conflicts when two live rows (or a row and the ledger's host) hold
    // different values; rows without the field do not vote. Most launches agree, and
    // are settled without building the sets.
    const HOST: usize = 3;
    let agreed = |i: usize| {
        let mut values = live.iter().filter_map(|r| fields(r)[i].1);
        // The ledger's host, when it records one, is the host every row must match.
        let first = if i == HOST { ledger_host.or_else(|| values.next()) } else { values.next() };
        first.is_none_or(|first| values.all(|v| v == first))
    };
    if (0..5).all(agreed) {
        return;
    }
    let mut conflicts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for row in &live {
        for (field, value) in fields(row) {
            if let Some(value) = value {
                conflicts.entry(field).or_default().insert(value);
            }
        }
    }
    if let Some(host) = ledger_hosts.get(id)
        && live.iter().any(|r| r.host_id.as_ref().is_some_and(|h| h != *host))
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

/// Groups `rows` by `key` and reports each group with two rows that `differ`.
///
/// A first pass sorts the rows by their key's 64-bit hash (no string copies, no ordering
/// of strings) and marks each run of equal hashes in which a row differs from the first;
/// only marked rows are then grouped by the keys themselves, so a hash collision can
/// never merge two groups, and a fleet without reuse pays one pass. Equality is
/// transitive, so "some row differs from the first" is "two rows differ".
fn report_shared<'a, K: Ord + std::hash::Hash + Serialize>(
    rows: &[&'a WorkerRow],
    key: impl Fn(&'a WorkerRow) -> Option<K>,
    differ: impl Fn(&WorkerRow, &WorkerRow) -> bool,
    code: FindingCode,
    what: &str,
    out: &mut Vec<Finding>,
) {
    use std::hash::BuildHasher;
    let mut hashed: Vec<(u64, usize)> = rows
        .iter()
        .enumerate()
        .filter_map(|(i, row)| key(row).map(|k| (FxBuildHasher.hash_one(&k), i)))
        .collect();
    hashed.sort_unstable();
    let mut marked: Vec<usize> = Vec::new();
    for run in hashed.chunk_by(|a, b| a.0 == b.0).filter(|run| run.len() > 1) {
        let first = rows[run[0].1];
        if run.iter().any(|&(_, i)| differ(first, rows[i])) {
            marked.extend(run.iter().map(|&(_, i)| i));
        }
    }
    if marked.is_empty() {
        return;
    }
    let mut run: Vec<(K, &WorkerRow)> =
        marked.into_iter().filter_map(|i| Some((key(rows[i])?, rows[i]))).collect();
    run.sort_by(|a, b| a.0.cmp(&b.0));
    for group in run.chunk_by(|a, b| a.0 == b.0) {
        let rows: Vec<&WorkerRow> = group.iter().map(|(_, r)| *r).collect();
        if rows.iter().any(|r| differ(rows[0], r)) {
            let instances: BTreeSet<Option<&str>> =
                rows.iter().map(|r| r.client_instance_id.as_deref()).collect();
            let instance = if instances.len() == 1 { instances.into_iter().next().flatten() } else { None };
            out.push(
                Finding::new(code, format!("{} active rows share one {what}", rows.len()))
                    .instance(instance)
                    .workers(rows.iter().map(|r| &r.worker_identity))
                    .evidence("shared", &group[0].0),
            );
        }
    }
}

fn reuse_findings(pairs: &[Pair<'_>], out: &mut Vec<Finding>) {
    let active: Vec<&WorkerRow> =
        pairs.iter().filter(|(_, v)| v.state != WorkerState::Historical).map(|(r, _)| *r).collect();
    let active = active.as_slice();
    // Any two rows under one key are a finding, whatever else they hold; `ptr::eq` tells
    // a row from itself.
    let always = |a: &WorkerRow, b: &WorkerRow| !std::ptr::eq(a, b);

    // Only active rows are compared: history never makes a live fleet unsafe.
    report_shared(
        active,
        |r| Some(r.worker_identity.as_str()),
        always,
        FindingCode::ReusedWorkerIdentity,
        "worker identity",
        out,
    );
    report_shared(
        active,
        |r| r.session_id.as_ref().map(|s| s.as_str()),
        |a, b| a.client_instance_id != b.client_instance_id,
        FindingCode::ReusedSessionIdentity,
        "session across instances",
        out,
    );
    report_shared(
        active,
        |r| r.generation_id.as_ref().map(|g| g.as_str()),
        always,
        FindingCode::ReusedGenerationIdentity,
        "generation",
        out,
    );
    report_shared(
        active,
        |r| Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?, r.process_start_time?)),
        always,
        FindingCode::ReusedProcessIdentity,
        "process",
        out,
    );
    report_shared(
        active,
        |r| Some((r.host_id.as_ref()?.as_str(), r.boot_id.as_ref()?.as_str(), r.pid?)),
        |a, b| a.process_start_time != b.process_start_time,
        FindingCode::ReusedPid,
        "pid number with different start times",
        out,
    );
    report_shared(
        active,
        |r| Some((r.client_instance_id.as_deref()?, r.namespace, r.fencing_epoch?)),
        always,
        FindingCode::ReusedFencingIdentity,
        "fencing epoch in one slot",
        out,
    );
    report_shared(
        active,
        |r| r.token_fingerprint.as_deref(),
        always,
        FindingCode::ReusedFencingIdentity,
        "worker token",
        out,
    );
}

fn manifest_findings(manifest: &Manifest, groups: &Groups<'_>, out: &mut Vec<Finding>) {
    let listed: FxHashSet<&str> = manifest.instances.iter().map(|i| i.client_instance_id.as_str()).collect();
    for expected in &manifest.instances {
        let id = expected.client_instance_id.as_str();
        let live: BTreeSet<Namespace> = groups
            .get(Some(id))
            .map(|m| {
                m.iter().filter(|(_, v)| v.state == WorkerState::Live).map(|(r, _)| r.namespace).collect()
            })
            .unwrap_or_default();
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
    for (key, members) in groups.iter() {
        let live: Vec<&WorkerRow> =
            members.iter().filter(|(_, v)| v.state == WorkerState::Live).map(|(r, _)| *r).collect();
        if !live.is_empty() && !key.is_some_and(|k| listed.contains(k)) {
            out.push(
                Finding::new(FindingCode::Unmanifested, "a live instance is not on the manifest")
                    .instance(key)
                    .workers(live.iter().map(|r| &r.worker_identity)),
            );
        }
    }
}

fn instance_views(
    groups: &Groups<'_>,
    ledger: &LedgerIndex<'_>,
    manifest: Option<&Manifest>,
    findings: &[Finding],
) -> Vec<InstanceView> {
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
        .iter()
        .map(|(key, members)| {
            let entry = key.and_then(|k| listed.get(k));
            let expected: &[Namespace] = entry.map_or(&Namespace::ALL, |i| &i.namespaces);
            let mut namespaces: BTreeMap<Namespace, Vec<WorkerIdentity>> = BTreeMap::new();
            let mut stale_workers = Vec::new();
            for (row, view) in members {
                match view.state {
                    WorkerState::Live => {
                        namespaces.entry(row.namespace).or_default().push(row.worker_identity.clone())
                    }
                    WorkerState::Stale => stale_workers.push(row.worker_identity.clone()),
                    WorkerState::Historical => {}
                }
            }
            InstanceView {
                client_instance_id: key.map(str::to_owned),
                client_type: members
                    .iter()
                    .find_map(|(r, _)| r.client_type.as_ref().map(ToString::to_string)),
                trust: assess_instance_id(key, ledger),
                manifested: manifest.map(|_| entry.is_some()),
                missing_namespaces: expected
                    .iter()
                    .copied()
                    .filter(|ns| !namespaces.contains_key(ns))
                    .collect(),
                namespaces,
                stale_workers,
                blockers: blockers.get(&key).map(|b| b.iter().copied().collect()).unwrap_or_default(),
            }
        })
        .collect()
}

fn consistency_token(now: Timestamp, rows: &[&WorkerRow]) -> String {
    use std::io::Write as _;
    // The fields go through one buffer, hashed a block at a time: the same bytes as
    // hashing each field alone, without a hasher call per field.
    const BLOCK: usize = 64 * 1024;
    let mut hasher = blake3::Hasher::new();
    let mut buf: Vec<u8> = Vec::with_capacity(BLOCK + 1024);
    buf.extend_from_slice(now.to_string().as_bytes());
    let field = |buf: &mut Vec<u8>, value: Option<&[u8]>| {
        // A length prefix keeps field boundaries unambiguous; absent differs from empty.
        match value {
            Some(v) => {
                buf.extend_from_slice(&(v.len() as u64).to_le_bytes());
                buf.extend_from_slice(v);
            }
            None => buf.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    };
    let mut epoch = Vec::with_capacity(20);
    for row in rows {
        field(&mut buf, Some(row.worker_identity.as_str().as_bytes()));
        field(&mut buf, row.client_instance_id.as_deref().map(str::as_bytes));
        field(&mut buf, Some(row.status.as_str().as_bytes()));
        field(&mut buf, row.last_heartbeat_at.as_deref().map(str::as_bytes));
        let epoch = row.fencing_epoch.map(|e| {
            epoch.clear();
            let _ = write!(epoch, "{e}");
            epoch.as_slice()
        });
        field(&mut buf, epoch);
        field(&mut buf, row.generation_id.as_ref().map(|g| g.as_str().as_bytes()));
        if buf.len() >= BLOCK {
            hasher.update(&buf);
            buf.clear();
        }
    }
    hasher.update(&buf);
    format!("b3:{}", &hasher.finalize().to_hex().as_str()[..32])
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

/// The ledger as a hash set of borrowed IDs.
type LedgerIndex<'a> = FxHashSet<&'a ClientInstanceId>;
