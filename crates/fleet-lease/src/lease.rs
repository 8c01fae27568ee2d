//! The lease record and the decisions on it.

use std::fmt;

use fleet_identity::{BootId, HostId, IdentityError, Pid, Timestamp};
use serde::{Deserialize, Serialize};
use time::Duration;

/// A positive fencing epoch; every takeover makes it one higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct FencingEpoch(u64);

impl FencingEpoch {
    /// The first epoch.
    pub const FIRST: FencingEpoch = FencingEpoch(1);

    /// Wraps a positive epoch that fits a signed 64-bit column.
    pub fn new(value: u64) -> Result<Self, IdentityError> {
        if value > 0 && i64::try_from(value).is_ok() {
            Ok(Self(value))
        } else {
            Err(IdentityError::Malformed {
                kind: "fencing epoch",
                value: value.to_string(),
                expected: "a positive integer below 2^63",
            })
        }
    }

    /// The epoch as a number.
    pub fn get(self) -> u64 {
        self.0
    }

    /// The next epoch, or `None` at the largest epoch a store can keep: an epoch is never
    /// handed out twice, so a lease there can never change hands again.
    pub fn next(self) -> Option<Self> {
        Self::new(self.0.checked_add(1)?).ok()
    }
}

impl TryFrom<u64> for FencingEpoch {
    type Error = IdentityError;
    fn try_from(v: u64) -> Result<Self, Self::Error> {
        Self::new(v)
    }
}

impl From<FencingEpoch> for u64 {
    fn from(e: FencingEpoch) -> u64 {
        e.0
    }
}

impl fmt::Display for FencingEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

macro_rules! token {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Validates and wraps the value: 1 to 512 printable characters, no whitespace.
            pub fn new(value: impl Into<String>) -> Result<Self, IdentityError> {
                let value = value.into();
                if value.is_empty() || value.len() > 512 || value.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(IdentityError::Malformed {
                        kind: $kind,
                        value,
                        expected: "1 to 512 characters without whitespace",
                    });
                }
                Ok(Self(value))
            }

            /// The value as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdentityError;
            fn try_from(v: String) -> Result<Self, Self::Error> {
                Self::new(v)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdentityError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }
    };
}

token!(
    /// What a lease protects: `connector:<tenant>/<agent>/<binding>`, `workflow:<name>` or
    /// `init:<key>`.
    LeaseKey,
    "lease key"
);
impl LeaseKey {
    /// What the key names: its kind and, for a connector key, the binding. A key that
    /// names nothing (`workflow:`) or no known kind is refused, naming the form wanted;
    /// every command and every import checks keys by this one rule.
    pub fn kind(&self) -> Result<(LeaseKind, Option<crate::ConnectorIdentity>), String> {
        let text = self.as_str();
        if let Some(rest) = text.strip_prefix("connector:") {
            let parts: Vec<&str> = rest.split('/').collect();
            let [tenant, agent, binding] = parts.as_slice() else {
                return Err(format!("lease key {text:?} is not connector:TENANT/AGENT/BINDING"));
            };
            let id = crate::ConnectorIdentity::new(tenant, agent, binding)?;
            return Ok((LeaseKind::Connector, Some(id)));
        }
        for (prefix, kind) in [("workflow:", LeaseKind::Workflow), ("init:", LeaseKind::Initialization)] {
            match text.strip_prefix(prefix) {
                Some("") => return Err(format!("lease key {text:?} names no {prefix} lease: {prefix}NAME")),
                Some(_) => return Ok((kind, None)),
                None => {}
            }
        }
        Err(format!("lease key {text:?} must start with workflow:, connector: or init:"))
    }
}

token!(
    /// The opaque id of one tenure of a lease; a takeover rotates it.
    LeaseId,
    "lease id"
);

fleet_identity::outward_codes! {
    /// Which of the three uses a lease serves.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum LeaseKind ("lease kind") {
        /// A connector binding (seed 002): insert-only acquisition.
        Connector = "connector",
        /// A workflow lease whose owner stale retirement must not touch.
        Workflow = "workflow",
        /// One-time initialization (seed 001).
        Initialization = "initialization",
    }
}

impl LeaseKind {
    /// How ordinary acquisition treats an expired or released lease.
    pub fn acquire_mode(self) -> AcquireMode {
        match self {
            LeaseKind::Connector => AcquireMode::InsertOnly,
            LeaseKind::Workflow | LeaseKind::Initialization => AcquireMode::TakeOverLapsed,
        }
    }
}

