//! Time to classify 1k, 10k and 100k rows (one core; the snapshot is single-threaded),
//! unordered and in the order a store returns them, with the allocator `fleetctl` and
//! `fleet-mcp` use (mimalloc; docs/PERFORMANCE.md says why).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/synthetic.rs"]
mod synthetic;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fleet_model::WorkerRow;
use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};

/// The floor of a snapshot's memory traffic: visit the rows in identity order (as the
/// snapshot does) and touch every field it reads, one byte at each end of each string,
/// doing nothing else. At 100k rows the rows and their strings no longer fit in cache,
/// and this floor's cost per row grows with them.
fn read_fields(rows: &[WorkerRow]) -> u64 {
    fn touch(s: Option<&str>) -> u64 {
        s.map_or(1, |s| {
            let b = s.as_bytes();
            (b.len() as u64)
                ^ u64::from(b.first().copied().unwrap_or(0))
                ^ u64::from(b.last().copied().unwrap_or(0))
        })
    }
    fleet_model::rows_by_identity(rows).into_iter().fold(0u64, |acc, row| {
        let strings = [
            Some(row.worker_identity.as_str()),
            row.client_instance_id.as_deref(),
            row.client_type.as_ref().map(|c| c.as_str()),
            row.session_id.as_ref().map(|s| s.as_str()),
            row.generation_id.as_ref().map(|g| g.as_str()),
            row.host_id.as_ref().map(|h| h.as_str()),
            row.boot_id.as_ref().map(|b| b.as_str()),
            row.last_heartbeat_at.as_deref(),
        ];
        let numbers = u64::from(row.pid.map_or(0, |p| p.get()))
            ^ row.process_start_time.map_or(0, |t| t.ticks())
            ^ row.fencing_epoch.unwrap_or(0)
            ^ u64::from(row.heartbeat_ttl_s.unwrap_or(0))
            ^ row.status as u64
            ^ row.namespace as u64;
        strings.into_iter().fold(acc ^ numbers, |acc, s| acc.rotate_left(5) ^ touch(s))
    })
}

/// One group of the three fleet sizes, each fleet's rows arranged by `arrange` first:
/// the snapshot, and beside it the floor of reading the fields it reads.
fn classify_group(c: &mut Criterion, name: &str, arrange: fn(Vec<WorkerRow>) -> Vec<WorkerRow>) {
    let mut group = c.benchmark_group(name);
    group.sample_size(20);
    for rows in [1_000usize, 10_000, 100_000] {
        let (fleet, ledger, now) = synthetic::fleet(rows);
        let fleet = arrange(fleet);
        let probes = ProbeResults::new();
        let policy = Policy::default();
        group.throughput(Throughput::Elements(rows as u64));
        group.bench_with_input(BenchmarkId::from_parameter(rows), &rows, |b, _| {
            b.iter(|| {
                let s = snapshot(SnapshotInput {
                    rows: &fleet,
                    ledger: &ledger,
                    manifest: None,
                    probes: &probes,
                    policy: &policy,
                    now,
                });
                assert!(!s.live_fleet_safe);
                s
            })
        });
        group.bench_with_input(BenchmarkId::new("read_fields_floor", rows), &rows, |b, _| {
            b.iter(|| read_fields(std::hint::black_box(&fleet)))
        });
    }
    group.finish();
}

fn classify(c: &mut Criterion) {
    classify_group(c, "snapshot_classify", |fleet| fleet);
    // The same fleets in the order a store returns them (by identity), each row's strings
    // allocated in that order, as reading them from a registry allocates them.
    classify_group(c, "snapshot_classify_store_order", |fleet| {
        fleet_model::rows_by_identity(&fleet).into_iter().cloned().collect()
    });
}

criterion_group!(benches, classify);
criterion_main!(benches);
