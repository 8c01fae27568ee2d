//! The snapshot's rules, one scenario each, on a fixed clock.

use fleet_identity::{
    ClientInstanceId, ClientType, Namespace, Repository, Timestamp, TrustVerdict, WorkerIdentity,
};
use fleet_model::ProcessVerdict;
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};
use fleet_snapshot::{
    FindingCode, FleetSnapshot, GateReason, Manifest, Policy, ProbeResults, SnapshotInput,
    compare_snapshot_heartbeats, mutation_gate, snapshot,
};
use proptest::prelude::*;

const A: &str = "inst-codex-20260730T120000Z-aaaaaaaaaaaa";
const B: &str = "inst-codex-20260730T120100Z-bbbbbbbbbbbb";

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).unwrap()
}

/// A live, complete worker of `instance` in `ns`; `n` makes its identities unique.
fn worker(instance: &str, ns: Namespace, n: u32) -> WorkerRow {
    let session = if instance == A { "sess-a" } else { "sess-b" };
    serde_json::from_value(serde_json::json!({
        "worker_identity": format!("wkr-{ns}-{n:04}"),
        "client_type": "codex",
        "client_instance_id": instance,
        "instance_provenance": "trusted_launcher",
        "namespace": ns,
        "profile": ns,
        "session_id": session,
        "generation_id": format!("gen-{n:04}"),
        "host_id": "0123456789abcdef0123456789abcdef",
        "boot_id": "11111111-2222-3333-4444-555555555555",
        "pid": 1000 + n,
        "process_start_time": 50_000 + u64::from(n),
        "repository": "/srv/repo",
        "status": "active",
        "ownership_state": "owned",
        "registered_at": at(0).to_string(),
        "last_heartbeat_at": at(100).to_string(),
        "heartbeat_ttl_s": 30,
        "fencing_epoch": 1,
        "token_fingerprint": format!("b3:{n:032}"),
        "code_revision": "0.1.0",
        "schema_revision": "1",
    }))
    .unwrap()
}

fn launch(instance: &str, first: u32) -> Vec<WorkerRow> {
    Namespace::ALL.iter().zip(first..).map(|(ns, n)| worker(instance, *ns, n)).collect()
}

fn ledger() -> Vec<InstanceRecord> {
    [A, B]
        .iter()
        .map(|id| InstanceRecord {
            client_instance_id: ClientInstanceId::parse(id).unwrap(),
            client_type: ClientType::new("codex").unwrap(),
            fleet_run_id: None,
            minted_at: at(0),
            host_id: None,
        })
        .collect()
}

struct Case {
    rows: Vec<WorkerRow>,
    manifest: Option<Manifest>,
    probes: ProbeResults,
    policy: Policy,
    now: Timestamp,
}

impl Case {
    fn new(rows: Vec<WorkerRow>) -> Self {
        Self { rows, manifest: None, probes: ProbeResults::new(), policy: Policy::default(), now: at(110) }
    }

    fn run(&self) -> FleetSnapshot<'_> {
        let ledger = ledger();
        snapshot(SnapshotInput {
            rows: &self.rows,
            ledger: &ledger,
            manifest: self.manifest.as_ref(),
            probes: &self.probes,
            policy: &self.policy,
            now: self.now,
        })
    }
}

fn codes(s: &FleetSnapshot<'_>) -> Vec<FindingCode> {
    let mut c: Vec<FindingCode> = s.findings.iter().map(|f| f.code).collect();
    c.dedup();
    c
}

fn two_launches() -> Vec<WorkerRow> {
    let mut rows = launch(A, 0);
    rows.extend(launch(B, 10));
    rows
}

fn id(s: &str) -> WorkerIdentity {
    WorkerIdentity::new(s).unwrap()
}

// Fail-closed table, row 1; rules 1 and 7.
#[test]
fn two_instances_of_one_client_type_with_distinct_ids_are_safe() {
    let case = Case::new(two_launches());
    let s = case.run();
    assert!(s.live_fleet_safe, "{:#?}", s.findings);
    assert!(s.findings.is_empty());
    assert_eq!(s.counts.live_worker_count, 10);
    assert_eq!(s.instances.len(), 2);
    assert!(s.instances.iter().all(|i| i.trust == TrustVerdict::Trusted && i.missing_namespaces.is_empty()));
}

