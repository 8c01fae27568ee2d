//! Fenced leases over the store: each operation is one write transaction that reads the
//! lease and the store's clock, asks `fleet-lease` for the decision, writes the new
//! record by compare-and-swap, and appends to the audit log, whatever the outcome.

use std::collections::BTreeSet;

use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorOp, ConnectorPolicy, FencingEpoch, GrantLimits, Holder, HolderProcess,
    InitDecision, LeaseDenial, LeaseId, LeaseKey, LeaseKind, LeaseOutcome, LeaseRecord, Tenure,
    decide_acquire, decide_connector, decide_init_finish, decide_init_start, decide_release, decide_renew,
    decide_takeover,
};
use serde::Serialize;
use time::Duration;

use crate::error::StoreError;
use crate::records::lease_scope;
pub use crate::records::{AuditEntry, AuditEntryError};
use crate::registry::Registry;
use crate::store::{Store, Tx};

/// Who is acting, for the audit log.
#[derive(Debug, Clone, Default)]
pub struct AuditContext {
    /// The caller's correlation id.
    pub correlation_id: Option<String>,
    /// The connector binding, for connector leases.
    pub binding: Option<String>,
}

/// The active workflow-lease owners, with a token that moves whenever they change
/// (seed 004's `external_state_fingerprint`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ActiveLeases {
    /// Owners of live workflow leases.
    pub owners: BTreeSet<String>,
    /// Digest over every live workflow lease's key, owner, id and epoch.
    pub fingerprint: String,
}

/// The longest lease owner accepted.
pub const MAX_OWNER_LEN: usize = 256;

/// An owner names who holds a lease in every listing and audit entry: it must be
/// non-empty, at most [`MAX_OWNER_LEN`] bytes, and free of control characters (which
/// could forge lines in what people read).
fn valid_owner(owner: &str) -> Result<(), StoreError> {
    if owner.is_empty() {
        return Err(StoreError::invalid("a lease owner must not be empty"));
    }
    if owner.len() > MAX_OWNER_LEN {
        return Err(StoreError::invalid(format!(
            "a lease owner is at most {MAX_OWNER_LEN} bytes, got {}",
            owner.len()
        )));
    }
    if owner.chars().any(char::is_control) {
        return Err(StoreError::invalid(format!("lease owner {owner:?} holds a control character")));
    }
    Ok(())
}

fn new_lease_id() -> Result<LeaseId, StoreError> {
    LeaseId::new(format!("lease-{}", uuid::Uuid::now_v7())).map_err(|e| StoreError::invalid(e.to_string()))
}

#[allow(clippy::too_many_arguments)]
fn audit(
    tx: &mut dyn Tx,
    event: &str,
    result: Result<&LeaseRecord, LeaseDenial>,
    current: Option<&LeaseRecord>,
    key: &LeaseKey,
    kind: LeaseKind,
    identity: &str,
    ctx: &AuditContext,
    outcome: Option<LeaseOutcome>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let (outcome, reason, epoch, connector) = match result {
        Ok(record) => (
            outcome.map_or("ok", LeaseOutcome::as_str).to_owned(),
            None,
            Some(record.fencing_epoch.get()),
            (kind == LeaseKind::Connector).then(|| record.owner.clone()),
        ),
        Err(denial) => (
            "denied".to_owned(),
            Some(denial.as_str().to_owned()),
            current.map(|c| c.fencing_epoch.get()),
            (kind == LeaseKind::Connector).then(|| identity.to_owned()),
        ),
    };
    tx.append_audit(&AuditEntry {
        id: 0,
        event: event.to_owned(),
        outcome,
        reason,
        lease_key: key.to_string(),
        kind,
        identity: Some(identity.to_owned()),
        binding: ctx.binding.clone(),
        connector,
        fencing_epoch: epoch,
        correlation_id: ctx.correlation_id.clone(),
        at: now,
    })
}

/// The generic lease operations carry no connector policy, so on a connector lease they
/// are decided as the default policy decides: refused.
fn no_policy_for_connectors(current: Option<&LeaseRecord>, kind: LeaseKind) -> Result<(), LeaseDenial> {
    if kind == LeaseKind::Connector || current.is_some_and(|c| c.kind == LeaseKind::Connector) {
        Err(LeaseDenial::PolicyDenied)
    } else {
        Ok(())
    }
}

