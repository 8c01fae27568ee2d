//! Fenced leases as a pure state machine: every operation is a function from the current
//! record, the request and the store's `now` to a decision value.
//!
//! A lease is a liveness signal, not proof of exclusive access. Safety comes from the
//! fencing epoch: it rises by one on every takeover, and every protected action checks
//! it. A TTL is a minimum: nobody else can take the lease over before it lapses, but the
//! holder may have lost it by the time it acts, so it must present its epoch.

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
    AcquireMode, FencingEpoch, Holder, HolderProcess, LEASE_COLUMNS, LeaseId, LeaseKey, LeaseKind,
    LeaseRecord, LeaseState,
};
