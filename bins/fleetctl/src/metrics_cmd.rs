//! `fleetctl metrics` and `fleetctl serve`: the fleet in the Prometheus text exposition
//! format (version 0.0.4), printed once or served at `/metrics` for Prometheus to
//! scrape. Every value is read from the registry at the moment it is asked for.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;

use fleet_lease::LeaseState;
use fleet_registry::{OpenMode, WorkerStatus};
use fleet_runtime::{Failure, FleetReader, RegistryLocation, now, open_registry, out};
use fleet_snapshot::Policy;

/// The address `serve` listens on unless told otherwise: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes fleet metadata to the network.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: String,
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

/// The whole exposition for the registry at `location`.
pub(crate) fn render(location: &RegistryLocation) -> Result<String, Failure> {
    let at = now();
    let mut fleet = FleetReader::new(location.clone());
    let snap = fleet.snapshot(None, &Policy::default(), at)?;
    let mut registry = open_registry(location, OpenMode::MustExist)?;
    let rows = registry.workers()?;
    let (leases, store_now) = registry.leases_now(None)?;
    let audit = registry.lease_audit(None)?;
    let mut m = Exposition(String::new());

    m.family("fleet_live_fleet_safe", "gauge", "1 when no active blocker stands in the way of mutation.");
    m.sample("fleet_live_fleet_safe", &[], f64::from(u8::from(snap.live_fleet_safe)));

    m.family("fleet_workers", "gauge", "Registry rows by instance, namespace, status and state.");
    let mut workers: BTreeMap<(String, String, String, String), u64> = BTreeMap::new();
    for view in &snap.workers {
        let instance = view.client_instance_id().unwrap_or_default().to_owned();
        let state = serde_json::to_value(view.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        *workers
            .entry((instance, view.row.namespace.to_string(), view.row.status.to_string(), state))
            .or_default() += 1;
    }
    for ((instance, namespace, status, state), n) in &workers {
        let labels = [
            ("instance", instance.as_str()),
            ("namespace", namespace.as_str()),
            ("status", status.as_str()),
            ("state", state.as_str()),
        ];
        m.sample("fleet_workers", &labels, *n as f64);
    }

    m.family(
        "fleet_findings",
        "gauge",
        "Snapshot findings by code; blocker=true ones make the fleet unsafe.",
    );
    let mut findings: BTreeMap<(&str, bool), u64> = BTreeMap::new();
    for f in &snap.findings {
        *findings.entry((f.code.as_str(), f.active_blocker)).or_default() += 1;
    }
    for ((code, blocker), n) in &findings {
        m.sample(
            "fleet_findings",
            &[("code", code), ("blocker", if *blocker { "true" } else { "false" })],
            *n as f64,
        );
    }

    m.family(
        "fleet_worker_heartbeat_age_seconds",
        "gauge",
        "Seconds since each active worker's last heartbeat.",
    );
    for row in rows.iter().filter(|r| r.status == WorkerStatus::Active) {
        if let Some(beat) = row.heartbeat() {
            let age = at.since(beat).as_seconds_f64();
            let instance = row.client_instance_id.clone().unwrap_or_default();
            let labels = [
                ("worker", row.worker_identity.as_str()),
                ("instance", instance.as_str()),
                ("namespace", row.namespace.as_str()),
            ];
            m.sample("fleet_worker_heartbeat_age_seconds", &labels, age);
        }
    }

    m.family("fleet_retired_workers", "gauge", "Rows stale retirement has retired.");
    let retired = rows.iter().filter(|r| r.status == WorkerStatus::Retired).count();
    m.sample("fleet_retired_workers", &[], retired as f64);

    m.family(
        "fleet_lease_epoch",
        "gauge",
        "Each lease's fencing epoch, with its holder and whether it is held now.",
    );
    for lease in &leases {
        let held = lease.state == LeaseState::Held && lease.is_live(store_now);
        let labels = [
            ("key", lease.lease_key.as_str()),
            ("kind", lease.kind.as_str()),
            ("owner", lease.owner.as_str()),
            ("held", if held { "true" } else { "false" }),
        ];
        m.sample("fleet_lease_epoch", &labels, lease.fencing_epoch.get() as f64);
    }

    m.family(
        "fleet_lease_decisions_total",
        "counter",
        "Lease and grant decisions in the audit log, by event, outcome and refusal reason.",
    );
    let mut decisions: BTreeMap<(&str, &str, &str), u64> = BTreeMap::new();
    for e in &audit {
        *decisions
            .entry((e.event.as_str(), e.outcome.as_str(), e.reason.as_deref().unwrap_or("")))
            .or_default() += 1;
    }
    for ((event, outcome, reason), n) in &decisions {
        m.sample(
            "fleet_lease_decisions_total",
            &[("event", event), ("outcome", outcome), ("reason", reason)],
            *n as f64,
        );
    }
    Ok(m.0)
}

pub(crate) fn print(location: &RegistryLocation) -> Result<ExitCode, Failure> {
    out!("{}", render(location)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Serves `/metrics` until killed. Each scrape reads the registry afresh; a registry that
/// cannot be read answers 503 (the reason goes to the log, not to the network), so an
/// alert can fire on it. `/healthz` answers 200 while the server runs. Only `GET` and
/// `HEAD` are answered (405 otherwise). A server that can no longer accept connections
/// exits 3, so a supervisor restarts it.
pub(crate) fn serve(location: &RegistryLocation, args: ServeArgs) -> Result<ExitCode, Failure> {
    let listener = std::net::TcpListener::bind(&args.listen).map_err(|e| {
        let message = format!("cannot listen on {}: {e}", args.listen);
        match e.kind() {
            std::io::ErrorKind::InvalidInput => Failure::usage(message),
            _ => Failure::store(message),
        }
    })?;
    fleet_runtime::warn(format_args!("fleetctl: serving metrics at http://{}/metrics", args.listen));
    let location = location.clone();
    let error = crate::http::serve(listener, move |request| {
        use crate::http::Response;
        if !matches!(request.method, "GET" | "HEAD") {
            return Response { allow: Some("GET, HEAD"), ..Response::text(405, "only GET and HEAD\n") };
        }
        match request.path {
            "/metrics" => match render(&location) {
                Ok(text) => Response {
                    content_type: "text/plain; version=0.0.4; charset=utf-8",
                    ..Response::text(200, text)
                },
                Err(e) => {
                    fleet_runtime::warn(format_args!("fleetctl: serve: the registry is unavailable: {e}"));
                    Response::text(503, "registry unavailable\n")
                }
            },
            "/healthz" => Response::text(200, "ok\n"),
            _ => Response::text(404, "not found: try /metrics\n"),
        }
    });
    Err(Failure::store(format!("the metrics server stopped: cannot accept connections: {error}")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn label_values_are_escaped_as_the_format_requires() {
        assert_eq!(super::label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
