//! One decision for every connector-lease operation. Acquisition, renewal, release and
//! takeover each pass the same two gates before the lease rules run: the TTL cap, then
//! the policy (deny by default). No operation on a connector lease reaches the store
//! without them.

use fleet_identity::Timestamp;
use time::Duration;

use crate::grant::{ConnectorIdentity, ConnectorPolicy, GrantLimits, PolicyDecision};
use crate::{
    FencingEpoch, Holder, HolderProcess, LeaseDenial, LeaseKind, LeaseOutcome, LeaseRecord, Tenure,
    decide_acquire, decide_release, decide_renew, decide_resume, decide_takeover,
};

/// An operation on a connector lease.
#[derive(Debug, Clone, Copy)]
pub enum ConnectorOp<'a> {
    /// Insert-only acquisition by the tenure's owner (the connector).
    Acquire(&'a Tenure),
    /// The holder extends its lease by `ttl` from now.
    Renew(&'a Holder, Duration),
    /// A new process of the holder carries on its tenure (see
    /// [`decide_resume`](crate::decide_resume)), renewing it by `ttl` from now.
    Resume(&'a Holder, Duration, &'a HolderProcess),
    /// The holder gives the lease up.
    Release(&'a Holder),
    /// A new tenure takes over a lapsed or released lease at the epoch it saw.
    TakeOver(FencingEpoch, &'a Tenure),
}

impl ConnectorOp<'_> {
    /// The event name in the audit log.
    pub fn event(&self) -> &'static str {
        match self {
            ConnectorOp::Acquire(_) => "acquire",
            ConnectorOp::Renew(..) | ConnectorOp::Resume(..) => "renew",
            ConnectorOp::Release(_) => "release",
            ConnectorOp::TakeOver(..) => "takeover",
        }
    }

    /// Who asks: the connector.
    pub fn connector(&self) -> &str {
        match self {
            ConnectorOp::Acquire(t) | ConnectorOp::TakeOver(_, t) => &t.owner,
            ConnectorOp::Renew(h, _) | ConnectorOp::Resume(h, ..) | ConnectorOp::Release(h) => &h.owner,
        }
    }
}

/// Decides `op` on the connector lease of `identity`, whose current record is `current`:
/// the cap on any TTL the operation asks for, then the policy for the connector, scopes
/// and TTL the lease would hold after it, then the lease rules.
pub fn decide_connector(
    identity: &ConnectorIdentity,
    op: ConnectorOp<'_>,
    current: Option<&LeaseRecord>,
    now: Timestamp,
    limits: GrantLimits,
    policy: &dyn ConnectorPolicy,
) -> Result<(LeaseOutcome, LeaseRecord), LeaseDenial> {
    if current.is_some_and(|c| c.kind != LeaseKind::Connector) {
        return Err(LeaseDenial::NotFound);
    }
    let held_scopes = current.map_or(&[][..], |c| c.scopes.as_slice());
    let (scopes, ttl) = match op {
        ConnectorOp::Acquire(t) | ConnectorOp::TakeOver(_, t) => (t.scopes.as_slice(), Some(t.ttl)),
        ConnectorOp::Renew(_, ttl) | ConnectorOp::Resume(_, ttl, _) => (held_scopes, Some(ttl)),
        ConnectorOp::Release(_) => (held_scopes, None),
    };
    if let Some(ttl) = ttl
        && (ttl <= Duration::ZERO || ttl > limits.max_lease_ttl())
    {
        return Err(LeaseDenial::TtlExceedsCap);
    }
    if policy.authorize_lease(identity, op.connector(), scopes, ttl) != PolicyDecision::Allow {
        return Err(LeaseDenial::PolicyDenied);
    }
    let key = identity.lease_key();
    match op {
        ConnectorOp::Acquire(tenure) => decide_acquire(current, &key, LeaseKind::Connector, tenure, now),
        ConnectorOp::Renew(holder, ttl) => {
            decide_renew(current, holder, ttl, now).map(|r| (LeaseOutcome::Renewed, r))
        }
        ConnectorOp::Resume(holder, ttl, process) => {
            decide_resume(current, holder, ttl, process, now).map(|r| (LeaseOutcome::Renewed, r))
        }
        ConnectorOp::Release(holder) => {
            decide_release(current, holder, now).map(|r| (LeaseOutcome::Released, r))
        }
        ConnectorOp::TakeOver(epoch, tenure) => {
            decide_takeover(current, epoch, tenure, now).map(|r| (LeaseOutcome::TakenOver, r))
        }
    }
}
