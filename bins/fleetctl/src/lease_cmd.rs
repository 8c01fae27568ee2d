//! `fleetctl lease acquire|renew|release|takeover|show|audit` for connector and workflow
//! leases.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use fleet_cli::Failure;
use fleet_cli::{out, outln};
use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, FencingEpoch, Holder, LeaseId, LeaseKey, LeaseKind, LeaseRecord,
    LeaseState, normalize_scopes,
};
use fleet_registry::{AuditQuery, LeaseResult};
use fleet_runtime::{Fleet, KeptAlive, LeaseChange, RegistryLocation};
use time::Duration;

use crate::output::{self, Format, OutputArgs, ResultArgs, ResultFormat};
use crate::table;
use crate::watch::WatchArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// The lease: `workflow:NAME` or `connector:TENANT/AGENT/BINDING`.
    #[arg(long)]
    key: String,
    #[command(flatten)]
    output: ResultArgs,
    /// Correlation id recorded in the audit log.
    #[arg(long)]
    correlation_id: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct HolderArgs {
    /// The holder (worker identity or connector id).
    #[arg(long)]
    owner: String,
    /// The tenure's lease id.
    #[arg(long)]
    lease_id: String,
    /// The tenure's fencing epoch.
    #[arg(long)]
    epoch: u64,
}

