//! `fleetctl serve`'s one session over the fleet: every scrape of `/metrics`, every load
//! of `/` and every open `/events` stream is answered through one [`Fleet`] kept for the
//! server's lifetime, which reads only what changed since its last read. However many
//! pages are open, the page is rendered at most twice a second, and on an idle fleet (no
//! write to the store, no heartbeat lapsing, no probe answering otherwise, no lease or
//! plan deadline passing) not at all: it asks whether what it shows still stands, which
//! costs one read of the store's change marker and a probe of this host's live workers.
//! Every render (and every scrape that reads the rows) adds the fleet's counts to the
//! page's history, and a sample is taken every [`SAMPLE_EVERY`] while no one asks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fleet_identity::Timestamp;
use fleet_lease::LeaseState;
use fleet_registry::{AuditQuery, StoreError};
use fleet_retirement::RetirementContext;
use fleet_runtime::{Fleet, RegistryLocation, now};
use fleet_snapshot::Policy;

use crate::metrics_cmd::{DecisionCounts, Heartbeats, Reading, Series, Tally};
use crate::status_page::{Current, Extras, History, SPAN_MS, Sample};

/// How long a page serves every reader that asks for it.
const FRESH: Duration = Duration::from_millis(500);

/// The longest a page is served without being rendered again, whatever stands: what
/// moves with time alone and no check above follows (a host's age) is at most this old.
const RENDER_EVERY: Duration = Duration::from_secs(60);

/// The latest lease decisions the page lists.
const RECENT_DECISIONS: usize = 15;

/// The most lease decisions of the last hour the page's time line reads (the newest).
const TIMELINE_DECISIONS: usize = 2000;

/// How often the server samples the fleet's counts for the page's history while no one
/// asks for the page or the metrics (each of which samples too).
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_secs(30);

/// The fleet as `serve` sees it, shared by every request.
pub(crate) struct Observer {
    state: Mutex<State>,
    /// How many requests were answered through the session (the registry answering or
    /// refusing): what the watchdog sees move while the answering path is not hung.
    answered: AtomicU64,
}

struct State {
    fleet: Fleet,
    /// The repository whose retirement the page shows; without one the page leaves it out.
    ctx: Option<RetirementContext>,
    counts: DecisionCounts,
    series: Series,
    page: Option<Shown>,
    derived: Option<Derived>,
    /// The fleet's counts over the last hour.
    history: History,
}

/// What a scrape derives from the rows, kept while the store and the judgement stand.
struct Derived {
    /// The store's change marker read before the rows.
    marker: Option<u128>,
    /// The number of the snapshot the tally counts.
    number: u64,
    tally: Tally,
    hosts: fleet_registry::HostList,
    beats: Heartbeats,
}

impl Derived {
    /// The hosts as listed, their ages moved on to `store_now`.
    fn hosts_at(&self, store_now: Timestamp) -> fleet_registry::HostList {
        let mut hosts = self.hosts.clone();
        let moved = store_now.since(hosts.at).whole_seconds();
        for host in &mut hosts.hosts {
            host.last_seen_age_s = host.last_seen_age_s.map(|age| age + moved);
        }
        hosts.at = store_now;
        hosts
    }
}

/// The page last rendered, and what it rests on.
struct Shown {
    page: Arc<Current>,
    /// When it was last found to stand (or rendered).
    checked: Instant,
    rendered: Instant,
    /// The store's change marker read before the page's reads.
    marker: Option<u128>,
    /// The number of the snapshot the page shows.
    number: u64,
    /// The earliest time something the page shows changes with no write: a held lease
    /// expiring, a preserved row becoming a retirement candidate.
    until: Option<Timestamp>,
}

impl Observer {
    /// A session over the registry at `location`; `ctx` is the retirement the page shows.
    pub(crate) fn new(location: &RegistryLocation, ctx: Option<RetirementContext>, series: Series) -> Self {
        let fleet = Fleet::new(location.clone()).tracking_processes();
        let state = State {
            fleet,
            ctx,
            counts: DecisionCounts::default(),
            series,
            page: None,
            derived: None,
            history: History::default(),
        };
        Self { state: Mutex::new(state), answered: AtomicU64::new(0) }
    }

    /// How many requests were answered through the session so far.
    pub(crate) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Counts an answer through the session, whatever it was.
    fn answer<T>(&self, result: T) -> T {
        self.answered.fetch_add(1, Ordering::Relaxed);
        result
    }

    /// Whether the registry answers (its change marker read through the session).
    pub(crate) fn ready(&self) -> Result<(), StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let result = state.fleet.change_marker().map(drop);
        self.answer(result)
    }

    /// The exposition as it stands now: the rows as the session last read them when
    /// the store has not moved since, the ages and counters as of this call.
    pub(crate) fn metrics(&self, schema_version: i64) -> Result<String, StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.answer(state.render_metrics(schema_version))
    }

    /// Samples the fleet's counts for the page's history: a classification when the
    /// fleet moved since the session's last snapshot (no page, no plan), and otherwise
    /// nothing but the check that it stands (the history's last counts still hold).
    pub(crate) fn sample(&self) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let at = now();
        if let Ok(fleet_runtime::Taken::Fresh(_, snap)) =
            state.fleet.json_snapshot_or_unchanged(None, &Policy::default(), at)
        {
            let sample = Sample::of(at, &snap.snapshot.counts);
            state.history.record(sample);
        }
    }

    /// The page as it stands (at most [`FRESH`] old).
    pub(crate) fn page(&self) -> Result<Arc<Current>, StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let result = state.page();
        if result.is_err() {
            // Nothing read before a failure is trusted: the next call renders afresh.
            state.page = None;
        }
        self.answer(result)
    }
}

