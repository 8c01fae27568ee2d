//! Fleetward's identities: validated newtypes for every identity a worker carries, the
//! minting of launcher instance IDs, and the verdict on whether an instance ID is trusted.
//!
//! This crate is pure. It never reads the clock, the environment or a random source:
//! minting takes the time and the random bytes as arguments, and trust takes the
//! launcher's ledger as an argument.

#![deny(missing_docs)]

mod codes;
mod instance;
mod names;
mod time_stamp;
mod trust;

#[doc(hidden)]
pub use codes::__serde;
pub use codes::UnknownCode;
pub use instance::{ClientInstanceId, INSTANCE_DIGEST_BYTES, InstanceIdError, LegacyPlaceholder};
pub use names::{
    BootId, ClientType, FleetRunId, GenerationId, HostId, IdentityError, Namespace, Pid, PidNamespace,
    ProcessStartTime, Profile, Repository, SessionId, WorkerIdentity,
};
pub use time_stamp::{Timestamp, TimestampError};
pub use trust::{InstanceClaim, Ledger, TrustVerdict, assess_instance_id};
