//! Running one-time initialization under a fenced lease: renew while the work runs,
//! cancel the work when renewal is lost, and record the outcome only while still the
//! holder.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration as StdDuration;

use fleet_lease::{InitDecision, InitStatus, LeaseKey};
use fleet_registry::OpenMode;
use fleet_registry::{AuditContext, StoreError};
use time::Duration;

use crate::location::{RegistryLocation, open_registry};

/// How an initialization attempt ended for this caller.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitReport {
    /// This caller ran the work and the version is durably ready.
    Completed,
    /// Another caller ran it; the version is durably ready.
    AlreadyReady,
    /// The work ran (here or elsewhere) and failed; the detail is stored.
    Failed(String),
    /// The stored version is newer than the caller's target.
    NewerThanSupported(u64),
    /// The lease was lost while the work ran; the work was cancelled and nothing recorded.
    LeaseLost,
}

/// The work's view of its lease: it must stop when `cancelled()` turns true, and it
/// may fence its own writes with the lease's holder (its id and fencing epoch).
#[derive(Debug, Clone)]
pub struct Cancel {
    lost: Arc<AtomicBool>,
    act_until: Arc<AtomicU64>,
    window: fleet_lease::ActWindow,
    holder: fleet_lease::Holder,
    registry: fleet_registry::RegistryId,
}

impl Cancel {
    /// Whether the work must stop: the lease was lost (denied a renewal), or no renewal
    /// has committed recently enough to prove it still holds ([`fleet_lease::ActWindow`]),
    /// measured on [`crate::process::boot_clock`].
    pub fn cancelled(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || crate::process::boot_clock() >= self.act_until()
    }

    /// When the work must be sent its stop signal unless a renewal commits first: a time
    /// on [`crate::process::boot_clock`]. It only moves later.
    pub fn act_until(&self) -> StdDuration {
        StdDuration::from_nanos(self.act_until.load(Ordering::SeqCst))
    }

    /// The registry the lease is held in, by its id.
    pub fn registry_id(&self) -> &fleet_registry::RegistryId {
        &self.registry
    }

    /// How long the work gets between its stop signal and `SIGKILL`.
    pub fn grace(&self) -> StdDuration {
        self.window.grace
    }

    /// The lease the work runs under: its id and fencing epoch.
    pub fn holder(&self) -> &fleet_lease::Holder {
        &self.holder
    }
}

/// How to run an initialization.
#[derive(Debug, Clone)]
pub struct InitOptions {
    /// The initialization's key.
    pub key: LeaseKey,
    /// The version to bring the instance to.
    pub target_version: u64,
    /// Who this caller is (recorded as the owner).
    pub owner: String,
    /// Lease TTL; renewed every third of it.
    pub ttl: StdDuration,
    /// How often a waiting caller looks again.
    pub poll: StdDuration,
}

fn ttl(d: StdDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::MAX)
}

/// Runs `work` exactly once per version across every caller of the same key: the winner
/// runs it under a renewed lease, the others wait until it is ready or failed.
pub fn run_initialization(
    location: &RegistryLocation,
    options: &InitOptions,
    work: impl FnOnce(&Cancel) -> Result<(), String>,
) -> Result<InitReport, StoreError> {
    let mut registry = open_registry(location, OpenMode::CreateIfMissing)?;
    let mut waited = false;
    loop {
        // A caller that watched another owner's attempt reports that attempt's failure
        // instead of retrying on its heels; a later starter retries.
        if waited
            && let (Some(current), _) = registry.lease(&options.key)?
            && let Some(init) = current.init.as_ref()
            && init.target_version == options.target_version
            && init.status == InitStatus::Failed
        {
            return Ok(InitReport::Failed(init.failure_detail.clone().unwrap_or_default()));
        }
        let sent = crate::process::boot_clock();
        match registry.init_start(&options.key, options.target_version, &options.owner, ttl(options.ttl))? {
            InitDecision::Ready => return Ok(InitReport::AlreadyReady),
            InitDecision::NewerThanSupported { stored } => return Ok(InitReport::NewerThanSupported(stored)),
            InitDecision::Wait { .. } => {
                waited = true;
                std::thread::sleep(options.poll);
            }
            InitDecision::Run(record) => {
                let registry_id = registry.registry_id()?;
                return run_owned(location, options, record, sent, registry_id, work);
            }
        }
    }
}

