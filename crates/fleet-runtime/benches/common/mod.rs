//! What the benches share: a healthy fleet in a registry.

use fleet_registry::{OpenMode, RegistryDump};
use fleet_runtime::{RegistryLocation, open_registry};
use serde_json::json;

/// A registry at `location` holding a healthy fleet of `workers` rows of another host
/// (nothing to probe), five namespaces to each ledgered instance, heartbeats at
/// 2026-07-30T12:00:00Z with a day's TTL.
pub(crate) fn healthy_fleet(location: &RegistryLocation, workers: usize) {
    let namespaces = ["author", "reviewer", "merger", "controller", "reconciler"];
    let instance = |i: usize| format!("inst-codex-20260730T120000Z-{:012x}", i / 5);
    let instances: Vec<_> = (0..workers)
        .step_by(5)
        .map(|i| {
            json!({"client_instance_id": instance(i), "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"})
        })
        .collect();
    let rows: Vec<_> = (0..workers)
        .map(|i| {
            json!({
                "worker_identity": format!("wkr-bench-{i:05}"), "client_type": "codex",
                "client_instance_id": instance(i), "namespace": namespaces[i % 5],
                "generation_id": format!("gen-{i}"), "host_id": "0123456789abcdef0123456789abcdef",
                "boot_id": "11111111-2222-3333-4444-555555555555", "pid": 1_000_000 + i,
                "process_start_time": 1 + i, "status": "active", "ownership_state": "owned",
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": "2026-07-30T12:00:00.000Z",
                "heartbeat_ttl_s": 86_400, "session_id": format!("sess-{}", i / 5), "repository": "/srv/repo",
            })
        })
        .collect();
    let text = json!({"instances": instances, "worker_registrations": rows}).to_string();
    let dump = RegistryDump::from_json(&text).expect("dump");
    open_registry(location, OpenMode::CreateIfMissing).expect("registry").import(&dump).expect("import");
}
