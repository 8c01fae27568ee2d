//! The conformance cases of hosts: an operator's fence, enforced on every write from
//! the fenced host and boot, and the two proofs (a later boot, a fence) that retire the
//! rows of a host no probe here can speak for.

use fleet_identity::{BootId, HostId, Namespace, Pid, ProcessStartTime};
use fleet_lease::LeaseKind;
use fleet_model::ProcessIdentity;
use time::Duration;

use super::{
    ScriptedProbe, at, credential, ctx, ledger_entry, lkey, registration, repository, retirement_context,
    token,
};
use crate::{ApplyOutcome, ApplyRequest, Registration, Registry, Store, StoreErrorKind, WorkerStatus};

fn host(c: char) -> HostId {
    HostId::new(std::iter::repeat_n(c, 32).collect::<String>()).expect("valid")
}

fn boot(c: char) -> BootId {
    BootId::new(std::iter::repeat_n(c, 32).collect::<String>()).expect("valid")
}

/// A process of host `h`, boot `b`.
fn elsewhere(h: char, b: char, pid: i64) -> ProcessIdentity {
    ProcessIdentity {
        host_id: host(h),
        boot_id: boot(b),
        pid: Pid::new(pid).expect("valid"),
        process_start_time: ProcessStartTime::new(7000).expect("valid"),
        pid_namespace: None,
    }
}

fn bound(namespace: Namespace, process: ProcessIdentity, generation: &str) -> Registration {
    Registration { repository: Some(repository()), ..registration(namespace, process, generation) }
}

/// The retirement plan of `registry` at `now`, made on the test host with `probe`.
fn plan<S: Store>(registry: &mut Registry<S>, now: i64) -> fleet_retirement::Plan {
    registry.plan_retirement(&retirement_context(at(now)), &ScriptedProbe::default()).expect("plan")
}

fn apply_every<S: Store>(
    registry: &mut Registry<S>,
    plan: &fleet_retirement::Plan,
    now: i64,
) -> crate::ApplyReport {
    let request = ApplyRequest {
        registry_fingerprint: plan.registry_fingerprint.clone(),
        candidate_fingerprint: plan.candidate_fingerprint.clone(),
        worker_identities: Vec::new(),
        every_candidate: true,
        retired_by: "conformance".into(),
        registry_match: crate::RegistryMatch::Candidates,
        audit: Default::default(),
    };
    registry.apply_retirement(&request, &retirement_context(at(now)), &ScriptedProbe::default())
}

/// A fenced host acts on nothing — its heartbeats, registrations and lease operations
/// are refused, the lease ones audited as `host_fenced` — and its rows, once lapsed,
/// retire as `eligible_host_fenced`; unfencing frees its later boots, never the fenced
/// one. A host never fences itself.
pub fn a_fenced_host_writes_nothing_and_its_rows_retire<S: Store>(store: S) {
    let here = super::process(1, 1).host_id;
    let mut registry = Registry::new(store).acting_from(host('b'), boot('1'));
    registry.record_instance(&ledger_entry()).expect("record");
    let probe = ScriptedProbe::default();
    let on_b = registry
        .register(&bound(Namespace::Author, elsewhere('b', '1', 40), "gen-b"), &token(4), at(0), &probe)
        .expect("register");
    let who = credential(&on_b, "gen-b", 4);
    registry.heartbeat(&who, at(5)).expect("heartbeat");
    let key = lkey("workflow:on-b");
    let held = registry
        .acquire_lease(&key, LeaseKind::Workflow, "b-owner", Duration::seconds(60), &[], &ctx())
        .expect("store")
        .expect("acquired");

    let refused = registry.fence_host(&host('b'), "gone", "op", &host('b')).expect_err("own host");
    assert_eq!(refused.kind(), StoreErrorKind::Invalid);
    assert_eq!(
        registry.fence_host(&host('b'), "", "op", &here).expect_err("no reason").kind(),
        StoreErrorKind::Invalid
    );
    let fenced = registry.fence_host(&host('b'), "vm deleted", "op", &here).expect("fence");
    let boots: Vec<&str> = fenced.fences.iter().map(|f| f.boot_id.as_str()).collect();
    assert_eq!(boots, ["*", boot('1').as_str()], "every boot, and the boot it had");
    assert!(
        registry.fence_host(&host('b'), "again", "op", &here).expect("idempotent").fences.is_empty(),
        "a standing fence keeps its first record"
    );

    let beat = registry.heartbeat(&who, at(6)).expect_err("fenced heartbeat");
    assert_eq!(beat.kind(), StoreErrorKind::Fenced, "{beat}");
    assert!(beat.to_string().contains("vm deleted"), "the refusal names the fence: {beat}");
    let again = registry
        .register(&bound(Namespace::Reviewer, elsewhere('b', '1', 41), "gen-c"), &token(5), at(6), &probe)
        .expect_err("fenced registration");
    assert_eq!(again.kind(), StoreErrorKind::Fenced);
    let renew = registry.renew_lease(&key, &held.holder(), Duration::seconds(60), &ctx()).expect("store");
    assert_eq!(renew.expect_err("fenced renewal").as_str(), "host_fenced");
    let acquire = registry
        .acquire_lease(
            &lkey("workflow:new"),
            LeaseKind::Workflow,
            "b-owner",
            Duration::seconds(60),
            &[],
            &ctx(),
        )
        .expect("store");
    assert_eq!(acquire.expect_err("fenced acquisition").as_str(), "host_fenced");
    let audit = registry.lease_audit(Some(&key)).expect("audit");
    assert_eq!(audit.last().and_then(|e| e.reason.as_deref()), Some("host_fenced"), "{audit:?}");

    // From the test host: the row lapses, is swept, and retires on the fence.
    let mut registry = registry.acting_from(here.clone(), super::process(1, 1).boot_id);
    registry.mark_expired_stale(at(45)).expect("sweep");
    let plan = plan(&mut registry, 50);
    assert_eq!(plan.candidate_worker_identities, std::slice::from_ref(&on_b.row.worker_identity), "{plan:?}");
    assert_eq!(plan.candidates[0].reason_code.as_str(), "eligible_host_fenced");
    let report = apply_every(&mut registry, &plan, 51);
    assert_eq!((report.outcome, report.retired_count), (ApplyOutcome::Applied, 1), "{report:?}");
    let row = registry.worker(&on_b.row.worker_identity).expect("read").expect("row");
    assert_eq!(row.status, WorkerStatus::Retired);
    assert_eq!(row.retirement_reason.as_deref(), Some("eligible_host_fenced"));

    // Unfenced: a later boot of the host registers; the fenced boot stays fenced.
    let lifted = registry.unfence_host(&host('b'), "op").expect("unfence");
    assert!(lifted.lifted_at.is_some());
    assert_eq!(registry.unfence_host(&host('b'), "op").expect_err("twice").kind(), StoreErrorKind::NotFound);
    registry
        .register(&bound(Namespace::Merger, elsewhere('b', '2', 42), "gen-d"), &token(6), at(60), &probe)
        .expect("a new boot registers");
    let old = registry
        .register(&bound(Namespace::Merger, elsewhere('b', '1', 43), "gen-e"), &token(7), at(60), &probe)
        .expect_err("the fenced boot stays fenced");
    assert_eq!(old.kind(), StoreErrorKind::Fenced);
    let hosts = registry.hosts().expect("hosts");
    let b = hosts.hosts.iter().find(|h| h.host_id == host('b')).expect("host b listed");
    assert_eq!(b.fences.len(), 2, "{b:?}");
    assert_eq!(b.hostname.as_deref(), Some("test-host"), "as its latest registration reported it");
    assert!(b.clock_offset_ms.is_some(), "{b:?}");
    assert_eq!(b.terminal_rows, 1);
}

