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
mod live;
pub use hosts::{
    a_fenced_host_writes_nothing_and_its_rows_retire,
    a_later_boot_proves_an_earlier_one_gone_and_a_clone_proves_nothing,
};
pub use live::the_live_fleet_leaves_ended_launches_to_history;

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

/// Connector leases: insert-only acquisition, `lease_held`, `takeover_required`, then a
/// takeover by epoch that fences the old holder. Every operation passes the policy: the
/// generic lease calls, which carry none, are refused as the default policy refuses.
pub fn connector_leases_are_insert_only_and_fenced<S: Store>(store: S) {
    use crate::ConnectorRequest as Req;
    use fleet_lease::{FencingEpoch, GrantLimits, LeaseDenial, LeaseKind};
    let mut registry = Registry::new(store);
    let identity = fleet_lease::ConnectorIdentity::new("acme", "agent", "slack").expect("valid");
    let key = identity.lease_key();
    let scopes = vec!["chat.read".to_owned()];
    let limits = GrantLimits::default();
    let op = |registry: &mut Registry<S>, request: Req<'_>| {
        registry.connector_lease(&identity, request, limits, &AllowAll, &ctx()).expect("store")
    };
    let acquire = |connector| Req::Acquire { connector, scopes: &scopes, ttl: SHORT, process: None };
    let take_over = |expected_epoch, connector| Req::TakeOver {
        expected_epoch,
        connector,
        scopes: &scopes,
        ttl: SHORT,
        process: None,
    };
    let first = op(&mut registry, acquire("conn-a")).expect("acquired");
    assert_eq!(first.fencing_epoch, FencingEpoch::FIRST);
    assert_eq!(op(&mut registry, acquire("conn-b")).unwrap_err(), LeaseDenial::LeaseHeld);
    assert_eq!(
        op(&mut registry, take_over(FencingEpoch::FIRST, "conn-b")).unwrap_err(),
        LeaseDenial::LeaseLive
    );
    lapse();
    assert_eq!(op(&mut registry, acquire("conn-b")).unwrap_err(), LeaseDenial::TakeoverRequired);
    let five = FencingEpoch::new(5).expect("valid");
    assert_eq!(op(&mut registry, take_over(five, "conn-b")).unwrap_err(), LeaseDenial::EpochMismatch);
    let second = op(&mut registry, take_over(FencingEpoch::FIRST, "conn-b")).expect("taken");
    assert_eq!(second.fencing_epoch.get(), 2);
    assert_ne!(second.lease_id, first.lease_id);
    let stale = op(&mut registry, Req::Renew { holder: &first.holder(), ttl: SHORT });
    assert_eq!(stale.unwrap_err(), LeaseDenial::StaleEpoch);
    let released = op(&mut registry, Req::Release { holder: &second.holder() }).expect("released");
    assert_eq!(released.state, fleet_lease::LeaseState::Released);
    assert_eq!(op(&mut registry, acquire("conn-c")).unwrap_err(), LeaseDenial::TakeoverRequired);

    // The generic calls carry no policy: on a connector lease they are refused.
    let generic = registry.acquire_lease(&key, LeaseKind::Connector, "conn-d", SHORT, &scopes, &ctx());
    assert_eq!(generic.expect("store").unwrap_err(), LeaseDenial::PolicyDenied);
    let generic = registry.renew_lease(&key, &released.holder(), SHORT, &ctx());
    assert_eq!(generic.expect("store").unwrap_err(), LeaseDenial::PolicyDenied);
    // The default policy refuses everything, and the cap holds whatever the policy says.
    let denied =
        registry.connector_lease(&identity, acquire("conn-e"), limits, &fleet_lease::DenyAll, &ctx());
    assert_eq!(denied.expect("store").unwrap_err(), LeaseDenial::PolicyDenied);
    let long = Req::TakeOver {
        expected_epoch: FencingEpoch::new(2).expect("valid"),
        connector: "conn-e",
        scopes: &scopes,
        ttl: time::Duration::hours(1),
        process: None,
    };
    assert_eq!(op(&mut registry, long).unwrap_err(), LeaseDenial::TtlExceedsCap);

    let log = registry.lease_audit(Some(&key)).expect("audit");
    let outcomes: Vec<(&str, &str, Option<&str>)> =
        log.iter().map(|e| (e.event.as_str(), e.outcome.as_str(), e.reason.as_deref())).collect();
    assert_eq!(
        outcomes,
        vec![
            ("acquire", "acquired", None),
            ("acquire", "denied", Some("lease_held")),
            ("takeover", "denied", Some("lease_live")),
            ("acquire", "denied", Some("takeover_required")),
            ("takeover", "denied", Some("epoch_mismatch")),
            ("takeover", "taken_over", None),
            ("renew", "denied", Some("stale_epoch")),
            ("release", "released", None),
            ("acquire", "denied", Some("takeover_required")),
            ("acquire", "denied", Some("policy_denied")),
            ("renew", "denied", Some("policy_denied")),
            ("acquire", "denied", Some("policy_denied")),
            ("takeover", "denied", Some("ttl_exceeds_cap")),
        ]
    );
    assert!(log.iter().all(|e| e.correlation_id.as_deref() == Some("corr-1")));
}

