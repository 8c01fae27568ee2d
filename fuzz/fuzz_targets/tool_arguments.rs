//! The arguments of every MCP tool call, checked before the tool runs.
#![no_main]

#[path = "../checks_mcp.rs"]
mod checks_mcp;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks_mcp::tool_arguments(data);
});
