//! Shell completions and manual pages for the binaries, from their clap commands: what
//! a person types is offered (never an internal command), and every subcommand gets a
//! page of its own, so the pages a page names exist.

use std::path::Path;

use crate::Failure;

/// The shells completions are written for.
pub use clap_complete::Shell;

/// `cmd` without its hidden subcommands (internal ones such as `__gate`), at any depth.
pub fn public(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    strip_hidden(cmd)
}

fn strip_hidden(cmd: clap::Command) -> clap::Command {
    let visible: Vec<clap::Command> =
        cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned().map(strip_hidden).collect();
    if visible.len() == cmd.get_subcommands().count() {
        return cmd.mut_subcommands(strip_hidden);
    }
    // clap cannot remove a subcommand: the command is rebuilt with the visible ones and
    // the arguments it was built with (`--help` and `--version` among them).
    let mut rebuilt = clap::Command::new(cmd.get_name().to_owned())
        .disable_help_flag(true)
        .disable_version_flag(true)
        .args(cmd.get_arguments().cloned())
        .subcommands(visible);
    if let Some(about) = cmd.get_about() {
        rebuilt = rebuilt.about(about.clone());
    }
    if let Some(about) = cmd.get_long_about() {
        rebuilt = rebuilt.long_about(about.clone());
    }
    if let Some(after) = cmd.get_after_help() {
        rebuilt = rebuilt.after_help(after.clone());
    }
    if let Some(version) = cmd.get_version() {
        rebuilt = rebuilt.version(version.to_owned());
    }
    rebuilt.disable_help_subcommand(true)
}

/// The completion script of `shell` for `cmd`'s public commands.
pub fn completions(cmd: clap::Command, shell: Shell) -> String {
    let mut cmd = public(cmd);
    let name = cmd.get_name().to_owned();
    let mut text = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut text);
    String::from_utf8_lossy(&text).into_owned()
}

/// What the binaries read from their environment, for every manual page's ENVIRONMENT
/// section (besides the options that name a variable of their own).
pub const ENVIRONMENT: [(&str, &str); 6] = [
    (
        "FLEET_REGISTRY",
        "Where the registry is: a SQLite file, sqlite://PATH or postgres://… (the default of --registry).",
    ),
    (
        "GITEA_MCP_CLIENT, GITEA_MCP_CLIENT_INSTANCE, GITEA_MCP_INSTANCE_PROVENANCE, GITEA_MCP_CLIENT_SESSION, \
         GITEA_MCP_FLEET_RUN_ID, GITEA_CLIENT_MANAGED, GITEA_MCP_LAUNCH_PROCESS",
        "The launch a worker belongs to, as fleet-launch hands it out (fleet-launch mint --json, fleet-launch run); \
         read by fleetctl worker run and fleet-mcp.",
    ),
    ("GITEA_MCP_PROFILE", "The role profile a fleet-mcp server runs under."),
    ("FLEET_PROFILES", "Where fleet-mcp reads its profiles (refused unless private)."),
    (
        "FLEET_REMOTES",
        "The remotes a retirement's audit context may name, comma-separated (any name when unset).",
    ),
    ("RUST_LOG", "Which log events go to stderr (default warn; info shows every mutation and refusal)."),
];

