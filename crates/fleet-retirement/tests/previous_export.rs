//! A backup outlives a release: the pure path reads what the previous release's
//! `fleetctl registry export` wrote. `fixtures/exports/previous-release.json` was written
//! by the build of revision 443cff3f6d1f (registry schema SQLite 12) from a registry of
//! one launch with a finished worker, a running one and a workflow lease; it holds every
//! table that release exports.

use std::collections::{BTreeMap, BTreeSet};

use fleet_identity::{HostId, Repository};
use fleet_retirement::{Export, RetirementContext};

const PREVIOUS: &str = include_str!("../../../fixtures/exports/previous-release.json");

#[test]
fn the_previous_releases_export_is_read_whole_and_planned() {
    let export = Export::from_json(PREVIOUS).expect("the previous release's export reads");
    assert_eq!(export.dump.instances.len(), 1);
    assert_eq!(export.dump.worker_registrations.len(), 2);
    assert_eq!(export.leases.len(), 1);
    let lease = &export.leases[0];
    // A second after the lease was taken: the running worker's heartbeat is fresh.
    let now = lease.acquired_at.saturating_add(time::Duration::seconds(1));
    assert_eq!(export.workflow_owners(now), BTreeSet::from(["ops".to_owned()]));
    let running =
        export.dump.worker_registrations.iter().find(|r| r.namespace.as_str() == "reviewer").unwrap();
    let ctx = RetirementContext {
        host_id: running.host_id.clone().unwrap_or_else(|| HostId::new("elsewhere").unwrap()),
        boot_id: None,
        canonical_repository: Repository::new("/srv/repo").unwrap(),
        now,
    };
    let plan = export.plan(&BTreeMap::new(), &ctx);
    assert_eq!(plan.candidate_count, 0, "{:?}", plan.candidates);
    assert!(
        plan.preserved.iter().any(|p| p.worker_identity == running.worker_identity),
        "the running worker is preserved: {:?}",
        plan.preserved
    );
    // Long after, with no probe, its lapsed heartbeat alone proves nothing: still kept.
    let later = RetirementContext { now: now.saturating_add(time::Duration::hours(1)), ..ctx };
    assert_eq!(export.plan(&BTreeMap::new(), &later).candidate_count, 0);
}
