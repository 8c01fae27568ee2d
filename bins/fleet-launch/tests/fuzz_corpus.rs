//! The `client_config` fuzz target's checks (`fuzz/checks_clients.rs`) over every kept
//! input in `fixtures/fuzz/client_config/`: the seeds, and any crash a fuzzing run found.

#[path = "../../../fuzz/checks_clients.rs"]
#[allow(unreachable_pub)]
mod checks_clients;

#[test]
fn every_kept_config_installs_and_uninstalls_idempotently() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz/client_config");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    for path in files {
        let bytes = std::fs::read(&path).unwrap();
        if let Some((client, existing)) = checks_clients::split(&bytes) {
            checks_clients::client_config(client, existing);
        }
    }
}