/// The manual page of `cmd` itself (roff).
pub fn manual(cmd: clap::Command) -> Result<String, Failure> {
    let cmd = public(cmd);
    let exit_status = exit_status(&cmd);
    let text = page(&cmd, exit_status.as_deref())
        .map_err(|e| Failure::store(format!("cannot render the manual: {e}")))?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// The "Exit codes:" block of the root command's help, which every page repeats.
fn exit_status(root: &clap::Command) -> Option<String> {
    let after = root.get_after_help()?.to_string();
    after.split("\n\n").find(|block| block.starts_with("Exit codes:")).map(str::to_owned)
}

/// One page: clap_mangen's sections, then EXAMPLES, NOTES, EXIT STATUS and ENVIRONMENT
/// from the command's help and the binary's, then the version.
fn page(cmd: &clap::Command, exit_status: Option<&str>) -> std::io::Result<Vec<u8>> {
    use clap_mangen::roff::{Roff, bold, roman};
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut out)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::default();
    let after = cmd.get_after_help().map(ToString::to_string).unwrap_or_default();
    let mut notes = Vec::new();
    for block in after.split("\n\n").filter(|b| !b.trim().is_empty()) {
        if let Some(examples) = block.strip_prefix("Examples:\n") {
            roff.control("SH", ["EXAMPLES"]);
            roff.control("nf", []);
            roff.text([roman(examples.lines().map(str::trim_start).collect::<Vec<_>>().join("\n"))]);
            roff.control("fi", []);
        } else if !block.starts_with("Exit codes:") {
            notes.push(block);
        }
    }
    if !notes.is_empty() {
        roff.control("SH", ["NOTES"]);
        for note in notes {
            roff.text([roman(note)]);
            roff.control("PP", []);
        }
    }
    if let Some(codes) = exit_status {
        roff.control("SH", ["EXIT STATUS"]);
        for line in codes.lines().skip(1) {
            let line = line.trim_start();
            let (code, meaning) = line.split_once("  ").unwrap_or(("", line));
            roff.control("TP", []);
            roff.text([bold(code)]);
            roff.text([roman(meaning.trim())]);
        }
    }
    roff.control("SH", ["ENVIRONMENT"]);
    let own: Vec<(String, String)> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| {
            let var = a.get_env()?.to_string_lossy().into_owned();
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            Some((var, help))
        })
        .filter(|(var, _)| ENVIRONMENT.iter().all(|(known, _)| known != var))
        .collect();
    for (var, text) in ENVIRONMENT.iter().map(|(v, t)| ((*v).to_owned(), (*t).to_owned())).chain(own) {
        roff.control("TP", []);
        roff.text([bold(var)]);
        roff.text([roman(text)]);
    }
    roff.to_writer(&mut out)?;
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// Writes a page for `cmd` and one for each public subcommand, at every depth
/// (`fleetctl.1`, `fleetctl-registry.1`, `fleetctl-registry-init.1`, …), into `dir`, each
/// by the project's rule for user files; returns the files written. Every page carries
/// the binary's EXIT STATUS and ENVIRONMENT, and EXAMPLES where its help has them.
pub fn write_manuals(cmd: clap::Command, dir: &Path) -> Result<Vec<std::path::PathBuf>, Failure> {
    fn pages(
        cmd: clap::Command,
        exit_status: Option<&str>,
        dir: &Path,
        out: &mut Vec<std::path::PathBuf>,
    ) -> Result<(), Failure> {
        for sub in cmd.get_subcommands().cloned() {
            pages(sub, exit_status, dir, out)?;
        }
        let text =
            page(&cmd, exit_status).map_err(|e| Failure::store(format!("cannot render the manual: {e}")))?;
        let path = dir.join(clap_mangen::Man::new(cmd).get_filename());
        fleet_runtime::user_file::replace(&path, &text)
            .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
        out.push(path);
        Ok(())
    }
    let root = public(cmd);
    let exit_status = exit_status(&root);
    let mut written = Vec::new();
    pages(root, exit_status.as_deref(), dir, &mut written)?;
    Ok(written)
}

/// `cmd` with "Examples:" in the help of each subcommand `examples` names by its path
/// (`"registry init"`), after whatever help it already ends with.
pub fn with_examples(cmd: clap::Command, examples: &[(&str, &str)]) -> clap::Command {
    fn decorate(cmd: clap::Command, path: &str, examples: &[(&str, &str)]) -> clap::Command {
        let cmd = cmd.mut_subcommands(|sub| {
            let name = sub.get_name().to_owned();
            let sub_path = if path.is_empty() { name } else { format!("{path} {name}") };
            decorate(sub, &sub_path, examples)
        });
        match examples.iter().find(|(p, _)| *p == path) {
            Some((_, lines)) => {
                let shown: Vec<String> = lines.lines().map(|l| format!("  {l}")).collect();
                let text = format!("Examples:\n{}", shown.join("\n"));
                let after = match cmd.get_after_help() {
                    Some(existing) => format!("{text}\n\n{existing}"),
                    None => text,
                };
                cmd.after_help(after)
            }
            None => cmd,
        }
    }
    decorate(cmd, "", examples)
}

/// The paths of `cmd`'s public subcommands that have no subcommands of their own.
pub fn leaf_paths(cmd: &clap::Command) -> Vec<String> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
            let sub_path = if path.is_empty() {
                sub.get_name().to_owned()
            } else {
                format!("{path} {}", sub.get_name())
            };
            if sub.get_subcommands().any(|s| s.get_name() != "help") {
                walk(sub, &sub_path, out);
            } else {
                out.push(sub_path);
            }
        }
    }
    let mut out = Vec::new();
    walk(cmd, "", &mut out);
    out
}
