//! `fleetctl registry import` files: any bytes are read or refused, never a panic; a
//! dump that reads writes back to JSON that reads to the same dump; and the snapshot of
//! what was read never panics either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(dump) = fleet_model::RegistryDump::from_json(text) else { return };
    let again = fleet_model::RegistryDump::from_json(&dump.to_json()).expect("a written dump reads back");
    assert_eq!(again, dump);
    let now = fleet_identity::Timestamp::from_unix_millis(1_785_412_800_000).expect("a time");
    let _ = fleet_snapshot::snapshot(fleet_snapshot::SnapshotInput {
        rows: &dump.worker_registrations,
        ledger: &dump.instances,
        manifest: None,
        probes: &fleet_snapshot::ProbeResults::new(),
        policy: &fleet_snapshot::Policy::default(),
        now,
    });
});