#[derive(Debug, Subcommand)]
pub(crate) enum LeaseCmd {
    /// Acquire a lease (connector leases: insert-only, policy and caps apply).
    Acquire {
        #[command(flatten)]
        target: Target,
        /// The holder (worker identity or connector id).
        #[arg(long)]
        owner: String,
        /// TTL in seconds.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
        /// A scope the lease allows (connector leases; repeatable).
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Connector policy file (default: deny every connector lease).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Renew the holder's lease (connector leases: policy and caps apply).
    Renew {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        holder: HolderArgs,
        /// TTL in seconds from now (default: the TTL the lease was granted or last
        /// renewed with, as etcd's keep-alive keeps it).
        #[arg(long)]
        ttl: Option<u64>,
        /// Connector policy file (default: deny every connector lease).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Keep the holder's lease alive until interrupted, as etcdctl's lease keep-alive
    /// does: a renewal every third of its TTL, a line for each; SIGINT or SIGTERM
    /// releases it and exits 0. A renewal refused (the lease taken over, a policy
    /// withdrawn) or a lease that lapsed between renewals exits 1.
    KeepAlive {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        holder: HolderArgs,
        /// TTL in seconds from each renewal (default: the TTL the lease was granted or
        /// last renewed with).
        #[arg(long)]
        ttl: Option<u64>,
        /// Connector policy file (default: deny every connector lease).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Release the holder's lease (connector leases: the policy applies).
    Release {
        #[command(flatten)]
        target: Target,
        #[command(flatten)]
        holder: HolderArgs,
        /// Connector policy file (default: deny every connector lease).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Take over a lapsed or released lease at the epoch you saw.
    Takeover {
        #[command(flatten)]
        target: Target,
        /// The new holder.
        #[arg(long)]
        owner: String,
        /// The epoch the lease is at now; the takeover fails if it moved.
        #[arg(long)]
        expected_epoch: u64,
        /// TTL in seconds.
        #[arg(long, default_value_t = 30)]
        ttl: u64,
        /// Scopes for a connector lease (repeatable).
        #[arg(long = "scope")]
        scopes: Vec<String>,
        /// Connector policy file (default: deny every connector takeover).
        #[arg(long)]
        policy: Option<PathBuf>,
    },
    /// Show one lease, or every lease.
    Show {
        /// The lease (default: all).
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Print the audit log, of one lease or all.
    Audit {
        /// The lease (default: all).
        #[arg(long)]
        key: Option<String>,
        /// Only entries at or after this time: RFC 3339, a date (its first instant, UTC),
        /// or an age before now (`15m`, `2h`, `7d`).
        #[arg(long)]
        since: Option<String>,
        /// Only entries before this time (the same forms).
        #[arg(long)]
        until: Option<String>,
        /// Only the last N entries (of those selected).
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
        /// Keep printing entries as they are written, until interrupted (with --json,
        /// one JSON object per line).
        #[arg(long)]
        follow: bool,
        /// JSON is an array of entries, YAML a sequence (both read and written a page
        /// at a time).
        #[command(flatten)]
        output: OutputArgs,
    },
}

/// The connector policy: the file given, or deny everything.
pub(crate) fn load_policy(path: Option<&PathBuf>) -> Result<Box<dyn ConnectorPolicy>, Failure> {
    fleet_runtime::connector_policy(path.map(PathBuf::as_path)).map_err(|e| Failure::usage(e.to_string()))
}

pub(crate) fn parse_key(text: &str) -> Result<(LeaseKey, LeaseKind, Option<ConnectorIdentity>), Failure> {
    let key = LeaseKey::new(text).map_err(|e| Failure::usage(e.to_string()))?;
    let (kind, binding) = key.kind().map_err(|e| Failure::usage(e.to_string()))?;
    Ok((key, kind, binding))
}

/// Where a lease stands at `now`, as a person should read it: a held lease whose expiry
/// passed is expired, whatever its stored state says.
pub(crate) fn standing(lease: &LeaseRecord, now: Timestamp) -> &'static str {
    match lease.state {
        LeaseState::Released => "released",
        LeaseState::Held if lease.is_live(now) => "held",
        LeaseState::Held => "expired",
    }
}

/// A lease as `lease show -o json|yaml` prints it: the record and its standing.
#[derive(serde::Serialize)]
struct LeaseShown<'a> {
    #[serde(flatten)]
    lease: &'a LeaseRecord,
    status: &'static str,
}

/// A lease as JSON, with its standing at `now`.
fn lease_json(lease: &LeaseRecord, now: Timestamp) -> serde_json::Value {
    serde_json::to_value(LeaseShown { lease, status: standing(lease, now) }).unwrap_or_default()
}

/// Audit entries read and printed at a time: memory stays flat at any log size.
const AUDIT_PAGE: usize = 1000;

/// Prints the entries `query` selects, a page at a time: the last `tail` of them when
/// given, then, with `follow`, every new one as it is written.
fn print_audit(
    fleet: &mut Fleet,
    mut query: AuditQuery<'_>,
    tail: Option<usize>,
    follow: bool,
    format: Option<Format>,
) -> Result<(), Failure> {
    let json = format == Some(Format::Json);
    if let Some(n) = tail {
        let newest = |fleet: &mut Fleet, query: AuditQuery<'_>, limit| {
            fleet.lease_audit_page(&AuditQuery { newest_first: true, after: i64::MAX, limit, ..query })
        };
        let whole = AuditQuery { key: None, since: None, until: None, ..query };
        // The end of the log: where following starts when nothing is selected yet.
        let end = newest(fleet, whole, 1)?.first().map_or(0, |e| e.id);
        let last = if n == 0 { Vec::new() } else { newest(fleet, query, n)? };
        query.after = last.last().map_or(end, |oldest| oldest.id - 1);
    }
    let lines = json && follow;
    let (mut first, mut header) = (true, matches!(format, None | Some(Format::Wide)));
    if json && !lines {
        out!("[")?;
    }
    loop {
        let page = fleet.lease_audit_page(&query)?;
        if page.is_empty() {
            // An empty log is a table with its header, as any other listing.
            if header {
                out!("{}", audit_table(&[], format))?;
                fleet_cli::flush_stdout()?;
                header = false;
            }
            if !follow {
                break;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
            continue;
        }
        query.after = page.last().map_or(query.after, |e| e.id);
        if format == Some(Format::Yaml) {
            output::print_yaml(&page)?;
            first = false;
        } else if format == Some(Format::Name) {
            let ids: Vec<String> = page.iter().map(|e| e.id.to_string()).collect();
            output::print_names("audit", ids.iter().map(String::as_str))?;
        } else if json {
            for entry in &page {
                let text = serde_json::to_string(entry).unwrap_or_default();
                if lines {
                    outln!("{text}")?;
                } else {
                    out!("{}\n{text}", if first { "" } else { "," })?;
                }
                first = false;
            }
        } else {
            let rendered = audit_table(&page, format);
            let body = if header {
                rendered.as_str()
            } else {
                rendered.split_once('\n').map_or("", |(_, rest)| rest)
            };
            out!("{body}")?;
            header = false;
        }
        fleet_cli::flush_stdout()?;
    }
    if json && !lines {
        outln!("{}]", if first { "" } else { "\n" })?;
    }
    if format == Some(Format::Yaml) && first {
        // Nothing was selected: YAML's empty sequence, as JSON prints `[]`.
        outln!("[]")?;
    }
    Ok(())
}

fn audit_table(log: &[fleet_registry::AuditEntry], format: Option<Format>) -> String {
    let rows: Vec<Vec<String>> = log
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                e.at.to_string(),
                e.lease_key.clone(),
                e.event.clone(),
                e.outcome.clone(),
                e.reason.clone().unwrap_or_default(),
                e.identity.clone().unwrap_or_default(),
                e.fencing_epoch.map(|v| v.to_string()).unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["ID", "AT", "KEY", "EVENT", "OUTCOME", "REASON", "IDENTITY", "EPOCH"];
    if format == Some(Format::Wide) {
        table::render_whole(&header, &rows)
    } else {
        table::render(&header, &rows)
    }
}

fn secs(ttl: u64) -> Result<Duration, Failure> {
    if ttl == 0 || ttl > 86_400 {
        return Err(Failure::usage(format!("--ttl {ttl} is outside 1..=86400 seconds")));
    }
    Ok(Duration::seconds(i64::try_from(ttl).unwrap_or(86_400)))
}

fn holder(h: HolderArgs) -> Result<Holder, Failure> {
    Ok(Holder {
        owner: h.owner,
        lease_id: LeaseId::new(h.lease_id).map_err(|e| Failure::usage(e.to_string()))?,
        fencing_epoch: FencingEpoch::new(h.epoch).map_err(|e| Failure::usage(e.to_string()))?,
    })
}

fn scopes(raw: &[String]) -> Result<Vec<String>, Failure> {
    normalize_scopes(raw).map_err(|e| Failure::usage(e.to_string()))
}

fn report(result: LeaseResult, format: Option<ResultFormat>) -> Result<ExitCode, Failure> {
    match result {
        Ok(record) => {
            if let Some(format) = format {
                output::print_result(format, &serde_json::json!({ "outcome": "ok", "lease": record }))?;
            } else {
                // The record was written at the store's now: its own updated_at.
                out!("{}", lease_table(std::slice::from_ref(&record), record.updated_at))?;
                if record.state == LeaseState::Held {
                    // The TTL this grant was given, so that following the line keeps it.
                    let ttl = record.expires_at.since(record.heartbeat_at).whole_seconds().max(1);
                    outln!(
                        "renew or release with: --owner {} --lease-id {} --epoch {} --ttl {ttl}",
                        record.owner,
                        record.lease_id,
                        record.fencing_epoch
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(denial) => {
            if let Some(format) = format {
                output::print_result(format, &serde_json::json!({ "outcome": "denied", "reason": denial }))?;
                Ok(ExitCode::from(1))
            } else {
                Err(Failure::refused(denial.to_string()))
            }
        }
    }
}

const LEASE_HEADER: [&str; 9] =
    ["KEY", "KIND", "OWNER", "LEASE ID", "EPOCH", "STATE", "EXPIRES", "VERSION", "INIT"];

fn lease_table(leases: &[LeaseRecord], now: Timestamp) -> String {
    table::render(&LEASE_HEADER, &lease_cells(leases, now))
}

/// The table with every value whole, when each lease expires and was last renewed, and
/// the process that holds it where one does (`connector run`).
fn lease_table_wide(leases: &[LeaseRecord], now: Timestamp) -> String {
    let mut rows = lease_cells(leases, now);
    for (row, lease) in rows.iter_mut().zip(leases) {
        let process = lease.holder_process.as_ref().map_or_else(|| "-".to_owned(), ToString::to_string);
        row.extend([lease.expires_at.to_string(), lease.heartbeat_at.to_string(), process]);
    }
    let mut header = LEASE_HEADER.to_vec();
    header.extend(["EXPIRES AT", "RENEWED AT", "PROCESS"]);
    table::render_whole(&header, &rows)
}

fn lease_cells(leases: &[LeaseRecord], now: Timestamp) -> Vec<Vec<String>> {
    leases
        .iter()
        .map(|l| {
            let (version, init) = l.init.as_ref().map_or_else(
                || ("-".to_owned(), "-".to_owned()),
                |i| (i.target_version.to_string(), i.status.as_str().to_owned()),
            );
            vec![
                l.lease_key.to_string(),
                l.kind.as_str().to_owned(),
                l.owner.clone(),
                l.lease_id.to_string(),
                l.fencing_epoch.to_string(),
                standing(l, now).to_owned(),
                match l.state {
                    LeaseState::Released => "-".to_owned(),
                    LeaseState::Held => table::relative(l.expires_at, now),
                },
                version,
                init,
            ]
        })
        .collect()
}

pub(crate) fn run(location: &RegistryLocation, cmd: LeaseCmd) -> Result<ExitCode, Failure> {
    let fleet = Fleet::new(location.clone());
    match cmd {
        LeaseCmd::Acquire { target, owner, ttl, scopes: raw, policy } => {
            let (ttl, scopes) = (secs(ttl)?, scopes(&raw)?);
            let change = LeaseChange::Acquire { owner: &owner, ttl, scopes: &scopes };
            change_lease(fleet.creating_registry(), &target, change, policy.as_ref())
        }
        LeaseCmd::Renew { target, holder: h, ttl, policy } => {
            let holder = holder(h)?;
            let change = LeaseChange::Renew { holder: &holder, ttl: ttl.map(secs).transpose()? };
            change_lease(fleet, &target, change, policy.as_ref())
        }
        LeaseCmd::KeepAlive { target, holder: h, ttl, policy } => {
            keep_alive(fleet, &target, &holder(h)?, ttl.map(secs).transpose()?, policy.as_ref())
        }
        LeaseCmd::Release { target, holder: h, policy } => {
            let holder = holder(h)?;
            change_lease(fleet, &target, LeaseChange::Release { holder: &holder }, policy.as_ref())
        }
        LeaseCmd::Takeover { target, owner, expected_epoch, ttl, scopes: raw, policy } => {
            let expected_epoch =
                FencingEpoch::new(expected_epoch).map_err(|e| Failure::usage(e.to_string()))?;
            let (ttl, scopes) = (secs(ttl)?, scopes(&raw)?);
            let change = LeaseChange::TakeOver { expected_epoch, owner: &owner, ttl, scopes: &scopes };
            change_lease(fleet, &target, change, policy.as_ref())
        }
        LeaseCmd::Show { key, output, watch } => show(fleet, key.as_deref(), &output, &watch),
        LeaseCmd::Audit { key, since, until, tail, follow, output } => {
            let key = key.map(|k| parse_key(&k).map(|(key, _, _)| key)).transpose()?;
            let since = since.map(|t| table::instant("--since", &t)).transpose()?;
            let until = until.map(|t| table::instant("--until", &t)).transpose()?;
            let query = AuditQuery {
                key: key.as_ref(),
                since,
                until,
                after: 0,
                newest_first: false,
                limit: AUDIT_PAGE,
            };
            print_audit(&mut { fleet }, query, tail, follow, output.format())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// One lease change, asked once and reported.
fn change_lease(
    mut fleet: Fleet,
    target: &Target,
    change: LeaseChange<'_>,
    policy: Option<&PathBuf>,
) -> Result<ExitCode, Failure> {
    let (key, _, _) = parse_key(&target.key)?;
    let policy = load_policy(policy)?;
    let result = fleet.change_lease(&key, change, policy.as_ref(), target.correlation_id.as_deref())?;
    report(result, target.output.format())
}

/// `lease keep-alive`: renewals until a stop signal, then the release.
fn keep_alive(
    mut fleet: Fleet,
    target: &Target,
    holder: &Holder,
    ttl: Option<Duration>,
    policy: Option<&PathBuf>,
) -> Result<ExitCode, Failure> {
    let (key, _, _) = parse_key(&target.key)?;
    let policy = load_policy(policy)?;
    let stop = fleet_runtime::keeper::watch_stop_signals(None)
        .map_err(|e| Failure::store(format!("cannot watch stop signals: {e}")))?;
    let mut printed = Ok(());
    let kept = fleet.keep_lease_alive(&key, holder, ttl, policy.as_ref(), &stop, |lease| {
        if printed.is_err() {
            return;
        }
        let renewal = serde_json::json!({ "outcome": "renewed", "lease": lease });
        printed = match target.output.format() {
            Some(ResultFormat::Json) => output::print_result(ResultFormat::Json, &renewal),
            // One YAML document per renewal.
            Some(ResultFormat::Yaml) => outln!("---").and_then(|()| output::print_yaml(&renewal)),
            None => outln!("renewed {key} at epoch {} until {}", lease.fencing_epoch, lease.expires_at),
        }
        .and_then(|()| fleet_cli::flush_stdout());
    });
    printed?;
    match kept? {
        KeptAlive::Stopped { released: true } => {
            if let Some(format) = target.output.format() {
                let released = serde_json::json!({ "outcome": "released", "lease_key": key.as_str() });
                if format == ResultFormat::Yaml {
                    outln!("---")?;
                }
                output::print_result(format, &released)?;
            } else {
                outln!("released {key}")?;
            }
            Ok(ExitCode::SUCCESS)
        }
        KeptAlive::Stopped { released: false } => {
            Err(Failure::refused(format!("{key} was no longer this holder's to release")))
        }
        KeptAlive::Denied(denial) => Err(Failure::refused(format!("lost {key}: {denial}"))),
        KeptAlive::Lapsed => Err(Failure::refused(format!(
            "{key} lapsed: no renewal committed before it expired; it may be another's now"
        ))),
        other => Err(Failure::refused(format!("{key}: {other:?}"))),
    }
}

/// `lease show`: one lease, or every lease, once or under `--watch`.
fn show(
    mut fleet: Fleet,
    key: Option<&str>,
    output: &OutputArgs,
    watch: &WatchArgs,
) -> Result<ExitCode, Failure> {
    let key = key.map(|k| parse_key(k).map(|(key, _, _)| key)).transpose()?;
    let mut frame = || -> Result<String, Failure> {
        let (leases, now) = match &key {
            Some(key) => {
                let (lease, now) = fleet.lease(key)?;
                let Some(lease) = lease else {
                    return Err(Failure::refused(format!("no lease {key} in the registry")));
                };
                (vec![lease], now)
            }
            None => fleet.leases()?,
        };
        let values: Vec<serde_json::Value> = leases.iter().map(|l| lease_json(l, now)).collect();
        let table = |wide| if wide { lease_table_wide(&leases, now) } else { lease_table(&leases, now) };
        let names = leases.iter().map(|l| l.lease_key.as_str());
        output::listing(output.format(), table, &values, "lease", names)
    };
    if watch.watch {
        crate::watch::watch(watch, frame)?;
    } else {
        out!("{}", frame()?)?;
    }
    Ok(ExitCode::SUCCESS)
}
