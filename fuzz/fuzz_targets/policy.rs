//! Connector policy files (`fleetctl lease … --policy FILE`, `connector run --policy`).
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        checks::policy(text);
    }
});
