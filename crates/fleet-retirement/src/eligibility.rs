//! The eligibility conjunction: a row is retired only when every requirement holds, in
//! the order of seed 004; the first that fails names the reason the row is preserved.

use std::collections::BTreeSet;

use fleet_identity::{BootId, ClientInstanceId, HostId, Repository, Timestamp};
use fleet_model::{HostEvidence, HostProof, ProcessVerdict};
use fleet_model::{OwnershipState, WorkerRow, WorkerStatus};
use rustc_hash::FxHashMap as HashMap;

/// The fields the conjunction reads that have no reason code of their own.
pub const REQUIRED_IDENTITY_FIELDS: [&str; 7] = [
    "client_instance_id",
    "generation_id",
    "pid",
    "process_start_time",
    "last_heartbeat_at",
    "heartbeat_ttl_s",
    "ownership_state",
];

fleet_identity::outward_codes! {
    /// Why a row is preserved, in the conjunction's order.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum PreserveReason ("preserve reason") {
        /// Status is not `active`.
        AlreadyTerminalRegistration = "already_terminal_registration",
        /// A field in [`REQUIRED_IDENTITY_FIELDS`] is missing.
        IncompleteRegistryIdentity = "incomplete_registry_identity",
        /// `last_heartbeat_at` does not parse.
        UnparsableHeartbeat = "unparsable_heartbeat",
        /// The worker is live: heartbeat within its TTL and its process not proved gone.
        WorkerLive = "worker_live",
        /// The probe gave no definite answer.
        PidLivenessUnknown = "pid_liveness_unknown",
        /// The probe found the very process alive.
        PidAlive = "pid_alive",
        /// The heartbeat has not expired.
        HeartbeatNotExpired = "heartbeat_not_expired",
        /// `ownership_state` is not exactly `stale`.
        AmbiguousOwnershipState = "ambiguous_ownership_state",
        /// Repository binding missing or not canonical.
        RepositoryBindingAmbiguous = "repository_binding_ambiguous",
        /// Identity evidence shared with a live or unprobeable worker.
        ConflictingIdentityEvidence = "conflicting_identity_evidence",
        /// Another active row claims the same instance and namespace and may be live.
        ClientInstanceConflict = "client_instance_conflict",
        /// The worker owns an active workflow lease.
        ProtectedActiveWorkflowOwner = "protected_active_workflow_owner",
        /// The instance ID is not launcher-minted (not in the ledger).
        UntrustedIdentityProvenance = "untrusted_identity_provenance",
        /// The row's host is not the host running retirement.
        HostBindingUnproven = "host_binding_unproven",
        /// A boot id is unknown on one side.
        BootIdentityUnknown = "boot_identity_unknown",
        /// The pid number is held by a different incarnation.
        PidReuseDetected = "pid_reuse_detected",
    }
}

/// The verdict on one row. It serializes as its code: `eligible_stale_orphan` or the
/// preserve reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every requirement holds: `eligible_stale_orphan`.
    EligibleStaleOrphan,
    /// Every requirement holds, and the proof that the process is gone is its host's
    /// (`eligible_host_rebooted`, `eligible_host_fenced`): it ran on another host, or an
    /// earlier boot, that a later boot or an operator's fence proves gone.
    EligibleByHost(HostProof),
    /// Preserved for the first requirement that failed.
    Preserve(PreserveReason),
}

impl Verdict {
    /// Whether the row is a candidate.
    pub fn is_eligible(self) -> bool {
        !matches!(self, Verdict::Preserve(_))
    }

    /// The code as JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::EligibleStaleOrphan => "eligible_stale_orphan",
            Verdict::EligibleByHost(HostProof::HostRebooted) => "eligible_host_rebooted",
            Verdict::EligibleByHost(HostProof::HostFenced) => "eligible_host_fenced",
            Verdict::Preserve(reason) => reason.as_str(),
        }
    }
}

fleet_identity::outward_codes!(impl Verdict);

/// Where retirement runs and what it expects.
#[derive(Debug, Clone)]
pub struct RetirementContext {
    /// The host running retirement.
    pub host_id: HostId,
    /// Its current boot, when known.
    pub boot_id: Option<BootId>,
    /// The repository every retired row must be bound to.
    pub canonical_repository: Repository,
    /// The judging time.
    pub now: Timestamp,
}

