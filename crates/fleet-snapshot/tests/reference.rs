//! A reference classifier written straight from seed 000's rules and docs/SNAPSHOT.md's
//! table, with no hashing, packing, prefilter or radix sort: every key is grouped in a
//! `BTreeMap`. A property test holds the fast classifier to it on random fleets, small
//! ones and ones past the size (4,096 keyed rows) where the fast path's bit-table
//! prefilter and radix sort run, with keys drawn from small domains (many collisions) or
//! large ones (few); heartbeats lapsed, fresh, skewed a little or far into the future,
//! or unreadable; ownership orphaned, unowned or stale; instance IDs minted, unminted,
//! legacy, malformed or missing; evidence missing; foreign repositories and old
//! revisions; history; with and without a manifest.
//!
//! Both sides give the whole judgement of a snapshot: the verdict, every count, each
//! worker's state, heartbeat and expiry, each instance's view (client type, trust,
//! manifest entry, live workers by namespace, missing namespaces, stale workers,
//! blockers), every finding with its code, blocker flag, instance, namespace and
//! workers, and the consistency token (docs/SNAPSHOT.md's digest, hashed field by
//! field). What they do not compare is prose (a finding's `detail`) and the records a
//! finding quotes from its rows (`evidence`), whose shape the insta snapshots pin.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{ClientInstanceId, Namespace, Repository, Timestamp, TrustVerdict, WorkerIdentity};
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};
use fleet_snapshot::{FindingCode, Manifest, Policy, ProbeResults, SnapshotInput, WorkerState, snapshot};
use proptest::prelude::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

/// When the reference judges: every heartbeat below is placed around it.
fn now() -> Timestamp {
    at(110)
}

/// A finding: its code, whether it blocks, its instance and namespace, and its workers.
type Found = (FindingCode, bool, Option<String>, Option<Namespace>, Vec<WorkerIdentity>);

/// One instance's view.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Instance {
    id: Option<String>,
    client_type: Option<String>,
    trust: TrustVerdict,
    manifested: Option<bool>,
    live: Vec<(Namespace, Vec<WorkerIdentity>)>,
    missing: Vec<Namespace>,
    stale: Vec<WorkerIdentity>,
    blockers: Vec<FindingCode>,
}

/// A worker's judgement: its state, heartbeat and expiry.
type Worker = (WorkerIdentity, WorkerState, Option<Timestamp>, Option<Timestamp>);

/// The whole judgement of a snapshot (see the module's doc).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Judgement {
    consistency_token: String,
    live_fleet_safe: bool,
    /// total, active, live, stale, historical, instances, findings, active blockers.
    counts: [usize; 8],
    /// In identity order (rows sharing an identity: by content).
    workers: Vec<Worker>,
    /// In instance-ID order, rows without one first.
    instances: Vec<Instance>,
    /// Sorted.
    findings: Vec<Found>,
}

/// The fleet's judgement by the fast classifier.
fn fast(
    rows: &[WorkerRow],
    ledger: &[InstanceRecord],
    manifest: Option<&Manifest>,
    policy: &Policy,
) -> Judgement {
    let snap =
        snapshot(SnapshotInput { rows, ledger, manifest, probes: &ProbeResults::new(), policy, now: now() });
    let c = &snap.counts;
    let mut findings: Vec<Found> = snap
        .findings
        .iter()
        .map(|f| {
            (f.code, f.active_blocker, f.client_instance_id.clone(), f.namespace, f.worker_identities.clone())
        })
        .collect();
    assert!(
        findings.windows(2).all(|w| (w[0].0, &w[0].2, w[0].3, &w[0].4) <= (w[1].0, &w[1].2, w[1].3, &w[1].4))
    );
    findings.sort();
    assert_eq!(snap.registry_revision, snap.consistency_token);
    Judgement {
        consistency_token: snap.consistency_token.clone(),
        live_fleet_safe: snap.live_fleet_safe,
        counts: [
            c.total_rows,
            c.active_worker_count,
            c.live_worker_count,
            c.stale_worker_count,
            c.historical_row_count,
            c.instance_count,
            c.finding_count,
            c.active_blocker_count,
        ],
        workers: snap
            .workers
            .iter()
            .map(|w| (w.row.worker_identity.clone(), w.state, w.heartbeat, w.expires_at))
            .collect(),
        instances: snap
            .instances
            .iter()
            .map(|i| Instance {
                id: i.client_instance_id.map(str::to_owned),
                client_type: i.client_type.map(str::to_owned),
                trust: i.trust,
                manifested: i.manifested,
                live: i
                    .namespaces
                    .iter()
                    .map(|(ns, ids)| (ns, ids.iter().map(|id| (*id).clone()).collect()))
                    .collect(),
                missing: i.missing_namespaces.clone(),
                stale: i.stale_workers.iter().map(|id| (*id).clone()).collect(),
                blockers: i.blockers.clone(),
            })
            .collect(),
        findings,
    }
}

