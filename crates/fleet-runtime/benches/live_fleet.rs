//! A snapshot of a fleet that never stops heartbeating, at 1k and 10k healthy workers:
//! before each snapshot another connection writes one worker's heartbeat. Three
//! readers: the floor (the write, and a read of the rows changed since, which any
//! reader that sees the write pays), a session that classifies the whole fleet again
//! (`numbered_json_snapshot`), and one that follows the heartbeat of a worker live
//! then and now (`json_snapshot_or_unchanged`). Allocates with mimalloc, as `fleetctl`
//! and `fleet-mcp` do.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fleet_registry::{OpenMode, RegistryDump};
use fleet_runtime::{Fleet, RegistryLocation, Taken, open_registry};
use fleet_snapshot::Policy;
use serde_json::json;

/// A registry at `path` holding a healthy fleet of `workers` rows of another host
/// (nothing to probe), heartbeats at 12:00:00 with a day's TTL.
fn healthy_fleet(path: &std::path::Path, workers: usize) {
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
    let location = RegistryLocation::Sqlite(path.to_owned());
    open_registry(&location, OpenMode::CreateIfMissing).expect("registry").import(&dump).expect("import");
}

/// Another connection's heartbeats, one worker after another.
struct Beats {
    db: rusqlite::Connection,
    workers: usize,
    n: usize,
}

impl Beats {
    fn beat(&mut self) {
        self.n += 1;
        let beat = format!("2026-07-30T12:00:05.{:03}Z", self.n % 1000);
        let worker = format!("wkr-bench-{:05}", (self.n * 7919) % self.workers);
        self.db
            .execute(
                "UPDATE worker_registrations SET last_heartbeat_at = ?1 WHERE worker_identity = ?2",
                [beat, worker],
            )
            .expect("heartbeat");
    }
}

fn live_fleet(c: &mut Criterion) {
    let mut group = c.benchmark_group("live_fleet");
    group.sample_size(30);
    let at = fleet_identity::Timestamp::parse("2026-07-30T12:00:10Z").expect("time");
    let policy = Policy::default();
    for workers in [1_000usize, 10_000] {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("registry.sqlite3");
        healthy_fleet(&path, workers);
        let mut beats = Beats { db: rusqlite::Connection::open(&path).expect("writer"), workers, n: 0 };
        let location = RegistryLocation::Sqlite(path.clone());
        let mut fleet = Fleet::new(location.clone());
        group.bench_with_input(BenchmarkId::new("floor_write_and_read", workers), &workers, |b, _| {
            b.iter(|| {
                beats.beat();
                fleet.dump().expect("read").worker_registrations.len()
            })
        });
        let mut fleet = Fleet::new(location.clone());
        group.bench_with_input(BenchmarkId::new("classified_again", workers), &workers, |b, _| {
            b.iter(|| {
                beats.beat();
                fleet.numbered_json_snapshot(None, &policy, at).expect("snapshot").1.snapshot.counts
            })
        });
        let mut fleet = Fleet::new(location);
        fleet.json_snapshot(None, &policy, at).expect("snapshot");
        group.bench_with_input(BenchmarkId::new("heartbeats_followed", workers), &workers, |b, _| {
            b.iter(|| {
                beats.beat();
                match fleet.json_snapshot_or_unchanged(None, &policy, at).expect("snapshot") {
                    Taken::Unchanged { consistency_token, .. } => consistency_token,
                    Taken::Fresh(..) => panic!("a heartbeat of a live worker changes no verdict"),
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, live_fleet);
criterion_main!(benches);
