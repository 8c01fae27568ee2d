//! Connector identities, scopes, execution grants and the policy that gates them
//! (seed 002). A grant is minted with a key that lives only in the issuing process, so a
//! forged, cloned or pre-restart grant fails validation.

use std::collections::BTreeSet;

use fleet_identity::{IdentityError, Timestamp};
use serde::{Deserialize, Serialize};
use time::Duration;

use crate::{FencingEpoch, LeaseId, LeaseKey, LeaseRecord, LeaseState};

/// The normalized identity of a connector binding: `(tenant, logical agent, binding)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ConnectorIdentity {
    /// The tenant.
    pub tenant_id: String,
    /// The server-owned logical agent.
    pub logical_agent_id: String,
    /// The binding.
    pub binding_id: String,
}

impl ConnectorIdentity {
    /// Validates the three parts: each 1 to 128 of `[A-Za-z0-9._-]`.
    pub fn new(tenant: &str, agent: &str, binding: &str) -> Result<Self, IdentityError> {
        for (kind, part) in [("tenant id", tenant), ("logical agent id", agent), ("binding id", binding)] {
            let ok = !part.is_empty()
                && part.len() <= 128
                && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
            if !ok {
                let expected = "1 to 128 of [A-Za-z0-9._-]";
                return Err(IdentityError::Malformed { kind, value: part.to_owned(), expected });
            }
        }
        Ok(Self { tenant_id: tenant.into(), logical_agent_id: agent.into(), binding_id: binding.into() })
    }

    /// The lease key of this binding.
    pub fn lease_key(&self) -> LeaseKey {
        // The parts exclude whitespace, so the key is always valid.
        LeaseKey::new(format!("connector:{}/{}/{}", self.tenant_id, self.logical_agent_id, self.binding_id))
            .unwrap_or_else(|_| unreachable!("validated parts make a valid key"))
    }
}

/// Normalizes scopes: trimmed, lowercased, deduplicated, sorted; an empty scope is refused.
pub fn normalize_scopes<S: AsRef<str>>(scopes: &[S]) -> Result<Vec<String>, IdentityError> {
    let mut out = BTreeSet::new();
    for s in scopes {
        let scope = s.as_ref().trim().to_ascii_lowercase();
        if scope.is_empty() || scope.chars().any(|c| c.is_whitespace() || c.is_control()) {
            let (value, expected) = (s.as_ref().to_owned(), "not empty, without whitespace");
            return Err(IdentityError::Malformed { kind: "scope", value, expected });
        }
        out.insert(scope);
    }
    Ok(out.into_iter().collect())
}

/// Caps: a lease lasts at most 5 minutes and a grant at most 30 seconds by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrantLimits {
    max_lease_ttl: Duration,
    max_grant_ttl: Duration,
}

impl Default for GrantLimits {
    fn default() -> Self {
        Self { max_lease_ttl: Duration::minutes(5), max_grant_ttl: Duration::seconds(30) }
    }
}

impl GrantLimits {
    /// Tighter caps; a value above the default is clamped to the default.
    pub fn tightened(max_lease_ttl: Duration, max_grant_ttl: Duration) -> Self {
        let d = Self::default();
        Self {
            max_lease_ttl: max_lease_ttl.min(d.max_lease_ttl),
            max_grant_ttl: max_grant_ttl.min(d.max_grant_ttl),
        }
    }

    /// The lease cap.
    pub fn max_lease_ttl(&self) -> Duration {
        self.max_lease_ttl
    }

    /// The grant cap.
    pub fn max_grant_ttl(&self) -> Duration {
        self.max_grant_ttl
    }
}

/// A policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyDecision {
    /// Allowed.
    Allow,
    /// Refused.
    Deny,
}

/// The gateway-owned policy surface. Every decision sees the normalized scopes and the
/// TTL (`None` where no TTL applies).
pub trait ConnectorPolicy {
    /// May `connector` hold a lease on `identity` with these scopes for `ttl`?
    fn authorize_lease(
        &self,
        identity: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision;
    /// May `connector` receive a grant for these scopes for `ttl`?
    fn authorize_grant(
        &self,
        identity: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision;
}

/// A connector policy as an operator writes it in a file: the leases and grants allowed,
/// each for one identity and connector, a set of scopes (compared without regard to
/// case) and a longest TTL; everything else is denied.
///
/// `{"allow": [{"tenant", "agent", "binding", "connector", "scopes": [...], "max_ttl_s"}]}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticPolicy {
    /// The rules; a request is allowed when one of them allows it.
    pub allow: Vec<PolicyRule>,
}

/// One rule of a [`StaticPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyRule {
    /// The tenant the rule is for.
    pub tenant: String,
    /// The agent.
    pub agent: String,
    /// The binding.
    pub binding: String,
    /// The connector the agent may bind.
    pub connector: String,
    /// The scopes a lease or grant may ask for.
    pub scopes: Vec<String>,
    /// The longest TTL a lease of this rule may have, in seconds.
    pub max_ttl_s: u64,
}

