//! A PostgreSQL server that stops answering in the middle of a session — a server
//! process stopped with SIGSTOP, or wedged, while its host's kernel still acknowledges
//! every byte — costs a call its deadline, not forever.
//!
//! The test plays that server with a proxy in front of the real one
//! (`FLEET_TEST_POSTGRES_URL`): it forwards both ways until told to stall, then keeps
//! reading what the client sends and forwards nothing, so the client's kernel sees its
//! bytes acknowledged, as with a stopped server, and no answer ever comes.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fleet_registry::{Registry, StoreErrorKind};
use registry_postgres::PostgresStore;

fn url() -> Option<String> {
    std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty())
}

/// Copies `from` to `to` until `stalled`, then swallows what `from` sends.
fn pump(mut from: TcpStream, mut to: TcpStream, stalled: Arc<AtomicBool>) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let Ok(n) = from.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        if !stalled.load(Ordering::SeqCst) && to.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A proxy on loopback to the server at `upstream` (host:port); returns its port.
fn proxy(upstream: String, stalled: Arc<AtomicBool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let Ok(server) = TcpStream::connect(&upstream) else { return };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (a, b) = (stalled.clone(), stalled.clone());
            std::thread::spawn(move || pump(client, server, a));
            std::thread::spawn(move || pump(s2, c2, b));
        }
    });
    port
}

/// `FLEET_TEST_POSTGRES_URL` pointed at `port`, with `statement_timeout` set to one
/// second, so the client's deadline is that plus its margin.
fn through(url: &str, port: u16) -> (String, String) {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        tokio_postgres::config::Host::Unix(_) => "127.0.0.1".into(),
    };
    let upstream = format!("{host}:{}", config.get_ports().first().copied().unwrap_or(5432));
    let user = config.get_user().unwrap_or("postgres");
    let db = config.get_dbname().unwrap_or("postgres");
    let proxied = format!(
        "postgres://{user}@127.0.0.1:{port}/{db}?sslmode=disable&options=-c%20statement_timeout%3D1s"
    );
    (proxied, upstream)
}

#[test]
fn a_server_that_stops_answering_mid_session_fails_the_call_within_its_deadline() {
    let Some(url) = url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    let stalled = Arc::new(AtomicBool::new(false));
    let (_, upstream) = through(&url, 0);
    let port = proxy(upstream, stalled.clone());
    let (proxied, _) = through(&url, port);
    let schema = format!("fleet_test_{}", uuid::Uuid::now_v7().simple());
    let mut registry = Registry::new(
        PostgresStore::connect_in_schema(&proxied, Some(&schema)).expect("connect through the proxy"),
    );
    assert!(registry.workers().expect("a read while the server answers").is_empty());

    stalled.store(true, Ordering::SeqCst);
    let (sent, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let first = registry.workers().map(|_| ());
        let second = registry.workers().map(|_| ());
        let _ = sent.send((first, second));
    });
    // The client gives up after statement_timeout (1 s) plus its margin; this bound only
    // keeps a regression from hanging the suite.
    let (first, second) = answer.recv_timeout(Duration::from_secs(120)).expect("the call came back");
    let first = first.expect_err("a stalled server gives no rows");
    assert_eq!(first.kind(), StoreErrorKind::Unavailable, "{first}");
    assert!(first.to_string().contains("did not answer within 6 s"), "{first}");
    // The connection is not used again: its late answer would be read as the next one.
    let second = second.expect_err("an abandoned connection is not used again");
    assert!(second.to_string().contains("dropped"), "{second}");

    if let Ok(mut client) = postgres::Client::connect(&url, postgres::NoTls) {
        let _ = client.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    }
}
