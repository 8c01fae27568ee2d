//! The five namespace-worker entries, written in each agent client's own config format,
//! and merged into (or removed from) an existing config file without disturbing anything
//! else in it.
//!
//! The entries are identity-free: they name the server and the variables it needs, never
//! their values, so one file can be committed and shared by every launch. Each launch's
//! identity reaches the servers by the client's own forwarding rule:
//!
//! | client | file | forwarding |
//! | --- | --- | --- |
//! | Codex | `config.toml`, `[mcp_servers.NAME]` | `env_vars`: names copied from Codex's environment |
//! | Claude Code | `.mcp.json` / `~/.claude.json`, `mcpServers` | `${VAR:-}` expanded in `env` |
//! | Cursor | `.cursor/mcp.json`, `mcpServers` | `${env:VAR}` expanded in `env` |
//! | Gemini CLI | `.gemini/settings.json`, `mcpServers` | `${VAR}` expanded in `env` |
//! | VS Code | `.vscode/mcp.json`, `servers` with `type: stdio` | `${env:VAR}` expanded in `env` |

use std::path::{Path, PathBuf};

use clap::ValueEnum;
use fleet_identity::Namespace;
use fleet_runtime::{AgentClient as Client, vars};
use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};

/// Where a config file lives: the user's own, or the project's (committed and shared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scope {
    /// The user's config, for every project.
    User,
    /// The project's config in the current directory.
    Project,
}

/// Why a config file could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The file is not valid in its format.
    #[error("{path} is not valid {format}: {detail}")]
    Unparsable {
        /// The file.
        path: String,
        /// TOML or JSON.
        format: &'static str,
        /// The parser's complaint.
        detail: String,
    },
    /// An entry of one of our names runs another program: it is the user's.
    #[error("{path}: {name} already runs {command:?}, not fleet-mcp; rename or remove it first")]
    Foreign {
        /// The file.
        path: String,
        /// The entry.
        name: String,
        /// What it runs.
        command: String,
    },
    /// A file this edit would replace whole was not written by Fleetward: it is the
    /// user's.
    #[error(
        "{path} exists and is not one Fleetward wrote (its first line is not Fleetward's); move it aside, or add the rules to it by hand"
    )]
    NotOurs {
        /// The file.
        path: String,
    },
    /// A key this edit must write into holds something else.
    #[error("{path}: {key} is not a table/object, so the entries cannot be merged into it")]
    NotATable {
        /// The file.
        path: String,
        /// The key.
        key: String,
    },
}

/// The name of the entry that runs `namespace`.
pub fn entry_name(namespace: Namespace) -> String {
    format!("gitea-{namespace}")
}

/// Where each client keeps its config, and how it names the variables it forwards.
pub trait ClientConfig {
    /// The config file for `scope`, given the user's home and the project directory.
    fn config_path(self, scope: Scope, home: &Path, project: &Path, codex_home: Option<&Path>) -> PathBuf;
    /// The scope `install` uses when none is given.
    fn default_scope(self) -> Scope;
    /// A reference to `var` that the client replaces with its own value.
    fn reference(self, var: &str) -> String;
    /// The key under which the file holds its servers.
    fn servers_key(self) -> &'static str;
}

impl ClientConfig for Client {
    /// The config file for `scope`, given the user's home and the project directory.
    fn config_path(self, scope: Scope, home: &Path, project: &Path, codex_home: Option<&Path>) -> PathBuf {
        match (self, scope) {
            (Client::Codex, Scope::User) => {
                codex_home.map_or_else(|| home.join(".codex"), Path::to_path_buf).join("config.toml")
            }
            (Client::Codex, Scope::Project) => project.join(".codex/config.toml"),
            (Client::ClaudeCode, Scope::User) => home.join(".claude.json"),
            (Client::ClaudeCode, Scope::Project) => project.join(".mcp.json"),
            (Client::Cursor, Scope::User) => home.join(".cursor/mcp.json"),
            (Client::Cursor, Scope::Project) => project.join(".cursor/mcp.json"),
            (Client::Gemini, Scope::User) => home.join(".gemini/settings.json"),
            (Client::Gemini, Scope::Project) => project.join(".gemini/settings.json"),
            (Client::Vscode, Scope::User) => home.join(".config/Code/User/mcp.json"),
            (Client::Vscode, Scope::Project) => project.join(".vscode/mcp.json"),
        }
    }

