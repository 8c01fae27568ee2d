//! Heartbeats through the registry against a bare prepared `UPDATE` of the same row on
//! the same server, alternating in rounds, as a ratio (absolute times move with the
//! machine's load; the ratio is what is compared).
//!
//! ```sh
//! FLEET_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p registry-postgres --example heartbeat_rate -- 2000 5
//! ```

use std::time::Instant;

use fleet_identity::{GenerationId, Namespace};
use fleet_registry::conformance::{ScriptedProbe, at, process, registration};
use fleet_registry::{Registry, WorkerCredential, WorkerToken};
use registry_postgres::PostgresStore;

fn main() {
    let url = std::env::var("FLEET_TEST_POSTGRES_URL").expect("FLEET_TEST_POSTGRES_URL");
    let mut args = std::env::args().skip(1);
    let per_round: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let schema = format!("fleet_bench_{}", std::process::id());
    let mut registry = Registry::new(PostgresStore::connect_in_schema(&url, Some(&schema)).expect("connect"));
    let token = WorkerToken::from_bytes([9; 32]);
    let reg = registration(Namespace::Author, process(100, 5000), "gen-bench");
    let row = registry.register(&reg, &token, at(0), &ScriptedProbe::default()).expect("register").row;
    let who = WorkerCredential {
        worker_identity: row.worker_identity.clone(),
        generation_id: GenerationId::new("gen-bench").unwrap(),
        token: token.clone(),
    };
    let mut bare = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    bare.batch_execute(&format!("SET search_path TO {schema}")).unwrap();
    let update = bare
        .prepare(
            "UPDATE worker_registrations SET last_heartbeat_at = $1, ownership_state = 'owned' \
             WHERE worker_identity = $2 AND generation_id = $3 AND token_fingerprint = $4 AND status = 'active'",
        )
        .unwrap();
    let (mut ours, mut floor) = (0f64, 0f64);
    for round in 0..rounds {
        let start = Instant::now();
        for i in 0..per_round {
            registry.heartbeat(&who, at(i64::from(round * per_round + i))).expect("heartbeat");
        }
        ours += start.elapsed().as_secs_f64();
        let start = Instant::now();
        for i in 0..per_round {
            let n = bare
                .execute(
                    &update,
                    &[
                        &at(i64::from(i)).to_string(),
                        &who.worker_identity.as_str(),
                        &"gen-bench",
                        &token.fingerprint(),
                    ],
                )
                .unwrap();
            assert_eq!(n, 1);
        }
        floor += start.elapsed().as_secs_f64();
    }
    let total = f64::from(per_round * rounds);
    println!(
        "registry heartbeat {:.0}/s, bare prepared UPDATE {:.0}/s: {:.2}x of the floor",
        total / ours,
        total / floor,
        floor / ours
    );
    bare.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}
