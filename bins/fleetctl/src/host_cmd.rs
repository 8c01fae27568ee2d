//! `fleetctl host`: the hosts of the fleet, and the fence of a host gone for good.

use std::process::ExitCode;

use clap::Subcommand;
use fleet_cli::{Failure, out};
use fleet_identity::HostId;
use fleet_registry::{HostList, HostReport};
use fleet_runtime::RegistryLocation;

use crate::output::{self, OutputArgs, ResultArgs};
use crate::table;
use crate::watch::WatchArgs;

#[derive(Debug, Subcommand)]
pub(crate) enum HostCmd {
    /// List every host the registry knows: its boots, first and last sign of life,
    /// live, stale and terminal rows, leases held, and fences.
    List {
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Fence a host that is gone for good: the registry refuses every write from it
    /// (every boot, until unfenced; each boot it has had, for good), and its rows become
    /// retirement candidates. Never for the host this runs on.
    Fence {
        /// The host id (its /etc/machine-id), as `host list` shows it.
        host: String,
        /// Why the host is gone, for the record.
        #[arg(long)]
        reason: String,
        /// Who fences it (default: $USER@hostname).
        #[arg(long)]
        by: Option<String>,
        #[command(flatten)]
        output: ResultArgs,
    },
    /// Lift a host's fence for its later boots (a host that was reinstalled or came
    /// back after all); every boot the fence covered stays fenced.
    Unfence {
        /// The host id.
        host: String,
        /// Who lifts it (default: $USER@hostname).
        #[arg(long)]
        by: Option<String>,
    },
}

pub(crate) fn run(location: &RegistryLocation, cmd: HostCmd) -> Result<ExitCode, Failure> {
    match cmd {
        HostCmd::List { output, watch } => {
            let frame = || -> Result<String, Failure> {
                let list = fleet_runtime::hosts::host_list(location)?;
                let names = list.hosts.iter().map(|h| h.host_id.as_str());
                output::listing(output.format(), |wide| list_table(&list, wide), &list, "host", names)
            };
            if watch.watch {
                crate::watch::watch(&watch, frame)?;
            } else {
                out!("{}", frame()?)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        HostCmd::Fence { host, reason, by, output: result } => {
            let host = host_id(&host)?;
            let by = by.unwrap_or_else(fleet_runtime::hosts::operator_name);
            let report = fleet_runtime::hosts::fence_host(location, &host, &reason, &by)?;
            if let Some(format) = result.format() {
                output::print_result(format, &report)?;
            } else if report.fences.is_empty() {
                out!("host {host} was already fenced; nothing written\n")?;
            } else {
                let boots: Vec<&str> =
                    report.fences.iter().map(|f| f.boot_id.as_str()).filter(|b| *b != "*").collect();
                let boots = if boots.is_empty() { "none known".to_owned() } else { boots.join(", ") };
                out!(
                    "fenced host {host} (every boot until unfenced; boots {boots} for good): the registry refuses its writes, and its rows are retirement candidates once their heartbeats lapse\n"
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
        HostCmd::Unfence { host, by } => {
            let host = host_id(&host)?;
            let by = by.unwrap_or_else(fleet_runtime::hosts::operator_name);
            let lifted = fleet_runtime::hosts::unfence_host(location, &host, &by)?;
            out!(
                "lifted the fence of host {} for its later boots (fenced {} by {}); the boots it covered stay fenced\n",
                lifted.host_id,
                lifted.fenced_at,
                lifted.fenced_by
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn host_id(text: &str) -> Result<HostId, Failure> {
    HostId::new(text).map_err(|e| Failure::usage(format!("{text:?} is not a host id: {e}")))
}

const HEADER: [&str; 9] =
    ["HOST", "NAME", "STATE", "BOOTS", "LIVE", "STALE", "TERMINAL", "LEASES", "LAST SEEN"];

fn cells(host: &HostReport) -> Vec<String> {
    vec![
        host.host_id.to_string(),
        host.hostname.clone().unwrap_or_else(|| "-".into()),
        host.state.to_string() + if host.cloned { " (cloned)" } else { "" },
        host.boots.len().to_string(),
        host.live_rows.to_string(),
        host.stale_rows.to_string(),
        host.terminal_rows.to_string(),
        host.leases_held.len().to_string(),
        host.last_seen_age_s.map_or_else(|| "-".into(), |s| format!("{s}s ago")),
    ]
}

fn list_table(list: &HostList, wide: bool) -> String {
    if !wide {
        let rows: Vec<Vec<String>> = list.hosts.iter().map(cells).collect();
        return table::render(&HEADER, &rows);
    }
    let rows: Vec<Vec<String>> =
        list.hosts
            .iter()
            .map(|h| {
                let mut row = cells(h);
                let current = h.boots.last().map_or_else(|| "-".into(), |b| b.boot_id.to_string());
                let fence = h.fences.iter().find(|f| f.lifted_at.is_none()).map_or_else(
                    || "-".into(),
                    |f| format!("{} by {}: {}", f.fenced_at, f.fenced_by, f.reason),
                );
                row.extend([
                    current,
                    h.first_seen.map_or_else(|| "-".into(), |t| t.to_string()),
                    h.clock_offset_ms.map_or_else(|| "-".into(), |ms| format!("{:+.3}s", ms as f64 / 1000.0)),
                    h.leases_held.join(","),
                    fence,
                ]);
                row
            })
            .collect();
    let mut header = HEADER.to_vec();
    header.extend(["LATEST BOOT", "FIRST SEEN", "CLOCK OFFSET", "LEASE KEYS", "FENCE"]);
    table::render_whole(&header, &rows)
}