// Fail-closed table, row 2; rule 6.
#[test]
fn live_reuse_of_one_instance_id_by_two_launches_is_a_collision() {
    let mut rows = launch(A, 0);
    let mut other = launch(A, 10);
    for r in &mut other {
        r.session_id = Some("sess-other".parse().unwrap());
    }
    rows.extend(other);
    let case = Case::new(rows);
    let s = case.run();
    assert!(!s.live_fleet_safe);
    let collision = s.findings_of(FindingCode::ClientInstanceCollision).next().expect("collision");
    assert_eq!(collision.client_instance_id.as_deref(), Some(A));
    assert!(collision.evidence["conflicting"]["session_id"].is_array());
    assert_eq!(s.findings_of(FindingCode::DuplicateNamespaceWorker).count(), 5);
}

// Fail-closed table, row 3.
#[test]
fn two_live_workers_in_one_namespace_of_one_instance_are_a_duplicate() {
    let mut rows = launch(A, 0);
    let mut extra = worker(A, Namespace::Merger, 99);
    extra.fencing_epoch = Some(2);
    rows.push(extra);
    let case = Case::new(rows);
    let s = case.run();
    assert!(!s.live_fleet_safe);
    let dup: Vec<_> = s.findings_of(FindingCode::DuplicateNamespaceWorker).collect();
    assert_eq!(dup.len(), 1);
    assert_eq!(dup[0].namespace, Some(Namespace::Merger));
    assert_eq!(dup[0].worker_identities, vec![id("wkr-merger-0002"), id("wkr-merger-0099")]);
    let gate = mutation_gate(&s, &id("wkr-merger-0099"));
    assert_eq!(gate.reasons, vec![GateReason::DuplicateNamespaceWorker]);
    assert!(
        mutation_gate(&s, &id("wkr-controller-0003")).mutation_allowed,
        "the rest of the instance is fine"
    );
}

// Fail-closed table, row 4.
#[test]
fn a_legacy_registration_without_a_trusted_instance_id_is_unsafe() {
    let mut rows = launch(A, 0);
    let mut legacy = worker("legacy-pid-4242", Namespace::Author, 50);
    legacy.session_id = Some("sess-legacy".parse().unwrap());
    rows.push(legacy);
    let case = Case::new(rows);
    let s = case.run();
    assert!(!s.live_fleet_safe);
    let f = s.findings_of(FindingCode::LegacyIncompleteIdentity).next().expect("legacy");
    assert_eq!(f.evidence["instance_claim"], "legacy_placeholder");
    let gate = mutation_gate(&s, &id("wkr-author-0050"));
    assert!(gate.reasons.contains(&GateReason::UntrustedInstanceIdentity));
    assert_eq!(gate.instance_trust, Some(TrustVerdict::LegacyPlaceholder));
}

// Fail-closed table, row 5.
#[test]
fn a_historical_dead_row_alone_does_not_block() {
    let mut rows = two_launches();
    let mut old = worker(A, Namespace::Author, 77);
    old.status = WorkerStatus::Released;
    old.fencing_epoch = Some(7);
    rows.push(old);
    let case = Case::new(rows);
    let s = case.run();
    assert!(s.live_fleet_safe);
    let f = s.findings_of(FindingCode::HistoricalDead).next().expect("historical");
    assert!(!f.active_blocker);
    assert_eq!(s.counts.historical_row_count, 1);
}

// Rule 5: never inferred from pid proximity, timestamps or client type.
#[test]
fn a_worker_without_an_instance_id_is_never_attached_to_its_neighbours() {
    let mut rows = launch(A, 0);
    let mut orphan = worker(A, Namespace::Author, 5);
    orphan.client_instance_id = None;
    orphan.session_id = Some("sess-a".parse().unwrap());
    rows.push(orphan);
    let case = Case::new(rows);
    let s = case.run();
    let a = s.instances.iter().find(|i| i.client_instance_id == Some(A)).unwrap();
    assert_eq!(a.namespaces.get(Namespace::Author).len(), 1, "pid 1005 next to pid 1000 joins nothing");
    assert!(s.instances.iter().any(|i| i.client_instance_id.is_none() && i.trust == TrustVerdict::Missing));
    assert!(s.findings_of(FindingCode::DuplicateNamespaceWorker).next().is_none());
}

