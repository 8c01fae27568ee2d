//! Stale worker retirement, the pure part: the stable registry and candidate
//! fingerprints, the sixteen-part eligibility conjunction, and the dry-run plan.
//!
//! Deterministic: the same registry contents, leases and probe results give the same
//! plan and tokens whenever they are observed. Nothing here reads a clock, a process
//! table or a database.

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
pub use plan::{Assessment, Plan, RowEvidence, plan};