/// A process holding a tenure, of the host `host` (32 hex digits).
fn holder_process(host: &str, pid: i64) -> fleet_lease::HolderProcess {
    fleet_lease::HolderProcess {
        host_id: HostId::new(host).expect("valid"),
        boot_id: BootId::new("11111111-2222-3333-4444-555555555555").expect("valid"),
        pid: Pid::new(pid).expect("valid"),
    }
}

/// A tenure records the process that holds it; a new process of the same connector
/// carries it on (same epoch) only from the host that process ran on, in the same
/// transaction that reads it: from another host it is `lease_held`.
pub fn a_tenure_is_resumed_only_on_its_holders_host<S: Store>(store: S) {
    use crate::ConnectorRequest as Req;
    use fleet_lease::{GrantLimits, LeaseDenial};
    let mut registry = Registry::new(store);
    let identity = fleet_lease::ConnectorIdentity::new("acme", "agent", "slack").expect("valid");
    let scopes = vec!["chat.read".to_owned()];
    let op = |registry: &mut Registry<S>, request: Req<'_>| {
        registry
            .connector_lease(&identity, request, GrantLimits::default(), &AllowAll, &ctx())
            .expect("store")
    };
    let here = holder_process("0123456789abcdef0123456789abcdef", 100);
    let there = holder_process("fedcba9876543210fedcba9876543210", 100);
    let restarted = holder_process("0123456789abcdef0123456789abcdef", 200);
    let first = op(
        &mut registry,
        Req::Acquire { connector: "conn-a", scopes: &scopes, ttl: SHORT, process: Some(&here) },
    )
    .expect("acquired");
    assert_eq!(first.holder_process.as_ref(), Some(&here));
    let holder = first.holder();
    let resume = |process| Req::Resume { holder: &holder, ttl: SHORT, process };
    assert_eq!(op(&mut registry, resume(&there)).unwrap_err(), LeaseDenial::LeaseHeld);
    let resumed = op(&mut registry, resume(&restarted)).expect("resumed on its own host");
    assert_eq!(
        (resumed.fencing_epoch, resumed.holder_process.as_ref()),
        (first.fencing_epoch, Some(&restarted))
    );
    let (stored, _) = registry.lease(&identity.lease_key()).expect("store");
    assert_eq!(stored.and_then(|l| l.holder_process), Some(restarted));
}

/// Workflow leases: renewal keeps them, a lapse lets another owner in at a higher epoch,
/// and the owner enumeration and its token follow.
pub fn workflow_leases_protect_their_owners<S: Store>(store: S) {
    use fleet_lease::{LeaseDenial, LeaseKind};
    let mut registry = Registry::new(store);
    let key = lkey("workflow:deploy");
    let empty = registry.active_workflow_owners().expect("owners");
    assert!(empty.owners.is_empty());
    let lease = registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx())
        .expect("store")
        .expect("acquired");
    let held = registry.active_workflow_owners().expect("owners");
    assert_eq!(held.owners.iter().map(String::as_str).collect::<Vec<_>>(), vec!["wkr-a"]);
    assert_ne!(held.fingerprint, empty.fingerprint);
    let renewed =
        registry.renew_lease(&key, &lease.holder(), SHORT, &ctx()).expect("store").expect("renewed");
    assert!(renewed.expires_at >= lease.expires_at);
    assert_eq!(
        registry.active_workflow_owners().expect("owners").fingerprint,
        held.fingerprint,
        "a renewal does not change who owns what"
    );
    lapse();
    assert!(
        registry.active_workflow_owners().expect("owners").owners.is_empty(),
        "a lapsed lease protects nobody"
    );
    let expired = registry.renew_lease(&key, &lease.holder(), SHORT, &ctx()).expect("store");
    assert_eq!(expired.unwrap_err(), LeaseDenial::Expired);
    let next = registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-b", SHORT, &[], &ctx())
        .expect("store")
        .expect("taken");
    assert_eq!(next.fencing_epoch.get(), 2);
}

