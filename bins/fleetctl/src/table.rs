//! Plain-text tables for people: columns padded to their widest cell. Cells are made
//! safe to print first: control characters (a newline, an escape sequence) are shown
//! escaped, so a value can never forge a row or drive the terminal, and a cell wider
//! than [`MAX_CELL`] is shortened in the middle (`--json` prints every value whole).

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
    let count = safe.chars().count();
    if count <= MAX_CELL {
        return safe;
    }
    let keep = MAX_CELL - 1;
    let head: String = safe.chars().take(keep - keep / 3).collect();
    let tail: String = safe.chars().skip(count - keep / 3).collect();
    format!("{head}…{tail}")
}

/// Renders `rows` under `header`, two spaces between columns.
pub(crate) fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i > 0 {
                out.push_str("  ");
            }
            out.push_str(c);
            // Padding by hand: a format width is limited to 65 535 and would panic.
            out.extend(std::iter::repeat_n(' ', w.saturating_sub(c.chars().count())));
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
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
