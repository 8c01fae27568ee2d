//! A reference classifier for the liveness and identity-reuse rules, written straight
//! from seed 000 and the heartbeat lifecycle ("stale workers still marked active": a
//! heartbeat past its TTL, one from further in the future than the skew a fleet
//! tolerates, or a row marked stale; "each namespace worker has a distinct
//! worker_identity, process identity, generation, and PID"; one live worker per
//! instance and namespace; a session is one client's; a fencing epoch or worker token
//! belongs to one worker; the live workers of one instance ID agree on who launched
//! them; a well-formed instance ID the ledger does not hold is not trusted; an expected
//! instance or namespace without a live worker is missing, a live instance off the
//! manifest is unmanifested), with no hashing, packing, prefilter or radix sort: every key
//! is grouped in a `BTreeMap`. A property test holds the fast classifier to it on random
//! fleets, small ones and ones past the size (4,096 keyed rows) where the fast path's
//! bit-table prefilter and radix sort run, with keys drawn from small domains (many
//! collisions) or large ones (few), and heartbeats lapsed, fresh, skewed a little or far
//! into the future, or unreadable.

use std::collections::BTreeMap;

use fleet_identity::{ClientInstanceId, Namespace, Timestamp, WorkerIdentity};
use fleet_model::{InstanceRecord, WorkerRow, WorkerStatus};
use fleet_snapshot::{FindingCode, Manifest, Policy, ProbeResults, SnapshotInput, snapshot};
use proptest::prelude::*;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

/// What a reuse finding says: its code and the workers it names.
type Reuse = (FindingCode, Vec<WorkerIdentity>);

/// When the reference judges: every heartbeat below is placed around it.
fn now() -> Timestamp {
    at(110)
}

/// Whether an active row is live at [`now`]: a heartbeat that reads, within its TTL, not
/// from further ahead than the fleet's clock skew, and a row not marked stale (nothing
/// is probed here).
fn live(row: &WorkerRow) -> bool {
    let Some(beat) = row.last_heartbeat_at.as_deref().and_then(|b| Timestamp::parse(b).ok()) else {
        return false;
    };
    let Some(ttl) = row.heartbeat_ttl_s else { return false };
    let lapsed = now() > beat.saturating_add(time::Duration::seconds(i64::from(ttl)));
    let from_the_future = beat > now().saturating_add(fleet_model::MAX_CLOCK_SKEW);
    !lapsed && !from_the_future && row.ownership_state != Some(fleet_model::OwnershipState::Stale)
}

/// The launcher's ledger for a fleet: every well-formed instance ID of its rows whose
/// number is not a multiple of three (the others were never minted).
fn ledger(rows: &[WorkerRow]) -> Vec<InstanceRecord> {
    let ids: std::collections::BTreeSet<ClientInstanceId> = rows
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

/// Seed 000's liveness, trust and reuse rules over the active rows, one `BTreeMap` per
/// key.
fn reference(rows: &[WorkerRow], ledger: &[InstanceRecord]) -> Vec<Reuse> {
    let active: Vec<&WorkerRow> = rows.iter().filter(|r| r.status == WorkerStatus::Active).collect();
    let mut found = Vec::new();
    for row in active.iter().filter(|r| !live(r)) {
        found.push((FindingCode::StaleWorker, vec![row.worker_identity.clone()]));
    }
    // A well-formed instance ID the launcher never minted is not trusted.
    let minted: std::collections::BTreeSet<&str> =
        ledger.iter().map(|r| r.client_instance_id.as_str()).collect();
    for row in &active {
        let id = row.client_instance_id.as_deref();
        if id.is_some_and(|id| ClientInstanceId::parse(id).is_ok() && !minted.contains(id)) {
            found.push((FindingCode::UnmintedInstanceId, vec![row.worker_identity.clone()]));
        }
    }
    /// Every group of rows sharing a key in which `reused` holds.
    fn by<K: Ord>(
        rows: &[&WorkerRow],
        key: impl Fn(&WorkerRow) -> Option<K>,
        reused: impl Fn(&[&WorkerRow]) -> bool,
        code: FindingCode,
        found: &mut Vec<Reuse>,
    ) {
        let mut groups: BTreeMap<K, Vec<&WorkerRow>> = BTreeMap::new();
        for row in rows {
            if let Some(k) = key(row) {
                groups.entry(k).or_default().push(row);
            }
        }
        for group in groups.values().filter(|g| reused(g)) {
            let mut ids: Vec<WorkerIdentity> = group.iter().map(|r| r.worker_identity.clone()).collect();
            ids.sort();
            ids.dedup();
            found.push((code, ids));
        }
    }
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
    let live_rows: Vec<&WorkerRow> = active.iter().copied().filter(|r| live(r)).collect();
    let namespace = |r: &WorkerRow| Some((r.client_instance_id.clone(), r.namespace));
    by(&live_rows, namespace, two, FindingCode::DuplicateNamespaceWorker, &mut found);
    // The live workers of one launch share who launched them: live workers of one
    // instance ID that disagree on client type, session, enrollment, host or boot are
    // two launches on one ID (rows without a value do not vote).
    let mut by_instance: BTreeMap<&str, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live_rows {
        if let Some(id) = row.client_instance_id.as_deref() {
            by_instance.entry(id).or_default().push(row);
        }
    }
    for rows in by_instance.values() {
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
            let values: std::collections::BTreeSet<String> =
                rows.iter().filter_map(|r| launch(r)[field].clone()).collect();
            values.len() > 1
        });
        if disagree {
            let mut ids: Vec<WorkerIdentity> = rows.iter().map(|r| r.worker_identity.clone()).collect();
            ids.sort();
            ids.dedup();
            found.push((FindingCode::ClientInstanceCollision, ids));
        }
    }
    found.sort();
    found
}

