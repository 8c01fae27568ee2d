//! Writes the synthetic benchmark fleet as a registry export, for whole-process
//! measurements: `cargo run --release -p fleet-snapshot --example synthetic_export --
//! 100000 > fleet.json`, then `fleetctl registry import fleet.json`.
//!
//! The fleet's heartbeats are fresh when the file is written and carry a TTL of a day, so
//! a benchmark run later that day sees the same live fleet (one row in fifty stale, one
//! in ten historical).

#[path = "../benches/support/synthetic.rs"]
mod synthetic;

use std::io::Write as _;

fn main() {
    let rows: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let (worker_registrations, instances, _) = synthetic::fleet_at(rows, now - 1000, 86_400);
    let dump = fleet_model::RegistryDump { instances, worker_registrations };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let written =
        serde_json::to_writer(&mut out, &dump).map_err(std::io::Error::from).and_then(|()| out.flush());
    if let Err(e) = written {
        eprintln!("synthetic_export: {e}");
        std::process::exit(1);
    }
}