/// Writes `next` over `current` by compare-and-swap; inside the write transaction only a
/// broken store can make it miss. A new tenure's epoch is raised above every epoch the
/// key ever had, should the lease row have been restored from an older copy.
fn swap(tx: &mut dyn Tx, current: Option<&LeaseRecord>, next: &mut LeaseRecord) -> Result<(), StoreError> {
    let scope = lease_scope(&next.lease_key);
    let new_tenure = current.is_none_or(|c| c.lease_id != next.lease_id);
    let floor = crate::replication::epoch_floor(tx, &scope)?;
    if new_tenure && next.fencing_epoch.get() <= floor {
        next.fencing_epoch = FencingEpoch::try_from(floor.saturating_add(1))
            .map_err(|e| StoreError::invalid(e.to_string()))?;
    }
    // The mark only rises: a renewal at the epoch it already covers writes nothing there.
    if next.fencing_epoch.get() > floor {
        tx.raise_high_water(&scope, next.fencing_epoch.get())?;
    }
    if tx.put_lease(current, next)? {
        Ok(())
    } else {
        Err(StoreError::conflict(format!("lease {} changed under its write lock", next.lease_key)))
    }
}

/// A lease write whose commit outcome is unknown (the connection was lost after COMMIT
/// was sent) says so with its key and the epoch it may hold, never as a plain failure:
/// the caller must not act on it, and must not take it as refused either.
fn outcome_unknown(e: StoreError, key: &LeaseKey, event: &str, epoch: Option<u64>) -> StoreError {
    if e.kind() != crate::StoreErrorKind::OutcomeUnknown {
        return e;
    }
    let at = epoch.map_or_else(String::new, |n| format!(" at fencing epoch {n}"));
    StoreError::new(
        crate::StoreErrorKind::OutcomeUnknown,
        format!(
            "lease {key}: outcome unknown: the {event}{at} may have committed or not ({e}); \
             `fleetctl lease show {key}` tells once the registry answers"
        ),
    )
}

/// A request on a connector lease, as a caller makes it.
#[derive(Debug, Clone, Copy)]
pub enum ConnectorRequest<'a> {
    /// Insert-only acquisition.
    Acquire {
        /// The connector that will hold it.
        connector: &'a str,
        /// The scopes it asks for, normalized.
        scopes: &'a [String],
        /// How long.
        ttl: Duration,
        /// The process that will hold it, where one does.
        process: Option<&'a HolderProcess>,
    },
    /// The holder extends its lease.
    Renew {
        /// The current tenure.
        holder: &'a Holder,
        /// How long from now.
        ttl: Duration,
    },
    /// A new process of the holder carries on its tenure: a renewal that records the
    /// process (see `fleet_lease::decide_resume`).
    Resume {
        /// The current tenure.
        holder: &'a Holder,
        /// How long from now.
        ttl: Duration,
        /// The process that holds it from now on.
        process: &'a HolderProcess,
    },
    /// The holder gives its lease up.
    Release {
        /// The current tenure.
        holder: &'a Holder,
    },
    /// A takeover of a lapsed or released lease at the epoch the caller saw.
    TakeOver {
        /// The epoch seen.
        expected_epoch: FencingEpoch,
        /// The new holder.
        connector: &'a str,
        /// The scopes it asks for.
        scopes: &'a [String],
        /// How long.
        ttl: Duration,
        /// The process that will hold it, where one does.
        process: Option<&'a HolderProcess>,
    },
}

/// What a lease operation returns: the new record, or the seed's denial code.
pub type LeaseResult = Result<LeaseRecord, LeaseDenial>;

impl<S: Store> Registry<S> {
    /// Acquires `key` for `owner`: workflow and initialization leases, taking over a
    /// lapsed lease with a higher epoch. Connector leases go through
    /// [`connector_lease`](Self::connector_lease); here they are refused.
    pub fn acquire_lease(
        &mut self,
        key: &LeaseKey,
        kind: LeaseKind,
        owner: &str,
        ttl: Duration,
        scopes: &[String],
        ctx: &AuditContext,
    ) -> Result<LeaseResult, StoreError> {
        valid_owner(owner)?;
        let lease_id = new_lease_id()?;
        let tenure =
            Tenure { owner: owner.to_owned(), lease_id, ttl, scopes: scopes.to_vec(), process: None };
        self.lease_step(key, kind, owner, "acquire", ctx, |current, now| {
            no_policy_for_connectors(current, kind)?;
            decide_acquire(current, key, kind, &tenure, now)
        })
    }

