//! The decisions on a lease record: acquire, take over, renew, resume, release, each
//! by the store's clock and the tenure presented.

use fleet_identity::Timestamp;
use time::Duration;

use crate::record::{
    AcquireMode, FencingEpoch, Holder, HolderProcess, LeaseId, LeaseKey, LeaseKind, LeaseRecord, LeaseState,
};

fleet_identity::outward_codes! {
    /// A successful lease operation, as the audit log names it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    #[non_exhaustive]
    pub enum LeaseOutcome ("lease outcome") {
        /// A new lease (or a lapsed one re-acquired with a higher epoch).
        Acquired = "acquired",
        /// The holder extended its lease.
        Renewed = "renewed",
        /// The holder gave it up.
        Released = "released",
        /// An expired or released lease was taken over by compare-and-swap.
        TakenOver = "taken_over",
    }
}

fleet_identity::outward_codes! {
    /// Why a lease operation was refused. Each is an outcome code of the seeds.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
    #[non_exhaustive]
    pub enum LeaseDenial ("lease denial", explained) {
        /// Another holder's lease is live.
        #[error("lease_held: another holder's lease is live")]
        LeaseHeld = "lease_held",
        /// The lease lapsed or was released; ordinary acquisition cannot recover it.
        #[error("takeover_required: the lease lapsed or was released; take it over with its epoch")]
        TakeoverRequired = "takeover_required",
        /// A takeover named another epoch than the current one.
        #[error("epoch_mismatch: the lease is at another epoch than expected")]
        EpochMismatch = "epoch_mismatch",
        /// A takeover of a lease that is still live.
        #[error("lease_live: the lease has not lapsed and cannot be taken over")]
        LeaseLive = "lease_live",
        /// No such lease.
        #[error("lease_not_found: no such lease")]
        NotFound = "lease_not_found",
        /// The presented tenure is not the current one (a takeover happened).
        #[error("stale_epoch: the lease was taken over; this holder's epoch is stale")]
        StaleEpoch = "stale_epoch",
        /// The presenter is not the holder.
        #[error("not_holder: the lease belongs to another owner or tenure")]
        NotHolder = "not_holder",
        /// The holder's lease lapsed before it renewed.
        #[error("lease_expired: the lease lapsed before renewal")]
        Expired = "lease_expired",
        /// The lease was released.
        #[error("lease_released: the lease was released")]
        ReleasedLease = "lease_released",
        /// The requested TTL exceeds the cap.
        #[error("ttl_exceeds_cap: the requested ttl is above the configured cap")]
        TtlExceedsCap = "ttl_exceeds_cap",
        /// The policy refused.
        #[error("policy_denied: the configured policy refused")]
        PolicyDenied = "policy_denied",
        /// The lease is at the largest fencing epoch; taking it over would reuse one.
        #[error("epoch_exhausted: the lease is at the largest fencing epoch and cannot change hands again")]
        EpochExhausted = "epoch_exhausted",
        /// The caller's host, or its boot, is fenced by an operator as gone for good.
        #[error("host_fenced: an operator fenced this host as gone for good; it may hold no lease")]
        HostFenced = "host_fenced",
    }
}

/// What a new tenure looks like.
#[derive(Debug, Clone)]
pub struct Tenure {
    /// The owner.
    pub owner: String,
    /// A fresh opaque id the caller drew.
    pub lease_id: LeaseId,
    /// How long until it lapses.
    pub ttl: Duration,
    /// Scopes, normalized.
    pub scopes: Vec<String>,
    /// The process that will hold it, where one does.
    pub process: Option<HolderProcess>,
}

fn fresh(
    key: &LeaseKey,
    kind: LeaseKind,
    tenure: &Tenure,
    epoch: FencingEpoch,
    now: Timestamp,
) -> LeaseRecord {
    LeaseRecord {
        lease_key: key.clone(),
        kind,
        owner: tenure.owner.clone(),
        lease_id: tenure.lease_id.clone(),
        fencing_epoch: epoch,
        state: LeaseState::Held,
        acquired_at: now,
        heartbeat_at: now,
        expires_at: now.saturating_add(tenure.ttl),
        released_at: None,
        updated_at: now,
        scopes: tenure.scopes.clone(),
        init: None,
        holder_process: tenure.process.clone(),
    }
}

