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
use fleet_runtime::{Fleet, RegistryLocation, Taken};
use fleet_snapshot::Policy;

mod common;
use common::healthy_fleet;

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
        let location = RegistryLocation::Sqlite(path.clone());
        healthy_fleet(&location, workers);
        let mut beats = Beats { db: rusqlite::Connection::open(&path).expect("writer"), workers, n: 0 };
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
