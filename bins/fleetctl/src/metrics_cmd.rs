//! `fleetctl metrics`, and what `fleetctl serve` answers at `/metrics`: the fleet in the
//! Prometheus text exposition format (version 0.0.4). Every series is an aggregate
//! unless per-worker series are asked for; the decision counters are the store's own
//! counts (or read only the audit entries that are new), so a scrape costs the same
//! however long the log grows.
//!
//! Names and labels follow Prometheus's guidelines: no label is called `instance` or
//! `job` (Prometheus's own target labels; the fleet's instance is `client_instance`),
//! every counter series is exported from 0 for each outcome and reason it can take, and
//! a changing value (a lease's holder) sits in an info metric, not in a label of a gauge.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use fleet_cli::{Failure, out};
use fleet_identity::{Namespace, Timestamp};
use fleet_lease::{LeaseRecord, LeaseState};
use fleet_registry::{StoreError, WorkerStatus};
use fleet_runtime::RegistryLocation;
use fleet_snapshot::{FleetSnapshot, WorkerState};

use crate::observe::Observer;

#[derive(Debug, clap::Args)]
pub(crate) struct MetricsArgs {
    /// Also export a series per worker and per launch (their heartbeat ages and states):
    /// two series and about 150 bytes a scrape for each active worker, so 15 MB a
    /// scrape at 100,000 workers. Without it every series is an aggregate.
    #[arg(long)]
    per_worker_series: bool,
}

impl MetricsArgs {
    pub(crate) fn series(&self) -> Series {
        if self.per_worker_series { Series::PerWorker } else { Series::Aggregate }
    }
}

/// Which worker series an exposition carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Series {
    /// Counts and histograms only: the size of a scrape does not grow with the fleet.
    Aggregate,
    /// Aggregates, and a series per active worker and per live launch.
    PerWorker,
}

/// A label value escaped as the exposition format requires.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", label(v))).collect();
        let labels = if labels.is_empty() { String::new() } else { format!("{{{}}}", labels.join(",")) };
        let _ = writeln!(self.0, "{name}{labels} {value}");
    }
}

/// Every event a lease or grant decision records, with the outcomes it can have: each
/// pair is exported from 0, so the first of any shows in `rate()`.
const DECISIONS: [(&str, &[&str]); 8] = [
    ("acquire", &["acquired", "denied"]),
    ("renew", &["renewed", "denied"]),
    ("release", &["released", "denied"]),
    ("takeover", &["taken_over", "denied"]),
    ("init_start", &["acquired", "taken_over", "denied"]),
    ("init_finish", &["released", "denied"]),
    ("grant_issue", &["issued", "denied"]),
    ("grant_validate", &["valid", "denied"]),
];

/// Every reason a lease or grant decision can be refused for (the seeds' codes).
const REASONS: [&str; 21] = [
    "lease_held",
    "takeover_required",
    "epoch_mismatch",
    "lease_live",
    "lease_not_found",
    "stale_epoch",
    "not_holder",
    "lease_expired",
    "lease_released",
    "ttl_exceeds_cap",
    "policy_denied",
    "epoch_exhausted",
    "host_fenced",
    "not_minted_here",
    "grant_expired",
    "lease_replaced",
    "lease_missing",
    "cross_tenant",
    "cross_agent",
    "cross_binding",
    "scope_not_authorized",
];

/// The decision counters, kept between scrapes: the audit log is append-only, so each
/// scrape adds only the entries after the last one counted.
#[derive(Debug, Default)]
pub(crate) struct DecisionCounts {
    /// The last entry counted (its id and content), to find the place again.
    last: Option<fleet_registry::AuditEntry>,
    decisions: BTreeMap<(String, String), u64>,
    denials: BTreeMap<String, u64>,
}

impl DecisionCounts {
    /// Counts the entries the registry added since the last call. A log that no longer
    /// holds the last entry counted (a registry restored or replaced) is counted again
    /// from the start: a counter reset, which `rate()` understands.
    pub(crate) fn update(&mut self, fleet: &mut fleet_runtime::Fleet) -> Result<(), StoreError> {
        // The store's own counts, kept as decisions are written: a few rows at any log
        // length, and never lowered by retention.
        if let Some(counts) = fleet.decision_counts()? {
            *self = Self::default();
            for c in counts {
                *self.decisions.entry((c.event, c.outcome)).or_default() += c.n;
                if let Some(reason) = c.reason {
                    *self.denials.entry(reason).or_default() += c.n;
                }
            }
            return Ok(());
        }
        let from = self.last.as_ref().map_or(0, |e| e.id - 1);
        let mut entries = fleet.lease_audit_after(from)?.into_iter();
        if let Some(last) = &self.last
            && entries.next().as_ref() != Some(last)
        {
            *self = Self::default();
            entries = fleet.lease_audit_after(0)?.into_iter();
        }
        for e in entries {
            *self.decisions.entry((e.event.clone(), e.outcome.clone())).or_default() += 1;
            if let Some(reason) = &e.reason {
                *self.denials.entry(reason.clone()).or_default() += 1;
            }
            self.last = Some(e);
        }
        Ok(())
    }
}