    /// The scope `install` uses when none is given: Codex reads a project's config only
    /// in trusted projects, so its default is the user's file; the others' project file
    /// is the one a team commits.
    fn default_scope(self) -> Scope {
        match self {
            Client::Codex => Scope::User,
            _ => Scope::Project,
        }
    }

    /// A reference to `var` that this client replaces with the value from its own
    /// environment when it starts a server.
    fn reference(self, var: &str) -> String {
        match self {
            // An unset `${VAR}` makes Claude Code drop the server silently; with an empty
            // default the server starts and says which variable is missing.
            Client::ClaudeCode => format!("${{{var}:-}}"),
            Client::Cursor | Client::Vscode => format!("${{env:{var}}}"),
            Client::Gemini => format!("${{{var}}}"),
            Client::Codex => var.to_owned(),
        }
    }

    /// The key under which the file holds its servers.
    fn servers_key(self) -> &'static str {
        match self {
            Client::Codex => "mcp_servers",
            Client::Vscode => "servers",
            _ => "mcpServers",
        }
    }
}

/// One server entry, before it is written in a client's format.
#[derive(Debug)]
struct Entry {
    name: String,
    args: [String; 4],
    /// Fixed variables, then (outside Codex) references to the forwarded ones.
    env: Vec<(String, String)>,
}

/// The five entries, in namespace order.
fn entries(client: Client) -> Vec<Entry> {
    Namespace::ALL
        .into_iter()
        .map(|ns| {
            let mut env = vec![(vars::PROFILE.to_owned(), ns.as_str().to_owned())];
            if client != Client::Codex {
                env.extend(vars::FORWARDED.iter().map(|var| ((*var).to_owned(), client.reference(var))));
            }
            Entry {
                name: entry_name(ns),
                args: [
                    "--namespace".into(),
                    ns.as_str().into(),
                    "--config-client".into(),
                    client.as_str().into(),
                ],
                env,
            }
        })
        .collect()
}

/// An entry as the JSON clients write it: `type` (where the client takes one), `command`,
/// `args`, `env`, in that order.
fn json_entry(client: Client, command: &str, entry: &Entry) -> CstInputValue {
    let strings = |items: &[String]| CstInputValue::Array(items.iter().map(|s| s.as_str().into()).collect());
    let mut fields = Vec::new();
    if client != Client::Gemini {
        fields.push(("type".to_owned(), "stdio".into()));
    }
    fields.push(("command".to_owned(), command.into()));
    fields.push(("args".to_owned(), strings(&entry.args)));
    let env = entry.env.iter().map(|(k, v)| (k.clone(), v.as_str().into())).collect();
    fields.push(("env".to_owned(), CstInputValue::Object(env)));
    CstInputValue::Object(fields)
}

/// The config file holding only the five entries: what `config` prints and what
/// `install` writes into an empty file. The same on every call.
pub fn render(client: Client, command: &str) -> String {
    let fresh = merge(client, command, "", Path::new("-"));
    // Merging into an empty document cannot fail.
    fresh.unwrap_or_default()
}

/// `existing` with the five entries added or replaced, everything else kept as written.
pub fn merge(client: Client, command: &str, existing: &str, path: &Path) -> Result<String, EditError> {
    match client {
        Client::Codex => merge_toml(client, command, existing, path),
        _ => merge_json(client, command, existing, path),
    }
}

/// `existing` without the five entries this launcher writes; entries of the same name
/// that run another program are the user's, and stay.
pub fn remove(client: Client, existing: &str, path: &Path) -> Result<String, EditError> {
    match client {
        Client::Codex => remove_toml(existing, path),
        _ => remove_json(client, existing, path),
    }
}

/// Whether an entry's command is a `fleet-mcp` (ours, to replace or remove).
fn runs_fleet_mcp(command: Option<&str>) -> bool {
    command.and_then(|c| Path::new(c).file_name()).is_some_and(|name| name == "fleet-mcp")
}

