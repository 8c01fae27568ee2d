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

/// The crates that other tools link to judge a fleet without touching it.
const PURE: [&str; 5] =
    ["fleet-model", "fleet-identity", "fleet-snapshot", "fleet-retirement", "fleet-lease"];

/// What a pure crate may depend on directly: the model, the identities, the lease
/// records (retirement reads the workflow leases of an export), and the plain data
/// crates (hashbrown for its `HashTable`, without the default hasher).
const PURE_MAY_USE: [&str; 10] = [
    "fleet-model",
    "fleet-identity",
    "fleet-lease",
    "serde",
    "serde_json",
    "blake3",
    "time",
    "thiserror",
    "rustc-hash",
    "hashbrown",
];

/// What no pure crate may reach, however indirectly.
const NEVER_BELOW_A_PURE_CRATE: [&str; 13] = [
    "fleet-registry",
    "fleet-probe",
    "fleet-runtime",
    "registry-sqlite",
    "registry-postgres",
    "nix",
    "libc",
    "rusqlite",
    "postgres",
    "tokio",
    "uuid",
    "getrandom",
    "rmcp",
];

/// The workspace's resolved graph of normal (non-dev, non-build) dependencies, by
/// package name, for this machine's platform.
fn normal_dependency_graph() -> std::collections::BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let host = String::from_utf8(std::process::Command::new("rustc").arg("-vV").output().unwrap().stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .unwrap();
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--filter-platform", &host])
        .current_dir(root())
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let name_of: std::collections::BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let deps = node["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
                .map(|d| name_of[d["pkg"].as_str().unwrap()].to_owned())
                .collect();
            (name_of[node["id"].as_str().unwrap()].to_owned(), deps)
        })
        .collect()
}

fn reachable(graph: &std::collections::BTreeMap<String, Vec<String>>, from: &str) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(next) = todo.pop() {
        for dep in graph.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                todo.push(dep.clone());
            }
        }
    }
    seen.into_iter().collect()
}

/// The workspace's own crates in `graph` (each a directory under `crates/` or `bins/`).
fn workspace_crates(graph: &std::collections::BTreeMap<String, Vec<String>>) -> Vec<String> {
    graph
        .keys()
        .filter(|name| {
            ["crates", "bins"].iter().any(|dir| root().join(dir).join(name).join("Cargo.toml").exists())
        })
        .cloned()
        .collect()
}

#[test]
fn pure_crates_reach_no_store_probe_os_or_runtime_crate() {
    let graph = normal_dependency_graph();
    for krate in PURE {
        let direct = &graph[krate];
        for dep in direct {
            assert!(PURE_MAY_USE.contains(&dep.as_str()), "{krate} depends directly on {dep}");
        }
        let all = reachable(&graph, krate);
        for forbidden in NEVER_BELOW_A_PURE_CRATE {
            assert!(!all.iter().any(|d| d == forbidden), "{krate} reaches {forbidden}");
        }
    }
}

#[test]
fn arrows_point_down_from_the_registry_to_the_pure_crates() {
    let graph = normal_dependency_graph();
    let registry = &graph["fleet-registry"];
    for needed in ["fleet-model", "fleet-retirement", "fleet-lease"] {
        assert!(registry.iter().any(|d| d == needed), "fleet-registry should compose {needed}");
    }
    assert!(
        !reachable(&graph, "fleet-registry").iter().any(|d| d == "fleet-probe"),
        "the probe is handed in"
    );
}

/// The binaries parse, call the runtime and map its outcomes: no backend crate and no
/// probe crate among their own dependencies (`cargo tree -e normal -p <bin> --depth 1`).
#[test]
fn the_binaries_depend_on_no_backend_and_no_probe_crate() {
    let graph = normal_dependency_graph();
    for bin in ["fleetctl", "fleet-mcp", "fleet-launch"] {
        for below in ["registry-sqlite", "registry-postgres", "fleet-probe"] {
            assert!(!graph[bin].iter().any(|d| d == below), "{bin} depends on {below} directly");
        }
        assert!(graph[bin].iter().any(|d| d == "fleet-runtime"), "{bin} goes through the runtime");
    }
}

#[test]
fn pure_crates_use_no_clock_environment_or_filesystem_in_source() {
    for krate in PURE {
        let dir = root().join("crates").join(krate);
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

/// Every name a coverage document may cite: each function defined anywhere in the
/// workspace's Rust sources (tests included), each quoted snake_case string in them
/// (reason and finding codes), and each fixture's name.
fn citable_names() -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    for top in ["crates", "bins", "fuzz"] {
        let dir = root().join(top);
        if dir.is_dir() {
            rust_files(&dir, &mut files);
        }
    }
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for piece in text.split("fn ").skip(1) {
            let name: String = piece.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                names.insert(name);
            }
        }
        for (i, quoted) in text.split('"').enumerate() {
            if i % 2 == 1 && !quoted.is_empty() && quoted.chars().all(|c| c.is_ascii_lowercase() || c == '_')
            {
                names.insert(quoted.to_owned());
            }
        }
    }
    let mut fixtures = Vec::new();
    for dir in ["fixtures/snapshot", "fixtures/retirement"] {
        if let Ok(entries) = std::fs::read_dir(root().join(dir)) {
            fixtures.extend(entries.flatten().map(|e| e.path()));
        }
    }
    names.extend(fixtures.iter().filter_map(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned()));
    names
}

