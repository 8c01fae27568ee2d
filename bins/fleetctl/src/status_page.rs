//! The fleet as one page for people (`fleetctl serve`, at `/`): the verdict and its
//! counts, the active blockers, and one row per launch with the state of its worker in
//! each namespace. Plain HTML that refreshes itself every few seconds; no script, no
//! outside resource. Every value from the registry is escaped.

use std::fmt::Write as _;

use fleet_identity::Namespace;
use fleet_snapshot::{FleetSnapshot, WorkerState};

/// The most launches (and blockers) the page lists; the counts cover the rest.
const MAX_ROWS: usize = 500;

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

/// `n` with its noun, singular or plural.
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn state(state: WorkerState) -> &'static str {
    match state {
        WorkerState::Live => "live",
        WorkerState::Stale => "stale",
        WorkerState::Historical => "historical",
    }
}

/// The page for `snap`.
pub(crate) fn page(snap: &FleetSnapshot<'_>) -> String {
    let verdict = if snap.live_fleet_safe { "SAFE" } else { "UNSAFE" };
    let c = &snap.counts;
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"5\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>Fleet {verdict}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:1.5rem}}\
         table{{border-collapse:collapse;margin:0.5rem 0 1.5rem}}\
         td,th{{border:1px solid #ccc;padding:0.2rem 0.5rem;text-align:left;font-size:0.9rem}}\
         .SAFE{{color:#075e07}}.UNSAFE{{color:#a40000}}.live{{background:#e3f6e3}}\
         .stale{{background:#fde2e2}}.historical{{color:#777}}\
         </style></head><body>\n\
         <h1 id=\"verdict\" class=\"{verdict}\">Fleet {verdict}</h1>\n\
         <p>at {at}: {instances}, {live}, {stale} stale, {historical} historical, {blockers}. \
         This page reloads every 5 s.</p>\n",
        at = escape(&snap.snapshot_at.to_string()),
        instances = counted(c.instance_count, "launch", "launches"),
        live = counted(c.live_worker_count, "live worker", "live workers"),
        stale = c.stale_worker_count,
        historical = c.historical_row_count,
        blockers = counted(c.active_blocker_count, "active blocker", "active blockers"),
    );
    let blockers: Vec<_> = snap.findings.iter().filter(|f| f.active_blocker).collect();
    if !blockers.is_empty() {
        html.push_str(
            "<h2>Active blockers</h2>\n<table id=\"blockers\"><tr><th>code</th><th>launch</th>\
             <th>namespace</th><th>workers</th><th>detail</th></tr>\n",
        );
        for f in blockers.iter().take(MAX_ROWS) {
            let workers: Vec<&str> = f.worker_identities.iter().map(|w| w.as_str()).collect();
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                f.code.as_str(),
                escape(f.client_instance_id.as_deref().unwrap_or("-")),
                f.namespace.map_or("-", Namespace::as_str),
                escape(&workers.join(" ")),
                escape(&f.detail),
            );
        }
        html.push_str("</table>\n");
        if blockers.len() > MAX_ROWS {
            let _ = writeln!(
                html,
                "<p>and {} more: <code>fleetctl snapshot</code></p>",
                blockers.len() - MAX_ROWS
            );
        }
    }
    html.push_str("<h2>Launches</h2>\n<table id=\"launches\"><tr><th>launch</th><th>client</th>");
    for ns in Namespace::ALL {
        let _ = write!(html, "<th>{}</th>", ns.as_str());
    }
    html.push_str("</tr>\n");
    let mut states: std::collections::HashMap<(Option<&str>, Namespace), Vec<&str>> =
        std::collections::HashMap::new();
    for w in &snap.workers {
        states.entry((w.client_instance_id(), w.row.namespace)).or_default().push(state(w.state));
    }
    for instance in snap.instances.iter().take(MAX_ROWS) {
        let id = instance.client_instance_id;
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{}</td>",
            escape(id.unwrap_or("-")),
            escape(instance.client_type.unwrap_or("-"))
        );
        for ns in Namespace::ALL {
            let here = states.get(&(id, ns)).map_or(&[][..], Vec::as_slice);
            let class = here.first().copied().unwrap_or("");
            let shown = if here.is_empty() { "-".to_owned() } else { here.join(", ") };
            let _ = write!(html, "<td class=\"{class}\">{shown}</td>");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    if snap.instances.len() > MAX_ROWS {
        let _ = writeln!(
            html,
            "<p>and {} more launches: <code>fleetctl snapshot</code></p>",
            snap.instances.len() - MAX_ROWS
        );
    }
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    #[test]
    fn markup_in_a_value_is_shown_never_run() {
        assert_eq!(
            super::escape("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;"
        );
        assert_eq!(super::escape("a\nb"), "a\\nb");
    }
}
