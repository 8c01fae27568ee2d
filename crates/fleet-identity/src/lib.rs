//! Fleetward's identities: validated newtypes for every identity a worker carries, the
//! minting of launcher instance IDs, and the verdict on whether an instance ID is trusted.
//!
//! This crate is pure. It never reads the clock, the environment or a random source:
//! minting takes the time and the random bytes as arguments, and trust takes the
//! launcher's ledger as an argument.
//!
//! ```
//! use std::collections::BTreeSet;
//! use fleet_identity::{ClientInstanceId, ClientType, TrustVerdict, assess_instance_id};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The launcher mints (its clock and random bytes are arguments) and records the ID.
//! let now = time::macros::datetime!(2026-07-30 12:00:00 UTC);
//! let id = ClientInstanceId::mint(&ClientType::new("codex")?, now, [7; 6])?;
//! assert_eq!(id.as_str(), "inst-codex-20260730T120000Z-070707070707");
//! let ledger = BTreeSet::from([id.clone()]);
//!
//! // Only what the ledger holds is trusted: a well-formed copy of the format is not.
//! assert_eq!(assess_instance_id(Some(id.as_str()), &ledger), TrustVerdict::Trusted);
//! let forged = "inst-codex-20260730T120000Z-abcdefabcdef";
//! assert_eq!(assess_instance_id(Some(forged), &ledger), TrustVerdict::Unminted);
//! assert_eq!(assess_instance_id(Some("pid-4242"), &ledger), TrustVerdict::LegacyPlaceholder);
//! # Ok(())
//! # }
//! ```

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
