//! The page's pictures: the fleet over the last hour, the heartbeat ages against their
//! TTL (one gauge per worker of a listed launch, and a histogram over every active
//! worker), the hosts by state, and the leases changing hands on a time line.
//!
//! Each picture is inline SVG or a native `<meter>` (nothing loaded from elsewhere),
//! says in words what it shows (an `aria-label` and `<title>`s, labels beside the
//! colours), and carries its numbers as `data-` attributes, so that a reader or a test
//! can read them back. Every picture costs the same whatever the fleet's size: the
//! history holds at most [`MOST_SAMPLES`], the histogram five bars, the time line
//! [`MOST_LANES`] leases.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;

use fleet_identity::Timestamp;
use fleet_lease::{LeaseOutcome, LeaseRecord, LeaseState};
use fleet_registry::{AuditEntry, HostList, HostState};
use fleet_snapshot::{Counts, FleetSnapshot, WorkerState, WorkerView};

use super::{counted, escape};

/// How far back the history and the lease time line reach.
pub(crate) const SPAN_MS: i64 = 60 * 60 * 1000;

/// The most samples the history keeps: one every five seconds over [`SPAN_MS`].
const MOST_SAMPLES: usize = 720;

/// A sample whose counts equal the previous one's is kept at most this often.
const SAME_EVERY_MS: i64 = 60 * 1000;

/// The most leases the time line draws (those that changed last).
const MOST_LANES: usize = 20;

/// The shortest time a picture over time spans: a short history is drawn over this
/// much, not stretched over the hour.
const LEAST_SPAN_MS: i64 = 5 * 60 * 1000;

/// Where a picture over time that begins with `first` starts: at `first`, but not more
/// than [`SPAN_MS`] nor less than [`LEAST_SPAN_MS`] before `now`.
fn span_start(first: Timestamp, now: Timestamp) -> i64 {
    let now = now.unix_millis();
    first.unix_millis().clamp(now - SPAN_MS, now - LEAST_SPAN_MS)
}

/// `at` as a time of day (UTC), for an axis.
fn clock(at: i64) -> String {
    Timestamp::from_unix_millis(at).map_or_else(String::new, |t| {
        let t = t.get();
        format!("{:02}:{:02}:{:02}Z", t.hour(), t.minute(), t.second())
    })
}

/// The fleet's counts at one time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) at: Timestamp,
    pub(crate) live: usize,
    pub(crate) stale: usize,
    /// Released, superseded and retired rows of running launches.
    pub(crate) ended: usize,
}

impl Sample {
    pub(crate) fn of(at: Timestamp, counts: &Counts) -> Self {
        Self {
            at,
            live: counts.live_worker_count,
            stale: counts.stale_worker_count,
            ended: counts.historical_row_count,
        }
    }

    fn same_counts(&self, other: &Sample) -> bool {
        (self.live, self.stale, self.ended) == (other.live, other.stale, other.ended)
    }
}

/// The fleet's counts over the last hour, as `serve` saw them while it ran: a sample
/// whenever they changed (and once a minute while they did not), bounded in number.
#[derive(Debug, Default)]
pub(crate) struct History {
    samples: VecDeque<Sample>,
}

impl History {
    /// Keeps `sample` if it says something new; drops what the span has passed,
    /// keeping the newest such sample (it gives the counts at the span's start).
    pub(crate) fn record(&mut self, sample: Sample) {
        if let Some(last) = self.samples.back()
            && (sample.at < last.at
                || (sample.same_counts(last)
                    && sample.at.since(last.at).whole_milliseconds() < SAME_EVERY_MS as i128))
        {
            return;
        }
        let start = sample.at.unix_millis() - SPAN_MS;
        self.samples.push_back(sample);
        while self.samples.len() > MOST_SAMPLES
            || self.samples.get(1).is_some_and(|second| second.at.unix_millis() <= start)
        {
            self.samples.pop_front();
        }
    }

    /// The samples kept, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        self.samples.iter().copied().collect()
    }
}

