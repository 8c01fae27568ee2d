//! Leases as a session takes them: acquire, renew, release and take over a workflow or
//! connector lease in one call each (the key says which rules apply), and the reads
//! beside them (one lease, every lease, the audit log, the decision counters, the
//! hosts' fences and boots).

use std::path::Path;

use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, DenyAll, FencingEpoch, GrantLimits, Holder, LeaseKey, LeaseKind,
    LeaseRecord, StaticPolicy,
};
use fleet_registry::{
    AuditContext, AuditEntry, AuditQuery, ConnectorRequest, DecisionCount, LeaseResult, StoreError,
};
use time::Duration;

use super::Fleet;

/// A change to a lease, as its holder (or its next holder) asks it.
#[derive(Debug, Clone, Copy)]
pub enum LeaseChange<'a> {
    /// Take a lease no one holds.
    Acquire {
        /// Who holds it (a worker identity or a connector id).
        owner: &'a str,
        /// How long it lasts unless renewed.
        ttl: Duration,
        /// The scopes it allows (connector leases).
        scopes: &'a [String],
    },
    /// Keep a lease the holder holds.
    Renew {
        /// The tenure: owner, lease id and fencing epoch.
        holder: &'a Holder,
        /// How long from now; `None` keeps the TTL the lease was granted or last renewed
        /// with, as etcd's keep-alive does.
        ttl: Option<Duration>,
    },
    /// End a lease the holder holds.
    Release {
        /// The tenure: owner, lease id and fencing epoch.
        holder: &'a Holder,
    },
    /// Take a lapsed or released lease at the epoch the caller saw.
    TakeOver {
        /// The epoch the lease is at; the takeover fails if it moved.
        expected_epoch: FencingEpoch,
        /// The new holder.
        owner: &'a str,
        /// How long it lasts unless renewed.
        ttl: Duration,
        /// The scopes it allows (connector leases).
        scopes: &'a [String],
    },
}

/// How a [`Fleet::keep_lease_alive`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeptAlive {
    /// Asked to stop: the lease was released (or, `released: false`, the release was
    /// refused because the lease was no longer the holder's).
    Stopped {
        /// Whether the release went through.
        released: bool,
    },
    /// A renewal was denied: the lease is no longer the holder's.
    Denied(fleet_lease::LeaseDenial),
    /// No renewal committed before the lease's expiry: it may be another's now.
    Lapsed,
}

/// Why a lease change was not even asked of the registry, or could not be.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The key names no lease kind (`workflow:`, `connector:`, `init:`).
    #[error(transparent)]
    Key(#[from] fleet_lease::LeaseKeyError),
    /// An `init:` lease: only an initialization takes and ends it.
    #[error(
        "{0:?} is an initialization lease: only `fleetctl initialize` takes and ends it (show and audit read it)"
    )]
    Initialization(String),
    /// The registry could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The TTL a renewal keeps when none is given for a lease no longer there to read it
/// from (the renewal is then refused by its own checks).
const RENEW_TTL: Duration = Duration::seconds(30);

