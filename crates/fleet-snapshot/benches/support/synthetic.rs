//! A synthetic fleet for benchmarks and memory measurements: `launches` launches of five
//! workers each, one row in ten historical and one in fifty stale.

use fleet_identity::{ClientInstanceId, ClientType, Namespace, Timestamp};
use fleet_model::{InstanceRecord, OwnershipState, WorkerRow, WorkerStatus};

/// `2026-07-30T12:00:00Z`, in seconds since the epoch.
const BASE: i64 = 1_785_412_800;

/// The rows and ledger of a synthetic fleet of `rows` rows, and the `now` to judge it at.
#[allow(dead_code)] // Not every target that includes this file uses both entry points.
pub(crate) fn fleet(rows: usize) -> (Vec<WorkerRow>, Vec<InstanceRecord>, Timestamp) {
    fleet_at(rows, BASE, 30)
}

/// The same fleet, minted at `base` (seconds since the epoch): fresh heartbeats beat at
/// `base + 1000` with a TTL of `ttl_s`, and the `now` returned is `base + 1010`.
pub(crate) fn fleet_at(
    rows: usize,
    base: i64,
    ttl_s: u32,
) -> (Vec<WorkerRow>, Vec<InstanceRecord>, Timestamp) {
    let at = |secs: i64| Timestamp::from_unix_millis((base + secs) * 1000).expect("in range");
    let client = ClientType::new("codex").expect("valid");
    let mut out = Vec::with_capacity(rows);
    let mut ledger = Vec::new();
    for i in 0..rows {
        let launch = i / 5;
        let ns = Namespace::ALL[i % 5];
        if i % 5 == 0 {
            let random = u64::try_from(launch).unwrap_or(0).to_be_bytes();
            let digest = [random[2], random[3], random[4], random[5], random[6], random[7]];
            if let Ok(id) = ClientInstanceId::mint(&client, at(0).get(), digest) {
                ledger.push(InstanceRecord {
                    client_instance_id: id,
                    client_type: client.clone(),
                    fleet_run_id: None,
                    minted_at: at(0),
                    host_id: None,
                });
            }
        }
        let instance = ledger.last().map(|r| r.client_instance_id.to_string());
        let status = if i % 10 == 9 { WorkerStatus::Released } else { WorkerStatus::Active };
        let beat = if i % 50 == 7 { at(10) } else { at(1000) };
        let row = WorkerRow {
            worker_identity: format!("wkr-{ns}-{i:08}").parse().expect("valid"),
            client_type: Some(client.clone()),
            client_instance_id: instance,
            instance_provenance: Some("trusted_launcher".into()),
            fleet_run_id: None,
            namespace: ns,
            profile: None,
            session_id: format!("sess-{launch}").parse().ok(),
            generation_id: format!("gen-{i}").parse().ok(),
            host_id: "0123456789abcdef0123456789abcdef".parse().ok(),
            boot_id: "11111111-2222-3333-4444-555555555555".parse().ok(),
            pid: fleet_identity::Pid::new(i64::try_from(i % 4_000_000).unwrap_or(0) + 1).ok(),
            process_start_time: fleet_identity::ProcessStartTime::new(u64::try_from(i).unwrap_or(0)).ok(),
            repository: "/srv/repo".parse().ok(),
            status,
            ownership_state: Some(OwnershipState::Owned),
            registered_at: at(0),
            last_heartbeat_at: Some(beat.to_string()),
            heartbeat_ttl_s: Some(ttl_s),
            fencing_epoch: Some(1),
            token_fingerprint: Some(format!("b3:{i:032x}")),
            code_revision: Some("0.1.0".into()),
            config_revision: None,
            profile_revision: None,
            schema_revision: Some("1".into()),
            retired_at: None,
            retired_by: None,
            retirement_reason: None,
            pid_namespace: None,
        };
        out.push(row);
    }
    (out, ledger, at(1010))
}