/// A lease held by one holder at one epoch, from one time to another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    pub(crate) key: String,
    pub(crate) holder: String,
    pub(crate) epoch: u64,
    pub(crate) from: Timestamp,
    pub(crate) to: Timestamp,
    /// Still held at the end of the time line.
    pub(crate) held: bool,
}

/// Each holding of a lease between `start` and `now`, from the lease decisions of that
/// time (oldest first) and the leases as they stand: a grant or takeover begins one and
/// ends the one before, a release ends it, and a renewal or release with no grant seen
/// tells of one begun before `start`. A lease that stands held ends its holding at its
/// expiry, or at `now` while live.
pub(crate) fn holdings(
    decisions: &[AuditEntry],
    leases: &[LeaseRecord],
    start: Timestamp,
    now: Timestamp,
) -> Vec<Holding> {
    let mut open: BTreeMap<&str, Holding> = BTreeMap::new();
    let mut done = Vec::new();
    for d in decisions {
        let (Some(holder), Some(epoch)) = (d.identity.as_deref(), d.fencing_epoch) else { continue };
        let begun = |from| Holding {
            key: d.lease_key.clone(),
            holder: holder.to_owned(),
            epoch,
            from,
            to: d.at,
            held: false,
        };
        // Denials and codes this build does not know change no holding.
        let Ok(outcome) = d.outcome.parse::<LeaseOutcome>() else { continue };
        match outcome {
            LeaseOutcome::Acquired | LeaseOutcome::TakenOver => {
                if let Some(mut before) = open.remove(d.lease_key.as_str()) {
                    before.to = d.at;
                    done.push(before);
                }
                open.insert(&d.lease_key, begun(d.at));
            }
            LeaseOutcome::Renewed => {
                open.entry(&d.lease_key).or_insert_with(|| begun(start));
            }
            LeaseOutcome::Released => {
                let mut ended = open.remove(d.lease_key.as_str()).unwrap_or_else(|| begun(start));
                ended.to = d.at;
                done.push(ended);
            }
            _ => {}
        }
    }
    for lease in leases {
        let key = lease.lease_key.as_str();
        let held = lease.state == LeaseState::Held;
        let end = if lease.is_live(now) { now } else { lease.expires_at.min(now) };
        let epoch = lease.fencing_epoch.get();
        match open.remove(key) {
            Some(mut tenure) => {
                tenure.to = if held && tenure.epoch == epoch { end } else { now.min(lease.expires_at) };
                tenure.held = held && tenure.epoch == epoch && lease.is_live(now);
                done.push(tenure);
            }
            None if held && lease.expires_at > start => done.push(Holding {
                key: key.to_owned(),
                holder: lease.owner.clone(),
                epoch,
                from: lease.acquired_at.max(start),
                to: end,
                held: lease.is_live(now),
            }),
            None => {}
        }
    }
    // Decisions of a lease no longer listed: their last holding ends now.
    done.extend(open.into_values().map(|mut t| {
        t.to = now;
        t
    }));
    done.sort_by(|a, b| (a.key.as_str(), a.from).cmp(&(b.key.as_str(), b.from)));
    done
}

/// `value` of `most` as a length of `span` units (0 when `most` is 0).
fn scaled(value: f64, most: f64, span: f64) -> f64 {
    if most <= 0.0 { 0.0 } else { value / most * span }
}

