//! The conformance suite: the behaviour every registry backend must show. A backend runs
//! it from its own tests with [`registry_conformance!`](crate::registry_conformance),
//! passing an expression that opens a fresh, empty store.

use std::collections::HashMap;
use std::sync::Mutex;

use fleet_identity::{
    BootId, ClientInstanceId, ClientType, GenerationId, HostId, LegacyPlaceholder, Namespace, Pid,
    ProcessStartTime, SessionId, Timestamp,
};
use fleet_model::{Claim, LivenessProbe, ProcessIdentity, ProcessVerdict};

mod hosts;
mod leases;
mod live;
mod retire;
pub use hosts::{
    a_fenced_host_writes_nothing_and_its_rows_retire,
    a_later_boot_proves_an_earlier_one_gone_and_a_clone_proves_nothing,
};
use leases::{LeaseBeforeWrite, holder_process};
pub use leases::{
    a_lease_set_back_never_repeats_an_epoch, a_tenure_is_resumed_only_on_its_holders_host,
    audit_pages_select_as_the_whole_log_filtered_would, audit_retention_removes_only_what_it_names,
    connector_leases_are_insert_only_and_fenced, decisions_are_counted_as_they_are_written,
    grants_are_issued_and_validated_against_the_stored_lease, initialization_runs_once_per_version,
    workflow_leases_protect_their_owners,
};
pub use live::the_live_fleet_leaves_ended_launches_to_history;
pub use retire::{
    apply_goes_through_when_only_rows_outside_the_candidates_moved,
    apply_refuses_when_a_candidate_heartbeats, apply_refuses_when_a_candidate_process_is_back,
    apply_refuses_when_a_candidate_takes_a_workflow_lease,
    apply_refuses_when_a_new_row_changes_a_candidates_verdict,
    apply_requiring_the_whole_registry_refuses_any_movement,
    apply_retires_only_what_the_plan_and_the_probe_prove,
};

use crate::{
    HeartbeatTtl, InstanceRecord, InstanceRef, OwnershipState, Registration, RegistrationOutcome, Registry,
    RegistryDump, Revisions, Store, StoreError, StoreErrorKind, WorkerCredential, WorkerStatus, WorkerToken,
};

/// A liveness probe whose answers a test sets; unscripted processes are `unknown`.
#[derive(Debug, Default)]
pub struct ScriptedProbe {
    answers: Mutex<HashMap<ProcessIdentity, ProcessVerdict>>,
}

impl ScriptedProbe {
    /// Scripts the answer for `process`.
    pub fn set(&self, process: &ProcessIdentity, verdict: ProcessVerdict) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(process.clone(), verdict);
        }
    }
}

impl LivenessProbe for ScriptedProbe {
    fn probe(&self, process: &ProcessIdentity) -> ProcessVerdict {
        self.answers.lock().ok().and_then(|a| a.get(process).copied()).unwrap_or(ProcessVerdict::Unknown)
    }
}

/// `2026-07-30T12:00:00Z` plus `secs` seconds.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_millis((1_785_412_800 + secs) * 1000).expect("in range")
}

/// A process identity on a fixed test host.
pub fn process(pid: i64, start: u64) -> ProcessIdentity {
    ProcessIdentity {
        host_id: HostId::new("0123456789abcdef0123456789abcdef").expect("valid"),
        boot_id: BootId::new("11111111-2222-3333-4444-555555555555").expect("valid"),
        pid: Pid::new(pid).expect("valid"),
        process_start_time: ProcessStartTime::new(start).expect("valid"),
        pid_namespace: Some(fleet_identity::PidNamespace::new(4_026_531_836).expect("valid")),
    }
}

/// The test launch's instance ID.
pub fn instance() -> ClientInstanceId {
    ClientInstanceId::parse("inst-codex-20260730T120000Z-abc123def456").expect("valid")
}

/// A registration of `namespace` in the test launch from `process`.
pub fn registration(namespace: Namespace, process: ProcessIdentity, generation: &str) -> Registration {
    Registration {
        client_type: ClientType::new("codex").expect("valid"),
        instance: InstanceRef::Minted(instance()),
        instance_provenance: Some("trusted_launcher".into()),
        fleet_run_id: None,
        namespace,
        profile: None,
        session_id: Some(SessionId::new("sess-1").expect("valid")),
        generation_id: GenerationId::new(generation).expect("valid"),
        process,
        repository: None,
        heartbeat_ttl: HeartbeatTtl::from_secs(30).expect("valid"),
        revisions: Revisions::default(),
        claim: Claim::Owned,
        hostname: Some("test-host".into()),
    }
}

fn token(n: u8) -> WorkerToken {
    WorkerToken::from_bytes([n; 32])
}

fn credential(reg: &crate::Registered, generation: &str, n: u8) -> WorkerCredential {
    WorkerCredential {
        worker_identity: reg.row.worker_identity.clone(),
        generation_id: GenerationId::new(generation).expect("valid"),
        token: token(n),
    }
}