/// Whether an active row is live at [`now`]: a heartbeat that reads, within its TTL, not
/// from further ahead than the fleet's clock skew, and a row not marked stale (nothing
/// is probed here).
fn live(row: &WorkerRow) -> bool {
    let Some(beat) = row.last_heartbeat_at.as_deref().and_then(|b| Timestamp::parse(b).ok()) else {
        return false;
    };
    let Some(ttl) = row.heartbeat_ttl_s else { return false };
    let lapsed = now() > expiry(beat, ttl);
    let from_the_future = beat > now().saturating_add(fleet_model::MAX_CLOCK_SKEW);
    !lapsed && !from_the_future && row.ownership_state != Some(OwnershipState::Stale)
}

fn expiry(beat: Timestamp, ttl: u32) -> Timestamp {
    beat.saturating_add(time::Duration::seconds(i64::from(ttl)))
}

/// A row's state, heartbeat and expiry, the row live or not.
fn judge(row: &WorkerRow, live: bool) -> Worker {
    let beat = row.last_heartbeat_at.as_deref().and_then(|b| Timestamp::parse(b).ok());
    let expires = beat.zip(row.heartbeat_ttl_s).map(|(beat, ttl)| expiry(beat, ttl));
    let state = match (row.status, live) {
        (WorkerStatus::Active, true) => WorkerState::Live,
        (WorkerStatus::Active, false) => WorkerState::Stale,
        _ => WorkerState::Historical,
    };
    (row.worker_identity.clone(), state, beat, expires)
}

/// The launcher's ledger for a fleet: every well-formed instance ID of its rows whose
/// number is not a multiple of three (the others were never minted).
fn ledger(rows: &[WorkerRow]) -> Vec<InstanceRecord> {
    let ids: BTreeSet<ClientInstanceId> = rows
        .iter()
        .filter_map(|r| ClientInstanceId::parse(r.client_instance_id.as_deref()?).ok())
        .filter(|id| {
            u64::from_str_radix(id.as_str().rsplit('-').next().unwrap_or("0"), 16).unwrap_or(0) % 3 != 0
        })
        .collect();
    ids.into_iter()
        .map(|client_instance_id| InstanceRecord {
            client_instance_id,
            client_type: "codex".parse().unwrap(),
            fleet_run_id: None,
            minted_at: at(0),
            host_id: None,
        })
        .collect()
}

/// Every group of `rows` sharing a key in which `reused` holds, as a finding naming
/// the instance its rows share (none when they span several).
fn by<K: Ord>(
    rows: &[&WorkerRow],
    key: impl Fn(&WorkerRow) -> Option<K>,
    reused: impl Fn(&[&WorkerRow]) -> bool,
    code: FindingCode,
    found: &mut Vec<Found>,
) {
    let mut groups: BTreeMap<K, Vec<&WorkerRow>> = BTreeMap::new();
    for row in rows {
        if let Some(k) = key(row) {
            groups.entry(k).or_default().push(row);
        }
    }
    for group in groups.values().filter(|g| reused(g)) {
        let instances: BTreeSet<Option<&str>> =
            group.iter().map(|r| r.client_instance_id.as_deref()).collect();
        let instance = if instances.len() == 1 { instances.into_iter().next().flatten() } else { None };
        found.push((code, true, instance.map(str::to_owned), None, identities(group)));
    }
}