/// What an exposition reads beside the snapshot.
pub(crate) struct Reading {
    pub(crate) leases: Vec<LeaseRecord>,
    /// The store's clock when the leases were read.
    pub(crate) store_now: Timestamp,
    pub(crate) hosts: fleet_registry::HostList,
}

/// What an exposition says of the snapshot: kept while the snapshot's judgement stands.
pub(crate) struct Tally {
    safe: bool,
    /// Rows by namespace, status and state.
    workers: BTreeMap<(String, &'static str, &'static str), u64>,
    /// Findings by code and whether they block.
    findings: BTreeMap<(&'static str, bool), u64>,
    retired: usize,
    /// The per-worker and per-launch series, when asked for (else empty).
    per_worker: String,
}

impl Tally {
    pub(crate) fn of(snap: &FleetSnapshot<'_>, series: Series, at: Timestamp) -> Self {
        let mut workers = BTreeMap::new();
        for view in &snap.workers {
            let key = (view.row.namespace.to_string(), view.row.status.as_str(), view.state.as_str());
            *workers.entry(key).or_default() += 1;
        }
        let mut findings = BTreeMap::new();
        for f in &snap.findings {
            *findings.entry((f.code.as_str(), f.active_blocker)).or_default() += 1;
        }
        Self {
            safe: snap.live_fleet_safe,
            workers,
            findings,
            retired: snap.workers.iter().filter(|v| v.row.status == WorkerStatus::Retired).count(),
            per_worker: match series {
                Series::PerWorker => per_worker_series(snap, at),
                Series::Aggregate => String::new(),
            },
        }
    }
}

/// The upper bounds of the heartbeat-age histogram's buckets, in seconds: around the
/// default interval (10 s) and TTL (30 s), then minutes for lapsed rows.
const AGE_BUCKETS: [i64; 12] = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 900, 3600];

/// The active workers' heartbeats by namespace, sorted: the histogram of their ages at
/// any later time is a few binary searches, not a pass over the rows.
pub(crate) struct Heartbeats(BTreeMap<Namespace, (Vec<i64>, i128)>);

impl Heartbeats {
    pub(crate) fn of(rows: &[fleet_registry::WorkerRow]) -> Self {
        let mut by_namespace: BTreeMap<Namespace, (Vec<i64>, i128)> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.status == WorkerStatus::Active) {
            if let Some(beat) = row.heartbeat() {
                let (beats, sum) = by_namespace.entry(row.namespace).or_default();
                beats.push(beat.unix_millis());
                *sum += i128::from(beat.unix_millis());
            }
        }
        for (beats, _) in by_namespace.values_mut() {
            beats.sort_unstable();
        }
        Self(by_namespace)
    }

    /// The histogram of the heartbeats' ages at `at`, by namespace.
    pub(crate) fn ages_at(&self, at: Timestamp) -> BTreeMap<Namespace, Ages> {
        let now = at.unix_millis();
        self.0
            .iter()
            .map(|(namespace, (beats, sum))| {
                // Beats at or after `now - bound` are at most `bound` old.
                let within = AGE_BUCKETS
                    .map(|bound| (beats.len() - beats.partition_point(|b| *b < now - bound * 1000)) as u64);
                let n = beats.len() as i128;
                let ages = Ages {
                    within,
                    count: beats.len() as u64,
                    sum_s: (n * i128::from(now) - sum) as f64 / 1000.0,
                    oldest_s: beats.first().map_or(0.0, |b| (now - b) as f64 / 1000.0),
                };
                (*namespace, ages)
            })
            .collect()
    }
}

/// One namespace's heartbeat ages: how many within each bucket's bound, how many, their
/// sum and the oldest, in seconds.
pub(crate) struct Ages {
    within: [u64; AGE_BUCKETS.len()],
    count: u64,
    sum_s: f64,
    oldest_s: f64,
}

