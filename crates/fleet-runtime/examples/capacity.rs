//! How large a fleet one registry carries: `WORKERS` workers heartbeat through the
//! registry's API at their pacing (every third of the TTL, spread evenly), from
//! `THREADS` threads with a connection each, beside a sweeper (every third of the TTL,
//! as a worker sweeps), a snapshot reader (every 2 s, the whole classification) and a
//! retirement plan (every 10 s). After `SECONDS` it reports the heartbeat commit latency
//! (p50, p99, max), how many heartbeats ran late, false stale marks (every worker is
//! alive, so any mark is false), and the sweep, snapshot and plan times; beside the
//! bare commit rate of the same store measured first in the same run (the physical
//! limit: the same threads heartbeating as fast as they can).
//!
//! ```sh
//! cargo run --release -p fleet-runtime --example capacity -- REGISTRY WORKERS [SECONDS THREADS TTL FIRST]
//! ```
//! FIRST numbers this process's workers from there (default 0), so that several
//! processes, each with workers of its own, carry one fleet between them, as the hosts of
//! a fleet do; only the process with FIRST 0 runs the snapshot reader and the plan, so
//! the fleet has one of each. With `CAPACITY_START_FILE` set, a process waits after registering until
//! that file exists: registering a large fleet takes longer than a TTL, so the processes
//! start their clocks together once every worker is registered.
//! REGISTRY is a SQLite path (created) or a postgres:// URL (an empty schema).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fleet_identity::{ClientInstanceId, ClientType, GenerationId, Namespace, SessionId, Timestamp};

use fleet_registry::{
    Claim, HeartbeatTtl, InstanceRef, LivenessProbe, OpenMode, ProcessIdentity, ProcessVerdict, Registration,
    Revisions, WorkerCredential, WorkerToken,
};
use fleet_runtime::{Fleet, RegistryLocation, open_registry};

/// Every predecessor is gone (there are none): registration needs a probe.
struct NoneAlive;

impl LivenessProbe for NoneAlive {
    fn probe(&self, _: &ProcessIdentity) -> ProcessVerdict {
        ProcessVerdict::Gone
    }
}