fn identities(rows: &[&WorkerRow]) -> Vec<WorkerIdentity> {
    let ids: BTreeSet<WorkerIdentity> = rows.iter().map(|r| r.worker_identity.clone()).collect();
    ids.into_iter().collect()
}

/// The rules of one active row alone (docs/SNAPSHOT.md's table, row by row).
fn row_rules(
    row: &WorkerRow,
    live: bool,
    minted: &BTreeSet<ClientInstanceId>,
    policy: &Policy,
    expected_revision: Option<&str>,
    found: &mut Vec<Found>,
) {
    let mut finding = |code| {
        found.push((
            code,
            true,
            row.client_instance_id.clone(),
            Some(row.namespace),
            vec![row.worker_identity.clone()],
        ));
    };
    if !live {
        finding(FindingCode::StaleWorker);
    }
    match row.ownership_state {
        Some(OwnershipState::Orphaned) => finding(FindingCode::OrphanedWorker),
        Some(OwnershipState::Unowned) => finding(FindingCode::UnownedWorker),
        _ => {}
    }
    let trust = fleet_identity::assess_instance_id(row.client_instance_id.as_deref(), minted);
    let well_formed = matches!(trust, TrustVerdict::Trusted | TrustVerdict::Unminted);
    let evidence_missing = row.generation_id.is_none()
        || row.host_id.is_none()
        || row.boot_id.is_none()
        || row.pid.is_none()
        || row.process_start_time.is_none();
    if !well_formed || evidence_missing {
        finding(FindingCode::LegacyIncompleteIdentity);
    }
    if trust == TrustVerdict::Unminted {
        finding(FindingCode::UnmintedInstanceId);
    }
    let contradicted = match row.client_instance_id.as_deref().map(ClientInstanceId::parse) {
        Some(Ok(id)) if well_formed => row.client_type.as_ref() != Some(id.client_type()),
        _ => row.client_type.is_none(),
    };
    if contradicted {
        finding(FindingCode::UnknownClient);
    }
    if let Some(canonical) = &policy.canonical_repository
        && row.repository.as_ref() != Some(canonical)
    {
        finding(FindingCode::ForeignRepository);
    }
    if let Some(expected) = expected_revision
        && row.code_revision.as_deref() != Some(expected)
    {
        finding(FindingCode::OldRevision);
    }
}

