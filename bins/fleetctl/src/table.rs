//! Plain-text tables for people: columns two spaces apart, no borders, one line per
//! row. Cells are made safe to print first: control characters
//! (a newline, an escape sequence) are shown escaped, so a value can never forge a row
//! or drive the terminal. When stdout is not a terminal every value is printed whole.
//! On a terminal the table is no wider than it and no cell wider than [`MAX_CELL`]:
//! identifiers give way first, abbreviated in the middle (an identity keeps its
//! distinguishing tail), and a phrase (a number with its unit, `expired 3m ago`) is never
//! cut. Nothing is coloured.

use std::io::IsTerminal as _;

/// The widest a cell is printed, in characters.
pub(crate) const MAX_CELL: usize = 64;

/// A cell as it is printed: control characters escaped.
pub(crate) fn cell(raw: &str) -> String {
    raw.chars()
        .flat_map(|c| {
            let shown: Vec<char> = if c.is_control() { c.escape_default().collect() } else { vec![c] };
            shown
        })
        .collect()
}

/// A duration as people read it: its two largest units, `45s`, `12m 30s`, `3h 5m`,
/// `2d 4h`.
pub(crate) fn span(d: time::Duration) -> String {
    let secs = d.whole_seconds().unsigned_abs();
    let (days, hours, minutes, seconds) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, _) if seconds == 0 => format!("{minutes}m"),
        (0, 0, _) => format!("{minutes}m {seconds}s"),
        (0, _, 0) => format!("{hours}h"),
        (0, _, _) => format!("{hours}h {minutes}m"),
        (_, 0, _) => format!("{days}d"),
        _ => format!("{days}d {hours}h"),
    }
}

/// A time given on the command line: RFC 3339, a date (`YYYY-MM-DD`, its first instant
/// UTC), or an age before now, as journalctl and kubectl take one (`90s`, `15m`, `12h`,
/// `7d`, `2w`). The error names the flag.
pub(crate) fn instant(flag: &str, text: &str) -> Result<fleet_identity::Timestamp, fleet_cli::Failure> {
    if let Some(age) = age(text) {
        let millis = fleet_runtime::now().unix_millis().saturating_sub(age);
        return fleet_identity::Timestamp::from_unix_millis(millis).ok_or_else(|| {
            fleet_cli::Failure::usage(format!("{flag}: {text} ago is before any time a registry holds"))
        });
    }
    let date = time::Date::parse(text, time::macros::format_description!("[year]-[month]-[day]"));
    let full = if date.is_ok() { format!("{text}T00:00:00Z") } else { text.to_owned() };
    fleet_identity::Timestamp::parse(&full).map_err(|e| {
        fleet_cli::Failure::usage(format!("{flag}: {e} (or an age before now: 90s, 15m, 12h, 7d, 2w)"))
    })
}

/// The milliseconds of an age such as `15m` or `7d`; `None` for anything else.
fn age(text: &str) -> Option<i64> {
    let unit = text.chars().last()?;
    let seconds: i64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 604_800,
        _ => return None,
    };
    let number = &text[..text.len() - 1];
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    number.parse::<i64>().ok()?.checked_mul(seconds)?.checked_mul(1000)
}

/// When `at` is, from `now`: `in 4m 10s` or `12m 30s ago`.
pub(crate) fn relative(at: fleet_identity::Timestamp, now: fleet_identity::Timestamp) -> String {
    if at >= now { format!("in {}", span(at.since(now))) } else { format!("{} ago", span(now.since(at))) }
}

/// Whether a cell is a phrase that must be shown whole (it has a space: a number with
/// its unit, a duration), not an identifier that may be abbreviated.
fn is_phrase(cell: &str) -> bool {
    cell.contains(' ')
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
/// way one character at a time, down to its header (or eight characters), or to its
/// widest phrase, which is never cut (`floor`).
fn fit(widths: &[usize], floor: &[usize], width: usize) -> Vec<usize> {
    let budget = width.saturating_sub(2 * widths.len().saturating_sub(1));
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

/// Renders `rows` under `header` with every value whole, whatever the terminal
/// (`-o wide`).
pub(crate) fn render_whole(header: &[&str], rows: &[Vec<String>]) -> String {
    render_within(header, rows, None)
}

/// Renders `rows` under `header`, within `width` columns when given (else as wide as
/// the widest cells).
fn render_within(header: &[&str], rows: &[Vec<String>], width: Option<u16>) -> String {
    let mut rows: Vec<Vec<String>> = rows.iter().map(|r| r.iter().map(|c| cell(c)).collect()).collect();
    if let Some(width) = width {
        for row in &mut rows {
            for cell in row.iter_mut().filter(|c| !is_phrase(c)) {
                *cell = shorten(cell, MAX_CELL);
            }
        }
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        let mut floor: Vec<usize> = header.iter().map(|h| h.chars().count().max(8)).collect();
        for row in &rows {
            for ((w, f), cell) in widths.iter_mut().zip(floor.iter_mut()).zip(row) {
                let len = cell.chars().count();
                *w = (*w).max(len);
                if is_phrase(cell) {
                    *f = (*f).max(len);
                }
            }
        }
        let limits = fit(&widths, &floor, usize::from(width));
        for row in &mut rows {
            for (cell, limit) in row.iter_mut().zip(&limits) {
                *cell = shorten(cell, *limit);
            }
        }
    }
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', width - cell.chars().count() + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn spans_read_in_their_two_largest_units() {
        let s = |secs| super::span(time::Duration::seconds(secs));
        assert_eq!(
            [s(0), s(45), s(60), s(750), s(3600), s(11_100), s(86_400), s(187_200)],
            ["0s", "45s", "1m", "12m 30s", "1h", "3h 5m", "1d", "2d 4h"]
        );
        assert_eq!(s(198_830), "2d 7h");
    }
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
    fn at_80_columns_identifiers_give_way_and_a_phrase_keeps_its_number() {
        let row = vec![
            "workflow:deploy-the-whole-production-fleet".to_owned(),
            "wkr-reconciler-0123456789abcdef0123456789abcdef".to_owned(),
            "lease-0123456789abcdef0123456789abcdef".to_owned(),
            "expired 12m 30s ago".to_owned(),
        ];
        let text = super::render_within(&["KEY", "OWNER", "LEASE ID", "STATE"], &[row], Some(80));
        assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
        assert!(text.contains("expired 12m 30s ago"), "{text}");
    }

    #[test]
    fn a_huge_or_hostile_cell_neither_panics_nor_forges_a_row() {
        let huge = "x".repeat(120 * 1024);
        let text = super::render_within(&["OWNER", "EPOCH"], &[vec![huge.clone(), "1".into()]], Some(200));
        assert_eq!(text.lines().count(), 2);
        assert!(text.lines().nth(1).unwrap().chars().count() < 80, "{text}");
        let piped = super::render_within(&["OWNER", "EPOCH"], &[vec![huge.clone(), "1".into()]], None);
        assert!(piped.contains(&huge), "not a terminal: every value whole");
        let forged = "me\nworkflow:x  workflow  root  9\u{1b}[2J";
        let text = super::render(&["OWNER"], &[vec![forged.into()]]);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("\\n") && text.contains("\\u{1b}") && !text.contains('\u{1b}'), "{text}");
    }
}
