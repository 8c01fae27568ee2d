//! The client-config writers' checks, shared by the `client_config` fuzz target and the
//! test that replays its kept inputs (`bins/fleet-launch/tests/fuzz_corpus.rs`).

use std::path::Path;

use fleet_launch::clients::{merge, remove};
use fleet_runtime::AgentClient;

/// The client an input is for: its first byte picks one, the rest is the config file.
pub fn split(data: &[u8]) -> Option<(AgentClient, &str)> {
    let (first, rest) = data.split_first()?;
    let clients = [
        AgentClient::Codex,
        AgentClient::ClaudeCode,
        AgentClient::Cursor,
        AgentClient::Gemini,
        AgentClient::Vscode,
    ];
    Some((clients[usize::from(*first) % clients.len()], std::str::from_utf8(rest).ok()?))
}

/// Whatever file a user has, installing and uninstalling never panic; installing twice
/// changes nothing the second time, and neither does uninstalling twice.
pub fn client_config(client: AgentClient, existing: &str) {
    let path = Path::new("config");
    let Ok(merged) = merge(client, "/usr/bin/fleet-mcp", existing, path) else {
        let _ = remove(client, existing, path);
        return;
    };
    let again = merge(client, "/usr/bin/fleet-mcp", &merged, path).expect("a written config merges again");
    assert_eq!(again, merged, "installing twice changes nothing");
    let removed = remove(client, &merged, path).expect("a written config uninstalls");
    let twice = remove(client, &removed, path).expect("an uninstalled config uninstalls again");
    assert_eq!(twice, removed, "uninstalling twice changes nothing");
}