/// A page of the audit log selects by lease and time and keeps log order both ways, as
/// the filter over the whole log would: what `lease audit --tail/--since/--until` reads.
pub fn audit_pages_select_as_the_whole_log_filtered_would<S: Store>(store: S) {
    use fleet_lease::LeaseKind;
    let mut registry = Registry::new(store);
    for i in 0..7 {
        let key = lkey(&format!("workflow:page{}", i % 2));
        let lease =
            registry.acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx()).expect("store");
        if let Ok(lease) = lease {
            registry.release_lease(&key, &lease.holder(), &ctx()).expect("store").expect("released");
        }
    }
    let whole = registry.lease_audit(None).expect("audit");
    assert!(whole.len() >= 7, "{whole:?}");
    let key = lkey("workflow:page1");
    let middle = whole[whole.len() / 2].at;
    let queries = [
        crate::AuditQuery { key: None, since: None, until: None, after: 0, newest_first: false, limit: 3 },
        crate::AuditQuery {
            key: Some(&key),
            since: None,
            until: None,
            after: 2,
            newest_first: false,
            limit: 100,
        },
        crate::AuditQuery {
            key: None,
            since: Some(middle),
            until: None,
            after: 0,
            newest_first: false,
            limit: 100,
        },
        crate::AuditQuery {
            key: None,
            since: None,
            until: Some(middle),
            after: i64::MAX,
            newest_first: true,
            limit: 2,
        },
    ];
    for query in queries {
        let page = registry.lease_audit_page(&query).expect("page");
        let mut expected: Vec<crate::AuditEntry> =
            whole.iter().filter(|e| query.selects(e)).cloned().collect();
        if query.newest_first {
            expected.reverse();
        }
        expected.truncate(query.limit);
        assert_eq!(page, expected, "{query:?}");
    }
}

/// The store counts every lease decision as it writes it: the counts equal the log's,
/// grouped by event, outcome and reason, and retention does not lower them.
pub fn decisions_are_counted_as_they_are_written<S: Store>(store: S) {
    use fleet_lease::LeaseKind;
    let mut registry = Registry::new(store);
    let key = lkey("workflow:counted");
    let lease =
        registry.acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx()).expect("store");
    let lease = lease.expect("acquired");
    let denied =
        registry.acquire_lease(&key, LeaseKind::Workflow, "wkr-b", SHORT, &[], &ctx()).expect("store");
    assert!(denied.is_err());
    registry.renew_lease(&key, &lease.holder(), SHORT, &ctx()).expect("store").expect("renewed");
    let Some(counts) = registry.decision_counts().expect("counts") else { return };
    let mut grouped: std::collections::BTreeMap<(String, String, Option<String>), u64> = Default::default();
    for e in registry.lease_audit(None).expect("audit") {
        *grouped.entry((e.event, e.outcome, e.reason)).or_default() += 1;
    }
    let counted: std::collections::BTreeMap<_, _> =
        counts.iter().map(|c| ((c.event.clone(), c.outcome.clone(), c.reason.clone()), c.n)).collect();
    assert_eq!(counted, grouped);
    let newest = registry.lease_audit(None).expect("audit").last().expect("an entry").clone();
    registry.prune_audit(newest.id, Timestamp::new(newest.at.get() + time::Duration::SECOND)).expect("prune");
    let after: std::collections::BTreeMap<_, _> = registry
        .decision_counts()
        .expect("counts")
        .expect("kept")
        .iter()
        .map(|c| ((c.event.clone(), c.outcome.clone(), c.reason.clone()), c.n))
        .collect();
    assert_eq!(after, counted, "retention does not lower the counts");
}

