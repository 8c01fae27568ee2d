//! Heartbeats through the registry against a bare prepared `UPDATE` of the same rows on
//! the same server, alternating in rounds, as ratios (absolute times move with the
//! machine's load; the ratio is what is compared). Each of `CLIENTS` threads holds its
//! own connection and beats its own worker row, as the workers of a fleet do. Two
//! floors: the bare statement committed durably (the server's default), and the same
//! statement committed unflushed as the registry's heartbeat is. Both speak plaintext
//! (`sslmode=disable`), whatever the server offers.
//!
//! ```sh
//! FLEET_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
//!   cargo run --release -p registry-postgres --example heartbeat_rate -- 2000 6 8
//! ```
//! (arguments: heartbeats per client per round, rounds, clients)

use std::time::Instant;

use fleet_identity::{GenerationId, Namespace};
use fleet_registry::conformance::{ScriptedProbe, at, process, registration};
use fleet_registry::{Registry, WorkerCredential, WorkerToken};
use registry_postgres::PostgresStore;

const UPDATE: &str = "UPDATE worker_registrations SET last_heartbeat_at = $1, ownership_state = 'owned' \
     WHERE worker_identity = $2 AND generation_id = $3 AND token_fingerprint = $4 AND status = 'active'";
const UNFLUSHED: &str = "UPDATE worker_registrations SET last_heartbeat_at = $1, ownership_state = 'owned' \
     FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed \
     WHERE worker_identity = $2 AND generation_id = $3 AND token_fingerprint = $4 AND status = 'active'";

/// One client: a registry connection and a bare connection, and the worker it beats for.
struct Client {
    registry: Registry<PostgresStore>,
    bare: postgres::Client,
    update: postgres::Statement,
    unflushed: postgres::Statement,
    who: WorkerCredential,
}

impl Client {
    fn new(url: &str, schema: &str, n: u32) -> Self {
        let mut registry =
            Registry::new(PostgresStore::connect_in_schema(url, Some(schema)).expect("connect"));
        let token = WorkerToken::from_bytes([u8::try_from(n % 250).unwrap_or(0) + 1; 32]);
        let generation = format!("gen-bench-{n}");
        let reg =
            registration(Namespace::Author, process(100 + i64::from(n), 5000 + u64::from(n)), &generation);
        let row = registry.register(&reg, &token, at(0), &ScriptedProbe::default()).expect("register").row;
        let who = WorkerCredential {
            worker_identity: row.worker_identity.clone(),
            generation_id: GenerationId::new(generation).unwrap(),
            token,
        };
        let mut bare = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        bare.batch_execute(&format!("SET search_path TO {schema}")).unwrap();
        let update = bare.prepare(UPDATE).unwrap();
        let unflushed = bare.prepare(UNFLUSHED).unwrap();
        Self { registry, bare, update, unflushed, who }
    }

    fn ours(&mut self, beats: u32, offset: u32) {
        for i in 0..beats {
            self.registry.heartbeat(&self.who, at(i64::from(offset + i))).expect("heartbeat");
        }
    }

    fn floor(&mut self, beats: u32, offset: u32, unflushed: bool) {
        let statement = if unflushed { &self.unflushed } else { &self.update };
        let fingerprint = self.who.token.fingerprint();
        for i in 0..beats {
            let beat = at(i64::from(offset + i)).to_string();
            let params: [&(dyn postgres::types::ToSql + Sync); 4] =
                [&beat, &self.who.worker_identity.as_str(), &self.who.generation_id.as_str(), &fingerprint];
            assert_eq!(self.bare.execute(statement, &params).unwrap(), 1);
        }
    }
}

/// Runs `work` on every client at once, and returns the wall time.
fn timed(clients: &mut [Client], work: impl Fn(&mut Client) + Sync) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for client in clients.iter_mut() {
            s.spawn(|| work(client));
        }
    });
    start.elapsed().as_secs_f64()
}

/// `url` with `sslmode=disable`, any other `sslmode` dropped: the bare client speaks
/// plaintext, and the registry, which would otherwise take TLS from a server that offers
/// it (`prefer`), must pay for the same transport to be compared with it.
fn plaintext(url: &str) -> String {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut pairs: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("sslmode=")).collect();
    pairs.push("sslmode=disable");
    format!("{base}?{}", pairs.join("&"))
}

fn main() {
    let url = plaintext(&std::env::var("FLEET_TEST_POSTGRES_URL").expect("FLEET_TEST_POSTGRES_URL"));
    let mut args = std::env::args().skip(1);
    let per_round: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let count: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let schema = format!("fleet_bench_{}", std::process::id());
    let mut clients: Vec<Client> = (0..count).map(|n| Client::new(&url, &schema, n)).collect();
    let (mut ours, mut durable, mut unflushed) = (0f64, 0f64, 0f64);
    for round in 0..rounds {
        let offset = round * per_round;
        // Each arm goes first, second and third in turn, so none gains from its place.
        for arm in (0..3).map(|i| (i + round) % 3) {
            match arm {
                0 => ours += timed(&mut clients, |c| c.ours(per_round, offset)),
                1 => durable += timed(&mut clients, |c| c.floor(per_round, offset, false)),
                _ => unflushed += timed(&mut clients, |c| c.floor(per_round, offset, true)),
            }
        }
    }
    let total = f64::from(per_round * rounds * count);
    println!(
        "{count} clients: registry heartbeat {:.0}/s; bare prepared UPDATE {:.0}/s durable \
         ({:.2}x of it), {:.0}/s unflushed ({:.2}x of it)",
        total / ours,
        total / durable,
        durable / ours,
        total / unflushed,
        unflushed / ours
    );
    let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    drop(clients);
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}
