//! The lease record: its key, kind, holder, tenure and fencing epoch, as every backend
//! stores it.

use std::fmt;

use fleet_identity::{BootId, HostId, IdentityError, Pid, Timestamp};
use serde::{Deserialize, Serialize};

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
    pub fn kind(&self) -> Result<(LeaseKind, Option<crate::ConnectorIdentity>), LeaseKeyError> {
        let text = self.as_str();
        if let Some(rest) = text.strip_prefix("connector:") {
            let parts: Vec<&str> = rest.split('/').collect();
            let [tenant, agent, binding] = parts.as_slice() else {
                return Err(LeaseKeyError::NotConnector { key: text.to_owned() });
            };
            let id = crate::ConnectorIdentity::new(tenant, agent, binding)?;
            return Ok((LeaseKind::Connector, Some(id)));
        }
        for (prefix, kind) in [("workflow:", LeaseKind::Workflow), ("init:", LeaseKind::Initialization)] {
            match text.strip_prefix(prefix) {
                Some("") => return Err(LeaseKeyError::Nameless { key: text.to_owned(), prefix }),
                Some(_) => return Ok((kind, None)),
                None => {}
            }
        }
        Err(LeaseKeyError::UnknownKind { key: text.to_owned() })
    }
}

/// Why a lease key names no lease ([`LeaseKey::kind`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseKeyError {
    /// A `connector:` key without its three parts.
    #[error("lease key {key:?} is not connector:TENANT/AGENT/BINDING")]
    NotConnector {
        /// The key.
        key: String,
    },
    /// A connector key whose part is malformed.
    #[error(transparent)]
    Connector(#[from] IdentityError),
    /// A kind's prefix with no name after it (`workflow:`).
    #[error("lease key {key:?} names no {prefix} lease: {prefix}NAME")]
    Nameless {
        /// The key.
        key: String,
        /// Its kind's prefix.
        prefix: &'static str,
    },
    /// No known kind's prefix.
    #[error("lease key {key:?} must start with workflow:, connector: or init:")]
    UnknownKind {
        /// The key.
        key: String,
    },
}

/// Why a lease row breaks a rule the commands that write leases follow
/// ([`LeaseRecord::check`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseRecordError {
    /// Its key names no lease.
    #[error(transparent)]
    Key(#[from] LeaseKeyError),
    /// Its kind is not the one its key names.
    #[error("lease {key} is of kind {}, but its key names a {} lease", kind.as_str(), key_kind.as_str())]
    KindMismatch {
        /// The key.
        key: LeaseKey,
        /// The row's kind.
        kind: LeaseKind,
        /// The kind the key names.
        key_kind: LeaseKind,
    },
    /// An empty owner, or one with whitespace or control characters.
    #[error("lease {key} has owner {owner:?}: 1 or more characters without whitespace")]
    Owner {
        /// The key.
        key: LeaseKey,
        /// The owner as written.
        owner: String,
    },
    /// Scopes on a lease that is not a connector's.
    #[error("lease {key} has scopes, which only connector leases hold")]
    Scopes {
        /// The key.
        key: LeaseKey,
    },
    /// An initialization state on a lease that is not an initialization's.
    #[error("lease {key} has an initialization state, which only init: leases hold")]
    InitState {
        /// The key.
        key: LeaseKey,
    },
    /// An expiry before the acquisition.
    #[error("lease {key} expires before it was acquired")]
    ExpiresBeforeAcquired {
        /// The key.
        key: LeaseKey,
    },
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
pub struct LeaseRecord {
    /// The lease's key (`workflow:…`, `connector:…`, `init:…`).
    pub lease_key: LeaseKey,
    /// Its kind, as its key says.
    pub kind: LeaseKind,
    /// Who holds (or last held) it.
    pub owner: String,
    /// The tenure's id, new with every acquisition and takeover.
    pub lease_id: LeaseId,
    /// The tenure's fencing epoch: it only rises.
    pub fencing_epoch: FencingEpoch,
    /// Held or released.
    pub state: LeaseState,
    /// When this tenure began.
    pub acquired_at: Timestamp,
    /// Its last renewal.
    pub heartbeat_at: Timestamp,
    /// When it lapses unless renewed (on the store's clock).
    pub expires_at: Timestamp,
    /// When it was released, if it was.
    pub released_at: Option<Timestamp>,
    /// The last write to the row.
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
    pub fn check(&self) -> Result<(), LeaseRecordError> {
        let key = || self.lease_key.clone();
        let (kind, _) = self.lease_key.kind()?;
        if kind != self.kind {
            return Err(LeaseRecordError::KindMismatch { key: key(), kind: self.kind, key_kind: kind });
        }
        if self.owner.is_empty() || self.owner.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(LeaseRecordError::Owner { key: key(), owner: self.owner.clone() });
        }
        if !self.scopes.is_empty() && kind != LeaseKind::Connector {
            return Err(LeaseRecordError::Scopes { key: key() });
        }
        if self.init.is_some() && kind != LeaseKind::Initialization {
            return Err(LeaseRecordError::InitState { key: key() });
        }
        if self.expires_at < self.acquired_at {
            return Err(LeaseRecordError::ExpiresBeforeAcquired { key: key() });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_that_names_no_lease_says_which_rule_it_breaks() {
        let kind = |key: &str| LeaseKey::new(key).unwrap().kind();
        assert_eq!(kind("workflow:deploy").unwrap().0, LeaseKind::Workflow);
        assert!(matches!(kind("workflow:"), Err(LeaseKeyError::Nameless { prefix: "workflow:", .. })));
        assert!(matches!(kind("lock:x"), Err(LeaseKeyError::UnknownKind { .. })));
        assert!(matches!(kind("connector:a/b"), Err(LeaseKeyError::NotConnector { .. })));
        let Err(LeaseKeyError::Connector(IdentityError::Malformed { kind: part, value, .. })) =
            kind("connector:acme/agent/bad*binding")
        else {
            panic!("a malformed part is named");
        };
        assert_eq!((part, value.as_str()), ("binding id", "bad*binding"));
        assert_eq!(
            kind("workflow:").unwrap_err().to_string(),
            "lease key \"workflow:\" names no workflow: lease: workflow:NAME"
        );
    }
}
