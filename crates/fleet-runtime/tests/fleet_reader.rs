//! The long-lived fleet reader never answers from stale rows: a commit by another
//! connection, a replaced registry file and a removed one are all seen on the next read.

use fleet_registry::{OpenMode, RegistryDump};
use fleet_runtime::{Fleet, RegistryLocation, open_registry};

/// A ledger entry and one active worker row per name, in the registry's export format.
fn dump(names: &[&str]) -> RegistryDump {
    let id = "inst-codex-20260730T120000Z-0123456789ab";
    let rows: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            serde_json::json!({
                "worker_identity": name, "client_type": "codex", "client_instance_id": id,
                "namespace": "author", "status": "active", "registered_at": "2026-07-30T12:00:00Z",
                "last_heartbeat_at": "2026-07-30T12:00:00Z", "heartbeat_ttl_s": 30, "pid": 100 + i,
            })
        })
        .collect();
    let text = serde_json::json!({
        "instances": [{"client_instance_id": id, "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"}],
        "worker_registrations": rows,
    });
    RegistryDump::from_json(&text.to_string()).unwrap()
}

fn create(location: &RegistryLocation, names: &[&str]) {
    open_registry(location, OpenMode::CreateIfMissing).unwrap().import(&dump(names)).unwrap();
}

fn identities(reader: &mut Fleet) -> Vec<String> {
    reader.dump().unwrap().worker_registrations.iter().map(|r| r.worker_identity.to_string()).collect()
}

#[test]
fn a_commit_by_another_connection_is_read_at_once() {
    let dir = tempfile::tempdir().unwrap();
    commits_are_read_at_once(&RegistryLocation::Sqlite(dir.path().join("registry.sqlite3")));
}

/// The same on PostgreSQL (`FLEET_TEST_POSTGRES_URL`; CI sets it), whose change marker
/// is a digest of the row versions.
#[test]
fn a_commit_by_another_connection_is_read_at_once_on_postgres() {
    let Some(base) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("fleet_reader_{}", std::process::id());
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).expect("the test PostgreSQL server");
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    commits_are_read_at_once(&RegistryLocation::Postgres(format!(
        "{base}{sep}options=-csearch_path%3D{schema}"
    )));
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}

fn commits_are_read_at_once(location: &RegistryLocation) {
    let location = location.clone();
    create(&location, &["wkr-a"]);
    let mut reader = Fleet::new(location.clone());
    assert_eq!(identities(&mut reader), ["wkr-a"]);
    assert_eq!(identities(&mut reader), ["wkr-a"], "unchanged: served from what was read");

    open_registry(&location, OpenMode::MustExist).unwrap().import(&dump(&["wkr-b"])).unwrap();
    assert_eq!(identities(&mut reader), ["wkr-a", "wkr-b"]);
}

#[test]
fn a_replaced_registry_file_is_read_afresh_and_a_removed_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let location = RegistryLocation::Sqlite(path.clone());
    create(&location, &["wkr-old"]);
    let mut reader = Fleet::new(location.clone());
    assert_eq!(identities(&mut reader), ["wkr-old"]);

    // Restored from elsewhere: the open connection still sees the old file.
    let other = RegistryLocation::Sqlite(dir.path().join("restored.sqlite3"));
    create(&other, &["wkr-new"]);
    std::fs::rename(dir.path().join("restored.sqlite3"), &path).unwrap();
    assert_eq!(identities(&mut reader), ["wkr-new"]);

    std::fs::rename(&path, dir.path().join("moved-away.sqlite3")).unwrap();
    let err = reader.dump().unwrap_err();
    assert!(err.to_string().contains("registry.sqlite3"), "{err}");
}

/// A worker of `launch` in `namespace` whose row records `child`.
fn worker(
    location: &RegistryLocation,
    launch: &fleet_runtime::Launch,
    namespace: fleet_identity::Namespace,
    child: &std::process::Child,
) -> fleet_runtime::WorkerSession {
    let pid = fleet_identity::Pid::new(i64::from(child.id())).unwrap();
    let options = fleet_runtime::WorkerOptions {
        namespace,
        process: fleet_probe::process_identity(pid).unwrap(),
        heartbeat_ttl: fleet_registry::HeartbeatTtl::from_secs(30).unwrap(),
        repository: None,
        revisions: fleet_registry::Revisions::default(),
        launch: Some(fleet_runtime::LaunchProcess::current().unwrap()),
    };
    fleet_runtime::WorkerSession::start(location, &launch.env, options).unwrap()
}