/// The live, stale and ended rows over the last hour as three step lines.
pub(crate) fn history(html: &mut String, samples: &[Sample], now: Timestamp) {
    const W: f64 = 600.0;
    const H: f64 = 160.0;
    const LEFT: f64 = 44.0;
    const TOP: f64 = 10.0;
    const BOTTOM: f64 = 130.0;
    let Some(last) = samples.last() else { return };
    let start = span_start(samples[0].at, now);
    let span = (now.unix_millis() - start).max(1) as f64;
    let most = samples.iter().map(|s| s.live.max(s.stale).max(s.ended)).max().unwrap_or(0).max(1);
    let x =
        |at: Timestamp| LEFT + scaled((at.unix_millis().max(start) - start) as f64, span, W - LEFT - 10.0);
    let y = |n: usize| BOTTOM - scaled(n as f64, most as f64, BOTTOM - TOP);
    let line = |pick: fn(&Sample) -> usize| {
        let mut points = String::new();
        for (i, s) in samples.iter().enumerate() {
            let next = samples.get(i + 1).map_or(now, |n| n.at);
            let _ = write!(points, "{:.1},{:.1} {:.1},{:.1} ", x(s.at), y(pick(s)), x(next), y(pick(s)));
        }
        points
    };
    let label = format!(
        "Workers over the last hour, sampled by this server since {}: now {} live, {} stale, {} ended; at most {}.",
        samples[0].at, last.live, last.stale, last.ended, most
    );
    let _ = write!(
        html,
        "<h2>The last hour</h2>\n<figure><svg id=\"history\" role=\"img\" aria-label=\"{label}\" \
         viewBox=\"0 0 {W} {H}\" data-samples=\"{n}\" data-live=\"{live}\" data-stale=\"{stale}\" \
         data-ended=\"{ended}\" data-most=\"{most}\"><title>{label}</title>\
         <line x1=\"{LEFT}\" y1=\"{BOTTOM}\" x2=\"{right}\" y2=\"{BOTTOM}\" stroke=\"#999\"/>\
         <text x=\"{lx}\" y=\"{ty}\" text-anchor=\"end\">{most}</text>\
         <text x=\"{lx}\" y=\"{BOTTOM}\" text-anchor=\"end\">0</text>\
         <text x=\"{LEFT}\" y=\"148\">{from}</text>\
         <text x=\"{right}\" y=\"148\" text-anchor=\"end\">now</text>\
         <polyline class=\"ended\" points=\"{pe}\" fill=\"none\" stroke=\"#888\" stroke-width=\"2\" stroke-dasharray=\"2 3\"/>\
         <polyline class=\"stale\" points=\"{ps}\" fill=\"none\" stroke=\"#c00\" stroke-width=\"2\" stroke-dasharray=\"6 3\"/>\
         <polyline class=\"live\" points=\"{pl}\" fill=\"none\" stroke=\"#1a7f1a\" stroke-width=\"2.5\"/>\
         <circle cx=\"{nx}\" cy=\"{ye:.1}\" r=\"3\" fill=\"#888\"/><circle cx=\"{nx}\" cy=\"{ys:.1}\" r=\"3\" fill=\"#c00\"/>\
         <circle cx=\"{nx}\" cy=\"{yl:.1}\" r=\"3.5\" fill=\"#1a7f1a\"/></svg><figcaption><span class=\"key live-key\">── live {live}</span> \
         <span class=\"key stale-key\">- - stale {stale}</span> <span class=\"key\">··· ended {ended}</span></figcaption></figure>\n",
        n = samples.len(),
        live = last.live,
        stale = last.stale,
        ended = last.ended,
        right = W - 10.0,
        lx = LEFT - 4.0,
        ty = TOP + 10.0,
        from = clock(start),
        nx = W - 10.0,
        yl = y(last.live),
        ys = y(last.stale),
        ye = y(last.ended),
        pl = line(|s| s.live),
        ps = line(|s| s.stale),
        pe = line(|s| s.ended),
    );
}

/// The five bands of a heartbeat's age against its TTL.
const BANDS: [&str; 5] = ["under ¼ TTL", "¼–½", "½–¾", "¾–1", "lapsed"];

/// The band of a heartbeat `age_ms` old against a TTL of `ttl_s`.
fn band(age_ms: i64, ttl_s: u32) -> usize {
    let ttl_ms = i64::from(ttl_s.max(1)) * 1000;
    if age_ms >= ttl_ms { 4 } else { (age_ms.max(0) * 4 / ttl_ms) as usize }
}