/// The stale, reuse, duplicate and collision findings of the fast classifier.
fn fast(rows: &[WorkerRow], ledger: &[InstanceRecord]) -> Vec<Reuse> {
    let snap = snapshot(SnapshotInput {
        rows,
        ledger,
        manifest: None,
        probes: &ProbeResults::new(),
        policy: &Policy::default(),
        now: now(),
    });
    let c = &snap.counts;
    assert_eq!(
        [c.live_worker_count, c.stale_worker_count, c.historical_row_count, c.total_rows],
        reference_counts(rows),
        "live, stale, historical and all rows"
    );
    assert_eq!(snap.live_fleet_safe, snap.findings.iter().all(|f| !f.active_blocker));
    judged(&snap.findings)
}

/// How many rows are live, stale (active, but nothing vouches for them) and history.
fn reference_counts(rows: &[WorkerRow]) -> [usize; 4] {
    let active = |r: &&WorkerRow| r.status == WorkerStatus::Active;
    let live_count = rows.iter().filter(active).filter(|r| live(r)).count();
    let active_count = rows.iter().filter(active).count();
    [live_count, active_count - live_count, rows.len() - active_count, rows.len()]
}

/// What a manifest finding says: its code, instance, namespace and workers.
type Listed = (FindingCode, Option<String>, Option<Namespace>, Vec<WorkerIdentity>);

/// The manifest's findings of the fast classifier.
fn fast_manifest(rows: &[WorkerRow], ledger: &[InstanceRecord], manifest: &Manifest) -> Vec<Listed> {
    let snap = snapshot(SnapshotInput {
        rows,
        ledger,
        manifest: Some(manifest),
        probes: &ProbeResults::new(),
        policy: &Policy::default(),
        now: now(),
    });
    let mut found: Vec<Listed> = snap
        .findings
        .iter()
        .filter(|f| matches!(f.code, FindingCode::MissingExpected | FindingCode::Unmanifested))
        .map(|f| (f.code, f.client_instance_id.clone(), f.namespace, f.worker_identities.clone()))
        .collect();
    found.sort();
    // Everything else is judged as without a manifest.
    assert_eq!(judged(&snap.findings), fast(rows, ledger));
    found
}

/// Seed 000's manifest rules: an expected instance (or one of its namespaces) with no
/// live worker is missing; a live instance not on the manifest is unmanifested.
fn reference_manifest(rows: &[WorkerRow], manifest: &Manifest) -> Vec<Listed> {
    let live_rows: Vec<&WorkerRow> =
        rows.iter().filter(|r| r.status == WorkerStatus::Active && live(r)).collect();
    let mut by_instance: BTreeMap<Option<&str>, Vec<&WorkerRow>> = BTreeMap::new();
    for row in &live_rows {
        by_instance.entry(row.client_instance_id.as_deref()).or_default().push(row);
    }
    let mut found = Vec::new();
    for expected in &manifest.instances {
        let id = expected.client_instance_id.as_str();
        let live: Vec<Namespace> = by_instance
            .get(&Some(id))
            .map(|rows| rows.iter().map(|r| r.namespace).collect())
            .unwrap_or_default();
        if live.is_empty() {
            found.push((FindingCode::MissingExpected, Some(id.to_owned()), None, Vec::new()));
            continue;
        }
        for ns in expected.namespaces.iter().filter(|ns| !live.contains(ns)) {
            found.push((FindingCode::MissingExpected, Some(id.to_owned()), Some(*ns), Vec::new()));
        }
    }
    let listed: Vec<&str> = manifest.instances.iter().map(|i| i.client_instance_id.as_str()).collect();
    for (id, rows) in &by_instance {
        if !id.is_some_and(|id| listed.contains(&id)) {
            let mut ids: Vec<WorkerIdentity> = rows.iter().map(|r| r.worker_identity.clone()).collect();
            ids.sort();
            ids.dedup();
            found.push((FindingCode::Unmanifested, id.map(str::to_owned), None, ids));
        }
    }
    found.sort();
    found
}

