//! The connector gateway over the store: execution grants issued only after the durable
//! lease is reread in the same transaction, validated against the store immediately
//! before an adapter runs, and every decision audited — without scopes or grant bytes.
//!
//! An adapter never sees the grant: it gets a [`ConnectorExecutionContext`], the plain
//! facts it needs to act and to fence its own effects (the epoch).

use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, FencingEpoch, Grant, GrantDenial, GrantIssuer, LeaseId, LeaseKind,
};
use serde::Serialize;
use time::Duration;

use crate::error::StoreError;
use crate::leases::{AuditContext, AuditEntry};
use crate::registry::Registry;
use crate::store::{Store, Tx};

/// What a connector adapter is handed to act on one binding: never the grant itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectorExecutionContext {
    /// The tenant.
    pub tenant_id: String,
    /// The logical agent.
    pub logical_agent_id: String,
    /// The binding.
    pub binding_id: String,
    /// The connector that holds the lease.
    pub connector: String,
    /// The lease tenure the grant was issued under.
    pub lease_id: LeaseId,
    /// The fencing epoch every effect must carry.
    pub fencing_epoch: FencingEpoch,
    /// The scopes this execution may use.
    pub scopes: Vec<String>,
    /// When the authority ends.
    pub expires_at: Timestamp,
}

/// The audit entry of one grant decision: who, which binding, which epoch, what was
/// decided; never the scopes or the grant.
fn audit_grant(
    tx: &mut dyn Tx,
    event: &str,
    decision: Result<FencingEpoch, GrantDenial>,
    identity: &ConnectorIdentity,
    connector: &str,
    ctx: &AuditContext,
    now: Timestamp,
) -> Result<(), StoreError> {
    let (outcome, reason, epoch) = match decision {
        Ok(epoch) => (if event == "grant_issue" { "issued" } else { "valid" }, None, Some(epoch.get())),
        Err(denial) => ("denied", Some(denial.as_str().to_owned()), None),
    };
    tx.append_audit(&AuditEntry {
        id: 0,
        event: event.to_owned(),
        outcome: outcome.to_owned(),
        reason,
        lease_key: identity.lease_key().to_string(),
        kind: LeaseKind::Connector,
        identity: Some(connector.to_owned()),
        binding: Some(format!(
            "{}/{}/{}",
            identity.tenant_id, identity.logical_agent_id, identity.binding_id
        )),
        connector: Some(connector.to_owned()),
        fencing_epoch: epoch,
        correlation_id: ctx.correlation_id.clone(),
        at: now,
    })
}

impl<S: Store> Registry<S> {
    /// Issues an execution grant for `scopes`, deciding on the lease as the store holds
    /// it in this very transaction, and audits the decision.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_grant(
        &mut self,
        issuer: &GrantIssuer,
        identity: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Duration,
        policy: &dyn ConnectorPolicy,
        ctx: &AuditContext,
    ) -> Result<Result<Grant, GrantDenial>, StoreError> {
        self.store_mut().write(|tx| {
            let now = tx.store_now()?;
            let lease = tx.lease(&identity.lease_key())?;
            let grant = issuer.issue(identity, connector, lease.as_ref(), scopes, ttl, now, policy);
            let decision = grant.as_ref().map(Grant::fencing_epoch).map_err(|d| *d);
            audit_grant(tx, "grant_issue", decision, identity, connector, ctx, now)?;
            Ok(grant)
        })
    }

    /// Validates `grant` for an execution on `binding` that needs `scopes`, against the
    /// lease as the store holds it now: call it immediately before the adapter runs.
    /// The adapter gets the context only if the grant is still good.
    pub fn validate_grant(
        &mut self,
        issuer: &GrantIssuer,
        grant: &Grant,
        binding: &ConnectorIdentity,
        scopes: &[String],
        ctx: &AuditContext,
    ) -> Result<Result<ConnectorExecutionContext, GrantDenial>, StoreError> {
        self.store_mut().write(|tx| {
            let now = tx.store_now()?;
            let lease = tx.lease(&binding.lease_key())?;
            let verdict = issuer.validate(grant, binding, lease.as_ref(), scopes, now);
            let decision = verdict.map(|()| grant.fencing_epoch());
            audit_grant(tx, "grant_validate", decision, binding, grant.connector(), ctx, now)?;
            Ok(verdict.map(|()| ConnectorExecutionContext {
                tenant_id: binding.tenant_id.clone(),
                logical_agent_id: binding.logical_agent_id.clone(),
                binding_id: binding.binding_id.clone(),
                connector: grant.connector().to_owned(),
                lease_id: grant.lease_id().clone(),
                fencing_epoch: grant.fencing_epoch(),
                scopes: scopes.to_vec(),
                expires_at: grant.expires_at(),
            }))
        })
    }
}