fn now() -> Timestamp {
    Timestamp::new(time::OffsetDateTime::now_utc())
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Registers `workers` workers (numbered from `first`) of `workers / 5` launches on a
/// host of no one's.
fn register(location: &RegistryLocation, first: usize, workers: usize, ttl: u32) -> Vec<WorkerCredential> {
    let mut registry = open_registry(location, OpenMode::CreateIfMissing).expect("registry");
    let host = fleet_identity::HostId::new("0123456789abcdef0123456789abcdef").expect("host");
    let boot = fleet_identity::BootId::new("11111111-2222-3333-4444-555555555555").expect("boot");
    (first..first + workers)
        .map(|i| {
            let instance =
                ClientInstanceId::parse(&format!("inst-codex-20260730T120000Z-{:012x}", i / 5)).expect("id");
            let generation = format!("gen-{i}");
            let registration = Registration {
                client_type: ClientType::new("codex").expect("type"),
                instance: InstanceRef::Minted(instance),
                instance_provenance: Some("trusted_launcher".into()),
                fleet_run_id: None,
                namespace: Namespace::ALL[i % 5],
                profile: None,
                session_id: Some(SessionId::new(format!("sess-{}", i / 5)).expect("session")),
                generation_id: GenerationId::new(&generation).expect("generation"),
                process: ProcessIdentity {
                    host_id: host.clone(),
                    boot_id: boot.clone(),
                    pid: fleet_identity::Pid::new(1_000_000 + i as i64).expect("pid"),
                    process_start_time: fleet_identity::ProcessStartTime::new(1 + i as u64).expect("start"),
                    pid_namespace: None,
                },
                repository: None,
                heartbeat_ttl: HeartbeatTtl::from_secs(ttl).expect("ttl"),
                revisions: Revisions::default(),
                claim: Claim::Owned,
                hostname: None,
            };
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            let token = WorkerToken::from_bytes(bytes);
            let row = registry.register(&registration, &token, now(), &NoneAlive).expect("register").row;
            WorkerCredential {
                worker_identity: row.worker_identity,
                generation_id: GenerationId::new(generation).expect("generation"),
                token,
            }
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(target) = args.get(1) else {
        eprintln!("usage: capacity REGISTRY WORKERS [SECONDS THREADS TTL FIRST]");
        std::process::exit(2);
    };
    let location = RegistryLocation::resolve(Some(target)).expect("location");
    let workers: usize = arg(&args, 2, 1_000);
    let seconds: u64 = arg(&args, 3, 60);
    let threads: usize = arg(&args, 4, 8);
    let ttl: u32 = arg(&args, 5, 30);
    let first: usize = arg(&args, 6, 0);
    let started = Instant::now();
    let credentials = register(&location, first, workers, ttl);
    eprintln!("registered {workers} workers in {:.1} s", started.elapsed().as_secs_f64());
    if let Some(start) = std::env::var_os("CAPACITY_START_FILE") {
        while !std::path::Path::new(&start).exists() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // The floor: the same threads heartbeating their workers as fast as they can.
    let floor_beats = AtomicUsize::new(0);
    let floor_for = Duration::from_secs(3);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (location, credentials, floor_beats) = (&location, &credentials, &floor_beats);
            s.spawn(move || {
                let mut registry = open_registry(location, OpenMode::MustExist).expect("registry");
                let start = Instant::now();
                let mut i = t;
                while start.elapsed() < floor_for {
                    registry.heartbeat(&credentials[i % credentials.len()], now()).expect("heartbeat");
                    floor_beats.fetch_add(1, Ordering::Relaxed);
                    i += threads;
                }
            });
        }
    });
    let floor_rate = floor_beats.load(Ordering::Relaxed) as f64 / floor_for.as_secs_f64();

    let period = Duration::from_secs_f64(f64::from(ttl) / 3.0);
    let latencies = Mutex::new(Vec::new());
    let late = AtomicUsize::new(0);
    let false_stale = AtomicUsize::new(0);
    let failed_sweeps = AtomicUsize::new(0);
    let (sweeps, snapshots, plans) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let done = AtomicBool::new(false);
    let run = Duration::from_secs(seconds);
    let reader_location = location.clone();
    let begin = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (location, credentials, latencies, late, done) =
                (&location, &credentials, &latencies, &late, &done);
            s.spawn(move || {
                let mut registry = open_registry(location, OpenMode::MustExist).expect("registry");
                let mine: Vec<usize> = (t..credentials.len()).step_by(threads).collect();
                let mut local = Vec::with_capacity(mine.len() * 4);
                let mut round = 0u32;
                'rounds: loop {
                    for &i in &mine {
                        // Worker i beats at i/N of each period: the fleet's beats spread evenly.
                        let due = period * round + period.mul_f64(i as f64 / credentials.len() as f64);
                        if due > run || done.load(Ordering::Relaxed) {
                            break 'rounds;
                        }
                        let elapsed = begin.elapsed();
                        if due > elapsed {
                            std::thread::sleep(due - elapsed);
                        } else if elapsed - due > period / 2 {
                            late.fetch_add(1, Ordering::Relaxed);
                        }
                        let at = Instant::now();
                        registry.heartbeat(&credentials[i], now()).expect("heartbeat");
                        local.push(at.elapsed());
                    }
                    round += 1;
                }
                latencies.lock().expect("lock").extend(local);
            });
        }
        let (location, false_stale, failed_sweeps, sweeps, done) =
            (&location, &false_stale, &failed_sweeps, &sweeps, &done);
        s.spawn(move || {
            let mut registry = open_registry(location, OpenMode::MustExist).expect("registry");
            while begin.elapsed() < run {
                std::thread::sleep(period);
                let at = Instant::now();
                // A worker whose sweep fails logs it and sweeps again next time; so here.
                match registry.mark_expired_stale(now()) {
                    Ok(marked) => {
                        sweeps.lock().expect("lock").push(at.elapsed());
                        false_stale.fetch_add(marked.len(), Ordering::Relaxed);
                    }
                    Err(e) => {
                        eprintln!("sweep failed after {:.1} s: {e}", at.elapsed().as_secs_f64());
                        failed_sweeps.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            done.store(true, Ordering::Relaxed);
        });
        let (snapshots, plans) = (&snapshots, &plans);
        // One reader for the fleet: the process that carries its first worker.
        if first == 0 {
            s.spawn(move || {
                let mut fleet = Fleet::new(reader_location);
                let ctx = fleet_runtime::retirement_context(Some("/srv/repo")).expect("context");
                let mut last_plan = Instant::now();
                while begin.elapsed() < run {
                    std::thread::sleep(Duration::from_secs(2));
                    let at = Instant::now();
                    fleet.snapshot(None, &fleet_snapshot::Policy::default(), now()).expect("snapshot");
                    snapshots.lock().expect("lock").push(at.elapsed());
                    if last_plan.elapsed() >= Duration::from_secs(10) {
                        let at = Instant::now();
                        fleet.plan(&ctx).expect("plan");
                        plans.lock().expect("lock").push(at.elapsed());
                        last_plan = Instant::now();
                    }
                }
            });
        }
    });
    let mut latencies = latencies.into_inner().expect("lock");
    latencies.sort();
    let stats = |v: Mutex<Vec<Duration>>| {
        let mut v = v.into_inner().expect("lock");
        v.sort();
        format!(
            "p50 {:.1} ms, max {:.1} ms ({} runs)",
            ms(percentile(&v, 0.5)),
            ms(v.last().copied().unwrap_or_default()),
            v.len()
        )
    };
    let wanted = workers as f64 / period.as_secs_f64();
    println!("workers {workers}, TTL {ttl} s, {threads} threads, {seconds} s");
    println!(
        "bare commit rate {floor_rate:.0}/s; the fleet needs {wanted:.0}/s ({:.2} of the floor)",
        wanted / floor_rate
    );
    println!(
        "heartbeats {}: p50 {:.2} ms, p99 {:.2} ms, max {:.1} ms (a tenth of the TTL: {} ms); {} ran late",
        latencies.len(),
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default()),
        ttl * 100,
        late.load(Ordering::Relaxed)
    );
    println!("false stale marks {}", false_stale.load(Ordering::Relaxed));
    println!("sweep {} ({} failed)", stats(sweeps), failed_sweeps.load(Ordering::Relaxed));
    println!("snapshot {}", stats(snapshots));
    println!("plan {}", stats(plans));
}