/// The whole exposition: the snapshot's `tally`, the heartbeat `ages`, and `reading`,
/// the decision counters from `counts`.
pub(crate) fn render(
    tally: &Tally,
    ages: &BTreeMap<Namespace, Ages>,
    reading: &Reading,
    counts: &DecisionCounts,
    schema_version: i64,
) -> String {
    let Reading { leases, store_now, hosts } = reading;
    let store_now = *store_now;
    let mut m = Exposition(String::new());

    m.family(
        "fleetctl_build_info",
        "gauge",
        "The build serving these metrics, with the schema version it writes for this registry: always 1.",
    );
    let schema = schema_version.to_string();
    m.sample(
        "fleetctl_build_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("schema_version", &schema)],
        1.0,
    );

    m.family("fleet_live_fleet_safe", "gauge", "1 when no active blocker stands in the way of mutation.");
    m.sample("fleet_live_fleet_safe", &[], f64::from(u8::from(tally.safe)));

    m.family("fleet_workers", "gauge", "Registry rows by namespace, status and state.");
    for ((namespace, status, state), n) in &tally.workers {
        m.sample(
            "fleet_workers",
            &[("namespace", namespace), ("status", status), ("state", state)],
            *n as f64,
        );
    }

    m.family(
        "fleet_heartbeat_age_seconds",
        "histogram",
        "Seconds since each active worker's last heartbeat, by namespace.",
    );
    for (namespace, ages) in ages {
        let ns = namespace.as_str();
        for (bound, within) in AGE_BUCKETS.iter().zip(ages.within) {
            let le = bound.to_string();
            m.sample("fleet_heartbeat_age_seconds_bucket", &[("namespace", ns), ("le", &le)], within as f64);
        }
        let n = ages.count as f64;
        m.sample("fleet_heartbeat_age_seconds_bucket", &[("namespace", ns), ("le", "+Inf")], n);
        m.sample("fleet_heartbeat_age_seconds_sum", &[("namespace", ns)], ages.sum_s);
        m.sample("fleet_heartbeat_age_seconds_count", &[("namespace", ns)], n);
    }
    m.family(
        "fleet_oldest_heartbeat_age_seconds",
        "gauge",
        "Seconds since the oldest heartbeat of an active worker, by namespace.",
    );
    for (namespace, ages) in ages {
        m.sample("fleet_oldest_heartbeat_age_seconds", &[("namespace", namespace.as_str())], ages.oldest_s);
    }

    m.family(
        "fleet_findings",
        "gauge",
        "Snapshot findings by code; blocker=true ones make the fleet unsafe.",
    );
    for ((code, blocker), n) in &tally.findings {
        m.sample(
            "fleet_findings",
            &[("code", code), ("blocker", if *blocker { "true" } else { "false" })],
            *n as f64,
        );
    }

    m.family("fleet_retired_workers", "gauge", "Rows stale retirement has retired.");
    m.sample("fleet_retired_workers", &[], tally.retired as f64);

    // One series per host, never per row: a fleet's hosts are few.
    m.family("fleet_host_workers", "gauge", "Each host's rows: live, stale (active, lapsed) and terminal.");
    for host in &hosts.hosts {
        for (state, n) in
            [("live", host.live_rows), ("stale", host.stale_rows), ("terminal", host.terminal_rows)]
        {
            m.sample("fleet_host_workers", &[("host", host.host_id.as_str()), ("state", state)], n as f64);
        }
    }
    m.family("fleet_host_fenced", "gauge", "1 while an operator's fence of every boot of the host stands.");
    for host in &hosts.hosts {
        let fenced = host.state == fleet_registry::HostState::Fenced;
        m.sample("fleet_host_fenced", &[("host", host.host_id.as_str())], f64::from(u8::from(fenced)));
    }
    m.family(
        "fleet_host_last_seen_age_seconds",
        "gauge",
        "Seconds from each host's newest registration or heartbeat to the store's clock.",
    );
    for host in &hosts.hosts {
        if let Some(age) = host.last_seen_age_s {
            m.sample("fleet_host_last_seen_age_seconds", &[("host", host.host_id.as_str())], age as f64);
        }
    }
    m.family(
        "fleet_host_clock_offset_seconds",
        "gauge",
        "Each host's clock minus the store's, as measured at its latest registration.",
    );
    for host in &hosts.hosts {
        if let Some(offset) = host.clock_offset_ms {
            m.sample(
                "fleet_host_clock_offset_seconds",
                &[("host", host.host_id.as_str())],
                offset as f64 / 1000.0,
            );
        }
    }
    m.family("fleet_host_boots", "gauge", "How many boots of each host its rows show.");
    for host in &hosts.hosts {
        m.sample("fleet_host_boots", &[("host", host.host_id.as_str())], host.boots.len() as f64);
    }

    m.family("fleet_lease_epoch", "gauge", "Each lease's fencing epoch.");
    for lease in leases {
        let labels = [("key", lease.lease_key.as_str()), ("kind", lease.kind.as_str())];
        m.sample("fleet_lease_epoch", &labels, lease.fencing_epoch.get() as f64);
    }
    m.family("fleet_lease_held", "gauge", "1 while a lease is held and live, else 0.");
    for lease in leases {
        let held = lease.state == LeaseState::Held && lease.is_live(store_now);
        let labels = [("key", lease.lease_key.as_str()), ("kind", lease.kind.as_str())];
        m.sample("fleet_lease_held", &labels, f64::from(u8::from(held)));
    }
    m.family("fleet_lease_holder_info", "gauge", "Who holds (or last held) each lease: always 1.");
    for lease in leases {
        let labels = [("key", lease.lease_key.as_str()), ("owner", lease.owner.as_str())];
        m.sample("fleet_lease_holder_info", &labels, 1.0);
    }

    m.family(
        "fleet_lease_decisions_total",
        "counter",
        "Lease and grant decisions in the audit log, by event and outcome.",
    );
    let mut decisions: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (event, outcomes) in DECISIONS {
        for outcome in outcomes {
            decisions.insert((event, outcome), 0);
        }
    }
    for ((event, outcome), n) in &counts.decisions {
        decisions.insert((event.as_str(), outcome.as_str()), *n);
    }
    for ((event, outcome), n) in &decisions {
        m.sample("fleet_lease_decisions_total", &[("event", event), ("outcome", outcome)], *n as f64);
    }
    m.family("fleet_lease_denials_total", "counter", "Refused lease and grant decisions, by reason.");
    let mut denials: BTreeMap<&str, u64> = REASONS.iter().map(|r| (*r, 0)).collect();
    for (reason, n) in &counts.denials {
        denials.insert(reason.as_str(), *n);
    }
    for (reason, n) in &denials {
        m.sample("fleet_lease_denials_total", &[("reason", reason)], *n as f64);
    }
    m.0.push_str(&tally.per_worker);
    m.0
}

