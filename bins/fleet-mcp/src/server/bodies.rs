//! The bodies of the tools that act (the retirement apply and the workflow leases) and
//! of the runtime context: each checks its caller, makes one use-case call of the
//! session, and shapes the answer.

use super::*;

impl FleetServer {
    /// The body of `gitea_apply_stale_worker_retirement`.
    pub(super) fn apply_body(&self, p: ApplyParams) -> Outcome {
        // Permission at entry, then role as defence in depth.
        self.authorize(RETIRE, Reach::Fleet)?;
        // No identities named: every candidate of the plan the candidate fingerprint names.
        let every_candidate = p.worker_identities.is_none();
        let ids = match &p.worker_identities {
            Some(named) => parse_identities(named).map_err(|e| invalid("worker_identities", e))?,
            None => Vec::new(),
        };
        let audit = p.audit.checked()?;
        let registry_fingerprint: RegistryFingerprint =
            p.registry_fingerprint.parse().map_err(|e| invalid("registry_fingerprint", e))?;
        let candidate_fingerprint: CandidateFingerprint =
            p.candidate_fingerprint.parse().map_err(|e| invalid("candidate_fingerprint", e))?;
        let me = self.me()?;
        let request = ApplyRequest {
            registry_fingerprint,
            candidate_fingerprint,
            worker_identities: ids,
            every_candidate,
            retired_by: me.worker_identity.to_string(),
            registry_match: if p.require_registry_match {
                RegistryMatch::WholeRegistry
            } else {
                RegistryMatch::Candidates
            },
            audit,
        };
        // Re-resolved immediately before the mutation: an edit to profiles.json since
        // entry is honoured.
        let still_allowed = || self.authorize(RETIRE, Reach::Fleet).is_ok();
        let repository = p.canonical_repository.as_deref();
        let applied = self
            .fleet()
            .apply_as(&me, &self.ctx.runtime, &request, repository, still_allowed)
            .map_err(|e| match e {
                WorkerApplyRefused::MayNotMutate(e) => may_not_mutate(e),
                WorkerApplyRefused::Registry(e) => refuse(Refusal::RegistryUnavailable, e),
                WorkerApplyRefused::Context(e) => context_refusal(e),
                WorkerApplyRefused::Revoked => {
                    refuse(Refusal::PermissionRevoked, "the retire capability was withdrawn during the call")
                }
                other => refuse(Refusal::InternalError, format!("{other:?}")),
            })?;
        match applied.report.outcome {
            ApplyOutcome::Applied | ApplyOutcome::AlreadyRetired => {
                Ok(ApplyAnswer::applied(&applied).to_value())
            }
            other => Err(refusal(other, ApplyAnswer::refused(&applied.report).to_value())),
        }
    }

    pub(super) fn lease_key(workflow: &str) -> Result<LeaseKey, CallToolResult> {
        if workflow.trim().is_empty() {
            return Err(invalid("workflow", "the workflow name must not be empty"));
        }
        LeaseKey::new(format!("workflow:{workflow}")).map_err(|e| invalid("workflow", e))
    }

    pub(super) fn holder(&self, p: &LeaseHolderParams) -> Result<Holder, CallToolResult> {
        Ok(Holder {
            owner: self.me()?.worker_identity.to_string(),
            lease_id: LeaseId::new(p.lease_id.clone()).map_err(|e| invalid("lease_id", e))?,
            fencing_epoch: FencingEpoch::new(p.fencing_epoch).map_err(|e| invalid("fencing_epoch", e))?,
        })
    }

    pub(super) fn lease_result(result: Result<fleet_registry::LeaseResult, LeaseError>) -> Outcome {
        match result {
            Ok(Ok(lease)) => Ok(json!({ "outcome": "ok", "lease": lease })),
            Ok(Err(denial)) => Err(refuse(denial, denial)),
            Err(LeaseError::Store(e)) => Err(refuse(Refusal::RegistryUnavailable, e)),
            Err(e) => Err(invalid("workflow", e)),
        }
    }

    /// The body of `gitea_get_runtime_context`.
    pub(super) fn runtime_context(&self) -> CallToolResult {
        let ctx = &self.ctx;
        let instance = ctx.env.as_ref().ok().map(|e| e.instance.as_str().to_owned());
        let mine = ctx.registration.row();
        // The rows the server keeps (read again only when the store moved), so a large
        // fleet is not exported afresh for one worker's context.
        let mut fleet = self.fleet();
        let read = fleet.dump().map(|dump| {
            let ledger: std::collections::HashSet<_> =
                dump.instances.iter().map(|i| &i.client_instance_id).collect();
            // The registration as the registry holds it now, not as it was at start.
            let registration = mine.as_ref().ok().map(|me| {
                dump.worker_registrations
                    .iter()
                    .find(|r| r.worker_identity == me.worker_identity)
                    .unwrap_or(me)
                    .clone()
            });
            (assess_instance_id(instance.as_deref(), &ledger), registration)
        });
        let (instance_trust, registration) = match &read {
            Ok((trust, registration)) => (Some(*trust), registration.clone()),
            Err(_) => (None, mine.as_ref().ok().cloned()),
        };
        let gate = mine.as_ref().ok().and_then(|me| {
            let snap = fleet.snapshot(None, &Policy::default(), now()).ok()?;
            Some(mutation_gate(&snap, &me.worker_identity))
        });
        // The host this server runs on, and the operator's fence that stands against it
        // (its every write is then refused).
        let host = fleet_runtime::process::current_host();
        let fence = host.as_ref().and_then(|(h, b)| {
            let fences = fleet.host_fences().ok()?;
            fences.into_iter().find(|f| f.stands_against(h, b))
        });
        drop(fleet);
        ok(json!({
            "namespace": ctx.namespace,
            "profile": ctx.profile,
            "client_type": ctx.env.as_ref().ok().map(|e| e.client_type.to_string()),
            "client_instance_id": instance,
            "instance_trust": instance_trust,
            "environment_error": ctx.env.as_ref().err(),
            "registration": registration,
            "registration_error": mine.as_ref().err(),
            "registry_available": read.is_ok(),
            "registry_error": read.as_ref().err().map(ToString::to_string),
            "pid": std::process::id(),
            "host": host.map(|(host_id, boot_id)| json!({
                "host_id": host_id,
                "boot_id": boot_id,
                "fence": fence,
            })),
            "mutation_gate": gate,
            "tools": self.tool_router.list_all().into_iter().map(|t| t.name).collect::<Vec<_>>(),
        }))
    }
}
