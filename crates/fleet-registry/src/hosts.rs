//! Hosts over the store: the list an operator reads (each host's boots, signs of life,
//! rows and leases), and the fence an operator sets on a host gone for good, which the
//! registry then enforces on every write from that host and boot (registration,
//! heartbeat, every lease operation).
//!
//! A fence is never set automatically and never for the caller's own host; lifting it
//! (`unfence`) frees only the host's later boots, since each boot it covered keeps a
//! fence of its own.

use fleet_identity::{BootId, HostId, Timestamp};
use fleet_lease::LeaseRecord;
use fleet_model::{FencedBoot, HostEvidence, HostFence, HostProof, OwnershipState, WorkerStatus};
use serde::Serialize;

use crate::error::{StoreError, StoreErrorKind};
use crate::registry::Registry;
use crate::store::{Store, Tx};

/// The longest fence reason kept.
pub const MAX_FENCE_REASON_LEN: usize = 512;

/// The host and boot a registry's writes come from, when its caller said so
/// ([`Registry::acting_from`]): lease operations from a fenced one are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) host_id: HostId,
    pub(crate) boot_id: BootId,
}

/// The fence that stands against `host` and `boot`, read inside the caller's
/// transaction.
pub(crate) fn standing_fence(
    tx: &mut dyn Tx,
    host: &HostId,
    boot: &BootId,
) -> Result<Option<HostFence>, StoreError> {
    Ok(tx.host_fences()?.into_iter().find(|f| f.stands_against(host, boot)))
}

/// The refusal of a write from a fenced host and boot: one line naming the fence.
pub(crate) fn fenced(fence: &HostFence, boot: &BootId) -> StoreError {
    StoreError::new(
        StoreErrorKind::Fenced,
        format!(
            "host {} (boot {boot}) is fenced as gone for good since {} by {}: {}; the registry refuses its writes",
            fence.host_id, fence.fenced_at, fence.fenced_by, fence.reason
        ),
    )
}

/// Refuses when a fence stands against `host` and `boot`.
pub(crate) fn refuse_if_fenced(tx: &mut dyn Tx, host: &HostId, boot: &BootId) -> Result<(), StoreError> {
    match standing_fence(tx, host, boot)? {
        Some(fence) => Err(fenced(&fence, boot)),
        None => Ok(()),
    }
}

/// Records what the registering process's boot says of itself: its hostname, and its
/// clock (`now`, the caller's) against the store's.
pub(crate) fn note_boot(
    tx: &mut dyn Tx,
    reg: &crate::Registration,
    now: Timestamp,
) -> Result<(), StoreError> {
    let at = tx.store_now()?;
    tx.note_host_boot(&fleet_model::HostBoot {
        host_id: reg.process.host_id.clone(),
        boot_id: reg.process.boot_id.clone(),
        hostname: reg.hostname.as_deref().and_then(fleet_model::reported_hostname),
        first_seen_at: at,
        last_seen_at: at,
        clock_offset_ms: Some(now.unix_millis() - at.unix_millis()),
    })
}

fleet_identity::outward_codes! {
    /// What a host looks like from the registry.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum HostState ("host state") {
        /// A row of it heartbeats within its TTL.
        Live = "live",
        /// It has active rows, none of which heartbeats within its TTL.
        Silent = "silent",
        /// It has no active row.
        Idle = "idle",
        /// An operator fenced it (every boot), and the fence stands.
        Fenced = "fenced",
    }
}

/// One boot of a host, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BootReport {
    /// The boot.
    pub boot_id: BootId,
    /// Its first sign of life (earliest registration).
    pub first_seen: Timestamp,
    /// Its last sign of life (latest registration or heartbeat).
    pub last_seen: Timestamp,
    /// Its active rows.
    pub active_rows: usize,
    /// Its rows in a terminal status.
    pub terminal_rows: usize,
    /// Why its processes are known gone, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proven_gone: Option<HostProof>,
}

/// One host, as the list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HostReport {
    /// The host (its machine id).
    pub host_id: HostId,
    /// Live, silent, idle or fenced.
    pub state: HostState,
    /// Its hostname as its latest registering process reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its clock minus the store's, in milliseconds, as measured at its latest
    /// registration (positive: the host's clock is ahead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_offset_ms: Option<i64>,
    /// Its boots, earliest first.
    pub boots: Vec<BootReport>,
    /// Its first sign of life.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<Timestamp>,
    /// Its last sign of life.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<Timestamp>,
    /// Seconds from its last sign of life to the store's clock now. Stamps are the
    /// host's own clock: a negative age says the host's clock is ahead of the store's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen_age_s: Option<i64>,
    /// Active rows whose heartbeat is within its TTL.
    pub live_rows: usize,
    /// Active rows marked stale, or whose heartbeat lapsed.
    pub stale_rows: usize,
    /// Rows in a terminal status.
    pub terminal_rows: usize,
    /// Leases whose holding process runs on it, held and not lapsed.
    pub leases_held: Vec<String>,
    /// The fences recorded for it, lifted ones included.
    pub fences: Vec<HostFence>,
    /// Whether two of its boots show signs of life at overlapping times: two machines
    /// sharing one machine id (cloned from one image), not a reboot.
    pub cloned: bool,
}