/// Seed 000's rules over the rows.
fn reference(
    rows: &[WorkerRow],
    ledger: &[InstanceRecord],
    manifest: Option<&Manifest>,
    policy: &Policy,
) -> Judgement {
    // Identity order; rows that share an identity by content.
    let mut ordered: Vec<&WorkerRow> = rows.iter().collect();
    ordered.sort_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
    for run in ordered.chunk_by_mut(|a, b| a.worker_identity == b.worker_identity) {
        run.sort_by_cached_key(|r| serde_json::to_string(r).unwrap());
    }
    let minted: BTreeSet<ClientInstanceId> = ledger.iter().map(|r| r.client_instance_id.clone()).collect();
    let expected_revision =
        manifest.and_then(|m| m.code_revision.as_deref()).or(policy.expected_code_revision.as_deref());
    let active: Vec<&WorkerRow> =
        ordered.iter().copied().filter(|r| r.status == WorkerStatus::Active).collect();
    let live_rows: Vec<&WorkerRow> = active.iter().copied().filter(|r| live(r)).collect();
    // Each row's liveness, judged once above (by the row's address: rows may share
    // every value).
    let live_set: std::collections::HashSet<*const WorkerRow> =
        live_rows.iter().map(|r| std::ptr::from_ref(*r)).collect();
    let live = |r: &WorkerRow| live_set.contains(&std::ptr::from_ref(r));
    let mut found = Vec::new();

    for row in &active {
        row_rules(row, live(row), &minted, policy, expected_revision, &mut found);
    }
    // History: one finding per instance with historical rows.
    let mut history: BTreeMap<Option<&str>, Vec<&WorkerRow>> = BTreeMap::new();
    for row in ordered.iter().filter(|r| r.status != WorkerStatus::Active) {
        history.entry(row.client_instance_id.as_deref()).or_default().push(row);
    }
    for (id, rows) in &history {
        found.push((FindingCode::HistoricalDead, false, id.map(str::to_owned), None, identities(rows)));
    }

    // Reuse, over the active rows.
    let two = |g: &[&WorkerRow]| g.len() > 1;
    let distinct = |values: Vec<String>| values.iter().any(|v| *v != values[0]);
    by(&active, |r| Some(r.worker_identity.clone()), two, FindingCode::ReusedWorkerIdentity, &mut found);
    // A session shared by the workers of one launch is how a launch works; shared across
    // launches it is reuse.
    let across_instances = |g: &[&WorkerRow]| {
        distinct(g.iter().map(|r| r.client_instance_id.clone().unwrap_or_default()).collect())
    };
    by(&active, |r| r.session_id.clone(), across_instances, FindingCode::ReusedSessionIdentity, &mut found);
    by(&active, |r| r.generation_id.clone(), two, FindingCode::ReusedGenerationIdentity, &mut found);
    let process = |r: &WorkerRow| {
        Some((r.host_id.clone()?, r.boot_id.clone()?, r.pid?.get(), r.process_start_time?.ticks()))
    };
    by(&active, process, two, FindingCode::ReusedProcessIdentity, &mut found);
    // One pid number held by two incarnations at once: different start times.
    let incarnations =
        |g: &[&WorkerRow]| distinct(g.iter().map(|r| format!("{:?}", r.process_start_time)).collect());
    let pid = |r: &WorkerRow| Some((r.host_id.clone()?, r.boot_id.clone()?, r.pid?.get()));
    by(&active, pid, incarnations, FindingCode::ReusedPid, &mut found);
    let slot = |r: &WorkerRow| Some((r.client_instance_id.clone()?, r.namespace, r.fencing_epoch?));
    by(&active, slot, two, FindingCode::ReusedFencingIdentity, &mut found);
    by(&active, |r| r.token_fingerprint.clone(), two, FindingCode::ReusedFencingIdentity, &mut found);

    // More than one live worker for one instance and namespace. Workers without an
    // instance ID share a profile without trusted instance evidence: indistinguishable
    // from duplicates, so one group.
    let mut slots: BTreeMap<(Option<&str>, Namespace), Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live_rows {
        slots.entry((row.client_instance_id.as_deref(), row.namespace)).or_default().push(row);
    }
    for ((id, ns), rows) in slots.iter().filter(|(_, rows)| rows.len() > 1) {
        found.push((
            FindingCode::DuplicateNamespaceWorker,
            true,
            id.map(str::to_owned),
            Some(*ns),
            identities(rows),
        ));
    }
    // The live workers of one launch share who launched them: live workers of one
    // instance ID that disagree on client type, session, enrollment, host or boot are
    // two launches on one ID (rows without a value do not vote; the ledger here records
    // no host).
    let mut live_by_instance: BTreeMap<Option<&str>, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live_rows {
        live_by_instance.entry(row.client_instance_id.as_deref()).or_default().push(row);
    }
    for (id, rows) in live_by_instance.iter().filter(|(id, _)| id.is_some()) {
        let launch = |r: &WorkerRow| -> [Option<String>; 5] {
            [
                r.client_type.as_ref().map(|v| v.as_str().to_owned()),
                r.session_id.as_ref().map(|v| v.as_str().to_owned()),
                r.fleet_run_id.as_ref().map(|v| v.as_str().to_owned()),
                r.host_id.as_ref().map(|v| v.as_str().to_owned()),
                r.boot_id.as_ref().map(|v| v.as_str().to_owned()),
            ]
        };
        let disagree = (0..5).any(|field| {
            let values: BTreeSet<String> = rows.iter().filter_map(|r| launch(r)[field].clone()).collect();
            values.len() > 1
        });
        if disagree {
            found.push((
                FindingCode::ClientInstanceCollision,
                true,
                id.map(str::to_owned),
                None,
                identities(rows),
            ));
        }
    }

    // The manifest: an expected instance (or one of its namespaces) with no live worker
    // is missing; a live instance not on it is unmanifested.
    if let Some(manifest) = manifest {
        for expected in &manifest.instances {
            let id = expected.client_instance_id.as_str();
            let live: Vec<Namespace> = live_by_instance
                .get(&Some(id))
                .map(|rows| rows.iter().map(|r| r.namespace).collect())
                .unwrap_or_default();
            if live.is_empty() {
                found.push((FindingCode::MissingExpected, true, Some(id.to_owned()), None, Vec::new()));
                continue;
            }
            for ns in expected.namespaces.iter().filter(|ns| !live.contains(ns)) {
                found.push((FindingCode::MissingExpected, true, Some(id.to_owned()), Some(*ns), Vec::new()));
            }
        }
        let listed: Vec<&str> = manifest.instances.iter().map(|i| i.client_instance_id.as_str()).collect();
        for (id, rows) in &live_by_instance {
            if !id.is_some_and(|id| listed.contains(&id)) {
                found.push((FindingCode::Unmanifested, true, id.map(str::to_owned), None, identities(rows)));
            }
        }
    }
    found.sort();

    // One view per instance with an active row.
    let mut by_instance: BTreeMap<Option<&str>, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &active {
        by_instance.entry(row.client_instance_id.as_deref()).or_default().push(row);
    }
    let instances: Vec<Instance> = by_instance
        .iter()
        .map(|(id, rows)| {
            let entry = manifest
                .and_then(|m| m.instances.iter().find(|i| Some(i.client_instance_id.as_str()) == *id));
            let expected: Vec<Namespace> = entry.map_or(Namespace::ALL.to_vec(), |e| e.namespaces.clone());
            let mut by_ns: BTreeMap<Namespace, Vec<WorkerIdentity>> = BTreeMap::new();
            for row in rows.iter().filter(|r| live(r)) {
                by_ns.entry(row.namespace).or_default().push(row.worker_identity.clone());
            }
            let blockers: BTreeSet<FindingCode> =
                found.iter().filter(|f| f.1 && f.2.as_deref() == *id).map(|f| f.0).collect();
            Instance {
                id: id.map(str::to_owned),
                client_type: rows.iter().find_map(|r| r.client_type.as_ref()).map(|c| c.as_str().to_owned()),
                trust: fleet_identity::assess_instance_id(*id, &minted),
                manifested: manifest.map(|_| entry.is_some()),
                missing: expected.iter().copied().filter(|ns| !by_ns.contains_key(ns)).collect(),
                live: by_ns.into_iter().collect(),
                stale: rows.iter().filter(|r| !live(r)).map(|r| r.worker_identity.clone()).collect(),
                blockers: blockers.into_iter().collect(),
            }
        })
        .collect();

    let workers: Vec<Worker> = ordered.iter().map(|r| judge(r, live(r))).collect();
    let live_count = workers.iter().filter(|w| w.1 == WorkerState::Live).count();
    let stale_count = workers.iter().filter(|w| w.1 == WorkerState::Stale).count();
    let blocking = found.iter().filter(|f| f.1).count();
    Judgement {
        consistency_token: token(&ordered),
        live_fleet_safe: blocking == 0,
        counts: [
            rows.len(),
            live_count + stale_count,
            live_count,
            stale_count,
            rows.len() - live_count - stale_count,
            instances.len(),
            found.len(),
            blocking,
        ],
        workers,
        instances,
        findings: found,
    }
}