#[test]
fn an_unminted_instance_id_is_its_own_finding() {
    let mut rows = launch(A, 0);
    rows.extend(launch("inst-codex-20260730T120200Z-cccccccccccc", 20));
    let case = Case::new(rows);
    let s = case.run();
    let f: Vec<_> = s.findings_of(FindingCode::UnmintedInstanceId).collect();
    assert_eq!(f.len(), 5);
    let view = s.instances.iter().find(|i| i.trust == TrustVerdict::Unminted).unwrap();
    assert_eq!(view.blockers, vec![FindingCode::UnmintedInstanceId]);
}

#[test]
fn an_expired_heartbeat_or_a_gone_process_makes_a_stale_worker() {
    let mut case = Case::new(two_launches());
    case.now = at(131);
    let s = case.run();
    assert_eq!(s.counts.stale_worker_count, 10, "100 + 30 < 131");
    assert_eq!(Case { now: at(130), ..Case::new(two_launches()) }.run().counts.stale_worker_count, 0);

    let mut case = Case::new(two_launches());
    case.probes.insert(id("wkr-author-0000"), ProcessVerdict::Gone);
    case.probes.insert(id("wkr-author-0010"), ProcessVerdict::Alive);
    let s = case.run();
    assert_eq!(s.counts.stale_worker_count, 1);
    let f = s.findings_of(FindingCode::StaleWorker).next().unwrap();
    assert_eq!(f.evidence["liveness"], "gone");
}

#[test]
fn a_live_probe_never_revives_an_expired_heartbeat() {
    let mut case = Case::new(launch(A, 0));
    case.now = at(500);
    case.probes.insert(id("wkr-author-0000"), ProcessVerdict::Alive);
    assert_eq!(case.run().counts.stale_worker_count, 5);
}

/// Two launches whose second reuses a generation, a whole process, a worker token and
/// (across instances) a session of the first.
fn two_launches_sharing_identities() -> Vec<WorkerRow> {
    let mut rows = two_launches();
    rows[6].generation_id = rows[1].generation_id.clone();
    rows[7].pid = rows[2].pid;
    rows[7].process_start_time = rows[2].process_start_time;
    rows[9].token_fingerprint = rows[4].token_fingerprint.clone();
    rows[5].session_id = rows[0].session_id.clone();
    rows
}

#[test]
fn reused_identities_each_have_their_code() {
    let mut rows = two_launches_sharing_identities();
    rows[8].pid = rows[3].pid;
    let mut twin = rows[0].clone();
    twin.session_id = Some("sess-twin".parse().unwrap());
    rows.push(twin);
    let case = Case::new(rows);
    let s = case.run();
    for code in [
        FindingCode::ReusedWorkerIdentity,
        FindingCode::ReusedSessionIdentity,
        FindingCode::ReusedGenerationIdentity,
        FindingCode::ReusedProcessIdentity,
        FindingCode::ReusedPid,
        FindingCode::ReusedFencingIdentity,
    ] {
        assert!(s.findings_of(code).next().is_some(), "{code} missing: {:?}", codes(&s));
    }
    assert!(!mutation_gate(&s, &id("wkr-reviewer-0011")).mutation_allowed);
    assert!(
        s.findings_of(FindingCode::ReusedFencingIdentity).any(|f| f.evidence["shared"].is_string()),
        "token reuse"
    );
}

/// The reuse checks group large fleets with counting passes instead of a comparison
/// sort: the reuse of `two_launches_sharing_identities`, hidden among a thousand other
/// launches, is reported exactly as it is alone.
#[test]
fn reuse_in_a_large_fleet_is_reported_as_in_a_small_one() {
    let mut rows = two_launches_sharing_identities();
    let reuse = |s: &FleetSnapshot<'_>| -> Vec<fleet_snapshot::Finding> {
        s.findings.iter().filter(|f| f.code.is_reused_identity()).cloned().collect()
    };
    let small_case = Case::new(rows.clone());
    let small = reuse(&small_case.run());
    assert_eq!(small.len(), 4, "{small:#?}");

    for launch in 0..1_000u32 {
        let instance = format!("inst-codex-20260730T120000Z-{launch:012x}");
        for mut row in self::launch(&instance, 100 + launch * 5) {
            row.session_id = Some(format!("sess-fill-{launch}").parse().unwrap());
            rows.push(row);
        }
    }
    let big_case = Case::new(rows);
    let big = big_case.run();
    assert!(big.counts.active_worker_count > 4096, "past the counting-pass threshold");
    assert_eq!(reuse(&big), small);
}

