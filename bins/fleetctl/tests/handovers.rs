//! Fencing proven from outside, as Jepsen checks a system: several `connector run`
//! starters contend for one binding while their processes are paused (SIGSTOP, then
//! SIGCONT) and killed (SIGKILL) at random; every command appends `tick EPOCH PID` to a
//! log this test owns, every 50 ms while it runs. The log, not the code's view of itself,
//! must show that authority that has passed is never acted on:
//!
//! * epochs never go back: no line of an older epoch after a line of a newer one (no
//!   command runs at an epoch older than the newest granted, and no two epochs overlap);
//! * within an epoch, one process at a time: once a second process ticks at an epoch
//!   (a connector resumed after its first run died), the first never ticks again.
//!
//! The owner alone is paused, as a debugger or a stalled host pauses it; its keeper
//! holds the lease's deadline and ends the command on time. On PostgreSQL each starter
//! reaches the server through a relay of its own, and a third kind of fault stalls that
//! relay (every byte in flight waits, both ways) for 0.3–2 s: a network that stalls
//! mid-renewal or mid-transaction. Runs on SQLite, and on PostgreSQL where
//! `FLEET_TEST_POSTGRES_URL` is set. `scripts/handovers.sh` runs the
//! same for longer.

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::acts::{check, epochs_acted};
use common::{Fleet, Schema, StallingProxy, base_url};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const KEY: &str = "connector:acme/agent-7/slack-main";

fn policy(dir: &Path, owners: usize) -> std::path::PathBuf {
    let allow: Vec<_> = (0..owners)
        .map(|i| {
            serde_json::json!({"tenant": "acme", "agent": "agent-7", "binding": "slack-main",
                "connector": format!("conn-{i}"), "scopes": ["chat.read"], "max_ttl_s": 60})
        })
        .collect();
    let path = dir.join("policy.json");
    std::fs::write(&path, serde_json::json!({ "allow": allow }).to_string()).unwrap();
    path
}

/// A small deterministic generator, seeded per run and printed, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// Runs `starters` contending starters for `run_for` under random pauses and kills.
/// Where each starter reaches the registry.
enum Reach {
    /// The same location for every starter (a SQLite file).
    Direct(String),
    /// A PostgreSQL registry, each starter through a relay of its own that can stall.
    Relayed(String, Vec<StallingProxy>),
}

impl Reach {
    /// The lease's TTL in seconds: 1 s on a local file; 2 s across the relays, where a
    /// takeover takes several round trips (acquire, grant, validate) that a stall or a
    /// paused writer's lock can hold up.
    fn ttl(&self) -> String {
        match self {
            Reach::Direct(_) => "1",
            Reach::Relayed(..) => "2",
        }
        .to_owned()
    }

    fn registry(&self, starter: usize) -> String {
        match self {
            Reach::Direct(registry) => registry.clone(),
            Reach::Relayed(url, proxies) => proxies[starter].url(url),
        }
    }
}