/// The series per active worker and per live launch (`--per-worker-series`).
fn per_worker_series(snap: &FleetSnapshot<'_>, at: Timestamp) -> String {
    let mut m = Exposition(String::new());
    m.family(
        "fleet_launch_workers",
        "gauge",
        "Active rows by launch, namespace and state (with --per-worker-series).",
    );
    let mut launches: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for view in snap.workers.iter().filter(|v| v.state != WorkerState::Historical) {
        let instance = view.client_instance_id().unwrap_or_default();
        *launches.entry((instance, view.row.namespace.as_str(), view.state.as_str())).or_default() += 1;
    }
    for ((instance, namespace, state), n) in &launches {
        let labels = [("client_instance", *instance), ("namespace", *namespace), ("state", *state)];
        m.sample("fleet_launch_workers", &labels, *n as f64);
    }
    m.family(
        "fleet_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since each active worker's last heartbeat (with --per-worker-series).",
    );
    for view in snap.workers.iter().filter(|v| v.row.status == WorkerStatus::Active) {
        if let Some(beat) = view.row.heartbeat() {
            let labels = [
                ("worker", view.row.worker_identity.as_str()),
                ("client_instance", view.client_instance_id().unwrap_or_default()),
                ("namespace", view.row.namespace.as_str()),
            ];
            m.sample("fleet_worker_heartbeat_age_seconds", &labels, at.since(beat).as_seconds_f64());
        }
    }
    m.0
}

/// The serving process's own series, by the names Prometheus's client libraries use:
/// resident memory, open descriptors, CPU seconds and start time, read from `/proc`.
pub(crate) fn process_metrics() -> String {
    let mut m = Exposition(String::new());
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which ends at the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |n: usize| fields.get(n).and_then(|v| v.parse::<f64>().ok());
    let ticks =
        nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK).ok().flatten().map_or(100.0, |t| t as f64);
    let page =
        nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE).ok().flatten().map_or(4096.0, |p| p as f64);
    // Counted from field 3 (state) on: utime 14, stime 15, starttime 22, rss 24 in proc(5).
    if let (Some(user), Some(system)) = (field(11), field(12)) {
        m.family("process_cpu_seconds_total", "counter", "User and system CPU time spent, in seconds.");
        m.sample("process_cpu_seconds_total", &[], (user + system) / ticks);
    }
    if let Some(rss) = field(21) {
        m.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        m.sample("process_resident_memory_bytes", &[], rss * page);
    }
    if let (Some(start), Some(boot)) = (field(19), boot_time()) {
        m.family(
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since the Unix epoch, in seconds.",
        );
        m.sample("process_start_time_seconds", &[], boot + start / ticks);
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        m.family("process_open_fds", "gauge", "Open file descriptors.");
        m.sample("process_open_fds", &[], fds.count() as f64);
    }
    m.0
}

/// When this machine booted, in seconds since the Unix epoch (`btime` in /proc/stat).
fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

pub(crate) fn print(location: &RegistryLocation, args: &MetricsArgs) -> Result<ExitCode, Failure> {
    let observer = Observer::new(location, None, args.series());
    out!("{}", observer.metrics(location.schema_version())?)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn label_values_are_escaped_as_the_format_requires() {
        assert_eq!(super::label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
