//! Two hosts on one machine, sharing one PostgreSQL registry over a network link (each
//! played as `common::netns` says). Each host runs a launch of five workers.
//!
//! Cutting host A's link (its veth taken down) must leave host B honest: B's plan
//! preserves A's lapsed rows as `host_binding_unproven` and retires none; a lease A held
//! is taken over by B once its TTL passes; and when the link heals, A's next operation
//! on that lease is refused as `stale_epoch` in the audit log.
//!
//! Needs root (namespaces, veth) and `FLEET_TEST_POSTGRES_URL` on 127.0.0.1; skips,
//! saying why, where either is missing. `.ci/run` on these machines runs it.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::netns::NetHost;
use common::{Schema, base_url, fleetctl_bin, sibling_bin, wait_for};

/// `fleetctl args` run on `host`.
fn fleetctl(host: &NetHost, schema: &Schema, args: &[&str]) -> std::process::Output {
    host.command(&fleetctl_bin(), &schema.url()).args(args).output().unwrap()
}

/// Mints an instance on `host` and starts its five workers.
fn launch(host: &mut NetHost, schema: &Schema) {
    let out = host
        .command(&sibling_bin("fleet-launch"), &schema.url())
        .args(["mint", "--client", "codex"])
        .output();
    let out = out.unwrap();
    assert!(out.status.success(), "{}: {}", host.name, String::from_utf8_lossy(&out.stderr));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    for namespace in ["author", "reviewer", "merger", "controller", "reconciler"] {
        let child = host
            .command(&sibling_bin("fleet-mcp"), &schema.url())
            .args(["--namespace", namespace, "--ttl", "2"])
            .env("GITEA_MCP_CLIENT", "codex")
            .env("GITEA_MCP_CLIENT_INSTANCE", &id)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        host.keep(child);
    }
}

fn json(out: &std::process::Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_cut_host_is_neither_retired_nor_left_holding_authority() {
    let Some(base) = base_url() else {
        eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
        return;
    };
    if !base.contains("@127.0.0.1:") {
        eprintln!("skipped: the relay reaches the registry server only on 127.0.0.1");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(mut a) = NetHost::new("host-a", 1, dir.path()) else {
        eprintln!("skipped: this machine cannot create network namespaces and veth pairs (needs root)");
        return;
    };
    let Some(mut b) = NetHost::new("host-b", 2, dir.path()) else {
        eprintln!("skipped: this machine cannot create network namespaces and veth pairs (needs root)");
        return;
    };
    let schema = Schema::new(&base);
    let here = |args: &[&str]| {
        let mut cmd = Command::new(fleetctl_bin());
        cmd.env("FLEET_REGISTRY", schema.url()).args(args);
        cmd.output().unwrap()
    };
    assert!(here(&["registry", "init"]).status.success());
    a.relay();
    b.relay();
    launch(&mut a, &schema);
    launch(&mut b, &schema);

    // Ten live workers, five from each host, each row naming its host.
    let host_of = |snapshot: &serde_json::Value, worker: &str| {
        snapshot["workers"].as_array().unwrap().iter().find(|w| w["worker_identity"] == worker).unwrap()["host_id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let snapshot = wait_for(Duration::from_secs(20), || {
        let snap = json(&here(&["snapshot", "--json"]));
        (snap["counts"]["live_worker_count"] == 10).then_some(snap)
    });
    let rows_of = |host: char| -> Vec<String> {
        snapshot["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["worker_identity"].as_str().unwrap().to_owned())
            .filter(|w| host_of(&snapshot, w).starts_with(host))
            .collect()
    };
    let (rows_a, rows_b) = (rows_of('b'), rows_of('c'));
    assert_eq!((rows_a.len(), rows_b.len()), (5, 5), "{snapshot}");

    // Host A holds a lease with a short TTL.
    let lease = json(&fleetctl(
        &a,
        &schema,
        &["lease", "acquire", "--key", "workflow:two-hosts", "--owner", "host-a", "--ttl", "2", "--json"],
    ));
    let lease = &lease["lease"];
    let (lease_id, epoch) =
        (lease["lease_id"].as_str().unwrap().to_owned(), lease["fencing_epoch"].as_u64().unwrap());

    // Cut host A off, and let its heartbeats and its lease lapse.
    a.set_link("down");
    std::thread::sleep(Duration::from_millis(3500));

    // Host B plans: A's rows are preserved because B cannot speak for A's host.
    let plan = json(&fleetctl(&b, &schema, &["retire", "plan", "--json"]));
    assert_eq!(plan["candidate_count"], 0, "{plan}");
    let reasons_a: Vec<&str> = plan["preserved"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| rows_a.iter().any(|r| p["worker_identity"] == r.as_str()))
        .map(|p| p["reason_code"].as_str().unwrap())
        .collect();
    assert_eq!(reasons_a, ["host_binding_unproven"; 5], "{plan}");
    // B takes the lapsed lease over, at a higher epoch.
    let taken = json(&fleetctl(
        &b,
        &schema,
        &["lease", "acquire", "--key", "workflow:two-hosts", "--owner", "host-b", "--ttl", "30", "--json"],
    ));
    assert!(taken["lease"]["fencing_epoch"].as_u64().unwrap() > epoch, "{taken}");
    assert_eq!(taken["lease"]["owner"], "host-b", "{taken}");

    // The link heals: A's next operation on its old lease is refused.
    a.set_link("up");
    let epoch_text = epoch.to_string();
    let renew = fleetctl(
        &a,
        &schema,
        &[
            "lease",
            "renew",
            "--key",
            "workflow:two-hosts",
            "--owner",
            "host-a",
            "--lease-id",
            &lease_id,
            "--epoch",
            &epoch_text,
            "--ttl",
            "2",
        ],
    );
    assert_eq!(renew.status.code(), Some(1), "{}", String::from_utf8_lossy(&renew.stderr));
    let audit = json(&here(&["lease", "audit", "--key", "workflow:two-hosts", "--json"]));
    let last = audit.as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (
            last["event"].as_str(),
            last["outcome"].as_str(),
            last["reason"].as_str(),
            last["identity"].as_str()
        ),
        (Some("renew"), Some("denied"), Some("stale_epoch"), Some("host-a")),
        "{audit}"
    );
    // Nothing of A's was retired while it was cut off.
    let snapshot = json(&here(&["snapshot", "--json"]));
    for worker in snapshot["workers"].as_array().unwrap() {
        if rows_a.iter().any(|r| r == worker["worker_identity"].as_str().unwrap()) {
            assert_eq!(worker["status"], "active", "{worker}");
        }
    }
    let _ = std::io::stderr().flush();
}
