//! Time to classify 1k, 10k and 100k rows (one core; the snapshot is single-threaded),
//! unordered and in the order a store returns them, with the allocator `fleetctl` and
//! `fleet-mcp` use (mimalloc; the system allocator's figures are in PERFORMANCE.md).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "support/synthetic.rs"]
mod synthetic;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fleet_model::WorkerRow;
use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};

/// One group of the three fleet sizes, each fleet's rows arranged by `arrange` first.
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