impl Fleet {
    /// Changes the lease `key` as `change` asks, with the rules of its kind: a
    /// workflow lease by its holder alone; a connector lease also by `policy` and
    /// the gateway's caps (its audit entries name the binding). The outcome is the
    /// lease as written, or the denial; `correlation_id` goes into the audit log.
    pub fn change_lease(
        &mut self,
        key: &LeaseKey,
        change: LeaseChange<'_>,
        policy: &dyn ConnectorPolicy,
        correlation_id: Option<&str>,
    ) -> Result<LeaseResult, LeaseError> {
        let (kind, connector) = key.kind().map_err(LeaseError::Key)?;
        if kind == LeaseKind::Initialization {
            return Err(LeaseError::Initialization(key.to_string()));
        }
        let audit = AuditContext {
            correlation_id: correlation_id.map(str::to_owned),
            binding: connector.as_ref().map(binding_name),
        };
        // A renewal keeps the lease's own TTL unless one is given. It is read apart from
        // the renewal: a lease that changed between is refused by the renewal's checks.
        let change = match change {
            LeaseChange::Renew { holder, ttl: None } => {
                let ttl = self.lease(key)?.0.as_ref().map_or(RENEW_TTL, granted_ttl);
                LeaseChange::Renew { holder, ttl: Some(ttl) }
            }
            other => other,
        };
        let result = self.with_registry(|registry| match (&connector, change) {
            (Some(id), change) => {
                let request = match change {
                    LeaseChange::Acquire { owner, ttl, scopes } => {
                        ConnectorRequest::Acquire { connector: owner, scopes, ttl, process: None }
                    }
                    LeaseChange::Renew { holder, ttl } => {
                        ConnectorRequest::Renew { holder, ttl: ttl.unwrap_or(RENEW_TTL) }
                    }
                    LeaseChange::Release { holder } => ConnectorRequest::Release { holder },
                    LeaseChange::TakeOver { expected_epoch, owner, ttl, scopes } => {
                        ConnectorRequest::TakeOver {
                            expected_epoch,
                            connector: owner,
                            scopes,
                            ttl,
                            process: None,
                        }
                    }
                };
                registry.connector_lease(id, request, GrantLimits::default(), policy, &audit)
            }
            (None, LeaseChange::Acquire { owner, ttl, scopes }) => {
                registry.acquire_lease(key, kind, owner, ttl, scopes, &audit)
            }
            (None, LeaseChange::Renew { holder, ttl }) => {
                registry.renew_lease(key, holder, ttl.unwrap_or(RENEW_TTL), &audit)
            }
            (None, LeaseChange::Release { holder }) => registry.release_lease(key, holder, &audit),
            (None, LeaseChange::TakeOver { expected_epoch, owner, ttl, scopes }) => {
                registry.take_over_lease(key, expected_epoch, owner, ttl, scopes, &audit)
            }
        })?;
        Ok(result)
    }

