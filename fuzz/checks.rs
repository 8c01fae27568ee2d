//! The checks the fuzz targets make, shared with the test that replays the kept inputs
//! in `fixtures/fuzz/` (`crates/fleet-snapshot/tests/fuzz_corpus.rs`), so a crash found
//! by fuzzing and kept is checked the same way in every test run.

/// Instance and worker identities: parse never panics; what parses prints back to itself.
pub fn identities(text: &str) {
    if let Ok(id) = fleet_identity::ClientInstanceId::parse(text) {
        assert_eq!(fleet_identity::ClientInstanceId::parse(id.as_str()).ok(), Some(id.clone()));
        assert_eq!(id.as_str(), text);
    }
    let _ = fleet_identity::WorkerIdentity::new(text);
    let _ = fleet_identity::InstanceClaim::read(Some(text));
    let _ = fleet_identity::PidNamespace::from_link(text);
    let _ = fleet_identity::Timestamp::parse(text);
}

/// A registry import: read or refused, never a panic; what reads round-trips, and the
/// snapshot of it never panics.
pub fn registry_import(text: &str) {
    let Ok(dump) = fleet_model::RegistryDump::from_json(text) else { return };
    let again = fleet_model::RegistryDump::from_json(&dump.to_json()).expect("a written dump reads back");
    assert_eq!(again, dump);
    let now = fleet_identity::Timestamp::from_unix_millis(1_785_412_800_000).expect("a time");
    let _ = fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
        rows: &dump.worker_registrations,
        ledger: &dump.instances,
        manifest: None,
        probes: &fleet_snapshot::ProbeResults::new(),
        policy: &fleet_snapshot::Policy::default(),
        now,
    });
}

/// An approved manifest: read or refused, never a panic.
pub fn manifest(text: &str) {
    let _ = fleet_snapshot::Manifest::from_json(text);
}

/// A connector policy file: read or refused, never a panic; what reads writes back to
/// the same policy, and deciding with it never panics.
pub fn policy(text: &str) {
    let Ok(policy) = fleet_lease::StaticPolicy::from_json(text) else { return };
    let written = serde_json::to_string(&policy).expect("a policy writes");
    assert_eq!(fleet_lease::StaticPolicy::from_json(&written).ok(), Some(policy.clone()), "round trip");
    for rule in &policy.allow {
        if let Ok(id) = fleet_lease::ConnectorIdentity::new(&rule.tenant, &rule.agent, &rule.binding) {
            use fleet_lease::ConnectorPolicy as _;
            let ttl = time::Duration::seconds(i64::try_from(rule.max_ttl_s).unwrap_or(i64::MAX));
            let _ = policy.authorize_lease(&id, &rule.connector, &rule.scopes, Some(ttl));
            let _ = policy.authorize_grant(&id, &rule.connector, &rule.scopes, None);
        }
    }
}
