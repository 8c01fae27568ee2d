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

/// Whether two config files say the same: for the JSON clients the same value (JSONC
/// parsed, comments and layout aside), for Codex the same text.
fn same(client: AgentClient, a: &str, b: &str) -> bool {
    if client == AgentClient::Codex {
        return a == b;
    }
    let options = jsonc_parser::ParseOptions::default();
    match (jsonc_parser::parse_to_value(a, &options), jsonc_parser::parse_to_value(b, &options)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Whatever file a user has, installing and uninstalling never panic; installing twice
/// changes nothing the second time, and neither does uninstalling twice. (The JSON
/// clients are compared by value: the CST writer may re-indent entries it inserted into
/// a new object on the second pass.)
pub fn client_config(client: AgentClient, existing: &str) {
    let path = Path::new("config");
    let Ok(merged) = merge(client, "/usr/bin/fleet-mcp", existing, path) else {
        let _ = remove(client, existing, path);
        return;
    };
    let again = merge(client, "/usr/bin/fleet-mcp", &merged, path).expect("a written config merges again");
    assert!(same(client, &again, &merged), "installing twice changes nothing:\n{merged}\n---\n{again}");
    let removed = remove(client, &merged, path).expect("a written config uninstalls");
    let twice = remove(client, &removed, path).expect("an uninstalled config uninstalls again");
    assert!(same(client, &twice, &removed), "uninstalling twice changes nothing:\n{removed}\n---\n{twice}");
}
