//! The conformance cases of the retirement apply: it retires only what the plan and the
//! probe prove, goes through when only rows outside the candidates moved, and refuses
//! whatever moved under a candidate between the plan and the write.

#[allow(clippy::wildcard_imports)]
use super::*;

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

/// A registration bound to the plan's repository.
fn bound(namespace: Namespace, process: ProcessIdentity, generation: &str) -> Registration {
    Registration { repository: Some(repository()), ..registration(namespace, process, generation) }
}

/// Apply retires only on matching tokens and a fresh proof of death, replays as
/// `already_retired`, retires nothing without a probe, and rolls back whole when the
/// lease fence moves.
pub fn apply_retires_only_what_the_plan_and_the_probe_prove<S: Store>(store: S) {
    use crate::{ApplyOutcome, ApplyRequest};
    let mut registry = Registry::new(store);
    registry.record_instance(&ledger_entry()).expect("record");
    let probe = ScriptedProbe::default();
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