/// Every host the registry knows, read in one transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct HostList {
    /// The store's clock when it was read.
    pub at: Timestamp,
    /// Each host, in id order.
    pub hosts: Vec<HostReport>,
}

/// What a fence wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FenceReport {
    /// The host.
    pub host_id: HostId,
    /// The fences written: every boot of the host, and each boot the registry knows.
    pub fences: Vec<HostFence>,
}

/// Builds the list from the rows, leases, fences and boots' own reports read at `now`.
pub fn host_list(
    rows: &[fleet_model::WorkerRow],
    leases: &[LeaseRecord],
    fences: &[HostFence],
    reports: &[fleet_model::HostBoot],
    now: Timestamp,
) -> HostList {
    let evidence = HostEvidence::new(rows, fences);
    let clones = evidence.clones();
    let mut ids: Vec<&HostId> = evidence.hosts();
    ids.extend(reports.iter().map(|r| &r.host_id));
    ids.sort();
    ids.dedup();
    // Each host's live, stale and terminal rows, counted in one pass over the rows.
    let mut counts: std::collections::HashMap<&HostId, (usize, usize, usize)> =
        std::collections::HashMap::new();
    for row in rows {
        let Some(host) = &row.host_id else { continue };
        let (live, stale, terminal) = counts.entry(host).or_default();
        if row.status != WorkerStatus::Active {
            *terminal += 1;
        } else if row.ownership_state == Some(OwnershipState::Stale) || row.heartbeat_expired(now) {
            *stale += 1;
        } else {
            *live += 1;
        }
    }
    let hosts = ids
        .into_iter()
        .map(|host| {
            let latest = reports.iter().filter(|r| &r.host_id == host).max_by_key(|r| r.last_seen_at);
            let spans = evidence.boots(host);
            let boots: Vec<BootReport> = spans
                .iter()
                .map(|s| BootReport {
                    boot_id: s.boot_id.clone(),
                    first_seen: s.first_seen,
                    last_seen: s.last_seen,
                    active_rows: s.active_rows,
                    terminal_rows: s.terminal_rows,
                    proven_gone: evidence.proof(host, &s.boot_id),
                })
                .collect();
            let (live_rows, stale_rows, terminal_rows) = counts.get(host).copied().unwrap_or_default();
            let first_seen = spans.iter().map(|s| s.first_seen).min();
            let last_seen = spans.iter().map(|s| s.last_seen).max();
            let leases_held = leases
                .iter()
                .filter(|l| l.is_live(now) && l.holder_process.as_ref().is_some_and(|p| &p.host_id == host))
                .map(|l| l.lease_key.to_string())
                .collect();
            let host_fences: Vec<HostFence> = evidence.fences(host).cloned().collect();
            let fenced = host_fences.iter().any(|f| f.boot_id == FencedBoot::Every && f.lifted_at.is_none());
            let state = if fenced {
                HostState::Fenced
            } else if live_rows > 0 {
                HostState::Live
            } else if stale_rows > 0 {
                HostState::Silent
            } else {
                HostState::Idle
            };
            HostReport {
                host_id: host.clone(),
                state,
                hostname: latest.and_then(|r| r.hostname.clone()),
                clock_offset_ms: latest.and_then(|r| r.clock_offset_ms),
                boots,
                first_seen,
                last_seen,
                last_seen_age_s: last_seen.map(|t| now.since(t).whole_seconds()),
                live_rows,
                stale_rows,
                terminal_rows,
                leases_held,
                fences: host_fences,
                cloned: clones.iter().any(|c| &c.host_id == host),
            }
        })
        .collect();
    HostList { at: now, hosts }
}

impl<S: Store> Registry<S> {
    /// This registry, with the host and boot its caller runs on: every lease operation
    /// it makes is refused (`host_fenced`, audited) while a fence stands against them.
    /// Registrations and heartbeats carry their own process's host and boot and are
    /// refused whatever this says.
    pub fn acting_from(mut self, host_id: HostId, boot_id: BootId) -> Self {
        self.caller = Some(Caller { host_id, boot_id });
        self
    }

