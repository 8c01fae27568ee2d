//! The registry conformance suite against real SQLite files.

use fleet_registry::OpenMode;
use registry_sqlite::SqliteStore;

fn fresh() -> SqliteStore {
    // Each store gets its own directory, kept alive for the process (tests are short).
    let dir = tempfile::tempdir().expect("tempdir").keep();
    SqliteStore::open(&dir.join("registry.sqlite3"), OpenMode::CreateIfMissing).expect("open")
}

fleet_registry::registry_conformance!(crate::fresh());
