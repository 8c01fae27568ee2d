//! `fleetctl initialize --key K --target-version N -- CMD`: run CMD exactly once per
//! version across any number of concurrent starters.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use fleet_cli::Failure;
use fleet_cli::outln;
use fleet_lease::LeaseKey;
use fleet_runtime::{InitOptions, InitReport, RegistryLocation, run_initialization};

use crate::output::{self, ResultArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct InitArgs {
    /// What is being initialized (one lease per key).
    #[arg(long)]
    key: String,
    /// The version to bring it to; a stored newer version is refused.
    #[arg(long)]
    target_version: u64,
    /// Lease TTL in seconds; the runner renews every third of it.
    #[arg(long, default_value_t = 30)]
    ttl: u64,
    /// How often a waiting starter looks again, in milliseconds.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    #[command(flatten)]
    output: ResultArgs,
    /// The initialization command and its arguments.
    #[arg(required = true, last = true)]
    command: Vec<OsString>,
}

pub(crate) fn run(location: &RegistryLocation, args: InitArgs) -> Result<ExitCode, Failure> {
    let key = LeaseKey::new(format!("init:{}", args.key)).map_err(|e| Failure::usage(e.to_string()))?;
    if args.ttl == 0 || args.ttl > 3600 {
        return Err(Failure::usage(format!("--ttl {} is outside 1..=3600 seconds", args.ttl)));
    }
    let (program, rest) = args.command.split_first().ok_or_else(|| Failure::usage("no command"))?;
    let options = InitOptions {
        key,
        target_version: args.target_version,
        owner: format!(
            "pid-{}@{}",
            std::process::id(),
            fleet_runtime::process::host_id().map(|h| h.to_string()).unwrap_or_default()
        ),
        ttl: Duration::from_secs(args.ttl),
        poll: Duration::from_millis(args.poll_ms.max(10)),
    };
    let report = run_initialization(location, &options, |cancel| {
        // The command's whole tree ends with this process or the lease: a takeover never
        // runs a second copy beside a first that outlived its authority. The command is
        // told its fencing token, to fence its own writes where no local mechanism reaches.
        let holder = cancel.holder();
        let tenure = fleet_runtime::tenure::Tenure::new(
            cancel.registry_id(),
            &format!("init:{}", args.key),
            holder.fencing_epoch.get(),
        );
        // A former owner paused past its lease may still have its tree running here:
        // nothing of it may run beside this tenure. A newer tenure's tree means this
        // one has passed: nothing of it is touched.
        let left = tenure
            .end_former_trees(fleet_runtime::tenure::SameEpoch::Untouched)
            .map_err(|s| s.to_string())?;
        if left > 0 {
            return Err(format!(
                "{left} processes of a former owner's run would not end; not running beside them"
            ));
        }
        let mut kept =
            fleet_runtime::keeper::LeasedCommand::new(program, rest, cancel.act_until(), cancel.grace())
                .map_err(|e| format!("cannot start the keeper: {e}"))?;
        let command = kept.command();
        command
            .env("FLEET_INIT_KEY", &args.key)
            .env("FLEET_INIT_TARGET_VERSION", args.target_version.to_string())
            .env("FLEET_INIT_EPOCH", holder.fencing_epoch.to_string())
            .env("FLEET_INIT_LEASE_ID", holder.lease_id.as_str());
        tenure.mark(command);
        // Checked last before the command starts: a pause since the checks above may
        // have let the lease lapse.
        if cancel.cancelled() {
            return Err("the initialization lease lapsed before the command started".into());
        }
        let (mut child, mut line) =
            kept.spawn().map_err(|e| format!("cannot run {}: {e}", program.to_string_lossy()))?;
        loop {
            if cancel.cancelled() {
                fleet_runtime::keeper::stop_kept(&mut child);
                return Err("cancelled: the initialization lease was lost".into());
            }
            line.extend(cancel.act_until());
            match child.try_wait() {
                Ok(Some(status)) if status.success() => return Ok(()),
                Ok(Some(status)) => {
                    return Err(format!("{} exited with {status}", program.to_string_lossy()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("cannot wait for {}: {e}", program.to_string_lossy())),
            }
        }
    })?;
    let version = args.target_version;
    match report {
        InitReport::Completed | InitReport::AlreadyReady => {
            let (outcome, text) = match report {
                InitReport::Completed => {
                    ("completed", format!("initialized {} to version {version}", args.key))
                }
                _ => ("already_ready", format!("{} is ready at version {version}", args.key)),
            };
            match args.output.format() {
                Some(format) => {
                    let done =
                        serde_json::json!({ "outcome": outcome, "key": args.key, "target_version": version });
                    output::print_result(format, &done)?;
                }
                None => outln!("{text}")?,
            }
            Ok(ExitCode::SUCCESS)
        }
        InitReport::Failed(detail) => {
            Err(Failure::refused(format!("initialization of {} failed: {detail}", args.key)))
        }
        InitReport::NewerThanSupported(stored) => Err(Failure::refused(format!(
            "{} is at version {stored}, newer than the target {version} this caller supports",
            args.key
        ))),
        InitReport::LeaseLost => Err(Failure::refused(format!(
            "lost the initialization lease of {} while running; the command was stopped and nothing was recorded",
            args.key
        ))),
        other => Err(Failure::refused(format!("initialization of {} ended: {other:?}", args.key))),
    }
}
