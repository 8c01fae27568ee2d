//! Peak memory of one snapshot: prints the resident high-water mark after building the
//! rows, and again after classifying them. `cargo run --release -p fleet-snapshot
//! --example snapshot_memory -- 100000`.

#[path = "../benches/support/synthetic.rs"]
mod synthetic;

use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};

fn high_water_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(str::to_owned))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn main() {
    let rows: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let (fleet, ledger, now) = synthetic::fleet(rows);
    let before = high_water_kib();
    let started = std::time::Instant::now();
    let s = snapshot(SnapshotInput {
        rows: &fleet,
        ledger: &ledger,
        manifest: None,
        probes: &ProbeResults::new(),
        policy: &Policy::default(),
        now,
    });
    let elapsed = started.elapsed();
    let after = high_water_kib();
    println!(
        "rows={rows} findings={} classify_ms={:.1} peak_rss_after_rows={before} KiB peak_rss_after_snapshot={after} KiB snapshot_added={} KiB",
        s.findings.len(),
        elapsed.as_secs_f64() * 1000.0,
        after.saturating_sub(before)
    );
}
