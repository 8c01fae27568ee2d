//! The conformance case of the live fleet: the reads a fleet makes all the time read
//! the active rows and the rest of their launches, and leave the history of launches
//! that ended where only export, the record's readers and a replay look.

use fleet_identity::{ClientInstanceId, Namespace};
use fleet_model::ProcessVerdict;

use super::{
    ScriptedProbe, at, credential, ledger_entry, process, registration, repository, retirement_context, token,
};
use crate::{
    ApplyOutcome, ApplyRequest, InstanceRecord, InstanceRef, Registration, Registry, Store, WorkerStatus,
};

/// A second launch.
fn other() -> ClientInstanceId {
    ClientInstanceId::parse("inst-codex-20260730T120000Z-fedcba987654").expect("valid")
}

/// `registration` in the launch `id`.
fn with_instance(registration: Registration, id: ClientInstanceId) -> Registration {
    Registration { instance: InstanceRef::Minted(id), ..registration }
}

/// A launch whose every row is terminal is history: the live read leaves its rows and
/// its ledger entry out, as the pure rule (`RegistryDump::live`) does, while export
/// keeps them; a launch with an active row keeps its released rows in the live read;
/// the retirement plan's fingerprint does not move when history is pruned; and an apply
/// replayed after its launch ended answers `already_retired`.
pub fn the_live_fleet_leaves_ended_launches_to_history<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    let probe = ScriptedProbe::default();
    registry.record_instance(&ledger_entry()).expect("record");
    registry
        .record_instance(&InstanceRecord { client_instance_id: other(), ..ledger_entry() })
        .expect("record");
    let bound = |namespace, pid, generation: &str| Registration {
        repository: Some(repository()),
        ..registration(namespace, process(pid, 5000), generation)
    };
    let a_author =
        registry.register(&bound(Namespace::Author, 100, "gen-a"), &token(1), at(0), &probe).expect("reg");
    let a_merger =
        registry.register(&bound(Namespace::Merger, 101, "gen-b"), &token(2), at(0), &probe).expect("reg");
    let b_author = registry
        .register(&with_instance(bound(Namespace::Author, 102, "gen-c"), other()), &token(3), at(0), &probe)
        .expect("reg");
    let b_reviewer = registry
        .register(&with_instance(bound(Namespace::Reviewer, 103, "gen-d"), other()), &token(4), at(0), &probe)
        .expect("reg");

    // Launch A's author released: A is still live, and its released row with it.
    registry.release(&credential(&a_author, "gen-a", 1), at(5)).expect("release");
    let live = registry.live().expect("live");
    assert_eq!(live.worker_registrations.len(), 4, "{live:?}");
    assert_eq!(live, registry.export().expect("export").live());

    // A's merger dies and is retired: A has ended and is history.
    probe.set(&process(101, 5000), ProcessVerdict::Gone);
    for beat in [40, 80] {
        registry.heartbeat(&credential(&b_author, "gen-c", 3), at(beat)).expect("heartbeat");
        registry.heartbeat(&credential(&b_reviewer, "gen-d", 4), at(beat)).expect("heartbeat");
    }
    registry.mark_expired_stale(at(81)).expect("sweep");
    let ctx = retirement_context(at(82));
    let plan = registry.plan_retirement(&ctx, &probe).expect("plan");
    assert_eq!(plan.candidate_count, 1, "{plan:?}");
    let request = ApplyRequest {
        registry_fingerprint: plan.registry_fingerprint.clone(),
        candidate_fingerprint: plan.candidate_fingerprint.clone(),
        worker_identities: vec![a_merger.row.worker_identity.clone()],
        every_candidate: false,
        retired_by: "conformance".into(),
        registry_match: crate::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    assert_eq!(registry.apply_retirement(&request, &ctx, &probe).outcome, ApplyOutcome::Applied);
    let live = registry.live().expect("live");
    let export = registry.export().expect("export");
    assert_eq!(live, export.clone().live());
    let launches = |rows: &[fleet_model::WorkerRow]| {
        rows.iter()
            .map(|r| r.client_instance_id.clone().unwrap_or_default())
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(launches(&live.worker_registrations), [other().to_string()].into(), "only B is live");
    assert_eq!(live.instances.iter().map(|i| &i.client_instance_id).collect::<Vec<_>>(), [&other()]);
    assert_eq!((export.worker_registrations.len(), export.instances.len()), (4, 2), "the record keeps A");
    assert!(live.worker_registrations.iter().all(|r| r.status == WorkerStatus::Active));

    // The replay finds the row it retired in the history.
    assert_eq!(registry.apply_retirement(&request, &ctx, &probe).outcome, ApplyOutcome::AlreadyRetired);

    // History pruned: the live fleet, and so the plan's fingerprint, stand.
    let before = registry.plan_retirement(&ctx, &probe).expect("plan").registry_fingerprint;
    let history: Vec<_> =
        export.worker_registrations.into_iter().filter(|r| r.status != WorkerStatus::Active).collect();
    assert_eq!(registry.prune(&history).expect("prune").len(), 2);
    assert_eq!(registry.plan_retirement(&ctx, &probe).expect("plan").registry_fingerprint, before);
    assert_eq!(registry.live().expect("live"), live);
}