impl StaticPolicy {
    /// Reads a policy file's text; an unknown field is an error, not ignored.
    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    fn allows(
        &self,
        id: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision {
        let ok = self.allow.iter().any(|r| {
            r.tenant == id.tenant_id
                && r.agent == id.logical_agent_id
                && r.binding == id.binding_id
                && r.connector == connector
                && scopes.iter().all(|s| r.scopes.iter().any(|a| a.eq_ignore_ascii_case(s)))
                && ttl.is_none_or(|t| t <= Duration::seconds(i64::try_from(r.max_ttl_s).unwrap_or(i64::MAX)))
        });
        if ok { PolicyDecision::Allow } else { PolicyDecision::Deny }
    }
}

impl ConnectorPolicy for StaticPolicy {
    fn authorize_lease(
        &self,
        id: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision {
        self.allows(id, connector, scopes, ttl)
    }

    fn authorize_grant(
        &self,
        id: &ConnectorIdentity,
        connector: &str,
        scopes: &[String],
        ttl: Option<Duration>,
    ) -> PolicyDecision {
        self.allows(id, connector, scopes, ttl)
    }
}

/// The production default: every lease and grant is denied until a policy is configured.
#[derive(Debug, Clone, Copy, Default)]
pub struct DenyAll;

impl ConnectorPolicy for DenyAll {
    fn authorize_lease(
        &self,
        _: &ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<Duration>,
    ) -> PolicyDecision {
        PolicyDecision::Deny
    }
    fn authorize_grant(
        &self,
        _: &ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<Duration>,
    ) -> PolicyDecision {
        PolicyDecision::Deny
    }
}

fleet_identity::outward_codes! {
    /// Why a grant was not issued, or is not valid. One per denial case of seed 002.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
    #[non_exhaustive]
    pub enum GrantDenial ("grant denial", explained) {
        /// Not minted by this issuer (forged, cloned from elsewhere, or from before a restart).
        #[error("grant_not_minted_here: the grant was not minted by this process")]
        NotMintedHere = "not_minted_here",
        /// The grant's own expiry passed.
        #[error("grant_expired: the grant expired")]
        GrantExpired = "grant_expired",
        /// The lease lapsed.
        #[error("lease_expired: the lease lapsed")]
        LeaseExpired = "lease_expired",
        /// The lease was released.
        #[error("lease_released: the lease was released")]
        LeaseReleased = "lease_released",
        /// The lease was taken over: the grant's epoch is stale.
        #[error("stale_epoch: the lease was taken over since the grant was minted")]
        StaleEpoch = "stale_epoch",
        /// The lease now belongs to another connector or tenure.
        #[error("lease_replaced: the lease belongs to another connector or lease id")]
        LeaseReplaced = "lease_replaced",
        /// No lease for the binding.
        #[error("lease_missing: no lease for the binding")]
        LeaseMissing = "lease_missing",
        /// The grant is for another tenant.
        #[error("cross_tenant: the grant belongs to another tenant")]
        CrossTenant = "cross_tenant",
        /// The grant is for another logical agent.
        #[error("cross_agent: the grant belongs to another logical agent")]
        CrossAgent = "cross_agent",
        /// The grant is for another binding.
        #[error("cross_binding: the grant belongs to another binding")]
        CrossBinding = "cross_binding",
        /// A requested scope is not authorized by both grant and current lease.
        #[error("scope_not_authorized: a scope is not authorized by both the grant and the lease")]
        ScopeNotAuthorized = "scope_not_authorized",
        /// The requested grant TTL exceeds the cap.
        #[error("ttl_exceeds_cap: the requested grant ttl is above the cap")]
        TtlExceedsCap = "ttl_exceeds_cap",
        /// The policy refused.
        #[error("policy_denied: the connector policy refused")]
        PolicyDenied = "policy_denied",
    }
}

/// A short-lived execution grant. It cannot be cloned, built or deserialized outside this
/// crate; its MAC binds every field to the issuing process's key.
#[derive(Debug, PartialEq, Eq)]
pub struct Grant {
    identity: ConnectorIdentity,
    connector: String,
    lease_id: LeaseId,
    scopes: Vec<String>,
    expires_at: Timestamp,
    fencing_epoch: FencingEpoch,
    mac: blake3::Hash,
}

impl Grant {
    /// The binding the grant is for.
    pub fn identity(&self) -> &ConnectorIdentity {
        &self.identity
    }
    /// The connector it was issued to.
    pub fn connector(&self) -> &str {
        &self.connector
    }
    /// The lease tenure it was issued under.
    pub fn lease_id(&self) -> &LeaseId {
        &self.lease_id
    }
    /// Its scopes.
    pub fn scopes(&self) -> &[String] {
        &self.scopes
    }
    /// When it expires.
    pub fn expires_at(&self) -> Timestamp {
        self.expires_at
    }
    /// The epoch adapters must propagate so effect boundaries can fence too.
    pub fn fencing_epoch(&self) -> FencingEpoch {
        self.fencing_epoch
    }

