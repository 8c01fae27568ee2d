//! How the cost of one row grows with the fleet: classifies fleets of 1k, 10k and 100k
//! rows in store order (as `fleetctl` and `fleet-mcp` classify them), round after round,
//! each round timing every size once, and prints each size's median time per row and
//! the median of each round's ratio to the 1k figure. Rounds interleave the sizes, so a
//! change in the machine's speed moves both sides of a ratio alike.
//!
//! `cargo run --release -p fleet-snapshot --example per_row_ratio -- 15`

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[path = "../benches/support/synthetic.rs"]
mod synthetic;

use std::time::Instant;

use fleet_model::WorkerRow;
use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};

const SIZES: [usize; 3] = [1_000, 10_000, 100_000];

/// Nanoseconds per row of one snapshot of `rows`, the best of `repeat` in a row (the
/// small fleets repeat, so that one measurement lasts about as long as the largest).
fn per_row(
    rows: &[WorkerRow],
    ledger: &[fleet_model::InstanceRecord],
    now: fleet_identity::Timestamp,
) -> f64 {
    let repeat = (100_000 / rows.len()).max(1);
    let (probes, policy) = (ProbeResults::new(), Policy::default());
    let started = Instant::now();
    for _ in 0..repeat {
        let s =
            snapshot(SnapshotInput { rows, ledger, manifest: None, probes: &probes, policy: &policy, now });
        std::hint::black_box(&s);
    }
    started.elapsed().as_nanos() as f64 / (repeat * rows.len()) as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15).max(1);
    let fleets: Vec<_> = SIZES
        .iter()
        .map(|&n| {
            let (rows, ledger, now) = synthetic::fleet(n);
            let rows: Vec<WorkerRow> = fleet_model::rows_by_identity(&rows).into_iter().cloned().collect();
            (rows, ledger, now)
        })
        .collect();
    // One unmeasured round warms the allocator and the caches alike for every size.
    for (rows, ledger, now) in &fleets {
        per_row(rows, ledger, *now);
    }
    let mut times = vec![Vec::new(); SIZES.len()];
    let mut ratios = vec![Vec::new(); SIZES.len()];
    for _ in 0..rounds {
        let round: Vec<f64> = fleets.iter().map(|(rows, ledger, now)| per_row(rows, ledger, *now)).collect();
        for (at, ns) in round.iter().enumerate() {
            times[at].push(*ns);
            ratios[at].push(ns / round[0]);
        }
    }
    for (at, rows) in SIZES.iter().enumerate() {
        println!(
            "rows={rows:>6}  ns_per_row={:>6.0}  ratio_to_1k={:.2}  (ratio range {:.2}-{:.2}, {rounds} rounds)",
            median(times[at].clone()),
            median(ratios[at].clone()),
            ratios[at].iter().copied().fold(f64::INFINITY, f64::min),
            ratios[at].iter().copied().fold(0.0, f64::max),
        );
    }
}