/// A deadline on the boot clock, as the nanoseconds an atomic holds.
fn nanos(at: StdDuration) -> u64 {
    u64::try_from(at.as_nanos()).unwrap_or(u64::MAX)
}

fn run_owned(
    location: &RegistryLocation,
    options: &InitOptions,
    record: fleet_lease::LeaseRecord,
    sent: StdDuration,
    registry: fleet_registry::RegistryId,
    work: impl FnOnce(&Cancel) -> Result<(), String>,
) -> Result<InitReport, StoreError> {
    let holder = record.holder();
    let window = fleet_lease::ActWindow::for_ttl(options.ttl);
    let cancel = Cancel {
        lost: Arc::new(AtomicBool::new(false)),
        act_until: Arc::new(AtomicU64::new(nanos(sent.saturating_add(window.act)))),
        window,
        holder: holder.clone(),
        registry,
    };
    let (stop, stopped) = mpsc::channel::<()>();
    let renewer = {
        let location = location.clone();
        let key = options.key.clone();
        let holder = holder.clone();
        let cancel = cancel.clone();
        let period = fleet_lease::renew_period(options.ttl);
        let lease_ttl = ttl(options.ttl);
        std::thread::spawn(move || {
            let mut registry = None;
            let mut wait = period;
            loop {
                match stopped.recv_timeout(wait) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                // Measured from the send: the store cannot commit before it. A renewal
                // that cannot answer within the time the work has left is given up on.
                let sent = crate::process::boot_clock();
                let left = cancel.act_until().saturating_sub(sent);
                if left.is_zero() {
                    cancel.lost.store(true, Ordering::SeqCst);
                    return;
                }
                wait = period / 4;
                if registry.is_none() {
                    registry = open_registry(&location, OpenMode::MustExist)
                        .inspect_err(|e| tracing::warn!(lease_key = %key, error = %e, "cannot reach the registry to renew; retrying"))
                        .ok();
                }
                let Some(reg) = registry.as_mut() else { continue };
                reg.set_call_deadline(Some(left));
                match reg.renew_lease(&key, &holder, lease_ttl, &AuditContext::default()) {
                    Ok(Ok(_)) => {
                        cancel.act_until.fetch_max(nanos(sent.saturating_add(window.act)), Ordering::SeqCst);
                        wait = period;
                    }
                    // Denied (taken over, expired): stop the work.
                    Ok(Err(_)) => {
                        cancel.lost.store(true, Ordering::SeqCst);
                        return;
                    }
                    // The store failed this once: try again soon, on a new connection
                    // when this one may be the broken part. Until a renewal commits, the
                    // deadline already secured is what the work acts by.
                    Err(e) => {
                        tracing::warn!(lease_key = %key, error = %e, "cannot renew the initialization lease; retrying");
                        if e.kind() != fleet_registry::StoreErrorKind::Busy {
                            registry = None;
                        }
                    }
                }
            }
        })
    };
    let outcome = work(&cancel);
    let _ = stop.send(());
    // A renewal stalled on an unreachable store is not waited for: its answer, however
    // late, could not extend the work's authority.
    if cancel.cancelled() {
        return Ok(InitReport::LeaseLost);
    }
    let _ = renewer.join();
    if cancel.cancelled() {
        return Ok(InitReport::LeaseLost);
    }
    let mut registry = open_registry(location, OpenMode::MustExist)?;
    let detail = outcome.as_ref().err().cloned();
    match registry.init_finish(&options.key, &holder, outcome.as_ref().map(|_| ()).map_err(String::as_str))? {
        Ok(_) => Ok(match detail {
            None => InitReport::Completed,
            Some(d) => InitReport::Failed(fleet_lease::bound_detail(&d)),
        }),
        Err(_) => Ok(InitReport::LeaseLost),
    }
}
