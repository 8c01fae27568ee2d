//! Plans retirement from a registry export with nothing but the pure crates: no store,
//! no probe, no async runtime. How another Rust tool links Fleetward to see what
//! retirement would do on a fleet it only has on file.
//!
//! ```sh
//! fleetctl registry export > fleet.json
//! cargo run -p fleet-retirement --example plan_export -- fleet.json --repository /srv/repo \
//!     [--host HOST_ID] [--at 2026-07-30T12:10:00Z]
//! ```
//!
//! No liveness probe runs: a row is a candidate only where its host's own later boot
//! proves its process gone; every other row is preserved with the reason the plan gives.
//! `--host` names the host the plan runs as (default: none of the fleet's).

use std::process::ExitCode;

use fleet_identity::{HostId, Repository, Timestamp};
use fleet_retirement::{Export, RetirementContext};

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("plan_export: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let usage = || "usage: plan_export FILE --repository R [--host HOST_ID] [--at RFC3339]".to_owned();
    let (path, flags) = args.split_first().ok_or_else(usage)?;
    let (mut repository, mut host, mut at) = (None, "00000000000000000000000000000000".to_owned(), None);
    for pair in flags.chunks(2) {
        match pair {
            [flag, value] if flag == "--repository" => repository = Some(value.clone()),
            [flag, value] if flag == "--host" => host.clone_from(value),
            [flag, value] if flag == "--at" => at = Some(value.clone()),
            _ => return Err(usage()),
        }
    }
    let repository = repository.ok_or_else(usage)?;
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let export = Export::from_json(&text).map_err(|e| format!("{path}: {e}"))?;
    let ctx = RetirementContext {
        host_id: HostId::new(host).map_err(|e| format!("--host: {e}"))?,
        boot_id: None,
        canonical_repository: Repository::new(repository).map_err(|e| format!("--repository: {e}"))?,
        now: match at {
            Some(at) => Timestamp::parse(&at).map_err(|e| format!("--at: {e}"))?,
            None => now()?,
        },
    };
    let plan = export.plan(&Default::default(), &ctx);
    println!(
        "retirement plan of {path}: {} candidates, {} preserved of {} rows",
        plan.candidate_count, plan.preserved_count, plan.assessed_count
    );
    println!("registry_fingerprint  {}", plan.registry_fingerprint);
    println!("candidate_fingerprint {}", plan.candidate_fingerprint);
    for (reason, n) in &plan.preserved_reason_counts {
        println!("  preserved {n:>6}  {reason}");
    }
    for candidate in &plan.candidates {
        println!("  candidate  {}", candidate.worker_identity);
    }
    Ok(())
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
