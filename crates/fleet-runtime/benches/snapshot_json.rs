//! Writing a snapshot of 1k and 10k healthy workers as JSON: serialised afresh (what
//! every call did before), and by a long-lived reader from the worker JSON it kept
//! (nothing changed since its last write), beside the floor of copying as many bytes.
//! Allocates with mimalloc, as `fleetctl` and `fleet-mcp` do.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fleet_registry::{OpenMode, RegistryDump};
use fleet_runtime::{Fleet, RegistryLocation, open_registry};
use serde_json::json;

/// A registry at `location` holding a healthy fleet of `workers` rows of another host
/// (nothing to probe), five namespaces to each ledgered instance, heartbeats at
/// 2026-07-30T12:00:00Z with a day's TTL.
fn healthy_fleet(location: &RegistryLocation, workers: usize) {
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

fn snapshot_json(c: &mut Criterion) {
    let mut group = c.benchmark_group("snapshot_json");
    group.sample_size(30);
    let at = fleet_identity::Timestamp::parse("2026-07-30T12:00:10Z").expect("time");
    for workers in [1_000usize, 10_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
        healthy_fleet(&location, workers);
        let mut reader = Fleet::new(location);
        let mut taken = reader.json_snapshot(None, &fleet_snapshot::Policy::default(), at).expect("snapshot");
        let mut first = Vec::new();
        taken.write_json(&mut first).expect("write");
        assert!(taken.snapshot.live_fleet_safe, "a healthy fleet");
        group.bench_with_input(BenchmarkId::new("serialised_afresh", workers), &workers, |b, _| {
            b.iter(|| {
                let mut out = Vec::new();
                serde_json::to_writer(&mut out, &taken.snapshot).expect("write");
                out
            })
        });
        group.bench_with_input(BenchmarkId::new("from_kept_worker_json", workers), &workers, |b, _| {
            b.iter(|| {
                let mut out = Vec::new();
                taken.write_json(&mut out).expect("write");
                out
            })
        });
        group.bench_with_input(BenchmarkId::new("copy_floor", workers), &workers, |b, _| {
            b.iter(|| std::hint::black_box(&first).clone())
        });
    }
    group.finish();
}

criterion_group!(benches, snapshot_json);
criterion_main!(benches);
