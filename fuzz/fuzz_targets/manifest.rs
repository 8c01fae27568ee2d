//! Approved manifests (`snapshot --manifest FILE`, the MCP `expected_manifest`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = fleet_snapshot::Manifest::from_json(text);
});
