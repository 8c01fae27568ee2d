//! The refusal codes the tools answer with, besides the apply outcomes and the lease
//! denials (which have enums of their own): one name for each, so a code can be neither
//! misspelt nor left out of the documentation.

/// Why a tool call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The profile does not hold the capability the tool needs.
    PermissionDenied,
    /// The role may not use fleet-wide tools.
    RoleDenied,
    /// The profile is for another role than this server's namespace.
    RoleMismatch,
    /// The profile could not be read or found.
    ProfileUnresolvable,
    /// The capability was withdrawn during the call.
    PermissionRevoked,
    /// An argument is missing, of the wrong type or out of range (`detail.field` names it).
    InvalidArguments,
    /// The expected manifest is not valid.
    InvalidManifest,
    /// The registry cannot be read or written.
    RegistryUnavailable,
    /// This server has no registration, and will have none.
    WorkerNotRegistered,
    /// This server's registration is still under way (the registry's writers are
    /// stalled or it is unreachable): reads are served, acting as the worker waits.
    RegistrationPending,
    /// This worker's mutation gate is closed (`detail.reasons` says why).
    MutationGateClosed,
    /// This worker's instance runs more than one worker in a namespace.
    CohortNotUnique,
    /// The binary this server runs from was replaced or changed on disk.
    RuntimeUnstable,
    /// The active workflow leases could not be read.
    LeaseEnumerationFailed,
    /// The answer would be larger than the server may send (`detail.size`,
    /// `detail.limit`): narrow it, or read it with `fleetctl`.
    AnswerTooLarge,
    /// The server failed to write its own answer.
    InternalError,
}

impl Refusal {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [Refusal; 16] = [
        Refusal::PermissionDenied,
        Refusal::RoleDenied,
        Refusal::RoleMismatch,
        Refusal::ProfileUnresolvable,
        Refusal::PermissionRevoked,
        Refusal::InvalidArguments,
        Refusal::InvalidManifest,
        Refusal::RegistryUnavailable,
        Refusal::WorkerNotRegistered,
        Refusal::RegistrationPending,
        Refusal::MutationGateClosed,
        Refusal::CohortNotUnique,
        Refusal::RuntimeUnstable,
        Refusal::LeaseEnumerationFailed,
        Refusal::AnswerTooLarge,
        Refusal::InternalError,
    ];

    /// The code as the answer's `error` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::PermissionDenied => "permission_denied",
            Refusal::RoleDenied => "role_denied",
            Refusal::RoleMismatch => "role_mismatch",
            Refusal::ProfileUnresolvable => "profile_unresolvable",
            Refusal::PermissionRevoked => "permission_revoked",
            Refusal::InvalidArguments => "invalid_arguments",
            Refusal::InvalidManifest => "invalid_manifest",
            Refusal::RegistryUnavailable => "registry_unavailable",
            Refusal::WorkerNotRegistered => "worker_not_registered",
            Refusal::RegistrationPending => "registration_pending",
            Refusal::MutationGateClosed => "mutation_gate_closed",
            Refusal::CohortNotUnique => "cohort_not_unique",
            Refusal::RuntimeUnstable => "runtime_unstable",
            Refusal::LeaseEnumerationFailed => "lease_enumeration_failed",
            Refusal::AnswerTooLarge => "answer_too_large",
            Refusal::InternalError => "internal_error",
        }
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