/// A launch minted at `location` and three sleeping processes for its workers.
fn launch_with_sleepers(location: &RegistryLocation) -> (fleet_runtime::Launch, [std::process::Child; 3]) {
    let client = fleet_identity::ClientType::new("codex").unwrap();
    let launch = fleet_runtime::Launch::mint(location, &client, None, None).unwrap();
    let sleep = || std::process::Command::new("sleep").arg("600").spawn().unwrap();
    (launch, [sleep(), sleep(), sleep()])
}

/// Writes the snapshot at `at` from the JSON the reader keeps, checks it is byte for
/// byte what serde writes of the same snapshot, and returns it as a value.
fn written(reader: &mut Fleet, at: fleet_identity::Timestamp) -> serde_json::Value {
    let mut taken = reader.json_snapshot(None, &fleet_snapshot::Policy::default(), at).unwrap();
    let mut out = Vec::new();
    taken.write_json(&mut out).unwrap();
    let fresh = serde_json::to_vec(&taken.snapshot).unwrap();
    assert!(
        out == fresh,
        "kept JSON:\n{}\nfresh:\n{}",
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&fresh)
    );
    serde_json::from_slice(&out).unwrap()
}

/// `field` of the worker `row` in a written snapshot.
fn field(snapshot: &serde_json::Value, row: &fleet_registry::WorkerRow, field: &str) -> serde_json::Value {
    let workers = snapshot["workers"].as_array().unwrap();
    let worker = workers.iter().find(|w| w["worker_identity"] == row.worker_identity.as_str()).unwrap();
    worker[field].clone()
}

/// A reader writes each worker from the JSON it kept while the worker's row and what
/// the snapshot judged of it stay the same; every change is written afresh: a heartbeat
/// that lapses, a process that exits, a row released in place, a row added.
#[test]
fn kept_worker_json_is_written_as_serde_writes_the_snapshot_after_every_change() {
    use fleet_identity::Namespace;
    let dir = tempfile::tempdir().unwrap();
    let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
    let (launch, mut children) = launch_with_sleepers(&location);
    let author = worker(&location, &launch, Namespace::Author, &children[0]);
    let reviewer = worker(&location, &launch, Namespace::Reviewer, &children[1]);
    let mut reader = Fleet::new(location.clone()).tracking_processes();
    let now = fleet_runtime::now();

    let first = written(&mut reader, now);
    assert_eq!(field(&first, author.row(), "liveness"), "alive");
    assert_eq!(written(&mut reader, now)["workers"], first["workers"], "nothing moved");

    let later = now.saturating_add(time::Duration::minutes(5));
    let lapsed = written(&mut reader, later);
    assert_eq!(field(&lapsed, reviewer.row(), "state"), "stale");
    assert_eq!(field(&written(&mut reader, now), reviewer.row(), "state"), "live");

    children[0].kill().unwrap();
    children[0].wait().unwrap();
    assert_eq!(field(&written(&mut reader, now), author.row(), "liveness"), "gone");

    let released = reviewer.release().unwrap();
    assert_eq!(field(&written(&mut reader, now), &released, "status"), "released");

    let merger = worker(&location, &launch, Namespace::Merger, &children[2]);
    assert_eq!(field(&written(&mut reader, fleet_runtime::now()), merger.row(), "state"), "live");

    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop((author, merger));
}

