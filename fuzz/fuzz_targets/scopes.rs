//! Connector scopes and identities from the command line and policy files.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let parts: Vec<String> = text.split('\n').map(str::to_owned).collect();
    if let Ok(scopes) = fleet_lease::normalize_scopes(&parts) {
        assert_eq!(fleet_lease::normalize_scopes(&scopes).ok(), Some(scopes.clone()), "normalizing is idempotent");
    }
    let mut it = text.splitn(3, '/');
    let (a, b, c) = (it.next().unwrap_or(""), it.next().unwrap_or(""), it.next().unwrap_or(""));
    let _ = fleet_lease::ConnectorIdentity::new(a, b, c);
    let _ = fleet_lease::LeaseKey::new(text);
});
