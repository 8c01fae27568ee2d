//! `fleetctl serve`'s one session over the fleet: every scrape of `/metrics`, every load
//! of `/` and every open `/events` stream is answered through one [`Fleet`] kept for the
//! server's lifetime, which reads only what changed since its last read. However many
//! pages are open, the page is rendered at most once a second, and on an idle fleet (no
//! write to the store, no heartbeat lapsing, no probe answering otherwise, no lease or
//! plan deadline passing) not at all: it asks whether what it shows still stands, which
//! costs one read of the store's change marker and a probe of this host's live workers.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fleet_identity::Timestamp;
use fleet_lease::LeaseState;
use fleet_registry::{AuditQuery, StoreError};
use fleet_retirement::RetirementContext;
use fleet_runtime::{Fleet, RegistryLocation, now};
use fleet_snapshot::Policy;

use crate::metrics_cmd::{DecisionCounts, Reading, Series};
use crate::status_page::{Current, Extras};

/// How long a page serves every reader that asks for it.
const FRESH: Duration = Duration::from_secs(1);

/// The longest a page is served without being rendered again, whatever stands: what
/// moves with time alone and no check above follows (a host's age) is at most this old.
const RENDER_EVERY: Duration = Duration::from_secs(60);

/// The latest lease decisions the page lists.
const RECENT_DECISIONS: usize = 15;

/// The fleet as `serve` sees it, shared by every request.
pub(crate) struct Observer {
    state: Mutex<State>,
}

struct State {
    fleet: Fleet,
    /// The repository whose retirement the page shows; without one the page leaves it out.
    ctx: Option<RetirementContext>,
    counts: DecisionCounts,
    series: Series,
    page: Option<Shown>,
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
        let state = State { fleet, ctx, counts: DecisionCounts::default(), series, page: None };
        Self { state: Mutex::new(state) }
    }

    /// The exposition as it stands now: the rows as the session last read them when
    /// the store has not moved since, the ages and counters as of this call.
    pub(crate) fn metrics(&self, schema_version: i64) -> Result<String, StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.render_metrics(schema_version)
    }

    /// The page as it stands (at most [`FRESH`] old).
    pub(crate) fn page(&self) -> Result<Arc<Current>, StoreError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let result = state.page();
        if result.is_err() {
            // Nothing read before a failure is trusted: the next call renders afresh.
            state.page = None;
        }
        result
    }
}

impl State {
    fn render_metrics(&mut self, schema_version: i64) -> Result<String, StoreError> {
        let at = now();
        let counts = &mut self.counts;
        let (leases, store_now, fences, boots) = self.fleet.with_registry(|registry| {
            let (leases, store_now) = registry.leases_now(None)?;
            let fences = registry.host_fences()?;
            let boots = registry.host_boots()?;
            counts.update(registry)?;
            Ok((leases, store_now, fences, boots))
        })?;
        let rows = &self.fleet.dump()?.worker_registrations;
        let hosts = fleet_registry::host_list(rows, &leases, &fences, &boots, store_now);
        let reading = Reading { leases, store_now, hosts };
        let snap = self.fleet.snapshot(None, &Policy::default(), at)?;
        Ok(crate::metrics_cmd::render(&snap, &reading, &self.counts, self.series, schema_version, at))
    }

    fn page(&mut self) -> Result<Arc<Current>, StoreError> {
        if let Some(shown) = &self.page
            && shown.checked.elapsed() < FRESH
        {
            return Ok(Arc::clone(&shown.page));
        }
        let at = now();
        let marker = self.fleet.with_registry(|registry| registry.change_marker())?;
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
            Some(ctx) => Some(self.fleet.plan(ctx)?),
            None => None,
        };
        let newest = AuditQuery {
            key: None,
            since: None,
            until: None,
            after: i64::MAX,
            newest_first: true,
            limit: RECENT_DECISIONS,
        };
        let (leases, decisions, fences, boots) = self.fleet.with_registry(|registry| {
            Ok((
                registry.leases_now(None)?,
                registry.lease_audit_page(&newest)?,
                registry.host_fences()?,
                registry.host_boots()?,
            ))
        })?;
        let rows = &self.fleet.dump()?.worker_registrations;
        let hosts = fleet_registry::host_list(rows, &leases.0, &fences, &boots, leases.1);
        let until = leases
            .0
            .iter()
            .filter(|l| l.state == LeaseState::Held && l.is_live(leases.1))
            .map(|l| l.expires_at)
            .chain(plan.as_ref().and_then(|p| p.next_eligible_after))
            .min();
        let extras = Extras { leases, decisions, plan, hosts };
        let (number, snap) = self.fleet.numbered_json_snapshot(None, &Policy::default(), at)?;
        let page = Arc::new(crate::status_page::render(&snap.snapshot, &extras));
        let rendered = Instant::now();
        self.page =
            Some(Shown { page: Arc::clone(&page), checked: rendered, rendered, marker, number, until });
        Ok(page)
    }
}
