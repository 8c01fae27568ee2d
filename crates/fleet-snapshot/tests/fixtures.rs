//! The snapshot of every fixture under `fixtures/snapshot/`, as insta JSON snapshots,
//! and a check that the fixtures together reach every finding code.

use std::collections::BTreeSet;
use std::path::PathBuf;

use fleet_identity::{Repository, Timestamp};
use fleet_model::RegistryDump;
use fleet_snapshot::{FindingCode, FleetSnapshot, Manifest, Policy, ProbeResults, SnapshotInput, snapshot};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/snapshot")
}

fn fixtures() -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(fixture_dir())
        .expect("fixtures/snapshot")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn arg<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).map(String::as_str)
}

/// Takes the fixture's snapshot and hands it to `read`.
fn run<T>(fixture: &serde_json::Value, read: impl FnOnce(FleetSnapshot<'_>) -> T) -> T {
    let dump = RegistryDump::from_json(&fixture["registry"].to_string()).expect("registry");
    let manifest = (!fixture["manifest"].is_null())
        .then(|| Manifest::from_json(&fixture["manifest"].to_string()).expect("manifest"));
    let args: Vec<String> = serde_json::from_value(fixture["args"].clone()).unwrap();
    let policy = Policy {
        canonical_repository: arg(&args, "--canonical-repository").map(|r| Repository::new(r).unwrap()),
        expected_code_revision: arg(&args, "--expected-code-revision").map(str::to_owned),
    };
    read(snapshot(SnapshotInput {
        rows: &dump.worker_registrations,
        ledger: &dump.instances,
        manifest: manifest.as_ref(),
        probes: &ProbeResults::new(),
        policy: &policy,
        now: Timestamp::parse(fixture["now"].as_str().unwrap()).unwrap(),
    }))
}

#[test]
fn every_fixture_matches_its_json_snapshot() {
    for (name, fixture) in fixtures() {
        run(&fixture, |snap| insta::assert_json_snapshot!(name.clone(), snap));
    }
}

#[test]
fn the_fixtures_reach_every_finding_code() {
    let reached: BTreeSet<FindingCode> = fixtures()
        .iter()
        .flat_map(|(_, f)| run(f, |snap| snap.findings.into_iter().map(|f| f.code)))
        .collect();
    let missing: Vec<FindingCode> = FindingCode::ALL.into_iter().filter(|c| !reached.contains(c)).collect();
    assert!(missing.is_empty(), "no fixture reaches {missing:?}");
}

#[test]
fn only_the_healthy_fixture_is_safe() {
    for (name, fixture) in fixtures() {
        assert_eq!(run(&fixture, |snap| snap.live_fleet_safe), name == "healthy_two_launches", "{name}");
    }
}
