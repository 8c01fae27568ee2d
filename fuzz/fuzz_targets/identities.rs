//! Instance and worker identities from any bytes: parse never panics, and whatever
//! parses prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(id) = fleet_identity::ClientInstanceId::parse(text) {
        assert_eq!(fleet_identity::ClientInstanceId::parse(id.as_str()).ok(), Some(id.clone()));
    }
    let _ = fleet_identity::WorkerIdentity::new(text);
    let _ = fleet_identity::InstanceClaim::read(Some(text));
    let _ = fleet_identity::PidNamespace::from_link(text);
    let _ = fleet_identity::Timestamp::parse(text);
});