/// A manifest for a fleet: every fourth of its well-formed instance IDs (all five
/// namespaces, or the first three), and two IDs no row claims.
fn manifest(rows: &[WorkerRow]) -> Manifest {
    let ids: std::collections::BTreeSet<&str> = rows
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

/// The stale, trust, reuse, duplicate and collision findings of `findings`.
fn judged(findings: &[fleet_snapshot::Finding]) -> Vec<Reuse> {
    let mut found: Vec<Reuse> = findings
        .iter()
        .filter(|f| {
            matches!(
                f.code,
                FindingCode::StaleWorker
                    | FindingCode::UnmintedInstanceId
                    | FindingCode::ClientInstanceCollision
                    | FindingCode::ReusedWorkerIdentity
                    | FindingCode::ReusedSessionIdentity
                    | FindingCode::ReusedGenerationIdentity
                    | FindingCode::ReusedProcessIdentity
                    | FindingCode::ReusedPid
                    | FindingCode::ReusedFencingIdentity
                    | FindingCode::DuplicateNamespaceWorker
            )
        })
        .map(|f| (f.code, f.worker_identities.clone()))
        .collect();
    found.sort();
    found
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
    )
        .prop_map(|(identity, instance, session, generation, pid, start, epoch, token, beats)| Domains {
            identity,
            instance,
            session,
            generation,
            pid,
            start,
            epoch,
            token,
            beats,
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
                row.ownership_state = Some(fleet_model::OwnershipState::Stale);
            }
            row
        })
        .collect()
}

/// What one side found and the other did not, a few of each (the whole lists of a large
/// fleet are too long to read).
fn disagreement(fast: &[Reuse], reference: &[Reuse]) -> Option<String> {
    let only = |a: &[Reuse], b: &[Reuse]| -> Vec<Reuse> {
        a.iter().filter(|x| !b.contains(x)).take(3).cloned().collect()
    };
    let (fast_only, reference_only) = (only(fast, reference), only(reference, fast));
    (fast_only.len() + reference_only.len() > 0 || fast.len() != reference.len()).then(|| {
        format!(
            "{} found by the fast classifier, {} by the reference; only fast: {fast_only:?}; only reference: {reference_only:?}",
            fast.len(),
            reference.len()
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_fast_reuse_rules_agree_with_the_reference_on_random_fleets(
        n in prop_oneof![0usize..64, 4_200usize..6_000],
        d in domains(),
        seed in any::<u64>(),
    ) {
        let rows = fleet(n, d, seed);
        let ledger = ledger(&rows);
        let found = disagreement(&fast(&rows, &ledger), &reference(&rows, &ledger));
        prop_assert!(found.is_none(), "{}", found.unwrap_or_default());
        let manifest = manifest(&rows);
        prop_assert_eq!(fast_manifest(&rows, &ledger, &manifest), reference_manifest(&rows, &manifest));
    }
}

/// The property above exercises the large-fleet path: a fleet past 4,096 keyed rows with
/// reuse, stale rows, unminted IDs, collisions and duplicates in it is judged alike, and
/// not only when keys are rare.
#[test]
fn a_large_fleet_with_reuse_is_judged_alike() {
    let d = Domains {
        identity: 1_000_000,
        instance: 64,
        session: 2,
        generation: 1_000_000,
        pid: 64,
        start: 2,
        epoch: 64,
        token: 1_000_000,
        beats: 8,
    };
    let rows = fleet(5_000, d, 7);
    let ledger = ledger(&rows);
    let found = reference(&rows, &ledger);
    for code in [
        FindingCode::ReusedPid,
        FindingCode::StaleWorker,
        FindingCode::UnmintedInstanceId,
        FindingCode::ClientInstanceCollision,
        FindingCode::DuplicateNamespaceWorker,
    ] {
        assert!(found.iter().any(|(c, _)| *c == code), "the fleet has {code:?} to find");
    }
    if let Some(found) = disagreement(&fast(&rows, &ledger), &found) {
        panic!("{found}");
    }
    let manifest = manifest(&rows);
    let listed = reference_manifest(&rows, &manifest);
    for code in [FindingCode::MissingExpected, FindingCode::Unmanifested] {
        assert!(listed.iter().any(|(c, ..)| *c == code), "the fleet has {code:?} to find");
    }
    assert_eq!(fast_manifest(&rows, &ledger, &manifest), listed);
}