/// Refuses to overwrite an entry of one of our names that runs something else.
fn refuse_foreign(path: &Path, name: &str, existing: Option<Option<String>>) -> Result<(), EditError> {
    match existing {
        Some(command) if !runs_fleet_mcp(command.as_deref()) => Err(EditError::Foreign {
            path: path.display().to_string(),
            name: name.to_owned(),
            command: command.unwrap_or_default(),
        }),
        _ => Ok(()),
    }
}

fn toml_doc(existing: &str, path: &Path) -> Result<toml_edit::DocumentMut, EditError> {
    existing.parse().map_err(|e: toml_edit::TomlError| EditError::Unparsable {
        path: path.display().to_string(),
        format: "TOML",
        detail: e.to_string().lines().next().unwrap_or_default().to_owned(),
    })
}

fn toml_servers<'d>(
    doc: &'d mut toml_edit::DocumentMut,
    path: &Path,
) -> Result<&'d mut toml_edit::Table, EditError> {
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut table = toml_edit::Table::new();
        table.set_implicit(true);
        toml_edit::Item::Table(table)
    });
    servers
        .as_table_mut()
        .ok_or_else(|| EditError::NotATable { path: path.display().to_string(), key: "mcp_servers".into() })
}

fn merge_toml(client: Client, command: &str, existing: &str, path: &Path) -> Result<String, EditError> {
    let mut doc = toml_doc(existing, path)?;
    let servers = toml_servers(&mut doc, path)?;
    for entry in entries(client) {
        let mut table = toml_edit::Table::new();
        table.insert("command", toml_edit::value(command));
        table.insert("args", toml_edit::value(entry.args.iter().collect::<toml_edit::Array>()));
        table.insert(
            "env_vars",
            toml_edit::value(vars::FORWARDED.iter().copied().collect::<toml_edit::Array>()),
        );
        let mut env = toml_edit::InlineTable::new();
        for (k, v) in &entry.env {
            env.insert(k, v.as_str().into());
        }
        table.insert("env", toml_edit::value(env));
        let name = entry.name;
        let existing =
            servers.get(&name).map(|e| e.get("command").and_then(|c| c.as_str()).map(str::to_owned));
        refuse_foreign(path, &name, existing)?;
        match servers.get_mut(&name).and_then(toml_edit::Item::as_table_mut) {
            // Replace in place, keeping the table's position, its leading comments and
            // the user's per-tool settings (`tools.NAME.approval_mode`, …).
            Some(old) => {
                let decor = old.decor().clone();
                if let Some(tools) = old.remove("tools") {
                    table.insert("tools", tools);
                }
                *old = table;
                *old.decor_mut() = decor;
            }
            None => {
                servers.insert(&name, toml_edit::Item::Table(table));
            }
        }
    }
    Ok(doc.to_string())
}

fn remove_toml(existing: &str, path: &Path) -> Result<String, EditError> {
    let mut doc = toml_doc(existing, path)?;
    if let Some(servers) = doc.get_mut("mcp_servers").and_then(toml_edit::Item::as_table_mut) {
        for ns in Namespace::ALL {
            let name = entry_name(ns);
            let ours = servers.get(&name).and_then(|e| e.get("command")).and_then(|c| c.as_str());
            if runs_fleet_mcp(ours) {
                servers.remove(&name);
            }
        }
    }
    Ok(doc.to_string())
}

fn json_root(existing: &str, path: &Path) -> Result<CstRootNode, EditError> {
    // An empty file is an empty config.
    let text = if existing.trim().is_empty() { "{}\n" } else { existing };
    CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| EditError::Unparsable {
        path: path.display().to_string(),
        format: "JSON",
        detail: e.to_string(),
    })
}

fn json_object(root: &CstRootNode, path: &Path) -> Result<CstObject, EditError> {
    root.object_value_or_create()
        .ok_or_else(|| EditError::NotATable { path: path.display().to_string(), key: "the top level".into() })
}