/// A tracking session keeps the places of the rows it probes while only heartbeats
/// move, and still probes each of them at every snapshot: a worker whose process exits
/// while another worker's heartbeat moved is seen gone, and a worker added is probed.
#[test]
fn a_tracking_session_probes_its_workers_while_only_heartbeats_move() {
    use fleet_identity::Namespace;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("registry.sqlite3");
    let location = RegistryLocation::Sqlite(path.clone());
    let (launch, mut children) = launch_with_sleepers(&location);
    let author = worker(&location, &launch, Namespace::Author, &children[0]);
    let reviewer = worker(&location, &launch, Namespace::Reviewer, &children[1]);
    let other = rusqlite::Connection::open(&path).unwrap();
    let beat = |row: &fleet_registry::WorkerRow| {
        let sql = "UPDATE worker_registrations SET last_heartbeat_at = ?1 WHERE worker_identity = ?2";
        let now = fleet_runtime::now().to_string();
        assert_eq!(other.execute(sql, [now.as_str(), row.worker_identity.as_str()]).unwrap(), 1);
    };
    let mut reader = Fleet::new(location.clone()).tracking_processes();
    let first = written(&mut reader, fleet_runtime::now());
    assert_eq!(field(&first, reviewer.row(), "liveness"), "alive");

    beat(author.row());
    let moved = written(&mut reader, fleet_runtime::now());
    assert_eq!(field(&moved, reviewer.row(), "liveness"), "alive");
    children[1].kill().unwrap();
    children[1].wait().unwrap();
    beat(author.row());
    let after = written(&mut reader, fleet_runtime::now());
    assert_eq!(field(&after, reviewer.row(), "liveness"), "gone", "probed though only a heartbeat moved");
    assert_eq!(field(&after, author.row(), "liveness"), "alive");

    let merger = worker(&location, &launch, Namespace::Merger, &children[2]);
    children[2].kill().unwrap();
    children[2].wait().unwrap();
    let added = written(&mut reader, fleet_runtime::now());
    assert_eq!(field(&added, merger.row(), "liveness"), "gone", "a worker added is probed");
    for (row, liveness) in [(author.row(), "alive"), (reviewer.row(), "gone")] {
        assert_eq!(field(&added, row, "liveness"), liveness, "each worker probed where it now is");
    }

    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    drop((author, reviewer, merger));
}

/// A row added before the others moves them all one place on; rows judged alike (the
/// same heartbeat, no process to probe) still each get their own JSON.
#[test]
fn kept_worker_json_follows_rows_that_move() {
    let dir = tempfile::tempdir().unwrap();
    let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
    create(&location, &["wkr-b", "wkr-c"]);
    let mut reader = Fleet::new(location.clone());
    let at = fleet_identity::Timestamp::parse("2026-07-30T12:00:10Z").unwrap();
    let before = written(&mut reader, at);
    open_registry(&location, OpenMode::MustExist).unwrap().import(&dump(&["wkr-a"])).unwrap();
    let after = written(&mut reader, at);
    let names = |s: &serde_json::Value| -> Vec<serde_json::Value> {
        s["workers"].as_array().unwrap().iter().map(|w| w["worker_identity"].clone()).collect()
    };
    assert_eq!(names(&before), ["wkr-b", "wkr-c"]);
    assert_eq!(names(&after), ["wkr-a", "wkr-b", "wkr-c"]);
}

/// The snapshot a fresh session takes of `location` at `at`, as JSON.
fn fresh_snapshot(location: &RegistryLocation, at: fleet_identity::Timestamp) -> serde_json::Value {
    let policy = fleet_snapshot::Policy::default();
    fleet_runtime::take_snapshot(location, None, &policy, at, |snap| serde_json::to_value(snap).unwrap())
        .unwrap()
}

/// `secs` seconds past 2026-07-30T12:00:00Z, when the rows of [`dump`] heartbeat.
fn at(secs: i64) -> fleet_identity::Timestamp {
    fleet_identity::Timestamp::parse("2026-07-30T12:00:00Z")
        .unwrap()
        .saturating_add(time::Duration::seconds(secs))
}

