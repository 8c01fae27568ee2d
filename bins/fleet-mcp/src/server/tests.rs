//! The server's answers and checks, in process.

use fleet_identity::{ClientType, Namespace};
use fleet_registry::OpenMode;
use fleet_registry::{HeartbeatTtl, Revisions};
use fleet_runtime::{Launch, RegistryLocation, WorkerOptions, WorkerSession, open_registry};

use super::*;
use crate::profiles::Profile;

/// A server over no registry: enough to build answers from a snapshot.
fn answering(bodies: Option<Arc<Bodies>>) -> FleetServer {
    let server = FleetServer::new(Context {
        location: RegistryLocation::Sqlite("/nonexistent/registry.sqlite3".into()),
        namespace: Namespace::Controller,
        profile: "controller".into(),
        profiles: Profiles::new(None),
        env: Err("none".into()),
        runtime: fleet_runtime::StableRuntime::capture(),
        registration: crate::registration::Registration::settled(Err("none".into())),
    });
    match bodies {
        Some(bodies) => server.with_bodies(bodies),
        None => server,
    }
}

/// The answer for a snapshot of `workers` active workers heartbeating at `beat`
/// seconds, judged at `now` seconds (from 2026-07-30T12:00:00Z, TTL 30 s), as a
/// client reads it (structured content, and the text block), with or without the
/// stdio guard's parked bodies; and that snapshot as a fresh JSON value.
fn answer_of(workers: usize, beat: i64, now: i64, parked: bool) -> (Value, String, Value) {
    let at = |s: i64| fleet_identity::Timestamp::from_unix_millis((1_785_412_800 + s) * 1000).unwrap();
    let rows: Vec<WorkerRow> = (0..workers)
        .map(|i| format!("wkr-{i:05}"))
        .map(|id| {
            serde_json::from_value(json!({
                "worker_identity": id, "namespace": "author", "status": "active",
                "registered_at": at(0).to_string(), "last_heartbeat_at": at(beat).to_string(),
                "heartbeat_ttl_s": 30,
            }))
            .unwrap()
        })
        .collect();
    let snap = fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
        rows: &rows,
        ledger: &[],
        manifest: None,
        probes: &fleet_snapshot::ProbeResults::new(),
        policy: &Policy::default(),
        now: at(now),
    });
    let bodies = Bodies::new();
    let result = answering(parked.then(|| bodies.clone()))
        .snapshot_answer(&snap, serde_json::to_vec(&snap).unwrap())
        .unwrap();
    // The line the SDK writes, as the guard sends it on.
    let line = serde_json::to_vec(&result).unwrap();
    let line = crate::stdio::spliced(&bodies, &line);
    let sent: Value = serde_json::from_slice(&line).unwrap();
    let text = sent["content"][0]["text"].as_str().unwrap().to_owned();
    (sent["structuredContent"].clone(), text, serde_json::to_value(&snap).unwrap())
}

/// A fleet that fits is the same JSON as structured content and as text, whether
/// the body is parked for the guard or built as a value.
#[test]
fn a_snapshot_that_fits_is_whole_in_both_forms() {
    for parked in [false, true] {
        for (beat, now, stale) in [(100, 110, 0), (100, 140, 2)] {
            let (value, text, fresh) = answer_of(2, beat, now, parked);
            assert_eq!(value, fresh);
            assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), fresh);
            assert_eq!(value["counts"]["stale_worker_count"], stale);
        }
    }
}

/// Past the limit a text-only client can take, the text block is a bounded digest of
/// the verdict, the counts and the blockers that fit; the structured content is
/// still the whole snapshot.
#[test]
fn a_snapshot_too_large_for_text_gets_a_digest_beside_the_whole_structured_content() {
    for parked in [false, true] {
        // 400 workers whose heartbeats lapsed: every one a stale-worker blocker.
        let (value, text, fresh) = answer_of(400, 100, 140, parked);
        let full = serde_json::to_string(&fresh).unwrap();
        assert!(full.len() > FULL_TEXT_LIMIT, "the fleet is large enough: {}", full.len());
        assert!(text.len() <= FULL_TEXT_LIMIT, "digest of {} characters", text.len());
        assert_eq!(value, fresh);

        let digest: Value = serde_json::from_str(&text).unwrap();
        for field in ["snapshot_at", "consistency_token", "live_fleet_safe", "counts"] {
            assert_eq!(digest[field], fresh[field], "{field}");
        }
        let shown = digest["active_blockers"].as_array().unwrap();
        assert!(!shown.is_empty() && shown.len() < 400, "{} blockers shown", shown.len());
        let findings = fresh["findings"].as_array().unwrap();
        let blockers: Vec<&Value> = findings.iter().filter(|f| f["active_blocker"] == true).collect();
        assert!(blockers.len() >= 400, "every lapsed worker is a blocker");
        assert_eq!(
            shown.iter().collect::<Vec<_>>(),
            blockers[..shown.len()],
            "the first blockers, in report order"
        );
        assert_eq!(
            digest["omitted"]["findings"],
            findings.len() - shown.len(),
            "every finding accounted for"
        );
        assert_eq!(digest["omitted"]["workers"], 400);
    }
}

/// The retire capability withdrawn between apply's entry check and its mutation:
/// the second check, made just before the registry is written, refuses.
#[test]
fn a_capability_revoked_inside_one_apply_call_stops_it_before_the_write() {
    let dir = tempfile::tempdir().unwrap();
    let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
    let launch = Launch::mint(&location, &ClientType::new("codex").unwrap(), None, None).unwrap();
    let options = WorkerOptions {
        namespace: Namespace::Reconciler,
        process: fleet_runtime::process::current_process().unwrap(),
        heartbeat_ttl: HeartbeatTtl::from_secs(30).unwrap(),
        repository: None,
        revisions: Revisions::default(),
        launch: Some(fleet_runtime::LaunchProcess::current().unwrap()),
    };
    let session = WorkerSession::start(&location, &launch.env, options).unwrap();
    let with = Profile { role: Namespace::Reconciler, allowed_operations: vec![READ.into(), RETIRE.into()] };
    let without = Profile { role: Namespace::Reconciler, allowed_operations: vec![READ.into()] };
    let server = FleetServer::new(Context {
        location: location.clone(),
        namespace: Namespace::Reconciler,
        profile: "reconciler".into(),
        profiles: Profiles::scripted(vec![with, without]),
        env: Ok(launch.env.clone()),
        runtime: fleet_runtime::StableRuntime::capture(),
        registration: crate::registration::Registration::settled(Ok(session.row().clone())),
    });
    let before = open_registry(&location, OpenMode::MustExist).unwrap().export().unwrap();
    let params = ApplyParams {
        registry_fingerprint: "b3:0000000000000000000000000000000000000000000000000000000000000000".into(),
        candidate_fingerprint: "b3:1111111111111111111111111111111111111111111111111111111111111111".into(),
        worker_identities: Some(json!(["wkr-x"])),
        canonical_repository: None,
        require_registry_match: false,
        audit: AuditArgs::default(),
    };
    let refusal = server.apply_body(params).unwrap_err();
    let body = refusal.structured_content.unwrap();
    assert_eq!(body["error"], "permission_revoked", "{body}");
    let after = open_registry(&location, OpenMode::MustExist).unwrap().export().unwrap();
    assert_eq!(before.worker_registrations.len(), after.worker_registrations.len());
    session.release().unwrap();
}