/// Everything about the fleet the conjunction consults beyond the row itself, with an
/// index of the rows that may be live so each row's conflict checks are lookups rather
/// than a scan of the fleet.
#[derive(Debug, Clone)]
pub struct Evidence<'a> {
    /// Every registry row.
    pub rows: &'a [WorkerRow],
    /// The launcher's ledger.
    pub ledger: &'a BTreeSet<ClientInstanceId>,
    /// Owners of active workflow leases.
    pub lease_owners: &'a BTreeSet<String>,
    /// Probe results by worker identity (absent: not probed).
    pub probes: &'a Probes,
    /// The hosts' boots and fences, which speak for rows the probe cannot.
    pub hosts: &'a HostEvidence,
    /// The rows in identity order, each with its probe result.
    ordered: Vec<(&'a WorkerRow, Option<ProcessVerdict>)>,
    live: LiveIndex<'a>,
}

type Probes = std::collections::BTreeMap<fleet_identity::WorkerIdentity, ProcessVerdict>;

/// Identity evidence of the rows that may be live, counted per value.
#[derive(Debug, Clone, Default)]
struct LiveIndex<'a> {
    identities: HashMap<&'a str, usize>,
    generations: HashMap<&'a str, usize>,
    processes: HashMap<(&'a str, Option<&'a str>, u32), usize>,
    tokens: HashMap<&'a str, usize>,
    slots: HashMap<(Option<&'a str>, fleet_identity::Namespace), usize>,
}

impl<'a> Evidence<'a> {
    /// Gathers the evidence and indexes the rows that may be live.
    pub fn new(
        rows: &'a [WorkerRow],
        ledger: &'a BTreeSet<ClientInstanceId>,
        lease_owners: &'a BTreeSet<String>,
        probes: &'a Probes,
    ) -> Self {
        Self::with_hosts(rows, ledger, lease_owners, probes, HostEvidence::none())
    }

    /// [`Evidence::new`], with what the hosts' boots and fences prove: a row the probe
    /// gave no definite answer for, whose host and boot a later boot or a fence proves
    /// gone, counts as gone (see [`HostEvidence::proof`]).
    pub fn with_hosts(
        rows: &'a [WorkerRow],
        ledger: &'a BTreeSet<ClientInstanceId>,
        lease_owners: &'a BTreeSet<String>,
        probes: &'a Probes,
        hosts: &'a HostEvidence,
    ) -> Self {
        let ordered = fleet_model::rows_by_identity(rows);
        let ordered: Vec<_> = ordered
            .iter()
            .copied()
            .zip(verdicts(ordered.iter().copied(), probes))
            .map(|(row, probe)| (row, with_host_proof(row, probe, hosts)))
            .collect();
        let capacity = ordered.len();
        let mut live = LiveIndex {
            identities: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            generations: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            processes: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            tokens: HashMap::with_capacity_and_hasher(capacity, Default::default()),
            slots: HashMap::with_capacity_and_hasher(capacity, Default::default()),
        };
        for &(row, _) in ordered.iter().filter(|(r, v)| may_be_live(r, *v)) {
            *live.identities.entry(row.worker_identity.as_str()).or_default() += 1;
            if let Some(g) = &row.generation_id {
                *live.generations.entry(g.as_str()).or_default() += 1;
            }
            if let (Some(h), Some(p)) = (&row.host_id, row.pid) {
                let boot = row.boot_id.as_ref().map(|b| b.as_str());
                *live.processes.entry((h.as_str(), boot, p.get())).or_default() += 1;
            }
            if let Some(t) = &row.token_fingerprint {
                *live.tokens.entry(t.as_str()).or_default() += 1;
            }
            *live.slots.entry((row.client_instance_id.as_deref(), row.namespace)).or_default() += 1;
        }
        Self { rows, ledger, lease_owners, probes, hosts, ordered, live }
    }