/// A session says a snapshot is unchanged only when a fresh one would say the same,
/// and gives the time and token that fresh one carries; a write, a lapsing heartbeat,
/// another policy or a manifest make it classify again.
#[test]
fn an_unchanged_snapshot_is_one_a_fresh_session_would_take_and_every_change_classifies_again() {
    use fleet_runtime::Taken;
    let dir = tempfile::tempdir().unwrap();
    let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
    create(&location, &["wkr-a", "wkr-b"]);
    let policy = fleet_snapshot::Policy::default();
    let mut fleet = Fleet::new(location.clone());
    let take = |fleet: &mut Fleet, secs: i64, policy: &fleet_snapshot::Policy| match fleet
        .json_snapshot_or_unchanged(None, policy, at(secs))
        .unwrap()
    {
        Taken::Fresh(number, taken) => (number, Some(serde_json::to_value(&taken.snapshot).unwrap()), None),
        Taken::Unchanged { number, snapshot_at, consistency_token, .. } => {
            (number, None, Some((snapshot_at, consistency_token)))
        }
    };

    let (first, whole, _) = take(&mut fleet, 1, &policy);
    assert_eq!(whole.unwrap()["counts"]["live_worker_count"], 2);
    // Later, before any heartbeat lapses (at 30 s): unchanged, with the time and token a
    // fresh session gives.
    let (number, whole, kept) = take(&mut fleet, 20, &policy);
    assert_eq!((number, whole), (first, None));
    let (snapshot_at, token) = kept.unwrap();
    let fresh = fresh_snapshot(&location, at(20));
    assert_eq!(serde_json::to_value(snapshot_at).unwrap(), fresh["snapshot_at"]);
    assert_eq!(token, fresh["consistency_token"].as_str().unwrap());
    // A whole snapshot taken meanwhile judges every row alike: it keeps the number.
    assert_eq!(fleet.numbered_json_snapshot(None, &policy, at(21)).unwrap().0, first);
    assert_eq!(take(&mut fleet, 22, &policy).0, first);
    // The last instant before the heartbeats lapse is still the same; just past it is not.
    assert!(take(&mut fleet, 30, &policy).2.is_some(), "at the expiry itself nothing has lapsed");
    let (after, whole, _) = take(&mut fleet, 31, &policy);
    assert_ne!(after, first);
    assert_eq!(whole.unwrap()["counts"]["stale_worker_count"], 2, "lapsed: classified again");
    assert!(take(&mut fleet, 40, &policy).2.is_some(), "stale stays stale");
    // Another connection writes: classified again.
    open_registry(&location, OpenMode::MustExist).unwrap().import(&dump(&["wkr-c"])).unwrap();
    let (_, whole, _) = take(&mut fleet, 41, &policy);
    assert_eq!(whole.unwrap()["counts"]["total_rows"], 3);
    // Another policy, or a clock that went back: classified again.
    let other = fleet_snapshot::Policy { expected_code_revision: Some("9.9.9".into()), ..Default::default() };
    assert!(take(&mut fleet, 42, &other).1.is_some());
    assert!(take(&mut fleet, 43, &other).1.is_none());
    assert!(take(&mut fleet, 41, &other).1.is_some(), "a clock that went back");
    // A manifest is always classified with.
    let manifest = fleet_snapshot::Manifest::from_json(r#"{"instances": []}"#).unwrap();
    assert!(matches!(
        fleet.json_snapshot_or_unchanged(Some(&manifest), &other, at(44)).unwrap(),
        Taken::Fresh(..)
    ));
}

/// A heartbeat of a worker that was live and stays live changes no verdict: the session
/// answers "unchanged" with the token and the moved worker's view a fresh session gives.
/// A heartbeat of a stale worker, one from beyond the believable future, one that
/// lapses, or any other change classifies again.
#[test]
fn a_heartbeat_of_a_live_worker_leaves_the_verdicts_standing_with_its_view_moved() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("registry.sqlite3");
    // Another process writes: the worker's heartbeat, or another column.
    heartbeats_are_followed(&RegistryLocation::Sqlite(file.clone()), &|name, column, value| {
        let db = rusqlite::Connection::open(&file).unwrap();
        let sql = format!("UPDATE worker_registrations SET {column} = ?1 WHERE worker_identity = ?2");
        assert_eq!(db.execute(&sql, [value, name]).unwrap(), 1);
    });
}

