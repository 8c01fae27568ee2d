//! The fuzz targets' checks, run over every kept input in `fixtures/fuzz/` (the seeds,
//! and any crash a fuzzing run found, kept as a regression): reading never panics, a
//! dump that reads round-trips, and the snapshot of it never panics.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<(PathBuf, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
        .into_iter()
        .map(|p| (p.clone(), String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()))
        .collect()
}

#[test]
fn every_kept_registry_import_reads_round_trips_and_snapshots() {
    for (path, text) in inputs("registry_import") {
        let Ok(dump) = fleet_model::RegistryDump::from_json(&text) else { continue };
        let again = fleet_model::RegistryDump::from_json(&dump.to_json()).unwrap();
        assert_eq!(again, dump, "{}", path.display());
        let now = fleet_identity::Timestamp::from_unix_millis(1_785_412_800_000).unwrap();
        let _ = fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
            rows: &dump.worker_registrations,
            ledger: &dump.instances,
            manifest: None,
            probes: &fleet_snapshot::ProbeResults::new(),
            policy: &fleet_snapshot::Policy::default(),
            now,
        });
    }
}

#[test]
fn every_kept_manifest_and_identity_reads_without_panicking() {
    for (_, text) in inputs("manifest") {
        let _ = fleet_snapshot::Manifest::from_json(&text);
    }
    for (path, text) in inputs("identities") {
        if let Ok(id) = fleet_identity::ClientInstanceId::parse(&text) {
            assert_eq!(id.as_str(), text, "{}", path.display());
        }
        let _ = fleet_identity::InstanceClaim::read(Some(&text));
        let _ = fleet_identity::PidNamespace::from_link(&text);
    }
}