    /// Any operation on a connector lease, decided in one place inside the transaction
    /// that reads the lease: the TTL cap and the policy apply to acquisition, renewal,
    /// release and takeover alike, then the lease rules (see `fleet_lease::decide_connector`).
    #[allow(clippy::too_many_arguments)]
    pub fn connector_lease(
        &mut self,
        identity: &ConnectorIdentity,
        op: ConnectorRequest<'_>,
        limits: GrantLimits,
        policy: &dyn ConnectorPolicy,
        ctx: &AuditContext,
    ) -> Result<LeaseResult, StoreError> {
        let key = identity.lease_key();
        if let ConnectorRequest::Acquire { connector, .. } | ConnectorRequest::TakeOver { connector, .. } = op
        {
            valid_owner(connector)?;
        }
        let tenure = match op {
            ConnectorRequest::Acquire { connector, scopes, ttl, process }
            | ConnectorRequest::TakeOver { connector, scopes, ttl, process, .. } => Some(Tenure {
                owner: connector.to_owned(),
                lease_id: new_lease_id()?,
                ttl,
                scopes: scopes.to_vec(),
                process: process.cloned(),
            }),
            _ => None,
        };
        let op = match (op, tenure.as_ref()) {
            (ConnectorRequest::Acquire { .. }, Some(t)) => ConnectorOp::Acquire(t),
            (ConnectorRequest::TakeOver { expected_epoch, .. }, Some(t)) => {
                ConnectorOp::TakeOver(expected_epoch, t)
            }
            (ConnectorRequest::Renew { holder, ttl }, _) => ConnectorOp::Renew(holder, ttl),
            (ConnectorRequest::Resume { holder, ttl, process }, _) => {
                ConnectorOp::Resume(holder, ttl, process)
            }
            (ConnectorRequest::Release { holder }, _) => ConnectorOp::Release(holder),
            _ => return Err(StoreError::invalid("a connector acquisition or takeover needs a tenure")),
        };
        self.lease_step(&key, LeaseKind::Connector, op.connector(), op.event(), ctx, |current, now| {
            decide_connector(identity, op, current, now, limits, policy)
        })
    }

    /// Renews the holder's lease for another `ttl` from the store's now.
    pub fn renew_lease(
        &mut self,
        key: &LeaseKey,
        holder: &Holder,
        ttl: Duration,
        ctx: &AuditContext,
    ) -> Result<LeaseResult, StoreError> {
        self.lease_step(key, LeaseKind::Workflow, &holder.owner, "renew", ctx, |current, now| {
            no_policy_for_connectors(current, LeaseKind::Workflow)?;
            decide_renew(current, holder, ttl, now).map(|r| (LeaseOutcome::Renewed, r))
        })
    }

    /// Releases the holder's lease.
    pub fn release_lease(
        &mut self,
        key: &LeaseKey,
        holder: &Holder,
        ctx: &AuditContext,
    ) -> Result<LeaseResult, StoreError> {
        self.lease_step(key, LeaseKind::Workflow, &holder.owner, "release", ctx, |current, now| {
            no_policy_for_connectors(current, LeaseKind::Workflow)?;
            decide_release(current, holder, now).map(|r| (LeaseOutcome::Released, r))
        })
    }

    /// Takes over a lapsed or released lease by compare-and-swap on `expected_epoch`.
    pub fn take_over_lease(
        &mut self,
        key: &LeaseKey,
        expected_epoch: FencingEpoch,
        owner: &str,
        ttl: Duration,
        scopes: &[String],
        ctx: &AuditContext,
    ) -> Result<LeaseResult, StoreError> {
        valid_owner(owner)?;
        let lease_id = new_lease_id()?;
        self.lease_step(key, LeaseKind::Workflow, owner, "takeover", ctx, |current, now| {
            no_policy_for_connectors(current, LeaseKind::Workflow)?;
            let tenure =
                Tenure { owner: owner.to_owned(), lease_id, ttl, scopes: scopes.to_vec(), process: None };
            decide_takeover(current, expected_epoch, &tenure, now).map(|r| (LeaseOutcome::TakenOver, r))
        })
    }