/// The same on PostgreSQL (`FLEET_TEST_POSTGRES_URL`; CI sets it), which keeps no
/// history of changes: the rows are read whole and compared with those kept.
#[test]
fn a_heartbeat_of_a_live_worker_leaves_the_verdicts_standing_on_postgres() {
    let Some(base) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("fleet_reader_beats_{}", std::process::id());
    let admin = std::cell::RefCell::new(
        postgres::Client::connect(&base, postgres::NoTls).expect("the test PostgreSQL server"),
    );
    admin
        .borrow_mut()
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"))
        .unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let location = RegistryLocation::Postgres(format!("{base}{sep}options=-csearch_path%3D{schema}"));
    heartbeats_are_followed(&location, &|name, column, value| {
        let sql =
            format!("UPDATE {schema}.worker_registrations SET {column} = $1 WHERE worker_identity = $2");
        assert_eq!(admin.borrow_mut().execute(&sql, &[&value, &name]).unwrap(), 1);
    });
    admin.borrow_mut().batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}

/// Registers two workers at `location`, then heartbeats and other writes by `write`
/// (worker, column, value), each followed by a snapshot of one session.
fn heartbeats_are_followed(location: &RegistryLocation, write: &dyn Fn(&str, &str, &str)) {
    use fleet_runtime::Taken;
    create(location, &["wkr-a", "wkr-b"]);
    let beat = |name: &str, when: &str| write(name, "last_heartbeat_at", when);
    let policy = fleet_snapshot::Policy::default();
    let mut fleet = Fleet::new(location.clone());
    let location = location.clone();
    // (number, fresh?, token, the moved workers' views as JSON)
    let mut take = |secs: i64| match fleet.json_snapshot_or_unchanged(None, &policy, at(secs)).unwrap() {
        Taken::Fresh(number, _) => (number, true, String::new(), Vec::new()),
        Taken::Unchanged { number, consistency_token, moved, .. } => {
            let views: Vec<serde_json::Value> =
                moved.views().map(|v| serde_json::to_value(v).unwrap()).collect();
            for view in &views {
                let id = view["worker_identity"].as_str().unwrap();
                assert_eq!(serde_json::to_value(moved.view(id)).unwrap(), *view);
            }
            (number, false, consistency_token, views)
        }
    };
    let (first, fresh, ..) = take(1);
    assert!(fresh);
    beat("wkr-a", "2026-07-30T12:00:15Z");
    let (number, fresh, token, moved) = take(20);
    assert_eq!((number, fresh), (first, false), "a live worker's heartbeat: unchanged");
    let whole = fresh_snapshot(&location, at(20));
    assert_eq!(token, whole["consistency_token"].as_str().unwrap());
    assert_eq!(moved, [whole["workers"][0].clone()], "wkr-a as a fresh session sees it");
    assert_eq!(whole["workers"][0]["expires_at"], "2026-07-30T12:00:45.000Z");
    beat("wkr-a", "2026-07-30T12:00:25Z");
    let (number, fresh, _, moved) = take(29);
    assert_eq!((number, fresh), (first, false), "heartbeats go on");
    assert_eq!(moved[0]["last_heartbeat_at"], "2026-07-30T12:00:25Z");
    // wkr-b's heartbeat (at 0 s) lapses past 30 s: classified again.
    let (lapsed, fresh, ..) = take(31);
    assert!(fresh && lapsed != first);
    assert_eq!(fresh_snapshot(&location, at(31))["counts"]["stale_worker_count"], 1);
    // A heartbeat of the stale worker brings it back: classified again.
    beat("wkr-b", "2026-07-30T12:00:32Z");
    let (back, fresh, ..) = take(33);
    assert!(fresh && back != lapsed, "a stale worker's heartbeat");
    // A heartbeat from beyond the believable future vouches for nothing.
    beat("wkr-a", "2026-07-30T12:30:00Z");
    let (ahead, fresh, ..) = take(34);
    assert!(fresh && ahead != back, "a heartbeat from the future");
    beat("wkr-a", "2026-07-30T12:00:35Z");
    let (again, fresh, ..) = take(36);
    assert!(fresh && again != ahead);
    // Anything but a heartbeat: classified again.
    write("wkr-a", "session_id", "sess-other");
    assert!(take(37).1, "another column");
    assert!(!take(38).1);
}