/// The consistency token: a digest of `now` and of each chunk of 64 rows in snapshot
/// order (the last one shorter), a chunk being the digest of its rows' identity,
/// instance, status, heartbeat, fencing epoch (in decimal) and generation, each with
/// its length before it (absent: a length of all ones).
fn token(rows: &[&WorkerRow]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(now().to_string().as_bytes());
    for chunk in rows.chunks(64) {
        let mut digest = blake3::Hasher::new();
        let mut field = |value: Option<String>| match value {
            Some(v) => {
                digest.update(&(v.len() as u64).to_le_bytes());
                digest.update(v.as_bytes());
            }
            None => {
                digest.update(&u64::MAX.to_le_bytes());
            }
        };
        for row in chunk {
            field(Some(row.worker_identity.to_string()));
            field(row.client_instance_id.clone());
            field(Some(row.status.as_str().to_owned()));
            field(row.last_heartbeat_at.clone());
            field(row.fencing_epoch.map(|e| e.to_string()));
            field(row.generation_id.as_ref().map(|g| g.as_str().to_owned()));
        }
        hasher.update(digest.finalize().as_bytes());
    }
    format!("b3:{}", &hasher.finalize().to_hex().as_str()[..32])
}

/// A manifest for a fleet: every fourth of its well-formed instance IDs (all five
/// namespaces, or the first three), and two IDs no row claims.
fn manifest(rows: &[WorkerRow]) -> Manifest {
    let ids: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.client_instance_id.as_deref())
        .filter(|id| ClientInstanceId::parse(id).is_ok())
        .collect();
    let mut instances: Vec<serde_json::Value> = ids
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 == 0)
        .map(|(i, id)| {
            let namespaces: Vec<&str> =
                Namespace::ALL.iter().take(if i % 8 == 0 { 5 } else { 3 }).map(|ns| ns.as_str()).collect();
            serde_json::json!({ "client_type": "codex", "client_instance_id": id, "namespaces": namespaces })
        })
        .collect();
    for absent in ["inst-codex-20260730T120000Z-ffffffffff01", "inst-codex-20260730T120000Z-ffffffffff02"] {
        instances.push(serde_json::json!({ "client_type": "codex", "client_instance_id": absent }));
    }
    Manifest::from_json(&serde_json::json!({ "instances": instances }).to_string()).unwrap()
}