    /// Every host the registry knows: its boots, signs of life, rows, leases and
    /// fences, read in one transaction at the store's clock.
    pub fn hosts(&mut self) -> Result<HostList, StoreError> {
        self.store_mut().read(|tx| {
            let now = tx.store_now()?;
            Ok(host_list(&tx.workers()?, &tx.leases(None)?, &tx.host_fences()?, &tx.host_boots()?, now))
        })
    }

    /// Every host fence, lifted ones included.
    pub fn host_fences(&mut self) -> Result<Vec<HostFence>, StoreError> {
        self.store_mut().read(|tx| tx.host_fences())
    }

    /// What each host's boots last said of themselves.
    pub fn host_boots(&mut self) -> Result<Vec<fleet_model::HostBoot>, StoreError> {
        self.store_mut().read(|tx| tx.host_boots())
    }

    /// Fences `host` as gone for good: every boot of it, until lifted, and each boot of
    /// it the registry knows (from its rows and the leases its processes hold), for
    /// good. Refused for the caller's own host (`own_host`), and for a reason that is
    /// empty, longer than [`MAX_FENCE_REASON_LEN`] or holds a control character.
    pub fn fence_host(
        &mut self,
        host: &HostId,
        reason: &str,
        fenced_by: &str,
        own_host: &HostId,
    ) -> Result<FenceReport, StoreError> {
        if host == own_host {
            return Err(StoreError::invalid(format!(
                "host {host} is the host this command runs on: a host never fences itself"
            )));
        }
        check_words("reason", reason)?;
        check_words("fenced_by", fenced_by)?;
        // A plain write: a fence hands out no epoch, and must be writable while grants wait
        // for an operator (after a failover, say).
        let report = self.store_mut().write(|tx| {
            let now = tx.store_now()?;
            let mut boots: Vec<BootId> = tx
                .workers()?
                .into_iter()
                .filter(|r| r.host_id.as_ref() == Some(host))
                .filter_map(|r| r.boot_id)
                .chain(
                    tx.leases(None)?
                        .into_iter()
                        .filter_map(|l| l.holder_process)
                        .filter(|p| &p.host_id == host)
                        .map(|p| p.boot_id),
                )
                .collect();
            boots.sort();
            boots.dedup();
            let known = tx.host_fences()?;
            let fence = |boot_id: FencedBoot| HostFence {
                host_id: host.clone(),
                boot_id,
                reason: reason.to_owned(),
                fenced_by: fenced_by.to_owned(),
                fenced_at: now,
                lifted_at: None,
                lifted_by: None,
            };
            let mut written = Vec::new();
            for boot in std::iter::once(FencedBoot::Every).chain(boots.into_iter().map(FencedBoot::One)) {
                // A boot fenced before keeps its first fence: who, when and why.
                if known.iter().any(|f| f.host_id == *host && f.boot_id == boot && f.lifted_at.is_none()) {
                    continue;
                }
                let new = fence(boot);
                tx.put_host_fence(&new)?;
                written.push(new);
            }
            Ok::<_, StoreError>(FenceReport { host_id: host.clone(), fences: written })
        })?;
        tracing::info!(host = %host, fenced_by, reason, fences = report.fences.len(), "host fenced");
        Ok(report)
    }

    /// Lifts the fence of every boot of `host`, so that a later boot of it may write
    /// again; each boot it covered stays fenced. `NotFound` when no such fence stands.
    pub fn unfence_host(&mut self, host: &HostId, lifted_by: &str) -> Result<HostFence, StoreError> {
        check_words("lifted_by", lifted_by)?;
        let lifted = self.store_mut().write(|tx| {
            let now = tx.store_now()?;
            let standing = tx
                .host_fences()?
                .into_iter()
                .find(|f| f.host_id == *host && f.boot_id == FencedBoot::Every && f.lifted_at.is_none())
                .ok_or_else(|| StoreError::not_found(format!("host {host} is not fenced")))?;
            let lifted =
                HostFence { lifted_at: Some(now), lifted_by: Some(lifted_by.to_owned()), ..standing };
            tx.put_host_fence(&lifted)?;
            Ok::<_, StoreError>(lifted)
        })?;
        tracing::info!(host = %host, lifted_by, "host unfenced for its later boots");
        Ok(lifted)
    }
}

/// A fence's words are shown to every operator: non-empty, bounded, one line.
fn check_words(field: &str, text: &str) -> Result<(), StoreError> {
    if text.trim().is_empty() {
        return Err(StoreError::invalid(format!("a host fence's {field} must not be empty")));
    }
    if text.len() > MAX_FENCE_REASON_LEN {
        return Err(StoreError::invalid(format!(
            "a host fence's {field} is at most {MAX_FENCE_REASON_LEN} bytes, got {}",
            text.len()
        )));
    }
    if text.chars().any(char::is_control) {
        return Err(StoreError::invalid(format!("a host fence's {field} holds a control character")));
    }
    Ok(())
}