/// Retention removes exactly the audit entries at or below a position written before a
/// time, and the log stays append-only to everything else afterwards.
pub fn audit_retention_removes_only_what_it_names<S: Store>(store: S) {
    use fleet_lease::LeaseKind;
    let mut registry = Registry::new(store);
    for i in 0..3 {
        let key = lkey(&format!("workflow:keep{i}"));
        registry
            .acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx())
            .expect("store")
            .expect("acquired");
    }
    let whole = registry.lease_audit(None).expect("audit");
    assert_eq!(whole.len(), 3);
    // Everything before the third entry's time, up to the second entry's position.
    let (through, before) = (whole[1].id, whole[2].at.max(whole[1].at));
    let removed = registry.prune_audit(through, before).expect("prune");
    let left = registry.lease_audit(None).expect("audit");
    let expected: Vec<_> = whole.iter().filter(|e| !(e.id <= through && e.at < before)).cloned().collect();
    assert_eq!(left, expected);
    assert_eq!(removed, whole.len() - left.len());
    assert!(removed >= 1, "the first entry at least: {whole:?}");
    // New entries are appended after the pruned ones, never in their place.
    let key = lkey("workflow:after");
    registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx())
        .expect("store")
        .expect("acquired");
    let after = registry.lease_audit(None).expect("audit");
    assert!(after.last().expect("an entry").id > whole.last().expect("an entry").id);
}

/// A lease row set back to an older copy of itself (a restored backup, a hand edit) never
/// hands out an epoch again: the next tenure goes above every epoch the key ever had.
pub fn a_lease_set_back_never_repeats_an_epoch<S: Store>(store: S) {
    use fleet_lease::LeaseKind;
    let mut registry = Registry::new(store);
    let key = lkey("workflow:restored");
    let first = registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-a", SHORT, &[], &ctx())
        .expect("store")
        .expect("acquired");
    lapse();
    let second = registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-b", SHORT, &[], &ctx())
        .expect("store")
        .expect("taken");
    assert_eq!(second.fencing_epoch.get(), 2);
    registry.store_mut().write(|tx| tx.put_lease(Some(&second), &first)).expect("set back");
    lapse();
    let third = registry
        .acquire_lease(&key, LeaseKind::Workflow, "wkr-c", SHORT, &[], &ctx())
        .expect("store")
        .expect("taken");
    assert_eq!(third.fencing_epoch.get(), 3, "above the epoch the copy forgot");
}

