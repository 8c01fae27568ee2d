//! Checks of the codebase itself: pure crates stay pure, every module says what it is for.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

const PURE: [&str; 4] = ["fleet-identity", "fleet-snapshot", "fleet-retirement", "fleet-lease"];

#[test]
fn pure_crates_use_no_database_runtime_clock_or_environment() {
    for krate in PURE {
        let dir = root().join("crates").join(krate);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dev-dependencies]").next().unwrap();
        for forbidden in ["rusqlite", "postgres", "tokio", "registry-sqlite", "getrandom"] {
            assert!(!deps.contains(forbidden), "{krate} depends on {forbidden}");
        }
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for forbidden in [
                "SystemTime::now",
                "OffsetDateTime::now",
                "Instant::now",
                "std::env::",
                "std::fs::",
                "getrandom",
            ] {
                assert!(!text.contains(forbidden), "{} uses {forbidden}", file.display());
            }
        }
    }
}

#[test]
fn every_module_starts_with_a_doc_comment() {
    let mut files = Vec::new();
    for top in ["crates", "bins"] {
        for krate in std::fs::read_dir(root().join(top)).unwrap().map(Result::unwrap) {
            let src = krate.path().join("src");
            if src.exists() {
                rust_files(&src, &mut files);
            }
        }
    }
    assert!(files.len() > 20);
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
        assert!(first.starts_with("//!"), "{} does not start with a //! line", file.display());
    }
}