/// Acquisition. An absent lease is created at epoch 1. A live lease of another holder is
/// `lease_held`. A lapsed or released one is `takeover_required` for connector leases
/// and is taken over (epoch + 1, new lease id) for the others.
pub fn decide_acquire(
    current: Option<&LeaseRecord>,
    key: &LeaseKey,
    kind: LeaseKind,
    tenure: &Tenure,
    now: Timestamp,
) -> Result<(LeaseOutcome, LeaseRecord), LeaseDenial> {
    let Some(current) = current else {
        return Ok((LeaseOutcome::Acquired, fresh(key, kind, tenure, FencingEpoch::FIRST, now)));
    };
    if current.is_live(now) {
        return Err(LeaseDenial::LeaseHeld);
    }
    match kind.acquire_mode() {
        AcquireMode::InsertOnly => Err(LeaseDenial::TakeoverRequired),
        AcquireMode::TakeOverLapsed => {
            let epoch = current.fencing_epoch.next().ok_or(LeaseDenial::EpochExhausted)?;
            let mut next = fresh(key, kind, tenure, epoch, now);
            next.init = current.init.clone();
            Ok((LeaseOutcome::TakenOver, next))
        }
    }
}

/// Takeover by compare-and-swap on the expected epoch: only a lapsed or released lease,
/// only at the epoch the caller saw. The new tenure has a new lease id and epoch + 1.
pub fn decide_takeover(
    current: Option<&LeaseRecord>,
    expected_epoch: FencingEpoch,
    tenure: &Tenure,
    now: Timestamp,
) -> Result<LeaseRecord, LeaseDenial> {
    let current = current.ok_or(LeaseDenial::NotFound)?;
    if current.fencing_epoch != expected_epoch {
        return Err(LeaseDenial::EpochMismatch);
    }
    if current.is_live(now) {
        return Err(LeaseDenial::LeaseLive);
    }
    let epoch = current.fencing_epoch.next().ok_or(LeaseDenial::EpochExhausted)?;
    let mut next = fresh(&current.lease_key, current.kind, tenure, epoch, now);
    next.init = current.init.clone();
    Ok(next)
}

/// Checks that `holder` is the current, live tenure of `current`.
pub fn check_holder(
    current: Option<&LeaseRecord>,
    holder: &Holder,
    now: Timestamp,
) -> Result<(), LeaseDenial> {
    let current = current.ok_or(LeaseDenial::NotFound)?;
    if current.fencing_epoch != holder.fencing_epoch || current.lease_id != holder.lease_id {
        return Err(if current.fencing_epoch > holder.fencing_epoch {
            LeaseDenial::StaleEpoch
        } else {
            LeaseDenial::NotHolder
        });
    }
    if current.owner != holder.owner {
        return Err(LeaseDenial::NotHolder);
    }
    if current.state == LeaseState::Released {
        return Err(LeaseDenial::ReleasedLease);
    }
    if now >= current.expires_at {
        return Err(LeaseDenial::Expired);
    }
    Ok(())
}

/// Renewal: the current, live holder extends its lease by `ttl` from `now`.
pub fn decide_renew(
    current: Option<&LeaseRecord>,
    holder: &Holder,
    ttl: Duration,
    now: Timestamp,
) -> Result<LeaseRecord, LeaseDenial> {
    check_holder(current, holder, now)?;
    let mut next = current.cloned().ok_or(LeaseDenial::NotFound)?;
    next.heartbeat_at = now;
    next.expires_at = now.saturating_add(ttl);
    next.updated_at = now;
    Ok(next)
}

