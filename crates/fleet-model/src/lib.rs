//! Fleetward's data model, at the bottom of the crate graph: the registry's rows, the
//! launcher's ledger, the JSON dump that export writes and import reads, and the plain
//! values that a liveness probe hands back.
//!
//! Nothing here does I/O, reads a clock or draws randomness. The stores produce these
//! values, the probe produces the verdicts, and the pure crates (`fleet-snapshot`,
//! `fleet-retirement`) judge them; each of those depends on this crate, never on the
//! store or the probe.

#![warn(missing_docs)]

mod process;
mod rows;

pub use process::{Liveness, LivenessProbe, ProcessIdentity, ProcessVerdict};
pub use rows::{
    Claim, DumpError, HeartbeatJudge, InstanceRecord, MAX_CLOCK_SKEW, OwnershipState, RegistryDump,
    WORKER_COLUMNS, WorkerRow, WorkerStatus, heartbeat_expiry, heartbeat_lapsed, numbered, probe_active_rows,
    rows_by_identity,
};

/// For an enum of outward codes with `fn as_str(self) -> &'static str`: prints and
/// serializes it as its code, and compares it with a code's text. One spelling of each
/// code, in `as_str`.
#[macro_export]
macro_rules! outward_code {
    ($code:ty) => {
        impl ::std::fmt::Display for $code {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $code {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl ::std::cmp::PartialEq<&str> for $code {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }
    };
}