impl State {
    /// A scrape: the leases, the decision counters and the heartbeat ages as of now;
    /// what the rows say besides (the verdict and counts, the hosts) derived again only
    /// when the store or the snapshot's judgement moved.
    fn render_metrics(&mut self, schema_version: i64) -> Result<String, StoreError> {
        let at = now();
        let marker = self.fleet.change_marker()?;
        self.counts.update(&mut self.fleet)?;
        let (leases, store_now) = self.fleet.leases()?;
        let standing = self.fleet.standing(&Policy::default(), at)?;
        let kept = self.derived.as_ref().is_some_and(|d| {
            self.series == Series::Aggregate
                && marker.is_some()
                && d.marker == marker
                && standing == Some(d.number)
        });
        if !kept {
            self.derived = None;
            let (fences, boots) = (self.fleet.host_fences()?, self.fleet.host_boots()?);
            let (number, snap) = self.fleet.numbered_json_snapshot(None, &Policy::default(), at)?;
            self.history.record(Sample::of(at, &snap.snapshot.counts));
            let tally = Tally::of(&snap.snapshot, self.series, at);
            let rows = &self.fleet.dump()?.worker_registrations;
            let hosts = fleet_registry::host_list(rows, &leases, &fences, &boots, store_now);
            self.derived = Some(Derived { marker, number, tally, hosts, beats: Heartbeats::of(rows) });
        }
        let Some(derived) = &self.derived else { unreachable!("derived above") };
        let reading = Reading { leases, store_now, hosts: derived.hosts_at(store_now) };
        let ages = derived.beats.ages_at(at);
        Ok(crate::metrics_cmd::render(&derived.tally, &ages, &reading, &self.counts, schema_version))
    }

    fn page(&mut self) -> Result<Arc<Current>, StoreError> {
        if let Some(shown) = &self.page
            && shown.checked.elapsed() < FRESH
        {
            return Ok(Arc::clone(&shown.page));
        }
        let at = now();
        let marker = self.fleet.change_marker()?;
        if let Some(shown) = &self.page
            && marker.is_some()
            && marker == shown.marker
            && shown.until.is_none_or(|until| at < until)
            && shown.rendered.elapsed() < RENDER_EVERY
            && self.fleet.standing(&Policy::default(), at)? == Some(shown.number)
        {
            let page = Arc::clone(&shown.page);
            if let Some(shown) = &mut self.page {
                shown.checked = Instant::now();
            }
            return Ok(page);
        }
        let plan = match &self.ctx {
            // Judged as of now: the context was made when the server started.
            Some(ctx) => Some(self.fleet.plan_kept(&RetirementContext { now: at, ..ctx.clone() })?),
            None => None,
        };
        let newest = AuditQuery::newest(RECENT_DECISIONS);
        let leases = self.fleet.leases()?;
        let decisions = self.fleet.lease_audit_page(&newest)?;
        let (fences, boots) = (self.fleet.host_fences()?, self.fleet.host_boots()?);
        let rows = &self.fleet.dump()?.worker_registrations;
        let hosts = fleet_registry::host_list(rows, &leases.0, &fences, &boots, leases.1);
        let until = leases
            .0
            .iter()
            .filter(|l| l.state == LeaseState::Held && l.is_live(leases.1))
            .map(|l| l.expires_at)
            .chain(plan.as_ref().and_then(|p| p.next_eligible_after))
            .min();
        let start = Timestamp::from_unix_millis(at.unix_millis() - SPAN_MS).unwrap_or(at);
        // The newest decisions by position (bounded work however long the log), those of
        // the last hour kept.
        let mut lately = self.fleet.lease_audit_page(&AuditQuery::newest(TIMELINE_DECISIONS))?;
        let full = lately.len() == TIMELINE_DECISIONS;
        lately.retain(|d| d.at >= start);
        lately.reverse();
        // A full page starts the time line where it reaches back to.
        let start = if full && lately.len() == TIMELINE_DECISIONS {
            lately.first().map_or(start, |d| d.at)
        } else {
            start
        };
        let holdings = (crate::status_page::holdings(&lately, &leases.0, start, at), start);
        let (number, snap) = self.fleet.numbered_json_snapshot(None, &Policy::default(), at)?;
        self.history.record(Sample::of(at, &snap.snapshot.counts));
        let history = self.history.samples();
        let extras = Extras { leases, decisions, plan, hosts, history, holdings };
        let page = Arc::new(crate::status_page::render(&snap.snapshot, &extras));
        let rendered = Instant::now();
        self.page =
            Some(Shown { page: Arc::clone(&page), checked: rendered, rendered, marker, number, until });
        Ok(page)
    }
}
