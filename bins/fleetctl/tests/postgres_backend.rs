//! fleetctl against a real PostgreSQL registry (`FLEET_TEST_POSTGRES_URL`; CI sets it,
//! and there a missing server fails): the same fixture gives the same snapshot as on
//! SQLite, and workers register, heartbeat and release through it.

mod common;

use std::path::PathBuf;

use common::{Fleet, Schema, base_url, wait_for};

#[test]
fn a_fixture_snapshots_alike_on_postgres_and_sqlite() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let fixture_path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/snapshot/stale_and_historical.json");
    let fixture: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path).unwrap()).unwrap();
    let fleet = Fleet::new();
    let registry_file = fleet.dir.path().join("registry.json");
    std::fs::write(&registry_file, fixture["registry"].to_string()).unwrap();
    let schema = Schema::new(&base);
    let snapshot = |location: &str| {
        let import = fleet
            .fleetctl()
            .env("FLEET_REGISTRY", location)
            .args(["registry", "import"])
            .arg(&registry_file)
            .output()
            .unwrap();
        assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
        let out = fleet
            .fleetctl()
            .env("FLEET_REGISTRY", location)
            .args(["snapshot", "--json", "--at", fixture["now"].as_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let on_postgres = snapshot(&schema.url());
    let on_sqlite = snapshot(fleet.registry.to_str().unwrap());
    assert_eq!(on_postgres, on_sqlite);
    assert_eq!(on_postgres["counts"]["stale_worker_count"], 2);
}

#[test]
fn a_worker_registers_and_releases_through_postgres() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = schema.url();
    let minted = std::process::Command::new(common::sibling_bin("fleet-launch"))
        .args(["mint", "--client", "codex"])
        .env("FLEET_REGISTRY", &url)
        .output()
        .unwrap();
    assert!(minted.status.success(), "{}", String::from_utf8_lossy(&minted.stderr));
    let id = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
    let out = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &url)
        .args(["worker", "run", "--namespace", "author", "--ttl", "1", "--", "sleep", "1"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let list =
        fleet.fleetctl().env("FLEET_REGISTRY", &url).args(["worker", "list", "--json"]).output().unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["client_instance_id"], serde_json::json!(id));
    assert_eq!(rows[0]["status"], "released");
    assert!(
        rows[0]["last_heartbeat_at"].as_str().unwrap() > rows[0]["registered_at"].as_str().unwrap(),
        "it heartbeat"
    );
}

/// A launch's five workers heartbeat and sweep on one registry; one is killed with its
/// command, the others mark its row stale, and retirement plans and applies it, while
/// the snapshot reads the rest live. Run directly and, by `scripts/through-pgbouncer.sh`,
/// through a pooler in transaction mode, where each transaction may meet another
/// server session.
#[test]
fn a_launch_beats_sweeps_and_retires_on_postgres() {
    use std::os::unix::process::CommandExt;
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = schema.url();
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &url).args(args).output().unwrap();
    let json = |args: &[&str]| -> serde_json::Value {
        let out = ctl(args);
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
    };
    let id = {
        let out = fleet
            .launcher()
            .env("FLEET_REGISTRY", &url)
            .args(["mint", "--client", "codex"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let namespaces = ["author", "reviewer", "merger", "controller", "reconciler"];
    let said = |ns: &str| fleet.dir.path().join(format!("{ns}.stderr"));
    let mut workers: Vec<std::process::Child> = namespaces
        .iter()
        .map(|ns| {
            fleet
                .fleetctl()
                .env("FLEET_REGISTRY", &url)
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .args(["worker", "run", "--namespace", ns, "--ttl", "1", "--", "sleep", "60"])
                .stderr(std::fs::File::create(said(ns)).unwrap())
                .process_group(0)
                .spawn()
                .unwrap()
        })
        .collect();
    let live = |rows: &serde_json::Value| {
        rows.as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] == "active" && r["ownership_state"] == "owned")
            .count()
    };
    wait_for(std::time::Duration::from_secs(20), || {
        (live(&json(&["worker", "list", "--json"])) == 5).then_some(())
    });

    // One worker and its command die at once; the others sweep its row stale.
    let mut killed = workers.remove(0);
    let _ = std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", killed.id())]).status();
    let _ = killed.wait();
    wait_for(std::time::Duration::from_secs(20), || {
        let rows = json(&["worker", "list", "--json"]);
        let stale = rows.as_array().unwrap().iter().filter(|r| r["ownership_state"] == "stale").count();
        (stale == 1).then_some(())
    });
    let plan = json(&["retire", "plan", "--json"]);
    assert_eq!(plan["candidates"].as_array().map(Vec::len), Some(1), "{plan}");
    let applied = json(&common::apply_args(&plan, &["--every-candidate", "--json"]));
    assert_eq!(applied["retired_count"], 1, "{applied}");
    let snapshot = json(&["snapshot", "--json"]);
    assert_eq!(snapshot["counts"]["stale_worker_count"], 0, "{snapshot}");
    assert_eq!(live(&json(&["worker", "list", "--json"])), 4, "the others beat on");
    // Every beat and sweep of the live workers went through: none warned of a retry.
    for ns in &namespaces[1..] {
        let text = std::fs::read_to_string(said(ns)).unwrap();
        assert!(!text.contains("failed"), "{ns}: {text}");
    }
    for mut worker in workers {
        let _ =
            std::process::Command::new("kill").args(["-KILL", "--", &format!("-{}", worker.id())]).status();
        let _ = worker.wait();
    }
}

#[test]
fn eight_concurrent_initializers_on_postgres_run_the_command_once() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let url = schema.url();
    let fleet = Fleet::new();
    let counter = fleet.dir.path().join("runs");
    let script = format!("echo run >> '{}'; sleep 0.3", counter.display());
    let children: Vec<_> = (0..8)
        .map(|_| {
            fleet
                .fleetctl()
                .env("FLEET_REGISTRY", &url)
                .args([
                    "initialize",
                    "--key",
                    "schema",
                    "--target-version",
                    "1",
                    "--ttl",
                    "5",
                    "--poll-ms",
                    "20",
                    "--",
                ])
                .args(["sh", "-c", &script])
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "every starter reports ready");
    }
    assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1, "the command ran exactly once");
    let audit =
        fleet.fleetctl().env("FLEET_REGISTRY", &url).args(["lease", "audit", "--json"]).output().unwrap();
    let log: serde_json::Value = serde_json::from_slice(&audit.stdout).unwrap();
    let starts = log.as_array().unwrap().iter().filter(|e| e["event"] == "init_start").count();
    assert_eq!(starts, 1);
}