#[test]
fn ownership_client_repository_and_revision_findings() {
    let mut rows = launch(A, 0);
    rows[0].ownership_state = Some(OwnershipState::Orphaned);
    rows[1].ownership_state = Some(OwnershipState::Unowned);
    rows[2].client_type = Some(ClientType::new("gemini").unwrap());
    rows[3].repository = Some(Repository::new("/srv/other").unwrap());
    rows[4].code_revision = Some("0.0.9".into());
    let mut case = Case::new(rows);
    case.policy = Policy {
        canonical_repository: Some(Repository::new("/srv/repo").unwrap()),
        expected_code_revision: Some("0.1.0".into()),
    };
    let s = case.run();
    for (code, worker) in [
        (FindingCode::OrphanedWorker, "wkr-author-0000"),
        (FindingCode::UnownedWorker, "wkr-reviewer-0001"),
        (FindingCode::UnknownClient, "wkr-merger-0002"),
        (FindingCode::ForeignRepository, "wkr-controller-0003"),
        (FindingCode::OldRevision, "wkr-reconciler-0004"),
    ] {
        let f = s.findings_of(code).next().unwrap_or_else(|| panic!("{code}"));
        assert_eq!(f.worker_identities, vec![id(worker)], "{code}");
    }
}

#[test]
fn the_manifest_reports_missing_and_unmanifested_instances() {
    let manifest = Manifest::from_json(&format!(
        r#"{{"instances": [{{"client_type": "codex", "client_instance_id": "{A}"}},
            {{"client_type": "codex", "client_instance_id": "inst-codex-20260730T120300Z-dddddddddddd"}}]}}"#
    ))
    .unwrap();
    let mut rows = launch(A, 0);
    rows.remove(4);
    rows.extend(launch(B, 10));
    let mut case = Case::new(rows);
    case.manifest = Some(manifest);
    let s = case.run();
    let missing: Vec<_> = s.findings_of(FindingCode::MissingExpected).collect();
    assert_eq!(missing.len(), 2);
    assert!(missing.iter().any(|f| f.client_instance_id.as_deref() == Some(A) && f.namespace == Some(Namespace::Reconciler)));
    let extra: Vec<_> = s.findings_of(FindingCode::Unmanifested).collect();
    assert_eq!(extra.len(), 1);
    assert_eq!(extra[0].client_instance_id.as_deref(), Some(B));
    assert_eq!(mutation_gate(&s, &id("wkr-author-0010")).reasons, vec![GateReason::UnmanifestedInstance]);
}

#[test]
fn the_gate_names_an_unregistered_or_released_worker() {
    let mut rows = launch(A, 0);
    rows[0].status = WorkerStatus::Released;
    let case = Case::new(rows);
    let s = case.run();
    assert_eq!(mutation_gate(&s, &id("wkr-nobody")).reasons, vec![GateReason::WorkerNotRegistered]);
    assert_eq!(mutation_gate(&s, &id("wkr-author-0000")).reasons, vec![GateReason::WorkerNotActive]);
}

#[test]
fn heartbeat_comparison_proves_continuity() {
    let first_case = Case::new(launch(A, 0));
    let first = first_case.run();
    let mut later_rows = launch(A, 0);
    for r in &mut later_rows {
        r.last_heartbeat_at = Some(at(105).to_string());
    }
    let second_case = Case::new(later_rows.clone());
    let second = second_case.run();
    let cmp = compare_snapshot_heartbeats(&first, &second);
    assert!(cmp.continuous);
    assert_eq!(cmp.advanced.len(), 5);
    later_rows[0].last_heartbeat_at = Some(at(100).to_string());
    let third_case = Case::new(later_rows);
    let third = third_case.run();
    let cmp = compare_snapshot_heartbeats(&first, &third);
    assert!(!cmp.continuous);
    assert_eq!(cmp.unchanged, vec![id("wkr-author-0000")]);
}