/// A policy that expects a repository and a revision, or nothing.
fn policy(expects: bool) -> Policy {
    if !expects {
        return Policy::default();
    }
    Policy {
        canonical_repository: Some(Repository::new("/srv/a").unwrap()),
        expected_code_revision: Some("1".into()),
    }
}

/// How many distinct values each key draws from, as a share of the fleet's size:
/// small (many collisions), or large (a key shared now and then).
#[derive(Debug, Clone, Copy)]
struct Domains {
    identity: u64,
    instance: u64,
    session: u64,
    generation: u64,
    pid: u64,
    start: u64,
    epoch: u64,
    token: u64,
    /// How often a heartbeat is anything but fresh: 0 never, else about one in this.
    beats: u64,
    /// How often a row is odd in another way (its ownership, client type, instance ID,
    /// evidence, repository, revision or status): 0 never, else about one in this.
    odd: u64,
}

fn domain() -> impl Strategy<Value = u64> {
    prop_oneof![1u64..4, Just(64), Just(1_000_000)]
}

fn domains() -> impl Strategy<Value = Domains> {
    (
        domain(),
        domain(),
        domain(),
        domain(),
        domain(),
        domain(),
        domain(),
        domain(),
        prop_oneof![Just(0u64), 6u64..60],
        prop_oneof![Just(0u64), 3u64..40],
    )
        .prop_map(|(identity, instance, session, generation, pid, start, epoch, token, beats, odd)| {
            Domains { identity, instance, session, generation, pid, start, epoch, token, beats, odd }
        })
}

/// xorshift64*: a fixed sequence per seed.
struct Rng(u64);

impl Rng {
    /// A number below `m` (0 when `m` is 0).
    fn next(&mut self, m: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % m.max(1)
    }