/// Resumption: a new process of the current, live holder carries on the tenure of one
/// that is gone, renewing it at the same epoch and recording itself as the holding
/// process. Only a process of the host the tenure's process ran on may (there the caller
/// proves the former one gone: no live process holds the host's lock); a tenure held
/// from another host is `lease_held` until it lapses, since nothing here can prove that
/// process gone. A tenure that records no process (acquired by hand) may be resumed.
pub fn decide_resume(
    current: Option<&LeaseRecord>,
    holder: &Holder,
    ttl: Duration,
    process: &HolderProcess,
    now: Timestamp,
) -> Result<LeaseRecord, LeaseDenial> {
    let mut next = decide_renew(current, holder, ttl, now)?;
    if next.holder_process.as_ref().is_some_and(|p| p.host_id != process.host_id) {
        return Err(LeaseDenial::LeaseHeld);
    }
    next.holder_process = Some(process.clone());
    Ok(next)
}

/// Release: the current holder gives the lease up. The epoch stays, so the next
/// tenure gets a higher one.
pub fn decide_release(
    current: Option<&LeaseRecord>,
    holder: &Holder,
    now: Timestamp,
) -> Result<LeaseRecord, LeaseDenial> {
    check_holder(current, holder, now)?;
    let mut next = current.cloned().ok_or(LeaseDenial::NotFound)?;
    next.state = LeaseState::Released;
    next.released_at = Some(now);
    next.expires_at = now;
    next.updated_at = now;
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A denial is spelled one way everywhere: JSON (the CLI's `--json`, MCP) as the
    /// audit log and the docs spell it.
    #[test]
    fn every_denial_serializes_as_its_code() {
        use LeaseDenial as D;
        for d in [
            D::LeaseHeld,
            D::TakeoverRequired,
            D::EpochMismatch,
            D::LeaseLive,
            D::NotFound,
            D::StaleEpoch,
            D::NotHolder,
            D::Expired,
            D::ReleasedLease,
            D::TtlExceedsCap,
            D::PolicyDenied,
            D::EpochExhausted,
        ] {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str(), "{d:?}");
            assert_eq!(serde_json::from_value::<LeaseDenial>(d.as_str().into()).unwrap(), d);
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
    }

    fn tenure(owner: &str, id: &str) -> Tenure {
        Tenure {
            owner: owner.into(),
            lease_id: LeaseId::new(id).unwrap(),
            ttl: Duration::seconds(10),
            scopes: vec![],
            process: None,
        }
    }

    fn key() -> LeaseKey {
        LeaseKey::new("workflow:deploy").unwrap()
    }

    #[test]
    fn connector_acquisition_is_insert_only() {
        let (outcome, lease) =
            decide_acquire(None, &key(), LeaseKind::Connector, &tenure("a", "l1"), at(0)).unwrap();
        assert_eq!((outcome, lease.fencing_epoch), (LeaseOutcome::Acquired, FencingEpoch::FIRST));
        let held = decide_acquire(Some(&lease), &key(), LeaseKind::Connector, &tenure("b", "l2"), at(5));
        assert_eq!(held.unwrap_err(), LeaseDenial::LeaseHeld);
        let lapsed = decide_acquire(Some(&lease), &key(), LeaseKind::Connector, &tenure("b", "l2"), at(10));
        assert_eq!(lapsed.unwrap_err(), LeaseDenial::TakeoverRequired);
        let released = decide_release(Some(&lease), &lease.holder(), at(1)).unwrap();
        let again = decide_acquire(Some(&released), &key(), LeaseKind::Connector, &tenure("b", "l2"), at(2));
        assert_eq!(again.unwrap_err(), LeaseDenial::TakeoverRequired);
    }

    #[test]
    fn takeover_needs_the_expected_epoch_and_a_lapsed_lease() {
        let (_, lease) =
            decide_acquire(None, &key(), LeaseKind::Connector, &tenure("a", "l1"), at(0)).unwrap();
        assert_eq!(
            decide_takeover(Some(&lease), FencingEpoch::FIRST, &tenure("b", "l2"), at(5)).unwrap_err(),
            LeaseDenial::LeaseLive
        );
        let two = FencingEpoch::new(2).unwrap();
        assert_eq!(
            decide_takeover(Some(&lease), two, &tenure("b", "l2"), at(11)).unwrap_err(),
            LeaseDenial::EpochMismatch
        );
        let next = decide_takeover(Some(&lease), FencingEpoch::FIRST, &tenure("b", "l2"), at(11)).unwrap();
        assert_eq!((next.fencing_epoch, next.owner.as_str(), next.lease_id.as_str()), (two, "b", "l2"));
        assert_eq!(
            decide_takeover(None, two, &tenure("b", "l2"), at(11)).unwrap_err(),
            LeaseDenial::NotFound
        );
    }

    #[test]
    fn the_old_holder_is_fenced_after_a_takeover() {
        let (_, lease) =
            decide_acquire(None, &key(), LeaseKind::Workflow, &tenure("a", "l1"), at(0)).unwrap();
        let next = decide_takeover(Some(&lease), FencingEpoch::FIRST, &tenure("b", "l2"), at(11)).unwrap();
        let old = lease.holder();
        assert_eq!(
            decide_renew(Some(&next), &old, Duration::seconds(10), at(12)).unwrap_err(),
            LeaseDenial::StaleEpoch
        );
        assert_eq!(decide_release(Some(&next), &old, at(12)).unwrap_err(), LeaseDenial::StaleEpoch);
    }

    #[test]
    fn renewal_fails_after_expiry_release_or_for_another_owner() {
        let (_, lease) =
            decide_acquire(None, &key(), LeaseKind::Workflow, &tenure("a", "l1"), at(0)).unwrap();
        let renewed = decide_renew(Some(&lease), &lease.holder(), Duration::seconds(10), at(9)).unwrap();
        assert_eq!(renewed.expires_at, at(19));
        assert_eq!(
            decide_renew(Some(&lease), &lease.holder(), Duration::seconds(10), at(10)).unwrap_err(),
            LeaseDenial::Expired
        );
        let mut other = lease.holder();
        other.owner = "b".into();
        assert_eq!(
            decide_renew(Some(&lease), &other, Duration::seconds(10), at(1)).unwrap_err(),
            LeaseDenial::NotHolder
        );
        let released = decide_release(Some(&lease), &lease.holder(), at(1)).unwrap();
        assert_eq!(
            decide_renew(Some(&released), &lease.holder(), Duration::seconds(10), at(2)).unwrap_err(),
            LeaseDenial::ReleasedLease
        );
    }

    #[test]
    fn workflow_acquisition_takes_over_a_lapsed_lease_with_a_higher_epoch() {
        let (_, lease) =
            decide_acquire(None, &key(), LeaseKind::Workflow, &tenure("a", "l1"), at(0)).unwrap();
        let (outcome, next) =
            decide_acquire(Some(&lease), &key(), LeaseKind::Workflow, &tenure("b", "l2"), at(10)).unwrap();
        assert_eq!((outcome, next.fencing_epoch.get()), (LeaseOutcome::TakenOver, 2));
    }

    #[test]
    fn the_largest_epoch_is_never_handed_out_twice() {
        let max = FencingEpoch::new(i64::MAX as u64).unwrap();
        assert_eq!(max.next(), None);
        let key = LeaseKey::new("workflow:w").unwrap();
        let tenure = |owner: &str| Tenure {
            owner: owner.into(),
            lease_id: LeaseId::new(format!("lease-{owner}")).unwrap(),
            ttl: Duration::seconds(10),
            scopes: Vec::new(),
            process: None,
        };
        let (_, mut held) = decide_acquire(None, &key, LeaseKind::Workflow, &tenure("a"), at(0)).unwrap();
        held.fencing_epoch = max;
        let later = at(60);
        assert_eq!(
            decide_takeover(Some(&held), max, &tenure("b"), later).unwrap_err(),
            LeaseDenial::EpochExhausted
        );
        let lapsed = decide_acquire(Some(&held), &key, LeaseKind::Workflow, &tenure("b"), later);
        assert_eq!(lapsed.unwrap_err(), LeaseDenial::EpochExhausted);
    }
}
