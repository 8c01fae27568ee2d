//! How a listing prints (`worker list`, `lease show`, `lease audit`): the table by
//! default, or kubectl's `-o json|yaml|wide|name`.

use fleet_cli::{Failure, out};

/// A listing's format other than the default table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// JSON, as `--json` prints it.
    Json,
    /// YAML: the same fields as JSON.
    Yaml,
    /// The table with every value whole at any terminal width, and more columns.
    Wide,
    /// One `KIND/NAME` per line, for scripts.
    Name,
}

/// `-o FORMAT`, and `--json` for `-o json`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OutputArgs {
    /// Print as json, yaml, wide (every value whole, more columns) or name (one
    /// KIND/NAME per line).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", value_enum)]
    output: Option<Format>,
    /// Print JSON (the same as `-o json`).
    #[arg(long, conflicts_with = "output")]
    json: bool,
}

impl OutputArgs {
    /// The format asked for; `None` is the table.
    pub(crate) fn format(&self) -> Option<Format> {
        if self.json { Some(Format::Json) } else { self.output }
    }
}

/// `value` as YAML on stdout.
pub(crate) fn print_yaml(value: &impl serde::Serialize) -> Result<(), Failure> {
    let text = serde_norway::to_string(value)
        .map_err(|e| Failure::store(format!("cannot write the answer as YAML: {e}")))?;
    out!("{text}")
}

/// One `KIND/NAME` line per name.
pub(crate) fn print_names<'a>(kind: &str, names: impl IntoIterator<Item = &'a str>) -> Result<(), Failure> {
    let mut text = String::new();
    for name in names {
        text.push_str(kind);
        text.push('/');
        text.push_str(&crate::table::cell(name));
        text.push('\n');
    }
    out!("{text}")
}
