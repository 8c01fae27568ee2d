//! `fleet-launch install` and `uninstall` through the binary, against config files as
//! users keep them: other settings, their own servers, comments.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/clients").join(name);
    std::fs::read_to_string(path).unwrap()
}

fn launcher(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(args)
        .arg("--file")
        .arg(file)
        .args(["--server-command", "/opt/fleetward/bin/fleet-mcp"].iter().filter(|_| args[0] == "install"))
        .output()
        .unwrap()
}

fn install(client: &str, file: &Path) -> Output {
    launcher(&["install", "--client", client], file)
}

fn uninstall(client: &str, file: &Path) -> Output {
    launcher(&["uninstall", "--client", client], file)
}

fn written(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn codex_install_is_idempotent_and_keeps_the_users_settings_and_comments() {
    let dir = tempfile::tempdir().unwrap();
    let original = fixture("codex-config.toml");
    let file = written(&dir, "config.toml", &original);

    assert!(install("codex", &file).status.success());
    let once = std::fs::read_to_string(&file).unwrap();
    let doc: toml_edit::DocumentMut = once.parse().expect("valid TOML");
    assert_eq!(doc["model"].as_str(), Some("o4-mini"));
    assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("docs-mcp"));
    assert!(once.contains("# The team's documentation server."));
    let author = &doc["mcp_servers"]["gitea-author"];
    assert_eq!(author["command"].as_str(), Some("/opt/fleetward/bin/fleet-mcp"));
    let forwarded: Vec<&str> =
        author["env_vars"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert!(forwarded.contains(&"GITEA_MCP_CLIENT_INSTANCE") && forwarded.contains(&"FLEET_REGISTRY"));
    assert_eq!(author["env"]["GITEA_MCP_PROFILE"].as_str(), Some("author"));

    let again = install("codex", &file);
    assert!(String::from_utf8_lossy(&again.stdout).contains("unchanged"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), once, "a second install changes nothing");

    assert!(uninstall("codex", &file).status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "uninstall takes out only ours");
}

#[test]
fn json_installs_keep_every_other_key_and_comment() {
    let dir = tempfile::tempdir().unwrap();
    let original = fixture("vscode-mcp.jsonc");
    let file = written(&dir, "mcp.json", &original);
    assert!(install("vscode", &file).status.success());
    let once = std::fs::read_to_string(&file).unwrap();
    assert!(once.contains("// Servers for this workspace.") && once.contains("// remote"), "{once}");
    let plain: String = once
        .lines()
        .map(|l| l.split(" //").next().unwrap())
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let v: serde_json::Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(v["servers"]["github"]["type"], "http");
    let author = &v["servers"]["gitea-author"];
    assert_eq!(author["type"], "stdio");
    assert_eq!(author["env"]["GITEA_MCP_CLIENT_INSTANCE"], "${env:GITEA_MCP_CLIENT_INSTANCE}");
    assert!(install("vscode", &file).status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), once, "a second install changes nothing");
    assert!(uninstall("vscode", &file).status.success());
    let after = std::fs::read_to_string(&file).unwrap();
    assert!(
        !after.contains("gitea-") && after.contains("// remote") && after.contains("\"github\""),
        "{after}"
    );
}

#[test]
fn an_entry_of_our_name_that_runs_something_else_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let original = fixture("claude.json");
    let file = written(&dir, ".claude.json", &original);
    let out = install("claude_code", &file);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("gitea-author already runs \"my-own-gitea-author\""), "{stderr}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "a refused install writes nothing");
    let out = uninstall("claude_code", &file);
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original, "uninstall removes only ours");
}