    /// The rows in identity order (input order among rows that share one), each with
    /// its probe result.
    pub(crate) fn ordered(&self) -> &[(&'a WorkerRow, Option<ProcessVerdict>)] {
        &self.ordered
    }

    /// The probe result for `row`, if it was probed, or `gone` where its host's boots
    /// or fences prove it.
    pub fn probe_of(&self, row: &WorkerRow) -> Option<ProcessVerdict> {
        with_host_proof(row, self.probes.get(&row.worker_identity).copied(), self.hosts)
    }

    /// What proves `row`'s process gone where no probe could: its host's, when the row
    /// names a host and boot and the probe gave no definite answer for it.
    pub fn host_proof(&self, row: &WorkerRow, probed: Option<ProcessVerdict>) -> Option<HostProof> {
        host_proof(row, probed, self.hosts)
    }

    /// Whether a row other than `row` that may be live shares identity evidence with it:
    /// its identity, generation, process (host, boot, pid) or token.
    fn shares_evidence_with_a_live_row(&self, row: &WorkerRow, probe: Option<ProcessVerdict>) -> bool {
        // `row` itself is counted when it may be live, so look for more than that.
        let me = usize::from(may_be_live(row, probe));
        let more = |n: Option<&usize>| n.copied().unwrap_or(0) > me;
        let process = match (&row.host_id, row.pid) {
            (Some(h), Some(p)) => more(self.live.processes.get(&(
                h.as_str(),
                row.boot_id.as_ref().map(|b| b.as_str()),
                p.get(),
            ))),
            _ => false,
        };
        more(self.live.identities.get(row.worker_identity.as_str()))
            || row.generation_id.as_ref().is_some_and(|g| more(self.live.generations.get(g.as_str())))
            || process
            || row.token_fingerprint.as_ref().is_some_and(|t| more(self.live.tokens.get(t.as_str())))
    }

    /// Whether a row other than `row` that may be live claims its instance and namespace.
    fn slot_claimed_by_a_live_row(&self, row: &WorkerRow, probe: Option<ProcessVerdict>) -> bool {
        let me = usize::from(may_be_live(row, probe));
        self.live.slots.get(&(row.client_instance_id.as_deref(), row.namespace)).copied().unwrap_or(0) > me
    }
}

/// The host's proof for a row the probe gave no definite answer for.
fn host_proof(row: &WorkerRow, probed: Option<ProcessVerdict>, hosts: &HostEvidence) -> Option<HostProof> {
    if !matches!(probed, None | Some(ProcessVerdict::Unknown)) {
        return None;
    }
    hosts.proof(row.host_id.as_ref()?, row.boot_id.as_ref()?)
}

/// `probed`, or `gone` where the row's host proves it.
fn with_host_proof(
    row: &WorkerRow,
    probed: Option<ProcessVerdict>,
    hosts: &HostEvidence,
) -> Option<ProcessVerdict> {
    match host_proof(row, probed, hosts) {
        Some(_) => Some(ProcessVerdict::Gone),
        None => probed,
    }
}

/// Whether a field in [`REQUIRED_IDENTITY_FIELDS`] is missing.
fn missing_required(row: &WorkerRow) -> bool {
    let present = [
        row.client_instance_id.is_some(),
        row.generation_id.is_some(),
        row.pid.is_some(),
        row.process_start_time.is_some(),
        row.last_heartbeat_at.is_some(),
        row.heartbeat_ttl_s.is_some(),
        row.ownership_state.is_some(),
    ];
    present.contains(&false)
}

/// Whether a row may be live: active and not proved gone by the probe. Unprobed and
/// unprobeable rows may be live.
fn may_be_live(row: &WorkerRow, probe: Option<ProcessVerdict>) -> bool {
    row.status == WorkerStatus::Active
        && !matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused))
}

/// Why a row's liveness could not be proved. A probe can only speak of processes on its
/// own host and boot, so when the row names another host, or a boot id is unknown on
/// either side, that — not a shrug — is the reason: the later requirements of the
/// conjunction (host binding, boot identity) are what made the probe impossible.
fn unprobeable(row: &WorkerRow, ctx: &RetirementContext) -> PreserveReason {
    if row.host_id.as_ref() != Some(&ctx.host_id) {
        PreserveReason::HostBindingUnproven
    } else if row.boot_id.is_none() || ctx.boot_id.is_none() {
        PreserveReason::BootIdentityUnknown
    } else {
        PreserveReason::PidLivenessUnknown
    }
}

