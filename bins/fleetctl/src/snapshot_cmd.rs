//! `fleetctl snapshot`: the fleet health snapshot as a table a person reads at a glance,
//! or as the JSON object; `--gate` turns it into a check.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use fleet_cli::Failure;
use fleet_cli::out;
use fleet_identity::{Namespace, Repository, Timestamp};
use fleet_runtime::{Fleet, RegistryLocation, now};
use fleet_snapshot::{
    FleetSnapshot, HeartbeatComparison, LiveHeartbeats, Manifest, Policy, WorkerState, compare_heartbeats,
};

use crate::output::{self, ResultArgs, ResultFormat};

#[derive(Debug, clap::Args)]
pub(crate) struct SnapshotArgs {
    /// The approved fleet manifest (JSON: {"instances": [...]}).
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// The largest --manifest or --compare file read, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = MAX_INPUT_BYTES)]
    max_input_bytes: u64,
    /// Exit 1 when the fleet is not safe to mutate.
    #[arg(long)]
    gate: bool,
    #[command(flatten)]
    output: ResultArgs,
    /// The repository every worker should be bound to.
    #[arg(long)]
    canonical_repository: Option<String>,
    /// The code revision every worker should run (a manifest's code_revision wins).
    #[arg(long)]
    expected_code_revision: Option<String>,
    /// Judge heartbeats as of this RFC 3339 time instead of now (reproducible reports).
    #[arg(long, value_parser = parse_time, conflicts_with = "watch")]
    at: Option<Timestamp>,
    /// Redraw every --interval seconds until Ctrl-C, then exit with the gate's code for
    /// the last snapshot.
    #[arg(long)]
    watch: bool,
    /// Seconds between redraws under --watch (0.2 to 3600).
    #[arg(long, default_value_t = 2.0, requires = "watch")]
    interval: f64,
    /// Compare heartbeats with an earlier snapshot (its `--json` output) and print which
    /// advanced, stood still, went back, were lost or appeared, instead of the snapshot.
    #[arg(long, value_name = "PREVIOUS.json", conflicts_with = "watch")]
    compare: Option<PathBuf>,
}

fn parse_time(s: &str) -> Result<Timestamp, String> {
    Timestamp::parse(s).map_err(|e| e.to_string())
}

/// The largest manifest or earlier snapshot read by default (256 MiB: a snapshot of a
/// few hundred thousand workers).
const MAX_INPUT_BYTES: u64 = 256 << 20;