    /// One lease operation: read the store's clock and the lease, decide, swap, audit.
    /// `kind_if_absent` names the kind in the audit log when there is no lease yet.
    fn lease_step(
        &mut self,
        key: &LeaseKey,
        kind_if_absent: LeaseKind,
        identity: &str,
        event: &str,
        ctx: &AuditContext,
        decide: impl FnOnce(Option<&LeaseRecord>, Timestamp) -> Result<(LeaseOutcome, LeaseRecord), LeaseDenial>,
    ) -> Result<LeaseResult, StoreError> {
        let caller = self.caller.clone();
        let mut attempted = None;
        let written = self.store_mut().write_durable(|tx| {
            let now = tx.store_now()?;
            let current = tx.lease(key)?;
            let kind = current.as_ref().map_or(kind_if_absent, |c| c.kind);
            // A fenced host acts on nothing: its every lease operation is refused.
            let fenced = match &caller {
                Some(c) => crate::hosts::standing_fence(tx, &c.host_id, &c.boot_id)?.is_some(),
                None => false,
            };
            let decision = if fenced { Err(LeaseDenial::HostFenced) } else { decide(current.as_ref(), now) };
            let (outcome, mut result) = match decision {
                Ok((outcome, record)) => (Some(outcome), Ok(record)),
                Err(denial) => (None, Err(denial)),
            };
            if let Ok(record) = &mut result {
                swap(tx, current.as_ref(), record)?;
                attempted = Some(record.fencing_epoch.get());
            }
            match &result {
                Ok(record) => tracing::info!(
                    event,
                    key = %key,
                    identity,
                    outcome = outcome.map_or("ok", LeaseOutcome::as_str),
                    epoch = record.fencing_epoch.get(),
                    "lease"
                ),
                Err(denial) => tracing::info!(event, key = %key, identity, outcome = "denied", reason = denial.as_str(), "lease refused"),
            }
            audit(
                tx,
                event,
                result.as_ref().map_err(|d| *d),
                current.as_ref(),
                key,
                kind,
                identity,
                ctx,
                outcome,
                now,
            )?;
            Ok(result)
        });
        written.map_err(|e| outcome_unknown(e, key, event, attempted))
    }

    /// The lease at `key`, with the store's current time.
    pub fn lease(&mut self, key: &LeaseKey) -> Result<(Option<LeaseRecord>, Timestamp), StoreError> {
        self.store_mut().read(|tx| Ok((tx.lease(key)?, tx.store_now()?)))
    }

    /// Every lease, optionally of one kind.
    pub fn leases(&mut self, kind: Option<LeaseKind>) -> Result<Vec<LeaseRecord>, StoreError> {
        self.store_mut().read(|tx| tx.leases(kind))
    }

    /// Every lease, optionally of one kind, with the store's current time (to tell a
    /// held lease from one whose expiry passed).
    pub fn leases_now(
        &mut self,
        kind: Option<LeaseKind>,
    ) -> Result<(Vec<LeaseRecord>, Timestamp), StoreError> {
        self.store_mut().read(|tx| Ok((tx.leases(kind)?, tx.store_now()?)))
    }

    /// The audit log, optionally of one lease, in log order.
    pub fn lease_audit(&mut self, key: Option<&LeaseKey>) -> Result<Vec<AuditEntry>, StoreError> {
        self.store_mut().read(|tx| tx.audit(key))
    }

    /// The lease decisions the store counted as it wrote them, or `None` when it keeps no
    /// counts (see [`Tx::decision_counts`]).
    pub fn decision_counts(&mut self) -> Result<Option<Vec<crate::DecisionCount>>, StoreError> {
        self.store_mut().read(|tx| tx.decision_counts())
    }

    /// Retention: removes the audit entries at or below position `through` written before
    /// `before` (the caller exported exactly those first); returns how many went.
    pub fn prune_audit(&mut self, through: i64, before: Timestamp) -> Result<usize, StoreError> {
        let removed = self.store_mut().write(|tx| tx.prune_audit(through, before))?;
        tracing::info!(removed, through, before = %before, "pruned the lease audit log");
        Ok(removed)
    }