fn merge_json(client: Client, command: &str, existing: &str, path: &Path) -> Result<String, EditError> {
    let root = json_root(existing, path)?;
    let top = json_object(&root, path)?;
    let key = client.servers_key();
    let servers = top
        .object_value_or_create(key)
        .ok_or_else(|| EditError::NotATable { path: path.display().to_string(), key: key.to_owned() })?;
    for entry in entries(client) {
        let value = json_entry(client, command, &entry);
        let existing = servers.get(&entry.name).map(|prop| {
            let value = prop.value().and_then(|v| v.to_serde_value());
            value.and_then(|v| v["command"].as_str().map(str::to_owned))
        });
        refuse_foreign(path, &entry.name, existing)?;
        match servers.get(&entry.name) {
            Some(prop) => prop.set_value(value),
            None => {
                servers.append(&entry.name, value);
            }
        }
    }
    let mut text = root.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

fn remove_json(client: Client, existing: &str, path: &Path) -> Result<String, EditError> {
    let root = json_root(existing, path)?;
    let top = json_object(&root, path)?;
    if let Some(servers) = top.object_value(client.servers_key()) {
        for ns in Namespace::ALL {
            let Some(prop) = servers.get(&entry_name(ns)) else { continue };
            let value = prop.value().and_then(|v| v.to_serde_value());
            if runs_fleet_mcp(value.as_ref().and_then(|v| v["command"].as_str())) {
                prop.remove();
            }
        }
    }
    Ok(root.to_string())
}

/// The tools each namespace's server lists that only read (`readOnlyHint: true`): the
/// runtime context everywhere, the snapshot and the plan for the fleet roles. What
/// `install --allow-read-only` lets run without a prompt; never a tool that writes.
pub fn read_only_tools(namespace: Namespace) -> impl Iterator<Item = &'static str> {
    fleet_runtime::McpTool::listed(namespace).filter(|t| t.read_only()).map(fleet_runtime::McpTool::as_str)
}

/// What `install --allow-read-only` does for each client, by its own settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnlyApproval {
    /// Codex: `approval_mode = "approve"` per tool, in the entries' own file.
    CodexPerTool,
    /// Claude Code: `permissions.allow` rules in its settings file beside the config.
    ClaudePermissions,
    /// Gemini CLI: an `allow` rule per tool in a policy file of the user's policies
    /// directory. Its default policy asks before any MCP tool, `readOnlyHint` or not,
    /// and a headless run (`gemini -p`) leaves out every tool that would ask.
    GeminiPolicy,
    /// Cursor and VS Code keep approvals in their own interface: nothing to write.
    NoSetting,
}

/// How `client` lets read-only tools run without a prompt.
pub fn read_only_approval(client: Client) -> ReadOnlyApproval {
    match client {
        Client::Codex => ReadOnlyApproval::CodexPerTool,
        Client::ClaudeCode => ReadOnlyApproval::ClaudePermissions,
        Client::Gemini => ReadOnlyApproval::GeminiPolicy,
        Client::Cursor | Client::Vscode => ReadOnlyApproval::NoSetting,
    }
}

/// A Codex config with `approval_mode = "approve"` on each read-only tool of our five
/// entries (Codex's per-tool override, `[mcp_servers.NAME.tools.TOOL]`). The entries
/// must be there already; an entry that runs something else is left alone.
pub fn approve_read_only_codex(existing: &str, path: &Path) -> Result<String, EditError> {
    let mut doc = toml_doc(existing, path)?;
    let servers = toml_servers(&mut doc, path)?;
    for ns in Namespace::ALL {
        let Some(entry) = servers.get_mut(&entry_name(ns)).and_then(toml_edit::Item::as_table_mut) else {
            continue;
        };
        if !runs_fleet_mcp(entry.get("command").and_then(|c| c.as_str())) {
            continue;
        }
        let tools = entry.entry("tools").or_insert_with(|| {
            let mut table = toml_edit::Table::new();
            table.set_implicit(true);
            toml_edit::Item::Table(table)
        });
        let tools = tools
            .as_table_mut()
            .ok_or_else(|| EditError::NotATable { path: path.display().to_string(), key: "tools".into() })?;
        for tool in read_only_tools(ns) {
            let mut approval = toml_edit::Table::new();
            approval.insert("approval_mode", toml_edit::value("approve"));
            tools.insert(tool, toml_edit::Item::Table(approval));
        }
    }
    Ok(doc.to_string())
}

/// The policy file `install --client gemini --allow-read-only` writes: in the user's
/// policies directory, the one Gemini CLI reads in every run (a project's
/// `.gemini/policies` is not read by a headless run).
pub fn gemini_policy_path(home: &Path) -> PathBuf {
    home.join(".gemini/policies/fleetward-read-only.toml")
}

