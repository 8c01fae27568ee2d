//! Bad input exits non-zero with one clear line and leaves the registry as it was.

mod common;

use common::{Fleet, assert_one_line_error, assert_usage_error};

/// A registry holding one minted instance and one released worker.
fn populated() -> (Fleet, String) {
    let fleet = Fleet::new();
    let id = fleet.mint("codex");
    fleet.register_and_release(&id, "author");
    (fleet, id)
}

#[test]
fn a_malformed_instance_id_in_the_environment_is_refused() {
    let (fleet, _) = populated();
    let before = fleet.export();
    let marker = fleet.dir.path().join("ran");
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--", "touch"])
        .arg(&marker)
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", "inst-codex-yesterday-abc")
        .output()
        .unwrap();
    assert_one_line_error(&out, 2, "GITEA_MCP_CLIENT_INSTANCE is invalid");
    assert!(!marker.exists(), "the worker command must not run");
    assert_eq!(fleet.export(), before);
}

#[test]
fn a_missing_instance_id_is_refused() {
    let (fleet, _) = populated();
    let before = fleet.export();
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "author", "--", "true"])
        .env("GITEA_MCP_CLIENT", "codex")
        .output()
        .unwrap();
    assert_one_line_error(&out, 2, "GITEA_MCP_CLIENT_INSTANCE is not set");
    assert_eq!(fleet.export(), before);
}

#[test]
fn an_unknown_namespace_is_refused() {
    let (fleet, id) = populated();
    let before = fleet.export();
    let out = fleet
        .fleetctl()
        .args(["worker", "run", "--namespace", "planner", "--", "true"])
        .env("GITEA_MCP_CLIENT", "codex")
        .env("GITEA_MCP_CLIENT_INSTANCE", &id)
        .output()
        .unwrap();
    assert_usage_error(&out, "planner");
    assert_eq!(fleet.export(), before);
}

#[test]
fn an_unusable_registry_path_fails_with_exit_3() {
    let fleet = Fleet::new();
    let file = fleet.dir.path().join("plain-file");
    std::fs::write(&file, b"x").unwrap();
    let under_a_file = file.join("registry.sqlite3");
    let out =
        fleet.fleetctl().args(["worker", "list"]).env("FLEET_REGISTRY", &under_a_file).output().unwrap();
    assert_one_line_error(&out, 3, "registry");
    let out =
        fleet.fleetctl().args(["registry", "init"]).env("FLEET_REGISTRY", &under_a_file).output().unwrap();
    assert_one_line_error(&out, 3, "registry");
    let missing = fleet.dir.path().join("absent.sqlite3");
    let out = fleet.fleetctl().args(["worker", "list"]).env("FLEET_REGISTRY", &missing).output().unwrap();
    assert_one_line_error(&out, 3, "does not exist");
    assert!(!missing.exists(), "reading must not create a registry");
}

#[test]
fn a_registry_that_is_not_a_database_fails_with_exit_3_and_is_untouched() {
    let fleet = Fleet::new();
    let junk = b"definitely not sqlite ".repeat(200);
    std::fs::write(&fleet.registry, &junk).unwrap();
    let out = fleet.ctl(&["worker", "list"]);
    assert_one_line_error(&out, 3, "not a valid SQLite database");
    assert_eq!(std::fs::read(&fleet.registry).unwrap(), junk);
}

#[test]
fn a_corrupt_import_file_is_refused_whole() {
    let (fleet, id) = populated();
    let before = fleet.export();
    let cases = [
        ("truncated.json", "{\"worker_registrations\": [".to_owned(), "not valid JSON"),
        (
            "bad-row.json",
            format!(
                r#"{{"worker_registrations": [
                {{"worker_identity":"w-new","namespace":"author","status":"active","registered_at":"2026-07-30T12:00:00Z","client_instance_id":"{id}"}},
                {{"worker_identity":"w-bad","namespace":"author","status":"zombie","registered_at":"2026-07-30T12:00:00Z"}}]}}"#
            ),
            "worker_registrations[1]",
        ),
        ("clash.json", serde_json::to_string(&before).unwrap(), "already"),
    ];
    for (name, text, needle) in cases {
        let path = fleet.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = fleet.ctl(&["registry", "import", path.to_str().unwrap()]);
        let code = if name == "clash.json" { 1 } else { 2 };
        assert_one_line_error(&out, code, needle);
        assert_eq!(fleet.export(), before, "{name} must leave the registry unchanged");
    }
    let out = fleet.ctl(&["registry", "import", "/nonexistent/file.json"]);
    assert_one_line_error(&out, 2, "cannot read import file /nonexistent/file.json");
}