    /// A value of a key whose domain is `share` for a fleet of `size` rows: `share`
    /// times as many values as rows when it is 64 or more, else a `share`th as many.
    fn pick(&mut self, size: u64, share: u64) -> u64 {
        self.next(if share >= 64 { size * share } else { size / share.max(1) + 1 })
    }
}

/// A fleet of `n` rows drawn from `seed`: each key is a value from its domain (`share`
/// × n values; 1,000,000 means all but unique), or absent now and then.
fn fleet(n: usize, d: Domains, seed: u64) -> Vec<WorkerRow> {
    let mut rng = Rng(seed | 1);
    let size = n as u64;
    let template: WorkerRow = serde_json::from_value(serde_json::json!({
        "worker_identity": "wkr-template",
        "client_type": "codex",
        "namespace": "author",
        "status": "active",
        "ownership_state": "owned",
        "registered_at": at(0).to_string(),
        "last_heartbeat_at": at(100).to_string(),
        "heartbeat_ttl_s": 30,
        "boot_id": "11111111-2222-3333-4444-555555555555",
    }))
    .unwrap();
    (0..n)
        .map(|i| {
            let mut row = template.clone();
            row.worker_identity =
                WorkerIdentity::new(format!("wkr-{:07}", rng.pick(size, d.identity))).unwrap();
            row.namespace = Namespace::ALL[i % Namespace::ALL.len()];
            let instance = rng.pick(size, d.instance);
            row.client_instance_id = (!instance.is_multiple_of(17))
                .then(|| format!("inst-codex-20260730T120000Z-{instance:012x}"));
            let session = rng.pick(size, d.session);
            row.session_id =
                (!session.is_multiple_of(13)).then(|| format!("sess-{session}").parse().unwrap());
            row.generation_id = Some(format!("gen-{}", rng.pick(size, d.generation)).parse().unwrap());
            let host = if i % 11 == 0 {
                "fedcba9876543210fedcba9876543210"
            } else {
                "0123456789abcdef0123456789abcdef"
            };
            row.host_id = Some(host.parse().unwrap());
            // Linux's pid numbers stop at 2^22.
            let pid = rng.pick(size, d.pid) % (1 << 22) + 1;
            row.pid = (!pid.is_multiple_of(19))
                .then(|| fleet_identity::Pid::new(i64::try_from(pid).unwrap()).unwrap());
            row.process_start_time =
                Some(serde_json::from_value(serde_json::json!(rng.pick(size, d.start) + 1)).unwrap());
            row.fencing_epoch = Some(rng.pick(size, d.epoch));
            row.token_fingerprint = Some(format!("b3:{:032}", rng.pick(size, d.token)));
            if i % 23 == 0 {
                row.status = WorkerStatus::Released;
            }
            // Around `now` (110 s): lapsed, fresh, a little ahead, far ahead, unreadable.
            let beat = match if d.beats == 0 { 0 } else { rng.next(d.beats) } {
                0 => None,
                1 => Some(at(110 + 600).to_string()),
                2 => Some(at(110 + 120).to_string()),
                3 => Some(at(60).to_string()),
                4 => Some("not a time".to_owned()),
                _ => Some(at(100).to_string()),
            };
            row.last_heartbeat_at = beat.or(row.last_heartbeat_at);
            if d.beats > 0 && rng.next(d.beats * 4) == 0 {
                row.heartbeat_ttl_s = None;
            }
            if d.beats > 0 && rng.next(d.beats * 3) == 0 {
                row.ownership_state = Some(OwnershipState::Stale);
            }
            let odd = |rng: &mut Rng| d.odd > 0 && rng.next(d.odd) == 0;
            if odd(&mut rng) {
                row.ownership_state =
                    Some([OwnershipState::Orphaned, OwnershipState::Unowned][rng.next(2) as usize]);
            }
            if odd(&mut rng) {
                row.client_type = [None, Some("claude".parse().unwrap())][rng.next(2) as usize].clone();
            }
            if odd(&mut rng) {
                row.client_instance_id =
                    Some(["legacy-pid-7", "not-an-instance-id", "pid-9"][rng.next(3) as usize].to_owned());
            }
            if odd(&mut rng) {
                row.generation_id = None;
            }
            row.repository = Some(Repository::new("/srv/a").unwrap());
            if odd(&mut rng) {
                row.repository =
                    [None, Some(Repository::new("/srv/b").unwrap())][rng.next(2) as usize].clone();
            }
            row.code_revision = Some("1".to_owned());
            if odd(&mut rng) {
                row.code_revision = [None, Some("0".to_owned())][rng.next(2) as usize].clone();
            }
            if odd(&mut rng) {
                row.status = [WorkerStatus::Superseded, WorkerStatus::Retired][rng.next(2) as usize];
            }
            row
        })
        .collect()
}