/// A snapshot kept as its JSON (a file from `fleetctl snapshot --json`) compares as the
/// snapshot itself does; JSON that is not a whole snapshot is refused by name.
#[test]
fn heartbeats_compare_the_same_from_a_snapshots_json() {
    let first_case = Case::new(launch(A, 0));
    let first = first_case.run();
    let mut later_rows = launch(A, 0);
    later_rows[1].last_heartbeat_at = Some(at(105).to_string());
    let second_case = Case::new(later_rows);
    let second = second_case.run();
    let kept = fleet_snapshot::LiveHeartbeats::from_json(&serde_json::to_string(&first).unwrap()).unwrap();
    assert_eq!(kept, fleet_snapshot::LiveHeartbeats::of(&first));
    assert_eq!(
        fleet_snapshot::compare_heartbeats(&kept, &fleet_snapshot::LiveHeartbeats::of(&second)),
        compare_snapshot_heartbeats(&first, &second)
    );
    let err =
        fleet_snapshot::LiveHeartbeats::from_json(r#"{"snapshot_at":"2026-07-30T12:00:00Z"}"#).unwrap_err();
    assert!(err.contains("workers"), "{err}");
}

/// Kept live heartbeats with some of them moved are the live heartbeats of a snapshot of
/// the rows with those heartbeats, as of the new time; the earlier kept value is not
/// touched, and a worker not among them is left out.
#[test]
fn kept_heartbeats_moved_are_those_of_the_moved_rows() {
    let first_case = Case::new(launch(A, 0));
    let first = first_case.run();
    let kept = fleet_snapshot::LiveHeartbeats::of(&first);
    let mut later_rows = launch(A, 0);
    later_rows[1].last_heartbeat_at = Some(at(105).to_string());
    later_rows[3].last_heartbeat_at = Some(at(106).to_string());
    let later_case = Case { now: at(107), ..Case::new(later_rows.clone()) };
    let later = later_case.run();
    let beats = [(1, 105), (3, 106)].map(|(i, secs)| (later_rows[i].worker_identity.as_str(), at(secs)));
    let ghost = [("wkr-nobody", at(106))];
    let moved = kept.moved_at(at(107), beats.into_iter().chain(ghost));
    assert_eq!(moved, fleet_snapshot::LiveHeartbeats::of(&later));
    assert_eq!(kept, fleet_snapshot::LiveHeartbeats::of(&first), "the kept value stays as it was");
    let cmp = fleet_snapshot::compare_heartbeats(&kept, &moved);
    assert_eq!(cmp.advanced.len(), 2, "{cmp:?}");
}

#[test]
fn the_consistency_token_moves_with_time_and_with_heartbeats() {
    let a_case = Case::new(launch(A, 0));
    let a = a_case.run();
    let b_case = Case { now: at(111), ..Case::new(launch(A, 0)) };
    let b = b_case.run();
    assert_ne!(a.consistency_token, b.consistency_token);
    assert_eq!(a.consistency_token, a.registry_revision);
    let mut rows = launch(A, 0);
    rows[2].last_heartbeat_at = Some(at(101).to_string());
    assert_ne!(Case::new(rows).run().consistency_token, a.consistency_token);
}

fn arbitrary_rows() -> impl Strategy<Value = Vec<WorkerRow>> {
    let statuses = prop_oneof![
        Just(WorkerStatus::Active),
        Just(WorkerStatus::Released),
        Just(WorkerStatus::Superseded),
        Just(WorkerStatus::Retired)
    ];
    prop::collection::vec((0usize..3, 0usize..5, 0u32..40, statuses, 60i64..140), 0..30).prop_map(|specs| {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (inst, ns, n, status, beat))| {
                let instance = [A, B, "legacy-pid-1"][inst];
                let mut row = worker(instance, Namespace::ALL[ns], n);
                row.worker_identity = WorkerIdentity::new(format!("wkr-{i}-{n}")).unwrap();
                row.status = status;
                row.last_heartbeat_at = Some(at(beat).to_string());
                row
            })
            .collect()
    })
}

