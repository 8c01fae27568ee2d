//! The fleet as one page for people (`fleetctl serve`, at `/`): the verdict and its
//! counts, the active blockers, then pictures (the fleet over the last hour, heartbeat
//! ages against their TTL, the hosts by state, leases changing hands: see [`pictures`]),
//! one row per launch with the state and heartbeat of its worker in each namespace, the
//! leases and their holders, the latest lease decisions and what retirement would do
//! (candidates, and rows that time alone will make candidates, with when). The page follows the registry: a few lines of script listen at `/events`
//! (server-sent events) and reload the page when what it shows changed; without script
//! it reloads itself every few seconds. No outside resource. Every value from the
//! registry is escaped.

use std::fmt::Write as _;

use fleet_identity::{Namespace, Timestamp};
use fleet_lease::LeaseRecord;
use fleet_registry::AuditEntry;
use fleet_retirement::Plan;
use fleet_snapshot::{FleetSnapshot, WorkerState, WorkerView};

mod pictures;

pub(crate) use pictures::{History, SPAN_MS, Sample, holdings};

/// What the page shows besides the snapshot.
pub(crate) struct Extras {
    /// Every lease, with the time they were read at.
    pub(crate) leases: (Vec<LeaseRecord>, Timestamp),
    /// The latest lease decisions, newest first.
    pub(crate) decisions: Vec<AuditEntry>,
    /// Retirement's dry run for the repository the server was given (or its directory).
    pub(crate) plan: Option<Plan>,
    /// The fleet's hosts.
    pub(crate) hosts: fleet_registry::HostList,
    /// The fleet's counts over the last hour, oldest first.
    pub(crate) history: Vec<Sample>,
    /// Who held which lease over the time line, and when the time line starts.
    pub(crate) holdings: (Vec<pictures::Holding>, Timestamp),
}

/// The page as it stands now, and a digest of what it shows (times as they read aside):
/// the digest moves exactly when the page would show something else.
pub(crate) struct Current {
    pub(crate) html: String,
    pub(crate) digest: String,
}

/// The page for `snap` and `extras`, with its digest.
pub(crate) fn render(snap: &FleetSnapshot<'_>, extras: &Extras) -> Current {
    let digest = digest(snap, extras);
    Current { html: page(snap, extras, &digest), digest }
}

/// What the page shows, without the times that move on their own.
fn digest(snap: &FleetSnapshot<'_>, extras: &Extras) -> String {
    let mut facts = blake3::Hasher::new();
    let mut fact = |text: &str| {
        facts.update(text.as_bytes());
        facts.update(b"\0");
    };
    fact(if snap.live_fleet_safe { "safe" } else { "unsafe" });
    fact(&format!("{:?}", snap.counts));
    for f in &snap.findings {
        fact(&format!(
            "{} {:?} {:?} {:?} {}",
            f.code.as_str(),
            f.client_instance_id,
            f.namespace,
            f.worker_identities,
            f.detail
        ));
    }
    for w in &snap.workers {
        fact(&format!("{} {}", w.row.worker_identity, state(w.state)));
    }
    let (leases, now) = &extras.leases;
    for l in leases {
        fact(&format!(
            "{} {} {} {} {}",
            l.lease_key,
            l.owner,
            l.fencing_epoch,
            crate::lease_cmd::standing(l, *now),
            l.expires_at
        ));
    }
    for d in &extras.decisions {
        fact(&d.id.to_string());
    }
    for h in &extras.hosts.hosts {
        fact(&format!(
            "{} {} {} {} {} {} {}",
            h.host_id,
            h.state,
            h.boots.len(),
            h.live_rows,
            h.stale_rows,
            h.terminal_rows,
            h.fences.len()
        ));
    }
    if let Some(plan) = &extras.plan {
        for a in plan.candidates.iter().chain(&plan.preserved) {
            fact(&format!("{} {} {:?}", a.worker_identity, a.reason_code.as_str(), a.eligible_after));
        }
    }
    facts.finalize().to_hex()[..32].to_owned()
}

