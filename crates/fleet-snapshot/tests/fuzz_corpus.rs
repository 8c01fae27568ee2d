//! The fuzz targets' checks (`fuzz/checks.rs`), run over every kept input in
//! `fixtures/fuzz/`: the seeds, and any crash a fuzzing run found, kept as a regression.

use std::path::Path;

#[path = "../../../fuzz/checks.rs"]
#[allow(dead_code, unreachable_pub)]
mod checks;

fn each_input(target: &str, check: fn(&str)) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        // The targets see only UTF-8 input; so do their replays.
        if let Ok(text) = std::str::from_utf8(&bytes) {
            check(text);
        }
    }
}

#[test]
fn every_kept_registry_import_reads_round_trips_and_snapshots() {
    each_input("registry_import", checks::registry_import);
}

#[test]
fn every_kept_manifest_and_identity_reads_without_panicking() {
    each_input("manifest", checks::manifest);
    each_input("identities", checks::identities);
}

#[test]
fn every_kept_policy_file_reads_round_trips_and_decides() {
    each_input("policy", checks::policy);
}