    /// One page of the audit entries `query` selects (see [`Tx::audit_page`]).
    pub fn lease_audit_page(&mut self, query: &crate::AuditQuery<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        self.store_mut().read(|tx| tx.audit_page(query))
    }

    /// The audit entries after position `after` (an entry's `id`), in log order.
    pub fn lease_audit_after(&mut self, after: i64) -> Result<Vec<AuditEntry>, StoreError> {
        self.store_mut().read(|tx| tx.audit_after(after))
    }

    /// The owners of live workflow leases and the token over them.
    pub fn active_workflow_owners(&mut self) -> Result<ActiveLeases, StoreError> {
        self.store_mut().read(|tx| active_workflow_owners_in(tx))
    }

    /// Initialization, step one: decides whether the caller runs, waits, finds it ready,
    /// or must refuse; a `Run` decision is written (epoch + 1 on takeover) and audited.
    pub fn init_start(
        &mut self,
        key: &LeaseKey,
        target_version: u64,
        owner: &str,
        ttl: Duration,
    ) -> Result<InitDecision, StoreError> {
        let lease_id = new_lease_id()?;
        let caller = self.caller.clone();
        let mut attempted = None;
        let written = self.store_mut().write_durable(|tx| {
            if let Some(c) = &caller {
                crate::hosts::refuse_if_fenced(tx, &c.host_id, &c.boot_id)?;
            }
            let now = tx.store_now()?;
            let current = tx.lease(key)?;
            let tenure = Tenure { owner: owner.to_owned(), lease_id, ttl, scopes: Vec::new(), process: None };
            let mut decision = decide_init_start(current.as_ref(), key, target_version, &tenure, now);
            if let InitDecision::Run(record) = &mut decision {
                swap(tx, current.as_ref(), record)?;
                attempted = Some(record.fencing_epoch.get());
                let outcome =
                    if current.is_some() { LeaseOutcome::TakenOver } else { LeaseOutcome::Acquired };
                tracing::info!(
                    key = %key,
                    target_version,
                    owner,
                    fencing_epoch = record.fencing_epoch.get(),
                    outcome = outcome.as_str(),
                    "initialization started"
                );
                let ctx = AuditContext::default();
                audit(
                    tx,
                    "init_start",
                    Ok(record),
                    current.as_ref(),
                    key,
                    LeaseKind::Initialization,
                    owner,
                    &ctx,
                    Some(outcome),
                    now,
                )?;
            }
            Ok(decision)
        });
        written.map_err(|e| outcome_unknown(e, key, "init_start", attempted))
    }

    /// Initialization, last step: the holder records success or failure. A holder whose
    /// tenure was taken over gets `stale_epoch` and writes nothing but the audit entry.
    pub fn init_finish(
        &mut self,
        key: &LeaseKey,
        holder: &Holder,
        outcome: Result<(), &str>,
    ) -> Result<LeaseResult, StoreError> {
        let ctx = AuditContext::default();
        self.lease_step(key, LeaseKind::Initialization, &holder.owner, "init_finish", &ctx, |current, now| {
            decide_init_finish(current, holder, outcome, now).map(|r| (LeaseOutcome::Released, r))
        })
    }
}

/// The owners of live workflow leases, read inside the caller's transaction.
pub fn active_workflow_owners_in(tx: &mut dyn Tx) -> Result<ActiveLeases, StoreError> {
    let now = tx.store_now()?;
    let mut live: Vec<LeaseRecord> =
        tx.leases(Some(LeaseKind::Workflow))?.into_iter().filter(|l| l.is_live(now)).collect();
    live.sort_by(|a, b| a.lease_key.cmp(&b.lease_key));
    let mut hasher = blake3::Hasher::new();
    for l in &live {
        for part in [l.lease_key.as_str(), l.owner.as_str(), l.lease_id.as_str()] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        hasher.update(&l.fencing_epoch.get().to_le_bytes());
    }
    Ok(ActiveLeases {
        owners: live.into_iter().map(|l| l.owner).collect(),
        fingerprint: format!("b3:{}", &hasher.finalize().to_hex().as_str()[..32]),
    })
}
