//! The manifest rules: the approved manifest against the instances the fleet holds.

use super::*;
use std::collections::BTreeSet;

use fleet_identity::Namespace;
use fleet_model::WorkerRow;
use rustc_hash::FxHashSet;

use crate::findings::{Finding, FindingCode};
use crate::manifest::Manifest;

pub(super) fn manifest_findings(manifest: &Manifest, groups: &Groups<'_>, out: &mut Vec<Finding>) {
    let listed: FxHashSet<&str> = manifest.instances.iter().map(|i| i.client_instance_id.as_str()).collect();
    for expected in &manifest.instances {
        let id = expected.client_instance_id.as_str();
        let live: BTreeSet<Namespace> =
            groups.get(Some(id)).map(|g| g.live().map(|r| r.namespace).collect()).unwrap_or_default();
        if live.is_empty() {
            out.push(
                Finding::new(FindingCode::MissingExpected, format!("{id} is on the manifest but not live"))
                    .instance(Some(id))
                    .evidence("expected_namespaces", &expected.namespaces),
            );
            continue;
        }
        for ns in expected.namespaces.iter().filter(|ns| !live.contains(ns)) {
            out.push(
                Finding::new(FindingCode::MissingExpected, format!("{id} has no live {ns} worker"))
                    .instance(Some(id))
                    .namespace(*ns),
            );
        }
    }
    for group in &groups.0 {
        let live: Vec<&WorkerRow> = group.live().collect();
        if !live.is_empty() && !group.key.is_some_and(|k| listed.contains(k)) {
            out.push(
                Finding::new(FindingCode::Unmanifested, "a live instance is not on the manifest")
                    .instance(group.key)
                    .workers(live.iter().map(|r| &r.worker_identity)),
            );
        }
    }
}