/// A writer that stalls holding the registry's write lock makes other writers fail busy
/// after lock_timeout (exit 3, nothing written) and never blocks readers.
#[test]
fn a_stalled_writer_neither_hangs_writers_nor_blocks_readers() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = format!("{}%20-clock_timeout%3D300ms", schema.url());
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &url).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());
    let mut staller = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    let key = write_lock_key(&mut staller);
    let mut held = staller.transaction().unwrap();
    held.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).unwrap();

    let started = std::time::Instant::now();
    let out = ctl(&["lease", "acquire", "--key", "workflow:w", "--owner", "me"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lock"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "it failed rather than waited");
    let out = ctl(&["snapshot", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    held.rollback().unwrap();
    let out = ctl(&["lease", "show", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "the refused write wrote nothing");
}

/// A role that may only read can read the registry: reading writes nothing.
#[test]
fn a_read_only_role_can_take_a_snapshot() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let ctl =
        |url: &str, args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", url).args(args).output().unwrap();
    assert!(ctl(&schema.url(), &["registry", "init"]).status.success());
    let role = format!("{}_reader", schema.name);
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN; GRANT USAGE ON SCHEMA {s} TO {role}; \
             GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {role}",
            s = schema.name
        ))
        .unwrap();
    let reader_url = schema.url().replacen("postgres@", &format!("{role}@"), 1);
    assert!(reader_url.contains(&role), "the test URL names its user: {reader_url}");
    let out = ctl(&reader_url, &["snapshot", "--json"]);
    let _ = admin.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE {role}"));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A server that refuses the connection is named with its cause, not "db error".
#[test]
fn a_refused_connection_says_why() {
    let fleet = Fleet::new();
    let out = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
        .args(["snapshot"])
        .output()
        .unwrap();
    common::assert_one_line_error(&out, 3, "refused");
}

/// The server terminates a worker's connection (an operator's pg_terminate_backend, a
/// failover): the worker's heartbeats resume on a new connection instead of failing
/// forever while the worker runs.
#[test]
fn heartbeats_survive_a_terminated_connection() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    // The worker's sessions carry a name of their own, so only they are terminated
    // (other tests share the server).
    let app = format!("{}_worker", schema.name);
    let url = schema.url_with(&format!("application_name={app}"));
    let id = {
        let out = fleet
            .launcher()
            .env("FLEET_REGISTRY", &url)
            .args(["mint", "--client", "codex"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let mut worker = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &url)
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .args(["worker", "run", "--namespace", "author", "--ttl", "1", "--", "sleep", "30"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut admin = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    let beat = |admin: &mut postgres::Client| -> Option<String> {
        admin.query_opt("SELECT last_heartbeat_at FROM worker_registrations", &[]).ok()??.get(0)
    };
    let registered = wait_for(std::time::Duration::from_secs(10), || beat(&mut admin));
    // The heartbeat thread is connected once a beat has come after the registration.
    let first = wait_for(std::time::Duration::from_secs(10), || {
        let now = beat(&mut admin)?;
        (now != registered).then_some(now)
    });
    // Terminate the worker's sessions.
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert!(killed >= 1, "the worker's heartbeat connection was found and terminated");
    let after = wait_for(std::time::Duration::from_secs(10), || {
        let now = beat(&mut admin)?;
        (now != first).then_some(now)
    });
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let later = beat(&mut admin).unwrap();
    assert_ne!(later, after, "heartbeats keep coming after the termination");
    let _ = worker.kill();
    let _ = worker.wait();
}

/// A worker process keeps one server session for its whole life: it registers,
/// heartbeats, sweeps and releases on one connection. Five workers of a launch, each
/// sweeping on every tick (a fleet this small does), are five sessions on the server,
/// not ten; so a server at the default `max_connections` of 100 carries about a hundred
/// worker processes, and many more behind a pooler.
#[test]
fn a_worker_process_holds_one_server_session() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let app = format!("{}_worker", schema.name);
    let url = schema.url_with(&format!("application_name={app}"));
    let id = {
        let out = fleet
            .launcher()
            .env("FLEET_REGISTRY", &url)
            .args(["mint", "--client", "codex"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let namespaces = ["author", "reviewer", "merger", "controller", "reconciler"];
    let mut workers: Vec<std::process::Child> = namespaces
        .iter()
        .map(|ns| {
            fleet
                .fleetctl()
                .env("FLEET_REGISTRY", &url)
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .args(["worker", "run", "--namespace", ns, "--ttl", "1", "--", "sleep", "30"])
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut admin = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    wait_for(std::time::Duration::from_secs(20), || {
        let active: i64 = admin
            .query_one("SELECT count(*) FROM worker_registrations WHERE status = 'active'", &[])
            .ok()?
            .get(0);
        (active == 5).then_some(())
    });
    // Several beats and sweeps each (a beat every third of a second, a sweep with each).
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    let sessions = |admin: &mut postgres::Client| -> i64 {
        admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&app])
            .unwrap()
            .get(0)
    };
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(sessions(&mut admin));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(most, 5, "five worker processes, five server sessions");
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
}

/// A server whose default isolation is serializable (an operator's
/// `default_transaction_isolation`) still serializes registry writes without a
/// serialization failure: writes run at READ COMMITTED behind the write lock, so the
/// snapshot each statement reads is taken after the lock is held. Eight processes race
/// for one lease, round after round: one wins each round, the others are denied (exit
/// 1), none fails busy (exit 3), and the epochs in the audit log never repeat.
#[test]
fn a_serializable_server_default_never_fails_a_write() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = format!("{}%20-cdefault_transaction_isolation%3Dserializable", schema.url());
    let ctl = || {
        let mut cmd = fleet.fleetctl();
        cmd.env("FLEET_REGISTRY", &url);
        cmd
    };
    assert!(ctl().args(["registry", "init"]).status().unwrap().success());
    for round in 0..5 {
        let key = format!("workflow:race-{round}");
        let racers: Vec<_> = (0..8)
            .map(|i| {
                ctl()
                    .args(["lease", "acquire", "--key", &key, "--owner", &format!("racer-{i}")])
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut won = 0;
        for racer in racers {
            let out = racer.wait_with_output().unwrap();
            match out.status.code() {
                Some(0) => won += 1,
                Some(1) => {}
                other => panic!("round {round}: exit {other:?}: {}", String::from_utf8_lossy(&out.stderr)),
            }
        }
        assert_eq!(won, 1, "round {round}: exactly one racer holds the lease");
    }
    let out = ctl().args(["lease", "audit", "--json"]).output().unwrap();
    let audit: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let granted: Vec<(String, u64)> = audit
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["outcome"] != "denied")
        .map(|e| (e["lease_key"].as_str().unwrap().to_owned(), e["fencing_epoch"].as_u64().unwrap()))
        .collect();
    let distinct: std::collections::BTreeSet<_> = granted.iter().collect();
    assert_eq!(granted.len(), 5, "{audit}");
    assert_eq!(distinct.len(), granted.len(), "no epoch of one key granted twice: {audit}");
}

/// A statement that runs past statement_timeout is cancelled by the server: the
/// command exits 3 naming the timeout, and nothing is written.
#[test]
fn a_statement_timeout_exits_busy_and_writes_nothing() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let url = format!("{}%20-cstatement_timeout%3D300ms", schema.url());
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &url).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());
    // A slow disk, played by a trigger that sleeps on every lease write.
    let mut admin = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(
            "CREATE FUNCTION slow_write() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN PERFORM pg_sleep(2); RETURN NEW; END $$; \
             CREATE TRIGGER slow_lease BEFORE INSERT OR UPDATE ON leases \
             FOR EACH ROW EXECUTE FUNCTION slow_write();",
        )
        .unwrap();
    let out = ctl(&["lease", "acquire", "--key", "workflow:slow", "--owner", "me"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("statement timeout"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    admin.batch_execute("DROP TRIGGER slow_lease ON leases").unwrap();
    let out = ctl(&["lease", "show", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "the cancelled write wrote nothing");
    let out = ctl(&["lease", "audit", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "nor its audit entry");
}

/// TLS as libpq's `sslmode` asks for it: `require` encrypts; `verify-full` checks the
/// server's certificate against `sslrootcert` and its name against the host, so the
/// server's certificate (issued to `localhost`) passes for `localhost` and is refused,
/// naming the certificate, for `127.0.0.1`.
#[test]
fn tls_is_spoken_and_verified_as_sslmode_asks() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let ssl: String = admin.query_one("SHOW ssl", &[]).unwrap().get(0);
    let cert: String = admin.query_one("SHOW ssl_cert_file", &[]).unwrap().get(0);
    if ssl != "on" || !base.contains("@127.0.0.1:") || std::fs::read(&cert).is_err() {
        eprintln!("skipped: the test server does not offer TLS with a certificate readable here");
        return;
    }
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let ctl =
        |url: &str, args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", url).args(args).output().unwrap();
    let with = |url: String, params: &str| format!("{url}&{params}");

    let out = ctl(&with(schema.url(), "sslmode=require"), &["registry", "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let by_name = schema.url().replacen("@127.0.0.1:", "@localhost:", 1);
    let verified = with(by_name, &format!("sslmode=verify-full&sslrootcert={cert}"));
    let out = ctl(&verified, &["snapshot", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));

    let wrong_name = with(schema.url(), &format!("sslmode=verify-full&sslrootcert={cert}"));
    let out = ctl(&wrong_name, &["snapshot", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("certificate") || stderr.contains("TLS"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");

    // Another authority's certificate as the only root: the server's is not trusted.
    let bundle = std::fs::read_to_string("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    if let Some(end) = bundle.find("-----END CERTIFICATE-----") {
        let other = fleet.dir.path().join("other-ca.pem");
        std::fs::write(&other, &bundle[..end + "-----END CERTIFICATE-----".len()]).unwrap();
        let url = with(schema.url(), &format!("sslmode=verify-ca&sslrootcert={}", other.display()));
        let out = ctl(&url, &["snapshot", "--json"]);
        assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    }

    let out = ctl(&with(schema.url(), "sslmode=sometimes"), &["snapshot"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "bad input: {stderr}");
    assert!(stderr.contains("sslmode \"sometimes\""), "{stderr}");
}

/// The server terminates a connection in the middle of a write transaction (an
/// operator's `pg_terminate_backend` from a second session, here while the write waits
/// for the registry's lock): the command exits 3 naming the termination, and the
/// transaction's writes are gone with it.
#[test]
fn a_connection_terminated_mid_transaction_writes_nothing() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let app = format!("{}_writer", schema.name);
    let url = schema.url_with(&format!("application_name={app}"));
    let ctl = |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", &url).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());

    // Hold the write lock, so the writer's transaction is open and waiting inside.
    let mut staller = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    let key = write_lock_key(&mut staller);
    let mut held = staller.transaction().unwrap();
    held.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).unwrap();
    let writer = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &url)
        .args(["lease", "acquire", "--key", "workflow:cut", "--owner", "me"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    wait_for(std::time::Duration::from_secs(10), || {
        let waiting: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = 'active' \
                 AND wait_event_type = 'Lock'",
                &[&app],
            )
            .unwrap()
            .get(0);
        (waiting == 1).then_some(())
    });
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    held.rollback().unwrap();

    let out = writer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    // The server's own words when they arrive first, else that it closed the connection.
    assert!(
        stderr.contains("terminating connection") || stderr.contains("closed the connection"),
        "names the cause: {stderr}"
    );
    let out = ctl(&["lease", "show", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "nothing was written");
    let out = ctl(&["lease", "audit", "--json"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "[]", "nor audited");
}

/// The skewed-clock attack on PostgreSQL: a worker whose clock is an hour off (faketime)
/// among healthy workers with a 2 s TTL. It judges expiry against the server's clock,
/// disagrees with it, and sweeps nothing: no healthy worker is ever marked stale, and
/// the snapshot reports the skewed worker alone.
#[test]
fn a_skewed_worker_marks_no_healthy_worker_stale_on_postgres() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let faketime = PathBuf::from("/usr/bin/faketime");
    if !faketime.exists() {
        eprintln!(
            "faketime is not installed (apt-get install faketime): no process can be given a skewed clock here"
        );
        return;
    }
    for offset in ["+1h", "-1h"] {
        let schema = Schema::new(&base);
        let url = schema.url();
        let fleet = Fleet::new();
        let minted = std::process::Command::new(common::sibling_bin("fleet-launch"))
            .args(["mint", "--client", "codex"])
            .env("FLEET_REGISTRY", &url)
            .output()
            .unwrap();
        let id = String::from_utf8(minted.stdout).unwrap().trim().to_owned();
        let worker = |namespace: &str, skew: Option<&str>| {
            let mut cmd = match skew {
                Some(skew) => {
                    let mut cmd = std::process::Command::new(&faketime);
                    cmd.args(["-f", skew])
                        .arg(common::fleetctl_bin())
                        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
                    cmd
                }
                None => std::process::Command::new(common::fleetctl_bin()),
            };
            cmd.args(["worker", "run", "--namespace", namespace, "--ttl", "2", "--", "sleep", "60"])
                .env("FLEET_REGISTRY", &url)
                .env("GITEA_MCP_CLIENT", "codex")
                .env("GITEA_MCP_CLIENT_INSTANCE", &id)
                .current_dir(fleet.dir.path())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            cmd.spawn().unwrap()
        };
        let rows = || -> Vec<serde_json::Value> {
            let out = fleet
                .fleetctl()
                .env("FLEET_REGISTRY", &url)
                .args(["worker", "list", "--json"])
                .output()
                .unwrap();
            serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout).unwrap_or_default()
        };
        let mut children: Vec<_> =
            ["author", "reviewer", "merger", "controller"].iter().map(|ns| worker(ns, None)).collect();
        wait_for(std::time::Duration::from_secs(30), || (rows().len() == 4).then_some(()));
        let honest: Vec<String> =
            rows().iter().map(|r| r["worker_identity"].as_str().unwrap().to_owned()).collect();
        children.push(worker("reconciler", Some(offset)));
        wait_for(std::time::Duration::from_secs(30), || (rows().len() == 5).then_some(()));
        // Four TTLs: every worker sweeps on each of its ticks.
        let watch = std::time::Instant::now();
        while watch.elapsed() < std::time::Duration::from_secs(8) {
            for row in rows() {
                if honest.iter().any(|h| row["worker_identity"] == h.as_str()) {
                    assert_ne!(
                        row["ownership_state"], "stale",
                        "{offset}: healthy worker marked stale: {row}"
                    );
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        let out = fleet.fleetctl().env("FLEET_REGISTRY", &url).args(["snapshot", "--json"]).output().unwrap();
        let snapshot: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let stale: Vec<&str> = snapshot["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["code"] == "stale_worker")
            .flat_map(|f| f["worker_identities"].as_array().unwrap().iter().map(|w| w.as_str().unwrap()))
            .collect();
        let skewed = rows().into_iter().find(|r| r["namespace"] == "reconciler").unwrap();
        assert_eq!(
            stale,
            [skewed["worker_identity"].as_str().unwrap()],
            "{offset}: only the skewed worker is reported"
        );
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The advisory lock key this registry's writers take: derived from its registry id.
fn write_lock_key(client: &mut postgres::Client) -> i64 {
    let id: String = client.query_one("SELECT registry_id FROM registry_identity", &[]).unwrap().get(0);
    fleet_registry::RegistryId::new(id).unwrap().lock_key()
}

/// A writer that is paused (SIGSTOP) right after the server granted it the write lock
/// leaves its session idle inside the transaction: the server ends that session after
/// the idle-in-transaction timeout every Fleetward session sets (5 s, under the 10 s
/// lock timeout), so the next writer waits for that and then writes, instead of failing
/// for as long as the paused client lives.
#[test]
fn a_writer_paused_holding_the_write_lock_blocks_others_only_briefly() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let app = format!("{}_paused", schema.name);
    let url = schema.url_with(&format!("application_name={app}"));
    let ctl =
        |args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", schema.url()).args(args).output().unwrap();
    assert!(ctl(&["registry", "init"]).status.success());

    // The writer waits inside its transaction for the lock the test holds.
    let mut staller = postgres::Client::connect(&schema.url(), postgres::NoTls).unwrap();
    let key = write_lock_key(&mut staller);
    let mut held = staller.transaction().unwrap();
    held.execute("SELECT pg_advisory_xact_lock($1)", &[&key]).unwrap();
    let mut writer = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &url)
        .args(["lease", "acquire", "--key", "workflow:paused", "--owner", "paused"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let waiting = |admin: &mut postgres::Client, state: &str| -> i64 {
        admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND state = $2",
                &[&app, &state],
            )
            .unwrap()
            .get(0)
    };
    wait_for(std::time::Duration::from_secs(10), || (waiting(&mut admin, "active") == 1).then_some(()));
    // Paused as it waits; the lock passes to it while it cannot go on.
    let writer_pid = nix::unistd::Pid::from_raw(i32::try_from(writer.id()).unwrap());
    nix::sys::signal::kill(writer_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    held.rollback().unwrap();
    wait_for(std::time::Duration::from_secs(10), || {
        (waiting(&mut admin, "idle in transaction") == 1).then_some(())
    });

    let out = ctl(&["lease", "acquire", "--key", "workflow:next", "--owner", "next"]);
    assert!(out.status.success(), "the next writer wrote: {}", String::from_utf8_lossy(&out.stderr));
    nix::sys::signal::kill(writer_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let _ = writer.wait();
}

/// Two registries in two schemas of one database are two registries: a writer holding
/// one's write lock does not stop the other's writers.
#[test]
fn registries_in_two_schemas_never_wait_on_each_other() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let (first, second) = (Schema::new(&base), Schema::new(&base));
    let fleet = Fleet::new();
    let ctl =
        |url: &str, args: &[&str]| fleet.fleetctl().env("FLEET_REGISTRY", url).args(args).output().unwrap();
    assert!(ctl(&first.url(), &["registry", "init"]).status.success());
    assert!(ctl(&second.url(), &["registry", "init"]).status.success());
    let mut staller = postgres::Client::connect(&first.url(), postgres::NoTls).unwrap();
    let first_key = write_lock_key(&mut staller);
    let mut other = postgres::Client::connect(&second.url(), postgres::NoTls).unwrap();
    assert_ne!(first_key, write_lock_key(&mut other), "each registry has its own id and lock");
    let mut held = staller.transaction().unwrap();
    held.execute("SELECT pg_advisory_xact_lock($1)", &[&first_key]).unwrap();
    let out = ctl(&second.url(), &["lease", "acquire", "--key", "workflow:w", "--owner", "me"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    held.rollback().unwrap();
}

/// `initialize --ttl 3` whose renewals stall on a network that stops forwarding: the
/// command is ended before the lease can lapse (by its keeper, on the deadline of the
/// last committed renewal), and the owner's renewal gives up within the time the lease
/// had left instead of waiting out the statement deadline (60 s and more); it says it
/// lost the lease and exits 1.
#[test]
fn a_stalled_renewal_stops_the_command_before_the_lease_lapses() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = Schema::new(&base);
    let fleet = Fleet::new();
    let direct = schema.url();
    assert!(
        fleet
            .fleetctl()
            .env("FLEET_REGISTRY", &direct)
            .args(["registry", "init"])
            .status()
            .unwrap()
            .success()
    );
    let proxy = common::StallingProxy::to("127.0.0.1:5432");
    let through = proxy.url(&direct);
    let pidfile = fleet.dir.path().join("pid");
    let mut owner = fleet
        .fleetctl()
        .env("FLEET_REGISTRY", &through)
        .args(["initialize", "--key", "stall", "--target-version", "1", "--ttl", "3", "--", "sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let command: i32 = wait_for(std::time::Duration::from_secs(20), || {
        std::fs::read_to_string(&pidfile).ok()?.trim().parse().ok()
    });
    proxy.stall();
    let stalled_at = std::time::Instant::now();
    // The lease, as the store holds it, read past the proxy.
    let mut admin = postgres::Client::connect(&direct, postgres::NoTls).unwrap();
    let expires: String =
        admin.query_one("SELECT expires_at FROM leases WHERE lease_key = 'init:stall'", &[]).unwrap().get(0);
    let expires = fleet_identity::Timestamp::parse(&expires).unwrap();
    wait_for(std::time::Duration::from_secs(10), || (!common::alive(command)).then_some(()));
    let ended = fleet_identity::Timestamp::parse(
        &admin
            .query_one(
                "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')",
                &[],
            )
            .unwrap()
            .get::<_, String>(0),
    )
    .unwrap();
    assert!(ended < expires, "the command ended at {ended}, before the lease could lapse at {expires}");
    let status = owner.wait().unwrap();
    let waited = stalled_at.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(owner.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lost the initialization lease"), "{stderr}");
    assert!(
        waited < std::time::Duration::from_secs(30),
        "the owner gave up after {waited:?}, not the statement deadline"
    );
}