/// The heartbeat of an active worker, its age and TTL, as of `at`.
fn beat(w: &WorkerView<'_>, at: Timestamp) -> Option<(i64, u32)> {
    if w.state == WorkerState::Historical {
        return None;
    }
    Some((at.since(w.heartbeat?).whole_milliseconds() as i64, w.row.heartbeat_ttl_s?))
}

/// A gauge of `w`'s heartbeat age against its TTL (nothing for a row without either).
pub(crate) fn beat_gauge(html: &mut String, w: &WorkerView<'_>, at: Timestamp) {
    let Some((age_ms, ttl)) = beat(w, at) else { return };
    let age = age_ms.max(0) / 1000;
    // A gauge stops at its maximum: a lapsed heartbeat's age is the title's and the
    // label's (a page lists up to 2,500 gauges, so each is kept short).
    let shown = age.min(i64::from(ttl));
    let lapsed = if age >= i64::from(ttl) { ", lapsed" } else { "" };
    let _ = write!(
        html,
        " <meter max={ttl} low={low} high={high} optimum=0 value={shown} \
         title=\"heartbeat {age} s ago, TTL {ttl} s{lapsed}\"></meter><small>{age}s</small>",
        low = ttl / 2,
        high = ttl * 3 / 4,
    );
}

/// How old every active worker's heartbeat is against its TTL, in five bars.
pub(crate) fn beat_ages(html: &mut String, snap: &FleetSnapshot<'_>) {
    let mut bands = [0usize; 5];
    for w in &snap.workers {
        if let Some((age_ms, ttl)) = beat(w, snap.snapshot_at) {
            bands[band(age_ms, ttl)] += 1;
        }
    }
    let total: usize = bands.iter().sum();
    if total == 0 {
        return;
    }
    let most = *bands.iter().max().unwrap_or(&1);
    let label = format!(
        "Heartbeat ages of {} against their TTL: {}.",
        counted(total, "active worker", "active workers"),
        BANDS.iter().zip(bands).map(|(b, n)| format!("{n} {b}")).collect::<Vec<_>>().join(", ")
    );
    let _ = write!(
        html,
        "<h2>Heartbeats</h2>\n<figure class=\"small\"><svg id=\"beat-ages\" role=\"img\" aria-label=\"{label}\" \
         viewBox=\"0 0 400 130\" data-total=\"{total}\"><title>{label}</title>"
    );
    for (i, (name, n)) in BANDS.iter().zip(bands).enumerate() {
        let height = scaled(n as f64, most as f64, 80.0);
        let x = 10.0 + i as f64 * 78.0;
        let fill = if i == 4 { "#c00" } else { ["#1a7f1a", "#5a9f1a", "#b8a300", "#d97b00"][i] };
        let _ = write!(
            html,
            "<g class=\"band\" data-band=\"{name}\" data-count=\"{n}\"><title>{n} {name}</title>\
             <rect x=\"{x}\" y=\"{y:.1}\" width=\"60\" height=\"{height:.1}\" fill=\"{fill}\"/>\
             <text x=\"{cx}\" y=\"{ty:.1}\" text-anchor=\"middle\">{n}</text>\
             <text x=\"{cx}\" y=\"124\" text-anchor=\"middle\">{name}</text></g>",
            y = 105.0 - height,
            cx = x + 30.0,
            ty = 101.0 - height,
        );
    }
    html.push_str("</svg></figure>\n");
}

