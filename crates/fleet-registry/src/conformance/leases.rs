//! The conformance cases of leases: connector leases (insert-only, fenced, resumed only
//! on their holder's host), workflow leases and the owners they protect, the audit log
//! and its counts and retention, epochs that never repeat, one-time initialization,
//! and the gateway's grants.

#[allow(clippy::wildcard_imports)]
use super::*;

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
pub(super) fn holder_process(host: &str, pid: i64) -> fleet_lease::HolderProcess {
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

/// Writes a workflow lease for `owner` inside the apply's own transaction, just before
/// its first write: the lease fence must trip and roll everything back.
#[derive(Debug)]
pub(super) struct LeaseBeforeWrite;

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
