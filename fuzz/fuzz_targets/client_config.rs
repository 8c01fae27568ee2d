//! The agent clients' config writers (`fleet-launch install|uninstall`) over any file a
//! user may already have.
#![no_main]

#[path = "../checks_clients.rs"]
mod checks_clients;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((client, existing)) = checks_clients::split(data) {
        checks_clients::client_config(client, existing);
    }
});
