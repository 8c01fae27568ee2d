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

/// The manual page of `cmd` itself (roff).
pub fn manual(cmd: clap::Command) -> Result<String, Failure> {
    let mut text = Vec::new();
    clap_mangen::Man::new(public(cmd))
        .render(&mut text)
        .map_err(|e| Failure::store(format!("cannot render the manual: {e}")))?;
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// Writes a page for `cmd` and one for each public subcommand, at every depth
/// (`fleetctl.1`, `fleetctl-registry.1`, `fleetctl-registry-init.1`, …), into `dir`, each
/// by the project's rule for user files; returns the files written.
pub fn write_manuals(cmd: clap::Command, dir: &Path) -> Result<Vec<std::path::PathBuf>, Failure> {
    fn pages(cmd: clap::Command, dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), Failure> {
        for sub in cmd.get_subcommands().cloned() {
            pages(sub, dir, out)?;
        }
        let man = clap_mangen::Man::new(cmd);
        let mut text = Vec::new();
        man.render(&mut text).map_err(|e| Failure::store(format!("cannot render the manual: {e}")))?;
        let path = dir.join(man.get_filename());
        fleet_runtime::user_file::replace(&path, &text)
            .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
        out.push(path);
        Ok(())
    }
    let mut written = Vec::new();
    pages(public(cmd), dir, &mut written)?;
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