/// The page's one script, served at `/page.js` (the page's security policy runs no
/// inline script): it reloads the page when the server says what it shows changed. A
/// stream the server refused (every slot taken, or the server restarting) fails for
/// good in the browser (an `EventSource` whose answer is not 200 does not retry), so
/// the script opens a new one after a pause, doubling up to 5 s.
pub(crate) const PAGE_SCRIPT: &str = r#"(() => {
  const since = document.currentScript.dataset.since;
  let pause = 500;
  const follow = () => {
    const events = new EventSource("/events?since=" + encodeURIComponent(since));
    events.onopen = () => { pause = 500; };
    events.onmessage = () => location.reload();
    events.onerror = () => {
      if (events.readyState === EventSource.CLOSED) {
        setTimeout(follow, pause);
        pause = Math.min(pause * 2, 5000);
      }
    };
  };
  follow();
})();
"#;

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

/// The page for `snap` and `extras`, whose digest is `digest`.
fn page(snap: &FleetSnapshot<'_>, extras: &Extras, digest: &str) -> String {
    let verdict = if snap.live_fleet_safe { "SAFE" } else { "UNSAFE" };
    let c = &snap.counts;
    let mut html = String::with_capacity(16 * 1024);
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <noscript><meta http-equiv=\"refresh\" content=\"5\"></noscript>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">\
         <title>Fleet {verdict}</title><style>\
         body{{font-family:system-ui,sans-serif;margin:1.5rem}}\
         table{{border-collapse:collapse;margin:0.5rem 0 1.5rem}}\
         td,th{{border:1px solid #ccc;padding:0.2rem 0.5rem;text-align:left;font-size:0.9rem}}\
         .SAFE{{color:#075e07}}.UNSAFE{{color:#a40000}}.live{{background:#e3f6e3}}\
         .stale{{background:#fde2e2}}.historical{{color:#777}}\
         figure{{margin:0.5rem 0 1.5rem;max-width:40rem}}figure.small{{max-width:24rem}}svg{{width:100%;height:auto;font-size:11px}}\
         .wide{{overflow-x:auto}}meter{{width:3.5rem;vertical-align:middle}}td small{{color:#555;margin-left:0.2rem}}\
         </style></head><body>\n\
         <h1 id=\"verdict\" class=\"{verdict}\">Fleet {verdict}</h1>\n\
         <p>at {at}: {instances}, {live}, {stale} stale, {historical} historical, {blockers}. \
         This page follows the registry.</p>\n",
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
    pictures::history(&mut html, &extras.history, snap.snapshot_at);
    pictures::beat_ages(&mut html, snap);
    html.push_str(
        "<h2>Launches</h2>\n<div class=\"wide\"><table id=\"launches\"><tr><th>launch</th><th>client</th>",
    );
    for ns in Namespace::ALL {
        let _ = write!(html, "<th>{}</th>", ns.as_str());
    }
    html.push_str("</tr>\n");
    let mut cells: std::collections::HashMap<(Option<&str>, Namespace), Vec<&WorkerView<'_>>> =
        std::collections::HashMap::new();
    for w in &snap.workers {
        cells.entry((w.client_instance_id(), w.row.namespace)).or_default().push(w);
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
            let here = cells.get(&(id, ns)).map_or(&[][..], Vec::as_slice);
            let Some(first) = here.first() else {
                html.push_str("<td>-</td>");
                continue;
            };
            let shown: Vec<&str> = here.iter().map(|w| state(w.state)).collect();
            let _ = write!(html, "<td class=\"{}\">{}", state(first.state), shown.join(", "));
            for w in here {
                pictures::beat_gauge(&mut html, w, snap.snapshot_at);
            }
            html.push_str("</td>");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table></div>\n");
    if snap.instances.len() > MAX_ROWS {
        let _ = writeln!(
            html,
            "<p>and {} more launches: <code>fleetctl snapshot</code></p>",
            snap.instances.len() - MAX_ROWS
        );
    }
    leases_section(&mut html, &extras.leases.0, extras.leases.1);
    pictures::lease_timeline(&mut html, &extras.holdings.0, extras.holdings.1, snap.snapshot_at);
    hosts_section(&mut html, &extras.hosts);
    decisions_section(&mut html, &extras.decisions);
    if let Some(plan) = &extras.plan {
        retirement_section(&mut html, plan);
    }
    // Reloads when the server says the page changed; the digest says what it shows.
    let _ = writeln!(html, "<script src=\"/page.js\" data-since=\"{}\"></script>", escape(digest));
    html.push_str("</body></html>\n");
    html
}

fn leases_section(html: &mut String, leases: &[LeaseRecord], now: Timestamp) {
    let _ = writeln!(html, "<h2>Leases</h2>\n<p>{}.</p>", counted(leases.len(), "lease", "leases"));
    if leases.is_empty() {
        return;
    }
    html.push_str(
        "<table id=\"leases\"><tr><th>lease</th><th>holder</th><th>epoch</th><th>state</th>\
         <th>expires</th></tr>\n",
    );
    for l in leases.iter().take(MAX_ROWS) {
        let standing = crate::lease_cmd::standing(l, now);
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{standing}\">{standing}</td><td>{}</td></tr>",
            escape(l.lease_key.as_str()),
            escape(&l.owner),
            l.fencing_epoch,
            escape(&l.expires_at.to_string()),
        );
    }
    html.push_str("</table>\n");
}

fn hosts_section(html: &mut String, hosts: &fleet_registry::HostList) {
    let _ = writeln!(html, "<h2>Hosts</h2>\n<p>{}.</p>", counted(hosts.hosts.len(), "host", "hosts"));
    if hosts.hosts.is_empty() {
        return;
    }
    pictures::host_states(html, hosts);
    html.push_str(
        "<div class=\"wide\"><table id=\"hosts\"><tr><th>host</th><th>name</th><th>state</th><th>boots</th><th>live</th><th>stale</th>\
         <th>terminal</th><th>leases</th><th>last seen</th><th>fence</th></tr>\n",
    );
    for h in hosts.hosts.iter().take(MAX_ROWS) {
        let fence = h
            .fences
            .iter()
            .find(|f| f.lifted_at.is_none())
            .map_or_else(String::new, |f| format!("{} by {}: {}", f.fenced_at, f.fenced_by, f.reason));
        let state = if h.cloned { format!("{} (cloned)", h.state) } else { h.state.to_string() };
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td class=\"host-{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(h.host_id.as_str()),
            escape(h.hostname.as_deref().unwrap_or("")),
            h.state,
            escape(&state),
            h.boots.len(),
            h.live_rows,
            h.stale_rows,
            h.terminal_rows,
            h.leases_held.len(),
            h.last_seen.map_or_else(String::new, |t| escape(&t.to_string())),
            escape(&fence),
        );
    }
    html.push_str("</table></div>\n");
}

fn decisions_section(html: &mut String, decisions: &[AuditEntry]) {
    if decisions.is_empty() {
        return;
    }
    html.push_str(
        "<h2>Latest lease decisions</h2>\n<table id=\"decisions\"><tr><th>at</th><th>lease</th>\
         <th>event</th><th>outcome</th><th>reason</th><th>who</th><th>epoch</th></tr>\n",
    );
    for d in decisions {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&d.at.to_string()),
            escape(&d.lease_key),
            escape(&d.event),
            escape(&d.outcome),
            escape(d.reason.as_deref().unwrap_or("-")),
            escape(d.identity.as_deref().unwrap_or("-")),
            d.fencing_epoch.map_or_else(|| "-".to_owned(), |e| e.to_string()),
        );
    }
    html.push_str("</table>\n");
}

fn retirement_section(html: &mut String, plan: &Plan) {
    let waiting: Vec<_> = plan.preserved.iter().filter(|a| a.eligible_after.is_some()).collect();
    let _ = writeln!(
        html,
        "<h2>Retirement</h2>\n<p>For {}: {}, {} preserved ({} of them a candidate once \
         their heartbeat lapses). <code>fleetctl retire plan</code> says why for each.</p>",
        escape(&plan.canonical_repository),
        counted(plan.candidate_count, "candidate", "candidates"),
        plan.preserved_count,
        waiting.len(),
    );
    if plan.candidates.is_empty() && waiting.is_empty() {
        return;
    }
    html.push_str(
        "<table id=\"retirement\"><tr><th>worker</th><th>verdict</th><th>eligible after</th></tr>\n",
    );
    for a in plan.candidates.iter().chain(waiting.iter().copied()).take(MAX_ROWS) {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(a.worker_identity.as_str()),
            a.reason_code.as_str(),
            a.eligible_after.map_or_else(|| "now".to_owned(), |t| escape(&t.to_string())),
        );
    }
    html.push_str("</table>\n");
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