fleet_identity::outward_codes! {
    /// Whether the lease is held or was given up.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum LeaseState ("lease state") {
        /// Held until `expires_at` unless renewed.
        Held = "held",
        /// Released by its holder.
        Released = "released",
    }
}

/// The columns of `leases`, in the order every backend stores and reads them (the
/// field names of [`LeaseRecord`], with `init` spread over three columns).
pub const LEASE_COLUMNS: [&str; 16] = [
    "lease_key",
    "kind",
    "owner",
    "lease_id",
    "fencing_epoch",
    "state",
    "acquired_at",
    "heartbeat_at",
    "expires_at",
    "released_at",
    "updated_at",
    "scopes",
    "target_version",
    "init_status",
    "failure_detail",
    "holder_process",
];

/// One lease row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct LeaseRecord {
    pub lease_key: LeaseKey,
    pub kind: LeaseKind,
    pub owner: String,
    pub lease_id: LeaseId,
    pub fencing_epoch: FencingEpoch,
    pub state: LeaseState,
    pub acquired_at: Timestamp,
    pub heartbeat_at: Timestamp,
    pub expires_at: Timestamp,
    pub released_at: Option<Timestamp>,
    pub updated_at: Timestamp,
    /// Normalized scopes (connector leases).
    pub scopes: Vec<String>,
    /// Initialization state (initialization leases).
    pub init: Option<crate::init::InitState>,
    /// The process that holds the tenure on the owner's behalf, where one does
    /// (`connector run`): a second process of the same owner on another host must not
    /// resume the tenure beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_process: Option<HolderProcess>,
}

/// The process that holds a tenure: which host, which boot of it, which pid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderProcess {
    /// The host (its machine id).
    pub host_id: HostId,
    /// The boot of that host.
    pub boot_id: BootId,
    /// The process.
    pub pid: Pid,
}

impl fmt::Display for HolderProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid {} on host {}", self.pid, self.host_id)
    }
}

impl LeaseRecord {
    /// Checks the row by the rules the commands that write leases follow: a key that
    /// names a lease of the row's kind, an owner, scopes only on a connector lease, an
    /// initialization state only on an initialization lease, an expiry after the
    /// acquisition. What an import refuses before it writes anything.
    pub fn check(&self) -> Result<(), String> {
        let key = &self.lease_key;
        let (kind, _) = key.kind()?;
        if kind != self.kind {
            return Err(format!(
                "lease {key} is of kind {}, but its key names a {} lease",
                self.kind.as_str(),
                kind.as_str()
            ));
        }
        if self.owner.is_empty() || self.owner.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "lease {key} has owner {:?}: 1 or more characters without whitespace",
                self.owner
            ));
        }
        if !self.scopes.is_empty() && kind != LeaseKind::Connector {
            return Err(format!("lease {key} has scopes, which only connector leases hold"));
        }
        if self.init.is_some() && kind != LeaseKind::Initialization {
            return Err(format!("lease {key} has an initialization state, which only init: leases hold"));
        }
        if self.expires_at < self.acquired_at {
            return Err(format!("lease {key} expires before it was acquired"));
        }
        Ok(())
    }

    /// Whether the lease is held and unexpired at `now` (on the store's clock).
    pub fn is_live(&self, now: Timestamp) -> bool {
        self.state == LeaseState::Held && now < self.expires_at
    }
}

/// How acquisition treats a lease that lapsed or was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireMode {
    /// Only an absent lease can be acquired; a lapsed one needs an explicit takeover.
    InsertOnly,
    /// A lapsed or released lease is taken over (epoch + 1) by acquisition itself.
    TakeOverLapsed,
}

/// What the caller holds, and presents to renew, release or act.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Holder {
    /// Who holds it.
    pub owner: String,
    /// The tenure.
    pub lease_id: LeaseId,
    /// The epoch of the tenure.
    pub fencing_epoch: FencingEpoch,
}

impl LeaseRecord {
    /// The holder this record names.
    pub fn holder(&self) -> Holder {
        Holder {
            owner: self.owner.clone(),
            lease_id: self.lease_id.clone(),
            fencing_epoch: self.fencing_epoch,
        }
    }
}

fleet_identity::outward_codes! {
    /// A successful lease operation, as the audit log names it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