fn contend(fleet: &Fleet, reach: &Reach, starters: usize, run_for: Duration, seed: u64) -> (usize, usize) {
    let policy = policy(fleet.dir.path(), starters);
    let log = fleet.dir.path().join("acts.log");
    std::fs::write(&log, "").unwrap();
    let script = format!(
        "while :; do echo \"tick $FLEET_CONNECTOR_FENCING_EPOCH $$\" >> {}; sleep 0.05; done",
        log.display()
    );
    // Each starter's `connector run`, and when it started.
    let mut live: Vec<Option<(Child, Instant)>> = (0..starters).map(|_| None).collect();
    let started = Instant::now();
    let mut rng = Rng(seed | 1);
    let mut faults = 0;
    // At least `run_for`; on a machine too busy for a handover in that time, on until
    // two epochs have acted (a run that saw one proves nothing), for at most six times
    // as long.
    while started.elapsed() < run_for
        || (started.elapsed() < run_for * 6 && epochs_acted(&std::fs::read_to_string(&log).unwrap()) < 2)
    {
        {
            for (i, slot) in live.iter_mut().enumerate() {
                if slot.as_mut().is_some_and(|(c, _)| c.try_wait().ok().flatten().is_some()) {
                    *slot = None;
                }
                if slot.is_none() {
                    let child = fleet
                        .fleetctl()
                        .env("FLEET_REGISTRY", reach.registry(i))
                        .args(["connector", "run", "--key", KEY, "--owner", &format!("conn-{i}")])
                        .args(["--scope", "chat.read", "--ttl", &reach.ttl(), "--policy"])
                        .arg(&policy)
                        .args(["--", "sh", "-c", &script])
                        .stdout(Stdio::null())
                        .stderr(
                            std::fs::OpenOptions::new()
                                .append(true)
                                .create(true)
                                .open(fleet.dir.path().join("starters.log"))
                                .unwrap(),
                        )
                        .spawn()
                        .unwrap();
                    *slot = Some((child, Instant::now()));
                }
            }
            // Mostly the longest-running starter, the likely holder (the others are refused
            // and start again); sometimes any.
            let oldest =
                live.iter().enumerate().filter_map(|(i, s)| Some((i, s.as_ref()?.1))).min_by_key(|(_, t)| *t);
            let victim = match oldest {
                Some((i, _)) if rng.next(3) != 0 => i,
                _ => usize::try_from(rng.next(starters as u64)).unwrap(),
            };
            if let Some((child, _)) = live[victim].as_ref() {
                let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
                faults += 1;
                let pause = Duration::from_millis(300 + rng.next(1700));
                if rng.next(3) == 0 {
                    let _ = kill(pid, Signal::SIGKILL);
                } else if let (Reach::Relayed(_, proxies), 0) = (reach, rng.next(2)) {
                    proxies[victim].stall_for(pause);
                } else {
                    let _ = kill(pid, Signal::SIGSTOP);
                    std::thread::spawn(move || {
                        std::thread::sleep(pause);
                        let _ = kill(pid, Signal::SIGCONT);
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200 + rng.next(400)));
    }
    for (child, _) in live.iter_mut().flatten() {
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let _ = kill(pid, Signal::SIGCONT);
        let _ = kill(pid, Signal::SIGTERM);
        let _ = child.wait();
    }
    // The paused ones are resumed by their threads within 2 s; their keepers end on time.
    std::thread::sleep(Duration::from_millis(2500));
    // What the starters said, for a failure to explain itself.
    eprintln!("{}", std::fs::read_to_string(fleet.dir.path().join("starters.log")).unwrap_or_default());
    let epochs = check(&std::fs::read_to_string(&log).unwrap());
    (epochs, faults)
}

/// How long each run contends: `FLEET_HANDOVER_SECONDS` (the longer script sets it),
/// else 10 s.
fn run_for() -> Duration {
    let seconds = std::env::var("FLEET_HANDOVER_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
    Duration::from_secs(seconds)
}

fn seed() -> u64 {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let seed = u64::try_from(nanos % u128::from(u64::MAX)).unwrap();
    eprintln!("seed {seed}");
    seed
}

#[test]
fn paused_and_killed_holders_never_act_on_passed_authority_on_sqlite() {
    let fleet = Fleet::new();
    let reach = Reach::Direct(fleet.registry.display().to_string());
    let (epochs, faults) = contend(&fleet, &reach, 3, run_for(), seed());
    eprintln!("{epochs} epochs acted under {faults} faults");
    assert!(epochs >= 2, "handovers happened: {epochs} epochs");
}

#[test]
fn paused_killed_and_stalled_holders_never_act_on_passed_authority_on_postgres() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let proxies = (0..3).map(|_| StallingProxy::to("127.0.0.1:5432")).collect();
    let reach = Reach::Relayed(schema.url(), proxies);
    let (epochs, faults) = contend(&fleet, &reach, 3, run_for(), seed());
    eprintln!("{epochs} epochs acted under {faults} faults");
    assert!(epochs >= 2, "handovers happened: {epochs} epochs");
}

#[test]
fn the_check_catches_an_older_epoch_after_a_newer_one() {
    assert_eq!(check("tick 1 10\ntick 2 20\n"), 2);
    assert!(std::panic::catch_unwind(|| check("tick 1 10\ntick 2 20\ntick 1 10\n")).is_err());
    assert!(std::panic::catch_unwind(|| check("tick 2 10\ntick 2 20\ntick 2 10\n")).is_err());
}
