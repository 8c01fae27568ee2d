//! Tables on a real terminal: `worker list` on an 80-column pseudo-terminal fits it,
//! one line per row, with wide identities abbreviated; piped, it prints them whole.
//! The terminal is util-linux `script(1)`, which runs the command on a new pty, sized
//! by `stty` (script(1), stty(1)).

mod common;

use std::process::Command;

use common::{Fleet, fleetctl_bin};

const INSTANCE: &str = "inst-codex-20260730T120000Z-0123456789ab";

fn fleet_with_wide_rows() -> Fleet {
    let fleet = Fleet::new();
    let rows: Vec<_> = ["author", "reviewer", "merger", "controller", "reconciler"]
        .iter()
        .enumerate()
        .map(|(i, ns)| {
            serde_json::json!({
                "worker_identity": format!("wkr-{ns}-0123456789abcdef0123456789abcdef-{i}"),
                "client_type": "codex", "client_instance_id": INSTANCE, "namespace": ns,
                "status": "active", "ownership_state": "owned", "pid": 4_000_000 + i,
                "registered_at": "2026-07-30T12:00:00Z", "last_heartbeat_at": "2026-07-30T12:00:00Z",
                "heartbeat_ttl_s": 30,
            })
        })
        .collect();
    let dump = serde_json::json!({
        "instances": [{"client_instance_id": INSTANCE, "client_type": "codex", "minted_at": "2026-07-30T12:00:00Z"}],
        "worker_registrations": rows,
    });
    let file = fleet.dir.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    let out = fleet.fleetctl().args(["registry", "import"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    fleet
}

#[test]
fn worker_list_fits_an_80_column_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: script(1) from util-linux is not installed");
        return;
    }
    let fleet = fleet_with_wide_rows();
    let command = format!("stty rows 24 cols 80; {} worker list", fleetctl_bin().display());
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("FLEET_REGISTRY", &fleet.registry)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 6, "a header and one line per worker: {text}");
    assert!(lines.iter().all(|l| l.chars().count() <= 80), "{text}");
    assert!(text.contains('…'), "wide identities are abbreviated: {text}");

    // Piped, nothing is cut: scripts get every value whole.
    let out = fleet.fleetctl().args(["worker", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(INSTANCE) && !text.contains('…'), "{text}");
}

/// `-o wide` prints every value whole even on an 80-column terminal, with the columns
/// the default table leaves out (kubectl's `-o wide`).
#[test]
fn wide_output_keeps_every_identity_whole_on_an_80_column_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        eprintln!("skipped: script(1) from util-linux is not installed");
        return;
    }
    let fleet = fleet_with_wide_rows();
    let command = format!("stty rows 24 cols 80; {} worker list -o wide", fleetctl_bin().display());
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .env("FLEET_REGISTRY", &fleet.registry)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(!text.contains('…'), "nothing abbreviated: {text}");
    assert!(text.contains(INSTANCE), "{text}");
    assert!(text.contains("wkr-controller-0123456789abcdef0123456789abcdef-3"), "{text}");
    assert!(text.lines().next().is_some_and(|h| h.contains("REGISTERED")), "{text}");
}
