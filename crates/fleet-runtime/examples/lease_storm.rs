//! A lease storm, checked from the audit log: `WORKERS` processes each run `ROUNDS`
//! rounds of acquire, renew, release and takeover on a few shared keys with a short
//! TTL, while the driver SIGKILLs some of them (a killed worker is started again as a
//! new owner) and SIGSTOPs others for up to twice the TTL, so that their leases lapse
//! and are taken over while they sleep. Afterwards the whole audit log is checked:
//!
//! * for each key, the epochs granted (acquired or taken over) strictly increase;
//! * every renewal and release that succeeded was made by the holder of the latest
//!   epoch granted before it — a former holder never completes an action after a
//!   takeover (its attempts are denied, `stale_epoch` and the like).
//!
//! Not a test (it runs for minutes at full size); `scripts/lease-storm.sh` runs it on
//! SQLite and PostgreSQL and docs/PERFORMANCE.md records the figures.
//!
//! ```sh
//! cargo run --release -p fleet-runtime --example lease_storm -- REGISTRY [WORKERS ROUNDS KILLS STOPS]
//! ```

use std::collections::BTreeMap;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fleet_lease::{Holder, LeaseKey, LeaseKind, LeaseRecord};
use fleet_registry::{AuditContext, OpenMode, Registry, StoreError};
use fleet_runtime::{AnyStore, RegistryLocation, open_registry};

/// The shared keys; few, so that workers contend.
const KEYS: [&str; 3] = ["workflow:storm-a", "workflow:storm-b", "workflow:storm-c"];
/// Short, so that a stopped worker's lease lapses and is taken over.
const TTL: time::Duration = time::Duration::milliseconds(300);

/// A small generator, seeded from the OS: the storm need not be reproducible, only
/// varied.
struct Rng(u64);

