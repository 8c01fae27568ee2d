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

/// A result's format other than its text (a report, an outcome): kubectl's
/// `-o json|yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ResultFormat {
    /// JSON, as `--json` prints it.
    Json,
    /// YAML: the same fields as JSON.
    Yaml,
}

/// `-o json|yaml`, and `--json` for `-o json`, on a command that prints a result.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ResultArgs {
    /// Print the result as json or yaml (the same fields either way).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", value_enum)]
    output: Option<ResultFormat>,
    /// Print JSON (the same as `-o json`).
    #[arg(long, conflicts_with = "output")]
    json: bool,
}

impl ResultArgs {
    /// The format asked for; `None` is the command's text.
    pub(crate) fn format(&self) -> Option<ResultFormat> {
        if self.json { Some(ResultFormat::Json) } else { self.output }
    }
}

/// A command's result in `format`: JSON on one line, as `--json` prints it, or YAML.
pub(crate) fn print_result(format: ResultFormat, value: &impl serde::Serialize) -> Result<(), Failure> {
    match format {
        ResultFormat::Json => {
            let text = serde_json::to_string(value)
                .map_err(|e| Failure::store(format!("cannot write the answer as JSON: {e}")))?;
            fleet_cli::outln!("{text}")
        }
        ResultFormat::Yaml => print_yaml(value),
    }
}

/// `value` as YAML on stdout (see [`yaml`]).
pub(crate) fn print_yaml(value: &impl serde::Serialize) -> Result<(), Failure> {
    let value = serde_json::to_value(value)
        .map_err(|e| Failure::store(format!("cannot write the answer as YAML: {e}")))?;
    out!("{}", yaml(&value))
}

/// `value` as block-style YAML that every reader reads back as the same values, YAML
/// 1.1 readers too (PyYAML, Ruby's Psych, Go's yaml.v2), as kubectl writes it: a string
/// is plain only when no reader can take it for anything but that string — it starts
/// with a letter, `_` or `/`, holds only letters, digits and `_-./`, and is none of
/// YAML 1.1's booleans and nulls (`yes`, `on`, `y`, `null`, …) — and is double-quoted
/// otherwise, in JSON's escapes, which YAML's double-quoted style shares.
pub(crate) fn yaml(value: &serde_json::Value) -> String {
    let mut out = String::new();
    match value {
        serde_json::Value::Object(map) if !map.is_empty() => yaml_map(&mut out, map, 0, false),
        serde_json::Value::Array(items) if !items.is_empty() => yaml_seq(&mut out, items, 0),
        other => {
            out.push_str(&yaml_scalar(other).unwrap_or_default());
            out.push('\n');
        }
    }
    out
}

/// A string as YAML: plain where that is unambiguous, else double-quoted.
fn yaml_string(s: &str) -> String {
    const KEYWORDS: [&str; 12] =
        ["y", "n", "yes", "no", "on", "off", "true", "false", "null", "nan", "inf", "~"];
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '_' | '/'))
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'))
        && !KEYWORDS.contains(&s.to_ascii_lowercase().as_str());
    if plain { s.to_owned() } else { serde_json::Value::String(s.to_owned()).to_string() }
}

/// A value that fits on one line (a scalar, an empty map or sequence), as YAML.
fn yaml_scalar(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    Some(match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => yaml_string(s),
        Value::Array(a) if a.is_empty() => "[]".to_owned(),
        Value::Object(m) if m.is_empty() => "{}".to_owned(),
        _ => return None,
    })
}

/// A map's entries at `indent`; the first on the current line when `inline` (after a
/// sequence's `- `).
fn yaml_map(out: &mut String, map: &serde_json::Map<String, serde_json::Value>, indent: usize, inline: bool) {
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 || !inline {
            out.push_str(&" ".repeat(indent));
        }
        out.push_str(&yaml_string(key));
        out.push(':');
        yaml_value(out, value, indent);
    }
}

/// What follows a map key's colon: the value on this line, or nested below it.
fn yaml_value(out: &mut String, value: &serde_json::Value, indent: usize) {
    if let Some(scalar) = yaml_scalar(value) {
        out.push(' ');
        out.push_str(&scalar);
        out.push('\n');
        return;
    }
    out.push('\n');
    match value {
        serde_json::Value::Object(map) => yaml_map(out, map, indent + 2, false),
        serde_json::Value::Array(items) => yaml_seq(out, items, indent),
        _ => {}
    }
}

/// A sequence's items at `indent`, each after `- `.
fn yaml_seq(out: &mut String, items: &[serde_json::Value], indent: usize) {
    for item in items {
        out.push_str(&" ".repeat(indent));
        out.push_str("- ");
        match item {
            serde_json::Value::Object(map) if !map.is_empty() => yaml_map(out, map, indent + 2, true),
            serde_json::Value::Array(inner) if !inner.is_empty() => {
                out.push('\n');
                yaml_seq(out, inner, indent + 2);
            }
            scalar => {
                out.push_str(&yaml_scalar(scalar).unwrap_or_default());
                out.push('\n');
            }
        }
    }
}

/// One `KIND/NAME` line per name.
pub(crate) fn print_names<'a>(kind: &str, names: impl IntoIterator<Item = &'a str>) -> Result<(), Failure> {
    out!("{}", names_text(kind, names))
}

/// One `KIND/NAME` line per name.
fn names_text<'a>(kind: &str, names: impl IntoIterator<Item = &'a str>) -> String {
    let mut text = String::new();
    for name in names {
        text.push_str(kind);
        text.push('/');
        text.push_str(&crate::table::cell(name));
        text.push('\n');
    }
    text
}

/// A listing as `format` asks for it, as one text: the table (`table(true)` for the
/// wide one), `value` as JSON or YAML, or one `KIND/NAME` line per name. What
/// `--watch` draws again and compares.
pub(crate) fn listing<'a>(
    format: Option<Format>,
    table: impl FnOnce(bool) -> String,
    value: &impl serde::Serialize,
    kind: &str,
    names: impl IntoIterator<Item = &'a str>,
) -> Result<String, Failure> {
    let unwritable = |e: serde_json::Error| Failure::store(format!("cannot write the answer: {e}"));
    Ok(match format {
        None => table(false),
        Some(Format::Wide) => table(true),
        // Straight from the rows: no value tree of a large listing in between.
        Some(Format::Json) => serde_json::to_string_pretty(value).map_err(unwritable)? + "\n",
        Some(Format::Yaml) => yaml(&serde_json::to_value(value).map_err(unwritable)?),
        Some(Format::Name) => names_text(kind, names),
    })
}
