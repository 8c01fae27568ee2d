//! Writing a snapshot of 1k and 10k healthy workers as JSON: serialised afresh (what
//! every call did before), and by a long-lived reader from the worker JSON it kept
//! (nothing changed since its last write), beside the floor of copying as many bytes.
//! Allocates with mimalloc, as `fleetctl` and `fleet-mcp` do.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use fleet_runtime::{Fleet, RegistryLocation};

mod common;
use common::healthy_fleet;

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
