//! Classifies a registry export with nothing but the pure crates: no store, no probe, no
//! async runtime. This is how another Rust tool links Fleetward to judge a fleet it
//! only has on file.
//!
//! ```sh
//! fleetctl registry export > fleet.json
//! cargo run -p fleet-snapshot --example classify_export -- fleet.json [--at 2026-07-30T12:10:00Z]
//! ```
//!
//! Without `--at` the snapshot is taken now. No liveness probe runs, so every worker's
//! heartbeat alone speaks for it, as it does for rows of another host.

use std::process::ExitCode;

use fleet_identity::Timestamp;
use fleet_model::RegistryDump;
use fleet_snapshot::{Policy, ProbeResults, SnapshotInput, snapshot};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(safe) => ExitCode::from(if safe { 0 } else { 1 }),
        Err(message) => {
            eprintln!("classify_export: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<bool, String> {
    let (path, at) = match args.as_slice() {
        [path] => (path, None),
        [path, flag, at] if flag == "--at" => (path, Some(at)),
        _ => return Err("usage: classify_export FILE [--at RFC3339]".into()),
    };
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let dump = RegistryDump::from_json(&text).map_err(|e| format!("{path}: {e}"))?;
    let now = match at {
        Some(at) => Timestamp::parse(at).map_err(|e| format!("--at: {e}"))?,
        None => now()?,
    };
    let fleet = snapshot(SnapshotInput {
        rows: &dump.worker_registrations,
        ledger: &dump.instances,
        manifest: None,
        probes: &ProbeResults::new(),
        policy: &Policy::default(),
        now,
    });
    let verdict = if fleet.live_fleet_safe { "SAFE" } else { "UNSAFE" };
    println!(
        "fleet {verdict} at {now}: {} live of {} active workers in {} instances",
        fleet.counts.live_worker_count, fleet.counts.active_worker_count, fleet.counts.instance_count
    );
    for finding in &fleet.findings {
        let blocker = if finding.active_blocker { "blocker" } else { "note" };
        println!("  {blocker:<8} {:<32} {}", finding.code.as_str(), finding.detail);
    }
    Ok(fleet.live_fleet_safe)
}

/// The application's clock: the example is a program, so it may read one; the library
/// never does.
fn now() -> Result<Timestamp, String> {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("clock before 1970: {e}"))?;
    let millis = i64::try_from(since_epoch.as_millis()).map_err(|e| format!("clock: {e}"))?;
    Timestamp::from_unix_millis(millis).ok_or_else(|| "clock out of range".to_owned())
}
