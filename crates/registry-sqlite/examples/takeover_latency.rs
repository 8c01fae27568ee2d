//! Takeover latency after a holder dies: a holder acquires a workflow lease with TTL T
//! and stops renewing at once (it "dies"); a contender polls acquisition every P. Prints
//! how long after the death the contender held the lease, against T + P.
//! `cargo run --release -p registry-sqlite --example takeover_latency -- 1000 50`.

use std::time::{Duration, Instant};

use fleet_lease::{LeaseKey, LeaseKind};
use fleet_registry::OpenMode;
use fleet_registry::{AuditContext, Registry};
use registry_sqlite::SqliteStore;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().unwrap_or(0));
    let ttl_ms = args.next().filter(|v| *v > 0).unwrap_or(1000);
    let poll_ms = args.next().filter(|v| *v > 0).unwrap_or(50);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("registry.sqlite3");
    let mut holder = Registry::new(SqliteStore::open(&path, OpenMode::CreateIfMissing).expect("open"));
    let mut contender = Registry::new(SqliteStore::open(&path, OpenMode::MustExist).expect("open"));
    let ctx = AuditContext::default();
    let ttl = time::Duration::milliseconds(i64::try_from(ttl_ms).unwrap_or(1000));
    let mut worst = Duration::ZERO;
    for trial in 0..5 {
        let key = LeaseKey::new(format!("workflow:latency-{trial}")).expect("key");
        holder
            .acquire_lease(&key, LeaseKind::Workflow, "holder", ttl, &[], &ctx)
            .expect("store")
            .expect("acquired");
        let died = Instant::now();
        loop {
            if contender
                .acquire_lease(&key, LeaseKind::Workflow, "contender", ttl, &[], &ctx)
                .expect("store")
                .is_ok()
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(poll_ms));
        }
        let latency = died.elapsed();
        worst = worst.max(latency);
        println!("trial {trial}: taken over {:.0} ms after the holder died", latency.as_secs_f64() * 1000.0);
    }
    println!(
        "ttl {ttl_ms} ms, poll {poll_ms} ms: worst {:.0} ms, bound ttl + poll = {} ms",
        worst.as_secs_f64() * 1000.0,
        ttl_ms + poll_ms
    );
}
