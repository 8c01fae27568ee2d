//! `fleetctl registry import` files from any bytes (see `checks::registry_import`).
#![no_main]

#[path = "../checks.rs"]
#[allow(dead_code)]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        checks::registry_import(text);
    }
});
