//! The MCP server's checks of outside input, shared by the `profiles` and
//! `tool_arguments` fuzz targets and the test that replays their kept inputs
//! (`bins/fleet-mcp/tests/fuzz_corpus.rs`).

/// The tools whose arguments are checked before the call.
const TOOLS: [&str; 6] = [
    "gitea_snapshot_instance_fleet",
    "gitea_plan_stale_worker_retirement",
    "gitea_apply_stale_worker_retirement",
    "gitea_acquire_workflow_lease",
    "gitea_renew_workflow_lease",
    "gitea_release_workflow_lease",
];

/// A profiles file: read or refused, never a panic; what reads writes back to the same
/// profiles.
pub fn profiles(text: &str) {
    let Ok(profiles) = fleet_mcp::profiles::parse(text) else { return };
    let written = serde_json::json!({ "profiles": profiles }).to_string();
    assert_eq!(fleet_mcp::profiles::parse(&written).ok(), Some(profiles), "round trip");
}

/// Tool arguments: the first byte picks the tool, the rest is the call's `arguments`.
/// Checking never panics; a refusal is the one JSON body, naming what was wrong.
pub fn tool_arguments(data: &[u8]) {
    let Some((first, rest)) = data.split_first() else { return };
    let tool = TOOLS[usize::from(*first) % TOOLS.len()];
    let Ok(serde_json::Value::Object(arguments)) = serde_json::from_slice::<serde_json::Value>(rest) else {
        return;
    };
    if let Err(refusal) = fleet_mcp::server::check_arguments(tool, Some(&arguments)) {
        let body = refusal.structured_content.expect("a refusal carries its JSON body");
        assert_eq!(body["error"], "invalid_arguments", "{body}");
        assert!(body["detail"]["message"].is_string(), "{body}");
    }
}