/// A long-lived reader whose read waits out `lock_timeout` on a table another session
/// has locked says busy once, on the connection it has: a fresh connection would only
/// wait for the same lock again (twice the bound). On PostgreSQL
/// (`FLEET_TEST_POSTGRES_URL`; CI sets it).
#[test]
fn a_read_blocked_by_a_table_lock_fails_busy_once_on_its_own_connection() {
    let Some(base) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!("fleet_reader_lock_{}", std::process::id());
    let app = format!("fleet_reader_lock_{}", std::process::id());
    let mut admin = postgres::Client::connect(&base, postgres::NoTls).expect("the test PostgreSQL server");
    admin.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")).unwrap();
    let sep = if base.contains('?') { '&' } else { '?' };
    let location = RegistryLocation::Postgres(format!(
        "{base}{sep}options=-csearch_path%3D{schema}%20-clock_timeout%3D1s&application_name={app}"
    ));
    create(&location, &["wkr-a"]);
    let mut reader = Fleet::new(location);
    assert_eq!(identities(&mut reader), ["wkr-a"]);
    let backend = |admin: &mut postgres::Client| -> Vec<i32> {
        let rows =
            admin.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1", &[&app]).unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    };
    let before = backend(&mut admin);
    assert_eq!(before.len(), 1, "the reader's one connection");

    let mut locker = postgres::Client::connect(&base, postgres::NoTls).unwrap();
    let mut lock = locker.transaction().unwrap();
    lock.batch_execute(&format!("LOCK TABLE {schema}.worker_registrations IN ACCESS EXCLUSIVE MODE"))
        .unwrap();
    let busy = reader.dump().expect_err("the table is locked");
    assert_eq!(busy.kind(), fleet_registry::StoreErrorKind::Busy, "{busy}");
    assert_eq!(backend(&mut admin), before, "the same connection, not a second wait on a fresh one");
    lock.rollback().unwrap();

    assert_eq!(identities(&mut reader), ["wkr-a"], "read again once the lock is gone");
    drop(reader);
    admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).unwrap();
}

/// A heartbeat from further ahead than the fleet's clock skew vouches for nothing until
/// `now` comes within the skew of it: from that instant the row is live, and a session
/// classifies again rather than answer "unchanged".
#[test]
fn a_heartbeat_from_the_future_is_believed_from_the_instant_it_comes_within_the_skew() {
    use fleet_runtime::Taken;
    let dir = tempfile::tempdir().unwrap();
    let location = RegistryLocation::Sqlite(dir.path().join("registry.sqlite3"));
    let mut ahead = dump(&["wkr-ahead"]);
    // Ten minutes ahead of 12:00:00; the skew believed is five.
    ahead.worker_registrations[0].last_heartbeat_at = Some("2026-07-30T12:10:00Z".into());
    ahead.worker_registrations[0].heartbeat_ttl_s = Some(3600);
    open_registry(&location, OpenMode::CreateIfMissing).unwrap().import(&ahead).unwrap();
    let at = |secs: i64| {
        fleet_identity::Timestamp::parse("2026-07-30T12:00:00Z")
            .unwrap()
            .saturating_add(time::Duration::milliseconds(secs))
    };
    let policy = fleet_snapshot::Policy::default();
    let mut fleet = Fleet::new(location);
    let live = |fleet: &mut Fleet, millis: i64| match fleet
        .json_snapshot_or_unchanged(None, &policy, at(millis))
        .unwrap()
    {
        Taken::Fresh(_, taken) => Some(taken.snapshot.counts.live_worker_count),
        Taken::Unchanged { .. } => None,
    };
    assert_eq!(live(&mut fleet, 0), Some(0), "from the future: stale");
    assert_eq!(live(&mut fleet, 299_999), None, "a millisecond before it is believed: unchanged");
    assert_eq!(live(&mut fleet, 300_000), Some(1), "within the skew: live, classified again");
}