fn ledger_entry() -> InstanceRecord {
    InstanceRecord {
        client_instance_id: instance(),
        client_type: ClientType::new("codex").expect("valid"),
        fleet_run_id: None,
        minted_at: at(0),
        host_id: None,
    }
}

/// The ledger records a minted ID once; recording it again is a conflict.
pub fn ledger_records_each_id_once<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    registry.record_instance(&ledger_entry()).expect("record");
    assert_eq!(registry.instance(&instance()).expect("read"), Some(ledger_entry()));
    let again = registry.record_instance(&ledger_entry()).expect_err("duplicate");
    assert_eq!(again.kind(), StoreErrorKind::Conflict);
    assert_eq!(registry.instances().expect("read").len(), 1);
}

/// A new registration writes an active, owned row carrying every identity it was given.
pub fn registration_writes_the_whole_row<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let p = process(100, 5000);
    let reg = registry
        .register(&registration(Namespace::Author, p.clone(), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    assert_eq!(reg.outcome, RegistrationOutcome::Registered);
    let rows = registry.workers().expect("read");
    assert_eq!(rows, vec![reg.row.clone()]);
    let row = &rows[0];
    assert!(row.worker_identity.as_str().starts_with("wkr-author-"));
    assert_eq!(row.client_instance_id.as_deref(), Some(instance().as_str()));
    assert_eq!(row.status, WorkerStatus::Active);
    assert_eq!(row.ownership_state, Some(OwnershipState::Owned));
    assert_eq!(row.pid, Some(p.pid));
    assert_eq!(row.process_start_time, Some(p.process_start_time));
    assert_eq!(row.heartbeat_ttl_s, Some(30));
    assert_eq!(row.fencing_epoch, Some(1));
    assert_eq!(row.token_fingerprint.as_deref(), Some(token(1).fingerprint()));
}

/// The same process registering again keeps its row; a new process gets a new identity
/// and a higher fencing epoch under the same instance.
pub fn reconnect_keeps_and_restart_renews_the_identity<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let first = registry
        .register(&registration(Namespace::Merger, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let again = registry
        .register(&registration(Namespace::Merger, process(100, 5000), "gen-a"), &token(2), at(5), &probe)
        .expect("reconnect");
    assert_eq!(again.outcome, RegistrationOutcome::Reconnected);
    assert_eq!(again.row.worker_identity, first.row.worker_identity);
    assert_eq!(registry.workers().expect("read").len(), 1);

    probe.set(&process(100, 5000), ProcessVerdict::Gone);
    let restarted = registry
        .register(&registration(Namespace::Merger, process(200, 7000), "gen-b"), &token(3), at(10), &probe)
        .expect("restart");
    assert_eq!(restarted.outcome, RegistrationOutcome::Registered);
    assert_ne!(restarted.row.worker_identity, first.row.worker_identity);
    assert_eq!(restarted.row.client_instance_id, first.row.client_instance_id);
    assert_eq!(restarted.row.fencing_epoch, Some(2));
    assert_eq!(restarted.superseded, vec![first.row.worker_identity.clone()]);
    let old = registry
        .workers()
        .expect("read")
        .into_iter()
        .find(|r| r.worker_identity == first.row.worker_identity);
    assert_eq!(old.map(|r| r.status), Some(WorkerStatus::Superseded));
}

/// An earlier row whose process may still be alive is never superseded.
pub fn a_possibly_live_predecessor_is_not_superseded<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let second = registry
        .register(&registration(Namespace::Author, process(101, 5001), "gen-b"), &token(2), at(1), &probe)
        .expect("register");
    assert!(second.superseded.is_empty());
    let active =
        registry.workers().expect("read").iter().filter(|r| r.status == WorkerStatus::Active).count();
    assert_eq!(active, 2);
}

/// Heartbeats move `last_heartbeat_at`; a wrong token or generation is refused.
pub fn heartbeats_need_the_registering_credential<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let reg = registry
        .register(&registration(Namespace::Reviewer, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    registry.heartbeat(&credential(&reg, "gen-a", 1), at(7)).expect("heartbeat");
    let row = registry.workers().expect("read").remove(0);
    assert_eq!(row.heartbeat(), Some(at(7)));

    let forged = registry.heartbeat(&credential(&reg, "gen-a", 9), at(8)).expect_err("forged");
    assert_eq!(forged.kind(), StoreErrorKind::Conflict);
    let other_generation = registry.heartbeat(&credential(&reg, "gen-z", 1), at(8)).expect_err("generation");
    assert_eq!(other_generation.kind(), StoreErrorKind::Conflict);
    assert_eq!(registry.workers().expect("read").remove(0).heartbeat(), Some(at(7)));
}

/// Release ends a registration; a released row takes no heartbeat.
pub fn release_ends_the_registration<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let reg = registry
        .register(&registration(Namespace::Controller, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let released = registry.release(&credential(&reg, "gen-a", 1), at(3)).expect("release");
    assert_eq!(released.status, WorkerStatus::Released);
    let err = registry.heartbeat(&credential(&reg, "gen-a", 1), at(4)).expect_err("released");
    assert_eq!(err.kind(), StoreErrorKind::NotFound);
    let again = registry.release(&credential(&reg, "gen-a", 1), at(5)).expect_err("twice");
    assert_eq!(again.kind(), StoreErrorKind::NotFound);
}

/// The sweep marks only rows whose TTL lapsed; a heartbeat makes a stale row owned again.
pub fn the_sweep_marks_only_expired_rows_stale<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let quiet = registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let busy = registry
        .register(&registration(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");
    registry.heartbeat(&credential(&busy, "gen-b", 2), at(20)).expect("heartbeat");

    assert!(registry.mark_expired_stale(at(30)).expect("sweep").is_empty(), "ttl is not yet exceeded");
    let marked = registry.mark_expired_stale(at(31)).expect("sweep");
    assert_eq!(marked, vec![quiet.row.worker_identity.clone()]);
    let row = |r: &mut Registry<S>, id| {
        r.workers().expect("read").into_iter().find(|w| &w.worker_identity == id).expect("row")
    };
    let stale = row(&mut registry, &quiet.row.worker_identity);
    assert_eq!((stale.status, stale.ownership_state), (WorkerStatus::Active, Some(OwnershipState::Stale)));

    registry.heartbeat(&credential(&quiet, "gen-a", 1), at(32)).expect("late heartbeat");
    assert_eq!(row(&mut registry, &quiet.row.worker_identity).ownership_state, Some(OwnershipState::Owned));
}

/// A sweep of more due rows than one of its write transactions marks marks every one
/// of them, batch after batch, and none of the rows that heartbeated in time.
pub fn a_sweep_of_many_batches_marks_every_due_row<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let due = 2 * crate::SWEEP_BATCH + 3;
    let mut quiet = Vec::new();
    let mut busy = Vec::new();
    for n in 0..due + 5 {
        let pid = 1000 + i64::try_from(n).expect("small");
        let reg = registry
            .register(
                &registration(Namespace::ALL[n % 5], process(pid, 9000 + n as u64), "gen-a"),
                &token(1),
                at(0),
                &probe,
            )
            .expect("register");
        if n < due {
            quiet.push(reg.row.worker_identity);
        } else {
            registry.heartbeat(&credential(&reg, "gen-a", 1), at(20)).expect("heartbeat");
            busy.push(reg.row.worker_identity);
        }
    }
    let mut marked = registry.mark_expired_stale(at(31)).expect("sweep");
    marked.sort();
    quiet.sort();
    assert_eq!(marked, quiet, "every due row, once");
    let rows = registry.workers().expect("read");
    for row in rows.iter().filter(|r| busy.contains(&r.worker_identity)) {
        assert_eq!(row.ownership_state, Some(OwnershipState::Owned), "{}", row.worker_identity);
    }
    assert!(registry.mark_expired_stale(at(31)).expect("sweep again").is_empty(), "nothing is due twice");
}

/// The rows a sweep marks are exactly those the rule says are due, whatever form their
/// heartbeat is written in: a store that reads only the rows it finds lapsed misses
/// none a millisecond past the boundary, marks none at it, and leaves a form it cannot
/// compare to the rule.
pub fn a_sweep_marks_exactly_the_due_rows_in_any_heartbeat_form<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let template = registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register")
        .row;
    let now = at(100);
    let millis = |ms: i64| Timestamp::from_unix_millis(now.unix_millis() - ms).expect("in range").to_string();
    // (heartbeat text, ttl, status, ownership): due or not is the rule's to say.
    type Case = (Option<String>, Option<u32>, WorkerStatus, Option<OwnershipState>);
    let cases: Vec<Case> = vec![
        (Some(millis(30_000)), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some(millis(30_001)), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some(millis(29_999)), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some(millis(1_001)), Some(1), WorkerStatus::Active, Some(OwnershipState::Orphaned)),
        (Some(millis(86_400_001)), Some(86_400), WorkerStatus::Active, None),
        (Some("2026-07-30T12:01:09Z".into()), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some("2026-07-30T12:01:10Z".into()), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some("2026-07-30T12:01:09.9Z".into()), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (
            Some("2026-07-30T14:01:09.5+02:00".into()),
            Some(30),
            WorkerStatus::Active,
            Some(OwnershipState::Owned),
        ),
        (
            Some("2026-07-30T14:01:10+02:00".into()),
            Some(30),
            WorkerStatus::Active,
            Some(OwnershipState::Owned),
        ),
        (
            Some("2026-07-30T14:01:10.001+02:00".into()),
            Some(30),
            WorkerStatus::Active,
            Some(OwnershipState::Owned),
        ),
        (Some("not a time".into()), Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (None, Some(30), WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some(millis(60_000)), None, WorkerStatus::Active, Some(OwnershipState::Owned)),
        (Some(millis(60_000)), Some(30), WorkerStatus::Active, Some(OwnershipState::Stale)),
        (Some(millis(60_000)), Some(30), WorkerStatus::Released, None),
        (Some(millis(60_000)), Some(30), WorkerStatus::Retired, None),
    ];
    let rows: Vec<fleet_model::WorkerRow> = cases
        .into_iter()
        .enumerate()
        .map(|(n, (beat, ttl, status, ownership))| {
            let mut row = template.clone();
            row.worker_identity =
                fleet_identity::WorkerIdentity::new(format!("wkr-form-{n:02}")).expect("valid");
            row.pid = Some(Pid::new(2000 + n as i64).expect("valid"));
            row.last_heartbeat_at = beat;
            row.heartbeat_ttl_s = ttl;
            row.status = status;
            row.ownership_state = ownership;
            row
        })
        .collect();
    registry.import(&RegistryDump { instances: Vec::new(), worker_registrations: rows }).expect("import");
    let mut expected: Vec<_> = (registry.workers().expect("read").into_iter())
        .filter(|r| crate::registry::due_for_sweep(r, now))
        .map(|r| r.worker_identity)
        .collect();
    assert_eq!(
        expected.iter().filter_map(|id| id.as_str().strip_prefix("wkr-form-")).collect::<Vec<_>>(),
        ["01", "03", "04", "05", "07", "08"],
        "the cases span both sides of the boundary in every form"
    );
    let mut marked = registry.mark_expired_stale(now).expect("sweep");
    marked.sort();
    expected.sort();
    assert_eq!(marked, expected);
}

/// A worker's claim is recorded at registration and on each heartbeat: unowned outside
/// any launch, orphaned once its launch's client is gone. Whatever it claimed, a lapsed
/// heartbeat makes the row stale, and a late heartbeat writes the claim again.
pub fn claims_are_recorded_and_any_lapsed_claim_goes_stale<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let outside = Registration {
        claim: Claim::Unowned,
        ..registration(Namespace::Author, process(100, 5000), "gen-a")
    };
    let outside = registry.register(&outside, &token(1), at(0), &probe).expect("register");
    assert_eq!(outside.row.ownership_state, Some(OwnershipState::Unowned));
    let launched = registry
        .register(&registration(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");
    let row = |r: &mut Registry<S>, id| {
        r.workers().expect("read").into_iter().find(|w| &w.worker_identity == id).expect("row")
    };
    registry
        .heartbeat_claiming(&credential(&launched, "gen-b", 2), at(5), Claim::Orphaned)
        .expect("heartbeat");
    let orphan = row(&mut registry, &launched.row.worker_identity);
    assert_eq!((orphan.ownership_state, orphan.heartbeat()), (Some(OwnershipState::Orphaned), Some(at(5))));

    let marked = registry.mark_expired_stale(at(40)).expect("sweep");
    assert_eq!(marked.len(), 2, "unowned and orphaned rows lapse to stale too: {marked:?}");
    registry
        .heartbeat_claiming(&credential(&outside, "gen-a", 1), at(41), Claim::Unowned)
        .expect("late heartbeat");
    assert_eq!(
        row(&mut registry, &outside.row.worker_identity).ownership_state,
        Some(OwnershipState::Unowned)
    );
}

/// A registration whose instance was minted for another client is refused.
pub fn a_client_type_mismatch_is_refused<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let mut reg = registration(Namespace::Author, process(100, 5000), "gen-a");
    reg.client_type = ClientType::new("gemini").expect("valid");
    let err = registry.register(&reg, &token(1), at(0), &ScriptedProbe::default()).expect_err("mismatch");
    assert_eq!(err.kind(), StoreErrorKind::Invalid);
    assert!(registry.workers().expect("read").is_empty());
}

/// A legacy placeholder registers as written, so the snapshot can report it.
pub fn legacy_placeholders_register_as_written<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let mut reg = registration(Namespace::Author, process(100, 5000), "gen-a");
    reg.instance = InstanceRef::Legacy(LegacyPlaceholder::parse("legacy-pid-100").expect("placeholder"));
    let done = registry.register(&reg, &token(1), at(0), &ScriptedProbe::default()).expect("register");
    assert_eq!(done.row.client_instance_id.as_deref(), Some("legacy-pid-100"));
}

/// Export then import into an empty store gives the same registry.
pub fn export_and_import_round_trip<S: Store>(source: S, target: S) {
    let mut registry = Registry::new(source);
    let probe = ScriptedProbe::default();
    registry.record_instance(&ledger_entry()).expect("record");
    for (i, ns) in Namespace::ALL.into_iter().enumerate() {
        let n = i64::try_from(i).expect("small");
        registry
            .register(
                &registration(ns, process(100 + n, 5000), &format!("gen-{i}")),
                &token(1),
                at(0),
                &probe,
            )
            .expect("register");
    }
    // Every kind of lease, with its audit log: an initialization version, a connector
    // binding (taken over once), a workflow lease.
    use fleet_lease::{InitDecision, LeaseKind};
    let init = lkey("init:schema");
    let InitDecision::Run(run) = registry.init_start(&init, 3, "proc-a", SHORT).expect("store") else {
        panic!("the first starter runs")
    };
    registry.init_finish(&init, &run.holder(), Ok(())).expect("store").expect("ready");
    let identity = fleet_lease::ConnectorIdentity::new("acme", "agent", "slack").expect("valid");
    let scopes = vec!["chat.read".to_owned()];
    let holding = holder_process("0123456789abcdef0123456789abcdef", 4242);
    let acquire = crate::ConnectorRequest::Acquire {
        connector: "conn-a",
        scopes: &scopes,
        ttl: SHORT,
        process: Some(&holding),
    };
    registry
        .connector_lease(&identity, acquire, fleet_lease::GrantLimits::default(), &AllowAll, &ctx())
        .expect("store")
        .expect("acquired");
    registry
        .acquire_lease(&lkey("workflow:deploy"), LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx())
        .expect("store")
        .expect("acquired");

    let dump = registry.export().expect("export");
    let backup = registry.backup().expect("backup");
    assert_eq!(backup.registry, dump);
    assert_eq!(backup.leases.len(), 3);
    assert!(backup.lease_audit_log.len() >= 4, "{:?}", backup.lease_audit_log);
    let text = backup.to_json();
    let mut copy = Registry::new(target);
    let summary = copy.restore(&crate::RegistryBackup::from_json(&text).expect("parse")).expect("restore");
    assert_eq!((summary.instances, summary.workers, summary.leases), (1, 5, 3));
    assert_eq!(summary.audit_entries, backup.lease_audit_log.len());
    let restored = copy.backup().expect("backup");
    assert_eq!(restored.registry, dump);
    assert_eq!(restored.leases, backup.leases, "every init version and binding survives");
    assert!(restored.leases.iter().any(|l| l.holder_process.as_ref() == Some(&holding)), "and who holds it");
    let without_ids = |log: &[crate::AuditEntry]| -> Vec<crate::AuditEntry> {
        log.iter().map(|e| crate::AuditEntry { id: 0, ..e.clone() }).collect()
    };
    assert_eq!(without_ids(&restored.lease_audit_log), without_ids(&backup.lease_audit_log));
    assert_eq!(copy.init_start(&init, 3, "proc-z", SHORT).expect("store"), InitDecision::Ready);
    let again = copy.restore(&backup).expect_err("a second restore");
    assert_eq!(again.kind(), StoreErrorKind::Conflict, "the rows are held already: nothing written twice");
    // An older export, without leases, still imports.
    let older = RegistryDump::from_json(&dump.to_json()).expect("parse");
    assert_eq!(crate::RegistryBackup::from_json(&dump.to_json()).expect("parse").registry, older);
}

/// An import that clashes with a row already held writes nothing at all.
pub fn a_failed_import_writes_nothing<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let held = registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let before = registry.export().expect("export");
    let mut fresh = held.row.clone();
    fresh.worker_identity = fleet_identity::WorkerIdentity::new("wkr-fresh").expect("valid");
    let dump =
        RegistryDump { instances: vec![ledger_entry()], worker_registrations: vec![fresh, held.row.clone()] };
    let err = registry.import(&dump).expect_err("conflict");
    assert_eq!(err.kind(), StoreErrorKind::Conflict);
    assert_eq!(registry.export().expect("export"), before);
}

/// A write transaction whose body fails leaves nothing behind.
pub fn a_failed_write_rolls_back<S: Store>(mut store: S) {
    let result: Result<(), StoreError> = store.write(|tx| {
        tx.insert_instance(&ledger_entry())?;
        Err(StoreError::invalid("abandon"))
    });
    assert!(result.is_err());
    let mut registry = Registry::new(store);
    assert!(registry.instances().expect("read").is_empty());
}

fn lkey(s: &str) -> fleet_lease::LeaseKey {
    fleet_lease::LeaseKey::new(s).expect("valid")
}

fn ctx() -> crate::AuditContext {
    crate::AuditContext { correlation_id: Some("corr-1".into()), binding: None }
}

/// A lease short enough to let lapse in a test, long enough that the steps before its
/// lapse finish inside it on a loaded two-core machine.
const SHORT: time::Duration = time::Duration::milliseconds(1000);

/// Waits until a lease of [`SHORT`] has lapsed on the store's clock.
fn lapse() {
    std::thread::sleep(std::time::Duration::from_millis(1100));
}

/// Pruning removes only terminal rows last seen before the cutoff, each only if it is
/// still as it was read; active rows stay whatever their age.
pub fn pruning_removes_only_old_terminal_rows<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    let old = registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    registry.release(&credential(&old, "gen-a", 1), at(10)).expect("release");
    let recent = registry
        .register(&registration(Namespace::Merger, process(102, 5002), "gen-c"), &token(3), at(0), &probe)
        .expect("register");
    registry.release(&credential(&recent, "gen-c", 3), at(500)).expect("release");
    let active = registry
        .register(&registration(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");

    let prunable = registry.prunable(at(100)).expect("read");
    let ids: Vec<_> = prunable.iter().map(|r| r.worker_identity.clone()).collect();
    assert_eq!(ids, vec![old.row.worker_identity.clone()], "only the old released row");
    // A row that changed since it was read is not deleted on the stale reading.
    let mut stale_reading = prunable.clone();
    stale_reading[0].retired_by = Some("someone".into());
    assert!(registry.prune(&stale_reading).expect("prune").is_empty());
    // Active rows are never pruned, even when handed in.
    let everything = registry.workers().expect("read");
    let pruned = registry.prune(&everything).expect("prune");
    assert_eq!(pruned.len(), 2, "both released rows, none active");
    let left: Vec<_> = registry.workers().expect("read").into_iter().map(|r| r.worker_identity).collect();
    assert_eq!(left, vec![active.row.worker_identity.clone()]);
}

/// `workers_page` walks every row once, in the bytewise identity order every reader
/// uses (`B` before `a`, `-` before digits, whatever the database's collation), a page
/// at a time; a page past the last row is empty.
pub fn worker_pages_walk_every_row_once_in_identity_order<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let ids = ["wkr-a-10", "wkr-a-2", "wkr-B-1", "wkr-a-1", "wkr-a_1", "wkr-a-1-x", "wkr-Z", "wkr-b"];
    let rows: Vec<fleet_model::WorkerRow> = ids
        .iter()
        .map(|id| {
            serde_json::from_value(serde_json::json!({
                "worker_identity": id, "namespace": "author", "status": "released",
                "registered_at": at(0).to_string(),
            }))
            .expect("a row")
        })
        .collect();
    registry.import(&RegistryDump { instances: Vec::new(), worker_registrations: rows }).expect("import");
    let mut expected: Vec<&str> = ids.to_vec();
    expected.sort_unstable();
    let whole: Vec<String> =
        registry.workers().expect("read").into_iter().map(|r| r.worker_identity.to_string()).collect();
    assert_eq!(whole, expected, "the whole read's order");
    for size in [1, 3, 8, 100] {
        let mut walked = Vec::new();
        let mut after = None;
        loop {
            let page = registry.workers_page(after.as_ref(), size).expect("page");
            assert!(page.len() <= size);
            let Some(last) = page.last() else { break };
            after = Some(last.worker_identity.clone());
            walked.extend(page.into_iter().map(|r| r.worker_identity.to_string()));
        }
        assert_eq!(walked, expected, "pages of {size}");
    }
}

/// The change marker moves with every commit that changes what a live read returns
/// (a registration, a heartbeat, a release, the last release of a launch) and with
/// nothing that writes nothing (a read, a refused heartbeat). A commit the live read
/// does not see (a ledger entry of a launch with no rows yet, history pruned) may move
/// it or not.
pub fn the_change_marker_moves_with_every_commit<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let Some(mut last) = registry.store_mut().change_marker().expect("marker") else {
        return; // This store cannot tell; its readers read every time.
    };
    let mut moved = |registry: &mut Registry<S>, what: &str, expected: Option<bool>| {
        let now = registry.store_mut().change_marker().expect("marker").expect("a marker once");
        if let Some(expected) = expected {
            assert_eq!(now != last, expected, "{what}");
        }
        last = now;
    };
    moved(&mut registry, "nothing committed", Some(false));
    registry.record_instance(&ledger_entry()).expect("record");
    moved(&mut registry, "a ledger entry", None);
    let probe = ScriptedProbe::default();
    let reg = registry
        .register(&registration(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    moved(&mut registry, "a registration", Some(true));
    let other = registry
        .register(&registration(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");
    moved(&mut registry, "a second registration", Some(true));
    registry.workers().expect("read");
    moved(&mut registry, "a read", Some(false));
    registry.heartbeat(&credential(&reg, "gen-a", 1), at(7)).expect("heartbeat");
    moved(&mut registry, "a heartbeat", Some(true));
    registry.heartbeat(&credential(&reg, "gen-a", 9), at(8)).expect_err("forged");
    moved(&mut registry, "a refused heartbeat", Some(false));
    registry.release(&credential(&reg, "gen-a", 1), at(10)).expect("release");
    moved(&mut registry, "a release", Some(true));
    registry.release(&credential(&other, "gen-b", 2), at(11)).expect("release");
    moved(&mut registry, "the launch's last release", Some(true));
    let live = registry.live().expect("live");
    let everything = registry.workers().expect("read");
    assert_eq!(registry.prune(&everything).expect("prune").len(), 2);
    moved(&mut registry, "history pruned", None);
    assert_eq!(registry.live().expect("live"), live, "pruning history leaves the live fleet as it was");
}

/// A reader that keeps its rows and reads only what changed since
/// ([`Registry::read_since`]) holds, after every kind of write, exactly what a full read
/// returns, and is told truly which rows stayed the same and which reads moved
/// heartbeats alone. A store that keeps a history reads one row for one heartbeat,
/// nothing when nothing changed, and everything once a row is removed.
pub fn reading_since_a_position_sees_what_a_full_read_sees<S: Store>(store: S) {
    use crate::RegistryChanges;

    let mut registry = Registry::new(store);
    let first = registry.read_since(None).expect("read");
    let history = first.mark.is_some();
    let mut kept = RegistryDump::default();
    let (mut position, _) = first.apply(&mut kept);
    // Reads what changed, checks it against a full read, and returns how many worker
    // rows were read (None: everything) and whether the ledger was, and the places of the
    // rows whose heartbeat alone moved, when that is all that changed.
    let mut follow = |registry: &mut Registry<S>, what: &str| {
        let read = registry.read_since(position.take()).expect("read");
        let read_rows = match &read.changes {
            RegistryChanges::Everything(_) => None,
            RegistryChanges::Since { workers, instances } => Some((workers.len(), instances.is_some())),
        };
        let before = kept.clone();
        let beats = read.changes.heartbeats_only(&before);
        let (mark, origins) = read.apply(&mut kept);
        position = mark;
        assert_eq!(kept, registry.export().expect("export").live(), "after {what}");
        assert_eq!(kept, registry.live().expect("live"), "after {what}: the live read");
        assert_eq!(origins.len(), kept.worker_registrations.len(), "{what}");
        for (row, origin) in kept.worker_registrations.iter().zip(&origins) {
            if let Some(origin) = origin {
                assert_eq!(Some(row), before.worker_registrations.get(*origin), "{what}: a kept row");
            }
        }
        for &i in beats.iter().flatten() {
            let (then, now) = (&before.worker_registrations[i], &kept.worker_registrations[i]);
            assert!(then.differs_only_in_heartbeat(now), "{what}: a heartbeat alone moved");
        }
        (read_rows, beats)
    };
    let probe = ScriptedProbe::default();
    registry.record_instance(&ledger_entry()).expect("record");
    let (ledger, ledger_beats) = follow(&mut registry, "a ledger entry");
    let mut held = Vec::new();
    for (i, ns) in [Namespace::Author, Namespace::Reviewer, Namespace::Merger].into_iter().enumerate() {
        let n = i64::try_from(i).expect("small");
        let generation = format!("gen-{i}");
        let reg = registry
            .register(&registration(ns, process(100 + n, 5000), &generation), &token(1), at(0), &probe)
            .expect("register");
        held.push((reg, generation));
    }
    let (registrations, registration_beats) = follow(&mut registry, "three registrations");
    let (nothing, no_beats) = follow(&mut registry, "nothing");
    registry.heartbeat(&credential(&held[1].0, &held[1].1, 1), at(7)).expect("heartbeat");
    let (heartbeat, beaten) = follow(&mut registry, "a heartbeat");
    registry.release(&credential(&held[0].0, &held[0].1, 1), at(8)).expect("release");
    let (_, release_beats) = follow(&mut registry, "a release");
    assert_eq!(release_beats, None, "a release is more than a heartbeat");
    assert_eq!(registration_beats, None, "new rows are more than heartbeats");
    // A launch with no rows yet is not in the live fleet: a store that reads whole sees
    // nothing move, one that follows its history reads the ledger again.
    assert!(ledger_beats.is_none_or(|b| b.is_empty()), "a ledger entry moves no heartbeat");
    registry.sweep(at(3600)).expect("sweep");
    follow(&mut registry, "a sweep");
    // An imported row whose identity sorts before every other: the rows kept move.
    let mut imported = held[2].0.row.clone();
    imported.worker_identity = fleet_identity::WorkerIdentity::new("wkr-000-imported").expect("valid");
    registry
        .import(&RegistryDump { instances: Vec::new(), worker_registrations: vec![imported] })
        .expect("import");
    let (import, _) = follow(&mut registry, "an import");
    let everything = registry.workers().expect("read");
    assert_eq!(registry.prune(&everything).expect("prune").len(), 1, "the released row");
    let (prune, prune_beats) = follow(&mut registry, "a pruned row");
    assert_eq!(prune_beats, None);
    // Read as a history or read whole, a heartbeat is told from every other write.
    assert_eq!(no_beats, Some(Vec::new()), "nothing moved");
    assert_eq!(beaten.map(|b| b.len()), Some(1), "the heartbeat of one row moved, nothing else");
    if history {
        assert_eq!(ledger, Some((0, true)), "a ledger entry reads the ledger and no row");
        assert_eq!(registrations, Some((3, true)), "three new rows read, and the ledger their launch joins");
        assert_eq!(nothing, Some((0, false)), "nothing read");
        assert_eq!(heartbeat, Some((1, false)), "one heartbeat, one row read");
        assert_eq!(import, Some((1, false)), "one imported row read");
        assert_eq!(prune, None, "a removal reads everything");
    }
}

/// A connector policy that allows everything, for tests of the lease rules behind it.
#[derive(Debug)]
pub struct AllowAll;

impl fleet_lease::ConnectorPolicy for AllowAll {
    fn authorize_lease(
        &self,
        _: &fleet_lease::ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<time::Duration>,
    ) -> fleet_lease::PolicyDecision {
        fleet_lease::PolicyDecision::Allow
    }

    fn authorize_grant(
        &self,
        _: &fleet_lease::ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<time::Duration>,
    ) -> fleet_lease::PolicyDecision {
        fleet_lease::PolicyDecision::Allow
    }
}

/// Where the apply cases run retirement: the test host and boot, the test repository.
fn retirement_context(now: Timestamp) -> fleet_retirement::RetirementContext {
    let here = process(1, 1);
    fleet_retirement::RetirementContext {
        host_id: here.host_id,
        boot_id: Some(here.boot_id),
        canonical_repository: repository(),
        now,
    }
}

fn repository() -> fleet_identity::Repository {
    fleet_identity::Repository::new("/srv/repo").expect("valid")
}

/// Generates one `#[test]` per conformance case; `$open` must yield a fresh empty store.
/// With `skip_unless = COND`, each case runs only when `COND` holds (a backend whose
/// server may be absent on a developer's machine) and says so when it skips.
#[macro_export]
macro_rules! registry_conformance {
    ($open:expr) => {
        $crate::registry_conformance!(skip_unless = true, $open);
    };
    (skip_unless = $cond:expr, $open:expr) => {
        mod registry_conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;

            $crate::registry_conformance!(@cases $cond, $open;
                ledger_records_each_id_once,
                registration_writes_the_whole_row,
                reconnect_keeps_and_restart_renews_the_identity,
                a_possibly_live_predecessor_is_not_superseded,
                heartbeats_need_the_registering_credential,
                release_ends_the_registration,
                the_sweep_marks_only_expired_rows_stale,
                a_sweep_of_many_batches_marks_every_due_row,
                a_sweep_marks_exactly_the_due_rows_in_any_heartbeat_form,
                claims_are_recorded_and_any_lapsed_claim_goes_stale,
                a_client_type_mismatch_is_refused,
                legacy_placeholders_register_as_written,
                a_failed_import_writes_nothing,
                a_failed_write_rolls_back,
                connector_leases_are_insert_only_and_fenced,
                a_tenure_is_resumed_only_on_its_holders_host,
                workflow_leases_protect_their_owners,
                a_lease_set_back_never_repeats_an_epoch,
                audit_pages_select_as_the_whole_log_filtered_would,
                audit_retention_removes_only_what_it_names,
                decisions_are_counted_as_they_are_written,
                initialization_runs_once_per_version,
                apply_retires_only_what_the_plan_and_the_probe_prove,
                apply_goes_through_when_only_rows_outside_the_candidates_moved,
                apply_requiring_the_whole_registry_refuses_any_movement,
                apply_refuses_when_a_candidate_heartbeats,
                apply_refuses_when_a_candidate_process_is_back,
                apply_refuses_when_a_candidate_takes_a_workflow_lease,
                apply_refuses_when_a_new_row_changes_a_candidates_verdict,
                grants_are_issued_and_validated_against_the_stored_lease,
                pruning_removes_only_old_terminal_rows,
                worker_pages_walk_every_row_once_in_identity_order,
                the_change_marker_moves_with_every_commit,
                reading_since_a_position_sees_what_a_full_read_sees,
                the_live_fleet_leaves_ended_launches_to_history,
                a_fenced_host_writes_nothing_and_its_rows_retire,
                a_later_boot_proves_an_earlier_one_gone_and_a_clone_proves_nothing
            );

            #[test]
            fn export_and_import_round_trip() {
                if $cond {
                    c::export_and_import_round_trip($open, $open)
                } else {
                    eprintln!("skipped: export_and_import_round_trip");
                }
            }
        }
    };
    (@cases $cond:expr, $open:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                if $cond {
                    c::$case($open)
                } else {
                    eprintln!("skipped: {}", stringify!($case));
                }
            }
        )*
    };
}
