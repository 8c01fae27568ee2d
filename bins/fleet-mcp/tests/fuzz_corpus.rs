//! The `profiles` and `tool_arguments` fuzz targets' checks (`fuzz/checks_mcp.rs`) over
//! every kept input in `fixtures/fuzz/`: the seeds, and any crash a fuzzing run found.

#[path = "../../../fuzz/checks_mcp.rs"]
#[allow(unreachable_pub)]
mod checks_mcp;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/fuzz").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files.into_iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn every_kept_profiles_file_reads_and_round_trips() {
    for input in inputs("profiles") {
        if let Ok(text) = std::str::from_utf8(&input) {
            checks_mcp::profiles(text);
        }
    }
}

#[test]
fn every_kept_tool_call_is_checked_without_panicking() {
    for input in inputs("tool_arguments") {
        checks_mcp::tool_arguments(&input);
    }
}
