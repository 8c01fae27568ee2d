//! `fleetctl connector run`: a connector binding held and exercised the way the gateway
//! demands ([`fleet_runtime::run_connector`]): the arguments checked, one call, its end
//! as an exit code.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use fleet_cli::Failure;
use fleet_lease::normalize_scopes;
use fleet_runtime::{ConnectorEnd, ConnectorRun, RegistryLocation};
use time::Duration;

use crate::lease_cmd::parse_key;

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The binding: `connector:TENANT/AGENT/BINDING`.
    #[arg(long)]
    key: String,
    /// The connector that holds the binding.
    #[arg(long)]
    owner: String,
    /// A scope the command needs (repeatable).
    #[arg(long = "scope", required = true)]
    scopes: Vec<String>,
    /// The connector policy file; without one every connector lease is denied.
    #[arg(long)]
    policy: PathBuf,
    /// Seconds the lease lasts unless renewed (at most 300); renewed every third of it.
    #[arg(long, default_value_t = 30)]
    ttl: u64,
    /// The command and its arguments.
    #[arg(required = true, last = true)]
    command: Vec<OsString>,
}

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ConnectorCmd {
    /// Hold a connector binding and run CMD under a validated execution grant.
    Run(RunArgs),
}

pub(crate) fn run(location: &RegistryLocation, cmd: ConnectorCmd) -> Result<ExitCode, Failure> {
    let ConnectorCmd::Run(args) = cmd;
    let (_, _, identity) = parse_key(&args.key)?;
    let identity = identity.ok_or_else(|| {
        Failure::usage(format!("{:?} is not a connector:TENANT/AGENT/BINDING key", args.key))
    })?;
    let max = fleet_runtime::max_connector_ttl().whole_seconds();
    let ttl = i64::try_from(args.ttl).ok().filter(|t| (1..=max).contains(t)).ok_or_else(|| {
        Failure::usage(format!("--ttl {} is outside 1..={max} seconds (the connector lease cap)", args.ttl))
    })?;
    let scopes = normalize_scopes(&args.scopes).map_err(|e| Failure::usage(e.to_string()))?;
    let (program, rest) = args.command.split_first().ok_or_else(|| Failure::usage("no command"))?;
    let run = ConnectorRun {
        identity,
        connector: args.owner,
        scopes,
        ttl: Duration::seconds(ttl),
        policy: args.policy,
        program: program.clone(),
        args: rest.to_vec(),
    };
    match fleet_runtime::run_connector(location, &run)? {
        ConnectorEnd::Exited(status) => {
            Ok(ExitCode::from(status.code().and_then(|c| u8::try_from(c).ok()).unwrap_or(1)))
        }
        ConnectorEnd::Stopped(sig) => Ok(ExitCode::from(u8::try_from(128 + sig).unwrap_or(255))),
    }
}