#[test]
fn every_client_installs_into_a_missing_file_and_keeps_unrelated_keys() {
    for (client, servers_key) in [
        ("claude_code", "mcpServers"),
        ("cursor", "mcpServers"),
        ("gemini", "mcpServers"),
        ("vscode", "servers"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("nested/dir/config.json");
        assert!(install(client, &fresh).status.success(), "{client}");
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&fresh).unwrap()).unwrap();
        assert_eq!(v[servers_key].as_object().unwrap().len(), 5, "{client}");
        let settings = written(&dir, "settings.json", r#"{"theme": "dark", "general": {"vimMode": true}}"#);
        assert!(install(client, &settings).status.success(), "{client}");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        assert_eq!(v["theme"], "dark", "{client}");
        assert_eq!(v["general"]["vimMode"], true, "{client}");
    }
}

#[test]
fn a_path_with_a_control_character_is_written_as_valid_toml() {
    let dir = tempfile::tempdir().unwrap();
    let command = "/opt/odd\u{7f}dir \"quoted\"\\/fleet-mcp";
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["config", "--client", "codex", "--server-command", command])
        .output()
        .unwrap();
    assert!(out.status.success());
    let doc: toml_edit::DocumentMut = String::from_utf8(out.stdout).unwrap().parse().expect("valid TOML");
    assert_eq!(doc["mcp_servers"]["gitea-merger"]["command"].as_str(), Some(command));
    drop(dir);
}

#[test]
fn a_config_that_does_not_parse_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    for (client, text) in [("codex", "[mcp_servers\nbroken"), ("cursor", "{\"mcpServers\": [")] {
        let file = written(&dir, &format!("{client}.conf"), text);
        let out = install(client, &file);
        assert_eq!(out.status.code(), Some(2), "{client}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains("is not valid"), "{stderr}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }
}

/// A cloned repository ships a link at the name the installer once used for its
/// temporary file, pointing at the user's shell profile: the profile is left exactly as
/// it was (content and mode), and the config is a regular file holding the entries.
#[test]
fn a_link_planted_beside_the_config_is_never_written_through() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let profile = written(&dir, "bashrc", "export PATH=$HOME/bin:$PATH\n");
    std::fs::set_permissions(&profile, std::fs::Permissions::from_mode(0o600)).unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    for planted in [".mcp.json.fleet-launch.tmp", ".mcp.json.tmp"] {
        std::os::unix::fs::symlink(&profile, repo.join(planted)).unwrap();
    }
    let file = repo.join(".mcp.json");
    let out = install("claude_code", &file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&profile).unwrap(), "export PATH=$HOME/bin:$PATH\n");
    assert_eq!(std::fs::metadata(&profile).unwrap().permissions().mode() & 0o777, 0o600);
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert!(meta.file_type().is_file(), "the config is a regular file, not a link");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(config["mcpServers"]["gitea-author"].is_object(), "{config}");
    let names: Vec<String> = std::fs::read_dir(&repo)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "no temporary file left behind: {names:?}");
}

/// A config kept in a dotfiles repository and linked into place: the entries land in
/// the link's target, the link stays a link, and the target keeps its private mode.
#[test]
fn a_symlinked_config_is_written_through_to_its_target_keeping_its_mode() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("dotfiles")).unwrap();
    let target = written(&dir, "dotfiles/settings.json", "{\"theme\": \"dark\"}\n");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = dir.path().join("settings.json");
    std::os::unix::fs::symlink("dotfiles/settings.json", &file).unwrap();
    let out = install("gemini", &file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::symlink_metadata(&file).unwrap().file_type().is_symlink(), "the link stays");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&target).unwrap()).unwrap();
    assert_eq!(config["theme"], "dark");
    assert!(config["mcpServers"]["gitea-author"].is_object(), "{config}");
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o600);
}

/// A link whose target does not exist is refused: nothing is created where it points.
#[test]
fn a_dangling_config_link_is_refused_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".mcp.json");
    let elsewhere = dir.path().join("elsewhere.json");
    std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
    let out = install("claude_code", &file);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(!elsewhere.exists());
}

/// Twelve installs into one file at once all succeed (each writes its own temporary
/// file), and the file holds the entries.
#[test]
fn concurrent_installs_into_one_file_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(".mcp.json");
    let children: Vec<_> = (0..12)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
                .args(["install", "--client", "claude_code", "--file"])
                .arg(&file)
                .args(["--server-command", "/opt/fleetward/bin/fleet-mcp"])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert!(config["mcpServers"]["gitea-reconciler"].is_object(), "{config}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left behind");
}