/// The hosts by state, as one bar of labelled parts.
pub(crate) fn host_states(html: &mut String, hosts: &HostList) {
    let total = hosts.hosts.len();
    if total == 0 {
        return;
    }
    let counts: Vec<(HostState, usize)> = HostState::ALL
        .iter()
        .map(|&s| (s, hosts.hosts.iter().filter(|h| h.state == s).count()))
        .filter(|&(_, n)| n > 0)
        .collect();
    let words: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
    let label = format!("{}: {}.", counted(total, "host", "hosts"), words.join(", "));
    let _ = write!(
        html,
        "<figure><svg id=\"host-states\" role=\"img\" aria-label=\"{label}\" viewBox=\"0 0 600 34\" \
         data-total=\"{total}\"><title>{label}</title>"
    );
    let mut x = 0.0;
    for (state, n) in counts {
        let width = scaled(n as f64, total as f64, 600.0);
        let fill = match state {
            HostState::Live => "#1a7f1a",
            HostState::Silent => "#c00",
            HostState::Fenced => "#555",
            _ => "#bbb",
        };
        let _ = write!(
            html,
            "<g class=\"host-state\" data-state=\"{s}\" data-count=\"{n}\"><title>{n} {s}</title>\
             <rect x=\"{x:.1}\" y=\"0\" width=\"{width:.1}\" height=\"20\" fill=\"{fill}\" stroke=\"#fff\"/>\
             <text x=\"{tx:.1}\" y=\"32\">{n} {s}</text></g>",
            s = state.as_str(),
            tx = x + 2.0,
        );
        x += width;
    }
    html.push_str("</svg></figure>\n");
}