/// A later boot of a host proves its earlier boot's processes gone, from any host, and
/// they retire as `eligible_host_rebooted`; two boots of one host id alive at once are
/// clones, and neither proves the other gone.
pub fn a_later_boot_proves_an_earlier_one_gone_and_a_clone_proves_nothing<S: Store>(store: S) {
    let mut registry = Registry::new(store);
    registry.record_instance(&ledger_entry()).expect("record");
    let probe = ScriptedProbe::default();
    let old = registry
        .register(&bound(Namespace::Author, elsewhere('b', '1', 40), "gen-b1"), &token(1), at(0), &probe)
        .expect("register");
    registry.heartbeat(&credential(&old, "gen-b1", 1), at(10)).expect("heartbeat");
    // The host reboots: its next process registers after the old boot's last beat.
    let new = registry
        .register(&bound(Namespace::Reviewer, elsewhere('b', '2', 40), "gen-b2"), &token(2), at(20), &probe)
        .expect("register");
    // Host C runs two machines under one machine id, both beating.
    let clone_a = registry
        .register(&bound(Namespace::Merger, elsewhere('c', '3', 50), "gen-c3"), &token(3), at(0), &probe)
        .expect("register");
    let clone_b = registry
        .register(&bound(Namespace::Controller, elsewhere('c', '4', 51), "gen-c4"), &token(4), at(1), &probe)
        .expect("register");
    registry.heartbeat(&credential(&clone_a, "gen-c3", 3), at(12)).expect("heartbeat");
    registry.heartbeat(&credential(&clone_b, "gen-c4", 4), at(14)).expect("heartbeat");
    registry.heartbeat(&credential(&new, "gen-b2", 2), at(44)).expect("heartbeat");
    registry.mark_expired_stale(at(48)).expect("sweep");

    let plan = plan(&mut registry, 50);
    assert_eq!(plan.candidate_worker_identities, std::slice::from_ref(&old.row.worker_identity), "{plan:?}");
    assert_eq!(plan.candidates[0].reason_code.as_str(), "eligible_host_rebooted");
    let reason = |id: &fleet_identity::WorkerIdentity| {
        plan.preserved.iter().find(|p| &p.worker_identity == id).map(|p| p.reason_code.as_str())
    };
    assert_eq!(reason(&clone_a.row.worker_identity), Some("host_binding_unproven"));
    assert_eq!(reason(&clone_b.row.worker_identity), Some("host_binding_unproven"));
    assert_eq!(reason(&new.row.worker_identity), Some("worker_live"));
    let report = apply_every(&mut registry, &plan, 51);
    assert_eq!(report.retired, std::slice::from_ref(&old.row.worker_identity), "{report:?}");

    let hosts = registry.hosts().expect("hosts");
    let of = |h: char| hosts.hosts.iter().find(|r| r.host_id == host(h)).expect("listed");
    assert!(of('c').cloned && !of('b').cloned, "{hosts:?}");
    assert_eq!(of('b').boots.len(), 2);
    assert_eq!(of('b').boots[0].proven_gone.map(|p| p.as_str()), Some("host_rebooted"));
}
