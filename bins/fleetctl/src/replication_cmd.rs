//! `fleetctl registry replication` and `fleetctl registry accept-history`: what a
//! PostgreSQL registry's grants meet on a replicated server, and an operator's answer
//! to a failover the registry could not prove lost no grant.

use std::process::ExitCode;

use fleet_cli::{Failure, outln};
use fleet_registry::{GrantVerdict, ReplicationPolicy, ReplicationStatus};
use fleet_runtime::{Fleet, RegistryLocation};

use crate::output::{self, ResultFormat};

/// A policy named on the command line.
pub(crate) fn parse_policy(text: &str) -> Result<ReplicationPolicy, String> {
    ReplicationPolicy::parse(text).ok_or_else(|| {
        let names: Vec<&str> = ReplicationPolicy::ALL.iter().map(|p| p.as_str()).collect();
        format!("{text:?} is not a replication policy (one of: {})", names.join(", "))
    })
}

/// Shows the replication, after setting the policy when one is given.
pub(crate) fn show(
    location: &RegistryLocation,
    policy: Option<ReplicationPolicy>,
    format: Option<ResultFormat>,
) -> Result<ExitCode, Failure> {
    let Some(status) = Fleet::new(location.clone()).replication(policy)? else {
        return Err(Failure::usage(
            "this registry is a SQLite file, which does not replicate: replication is PostgreSQL's",
        ));
    };
    if let Some(format) = format {
        output::print_result(format, &to_json(&status))?;
        return Ok(ExitCode::SUCCESS);
    }
    let server = &status.server;
    let policy = status.recorded.as_ref().map_or_else(ReplicationPolicy::default, |r| r.policy);
    outln!("policy:      {policy}")?;
    outln!("server:      {}", server.history)?;
    let names = if server.has_synchronous_standby() {
        format!("synchronous_standby_names = '{}'", server.synchronous_standby_names)
    } else {
        "no synchronous standby".to_owned()
    };
    outln!("standbys:    {} streaming; {names}", server.standbys)?;
    match &status.recorded {
        None => outln!("recorded:    nothing yet (the first grant records the server's history)")?,
        Some(r) => {
            let accepted = match (&r.accepted_by, &r.reason) {
                (Some(by), Some(reason)) => format!(", accepted by {by}: {reason}"),
                _ => String::new(),
            };
            outln!("recorded:    {} at {}{accepted}", r.history, r.recorded_at)?;
        }
    }
    match status.verdict() {
        GrantVerdict::Grant { warning: None, .. } => outln!("grants:      allowed")?,
        GrantVerdict::Grant { warning: Some(w), .. } => outln!("grants:      allowed, with a warning: {w}")?,
        GrantVerdict::Refuse(why) => outln!("grants:      refused: {why}")?,
    }
    Ok(ExitCode::SUCCESS)
}

fn to_json(status: &ReplicationStatus) -> serde_json::Value {
    let (grants, why) = match status.verdict() {
        GrantVerdict::Grant { warning, .. } => ("allowed", warning),
        GrantVerdict::Refuse(why) => ("refused", Some(why)),
    };
    serde_json::json!({
        "policy": status.recorded.as_ref().map_or_else(ReplicationPolicy::default, |r| r.policy),
        "server": status.server,
        "recorded": status.recorded,
        "grants": grants,
        "why": why,
    })
}

/// Accepts the server's current history, raising the epoch floor `gap` past every epoch.
pub(crate) fn accept(
    location: &RegistryLocation,
    reason: &str,
    by: Option<String>,
    gap: u64,
    format: Option<ResultFormat>,
) -> Result<ExitCode, Failure> {
    let by = by.unwrap_or_else(fleet_runtime::hosts::operator_name);
    let acceptance = Fleet::new(location.clone()).accept_history(gap, &by, reason)?;
    if let Some(format) = format {
        output::print_result(format, &acceptance)?;
        return Ok(ExitCode::SUCCESS);
    }
    let previous = acceptance.previous.as_ref().map_or_else(|| "none".to_owned(), ToString::to_string);
    outln!(
        "accepted {} (recorded before: {previous}); every new fencing epoch is above {}",
        acceptance.accepted,
        acceptance.epoch_floor
    )?;
    Ok(ExitCode::SUCCESS)
}