proptest! {
    /// A reader that keeps the rows' share of the token gives the token a snapshot of
    /// the same rows would carry, at any time.
    #[test]
    fn kept_token_rows_give_the_snapshots_token(rows in arbitrary_rows(), secs in 0i64..1000) {
        let case = Case { now: at(secs), ..Case::new(rows.clone()) };
        prop_assert_eq!(fleet_snapshot::TokenRows::of(&rows).token_at(at(secs)), case.run().consistency_token);
    }

    /// Kept token rows brought up to date with moved heartbeats (written in the same
    /// format, or not, or removed) give the token of the rows as they are now, whatever
    /// the order the rows come in.
    #[test]
    fn kept_token_rows_follow_moved_heartbeats(
        rows in arbitrary_rows(),
        moves in prop::collection::vec((any::<prop::sample::Index>(), 0i64..3, 0i64..1000), 0..6),
        sorted in any::<bool>(),
    ) {
        let mut rows = rows;
        if sorted {
            rows.sort_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
        }
        let mut kept = fleet_snapshot::TokenRows::of(&rows);
        let mut places = Vec::new();
        let moves = if rows.is_empty() { &[][..] } else { &moves[..] };
        for &(place, form, secs) in moves {
            let i = place.index(rows.len());
            rows[i].last_heartbeat_at = match form {
                0 => Some(at(secs).to_string()),
                1 => Some(format!("{}.5Z", at(secs).to_string().trim_end_matches('Z'))),
                _ => None,
            };
            places.push(i);
        }
        kept.update(&rows, &places);
        prop_assert_eq!(kept.token_at(at(1)), fleet_snapshot::TokenRows::of(&rows).token_at(at(1)));
    }

    #[test]
    fn the_snapshot_does_not_depend_on_row_order(rows in arbitrary_rows(), seed in any::<u64>()) {
        let mut shuffled = rows.clone();
        // A deterministic shuffle from the seed.
        let n = shuffled.len();
        for i in (1..n).rev() {
            let j = (seed.wrapping_mul(6364136223846793005).wrapping_add(i as u64) % (i as u64 + 1)) as usize;
            shuffled.swap(i, j);
        }
        let (case, shuffled_case) = (Case::new(rows), Case::new(shuffled));
        prop_assert_eq!(case.run(), shuffled_case.run());
    }

    /// Rows that share an identity are ordered by their content, also when the rows
    /// come already in identity order (the pass that takes them as given must not keep
    /// their input order).
    #[test]
    fn rows_sharing_an_identity_give_one_snapshot_in_any_order(rows in arbitrary_rows(), shared in 1usize..4) {
        let mut rows = rows;
        for (i, row) in rows.iter_mut().enumerate() {
            row.worker_identity = WorkerIdentity::new(format!("wkr-shared-{}", i % shared)).unwrap();
        }
        let mut sorted = rows.clone();
        sorted.sort_by(|a, b| a.worker_identity.cmp(&b.worker_identity));
        let mut ties_reversed = sorted.clone();
        for run in ties_reversed.chunk_by_mut(|a, b| a.worker_identity == b.worker_identity) {
            run.reverse();
        }
        let (given, sorted, ties_reversed) = (Case::new(rows), Case::new(sorted), Case::new(ties_reversed));
        let expected = given.run();
        prop_assert_eq!(&sorted.run(), &expected);
        prop_assert_eq!(&ties_reversed.run(), &expected);
    }

    #[test]
    fn adding_a_historical_row_never_makes_a_safe_fleet_unsafe(rows in arbitrary_rows(), n in 100u32..200, ns in 0usize..5, released in any::<bool>()) {
        let before_case = Case::new(rows.clone());
        let before = before_case.run();
        let mut more = rows;
        let mut old = worker(A, Namespace::ALL[ns], n);
        old.worker_identity = WorkerIdentity::new(format!("wkr-historical-{n}")).unwrap();
        old.generation_id = Some(format!("gen-historical-{n}").parse().unwrap());
        old.status = if released { WorkerStatus::Released } else { WorkerStatus::Superseded };
        more.push(old);
        let after_case = Case::new(more);
        let after = after_case.run();
        prop_assert!(!before.live_fleet_safe || after.live_fleet_safe);
    }

    #[test]
    fn two_trusted_instances_sharing_client_type_and_profile_are_not_a_finding(ns in prop::collection::btree_set(0usize..5, 1..=5)) {
        let mut rows = Vec::new();
        for (k, i) in ns.iter().enumerate() {
            let k = u32::try_from(k).unwrap();
            let mut a = worker(A, Namespace::ALL[*i], k);
            let mut b = worker(B, Namespace::ALL[*i], 100 + k);
            a.profile = Some("shared".parse().unwrap());
            b.profile = Some("shared".parse().unwrap());
            rows.push(a);
            rows.push(b);
        }
        let case = Case::new(rows);
        let s = case.run();
        prop_assert!(s.findings.is_empty(), "{:?}", s.findings);
    }
}
