//! Fenced leases as a pure state machine: every operation is a function from the current
//! record, the request and the store's `now` to a decision value.
//!
//! A lease is a liveness signal, not proof of exclusive access. Safety comes from the
//! fencing epoch: it rises by one on every takeover, and every protected action checks
//! it. A TTL is a minimum: nobody else can take the lease over before it lapses, but the
//! holder may have lost it by the time it acts, so it must present its epoch.
//!
//! ```
//! use fleet_identity::Timestamp;
//! use fleet_lease::{FencingEpoch, LeaseId, LeaseKey, LeaseKind, Tenure};
//! use fleet_lease::{decide_acquire, decide_renew, decide_takeover};
//! use time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let key = LeaseKey::new("workflow:deploy")?;
//! let tenure = |owner: &str, id: &str| -> Result<Tenure, Box<dyn std::error::Error>> {
//!     Ok(Tenure { owner: owner.into(), lease_id: LeaseId::new(id)?, ttl: Duration::seconds(30), scopes: vec![], process: None })
//! };
//! let t0 = Timestamp::parse("2026-07-30T12:00:00Z")?;
//! let (_, a) = decide_acquire(None, &key, LeaseKind::Workflow, &tenure("a", "lease-a")?, t0)?;
//! assert_eq!(a.fencing_epoch, FencingEpoch::FIRST);
//!
//! // A paused holder's lease lapses; the next holder takes it over at a higher epoch...
//! let later = t0.saturating_add(Duration::minutes(5));
//! let b = decide_takeover(Some(&a), a.fencing_epoch, &tenure("b", "lease-b")?, later)?;
//! assert!(b.fencing_epoch > a.fencing_epoch);
//! // ...and the former holder, waking up, can no longer act on its epoch.
//! let stale = decide_renew(Some(&b), &a.holder(), Duration::seconds(30), later);
//! assert!(stale.is_err());
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod act;
mod connector;
mod grant;
mod init;
mod lease;
mod record;

pub use act::{ActWindow, DRIFT_PER_TTL, MAX_GRACE, SLACK, renew_period};
pub use connector::{ConnectorOp, decide_connector};
pub use grant::{
    ConnectorIdentity, ConnectorPolicy, DenyAll, Grant, GrantDenial, GrantIssuer, GrantLimits,
    PolicyDecision, PolicyRule, StaticPolicy, normalize_scopes,
};
pub use init::{
    InitDecision, InitState, InitStatus, MAX_FAILURE_DETAIL, bound_detail, decide_init_finish,
    decide_init_start,
};
pub use lease::{
    LeaseDenial, LeaseOutcome, Tenure, check_holder, decide_acquire, decide_release, decide_renew,
    decide_resume, decide_takeover,
};
pub use record::{
    AcquireMode, FencingEpoch, Holder, HolderProcess, LEASE_COLUMNS, LeaseId, LeaseKey, LeaseKeyError,
    LeaseKind, LeaseRecord, LeaseRecordError, LeaseState,
};