/// The first line of [`gemini_read_only_policy`]: how `uninstall` knows the file is ours.
pub const GEMINI_POLICY_HEADER: &str =
    "# fleetward: the fleet servers' read-only tools run without a prompt.";

/// Gemini CLI policy rules (its policy engine's TOML) that allow each read-only tool of
/// the five entries, and nothing else.
pub fn gemini_read_only_policy() -> String {
    let mut text = format!(
        "{GEMINI_POLICY_HEADER}\n# Written by `fleet-launch install --client gemini --allow-read-only`; \
         `fleet-launch uninstall --client gemini` removes it.\n"
    );
    for ns in Namespace::ALL {
        let tools: toml_edit::Array = read_only_tools(ns).collect();
        let mut rule = toml_edit::Table::new();
        rule.insert("mcpName", toml_edit::value(entry_name(ns)));
        rule.insert("toolName", toml_edit::value(tools));
        rule.insert("decision", toml_edit::value("allow"));
        rule.insert("priority", toml_edit::value(100));
        let mut doc = toml_edit::DocumentMut::new();
        let mut rules = toml_edit::ArrayOfTables::new();
        rules.push(rule);
        doc.insert("rule", toml_edit::Item::ArrayOfTables(rules));
        text.push('\n');
        text.push_str(&doc.to_string());
    }
    text
}

/// The policy file's new text, given what is there: written when the file is missing
/// or empty or one Fleetward wrote (its first line says so), refused otherwise — the
/// same test by which `uninstall` leaves a file alone.
pub fn gemini_policy_edit(current: &str, path: &Path) -> Result<String, EditError> {
    if current.trim().is_empty() || current.starts_with(GEMINI_POLICY_HEADER) {
        Ok(gemini_read_only_policy())
    } else {
        Err(EditError::NotOurs { path: path.display().to_string() })
    }
}

/// Claude Code's settings file that sits with `config`: `.claude/settings.json` beside a
/// project's `.mcp.json`, `~/.claude/settings.json` for the user's `~/.claude.json`.
pub fn claude_settings_path(config: &Path) -> PathBuf {
    config.parent().unwrap_or(Path::new(".")).join(".claude/settings.json")
}

/// Claude Code's permission rule for one MCP tool: `mcp__SERVER__TOOL`.
fn claude_rule(namespace: Namespace, tool: &str) -> String {
    format!("mcp__{}__{tool}", entry_name(namespace))
}

/// Claude Code settings with a `permissions.allow` rule for each read-only tool of the
/// five entries added (once), everything else kept as written.
pub fn allow_read_only_claude(existing: &str, path: &Path) -> Result<String, EditError> {
    let root = json_root(existing, path)?;
    let top = json_object(&root, path)?;
    let permissions = top.object_value_or_create("permissions").ok_or_else(|| EditError::NotATable {
        path: path.display().to_string(),
        key: "permissions".into(),
    })?;
    let allow = permissions.array_value_or_create("allow").ok_or_else(|| EditError::NotATable {
        path: path.display().to_string(),
        key: "permissions.allow".into(),
    })?;
    let present: Vec<String> =
        allow.elements().iter().filter_map(|e| e.to_serde_value()?.as_str().map(str::to_owned)).collect();
    for ns in Namespace::ALL {
        for tool in read_only_tools(ns) {
            let rule = claude_rule(ns, tool);
            if !present.contains(&rule) {
                allow.append(CstInputValue::String(rule));
            }
        }
    }
    let mut text = root.to_string();
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Claude Code settings without the rules [`allow_read_only_claude`] adds.
pub fn disallow_read_only_claude(existing: &str, path: &Path) -> Result<String, EditError> {
    let root = json_root(existing, path)?;
    let top = json_object(&root, path)?;
    let ours: Vec<String> = Namespace::ALL
        .into_iter()
        .flat_map(|ns| read_only_tools(ns).map(move |tool| claude_rule(ns, tool)))
        .collect();
    if let Some(allow) = top.object_value("permissions").and_then(|p| p.array_value("allow")) {
        for element in allow.elements() {
            if element
                .to_serde_value()
                .and_then(|v| v.as_str().map(str::to_owned))
                .is_some_and(|r| ours.contains(&r))
            {
                element.remove();
            }
        }
    }
    Ok(root.to_string())
}