    /// A copy with altered fields but the original MAC: what a forger could build if the
    /// fields were public. For tests of the issuer's defences.
    #[doc(hidden)]
    pub fn forged_with_scopes(&self, scopes: Vec<String>) -> Grant {
        Grant {
            identity: self.identity.clone(),
            connector: self.connector.clone(),
            lease_id: self.lease_id.clone(),
            scopes,
            expires_at: self.expires_at,
            fencing_epoch: self.fencing_epoch,
            mac: self.mac,
        }
    }
}

/// Issues and validates grants with a key that exists only in this process.
#[derive(Debug)]
pub struct GrantIssuer {
    key: [u8; 32],
    limits: GrantLimits,
}

/// The keyed MAC over every field. `blake3::Hash` compares in constant time, so checking
/// a presented MAC leaks nothing about the right one.
fn mac(key: &[u8; 32], g: &Grant) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    for part in [
        g.identity.tenant_id.as_str(),
        g.identity.logical_agent_id.as_str(),
        g.identity.binding_id.as_str(),
        g.connector.as_str(),
        g.lease_id.as_str(),
    ] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update(&(g.scopes.len() as u64).to_le_bytes());
    for s in &g.scopes {
        h.update(&(s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    }
    h.update(&g.expires_at.unix_millis().to_le_bytes());
    h.update(&g.fencing_epoch.get().to_le_bytes());
    h.finalize()
}

fn check_lease(lease: Option<&LeaseRecord>, now: Timestamp) -> Result<&LeaseRecord, GrantDenial> {
    let lease = lease.ok_or(GrantDenial::LeaseMissing)?;
    if lease.state == LeaseState::Released {
        return Err(GrantDenial::LeaseReleased);
    }
    if now >= lease.expires_at {
        return Err(GrantDenial::LeaseExpired);
    }
    Ok(lease)
}

impl GrantIssuer {
    /// An issuer whose key the caller drew at random when the process started.
    pub fn new(key: [u8; 32], limits: GrantLimits) -> Self {
        Self { key, limits }
    }

    /// The caps in force.
    pub fn limits(&self) -> GrantLimits {
        self.limits
    }

    /// Issues a grant for `scopes` after the caller reread the current `lease` from the
    /// store. The grant expires at `now + ttl` or with the lease, whichever is first.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        &self,
        identity: &ConnectorIdentity,
        connector: &str,
        lease: Option<&LeaseRecord>,
        scopes: &[String],
        ttl: Duration,
        now: Timestamp,
        policy: &dyn ConnectorPolicy,
    ) -> Result<Grant, GrantDenial> {
        if ttl > self.limits.max_grant_ttl || ttl <= Duration::ZERO {
            return Err(GrantDenial::TtlExceedsCap);
        }
        let lease = check_lease(lease, now)?;
        if lease.owner != connector {
            return Err(GrantDenial::LeaseReplaced);
        }
        if lease.lease_key != identity.lease_key() {
            return Err(GrantDenial::CrossBinding);
        }
        if !scopes.iter().all(|s| lease.scopes.contains(s)) {
            return Err(GrantDenial::ScopeNotAuthorized);
        }
        if policy.authorize_grant(identity, connector, scopes, Some(ttl)) != PolicyDecision::Allow {
            return Err(GrantDenial::PolicyDenied);
        }
        let mut grant = Grant {
            identity: identity.clone(),
            connector: connector.to_owned(),
            lease_id: lease.lease_id.clone(),
            scopes: scopes.to_vec(),
            expires_at: now.saturating_add(ttl).min(lease.expires_at),
            fencing_epoch: lease.fencing_epoch,
            mac: blake3::Hash::from_bytes([0; 32]),
        };
        grant.mac = mac(&self.key, &grant);
        Ok(grant)
    }

    /// Validates `grant` immediately before use against the `lease` the caller just
    /// reread, for an execution in `context` that needs `scopes`.
    pub fn validate(
        &self,
        grant: &Grant,
        context: &ConnectorIdentity,
        lease: Option<&LeaseRecord>,
        scopes: &[String],
        now: Timestamp,
    ) -> Result<(), GrantDenial> {
        if mac(&self.key, grant) != grant.mac {
            return Err(GrantDenial::NotMintedHere);
        }
        if grant.identity.tenant_id != context.tenant_id {
            return Err(GrantDenial::CrossTenant);
        }
        if grant.identity.logical_agent_id != context.logical_agent_id {
            return Err(GrantDenial::CrossAgent);
        }
        if grant.identity.binding_id != context.binding_id {
            return Err(GrantDenial::CrossBinding);
        }
        if now >= grant.expires_at {
            return Err(GrantDenial::GrantExpired);
        }
        let lease = check_lease(lease, now)?;
        if lease.fencing_epoch > grant.fencing_epoch {
            return Err(GrantDenial::StaleEpoch);
        }
        if lease.fencing_epoch != grant.fencing_epoch
            || lease.lease_id != grant.lease_id
            || lease.owner != grant.connector
        {
            return Err(GrantDenial::LeaseReplaced);
        }
        let allowed = |s: &String| grant.scopes.contains(s) && lease.scopes.contains(s);
        if !scopes.iter().all(allowed) {
            return Err(GrantDenial::ScopeNotAuthorized);
        }
        Ok(())
    }
}