/// The test names a coverage document cites: the part after `::` of each backticked
/// `path::name`, and each backticked bare name of four or more words (what tests are
/// called here); `name_…` stands for every test whose name starts so.
fn cited_tests(doc: &str) -> Vec<String> {
    let mut cited = Vec::new();
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 0 {
            continue;
        }
        let name = span.rsplit("::").next().unwrap_or(span);
        let is_name =
            name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '…');
        let words = name.split('_').filter(|w| !w.is_empty()).count();
        if is_name && words >= 2 && (span.contains("::") || words >= 4) {
            cited.push(name.to_owned());
        }
    }
    cited
}

/// docs/SPEC-COVERAGE.md names the tests that pin each rule; a renamed or removed test
/// must not leave the document citing nothing.
#[test]
fn every_test_the_spec_coverage_cites_exists() {
    let doc = std::fs::read_to_string(root().join("docs/SPEC-COVERAGE.md")).unwrap();
    let defined = citable_names();
    let cited = cited_tests(&doc);
    assert!(cited.len() > 50, "the document cites its tests: {} found", cited.len());
    let missing: Vec<&String> = cited
        .iter()
        .filter(|name| {
            if let Some(prefix) = name.strip_suffix('…') {
                !defined.iter().any(|d| d.starts_with(prefix))
            } else if let Some(suffix) = name.strip_prefix('…') {
                !defined.iter().any(|d| d.ends_with(suffix))
            } else {
                !defined.contains(name.as_str())
            }
        })
        .collect();
    assert!(missing.is_empty(), "docs/SPEC-COVERAGE.md cites tests that do not exist: {missing:?}");
}

/// Every identifier in the workspace's Rust sources outside comments (types some
/// macros define appear only as such).
fn defined_items() -> std::collections::BTreeSet<String> {
    let mut files = Vec::new();
    for top in ["crates", "bins"] {
        rust_files(&root().join(top), &mut files);
    }
    let mut names = std::collections::BTreeSet::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            names.extend(
                line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .filter(|w| !w.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    names
}

/// ARCHITECTURE.md's code map names paths (`crates/…`, `bins/…`, `scripts/…`, a file
/// such as `keys.rs`) and types (`Fleet`, `Registry<S>`): each must exist, so the
/// map cannot drift from the code it maps.
#[test]
fn every_path_and_type_the_architecture_names_exists() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let defined = defined_items();
    let mut files = Vec::new();
    for top in ["crates", "bins"] {
        rust_files(&root().join(top), &mut files);
    }
    let file_names: std::collections::BTreeSet<String> =
        files.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
    let mut missing = Vec::new();
    for (i, span) in doc.split('`').enumerate() {
        if i % 2 == 0 || span.contains(' ') {
            continue;
        }
        if ["crates/", "bins/", "scripts/", "docs/", "fixtures/", "fuzz/"].iter().any(|p| span.starts_with(p))
        {
            if !root().join(span.trim_end_matches('/')).exists() {
                missing.push(span.to_owned());
            }
        } else if span.ends_with(".rs") && !span.contains('/') {
            if !file_names.contains(span) {
                missing.push(span.to_owned());
            }
        } else if span.starts_with(|c: char| c.is_ascii_uppercase())
            && span.chars().any(|c| c.is_ascii_lowercase())
            && span.chars().all(|c| c.is_ascii_alphanumeric() || "<>:_,&' ".contains(c))
        {
            // A type, possibly with a path or generics: its last segment's name.
            let name = span.split('<').next().unwrap_or(span).rsplit("::").next().unwrap_or(span);
            if !defined.contains(name) {
                missing.push(span.to_owned());
            }
        }
    }
    assert!(missing.is_empty(), "ARCHITECTURE.md names what does not exist: {missing:?}");
}

/// A library user who turns fleet-runtime's features off links no PostgreSQL client
/// (with its TLS stack); with or without them, the runtime links no command-line crate.
#[test]
fn the_runtime_links_no_cli_crate_and_without_its_features_no_postgres() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let tree = |features: &[&str]| {
        let out = std::process::Command::new(&cargo)
            .args(["tree", "-p", "fleet-runtime", "-e", "normal", "--prefix", "none"])
            .args(features)
            .current_dir(root())
            .output()
            .unwrap();
        assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let has = |tree: &str, name: &str| tree.lines().any(|l| l.starts_with(name));
    let (bare, full) = (tree(&["--no-default-features"]), tree(&["--all-features"]));
    for heavy in ["registry-postgres", "postgres ", "rustls"] {
        assert!(!has(&bare, heavy), "{heavy} without features");
    }
    assert!(has(&full, "registry-postgres "), "the postgres feature brings the backend");
    for cli in ["fleet-cli", "clap ", "clap_complete", "clap_mangen", "tracing-subscriber"] {
        assert!(!has(&full, cli), "the runtime links {cli}");
    }
}

/// Nothing below the binaries knows an exit code or parses a command line: only the
/// three binaries link `fleet-cli` or clap.
#[test]
fn only_the_binaries_link_the_command_line_crates() {
    let graph = normal_dependency_graph();
    for krate in workspace_crates(&graph) {
        if ["fleetctl", "fleet-mcp", "fleet-launch", "fleet-cli"].contains(&krate.as_str()) {
            continue;
        }
        let all = reachable(&graph, &krate);
        for cli in ["fleet-cli", "clap"] {
            assert!(!all.iter().any(|d| d == cli), "{krate} reaches {cli}");
        }
    }
}

/// ARCHITECTURE.md's table of crates draws every edge between the workspace's crates,
/// and no edge that is not there.
#[test]
fn the_architecture_draws_every_edge_between_the_crates() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let section = doc.split("### Every edge between the workspace's crates").nth(1).expect("the edge table");
    let crate_names = |cell: &str| -> Vec<String> {
        let mut names: Vec<String> = cell.split('`').skip(1).step_by(2).map(str::to_owned).collect();
        names.sort();
        names
    };
    let drawn: std::collections::BTreeMap<String, Vec<String>> = section
        .lines()
        .skip_while(|l| !l.starts_with("| crate"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_owned(), crate_names(cells[3]))
        })
        .collect();
    let graph = normal_dependency_graph();
    let workspace = workspace_crates(&graph);
    let actual: std::collections::BTreeMap<String, Vec<String>> = workspace
        .iter()
        .map(|name| {
            let mut deps: Vec<String> =
                graph[name].iter().filter(|d| workspace.contains(d)).cloned().collect();
            deps.sort();
            deps.dedup();
            (name.clone(), deps)
        })
        .collect();
    assert_eq!(drawn, actual, "ARCHITECTURE.md's edge table against cargo metadata");
}

