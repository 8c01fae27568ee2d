//! `profiles.json`, which grants the MCP server's capabilities (`--profiles FILE`).
#![no_main]

#[path = "../checks_mcp.rs"]
mod checks_mcp;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        checks_mcp::profiles(text);
    }
});
