//! The refusal codes the tools answer with, besides the apply outcomes and the lease
//! denials (which have enums of their own): one name for each, so a code can be neither
//! misspelt nor left out of the documentation.

fleet_identity::outward_codes! {
    /// Why a tool call was refused.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Refusal ("refusal") {
        /// The profile does not hold the capability the tool needs.
        PermissionDenied = "permission_denied",
        /// The role may not use fleet-wide tools.
        RoleDenied = "role_denied",
        /// The profile is for another role than this server's namespace.
        RoleMismatch = "role_mismatch",
        /// The profile could not be read or found.
        ProfileUnresolvable = "profile_unresolvable",
        /// The capability was withdrawn during the call.
        PermissionRevoked = "permission_revoked",
        /// An argument is missing, of the wrong type or out of range (`detail.field` names it).
        InvalidArguments = "invalid_arguments",
        /// The expected manifest is not valid.
        InvalidManifest = "invalid_manifest",
        /// The registry cannot be read or written.
        RegistryUnavailable = "registry_unavailable",
        /// This server has no registration, and will have none.
        WorkerNotRegistered = "worker_not_registered",
        /// This server's registration is still under way (the registry's writers are
        /// stalled or it is unreachable): reads are served, acting as the worker waits.
        RegistrationPending = "registration_pending",
        /// This worker's mutation gate is closed (`detail.reasons` says why).
        MutationGateClosed = "mutation_gate_closed",
        /// This worker's instance runs more than one worker in a namespace.
        CohortNotUnique = "cohort_not_unique",
        /// The binary this server runs from was replaced or changed on disk.
        RuntimeUnstable = "runtime_unstable",
        /// The active workflow leases could not be read.
        LeaseEnumerationFailed = "lease_enumeration_failed",
        /// The answer would be larger than the server may send (`detail.size`,
        /// `detail.limit`): narrow it, or read it with `fleetctl`.
        AnswerTooLarge = "answer_too_large",
        /// The server failed to write its own answer.
        InternalError = "internal_error",
    }
}

#[cfg(test)]
mod tests {
    use super::Refusal;

    /// docs/MCP.md lists every code an agent can meet.
    #[test]
    fn the_mcp_documentation_names_every_refusal_code() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/MCP.md")).unwrap();
        for code in Refusal::ALL {
            assert!(
                doc.contains(&format!("`{}`", code.as_str())),
                "docs/MCP.md does not name {}",
                code.as_str()
            );
        }
    }
}

/// Every code a tool call is refused with: the server's own, an apply outcome that
/// retired nothing, a lease denial.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalCode {
    /// The server's own refusal.
    Server(Refusal),
    /// An apply that was refused (`registry_revision_moved`, `candidate_set_moved`, …).
    Apply(fleet_registry::ApplyOutcome),
    /// A lease operation the registry denied.
    Lease(fleet_lease::LeaseDenial),
}

impl RefusalCode {
    /// The code as the answer's `error` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::Server(code) => code.as_str(),
            RefusalCode::Apply(outcome) => outcome.as_str(),
            RefusalCode::Lease(denial) => denial.as_str(),
        }
    }
}

fleet_identity::outward_codes!(impl RefusalCode);

impl From<Refusal> for RefusalCode {
    fn from(code: Refusal) -> Self {
        RefusalCode::Server(code)
    }
}

impl From<fleet_registry::ApplyOutcome> for RefusalCode {
    fn from(outcome: fleet_registry::ApplyOutcome) -> Self {
        RefusalCode::Apply(outcome)
    }
}

impl From<fleet_lease::LeaseDenial> for RefusalCode {
    fn from(denial: fleet_lease::LeaseDenial) -> Self {
        RefusalCode::Lease(denial)
    }
}