/// Initialization: one runner, others wait; completion needs the current tenure; a newer
/// stored version is refused; a higher target reruns.
pub fn initialization_runs_once_per_version<S: Store>(store: S) {
    use fleet_lease::{InitDecision, LeaseDenial};
    let mut registry = Registry::new(store);
    let key = lkey("init:schema");
    let InitDecision::Run(first) = registry.init_start(&key, 1, "proc-a", SHORT).expect("store") else {
        panic!("the first starter runs")
    };
    assert!(matches!(
        registry.init_start(&key, 1, "proc-b", SHORT).expect("store"),
        InitDecision::Wait { .. }
    ));
    lapse();
    let InitDecision::Run(second) = registry.init_start(&key, 1, "proc-b", SHORT).expect("store") else {
        panic!("an expired owner is taken over")
    };
    assert!(second.fencing_epoch > first.fencing_epoch);
    let late = registry.init_finish(&key, &first.holder(), Ok(())).expect("store");
    assert_eq!(late.unwrap_err(), LeaseDenial::StaleEpoch);
    registry.init_finish(&key, &second.holder(), Err("disk full")).expect("store").expect("recorded");
    let InitDecision::Run(third) = registry.init_start(&key, 1, "proc-c", SHORT).expect("store") else {
        panic!("a failure is retried")
    };
    registry.init_finish(&key, &third.holder(), Ok(())).expect("store").expect("ready");
    assert_eq!(registry.init_start(&key, 1, "proc-d", SHORT).expect("store"), InitDecision::Ready);
    assert_eq!(
        registry.init_start(&key, 0, "proc-d", SHORT).expect("store"),
        InitDecision::NewerThanSupported { stored: 1 }
    );
    assert!(matches!(registry.init_start(&key, 2, "proc-d", SHORT).expect("store"), InitDecision::Run(_)));
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

/// Writes a workflow lease for `owner` inside the apply's own transaction, just before
/// its first write: the lease fence must trip and roll everything back.
#[derive(Debug)]
struct LeaseBeforeWrite;

impl crate::BeforeWrite for LeaseBeforeWrite {
    fn before_write(
        &self,
        tx: &mut dyn crate::Tx,
        worker: &fleet_identity::WorkerIdentity,
    ) -> Result<(), StoreError> {
        let tenure = fleet_lease::Tenure {
            owner: worker.to_string(),
            lease_id: fleet_lease::LeaseId::new("lease-sneaky").expect("valid"),
            ttl: time::Duration::seconds(60),
            scopes: Vec::new(),
            process: None,
        };
        let key = lkey("workflow:sneaky");
        let now = tx.store_now()?;
        let (_, lease) =
            fleet_lease::decide_acquire(None, &key, fleet_lease::LeaseKind::Workflow, &tenure, now)
                .map_err(|d| StoreError::invalid(d.to_string()))?;
        tx.put_lease(None, &lease)?;
        Ok(())
    }
}

/// The connector gateway: a grant is issued on the lease as stored, validated against the
/// store before use, refused once a takeover moved the epoch; every decision is audited
/// and no audit entry holds a scope.
pub fn grants_are_issued_and_validated_against_the_stored_lease<S: Store>(store: S) {
    use crate::ConnectorRequest as Req;
    use fleet_lease::{FencingEpoch, GrantDenial, GrantIssuer, GrantLimits};
    let mut registry = Registry::new(store);
    let identity = fleet_lease::ConnectorIdentity::new("acme", "agent", "slack").expect("valid");
    let scopes = vec!["chat.secret-scope".to_owned()];
    let limits = GrantLimits::default();
    let issuer = GrantIssuer::new([7; 32], limits);
    let acquire = Req::Acquire {
        connector: "conn-a",
        scopes: &scopes,
        ttl: time::Duration::seconds(60),
        process: None,
    };
    let lease = registry
        .connector_lease(&identity, acquire, limits, &AllowAll, &ctx())
        .expect("store")
        .expect("held");
    let ttl = time::Duration::seconds(5);
    let refused =
        registry.issue_grant(&issuer, &identity, "conn-a", &scopes, ttl, &fleet_lease::DenyAll, &ctx());
    assert_eq!(refused.expect("store").unwrap_err(), GrantDenial::PolicyDenied);
    let grant = registry.issue_grant(&issuer, &identity, "conn-a", &scopes, ttl, &AllowAll, &ctx());
    let grant = grant.expect("store").expect("issued");
    let context =
        registry.validate_grant(&issuer, &grant, &identity, &scopes, &ctx()).expect("store").expect("valid");
    assert_eq!(
        (context.fencing_epoch, context.lease_id.clone()),
        (lease.fencing_epoch, lease.lease_id.clone())
    );
    assert_eq!(context.connector, "conn-a");

    // The lease changes hands while the grant has not yet expired (a release, then a
    // takeover): the old grant is refused on the epoch.
    let release = Req::Release { holder: &lease.holder() };
    registry
        .connector_lease(&identity, release, limits, &AllowAll, &ctx())
        .expect("store")
        .expect("released");
    let take = Req::TakeOver {
        expected_epoch: FencingEpoch::FIRST,
        connector: "conn-b",
        scopes: &scopes,
        ttl: SHORT,
        process: None,
    };
    registry.connector_lease(&identity, take, limits, &AllowAll, &ctx()).expect("store").expect("taken");
    let stale = registry.validate_grant(&issuer, &grant, &identity, &scopes, &ctx()).expect("store");
    assert_eq!(stale.unwrap_err(), GrantDenial::StaleEpoch);

    let log = registry.lease_audit(Some(&identity.lease_key())).expect("audit");
    let grants: Vec<(&str, &str, Option<&str>)> = log
        .iter()
        .filter(|e| e.event.starts_with("grant_"))
        .map(|e| (e.event.as_str(), e.outcome.as_str(), e.reason.as_deref()))
        .collect();
    assert_eq!(
        grants,
        vec![
            ("grant_issue", "denied", Some("policy_denied")),
            ("grant_issue", "issued", None),
            ("grant_validate", "valid", None),
            ("grant_validate", "denied", Some("stale_epoch")),
        ]
    );
    let text = serde_json::to_string(&log).expect("json");
    assert!(!text.contains("secret-scope"), "the audit log holds no scope: {text}");
}

/// Changes the row about to be retired inside the apply's own transaction, as a
/// concurrent writer would (a column outside the fingerprint, so the plan stays valid).
#[derive(Debug)]
struct TouchBeforeWrite;

impl crate::BeforeWrite for TouchBeforeWrite {
    fn before_write(
        &self,
        tx: &mut dyn crate::Tx,
        worker: &fleet_identity::WorkerIdentity,
    ) -> Result<(), StoreError> {
        let row = tx.worker(worker)?.ok_or_else(|| StoreError::invalid("no such row"))?;
        let mut touched = row.clone();
        touched.code_revision = Some("redeployed".into());
        assert!(tx.replace_worker(&row, &touched)?, "the touch itself applies");
        Ok(())
    }
}

/// Apply retires only on matching tokens and a fresh proof of death, replays as
/// `already_retired`, retires nothing without a probe, and rolls back whole when the
/// lease fence moves.
pub fn apply_retires_only_what_the_plan_and_the_probe_prove<S: Store>(store: S) {
    use crate::{ApplyOutcome, ApplyRequest};
    let mut registry = Registry::new(store);
    registry.record_instance(&ledger_entry()).expect("record");
    let probe = ScriptedProbe::default();
    let bound = |namespace, process, generation| Registration {
        repository: Some(repository()),
        ..registration(namespace, process, generation)
    };
    let dead = registry
        .register(&bound(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let also_dead = registry
        .register(&bound(Namespace::Merger, process(102, 5002), "gen-c"), &token(3), at(0), &probe)
        .expect("register");
    let live = registry
        .register(&bound(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");
    registry.heartbeat(&credential(&live, "gen-b", 2), at(40)).expect("heartbeat");
    let stale = registry.mark_expired_stale(at(45)).expect("sweep");
    assert_eq!(stale.len(), 2);
    probe.set(&process(100, 5000), ProcessVerdict::Gone);
    probe.set(&process(102, 5002), ProcessVerdict::Gone);

    let rows = registry.workers().expect("read");
    let ctx = retirement_context(at(50));
    let ledger = [instance()].into_iter().collect();
    let probes =
        rows.iter().filter_map(|r| Some((r.worker_identity.clone(), probe.probe(&r.process()?)))).collect();
    let owners = Default::default();
    let plan =
        fleet_retirement::plan(&fleet_retirement::Evidence::new(&rows, &ledger, &owners, &probes), &ctx);
    assert_eq!(plan.candidate_count, 2, "{plan:?}");
    let request = ApplyRequest {
        registry_fingerprint: plan.registry_fingerprint.clone(),
        candidate_fingerprint: plan.candidate_fingerprint.clone(),
        worker_identities: vec![dead.row.worker_identity.clone(), also_dead.row.worker_identity.clone()],
        every_candidate: false,
        retired_by: "conformance".into(),
        registry_match: crate::RegistryMatch::Candidates,
        audit: Default::default(),
    };

    let before = registry.export().expect("export");
    let moved = ApplyRequest {
        // A well-formed token of no registry this test ever held.
        registry_fingerprint: format!("b3:{}", "0".repeat(64)).parse().expect("a fingerprint's shape"),
        registry_match: crate::RegistryMatch::WholeRegistry,
        ..request.clone()
    };
    let report = registry.apply_retirement(&moved, &ctx, &probe);
    assert_eq!(report.outcome, ApplyOutcome::RegistryRevisionMoved);
    let report = registry.apply_retirement_with_hook(&request, &ctx, None, &());
    assert_eq!(report.outcome, ApplyOutcome::LivenessReprobeUnavailable);
    let report = registry.apply_retirement_with_hook(&request, &ctx, Some(&probe), &LeaseBeforeWrite);
    assert_eq!(report.outcome, ApplyOutcome::TransactionFailed);
    assert!(!report.success && report.retired.is_empty());
    assert_eq!(registry.export().expect("export"), before, "a failed apply writes nothing");
    assert!(registry.leases(None).expect("leases").is_empty(), "not even the lease written inside it");

    let nothing = ApplyRequest { worker_identities: Vec::new(), ..request.clone() };
    let report = registry.apply_retirement(&nothing, &ctx, &probe);
    assert_eq!(report.outcome, ApplyOutcome::NothingRequested);
    assert_eq!(registry.export().expect("export"), before, "asking for nothing writes nothing");

    // Another writer changes each row between its checks and its swap: the swap misses
    // and the row is preserved as changed, never retired on a stale reading.
    let report = registry.apply_retirement_with_hook(&request, &ctx, Some(&probe), &TouchBeforeWrite);
    assert_eq!(report.outcome, ApplyOutcome::Applied);
    assert_eq!(report.retired_count, 0);
    let reasons: Vec<&str> = report.preserved.iter().map(|p| p.reason_code.as_str()).collect();
    assert_eq!(reasons, ["row_changed_since_plan", "row_changed_since_plan"]);

    let report = registry.apply_retirement(&request, &ctx, &probe);
    assert_eq!(report.outcome, ApplyOutcome::Applied);
    assert_eq!(report.retired_count, 2);
    let retired =
        registry.workers().expect("read").into_iter().filter(|r| r.status == WorkerStatus::Retired).count();
    assert_eq!(retired, 2);
    let replay = registry.apply_retirement(&request, &retirement_context(at(51)), &probe);
    assert_eq!(replay.outcome, ApplyOutcome::AlreadyRetired);
}

/// A launch whose author crashed (its row stale, its process gone) beside a live
/// reviewer, and a plan at `at(50)` that names the author.
struct CrashedAuthor<S: Store> {
    registry: Registry<S>,
    probe: ScriptedProbe,
    dead: crate::Registered,
    live: crate::Registered,
    request: crate::ApplyRequest,
}

fn crashed_author<S: Store>(store: S) -> CrashedAuthor<S> {
    let mut registry = Registry::new(store);
    registry.record_instance(&ledger_entry()).expect("record");
    let probe = ScriptedProbe::default();
    let bound = |namespace, process, generation| Registration {
        repository: Some(repository()),
        ..registration(namespace, process, generation)
    };
    let dead = registry
        .register(&bound(Namespace::Author, process(100, 5000), "gen-a"), &token(1), at(0), &probe)
        .expect("register");
    let live = registry
        .register(&bound(Namespace::Reviewer, process(101, 5001), "gen-b"), &token(2), at(0), &probe)
        .expect("register");
    registry.heartbeat(&credential(&live, "gen-b", 2), at(40)).expect("heartbeat");
    assert_eq!(registry.mark_expired_stale(at(45)).expect("sweep").len(), 1);
    probe.set(&process(100, 5000), ProcessVerdict::Gone);
    probe.set(&process(101, 5001), ProcessVerdict::Alive);
    let plan = plan_now(&mut registry, &probe, at(50));
    assert_eq!(plan.candidate_worker_identities, std::slice::from_ref(&dead.row.worker_identity), "{plan:?}");
    let request = crate::ApplyRequest {
        registry_fingerprint: plan.registry_fingerprint,
        candidate_fingerprint: plan.candidate_fingerprint,
        worker_identities: plan.candidate_worker_identities,
        every_candidate: false,
        retired_by: "conformance".into(),
        registry_match: crate::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    CrashedAuthor { registry, probe, dead, live, request }
}

/// The plan of the registry as it stands, judged at `now` with `probe`.
fn plan_now<S: Store>(
    registry: &mut Registry<S>,
    probe: &ScriptedProbe,
    now: Timestamp,
) -> fleet_retirement::Plan {
    let rows = registry.workers().expect("read");
    let ledger = registry.instances().expect("ledger").into_iter().map(|i| i.client_instance_id).collect();
    let owners = registry.active_workflow_owners().expect("leases").owners;
    let probes =
        rows.iter().filter_map(|r| Some((r.worker_identity.clone(), probe.probe(&r.process()?)))).collect();
    fleet_retirement::plan(
        &fleet_retirement::Evidence::new(&rows, &ledger, &owners, &probes),
        &retirement_context(now),
    )
}

impl<S: Store> CrashedAuthor<S> {
    /// Applies the plan at `at(55)`.
    fn apply(&mut self) -> crate::ApplyReport {
        self.registry.apply_retirement(&self.request, &retirement_context(at(55)), &self.probe)
    }

    /// Applies the plan after a change the decision rests on: the apply must refuse with
    /// `outcome` and write nothing.
    fn refuses(mut self, outcome: crate::ApplyOutcome) {
        let before = self.registry.export().expect("export");
        let report = self.apply();
        assert_eq!(report.outcome, outcome, "{report:?}");
        assert!(report.retired.is_empty() && !report.mutation_performed, "{report:?}");
        assert_eq!(self.registry.export().expect("export"), before, "a refused apply writes nothing");
    }
}

/// Between plan and apply the live reviewer heartbeats, a new worker registers and a
/// new launch is recorded: the registry moved, the candidate did not, and the apply
/// retires it and says the registry moved.
pub fn apply_goes_through_when_only_rows_outside_the_candidates_moved<S: Store>(store: S) {
    let mut f = crashed_author(store);
    f.registry.heartbeat(&credential(&f.live, "gen-b", 2), at(52)).expect("heartbeat");
    let merger = Registration {
        repository: Some(repository()),
        ..registration(Namespace::Merger, process(102, 5002), "gen-c")
    };
    f.registry.register(&merger, &token(3), at(52), &f.probe).expect("register");
    f.probe.set(&process(102, 5002), ProcessVerdict::Alive);
    let other = InstanceRecord {
        client_instance_id: ClientInstanceId::parse("inst-codex-20260730T120000Z-fedcba987654")
            .expect("valid"),
        ..ledger_entry()
    };
    f.registry.record_instance(&other).expect("record");
    let report = f.apply();
    assert_eq!(report.outcome, crate::ApplyOutcome::Applied, "{report:?}");
    assert_eq!(report.retired, [f.dead.row.worker_identity.clone()]);
    assert_eq!(report.registry_moved, Some(true));
    assert_eq!(report.plan_registry_fingerprint, f.request.registry_fingerprint);
    assert_ne!(report.registry_fingerprint.as_ref(), Some(&f.request.registry_fingerprint));
    let rows = f.registry.workers().expect("read");
    let retired: Vec<_> =
        rows.iter().filter(|r| r.status == WorkerStatus::Retired).map(|r| &r.worker_identity).collect();
    assert_eq!(retired, [&f.dead.row.worker_identity], "only the candidate is retired");
}

/// Seed 004's strict form, one argument away: any movement refuses.
pub fn apply_requiring_the_whole_registry_refuses_any_movement<S: Store>(store: S) {
    let mut f = crashed_author(store);
    f.registry.heartbeat(&credential(&f.live, "gen-b", 2), at(52)).expect("heartbeat");
    f.request.registry_match = crate::RegistryMatch::WholeRegistry;
    f.refuses(crate::ApplyOutcome::RegistryRevisionMoved);
}

/// The candidate's own heartbeat between plan and apply: its row and verdict moved.
pub fn apply_refuses_when_a_candidate_heartbeats<S: Store>(store: S) {
    let mut f = crashed_author(store);
    f.registry.heartbeat(&credential(&f.dead, "gen-a", 1), at(52)).expect("heartbeat");
    f.refuses(crate::ApplyOutcome::CandidateSetMoved);
}

/// The candidate's process answers again (a paused process resumed): `pid_alive`.
pub fn apply_refuses_when_a_candidate_process_is_back<S: Store>(store: S) {
    let f = crashed_author(store);
    f.probe.set(&process(100, 5000), ProcessVerdict::Alive);
    f.refuses(crate::ApplyOutcome::CandidateSetMoved);
}

/// A workflow lease taken by the candidate between plan and apply protects it.
pub fn apply_refuses_when_a_candidate_takes_a_workflow_lease<S: Store>(store: S) {
    let mut f = crashed_author(store);
    let owner = f.dead.row.worker_identity.to_string();
    let ttl = time::Duration::seconds(600);
    f.registry
        .acquire_lease(&lkey("workflow:deploy"), fleet_lease::LeaseKind::Workflow, &owner, ttl, &[], &ctx())
        .expect("store")
        .expect("acquired");
    f.refuses(crate::ApplyOutcome::CandidateSetMoved);
}

/// A new live worker whose process holds the candidate's pid number (host, boot and
/// pid shared, another start time): the candidate now shares identity evidence with a
/// live row, `conflicting_identity_evidence`, though its own row is unchanged.
pub fn apply_refuses_when_a_new_row_changes_a_candidates_verdict<S: Store>(store: S) {
    let mut f = crashed_author(store);
    let reused = Registration {
        repository: Some(repository()),
        ..registration(Namespace::Merger, process(100, 6000), "gen-c")
    };
    f.registry.register(&reused, &token(3), at(52), &f.probe).expect("register");
    f.probe.set(&process(100, 6000), ProcessVerdict::Alive);
    let fresh = plan_now(&mut f.registry, &f.probe, at(55));
    let reason = fresh
        .preserved
        .iter()
        .find(|a| a.worker_identity == f.dead.row.worker_identity)
        .map(|a| a.reason_code.as_str());
    assert_eq!(reason, Some("conflicting_identity_evidence"));
    f.refuses(crate::ApplyOutcome::CandidateSetMoved);
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
