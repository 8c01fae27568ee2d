//! A Rust tool embedding a Fleetward worker, as `fleetctl worker run` does for a
//! command: mint a launch, register this process in a namespace (owned by its launch),
//! heartbeat, read the fleet, release.
//!
//! `cargo run -p fleet-runtime --example embedded_worker [REGISTRY]` (default: a
//! throw-away SQLite file). With a registry given, the worker stays registered in it
//! until the example ends.

use fleet_runtime::{
    ClientType, Fleet, Launch, Namespace, Policy, RegistryLocation, Revisions, WorkerOptions, WorkerSession,
    now,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = tempfile::tempdir()?;
    let location = match std::env::args().nth(1) {
        Some(given) => RegistryLocation::parse(&given)?,
        None => RegistryLocation::Sqlite(scratch.path().join("registry.sqlite3")),
    };
    // A launcher mints the instance its workers share; a tool run inside a launch reads
    // it with `InstanceEnv::from_process` instead.
    let launch = Launch::mint(&location, &ClientType::new("codex")?, None, None)?;
    // This process, owned as `fleetctl worker run` owns its rows: by the launch that
    // started it or, outside one, by itself.
    let mut options = WorkerOptions::this_process(Namespace::Author)?;
    options.revisions = Revisions { code: Some(env!("CARGO_PKG_VERSION").into()), ..Revisions::default() };
    let worker = WorkerSession::start(&location, &launch.env, options)?;
    println!("registered {} in {}", worker.row().worker_identity, location);

    // The session heartbeats on its own thread; a tool driving its own loop may beat
    // whenever it likes besides.
    worker.heartbeat()?;

    let mut fleet = Fleet::new(location.clone());
    let snapshot = fleet.snapshot(None, &Policy::default(), now())?;
    println!(
        "fleet: {} ({} active workers)",
        if snapshot.live_fleet_safe { "SAFE" } else { "UNSAFE" },
        snapshot.counts.active_worker_count
    );
    for finding in snapshot.findings.iter().filter(|f| f.active_blocker) {
        println!("  blocker {}: {}", finding.code, finding.detail);
    }

    let released = worker.release()?;
    println!("released: {}", released.status);
    Ok(())
}