/// An import is written as it streams in, a batch of rows at a time, inside one
/// transaction: a bad row after whole batches were written, or an audit log out of
/// order, still leaves the registry exactly as it was.
#[test]
fn a_bad_row_after_whole_batches_of_a_streamed_import_writes_nothing() {
    let (fleet, id) = populated();
    let before = fleet.export();
    let row = |i: usize, status: &str| {
        format!(
            r#"{{"worker_identity":"w-{i}","namespace":"author","status":"{status}","registered_at":"2026-07-30T12:00:00Z","client_instance_id":"{id}"}}"#
        )
    };
    let mut rows: Vec<String> = (0..25_000).map(|i| row(i, "released")).collect();
    rows.push(row(25_000, "zombie"));
    let path = fleet.dir.path().join("late-bad-row.json");
    std::fs::write(&path, format!(r#"{{"worker_registrations": [{}]}}"#, rows.join(","))).unwrap();
    let out = fleet.ctl(&["registry", "import", path.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "worker_registrations[25000]");
    assert_eq!(fleet.export(), before, "the batches written before the bad row are undone");

    let entry = |id: u64| {
        format!(
            r#"{{"id":{id},"event":"acquire","outcome":"acquired","reason":null,"lease_key":"workflow:w","kind":"workflow","identity":"me","binding":null,"connector":null,"fencing_epoch":1,"correlation_id":null,"at":"2026-07-30T12:00:00Z"}}"#
        )
    };
    let path = fleet.dir.path().join("unordered-log.json");
    std::fs::write(&path, format!(r#"{{"lease_audit_log": [{}, {}]}}"#, entry(2), entry(1))).unwrap();
    let out = fleet.ctl(&["registry", "import", path.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "lease_audit_log[1]: id 1 is not after 2");
    assert_eq!(fleet.export(), before);
}

/// A bad import into a registry that does not exist yet leaves no registry behind: the
/// file the import created to write into is removed with the failed transaction.
#[test]
fn a_bad_import_into_a_new_registry_leaves_none() {
    let fleet = Fleet::new();
    let path = fleet.dir.path().join("bad.json");
    std::fs::write(&path, r#"{"worker_registrations": [{"worker_identity": "w", "status": "zombie"}]}"#)
        .unwrap();
    assert!(!fleet.registry.exists());
    let out = fleet.ctl(&["registry", "import", path.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "worker_registrations[0]");
    assert!(!fleet.registry.exists(), "no registry is left where there was none");
    let out = fleet.ctl(&["registry", "import", "/dev/zero"]);
    assert_one_line_error(&out, 2, "not valid JSON");
    assert!(!fleet.registry.exists());
}

#[test]
fn an_invalid_client_type_is_refused_by_the_launcher() {
    let fleet = Fleet::new();
    let out = fleet.launcher().args(["mint", "--client", "Not-A-Client"]).output().unwrap();
    assert_usage_error(&out, "client type");
    assert!(!fleet.registry.exists(), "nothing is recorded for refused input");
}

#[test]
fn export_then_import_into_a_fresh_registry_round_trips() {
    let (fleet, _) = populated();
    let dump_path = fleet.dir.path().join("dump.json");
    let out = fleet.ctl(&["registry", "export"]);
    assert!(out.status.success());
    std::fs::write(&dump_path, &out.stdout).unwrap();
    let copy = Fleet::new();
    let out = copy.ctl(&["registry", "import", dump_path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(copy.export(), fleet.export());
}

#[test]
fn output_that_cannot_be_written_is_an_error_and_a_closed_pipe_is_not() {
    let (fleet, _) = populated();
    for args in [
        &["registry", "export"][..],
        &["snapshot"],
        &["snapshot", "--json"],
        &["worker", "list"],
        &["lease", "audit"],
        &["retire", "plan"],
    ] {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = fleet.fleetctl().args(args).stdout(full).output().unwrap();
        assert_one_line_error(&out, 3, "cannot write output");

        // A reader that goes away early: the quiet end of a pipe, not a panic.
        let mut child = fleet
            .fleetctl()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_ne!(
            out.status.code(),
            Some(101),
            "{args:?} panicked: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{args:?}");
    }
}

#[test]
fn lease_owners_that_would_break_a_table_are_refused() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let huge = "o".repeat(120 * 1024);
    for owner in [huge.as_str(), "", "me\nworkflow:forged  workflow  root", "\u{1b}[2Jme"] {
        let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:w", "--owner", owner]);
        assert_one_line_error(&out, 2, "lease owner");
    }
    let out = fleet.ctl(&["lease", "show"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().lines().count(), 1, "nothing was written");
    let out = fleet.ctl(&["lease", "audit"]);
    assert!(out.status.success());
}

/// Piped, a table prints every value whole, a huge one too, each row on one line (on a
/// terminal it is abbreviated: `table::tests`).
#[test]
fn a_huge_identity_in_the_registry_prints_whole_on_one_line_when_piped() {
    let fleet = Fleet::new();
    let long_instance = format!("legacy-pid-{}", "9".repeat(70 * 1024));
    let dump = serde_json::json!({"worker_registrations": [{
        "worker_identity": "wkr-author-1", "namespace": "author", "status": "active",
        "registered_at": "2026-07-30T12:00:00Z", "client_instance_id": long_instance}]});
    let file = fleet.dir.path().join("dump.json");
    std::fs::write(&file, dump.to_string()).unwrap();
    assert!(fleet.ctl(&["registry", "import", file.to_str().unwrap()]).status.success());
    let out = fleet.ctl(&["worker", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2, "a header and one row");
    assert!(text.contains(&long_instance), "piped: the value whole");
    let json = fleet.ctl(&["worker", "list", "--json"]);
    assert!(String::from_utf8(json.stdout).unwrap().contains(&long_instance), "--json keeps it whole");
}

#[test]
fn an_empty_registry_file_is_not_a_safe_fleet_and_is_left_empty() {
    let fleet = Fleet::new();
    std::fs::write(&fleet.registry, b"").unwrap();
    for args in [&["snapshot"][..], &["snapshot", "--gate"], &["worker", "list"], &["retire", "plan"]] {
        let out = fleet.ctl(args);
        assert_one_line_error(&out, 3, "not an initialized registry");
    }
    assert_eq!(std::fs::metadata(&fleet.registry).unwrap().len(), 0, "reading wrote nothing");
}

#[test]
fn a_garbage_fingerprint_is_bad_input_not_a_moved_registry() {
    let (fleet, _) = populated();
    let before = fleet.export();
    let valid = format!("b3:{}", "0".repeat(64));
    for (registry, candidate) in [("garbage", valid.as_str()), (valid.as_str(), "b3:XYZ")] {
        let out = fleet.ctl(&[
            "retire",
            "apply",
            "--registry-fingerprint",
            registry,
            "--candidate-fingerprint",
            candidate,
            "--workers",
            "wkr-x",
        ]);
        assert_one_line_error(&out, 2, "is not a fingerprint");
    }
    assert_eq!(fleet.export(), before);
}

#[test]
fn an_import_whose_ledger_contradicts_itself_is_refused_whole() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    let file = fleet.dir.path().join("dump.json");
    std::fs::write(
        &file,
        r#"{"instances":[{"client_instance_id":"inst-codex-20260730T120000Z-abc123def456",
            "client_type":"gemini","minted_at":"2026-07-30T12:00:00Z"}]}"#,
    )
    .unwrap();
    let out = fleet.ctl(&["registry", "import", file.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "minted for codex");
    assert!(fleet.export().instances.is_empty());
}

#[test]
fn a_usage_error_prints_clap_whole_with_the_valid_values_and_a_suggestion() {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["worker", "list", "--namespace", "autor"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("possible values: author, reviewer, merger, controller, reconciler"), "{stderr}");
    assert!(stderr.contains("a similar value exists: 'author'"), "{stderr}");
    let mcp = std::process::Command::new(common::sibling_bin("fleet-mcp")).output().unwrap();
    assert_eq!(mcp.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&mcp.stderr);
    assert!(stderr.contains("--namespace <NAMESPACE>") && stderr.contains("Usage:"), "{stderr}");
}

#[test]
fn help_has_examples_and_exit_codes_and_completions_and_a_manual_are_printed() {
    let fleet = Fleet::new();
    let help = String::from_utf8(fleet.ctl(&["--help"]).stdout).unwrap();
    assert!(help.contains("Examples:") && help.contains("Exit codes:"), "{help}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = fleet.ctl(&["completions", shell]);
        assert!(out.status.success() && out.stdout.len() > 500, "{shell}");
    }
    let man = fleet.ctl(&["man"]);
    assert!(String::from_utf8(man.stdout).unwrap().contains(".TH fleetctl 1"));
}

#[test]
fn prune_writes_the_rows_down_before_removing_them_and_keeps_active_ones() {
    let (fleet, _) = populated();
    let before = fleet.export();
    assert_eq!(before.worker_registrations.len(), 1, "one released worker");
    let export = fleet.dir.path().join("pruned.json");
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2000-01-01T00:00:00Z",
        "--export",
        export.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fleet.export(), before, "nothing that old");
    assert!(!export.exists(), "nothing to prune, no file written");
    std::fs::write(&export, "an operator's file").unwrap();
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2999-01-01T00:00:00Z",
        "--export",
        export.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, 2, "cannot write");
    assert_eq!(fleet.export(), before, "an export that cannot be written prunes nothing");
    let fresh = fleet.dir.path().join("pruned-2.json");
    let out = fleet.ctl(&[
        "registry",
        "prune",
        "--before",
        "2999-01-01T00:00:00Z",
        "--export",
        fresh.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert!(fleet.export().worker_registrations.is_empty());
    let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&fresh).unwrap()).unwrap();
    assert_eq!(kept["worker_registrations"].as_array().unwrap().len(), 1, "the pruned row is in the export");
    let out = fleet.ctl(&["registry", "prune", "--before", "yesterday", "--export", "x.json"]);
    assert_one_line_error(&out, 2, "--before");
}

/// A URL typed without its slashes is bad input, never a file name to create.
#[test]
fn a_scheme_without_its_slashes_is_refused_and_creates_nothing() {
    let fleet = Fleet::new();
    let out =
        fleet.fleetctl().env("FLEET_REGISTRY", "postgres:/bad").args(["registry", "init"]).output().unwrap();
    assert_one_line_error(&out, 2, "unsupported scheme");
    assert!(!fleet.dir.path().join("postgres:").exists(), "nothing created");
}

/// Completions offer what a person types, never an internal command; `man --dir` writes
/// a page for every page the manual names; fleet-launch and fleet-mcp have both too.
#[test]
fn completions_hide_internal_commands_and_every_named_manual_page_exists() {
    let fleet = Fleet::new();
    let bash = fleet.ctl(&["completions", "bash"]);
    assert!(bash.status.success());
    let script = String::from_utf8(bash.stdout).unwrap();
    assert!(script.contains("retire"));
    // Neither internal command is offered, as a word or in a function's name (where a
    // command `__keep` would be `…subcmd____keep`; `lease keep-alive` is `…subcmd__keep…`).
    let words: Vec<&str> = script.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')).collect();
    for internal in ["__gate", "__keep"] {
        assert!(!words.contains(&internal), "{internal} is offered");
        assert!(!script.contains(&format!("subcmd__{internal}")), "{internal} has a completion function");
    }

    let dir = fleet.dir.path().join("man1");
    std::fs::create_dir(&dir).unwrap();
    let out = fleet.ctl(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let top = std::fs::read_to_string(dir.join("fleetctl.1")).unwrap();
    for sub in ["registry", "snapshot", "retire", "lease", "worker", "initialize", "connector", "serve"] {
        assert!(dir.join(format!("fleetctl-{sub}.1")).exists(), "fleetctl-{sub}.1");
        assert!(top.contains(&format!("fleetctl\\-{sub}")), "fleetctl.1 names fleetctl-{sub}(1)");
    }
    let apply = std::fs::read_to_string(dir.join("fleetctl-retire-apply.1")).unwrap();
    assert!(apply.contains("require\\-registry\\-match"), "a subcommand's page has its options");
    assert!(!dir.join("fleetctl-__gate.1").exists());
    // Every page says how the command ends and what it reads from its environment, and
    // a page whose help has examples shows them in a section of their own (man-pages(7)).
    for page in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
        let text = std::fs::read_to_string(&page).unwrap();
        for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", "FLEET_REGISTRY"] {
            assert!(text.contains(section), "{} has {section}", page.display());
        }
    }
    let init = std::fs::read_to_string(dir.join("fleetctl-registry-init.1")).unwrap();
    assert!(init.contains(".SH EXAMPLES\n.nf\nfleetctl registry init\n"), "{init}");
    assert!(!init.contains(".SH EXTRA"), "examples are not an EXTRA section");

    for (binary, args) in
        [("fleet-launch", vec!["completions", "bash"]), ("fleet-mcp", vec!["--completions", "bash"])]
    {
        let out = std::process::Command::new(common::sibling_bin(binary)).args(&args).output().unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{binary}");
    }
    for (binary, args) in [("fleet-launch", vec!["man"]), ("fleet-mcp", vec!["--man"])] {
        let out = std::process::Command::new(common::sibling_bin(binary)).args(&args).output().unwrap();
        let page = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && page.contains(".TH"), "{binary}");
        assert!(page.contains(".SH \"EXIT STATUS\"") && page.contains(".SH ENVIRONMENT"), "{binary}: {page}");
    }
}

/// A lease key with a kind but no name says what is missing, not that the kind is wrong.
#[test]
fn a_lease_key_without_a_name_says_what_is_missing() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    for key in ["workflow:", "init:"] {
        let out = fleet.ctl(&["lease", "show", "--key", key]);
        assert_one_line_error(&out, 2, "names no");
    }
}

/// `registry import`, `snapshot --manifest` and `snapshot --compare` parse their file as
/// it streams in: an endless input is refused at its first byte, never read to the end.
/// Random bytes may begin with a JSON value (a digit, `-`, `"`): then the refusal names
/// the file and what its value is not, so only the file's name is certain.
#[test]
fn an_endless_input_is_refused_at_once_and_changes_nothing() {
    let (fleet, _) = populated();
    let before = fleet.export();
    for (args, says) in [
        (["registry", "import", "/dev/zero"], "/dev/zero is not valid JSON"),
        (["registry", "import", "/dev/urandom"], "/dev/urandom"),
        (["snapshot", "--manifest", "/dev/zero"], "/dev/zero is not valid JSON"),
        (["snapshot", "--compare", "/dev/urandom"], "/dev/urandom"),
    ] {
        let out = fleet.ctl(&args);
        assert_one_line_error(&out, 2, says);
    }
    assert_eq!(fleet.export(), before);
}

#[test]
fn an_input_past_its_limit_is_refused_naming_the_flag_that_raises_it() {
    let (fleet, _) = populated();
    let before = fleet.export();
    let path = fleet.dir.path().join("export.json");
    std::fs::write(&path, serde_json::to_string(&before).unwrap()).unwrap();
    let file = path.to_str().unwrap();
    let out = fleet.ctl(&["registry", "import", file, "--max-input-bytes", "100"]);
    assert_one_line_error(&out, 2, "larger than 100 bytes");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-input-bytes"));
    let out = fleet.ctl(&["snapshot", "--manifest", file, "--max-input-bytes", "10"]);
    assert_one_line_error(&out, 2, "larger than 10 bytes");
    assert_eq!(fleet.export(), before);
}

/// A file one byte past its limit is refused before anything is written, even though
/// the parser could have read it whole; a directory is refused as bad input; a row that
/// names one field twice is refused, never imported with the last value.
#[test]
fn an_import_one_byte_past_its_limit_a_directory_and_a_field_named_twice_write_nothing() {
    let (fleet, _) = populated();
    let before = fleet.export();
    let path = fleet.dir.path().join("export.json");
    let text = serde_json::to_string(&before).unwrap();
    std::fs::write(&path, &text).unwrap();
    let fresh = Fleet::new();
    let limit = (text.len() - 1).to_string();
    let out = fresh.ctl(&["registry", "import", path.to_str().unwrap(), "--max-input-bytes", &limit]);
    assert_one_line_error(&out, 2, &format!("larger than {limit} bytes"));
    assert!(fresh.workers_once_created().is_none_or(|rows| rows.is_empty()), "nothing was written");
    let exact = text.len().to_string();
    let out = fresh.ctl(&["registry", "import", path.to_str().unwrap(), "--max-input-bytes", &exact]);
    assert!(
        out.status.success(),
        "a file exactly at its limit is read: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let out = fleet.ctl(&["registry", "import", fleet.dir.path().to_str().unwrap()]);
    assert_one_line_error(&out, 2, "is a directory");

    let row = serde_json::to_string(&before.worker_registrations[0]).unwrap();
    let twice = row.replacen('{', "{\"pid\":4242,", 1);
    let dup = fleet.dir.path().join("dup.json");
    std::fs::write(&dup, format!("{{\"worker_registrations\":[{twice}]}}")).unwrap();
    let out = fleet.ctl(&["registry", "import", dup.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "duplicate field `pid`");

    // One value of 8 MiB (a launch id) in a file well within its limit: refused as the
    // row streams in, never held whole.
    let huge = fleet.dir.path().join("huge.json");
    let id = "x".repeat(8 << 20);
    std::fs::write(
        &huge,
        format!(
            "{{\"worker_registrations\":[{{\"worker_identity\":\"w\",\"namespace\":\"author\",\"status\":\"active\",\"registered_at\":\"2026-07-30T12:00:00Z\",\"client_instance_id\":\"{id}\"}}]}}"
        ),
    )
    .unwrap();
    let out = fleet.ctl(&["registry", "import", huge.to_str().unwrap()]);
    assert_one_line_error(&out, 2, "a row is larger than 1048576 bytes");
    assert_eq!(fleet.export(), before);
}

/// An import checks each lease and audit entry by the rules of the commands that write
/// them, and refuses fields and tables it does not know, before anything is written.
#[test]
fn import_refuses_what_the_lease_commands_refuse() {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["lease", "acquire", "--key", "workflow:x", "--owner", "ops"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = fleet.ctl(&["registry", "export"]);
    let export: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let target = Fleet::new();
    assert!(target.ctl(&["registry", "init"]).status.success());
    let before = target.export();
    type Doctor = fn(&mut serde_json::Value);
    let cases: [(&str, Doctor, &str); 6] = [
        ("kind.json", |e| e["leases"][0]["kind"] = "connector".into(), "names a workflow lease"),
        ("nameless.json", |e| e["leases"][0]["lease_key"] = "workflow:".into(), "names no workflow: lease"),
        ("audit.json", |e| e["lease_audit_log"][0]["kind"] = "initialization".into(), "lease_audit_log[0]"),
        ("field.json", |e| e["leases"][0]["extra"] = 1.into(), "unknown field `extra`"),
        ("table.json", |e| e["bogus"] = serde_json::json!([]), "unknown table \"bogus\""),
        (
            "scopes.json",
            |e| e["leases"][0]["scopes"] = serde_json::json!(["repo:read"]),
            "only connector leases",
        ),
    ];
    for (name, doctor, needle) in cases {
        let mut doctored = export.clone();
        doctor(&mut doctored);
        let path = target.dir.path().join(name);
        std::fs::write(&path, doctored.to_string()).unwrap();
        let out = target.ctl(&["registry", "import", path.to_str().unwrap()]);
        assert_one_line_error(&out, 2, needle);
        assert_eq!(target.export(), before, "{name} must leave the registry unchanged");
    }
}

#[test]
fn a_missing_lease_is_exit_1_naming_it() {
    let fleet = Fleet::new();
    assert!(fleet.ctl(&["registry", "init"]).status.success());
    for args in [
        &["lease", "show", "--key", "workflow:nope"][..],
        &["lease", "show", "--key", "workflow:nope", "--json"],
    ] {
        let out = fleet.ctl(args);
        assert_one_line_error(&out, 1, "no lease workflow:nope");
        assert!(out.stdout.is_empty());
    }
}

/// Under `--log-format json` every line on stderr is a JSON object, a usage error too.
#[test]
fn a_usage_error_under_json_logs_is_one_json_event() {
    let fleet = Fleet::new();
    let out = fleet.ctl(&["--log-format", "json", "lease", "acquire", "--bogus"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    let event: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(event["level"], "ERROR");
    assert_eq!(event["fields"]["exit_code"], 2);
    assert!(event["fields"]["message"].as_str().unwrap().contains("--bogus"), "{event}");
}
