//! `fleetctl metrics` and `fleetctl serve`, read back with a Prometheus text parser.

mod common;

use std::io::{BufRead, Read, Write};
use std::time::Duration;

use common::{Fleet, wait_for};

fn parse(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("valid exposition")
}

fn value(s: &prometheus_parse::Sample) -> f64 {
    match s.value {
        prometheus_parse::Value::Counter(v)
        | prometheus_parse::Value::Gauge(v)
        | prometheus_parse::Value::Untyped(v) => v,
        _ => f64::NAN,
    }
}

/// A registry with two workers of one launch (one released, one running) and a lease.
fn fleet_with_workers() -> (Fleet, String, std::process::Child) {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    let run = |ns: &str, cmd: &[&str]| {
        fleet
            .fleetctl()
            .args(["worker", "run", "--namespace", ns, "--"])
            .args(cmd)
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    assert!(run("author", &["true"]).wait().unwrap().success());
    let running = run("reviewer", &["sleep", "30"]);
    wait_for(Duration::from_secs(10), || (fleet.workers().len() == 2).then_some(()));
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:deploy", "--owner", "ops-one"]);
    assert!(out.status.success());
    let _ = fleet.ctl(&["lease", "acquire", "--key", "workflow:deploy", "--owner", "ops-two"]);
    (fleet, id, running)
}

#[test]
fn metrics_parse_as_prometheus_text_and_count_the_fleet() {
    let (fleet, id, mut running) = fleet_with_workers();
    let out = fleet.ctl(&["metrics"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scrape = parse(&String::from_utf8(out.stdout).unwrap());
    let find = |metric: &str, pairs: &[(&str, &str)]| -> Vec<f64> {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric && pairs.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(value)
            .collect()
    };
    // Every series is an aggregate: rows by namespace, status and state.
    assert_eq!(find("fleet_workers", &[("namespace", "author"), ("status", "released")]), [1.0]);
    assert_eq!(
        find("fleet_workers", &[("namespace", "reviewer"), ("status", "active"), ("state", "live")]),
        [1.0]
    );
    assert!(
        scrape
            .samples
            .iter()
            .all(|s| s.labels.get("client_instance").is_none() && s.labels.get("worker").is_none()),
        "no series per launch or worker without --per-worker-series"
    );
    // Prometheus's own target labels are never the fleet's.
    assert!(
        scrape.samples.iter().all(|s| s.labels.get("instance").is_none() && s.labels.get("job").is_none()),
        "no label named instance or job"
    );
    let oldest = find("fleet_oldest_heartbeat_age_seconds", &[("namespace", "reviewer")]);
    assert!(oldest.len() == 1 && oldest[0] >= 0.0 && oldest[0] < 60.0, "{oldest:?}");
    let text = String::from_utf8(fleet.ctl(&["metrics"]).stdout).unwrap();
    assert!(text.contains("fleet_heartbeat_age_seconds_count{namespace=\"reviewer\"} 1\n"), "{text}");
    assert!(
        text.contains("fleet_heartbeat_age_seconds_bucket{namespace=\"reviewer\",le=\"+Inf\"} 1\n"),
        "{text}"
    );

    // Per launch and per worker only when asked for.
    let out = fleet.ctl(&["metrics", "--per-worker-series"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let scrape = parse(&String::from_utf8(out.stdout).unwrap());
    let find = |metric: &str, pairs: &[(&str, &str)]| -> Vec<f64> {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric && pairs.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(value)
            .collect()
    };
    assert_eq!(find("fleet_launch_workers", &[("client_instance", &id), ("namespace", "reviewer")]), [1.0]);
    assert_eq!(
        find("fleet_launch_workers", &[("client_instance", &id), ("namespace", "author")]),
        Vec::<f64>::new()
    );
    let ages =
        find("fleet_worker_heartbeat_age_seconds", &[("namespace", "reviewer"), ("client_instance", &id)]);
    assert!(ages.len() == 1 && ages[0] >= 0.0 && ages[0] < 60.0, "{ages:?}");
    assert_eq!(find("fleet_lease_epoch", &[("key", "workflow:deploy"), ("kind", "workflow")]), [1.0]);
    assert_eq!(find("fleet_lease_held", &[("key", "workflow:deploy")]), [1.0]);
    assert_eq!(find("fleet_lease_holder_info", &[("key", "workflow:deploy"), ("owner", "ops-one")]), [1.0]);
    assert_eq!(find("fleet_lease_decisions_total", &[("event", "acquire"), ("outcome", "denied")]), [1.0]);
    assert_eq!(find("fleet_lease_denials_total", &[("reason", "lease_held")]), [1.0]);
    // Every outcome and reason is there from 0, so the first of each shows in rate().
    assert_eq!(
        find("fleet_lease_decisions_total", &[("event", "takeover"), ("outcome", "taken_over")]),
        [0.0]
    );
    assert_eq!(find("fleet_lease_denials_total", &[("reason", "stale_epoch")]), [0.0]);
    // The schema label is the one this SQLite file is at, not a number of its own.
    let file_schema: i64 = rusqlite::Connection::open(&fleet.registry)
        .unwrap()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let build = find(
        "fleetctl_build_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("schema_version", &file_schema.to_string())],
    );
    assert_eq!(build, [1.0]);
    assert_eq!(find("fleet_live_fleet_safe", &[]).len(), 1);
    assert!(scrape.docs.contains_key("fleet_findings"));
    let _ = running.kill();
    let _ = running.wait();
}

#[test]
fn serve_answers_a_scrape_at_slash_metrics_on_loopback() {
    let (fleet, _, mut running) = fleet_with_workers();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = fleet
        .fleetctl()
        .args(["serve", "--listen", &listen])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let body = wait_for(Duration::from_secs(10), || {
        let mut stream = std::net::TcpStream::connect(&listen).ok()?;
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        assert!(head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        Some(body.to_owned())
    });
    let scrape = parse(&body);
    assert!(scrape.samples.iter().any(|s| s.metric == "fleet_workers"));
    assert!(std::io::BufReader::new(body.as_bytes()).lines().count() > 5);
    let _ = server.kill();
    let _ = server.wait();
    let _ = running.kill();
    let _ = running.wait();
}

/// Under `serve` the decision counters are kept between scrapes and count each audit
/// entry once, new ones included; a lease's epoch keeps one series whatever its holder.
#[test]
fn served_counters_count_each_decision_once_across_scrapes() {
    let (fleet, id, mut running) = fleet_with_workers();
    let served = Served::start(&fleet, &[]);
    let scrape = || parse(served.get("/metrics").split_once("\r\n\r\n").unwrap().1);
    let count = |scrape: &prometheus_parse::Scrape, metric: &str, pairs: &[(&str, &str)]| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == metric && pairs.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(value)
            .sum()
    };
    let first = scrape();
    assert_eq!(count(&first, "fleet_lease_denials_total", &[("reason", "lease_held")]), 1.0);
    let second = scrape();
    assert_eq!(
        count(&second, "fleet_lease_denials_total", &[("reason", "lease_held")]),
        1.0,
        "not counted twice"
    );
    let _ = fleet.ctl(&["lease", "acquire", "--key", "workflow:deploy", "--owner", "ops-three"]);
    let third = scrape();
    assert_eq!(
        count(&third, "fleet_lease_denials_total", &[("reason", "lease_held")]),
        2.0,
        "the new one counted"
    );
    assert_eq!(
        count(&third, "fleet_lease_decisions_total", &[("event", "acquire"), ("outcome", "acquired")]),
        1.0
    );
    let epochs = third.samples.iter().filter(|s| s.metric == "fleet_lease_epoch").count();
    assert_eq!(epochs, 1, "one series per lease");
    // What the server keeps of the rows between scrapes gives way to a row written since
    // (of the running launch: a finished launch's rows are history, not counted).
    let merger = [("namespace", "merger"), ("status", "released")];
    assert_eq!(count(&third, "fleet_workers", &merger), 0.0);
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "merger", "--", "true"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&scrape(), "fleet_workers", &merger), 1.0);
    let _ = running.kill();
    let _ = running.wait();
}

/// `/` is the fleet as one page: the verdict, the counts and a row per launch with its
/// namespaces' worker states, every registry value escaped; the scrape carries the
/// process's own series.
#[test]
fn serve_shows_the_fleet_as_a_page_and_its_own_process() {
    let (fleet, _, mut running) = fleet_with_workers();
    let served = Served::start(&fleet, &[]);
    let listen = served.listen.clone();
    let get = |path: &str| served.get(path);
    let page = get("/");
    assert!(page.starts_with("HTTP/1.1 200") && page.contains("text/html"), "{page:.300}");
    assert!(page.contains("<h1 id=\"verdict\""), "{page}");
    let rows = fleet.workers();
    let instance = rows[0].client_instance_id.clone().unwrap();
    assert!(page.contains(&instance), "the launch has its row: {page}");
    assert!(page.contains("<td class=\"live\">live <meter "), "a live worker, its heartbeat gauged: {page}");
    assert_eq!(page.matches("<script").count(), 1, "one script, the page's own: {page}");
    assert!(page.contains("<script src=\"/page.js\""), "served by this server: {page}");
    assert_eq!(page.matches(" src=").count(), 1, "nothing loaded from elsewhere");
    assert!(
        page.contains("Content-Security-Policy: default-src 'none'; script-src 'self'"),
        "no inline or foreign script runs: {page:.600}"
    );
    let script = get("/page.js");
    assert!(script.starts_with("HTTP/1.1 200") && script.contains("text/javascript"), "{script:.300}");
    assert!(
        script.contains("EventSource") && script.contains("onerror"),
        "a refused stream is tried again: {script}"
    );
    assert!(page.contains("<h2>Leases</h2>") && page.contains("<h2>Retirement</h2>"), "{page}");
    // The page's event stream: a digest other than the fleet's is news at once.
    assert!(get("/events").starts_with("HTTP/1.1 400"), "a stream needs the page's digest");
    let mut stream = std::net::TcpStream::connect(&listen).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(stream, "GET /events?since=0 HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data: changed") {
        let n = stream.read(&mut chunk).unwrap();
        assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    assert!(String::from_utf8_lossy(&seen).contains("text/event-stream"));
    let scrape = parse(get("/metrics").split_once("\r\n\r\n").unwrap().1);
    for series in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
    ] {
        let value = scrape.samples.iter().find(|s| s.metric == series).map(|s| s.value.clone());
        assert!(value.is_some(), "{series} is served");
    }
    assert!(get("/nowhere").starts_with("HTTP/1.1 404"));
    let _ = running.kill();
    let _ = running.wait();
}

/// The page's history is the fleet as the server saw it over time: the counts of each
/// render are a sample, and the line ends at the counts the page states.
#[test]
fn the_pages_history_follows_the_fleet_as_the_server_saw_it() {
    let (fleet, _, mut running) = fleet_with_workers();
    let served = Served::start(&fleet, &[]);
    let attr = |page: &str, name: &str| -> String {
        let history = page.split("<svg id=\"history\"").nth(1).expect("the page draws its history");
        let value = history.split(&format!(" {name}=\"")).nth(1).unwrap();
        value.split('"').next().unwrap().to_owned()
    };
    let first = served.get("/");
    assert_eq!((attr(&first, "data-samples"), attr(&first, "data-live")), ("1".into(), "1".into()));
    running.kill().unwrap();
    let _ = running.wait();
    let page = wait_for(Duration::from_secs(20), || {
        served.try_get("/").filter(|p| p.contains("<svg id=\"history\"") && attr(p, "data-live") == "0")
    });
    assert_eq!(attr(&page, "data-samples"), "2", "one sample before the crash, one after");
    assert_eq!(attr(&page, "data-stale"), "1", "the crashed worker's row");
    assert_eq!(attr(&page, "data-most"), "1");
}

/// Pages open on one server share its session: each stream started from the page's
/// digest stays quiet while nothing changes, and every one of them hears a change (a
/// lease acquired) once it lands.
#[test]
fn every_open_page_hears_a_change_and_only_a_change() {
    let (fleet, _, mut running) = fleet_with_workers();
    let served = Served::start(&fleet, &[]);
    let listen = served.listen.clone();
    let page = served.get("/");
    let since =
        page.split("data-since=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap().to_owned();
    let streams: Vec<std::net::TcpStream> = (0..4)
        .map(|_| {
            let mut stream = std::net::TcpStream::connect(&listen).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
            write!(stream, "GET /events?since={since} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
            stream
        })
        .collect();
    // Let every stream ask a few times while nothing changes.
    std::thread::sleep(Duration::from_secs(3));
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:release", "--owner", "ops-one"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for mut stream in streams {
        let mut seen = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("data: changed") {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the stream ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&chunk[..n]);
        }
        let text = String::from_utf8_lossy(&seen);
        assert_eq!(text.matches("data: changed").count(), 1, "one change, one event: {text}");
    }
    let _ = running.kill();
    let _ = running.wait();
}

/// The page's retirement is judged as of each render, not as of the server's start: a
/// worker killed after `serve` started becomes a candidate on the page once its
/// heartbeat lapses.
#[test]
fn the_page_offers_a_worker_killed_after_the_server_started() {
    use std::os::unix::process::CommandExt;
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let served = Served::start(&fleet, &["--repository", "/srv/repo"]);
    let page = || served.try_get("/").filter(|r| r.starts_with("HTTP/1.1 200"));
    assert!(wait_for(Duration::from_secs(10), page).contains("0 candidates"));
    // The server has rendered (and started) before the worker exists.
    std::thread::sleep(Duration::from_millis(1500));
    let mut worker = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--ttl", "1", "--repository", "/srv/repo"])
        .args(["--", "sleep", "60"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", fleet.mint("codex"))
        .process_group(0)
        .spawn()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(i32::try_from(worker.id()).unwrap());
    wait_for(Duration::from_secs(10), || (fleet.workers_once_created()?.len() == 1).then_some(()));
    common::wait_until_running(fleet.workers()[0].pid.unwrap());
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = worker.wait();
    let identity = fleet.workers()[0].worker_identity.to_string();
    let offered = wait_for(Duration::from_secs(20), || {
        page().filter(|p| p.contains(&format!("<td>{identity}</td><td>eligible_stale_orphan</td>")))
    });
    assert!(offered.contains("1 candidate,"), "{offered}");
}

/// `fleetctl serve` on a free loopback port, killed and reaped however the test ends (a
/// server left running would hold the test's output open).
struct Served {
    listen: String,
    server: std::process::Child,
}

impl Served {
    fn start(fleet: &Fleet, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let listen = format!("127.0.0.1:{port}");
        let server = fleet
            .fleetctl()
            .args(["serve", "--listen", &listen])
            .args(args)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        Self { listen, server }
    }

    /// The whole answer to `GET path`, if the server answered.
    fn try_get(&self, path: &str) -> Option<String> {
        let mut stream = std::net::TcpStream::connect(&self.listen).ok()?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    }

    /// The whole answer to `GET path`, once the server answers.
    fn get(&self, path: &str) -> String {
        wait_for(Duration::from_secs(10), || self.try_get(path))
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// Under systemd's `Type=notify` (sd_notify(3): a datagram to `NOTIFY_SOCKET`), `serve`
/// says `READY=1` once its port is bound and pings `WATCHDOG=1` at half `WATCHDOG_USEC`
/// while requests are answered through the registry (an idle server asks itself). The test plays the service manager's socket.
#[test]
fn serve_tells_systemd_it_is_ready_and_pings_its_watchdog() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let socket_path = fleet.dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut server = fleet
        .fleetctl()
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "4000000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let received = |what: &str| {
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).unwrap_or_else(|e| panic!("no {what} from serve: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert_eq!(received("READY=1"), "READY=1");
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("ready means the port is bound");
    assert_eq!(received("WATCHDOG=1"), "WATCHDOG=1");
    let _ = server.kill();
    let _ = server.wait();
}

/// Under `WatchdogSec=1` (systemd.service(5): the service must ping within every
/// interval) a healthy, idle server pings more often than once a second, for seconds on
/// end.
#[test]
fn serve_pings_a_one_second_watchdog_in_time() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let socket_path = fleet.dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut server = fleet
        .fleetctl()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "1000000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut buf = [0u8; 256];
    let mut last = None;
    let mut pings = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let n = socket.recv(&mut buf).expect("a ping within the read timeout");
        if &buf[..n] != b"WATCHDOG=1" {
            continue;
        }
        let now = std::time::Instant::now();
        if let Some(before) = last {
            let gap: Duration = now - before;
            assert!(gap < Duration::from_secs(1), "{gap:?} between two pings of a 1 s watchdog");
        }
        last = Some(now);
        pings += 1;
    }
    assert!(pings >= 5, "{pings} pings in 4 s");
    let _ = server.kill();
    let _ = server.wait();
}

/// The watchdog is fed by answers through the registry, not by the request loop alone: a
/// registry that stops answering (PostgreSQL behind a relay that stalls every byte, as a
/// network that drops packets without a reset does) stops the pings, so systemd restarts
/// the server (systemd.service(5): no ping within `WatchdogSec=` is a failure); when the
/// registry answers again the pings come back. The test plays the service manager's
/// socket. Needs `FLEET_TEST_POSTGRES_URL`.
#[test]
fn serve_stops_pinging_its_watchdog_while_the_registry_hangs() {
    let Some(base) = common::base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = common::Schema::new(&base);
    let fleet = Fleet::new();
    let direct = schema.url();
    let init = fleet.fleetctl().env("FLEET_REGISTRY", &direct).args(["registry", "init"]).output().unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    let relay = common::StallingProxy::to("127.0.0.1:5432");
    let socket_path = fleet.dir.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    let mut server = fleet
        .fleetctl()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("FLEET_REGISTRY", relay.url(&direct))
        .env("NOTIFY_SOCKET", &socket_path)
        .env("WATCHDOG_USEC", "2000000")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Every ping up to `until`, with when it came.
    let pings_until = |until: std::time::Instant| {
        let mut at = Vec::new();
        let mut buf = [0u8; 64];
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            socket.set_read_timeout(Some(left.max(Duration::from_millis(1)))).unwrap();
            match socket.recv(&mut buf) {
                Ok(n) if &buf[..n] == b"WATCHDOG=1" => at.push(std::time::Instant::now()),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        at
    };
    let start = std::time::Instant::now();
    assert!(pings_until(start + Duration::from_secs(3)).len() >= 2, "a healthy server pings");
    relay.stall_for(Duration::from_secs(6));
    let stalled = std::time::Instant::now();
    let during = pings_until(stalled + Duration::from_secs(5));
    // A self-check begun just before the stall may still have been answered.
    let late: Vec<_> =
        during.iter().map(|t| *t - stalled).filter(|d| *d > Duration::from_millis(1500)).collect();
    assert!(late.is_empty(), "pinged {late:?} into a 2 s watchdog with the registry hung");
    let after = pings_until(stalled + Duration::from_secs(14));
    assert!(!after.is_empty(), "the pings come back once the registry answers");
    let _ = server.kill();
    let _ = server.wait();
}

/// Twenty launches that ran and finished are history: the scrape counts the live fleet
/// (the running launch's rows, its released one included), in aggregates with one series
/// per namespace, status and state, and the finished rows are in no series at all.
#[test]
fn finished_launches_are_history_and_the_scrape_counts_the_live_fleet() {
    let (fleet, _, mut running) = fleet_with_workers();
    for _ in 0..20 {
        let id = fleet.mint("codex");
        for ns in ["author", "reviewer"] {
            let out = fleet
                .fleetctl()
                .args(["worker", "run", "--namespace", ns, "--", "true"])
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    }
    assert_eq!(fleet.workers().len(), 42, "the record keeps every row");
    let out = fleet.ctl(&["metrics"]);
    assert!(out.status.success());
    let scrape = parse(&String::from_utf8(out.stdout).unwrap());
    let workers: Vec<_> = scrape.samples.iter().filter(|s| s.metric == "fleet_workers").collect();
    let series = |state: &str| workers.iter().filter(|s| s.labels.get("state") == Some(state)).count();
    assert_eq!((series("historical"), series("live")), (1, 1), "{workers:?}");
    let counted: f64 = workers.iter().map(|s| value(s)).sum();
    assert_eq!(counted, 2.0, "the running launch's two rows, and no finished row: {workers:?}");
    let _ = running.kill();
    let _ = running.wait();
}

/// `serve`'s start-up line says where it listens: a plain line by default, and under
/// `--log-format json` an INFO event (shown with `RUST_LOG=info`), not a warning.
#[test]
fn serve_says_where_it_listens_at_info_not_as_a_warning() {
    use std::io::BufRead as _;
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let first_line = |json: bool| {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut cmd = fleet.fleetctl();
        if json {
            cmd.args(["--log-format", "json"]).env("RUST_LOG", "info");
        }
        let mut server = cmd
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(server.stderr.take().unwrap()).lines();
        let line = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("serving metrics"))).unwrap().unwrap();
        let _ = server.kill();
        let _ = server.wait();
        line
    };
    assert!(first_line(false).starts_with("fleetctl: serving metrics at http://127.0.0.1:"));
    let event: serde_json::Value = serde_json::from_str(&first_line(true)).unwrap();
    assert_eq!(event["level"], "INFO", "{event}");
}