    /// Keeps the lease `key` alive for `holder` as etcd's `lease keep-alive` does: a
    /// renewal every third of the TTL (the lease's own TTL unless `ttl` is given), each
    /// one handed to `renewed`, until `stop` turns non-zero; then the lease is released.
    /// A store that cannot be reached is tried again four times a period; a renewal the
    /// lease's rules deny (a takeover, a policy withdrawn) or a lease whose expiry passed
    /// without one ends the keep-alive, holding nothing.
    pub fn keep_lease_alive(
        &mut self,
        key: &LeaseKey,
        holder: &Holder,
        ttl: Option<Duration>,
        policy: &dyn ConnectorPolicy,
        stop: &std::sync::atomic::AtomicI32,
        mut renewed: impl FnMut(&LeaseRecord),
    ) -> Result<KeptAlive, LeaseError> {
        use std::sync::atomic::Ordering;
        use std::time::Instant;
        let ttl = match ttl {
            Some(ttl) => ttl,
            None => self.lease(key)?.0.as_ref().map_or(RENEW_TTL, granted_ttl),
        };
        let period = fleet_lease::renew_period(ttl.unsigned_abs());
        // The last renewal's deadline on the monotonic clock: past it, the lease may be
        // another's.
        let mut lapses_at = Instant::now() + ttl.unsigned_abs();
        let mut next = Instant::now();
        loop {
            if stop.load(Ordering::SeqCst) != 0 {
                let released = self.change_lease(key, LeaseChange::Release { holder }, policy, None)?;
                return Ok(KeptAlive::Stopped { released: released.is_ok() });
            }
            if Instant::now() >= lapses_at {
                return Ok(KeptAlive::Lapsed);
            }
            if Instant::now() < next {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue;
            }
            let sent = Instant::now();
            match self.change_lease(key, LeaseChange::Renew { holder, ttl: Some(ttl) }, policy, None) {
                Ok(Ok(lease)) => {
                    lapses_at = sent + ttl.unsigned_abs();
                    next = sent + period;
                    renewed(&lease);
                }
                Ok(Err(denial)) => return Ok(KeptAlive::Denied(denial)),
                Err(LeaseError::Store(e))
                    if e.kind() == fleet_registry::StoreErrorKind::Unavailable
                        || e.kind() == fleet_registry::StoreErrorKind::Busy =>
                {
                    crate::warn(format_args!("fleet: cannot renew {key}, retrying: {e}"));
                    next = Instant::now() + period / 4;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The lease `key` (if any) and the store's clock when it was read.
    pub fn lease(&mut self, key: &LeaseKey) -> Result<(Option<LeaseRecord>, Timestamp), StoreError> {
        self.with_registry(|registry| registry.lease(key))
    }

    /// Every lease and the store's clock when they were read.
    pub fn leases(&mut self) -> Result<(Vec<LeaseRecord>, Timestamp), StoreError> {
        self.with_registry(|registry| registry.leases_now(None))
    }

    /// One page of the lease audit log, as `query` selects it.
    pub fn lease_audit_page(&mut self, query: &AuditQuery<'_>) -> Result<Vec<AuditEntry>, StoreError> {
        self.with_registry(|registry| registry.lease_audit_page(query))
    }

    /// Every audit entry after position `after`, in log order.
    pub fn lease_audit_after(&mut self, after: i64) -> Result<Vec<AuditEntry>, StoreError> {
        self.with_registry(|registry| registry.lease_audit_after(after))
    }

    /// The lease decisions the store has counted as it wrote them, or `None` where the
    /// store keeps no counts (then the audit log is the count).
    pub fn decision_counts(&mut self) -> Result<Option<Vec<DecisionCount>>, StoreError> {
        self.with_registry(|registry| registry.decision_counts())
    }

    /// The store's change marker: it moves with every commit a live read sees (`None`
    /// where the store cannot tell).
    pub fn change_marker(&mut self) -> Result<Option<u128>, StoreError> {
        self.with_registry(|registry| registry.change_marker())
    }

    /// The operators' host fences.
    pub fn host_fences(&mut self) -> Result<Vec<fleet_registry::HostFence>, StoreError> {
        self.with_registry(|registry| registry.host_fences())
    }

    /// The boots each host was last seen in.
    pub fn host_boots(&mut self) -> Result<Vec<fleet_registry::HostBoot>, StoreError> {
        self.with_registry(|registry| registry.host_boots())
    }
}

/// The TTL `lease` was granted or last renewed with.
fn granted_ttl(lease: &LeaseRecord) -> Duration {
    lease.expires_at.since(lease.heartbeat_at).max(Duration::SECOND)
}

/// A binding as the audit log names it: `TENANT/AGENT/BINDING`.
pub(crate) fn binding_name(id: &ConnectorIdentity) -> String {
    format!("{}/{}/{}", id.tenant_id, id.logical_agent_id, id.binding_id)
}

/// Why a connector policy could not be had.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The file could not be read as a trusted file.
    #[error("policy: {0}")]
    Unreadable(String),
    /// The file is not a policy.
    #[error("policy {path} is not valid: {why}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong with it.
        why: String,
    },
}

/// The largest policy file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// The connector policy in `path`, or one that denies every connector lease when none
/// is given. The file grants scopes, so it is read only as a trusted file (owned by
/// this user or root, not writable by others).
pub fn connector_policy(path: Option<&Path>) -> Result<Box<dyn ConnectorPolicy>, PolicyError> {
    let Some(path) = path else { return Ok(Box::new(DenyAll)) };
    let text = crate::user_file::read_trusted(path, MAX_POLICY_BYTES)
        .map_err(|e| PolicyError::Unreadable(e.to_string()))?;
    let policy = StaticPolicy::from_json(&text)
        .map_err(|e| PolicyError::Invalid { path: path.display().to_string(), why: e.to_string() })?;
    Ok(Box::new(policy))
}