fn read_manifest(path: &std::path::Path, max_bytes: u64) -> Result<Manifest, Failure> {
    let value = fleet_runtime::input::read_json(path, "manifest", max_bytes, "--max-input-bytes")
        .map_err(Failure::usage)?;
    Manifest::from_value(value).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

pub(crate) fn run(location: &RegistryLocation, args: SnapshotArgs) -> Result<ExitCode, Failure> {
    // Input is checked before the registry is read.
    let manifest = args.manifest.as_ref().map(|p| read_manifest(p, args.max_input_bytes)).transpose()?;
    let previous = args.compare.as_ref().map(|p| read_previous(p, args.max_input_bytes)).transpose()?;
    let canonical_repository = args
        .canonical_repository
        .clone()
        .map(|r| Repository::new(r).map_err(|e| Failure::usage(e.to_string())))
        .transpose()?;
    let policy = Policy { canonical_repository, expected_code_revision: args.expected_code_revision.clone() };
    if args.watch {
        return watch(location, manifest.as_ref(), &policy, &args);
    }
    // One read and one answer: nothing is kept for a next snapshot.
    let at = args.at.unwrap_or_else(now);
    fleet_runtime::take_snapshot(location, manifest.as_ref(), &policy, at, |snap| {
        if let Some(previous) = &previous {
            let comparison = compare_heartbeats(previous, &LiveHeartbeats::of(snap));
            match args.output.format() {
                Some(ResultFormat::Json) => fleet_cli::print_json(&comparison)?,
                Some(ResultFormat::Yaml) => output::print_yaml(&comparison)?,
                None => out!("{}", render_comparison(&comparison))?,
            }
        } else {
            match args.output.format() {
                Some(ResultFormat::Json) => fleet_cli::print_json(snap)?,
                Some(ResultFormat::Yaml) => output::print_yaml(snap)?,
                None => out!("{}", render(snap, colour()))?,
            }
        }
        Ok(if args.gate && !snap.live_fleet_safe { ExitCode::from(1) } else { ExitCode::SUCCESS })
    })?
}

/// The live workers of an earlier snapshot, from its JSON.
fn read_previous(path: &std::path::Path, max_bytes: u64) -> Result<LiveHeartbeats, Failure> {
    let value = fleet_runtime::input::read_json(path, "snapshot", max_bytes, "--max-input-bytes")
        .map_err(Failure::usage)?;
    LiveHeartbeats::from_value(&value).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// A heartbeat comparison for a person: the verdict, then each group that is not empty.
fn render_comparison(c: &HeartbeatComparison) -> String {
    let verdict = if c.continuous { "continuous" } else { "NOT continuous" };
    let mut out = format!(
        "heartbeats from {} to {}: {verdict}; {} advanced\n",
        c.earlier_at,
        c.later_at,
        c.advanced.len()
    );
    for (what, ids) in [
        ("stood still", &c.unchanged),
        ("went back", &c.regressed),
        ("lost", &c.lost),
        ("appeared", &c.appeared),
    ] {
        for id in ids {
            out.push_str(&format!("  {what:<11}  {id}\n"));
        }
    }
    out
}

/// Colour only on a terminal, and never under `NO_COLOR` (set to anything non-empty).
fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `--watch`: redraws in place on a terminal (appends on a pipe) until SIGINT or SIGTERM,
/// then exits 0 if the last snapshot was safe and 1 if not.
fn watch(
    location: &RegistryLocation,
    manifest: Option<&Manifest>,
    policy: &Policy,
    args: &SnapshotArgs,
) -> Result<ExitCode, Failure> {
    if !(0.2..=3600.0).contains(&args.interval) {
        return Err(Failure::usage(format!("--interval {} is outside 0.2..=3600 seconds", args.interval)));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&stop))
            .map_err(|e| Failure::store(format!("cannot watch for Ctrl-C: {e}")))?;
    }
    let in_place = std::io::stdout().is_terminal();
    let interval = std::time::Duration::from_secs_f64(args.interval);
    let mut safe = false;
    // The registry stays open between redraws, and rows are read again only when it moved.
    // A pidfd for each live local worker, beside the registry and the terminal.
    fleet_runtime::process::raise_open_file_limit();
    let mut fleet = Fleet::new(location.clone()).tracking_processes();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        // A registry that cannot be read is shown, and counts as unsafe, until it can.
        let text = match fleet.json_snapshot(manifest, policy, now()) {
            Ok(mut taken) => {
                safe = taken.snapshot.live_fleet_safe;
                match args.output.format() {
                    Some(ResultFormat::Json) => {
                        // Workers unchanged since the last redraw are written from the JSON kept.
                        let mut line = Vec::new();
                        let written =
                            taken.write_json(&mut line).ok().and_then(|()| String::from_utf8(line).ok());
                        written.unwrap_or_default() + "\n"
                    }
                    // One YAML document per snapshot.
                    Some(ResultFormat::Yaml) => serde_json::to_value(&taken.snapshot)
                        .map(|value| format!("---\n{}", output::yaml(&value)))
                        .unwrap_or_default(),
                    None => render(&taken.snapshot, colour()),
                }
            }
            Err(e) => {
                safe = false;
                format!("registry unavailable: {e}\n")
            }
        };
        if in_place {
            out!("\x1b[H\x1b[2J{text}")?;
        } else {
            out!("{text}")?;
        }
        fleet_cli::flush_stdout()?;
        let deadline = std::time::Instant::now() + interval;
        while std::time::Instant::now() < deadline && !stop.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    Ok(ExitCode::from(if safe { 0 } else { 1 }))
}