/// What one side found and the other did not, a few of each (the whole lists of a large
/// fleet are too long to read), and the first worker and instance they judge apart.
fn disagreement(fast: &Judgement, reference: &Judgement) -> Option<String> {
    if fast == reference {
        return None;
    }
    let only = |a: &[Found], b: &[Found]| -> Vec<Found> {
        a.iter().filter(|x| !b.contains(x)).take(3).cloned().collect()
    };
    let worker = fast.workers.iter().zip(&reference.workers).find(|(a, b)| a != b);
    let instance = fast.instances.iter().zip(&reference.instances).find(|(a, b)| a != b);
    Some(format!(
        "token {} / {}; safe {} / {}; counts {:?} / {:?}; {} findings by the fast classifier, {} by the reference; only fast: \
         {:?}; only reference: {:?}; first worker judged apart: {worker:?}; first instance: {instance:?}",
        fast.consistency_token,
        reference.consistency_token,
        fast.live_fleet_safe,
        reference.live_fleet_safe,
        fast.counts,
        reference.counts,
        fast.findings.len(),
        reference.findings.len(),
        only(&fast.findings, &reference.findings),
        only(&reference.findings, &fast.findings),
    ))
}

/// Both classifiers on one fleet: without a manifest and with one, without a policy
/// and with one.
fn compare(rows: &[WorkerRow], expects: bool) -> Result<(), String> {
    let ledger = ledger(rows);
    let manifest = manifest(rows);
    let policy = policy(expects);
    for manifest in [None, Some(&manifest)] {
        if let Some(found) = disagreement(
            &fast(rows, &ledger, manifest, &policy),
            &reference(rows, &ledger, manifest, &policy),
        ) {
            return Err(format!("manifest {}: {found}", manifest.is_some()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn the_fast_classifier_agrees_with_the_reference_on_random_fleets(
        n in prop_oneof![0usize..64, 4_200usize..6_000],
        d in domains(),
        seed in any::<u64>(),
        expects in any::<bool>(),
    ) {
        let rows = fleet(n, d, seed);
        let agreed = compare(&rows, expects);
        prop_assert!(agreed.is_ok(), "{}", agreed.unwrap_err());
    }
}

/// The property above exercises the large-fleet path: a fleet past 4,096 keyed rows with
/// every kind of finding in it is judged alike, and not only when keys are rare.
#[test]
fn a_large_fleet_with_every_finding_is_judged_alike() {
    let d = Domains {
        identity: 64,
        instance: 64,
        session: 2,
        generation: 64,
        pid: 2,
        start: 2,
        epoch: 2,
        token: 1_000_000,
        beats: 8,
        odd: 20,
    };
    let rows = fleet(5_000, d, 7);
    let ledger = ledger(&rows);
    let manifest = manifest(&rows);
    let found = reference(&rows, &ledger, Some(&manifest), &policy(true)).findings;
    for code in FindingCode::ALL {
        assert!(found.iter().any(|f| f.0 == code), "the fleet has {code:?} to find");
    }
    compare(&rows, true).unwrap();
    compare(&rows, false).unwrap();
}