/// The binaries parse, call a use case once, and render: no product file under `bins/`
/// opens the store or reaches past the use cases into it. (Their tests may: they check
/// what a command left behind.)
#[test]
fn the_binaries_open_no_store_and_reach_past_no_use_case() {
    let mut files = Vec::new();
    for bin in std::fs::read_dir(root().join("bins")).unwrap().map(Result::unwrap) {
        rust_files(&bin.path().join("src"), &mut files);
    }
    files.retain(|f| f.file_name().is_some_and(|n| n != "tests.rs"));
    assert!(files.len() > 10, "the binaries' sources were not found");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let product = text.split("#[cfg(test)]").next().unwrap_or_default();
        for forbidden in [
            "open_registry",
            "Registry<",
            "OpenMode",
            "with_registry",
            "registry_sqlite",
            "registry_postgres",
        ] {
            assert!(
                !product.contains(forbidden),
                "{} uses {forbidden}: a binary calls a fleet_runtime use case instead",
                file.display()
            );
        }
    }
}

/// The names of the `fn`s declared in `text` between `start` and the first line that is
/// exactly `}` after it.
fn fns_in_block(text: &str, start: &str) -> std::collections::BTreeSet<String> {
    let from = text.find(start).unwrap_or_else(|| panic!("no {start}"));
    let block = &text[from..];
    let end = block.find("\n}\n").unwrap_or(block.len());
    block[..end]
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("fn "))
        .map(|rest| rest.split(['(', '<']).next().unwrap_or_default().to_owned())
        .collect()
}

/// The runtime's store, which is either backend, answers every `Store` method as the
/// backend does: a method it leaves to the trait's default would answer for no backend
/// (a worker asking whether it may still use the schema would always hear yes).
#[test]
fn the_runtimes_store_forwards_every_store_method_to_its_backend() {
    let read = |path: &str| std::fs::read_to_string(root().join(path)).unwrap();
    let declared = fns_in_block(&read("crates/fleet-registry/src/store.rs"), "pub trait Store {");
    let forwarded = fns_in_block(&read("crates/fleet-runtime/src/location.rs"), "impl Store for AnyStore {");
    assert!(declared.len() > 5, "{declared:?}");
    let missing: Vec<_> = declared.difference(&forwarded).collect();
    assert!(missing.is_empty(), "AnyStore leaves {missing:?} to the trait's default");
}