/// Each row's probe result, for rows in identity order (as the results are): one merged
/// walk instead of a tree lookup per row.
fn verdicts<'r>(
    rows: impl Iterator<Item = &'r WorkerRow>,
    probes: &Probes,
) -> impl Iterator<Item = Option<ProcessVerdict>> {
    let mut walk = probes.iter().peekable();
    rows.map(move |row| {
        while walk.next_if(|(id, _)| **id < row.worker_identity).is_some() {}
        walk.peek().filter(|(id, _)| **id == row.worker_identity).map(|(_, v)| **v)
    })
}

/// The conjunction, in the seed's order.
pub fn assess(row: &WorkerRow, ev: &Evidence<'_>, ctx: &RetirementContext) -> Verdict {
    assess_probed(row, ev.probe_of(row), ev, ctx)
}

/// [`assess`], given the row's probe result.
pub(crate) fn assess_probed(
    row: &WorkerRow,
    probe: Option<ProcessVerdict>,
    ev: &Evidence<'_>,
    ctx: &RetirementContext,
) -> Verdict {
    use PreserveReason as R;
    let preserve = Verdict::Preserve;
    // The host's proof, for a row no probe could speak for; `probe` is already `gone`
    // for such a row when the evidence was gathered with the hosts.
    let by_host = ev.host_proof(row, ev.probes.get(&row.worker_identity).copied());
    let probe = if by_host.is_some() { Some(ProcessVerdict::Gone) } else { probe };
    if row.status != WorkerStatus::Active {
        return preserve(R::AlreadyTerminalRegistration);
    }
    if missing_required(row) {
        return preserve(R::IncompleteRegistryIdentity);
    }
    let Some(beat) = row.heartbeat() else {
        return preserve(R::UnparsableHeartbeat);
    };
    // The TTL rule of the registry, on the beat parsed once.
    let expired = fleet_model::heartbeat_lapsed(beat, row.heartbeat_ttl_s.unwrap_or(0), ctx.now);
    let proved_gone = matches!(probe, Some(ProcessVerdict::Gone | ProcessVerdict::PidReused));
    // pid liveness can only withdraw liveness, never grant it.
    if !expired && !proved_gone {
        return preserve(R::WorkerLive);
    }
    match probe {
        None | Some(ProcessVerdict::Unknown) => return preserve(unprobeable(row, ctx)),
        Some(ProcessVerdict::Alive) => return preserve(R::PidAlive),
        Some(ProcessVerdict::Gone | ProcessVerdict::PidReused) => {}
    }
    if !expired {
        return preserve(R::HeartbeatNotExpired);
    }
    if row.ownership_state != Some(OwnershipState::Stale) {
        return preserve(R::AmbiguousOwnershipState);
    }
    if row.repository.as_ref() != Some(&ctx.canonical_repository) {
        return preserve(R::RepositoryBindingAmbiguous);
    }
    if ev.shares_evidence_with_a_live_row(row, probe) {
        return preserve(R::ConflictingIdentityEvidence);
    }
    if ev.slot_claimed_by_a_live_row(row, probe) {
        return preserve(R::ClientInstanceConflict);
    }
    if ev.lease_owners.contains(row.worker_identity.as_str()) {
        return preserve(R::ProtectedActiveWorkflowOwner);
    }
    let minted = row.instance_id().is_some_and(|id| ev.ledger.contains(&id));
    if !minted {
        return preserve(R::UntrustedIdentityProvenance);
    }
    // The host binding: the probe that proved the process gone ran on its host and boot,
    // or the host's own later boot or its fence speaks for it.
    if let Some(proof) = by_host {
        return Verdict::EligibleByHost(proof);
    }
    if row.host_id.as_ref() != Some(&ctx.host_id) {
        return preserve(R::HostBindingUnproven);
    }
    if row.boot_id.is_none() || ctx.boot_id.is_none() {
        return preserve(R::BootIdentityUnknown);
    }
    if probe == Some(ProcessVerdict::PidReused) {
        return preserve(R::PidReuseDetected);
    }
    Verdict::EligibleStaleOrphan
}