struct Paint(bool);

impl Paint {
    fn wrap(&self, code: &str, text: &str) -> String {
        if self.0 { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_owned() }
    }
    fn red(&self, t: &str) -> String {
        self.wrap("1;31", t)
    }
    fn green(&self, t: &str) -> String {
        self.wrap("1;32", t)
    }
    fn yellow(&self, t: &str) -> String {
        self.wrap("33", t)
    }
    fn dim(&self, t: &str) -> String {
        self.wrap("2", t)
    }
}

/// The snapshot as text: a verdict line, one block per instance with its five
/// namespaces, then the findings.
pub(crate) fn render(snap: &FleetSnapshot<'_>, colour: bool) -> String {
    let p = Paint(colour);
    let c = &snap.counts;
    let verdict = if snap.live_fleet_safe { p.green("SAFE") } else { p.red("UNSAFE") };
    let mut out = format!(
        "fleet {verdict}: {}, {} live, {} stale, {} historical, {} (at {})\n",
        fleet_cli::count(c.instance_count, "instance", "instances"),
        c.live_worker_count,
        c.stale_worker_count,
        c.historical_row_count,
        fleet_cli::count(c.active_blocker_count, "active blocker", "active blockers"),
        snap.snapshot_at
    );
    let workers: BTreeMap<&str, &fleet_snapshot::WorkerView<'_>> =
        snap.workers.iter().map(|w| (w.worker_identity().as_str(), w)).collect();
    for instance in &snap.instances {
        let name = instance.client_instance_id.unwrap_or("(no instance id)");
        let trust = instance.trust.as_str();
        let trust = if instance.trust.is_trusted() { trust.to_owned() } else { p.red(trust) };
        out.push_str(&format!("\n{name}  {}  {trust}\n", instance.client_type.unwrap_or("-")));
        for ns in Namespace::ALL {
            let live = instance.namespaces.get(ns);
            if live.is_empty() {
                out.push_str(&format!("  {:<11} {}\n", ns.as_str(), p.yellow("no live worker")));
            }
            for id in live {
                let pid =
                    workers.get(id.as_str()).and_then(|w| w.row.pid).map_or("-".into(), |p| p.to_string());
                let line = format!("  {:<11} {id}  pid {pid}", ns.as_str());
                out.push_str(&if live.len() > 1 { p.red(&line) } else { line });
                out.push('\n');
            }
        }
        for id in &instance.stale_workers {
            let ns = workers.get(id.as_str()).map_or("-", |w| w.row.namespace.as_str());
            out.push_str(&format!("  {:<11} {}\n", ns, p.yellow(&format!("{id}  stale"))));
        }
        if !instance.blockers.is_empty() {
            let codes: Vec<&str> = instance.blockers.iter().map(|b| b.as_str()).collect();
            out.push_str(&format!("  blockers: {}\n", p.red(&codes.join(", "))));
        }
    }
    if !snap.findings.is_empty() {
        out.push_str("\nfindings:\n");
        for f in &snap.findings {
            let mark = if f.active_blocker { p.red("✗") } else { p.dim("·") };
            let mut where_ = f.client_instance_id.clone().unwrap_or_else(|| "-".into());
            if let Some(ns) = f.namespace {
                where_.push_str(&format!(" {ns}"));
            }
            let line = format!("{} {where_}: {}", f.code, f.detail);
            out.push_str(&format!("  {mark} {}\n", if f.active_blocker { line } else { p.dim(&line) }));
        }
    }
    let historical = snap.workers.iter().filter(|w| w.state == WorkerState::Historical).count();
    if snap.instances.is_empty() && historical == 0 {
        out.push_str("\nno workers are registered\n");
    }
    out
}
