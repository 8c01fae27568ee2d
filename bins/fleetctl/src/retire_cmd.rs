//! `fleetctl retire plan` and `fleetctl retire apply`: the dry run first, then the
//! compare-and-swap protected apply with the plan's tokens.

use std::process::ExitCode;

use clap::Subcommand;
use fleet_cli::Failure;
use fleet_cli::{out, outln};
use fleet_identity::WorkerIdentity;
use fleet_registry::{ApplyOutcome, ApplyRequest, RegistryMatch};
use fleet_retirement::{CandidateFingerprint, Plan, RegistryFingerprint, RetirementContext};
use fleet_runtime::{Fleet, RegistryLocation};

use crate::output::{self, ResultArgs, ResultFormat};

#[derive(Debug, clap::Args)]
pub(crate) struct Common {
    /// The repository retired rows must be bound to (default: the current directory).
    #[arg(long)]
    canonical_repository: Option<String>,
    #[command(flatten)]
    output: ResultArgs,
    /// The remote the retirement concerns (seed 004's audit context; one of
    /// FLEET_REMOTES when set).
    #[arg(long)]
    remote: Option<String>,
    /// Host override for the audit context.
    #[arg(long)]
    host: Option<String>,
    /// Organisation override for the audit context.
    #[arg(long)]
    org: Option<String>,
    /// Repository override for the audit context.
    #[arg(long)]
    repo: Option<String>,
}

