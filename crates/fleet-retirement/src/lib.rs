//! Stale worker retirement, the pure part: the stable registry and candidate
//! fingerprints, the sixteen-part eligibility conjunction, and the dry-run plan.
//!
//! Deterministic: the same registry contents, leases and probe results give the same
//! plan and tokens whenever they are observed. Nothing here reads a clock, a process
//! table or a database.
//!
//! A plan from a `fleetctl registry export`, as `fleetctl retire plan` makes it but
//! without a store or a probe (`examples/plan_export.rs` is the same as a program):
//!
//! ```
//! use fleet_identity::{HostId, Repository, Timestamp};
//! use fleet_retirement::{Export, RetirementContext};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let export = Export::from_json(r#"{"instances": [], "worker_registrations": [{
//!     "worker_identity": "wkr-author-1", "namespace": "author", "status": "active",
//!     "registered_at": "2026-07-30T12:00:00Z",
//!     "last_heartbeat_at": "2026-07-30T12:00:00Z", "heartbeat_ttl_s": 30}],
//!     "leases": [], "lease_audit_log": [], "fencing_high_water": []}"#)?;
//! let ctx = RetirementContext {
//!     host_id: HostId::new("0123456789abcdef0123456789abcdef")?,
//!     boot_id: None,
//!     canonical_repository: Repository::new("/srv/repo")?,
//!     now: Timestamp::parse("2026-07-30T13:00:00Z")?,
//! };
//! // No probe here: a row nothing proves gone is preserved, with the reason.
//! let plan = export.plan(&Default::default(), &ctx);
//! assert_eq!((plan.candidate_count, plan.preserved_count), (0, 1));
//! println!("{}", plan.registry_fingerprint);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

mod eligibility;
mod export;
mod fingerprint;
mod plan;

pub use eligibility::{
    Evidence, PreserveReason, REQUIRED_IDENTITY_FIELDS, RetirementContext, Verdict, assess,
};
pub use export::{Export, as_swept, due_for_sweep};
pub use fingerprint::{
    CandidateFingerprint, FINGERPRINT_FIELDS, NotAFingerprint, RegistryFingerprint, candidate_fingerprint,
    canonical_row, registry_fingerprint,
};
pub use plan::{Assessment, Plan, PlanOutcome, RowEvidence, plan};