impl Rng {
    fn new() -> Self {
        let mut seed = [0u8; 8];
        getrandom::fill(&mut seed).expect("random seed");
        Self(u64::from_le_bytes(seed) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

fn open(location: &str) -> Registry<AnyStore> {
    let location = RegistryLocation::parse(location).expect("registry location");
    open_registry(&location, OpenMode::CreateIfMissing).expect("open registry")
}

/// One worker process: `rounds` rounds on random keys as `owner`. Store errors (busy,
/// a lost connection) are part of the storm: the round is simply over.
fn worker(location: &str, owner: &str, rounds: u64) {
    let mut registry = open(location);
    let ctx = AuditContext::default();
    let mut rng = Rng::new();
    for _ in 0..rounds {
        let key =
            LeaseKey::new(KEYS[usize::try_from(rng.below(KEYS.len() as u64)).unwrap_or(0)]).expect("key");
        let _ = round(&mut registry, &key, owner, &ctx, &mut rng);
    }
}

fn round(
    registry: &mut Registry<AnyStore>,
    key: &LeaseKey,
    owner: &str,
    ctx: &AuditContext,
    rng: &mut Rng,
) -> Result<(), StoreError> {
    let held: LeaseRecord = match registry.acquire_lease(key, LeaseKind::Workflow, owner, TTL, &[], ctx)? {
        Ok(lease) => lease,
        Err(_) => {
            // Held by someone else, or lapsed: try to take over what is there now.
            let (Some(current), _) = registry.lease(key)? else { return Ok(()) };
            match registry.take_over_lease(key, current.fencing_epoch, owner, TTL, &[], ctx)? {
                Ok(lease) => lease,
                Err(_) => return Ok(()),
            }
        }
    };
    let holder: Holder = held.holder();
    for _ in 0..rng.below(3) {
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        if registry.renew_lease(key, &holder, TTL, ctx)?.is_err() {
            return Ok(());
        }
    }
    // Now and then walk away without releasing: the lease lapses for others to take.
    if rng.below(4) != 0 {
        let _ = registry.release_lease(key, &holder, ctx)?;
    }
    Ok(())
}

/// What the audit log shows, and what it must never show.
#[derive(Debug, Default)]
struct Verdict {
    entries: usize,
    by_outcome: BTreeMap<String, usize>,
    violations: Vec<String>,
}

fn check(registry: &mut Registry<AnyStore>) -> Verdict {
    let log = registry.lease_audit(None).expect("read the audit log");
    let mut verdict = Verdict { entries: log.len(), ..Verdict::default() };
    // Per key: the latest grant (epoch, owner).
    let mut latest: BTreeMap<&str, (u64, &str)> = BTreeMap::new();
    for entry in &log {
        let label = match &entry.reason {
            Some(reason) => format!("{} {}: {reason}", entry.event, entry.outcome),
            None => format!("{} {}", entry.event, entry.outcome),
        };
        *verdict.by_outcome.entry(label).or_default() += 1;
        let (Some(epoch), Some(identity)) = (entry.fencing_epoch, entry.identity.as_deref()) else {
            continue;
        };
        match entry.outcome.as_str() {
            "acquired" | "taken_over" => {
                if let Some((before, _)) = latest.get(entry.lease_key.as_str())
                    && epoch <= *before
                {
                    verdict.violations.push(format!(
                        "audit #{}: {} granted epoch {epoch} after epoch {before}",
                        entry.id, entry.lease_key
                    ));
                }
                latest.insert(&entry.lease_key, (epoch, identity));
            }
            "renewed" | "released" if latest.get(entry.lease_key.as_str()) != Some(&(epoch, identity)) => {
                verdict.violations.push(format!(
                    "audit #{}: {identity} {} {} at epoch {epoch}, but the latest grant was {:?}",
                    entry.id,
                    entry.outcome,
                    entry.lease_key,
                    latest.get(entry.lease_key.as_str())
                ));
            }
            _ => {}
        }
    }
    verdict
}

fn spawn(location: &str, owner: &str, rounds: u64) -> Child {
    Command::new(std::env::current_exe().expect("own path"))
        .args(["--worker", location, owner, &rounds.to_string()])
        .spawn()
        .expect("spawn a worker")
}

fn signal(child: &Child, name: &str) {
    let _ = Command::new("kill").args([&format!("-{name}"), &child.id().to_string()]).status();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        let rounds = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(0);
        worker(&args[1], &args[2], rounds);
        return;
    }
    let Some(location) = args.first().cloned() else {
        eprintln!("usage: lease_storm REGISTRY [WORKERS ROUNDS KILLS STOPS]");
        std::process::exit(2);
    };
    let number = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let (workers, rounds, kills, stops) = (number(1, 16), number(2, 10_000), number(3, 200), number(4, 200));
    drop(open(&location));

    let started = Instant::now();
    let mut rng = Rng::new();
    let mut incarnations = vec![0u64; usize::try_from(workers).unwrap_or(0)];
    let mut children: Vec<Option<Child>> =
        (0..workers).map(|i| Some(spawn(&location, &format!("storm-{i}-0"), rounds))).collect();
    let (mut killed, mut stopped) = (0, 0);
    while children.iter().any(Option::is_some) {
        std::thread::sleep(Duration::from_millis(10 + rng.below(40)));
        for slot in &mut children {
            if let Some(child) = slot
                && child.try_wait().ok().flatten().is_some()
            {
                *slot = None;
            }
        }
        let i = usize::try_from(rng.below(workers)).unwrap_or(0);
        let Some(child) = children[i].as_mut() else { continue };
        if killed < kills && rng.below(2) == 0 {
            let _ = child.kill();
            let _ = child.wait();
            killed += 1;
            incarnations[i] += 1;
            // A new process is a new owner: the old one's authority died with it.
            children[i] = Some(spawn(&location, &format!("storm-{i}-{}", incarnations[i]), rounds));
        } else if stopped < stops {
            signal(child, "STOP");
            std::thread::sleep(Duration::from_millis(rng.below(600)));
            signal(child, "CONT");
            stopped += 1;
        }
    }
    let elapsed = started.elapsed();
    let verdict = check(&mut open(&location));
    println!(
        "{workers} workers x {rounds} rounds, {killed} SIGKILLs, {stopped} SIGSTOPs, {:.0} s: {} audit entries",
        elapsed.as_secs_f64(),
        verdict.entries
    );
    for (outcome, n) in &verdict.by_outcome {
        println!("  {n:>8}  {outcome}");
    }
    if verdict.violations.is_empty() {
        println!(
            "no violation: epochs strictly increase per key, and no former holder acted after a takeover"
        );
    } else {
        for v in verdict.violations.iter().take(20) {
            println!("VIOLATION {v}");
        }
        println!("{} violations", verdict.violations.len());
        std::process::exit(1);
    }
}