/// Each lease's holders over the last hour, one lane per lease, one bar per holding
/// labelled with its epoch.
pub(crate) fn lease_timeline(html: &mut String, holdings: &[Holding], start: Timestamp, now: Timestamp) {
    if holdings.is_empty() {
        return;
    }
    let mut lanes: BTreeMap<&str, Vec<&Holding>> = BTreeMap::new();
    for t in holdings {
        lanes.entry(&t.key).or_default().push(t);
    }
    let mut order: Vec<(&str, Vec<&Holding>)> = lanes.into_iter().collect();
    // The leases that changed last first.
    order.sort_by_key(|(key, ts)| (std::cmp::Reverse(ts.iter().map(|t| t.from).max()), *key));
    let more = order.len().saturating_sub(MOST_LANES);
    order.truncate(MOST_LANES);
    const LEFT: f64 = 150.0;
    const RIGHT: f64 = 590.0;
    let first = holdings.iter().map(|t| t.from).min().unwrap_or(start).max(start);
    let start = span_start(first, now);
    let span = (now.unix_millis() - start).max(1) as f64;
    let x = |at: Timestamp| LEFT + scaled((at.unix_millis().max(start) - start) as f64, span, RIGHT - LEFT);
    let height = 24.0 * order.len() as f64 + 24.0;
    let changes: usize = order.iter().map(|(_, ts)| ts.len().saturating_sub(1)).sum();
    let label = format!(
        "Lease holders since {}: {}, {} of hands.",
        clock(start),
        counted(order.len(), "lease", "leases"),
        counted(changes, "change", "changes")
    );
    let _ = write!(
        html,
        "<h3>Holders over time</h3>\n<figure><svg id=\"lease-timeline\" role=\"img\" aria-label=\"{label}\" \
         viewBox=\"0 0 600 {height}\" data-lanes=\"{lanes}\"><title>{label}</title>",
        lanes = order.len(),
    );
    for (row, (key, holdings)) in order.iter().enumerate() {
        let y = 4.0 + 24.0 * row as f64;
        let _ = write!(
            html,
            "<g class=\"lane\" data-key=\"{k}\"><text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{k}</text>",
            k = escape(key),
            tx = LEFT - 6.0,
            ty = y + 14.0,
        );
        for t in holdings {
            let (x0, x1) = (x(t.from), x(t.to).max(x(t.from) + 2.0));
            let fill = if t.epoch % 2 == 0 { "#4a78b5" } else { "#7fb0e0" };
            let state = if t.held { "holds it" } else { "held it" };
            let _ = write!(
                html,
                "<g class=\"tenure\" data-epoch=\"{e}\" data-holder=\"{h}\" data-held=\"{held}\">\
                 <title>epoch {e}: {h} {state} from {from} to {to}</title>\
                 <rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"18\" fill=\"{fill}\" stroke=\"#fff\"/>\
                 <text x=\"{lx:.1}\" y=\"{ty:.1}\">{e}</text></g>",
                e = t.epoch,
                h = escape(&t.holder),
                held = t.held,
                from = t.from,
                to = t.to,
                w = x1 - x0,
                lx = x0 + 3.0,
                ty = y + 14.0,
            );
        }
        html.push_str("</g>");
    }
    let _ = write!(
        html,
        "<text x=\"{LEFT}\" y=\"{b:.1}\">{from}</text><text x=\"{RIGHT}\" y=\"{b:.1}\" text-anchor=\"end\">now</text>\
         </svg><figcaption>Each bar is one holder at one epoch (the number on it); a new bar is a change of hands.",
        b = height - 6.0,
        from = clock(start),
    );
    if more > 0 {
        let _ = write!(
            html,
            " And {}: <code>fleetctl lease audit</code>.",
            counted(more, "more lease", "more leases")
        );
    }
    html.push_str("</figcaption></figure>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_800_000_000_000 + s * 1000).unwrap()
    }

    fn sample(s: i64, live: usize) -> Sample {
        Sample { at: at(s), live, stale: 0, ended: 0 }
    }

    #[test]
    fn history_keeps_changes_and_a_minute_of_sameness_within_the_hour() {
        let mut h = History::default();
        h.record(sample(0, 3));
        h.record(sample(10, 3)); // the same, within a minute: not kept
        h.record(sample(20, 4)); // a change: kept
        h.record(sample(90, 4)); // the same, past a minute: kept
        h.record(sample(80, 9)); // earlier than the last: not kept
        assert_eq!(
            h.samples().iter().map(|s| (s.at, s.live)).collect::<Vec<_>>(),
            [(at(0), 3), (at(20), 4), (at(90), 4)]
        );
        // An hour on, the oldest go, but the newest before the hour's start stays.
        h.record(sample(3650, 5));
        assert_eq!(h.samples().iter().map(|s| s.live).collect::<Vec<_>>(), [4, 4, 5]);
        h.record(sample(3700, 6));
        assert_eq!(h.samples().iter().map(|s| s.live).collect::<Vec<_>>(), [4, 5, 6]);
    }

    #[test]
    fn history_holds_at_most_its_bound() {
        let mut h = History::default();
        for i in 0..(MOST_SAMPLES as i64 * 3) {
            h.record(sample(i, i as usize));
        }
        assert_eq!(h.samples().len(), MOST_SAMPLES);
        assert_eq!(h.samples().last().unwrap().live, MOST_SAMPLES * 3 - 1);
    }

    #[test]
    fn bands_split_the_ttl_in_quarters_and_lapsed() {
        assert_eq!(
            [0, 7_499, 7_500, 15_000, 29_999, 30_000, 99_000].map(|ms| band(ms, 30)),
            [0, 0, 1, 2, 3, 4, 4]
        );
    }

    fn decision(id: i64, s: i64, outcome: &str, who: &str, epoch: u64) -> AuditEntry {
        let entry = serde_json::json!({
            "id": id, "event": "acquire", "outcome": outcome, "lease_key": "workflow:a",
            "kind": "workflow", "identity": who, "fencing_epoch": epoch, "at": at(s),
        });
        serde_json::from_value(entry).unwrap()
    }

    #[test]
    fn a_takeover_ends_one_holding_and_begins_the_next() {
        let decisions = [
            decision(1, 10, "renewed", "a", 1),
            decision(2, 20, "taken_over", "b", 2),
            decision(3, 30, "released", "b", 2),
            decision(4, 40, "acquired", "c", 3),
        ];
        let got: Vec<_> = holdings(&decisions, &[], at(0), at(50))
            .into_iter()
            .map(|t| (t.holder, t.epoch, t.from, t.to))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_owned(), 1, at(0), at(20)),
                ("b".to_owned(), 2, at(20), at(30)),
                ("c".to_owned(), 3, at(40), at(50)),
            ]
        );
    }
}