/// Root installing into a user's private config leaves it the user's, with its mode.
/// (Only root can own a file as another user; elsewhere the case cannot arise.)
#[test]
fn root_editing_a_users_config_leaves_it_the_users() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let file = written(&dir, "config.toml", "model = \"o4-mini\"\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    if let Err(e) = std::os::unix::fs::chown(&file, Some(65534), Some(65534)) {
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        eprintln!("not root: a file cannot be given to another user here");
        return;
    }
    let out = install("codex", &file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (65534, 65534, 0o600));
    assert!(std::fs::read_to_string(&file).unwrap().contains("gitea-author"));
}

/// The command `install` writes with no `--server-command`, what it said on stderr, for
/// a `PATH` of `path`.
fn installed_command(path: &std::ffi::OsStr) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["install", "--client", "codex", "--file"])
        .arg(&file)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(&file).unwrap().parse().unwrap();
    let command = doc["mcp_servers"]["gitea-author"]["command"].as_str().unwrap().to_owned();
    (command, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A config meant to be committed names the bare `fleet-mcp` when the one on PATH is
/// this build (through a link, as `cargo install` or a package manager puts it there);
/// otherwise it names this build's absolute path and says the file is not shareable.
#[test]
fn the_written_command_is_bare_when_path_finds_this_build_and_says_so_otherwise() {
    let beside = Path::new(env!("CARGO_BIN_EXE_fleet-launch")).with_file_name("fleet-mcp");
    assert!(beside.exists(), "fleet-mcp is built beside fleet-launch by `cargo test --workspace`");
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(&beside, bin.path().join("fleet-mcp")).unwrap();
    let (command, said) = installed_command(bin.path().as_os_str());
    assert_eq!(command, "fleet-mcp");
    assert!(!said.contains("note"), "{said}");

    let empty = tempfile::tempdir().unwrap();
    let (command, said) = installed_command(empty.path().as_os_str());
    assert_eq!(Path::new(&command), beside);
    assert!(said.contains("not on PATH") && said.contains("this machine only"), "{said}");

    let other = tempfile::tempdir().unwrap();
    let impostor = other.path().join("fleet-mcp");
    std::fs::write(&impostor, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&impostor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (command, said) = installed_command(other.path().as_os_str());
    assert_eq!(Path::new(&command), beside);
    assert!(said.contains("another build"), "{said}");
}

/// The closing hint names the client that was installed, and the program it starts.
#[test]
fn install_names_the_client_it_installed_for() {
    let dir = tempfile::tempdir().unwrap();
    let out = install("claude_code", &dir.path().join(".mcp.json"));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("fleet-launch run --client claude_code -- claude"), "{said}");
    assert!(!said.contains("<client type>"), "{said}");
}

/// The tools `fleet-mcp --namespace NS` lists with `readOnlyHint: true`, sorted, asked
/// over stdio as a client asks.
fn read_only_tools_listed(namespace: &str) -> Vec<String> {
    use std::io::{BufRead, Write};
    let dir = tempfile::tempdir().unwrap();
    let mut server = Command::new(Path::new(env!("CARGO_BIN_EXE_fleet-launch")).with_file_name("fleet-mcp"))
        .args(["--namespace", namespace])
        .env("FLEET_REGISTRY", dir.path().join("registry.sqlite3"))
        .env_remove("GITEA_MCP_CLIENT_INSTANCE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("fleet-mcp is built beside fleet-launch by `cargo test --workspace`");
    let mut stdin = server.stdin.take().unwrap();
    let lines = [
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    ];
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    let mut out = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut listed = None;
    while listed.is_none() {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "fleet-mcp closed before listing its tools");
        let answer: serde_json::Value = serde_json::from_str(&line).unwrap();
        if answer["id"] == 1 {
            listed = Some(answer["result"]["tools"].as_array().unwrap().clone());
        }
    }
    drop(stdin);
    let _ = server.wait();
    let mut names: Vec<String> = listed
        .unwrap()
        .iter()
        .filter(|t| t["annotations"]["readOnlyHint"] == true)
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// JSON with comments, as a value (the comments are whole lines here).
fn without_comments(text: &str) -> serde_json::Value {
    let plain: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("//")).collect();
    serde_json::from_str(&plain.join("\n")).unwrap()
}

/// `--allow-read-only` writes each client's own setting for the read-only tools and no
/// other: Codex's per-tool `approval_mode`, kept by a later plain install; Claude Code's
/// `permissions.allow` rules in the settings file beside the config, added once and
/// taken out again by `uninstall`.
#[test]
fn allow_read_only_approves_only_the_read_only_tools_in_each_clients_own_setting() {
    let dir = tempfile::tempdir().unwrap();
    let codex = dir.path().join("config.toml");
    assert!(launcher(&["install", "--client", "codex", "--allow-read-only"], &codex).status.success());
    assert!(install("codex", &codex).status.success());
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(&codex).unwrap().parse().unwrap();
    let tools = |ns: &str| -> Vec<String> {
        doc["mcp_servers"][format!("gitea-{ns}").as_str()]["tools"]
            .as_table()
            .map(|t| {
                t.iter()
                    .map(|(name, v)| {
                        assert_eq!(v["approval_mode"].as_str(), Some("approve"));
                        name.to_owned()
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    for ns in ["author", "reviewer", "merger", "controller", "reconciler"] {
        let mut approved = tools(ns);
        approved.sort();
        assert_eq!(
            approved,
            read_only_tools_listed(ns),
            "{ns}: exactly the tools its server marks read-only"
        );
    }

    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".claude")).unwrap();
    let settings = project.join(".claude/settings.json");
    std::fs::write(
        &settings,
        "{\n  // the team's\n  \"permissions\": {\"allow\": [\"Bash(git status)\"]}\n}\n",
    )
    .unwrap();
    let mcp = project.join(".mcp.json");
    for _ in 0..2 {
        assert!(
            launcher(&["install", "--client", "claude_code", "--allow-read-only"], &mcp).status.success()
        );
    }
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(text.contains("// the team's"), "{text}");
    let value = without_comments(&text);
    let allow: Vec<&str> =
        value["permissions"]["allow"].as_array().unwrap().iter().filter_map(|v| v.as_str()).collect();
    assert_eq!(allow.len(), 10, "one rule per read-only tool, once: {allow:?}");
    assert!(allow.contains(&"Bash(git status)"));
    assert!(allow.contains(&"mcp__gitea-reconciler__gitea_plan_stale_worker_retirement"));
    assert!(!allow.iter().any(|r| r.contains("apply") || r.contains("lease")), "{allow:?}");

    assert!(uninstall("claude_code", &mcp).status.success());
    let text = std::fs::read_to_string(&settings).unwrap();
    let value = without_comments(&text);
    assert_eq!(value["permissions"]["allow"], serde_json::json!(["Bash(git status)"]));
}

/// Gemini CLI 0.61's default policy asks before every MCP tool, `readOnlyHint` or not
/// (its `policies/*.toml` in the npm package grant MCP tools nothing outside plan
/// mode), and `gemini -p` leaves out every tool that would ask. So `--allow-read-only`
/// writes one `allow` rule per read-only tool (`mcpName` and `toolName`, the policy
/// engine's documented fields) in the user's policies directory, and `uninstall`
/// removes that file; a file of the same name that is not ours is left alone.
#[test]
fn allow_read_only_writes_a_gemini_policy_of_the_read_only_tools_and_uninstall_removes_it() {
    let root = tempfile::tempdir().unwrap();
    let (project, home) = (root.path().join("project"), root.path().join("home"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let out = install_in_project(&project, &home, "gemini", &["--allow-read-only"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let policy = home.join(".gemini/policies/fleetward-read-only.toml");
    let doc: toml_edit::DocumentMut = std::fs::read_to_string(&policy).unwrap().parse().expect("valid TOML");
    let rules = doc["rule"].as_array_of_tables().expect("[[rule]] tables");
    let mut allowed: Vec<(String, Vec<String>)> = rules
        .iter()
        .map(|rule| {
            assert_eq!(rule["decision"].as_str(), Some("allow"));
            let tools = rule["toolName"].as_array().unwrap().iter().map(|t| t.as_str().unwrap().to_owned());
            (rule["mcpName"].as_str().unwrap().to_owned(), tools.collect())
        })
        .collect();
    allowed.sort();
    let mut expected: Vec<(String, Vec<String>)> =
        ["author", "reviewer", "merger", "controller", "reconciler"]
            .iter()
            .map(|ns| (format!("gitea-{ns}"), read_only_tools_listed(ns)))
            .collect();
    expected.sort();
    for (_, tools) in allowed.iter_mut() {
        tools.sort();
    }
    assert_eq!(allowed, expected, "exactly the tools each server marks read-only");

    let out = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["uninstall", "--client", "gemini"])
        .env("HOME", &home)
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!policy.exists(), "uninstall removes the policy it wrote");

    std::fs::write(&policy, "# the user's own\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["uninstall", "--client", "gemini"])
        .env("HOME", &home)
        .current_dir(&project)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), "# the user's own\n");
}

/// `install` and `uninstall` report as JSON with `--json`.
#[test]
fn install_and_uninstall_report_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.toml");
    let report = |args: &[&str]| -> serde_json::Value {
        let out = launcher(args, &file);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let first = report(&["install", "--client", "codex", "--json"]);
    assert_eq!(first["outcome"], "installed");
    assert_eq!(first["command"], "/opt/fleetward/bin/fleet-mcp");
    assert_eq!(report(&["install", "--client", "codex", "--json"])["outcome"], "unchanged");
    assert_eq!(report(&["uninstall", "--client", "codex", "--json"])["outcome"], "removed");
    assert_eq!(report(&["uninstall", "--client", "codex", "--json"])["outcome"], "absent");
}

/// Two installs at once that want different commands: they take turns on the file, so
/// the second sees the first's entries and is refused naming them; the file holds the
/// winner's five entries, never a mix and never a silently lost install.
#[test]
fn concurrent_installs_of_different_commands_take_turns_and_the_loser_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for pair in 0..12 {
        let file = dir.path().join(format!("pair-{pair}.json"));
        // Commands not named fleet-mcp: an entry that runs one is no longer ours to rewrite.
        let children: Vec<_> = ["/opt/a/wrapped-server", "/opt/b/other-server"]
            .into_iter()
            .map(|command| {
                let child = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
                    .args(["install", "--client", "claude_code", "--file"])
                    .arg(&file)
                    .args(["--server-command", command])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap();
                (command, child)
            })
            .collect();
        let outcomes: Vec<(&str, Output)> = children
            .into_iter()
            .map(|(command, child)| (command, child.wait_with_output().unwrap()))
            .collect();
        let winners: Vec<&str> =
            outcomes.iter().filter(|(_, out)| out.status.success()).map(|(command, _)| *command).collect();
        assert_eq!(winners.len(), 1, "exactly one install wins pair {pair}");
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for (name, entry) in config["mcpServers"].as_object().unwrap() {
            assert_eq!(entry["command"], winners[0], "{name} runs the winner's command");
        }
        let (_, loser) = outcomes.iter().find(|(_, out)| !out.status.success()).unwrap();
        let stderr = String::from_utf8_lossy(&loser.stderr);
        assert_eq!(loser.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(winners[0]), "the refusal names what the file holds: {stderr}");
    }
}

/// `fleet-launch install` in `project` with `HOME` at `home`, for `client`'s default
/// (project) file.
/// A policy file of the user's own at the path `--allow-read-only` writes (no
/// Fleetward first line, which is how `uninstall` tells it is not ours) is refused,
/// named, and left exactly as it was; one Fleetward wrote is rewritten.
#[test]
fn a_users_own_gemini_policy_of_that_name_is_never_replaced() {
    let root = tempfile::tempdir().unwrap();
    let (project, home) = (root.path().join("project"), root.path().join("home"));
    std::fs::create_dir_all(&project).unwrap();
    let policy = home.join(".gemini/policies/fleetward-read-only.toml");
    std::fs::create_dir_all(policy.parent().unwrap()).unwrap();
    let mine = "[[rule]]\ntoolName = \"run_shell_command\"\ndecision = \"deny\"\npriority = 500\n";
    std::fs::write(&policy, mine).unwrap();
    let out = install_in_project(&project, &home, "gemini", &["--allow-read-only"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("fleetward-read-only.toml") && stderr.contains("not one Fleetward wrote"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_eq!(std::fs::read_to_string(&policy).unwrap(), mine, "the user's file is as it was");
    // Fleetward's own file, from an earlier install, is rewritten.
    std::fs::write(
        &policy,
        format!(
            "{}\n# an older version\n",
            "# fleetward: the fleet servers' read-only tools run without a prompt."
        ),
    )
    .unwrap();
    let out = install_in_project(&project, &home, "gemini", &["--allow-read-only"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(std::fs::read_to_string(&policy).unwrap().contains("[[rule]]"));
}

fn install_in_project(project: &Path, home: &Path, client: &str, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["install", "--client", client, "--server-command", "/opt/fleetward/bin/fleet-mcp"])
        .args(extra)
        .env("HOME", home)
        .current_dir(project)
        .output()
        .unwrap()
}

/// A cloned project cannot choose which file outside it an install edits: a project
/// config that is a link (or sits in a linked directory) leading outside is refused,
/// naming where it leads, unless `--follow-project-links`.
#[test]
fn a_project_config_linked_outside_the_project_is_refused_unless_asked() {
    let root = tempfile::tempdir().unwrap();
    let (project, home) = (root.path().join("project"), root.path().join("home"));
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(home.join("elsewhere")).unwrap();
    let outside = written_at(&home.join("some-settings.json"), "{\"mine\": true}\n");
    std::os::unix::fs::symlink(&outside, project.join(".mcp.json")).unwrap();
    std::os::unix::fs::symlink(home.join("elsewhere"), project.join(".vscode")).unwrap();

    for (client, target) in [("claude_code", outside.clone()), ("vscode", home.join("elsewhere/mcp.json"))] {
        let out = install_in_project(&project, &home, client, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        let shown = std::fs::canonicalize(target.parent().unwrap()).unwrap();
        assert!(
            stderr.contains(&shown.display().to_string()) && stderr.contains("--follow-project-links"),
            "{stderr}"
        );
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "{\"mine\": true}\n");
    assert!(!home.join("elsewhere/mcp.json").exists());

    let out = install_in_project(&project, &home, "claude_code", &["--follow-project-links"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&outside).unwrap()).unwrap();
    assert!(written["mcpServers"]["gitea-author"].is_object() && written["mine"] == true, "{written}");
}

/// A user's own config linked into a dotfiles directory is written through, as before.
#[test]
fn a_user_config_linked_into_dotfiles_is_written_through() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().join("home");
    let dotfiles = written_at(&home.join("dotfiles/codex.toml"), "model = \"o3\"\n");
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    std::os::unix::fs::symlink(&dotfiles, home.join(".codex/config.toml")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_fleet-launch"))
        .args(["install", "--client", "codex", "--server-command", "/opt/fleetward/bin/fleet-mcp"])
        .env("HOME", &home)
        .env_remove("CODEX_HOME")
        .current_dir(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&dotfiles).unwrap();
    assert!(text.contains("model = \"o3\"") && text.contains("[mcp_servers.gitea-author]"), "{text}");
    assert!(std::fs::symlink_metadata(home.join(".codex/config.toml")).unwrap().file_type().is_symlink());
}

fn written_at(path: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_path_buf()
}
