//! Plain-text tables for people, laid out by comfy-table: columns two spaces apart, no
//! borders, one line per row, and on a terminal no wider than it: the widest columns
//! give way first, their values abbreviated in the middle (an identity keeps its
//! distinguishing tail).
//! Cells are made safe to print first: control characters (a newline, an escape
//! sequence) are shown escaped, so a value can never forge a row or drive the terminal,
//! and a cell wider than [`MAX_CELL`] is shortened in the middle (`--json` prints every
//! value whole). Nothing is coloured.

use std::io::IsTerminal as _;

use comfy_table::{CellAlignment, ColumnConstraint, Table, presets};

/// The widest a cell is printed, in characters.
pub(crate) const MAX_CELL: usize = 64;

/// A cell as it is printed: control characters escaped, long values shortened.
pub(crate) fn cell(raw: &str) -> String {
    let safe: String = raw
        .chars()
        .flat_map(|c| {
            let shown: Vec<char> = if c.is_control() { c.escape_default().collect() } else { vec![c] };
            shown
        })
        .collect();
    shorten(&safe, MAX_CELL)
}

/// `text` in at most `max` characters (at least 2): the middle replaced by `…`.
fn shorten(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let keep = max.max(2) - 1;
    let head: String = text.chars().take(keep - keep / 3).collect();
    let tail: String = text.chars().skip(count - keep / 3).collect();
    format!("{head}…{tail}")
}

/// How wide each column may be for the table to fit `width`: the widest column gives
/// way one character at a time, down to its header (or eight characters).
fn fit(widths: &[usize], header: &[&str], width: usize) -> Vec<usize> {
    let budget = width.saturating_sub(2 * widths.len().saturating_sub(1));
    let floor: Vec<usize> = header.iter().map(|h| h.chars().count().max(8)).collect();
    let mut limits = widths.to_vec();
    while limits.iter().sum::<usize>() > budget {
        let Some(i) = (0..limits.len()).filter(|&i| limits[i] > floor[i]).max_by_key(|&i| limits[i]) else {
            break;
        };
        limits[i] -= 1;
    }
    limits
}

/// Renders `rows` under `header`, as wide as the terminal when stdout is one.
pub(crate) fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let width =
        std::io::stdout().is_terminal().then(|| terminal_size::terminal_size().map(|(w, _)| w.0)).flatten();
    render_within(header, rows, width)
}

/// Renders `rows` under `header`, within `width` columns when given (else as wide as
/// the widest cells).
fn render_within(header: &[&str], rows: &[Vec<String>], width: Option<u16>) -> String {
    let mut rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()).collect();
    if let Some(width) = width {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let limits = fit(&widths, header, usize::from(width));
        for row in &mut rows {
            for (cell, limit) in row.iter_mut().zip(&limits) {
                *cell = shorten(cell, *limit);
            }
        }
    }
    let mut table = Table::new();
    table.load_preset(presets::NOTHING).set_header(header.iter().copied());
    for row in rows {
        table.add_row(row);
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 2)).set_constraint(ColumnConstraint::ContentWidth);
        column.set_cell_alignment(CellAlignment::Left);
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_line_up() {
        let text = super::render(&["A", "LONG"], &[vec!["wide cell".into(), "x".into()]]);
        assert_eq!(text, "A          LONG\nwide cell  x\n");
    }

    #[test]
    fn on_an_80_column_terminal_no_line_is_wider() {
        let wide = vec![
            "inst-codex-20260730T120000Z-0123456789ab".to_owned(),
            "reconciler".to_owned(),
            "wkr-reconciler-0123456789abcdef0123456789abcdef".to_owned(),
            "4194304".to_owned(),
            "active".to_owned(),
            "owned".to_owned(),
            "2026-07-30T12:00:00.000Z".to_owned(),
        ];
        let header = ["INSTANCE", "NAMESPACE", "WORKER", "PID", "STATUS", "OWNERSHIP", "HEARTBEAT"];
        let text = super::render_within(&header, &[wide.clone(), wide], Some(80));
        assert_eq!(text.lines().count(), 3, "one line per row: {text}");
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        // Abbreviated in the middle: the distinguishing tail is still there.
        assert!(text.contains("…9ab") && text.contains("…def"), "{text}");
    }

    #[test]
    fn a_huge_or_hostile_cell_neither_panics_nor_forges_a_row() {
        let huge = "x".repeat(120 * 1024);
        let text = super::render(&["OWNER", "EPOCH"], &[vec![huge, "1".into()]]);
        assert_eq!(text.lines().count(), 2);
        assert!(text.lines().nth(1).unwrap().chars().count() < 80, "{text}");
        let forged = "me\nworkflow:x  workflow  root  9\u{1b}[2J";
        let text = super::render(&["OWNER"], &[vec![forged.into()]]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("\\n") && text.contains("\\u{1b}") && !text.contains('\u{1b}'), "{text}");
    }
}