impl Common {
    /// The audit context, checked (a bad value is bad input naming its flag).
    fn audit(&self) -> Result<fleet_registry::RetirementAudit, Failure> {
        fleet_runtime::retirement_audit(
            self.remote.clone(),
            self.host.clone(),
            self.org.clone(),
            self.repo.clone(),
        )
        .map_err(|e| Failure::usage(format!("--{}: {}", e.field, e.message)))
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum RetireCmd {
    /// Dry run: which rows are provably stale orphans, which are preserved and why.
    Plan {
        #[command(flatten)]
        common: Common,
    },
    /// Retire the planned candidates, if nothing moved since the plan.
    Apply {
        #[command(flatten)]
        common: Common,
        /// The plan's registry_fingerprint.
        #[arg(long)]
        registry_fingerprint: String,
        /// The plan's candidate_fingerprint.
        #[arg(long)]
        candidate_fingerprint: String,
        /// The candidate worker identities, comma-separated.
        #[arg(long, value_delimiter = ',', required_unless_present = "every_candidate")]
        workers: Vec<String>,
        /// Retire every candidate of the plan the candidate fingerprint names, without
        /// listing them (the fingerprint covers each one's identity and content).
        #[arg(long, conflicts_with = "workers")]
        every_candidate: bool,
        /// Refuse (registry_revision_moved) when any row changed since the plan, even
        /// one outside the candidates, such as a live worker's heartbeat.
        #[arg(long)]
        require_registry_match: bool,
    },
}

impl Common {
    /// Where the retirement runs, as of now.
    fn context(&self) -> Result<RetirementContext, Failure> {
        Ok(fleet_runtime::retirement_context(self.canonical_repository.as_deref())?)
    }
}

pub(crate) fn run(location: &RegistryLocation, cmd: RetireCmd) -> Result<ExitCode, Failure> {
    match cmd {
        RetireCmd::Plan { common } => {
            common.audit()?;
            let p = Fleet::new(location.clone()).plan(&common.context()?)?;
            match common.output.format() {
                Some(ResultFormat::Json) => fleet_cli::print_json(&p)?,
                Some(ResultFormat::Yaml) => output::print_yaml(&p)?,
                None => out!("{}", render_plan(&p))?,
            }
            Ok(ExitCode::SUCCESS)
        }
        RetireCmd::Apply {
            common,
            registry_fingerprint,
            candidate_fingerprint,
            workers,
            every_candidate,
            require_registry_match,
        } => {
            let workers: Vec<WorkerIdentity> = workers
                .iter()
                .filter(|w| !w.trim().is_empty())
                .map(|w| WorkerIdentity::new(w.trim()).map_err(|e| Failure::usage(e.to_string())))
                .collect::<Result<_, _>>()?;
            if workers.is_empty() && !every_candidate {
                return Err(Failure::usage("--workers names no worker (nothing_requested)"));
            }
            let fingerprint = |flag: &str, value: &str| {
                Failure::usage(format!(
                    "{flag} {value:?} is not a fingerprint from `fleetctl retire plan` (b3: and 64 hex digits)"
                ))
            };
            let registry_fingerprint: RegistryFingerprint = registry_fingerprint
                .parse()
                .map_err(|_| fingerprint("--registry-fingerprint", &registry_fingerprint))?;
            let candidate_fingerprint: CandidateFingerprint = candidate_fingerprint
                .parse()
                .map_err(|_| fingerprint("--candidate-fingerprint", &candidate_fingerprint))?;
            let request = ApplyRequest {
                registry_fingerprint,
                candidate_fingerprint,
                worker_identities: workers,
                every_candidate,
                retired_by: format!("fleetctl-pid-{}", std::process::id()),
                registry_match: if require_registry_match {
                    RegistryMatch::WholeRegistry
                } else {
                    RegistryMatch::Candidates
                },
                audit: common.audit()?,
            };
            let mut fleet = Fleet::new(location.clone());
            // The plan's binding, unless one is given: where apply runs changes nothing.
            let binding = match &common.canonical_repository {
                Some(given) => Some(given.clone()),
                None => fleet.plan_binding(&request)?,
            };
            let ctx = fleet_runtime::retirement_context(binding.as_deref())?;
            let applied = fleet.apply(&request, &ctx)?;
            let report = &applied.report;
            if let Some(format) = common.output.format() {
                match format {
                    ResultFormat::Json => fleet_cli::print_json(&applied)?,
                    ResultFormat::Yaml => output::print_yaml(&applied)?,
                }
            } else {
                outln!("{}: retired {}", report.outcome, report.retired_count)?;
                if report.registry_moved == Some(true) {
                    outln!("  the registry moved since the plan (rows outside the candidates changed)")?;
                }
                for id in &report.retired {
                    outln!("  retired    {id}")?;
                }
                for p in &report.preserved {
                    outln!("  preserved  {}  {}", p.worker_identity, p.reason_code)?;
                }
                if let Some(e) = &report.error {
                    outln!("  error: {e}")?;
                }
                outln!("after: {}", after_words(&applied.after))?;
            }
            Ok(match report.outcome {
                ApplyOutcome::Applied if report.retired_count > 0 => ExitCode::SUCCESS,
                ApplyOutcome::AlreadyRetired => ExitCode::SUCCESS,
                ApplyOutcome::TransactionFailed => ExitCode::from(3),
                _ => ExitCode::from(1),
            })
        }
    }
}

fn render_plan(p: &Plan) -> String {
    let mut out = format!(
        "retirement plan: {}, {} preserved of {}\nregistry_fingerprint  {}\ncandidate_fingerprint {}\n",
        fleet_cli::count(p.candidate_count, "candidate", "candidates"),
        p.preserved_count,
        fleet_cli::count(p.assessed_count, "row", "rows"),
        p.registry_fingerprint,
        p.candidate_fingerprint
    );
    if !p.candidates.is_empty() {
        out.push_str("\ncandidates (eligible_stale_orphan):\n");
        for c in &p.candidates {
            out.push_str(&format!("  {}\n", c.worker_identity));
        }
    }
    if !p.preserved.is_empty() {
        out.push_str("\npreserved:\n");
        let rows: Vec<Vec<String>> = p
            .preserved
            .iter()
            .map(|a| {
                let detail = match a.eligible_after {
                    Some(t) => format!("{} (a candidate after {t})", a.detail),
                    None => a.detail.to_owned(),
                };
                vec![format!("  {}", a.worker_identity), a.reason_code.to_string(), detail]
            })
            .collect();
        out.push_str(&crate::table::render(&["  WORKER", "REASON", "DETAIL"], &rows));
    }
    // Rows bound to another repository than the plan's: name both, and the flag.
    let elsewhere: std::collections::BTreeSet<&str> = p
        .preserved
        .iter()
        .filter(|a| a.reason_code.as_str() == "repository_binding_ambiguous")
        .filter_map(|a| a.evidence.repository.as_ref().map(|r| r.as_str()))
        .filter(|r| *r != p.canonical_repository)
        .collect();
    if !elsewhere.is_empty() {
        let bound: Vec<&str> = elsewhere.into_iter().collect();
        out.push_str(&format!(
            "
this plan is for {}; rows preserved as repository_binding_ambiguous are bound to {}: \
             plan for one with --canonical-repository REPO\n",
            p.canonical_repository,
            bound.join(", ")
        ));
    }
    if let Some(t) = p.next_eligible_after {
        out.push_str(&format!("\nplan again after {t}: a preserved row becomes a candidate then\n"));
    }
    if !p.candidate_worker_identities.is_empty() {
        let ids: Vec<&str> = p.candidate_worker_identities.iter().map(|i| i.as_str()).collect();
        out.push_str(&format!(
            "\napply with:\n  fleetctl retire apply --canonical-repository {} --registry-fingerprint {} \
             --candidate-fingerprint {} --workers {}\n",
            shell_word(&p.canonical_repository),
            p.registry_fingerprint,
            p.candidate_fingerprint,
            ids.join(",")
        ));
    }
    out
}

/// `word` as one shell word: as it is when it needs no quoting, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain =
        !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "/._-:@+=,".contains(c));
    if plain { word.to_owned() } else { format!("'{}'", word.replace('\'', "'\\''")) }
}

/// The fleet after an apply, in words: safe or not, the stale workers left and each
/// blocker that remains with its count.
fn after_words(after: &fleet_runtime::AfterApply) -> String {
    match after {
        fleet_runtime::AfterApply::Read { live_fleet_safe, remaining_blockers, stale_worker_count } => {
            let verdict = if *live_fleet_safe { "the fleet is safe" } else { "the fleet is not safe" };
            let stale = fleet_cli::count(*stale_worker_count, "stale worker", "stale workers");
            let blockers: Vec<String> =
                remaining_blockers.iter().map(|(code, n)| format!("{code} ×{n}")).collect();
            if blockers.is_empty() {
                format!("{verdict}; {stale} left")
            } else {
                format!("{verdict}; {stale} left; blockers: {}", blockers.join(", "))
            }
        }
        fleet_runtime::AfterApply::Unread { error } => format!("the fleet could not be read again: {error}"),
    }
}
