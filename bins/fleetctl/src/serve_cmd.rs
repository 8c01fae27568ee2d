//! `fleetctl serve`: the fleet's metrics for Prometheus at `/metrics`, its page for
//! people at `/` (following the registry through `/events`), and `/healthz`, on
//! loopback by default, all answered through one session over the fleet
//! ([`Observer`]).

use std::process::ExitCode;

use fleet_cli::Failure;
use fleet_runtime::RegistryLocation;

use crate::metrics_cmd::MetricsArgs;
use crate::observe::Observer;

/// The address `serve` listens on unless told otherwise: loopback only.
const DEFAULT_LISTEN: &str = "127.0.0.1:9464";

#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback exposes fleet metadata to the network.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: String,
    #[command(flatten)]
    metrics: MetricsArgs,
    /// The repository whose retirement the page shows (default: the current
    /// directory, as `retire plan`).
    #[arg(long)]
    repository: Option<String>,
}

/// Serves `/metrics`, the page at `/` and its `/events` until killed, all through one
/// [`Observer`]; a registry that cannot be read answers 503 (the reason goes to the log, not to the network), so an
/// alert can fire on it. `/healthz` answers 200 while the server runs; `/readyz` 200 while
/// the registry answers through the server's session (503 when it refuses). Only `GET` and
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
    // A stop (`systemctl stop`, `docker stop`) is a clean exit. As a container's pid 1 the
    // kernel delivers SIGTERM only to a process that handles it.
    let mut stops =
        signal_hook::iterator::Signals::new([signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT])
            .map_err(|e| Failure::store(format!("cannot watch for a stop: {e}")))?;
    std::thread::Builder::new()
        .name("fleetctl-stop".into())
        .spawn(move || {
            if stops.forever().next().is_some() {
                let _ = fleet_cli::flush_stdout();
                std::process::exit(0);
            }
        })
        .map_err(|e| Failure::store(format!("cannot watch for a stop: {e}")))?;
    // As a container's pid 1 it reaps the orphans the kernel hands it; it starts no
    // process of its own to wait for.
    fleet_runtime::keeper::reap_orphans_as_init();
    fleet_cli::notice(format_args!("fleetctl: serving metrics at http://{}/metrics", args.listen));
    crate::notify::send("READY=1");
    let schema_version = location.schema_version();
    // Without a repository the page leaves retirement out.
    let ctx = fleet_runtime::retirement_context(args.repository.as_deref()).ok();
    let observer = std::sync::Arc::new(Observer::new(location, ctx, args.metrics.series()));
    if let Ok(bound) = listener.local_addr() {
        let answers = std::sync::Arc::clone(&observer);
        crate::notify::watch(crate::notify::own_address(bound), move || answers.answered());
    }
    // The page's history is kept while no one looks.
    let sampler = std::sync::Arc::clone(&observer);
    std::thread::Builder::new()
        .name("fleetctl-history".into())
        .spawn(move || {
            loop {
                sampler.sample();
                std::thread::sleep(crate::observe::SAMPLE_EVERY);
            }
        })
        .map_err(|e| Failure::store(format!("cannot keep the page's history: {e}")))?;
    let error = crate::http::serve(listener, move |request| {
        use crate::http::Response;
        if !matches!(request.method, "GET" | "HEAD") {
            return Response { allow: Some("GET, HEAD"), ..Response::text(405, "only GET and HEAD\n") };
        }
        match request.path {
            "/metrics" => match observer.metrics(schema_version) {
                Ok(text) => Response {
                    content_type: "text/plain; version=0.0.4; charset=utf-8",
                    ..Response::text(200, format!("{text}{}", crate::metrics_cmd::process_metrics()))
                },
                Err(e) => {
                    fleet_cli::warn(format_args!("fleetctl: serve: the registry is unavailable: {e}"));
                    Response::text(503, "registry unavailable\n")
                }
            },
            "/healthz" => Response::text(200, "ok\n"),
            "/readyz" => match observer.ready() {
                Ok(()) => Response::text(200, "ready\n"),
                Err(e) => {
                    fleet_cli::warn(format_args!("fleetctl: serve: the registry is unavailable: {e}"));
                    Response::text(503, "registry unavailable\n")
                }
            },
            "/page.js" => Response {
                content_type: "text/javascript; charset=utf-8",
                ..Response::text(200, crate::status_page::PAGE_SCRIPT)
            },
            "/events" => {
                let Some(since) = request.query.strip_prefix("since=") else {
                    return Response::text(400, "events need the page's digest: /events?since=DIGEST\n");
                };
                let mut shown = since.to_owned();
                let observer = std::sync::Arc::clone(&observer);
                // An event each time what the page shows changes.
                let next = move || {
                    let now = observer.page().ok()?;
                    (now.digest != shown).then(|| {
                        shown.clone_from(&now.digest);
                        "changed".to_owned()
                    })
                };
                Response { events: Some(crate::http::Events(Box::new(next))), ..Response::text(200, "") }
            }
            "/" => match observer.page() {
                Ok(page) => Response {
                    content_type: "text/html; charset=utf-8",
                    ..Response::text(200, page.html.clone())
                },
                Err(e) => {
                    fleet_cli::warn(format_args!("fleetctl: serve: the registry is unavailable: {e}"));
                    Response::text(503, "registry unavailable\n")
                }
            },
            _ => Response::text(404, "not found: try / or /metrics\n"),
        }
    });
    Err(Failure::store(format!("the metrics server stopped: cannot accept connections: {error}")))
}
