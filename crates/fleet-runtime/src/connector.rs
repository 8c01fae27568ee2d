//! A connector binding held and exercised the way the gateway demands, beside
//! [`crate::run_initialization`]: hold the binding's lease and renew it, issue an
//! execution grant on the stored lease and validate it against the store before the
//! command runs and on every renewal, hand the command only the execution context, and
//! stop the command the moment the lease is lost (a takeover, an expiry, a policy
//! change).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::Ordering;
use std::time::{Duration as StdDuration, Instant};

use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, FencingEpoch, GrantIssuer, GrantLimits, Holder, HolderProcess,
    LeaseDenial, LeaseRecord,
};
use fleet_registry::{
    AuditContext, ConnectorExecutionContext, ConnectorRequest, OpenMode, Registry, StoreError,
};
use time::Duration;

use crate::fleet::{PolicyError, binding_name, connector_policy};
use crate::location::{AnyStore, RegistryLocation, open_registry};
use crate::{keeper, process, tenure};

/// What [`run_connector`] holds and runs.
#[derive(Debug, Clone)]
pub struct ConnectorRun {
    /// The binding.
    pub identity: ConnectorIdentity,
    /// The connector that holds it.
    pub connector: String,
    /// The scopes the command needs (normalized).
    pub scopes: Vec<String>,
    /// How long the lease lasts unless renewed; renewed every third of it.
    pub ttl: Duration,
    /// The policy file, read again on every renewal.
    pub policy: PathBuf,
    /// The command.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// How a connector's command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectorEnd {
    /// The command exited, with this status, and the lease was released.
    Exited(ExitStatus),
    /// A stop was asked of this process by signal `n`: the command's tree was ended
    /// gracefully and the lease released.
    Stopped(i32),
}

/// Why a connector's command did not run, or was stopped, under the binding.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectorError {
    /// The binding was not held, or its authority ended (a denial, a takeover, a lapse,
    /// a grant no longer valid, another live run of it).
    #[error("{0}")]
    Refused(String),
    /// The policy file could not be read or is not a policy.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The command could not be started.
    #[error("{0}")]
    Command(String),
    /// This host could not do its part (its identity, a private directory, the
    /// command's keeper, signals).
    #[error("{0}")]
    Host(String),
    /// The registry could not be used.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The largest TTL a binding is held with: the gateway's lease cap.
pub fn max_connector_ttl() -> Duration {
    GrantLimits::default().max_lease_ttl()
}

/// Holds the binding `run.identity` for `run.connector` in the registry at `location`
/// (created if missing) and runs the command under a validated execution grant until it
/// ends, a stop signal arrives, or the binding's authority ends. The command is handed
/// the context file (`FLEET_CONNECTOR_CONTEXT`) and the grant's fields, never the
/// registry. One live run per binding on this host; a lease this connector left held
/// here by a run that is gone is resumed at its epoch.
pub fn run_connector(
    location: &RegistryLocation,
    run: &ConnectorRun,
) -> Result<ConnectorEnd, ConnectorError> {
    let limits = GrantLimits::default();
    // A bad policy file is refused before the registry is opened (or created).
    let policy = connector_policy(Some(&run.policy))?;
    let mut binding = Binding {
        registry: open_registry(location, OpenMode::CreateIfMissing)?,
        identity: run.identity.clone(),
        connector: &run.connector,
        scopes: run.scopes.clone(),
        ttl: run.ttl,
        policy,
        issuer: GrantIssuer::new(crate::random_key()?, limits),
        audit: AuditContext { correlation_id: None, binding: Some(binding_name(&run.identity)) },
        process: process::holder_process()
            .map_err(|e| ConnectorError::Host(format!("cannot tell which host this is: {e}")))?,
    };

    // One live run per binding on this host: a second one started beside a live first
    // is refused, never resumed into the same tenure.
    let registry_id = binding.registry.registry_id()?;
    let lease_key = binding.identity.lease_key().to_string();
    let _host_lock =
        tenure::HostLock::take(&registry_id, &lease_key, &run.connector).map_err(ConnectorError::Refused)?;
    let window = fleet_lease::ActWindow::for_ttl(binding.ttl.unsigned_abs());
    let sent = process::boot_clock();
    let mut lease = binding.hold()?;
    let context = binding.authorize()?;
    let mut act_until = sent.saturating_add(window.act);
    // A former holder paused past its lease may still have its command's tree running
    // here: nothing of it may run beside this tenure. Any tree of this same epoch is a
    // leftover of a run that is gone (the host lock says no live one holds it).
    let tenure = tenure::Tenure::new(&registry_id, &lease_key, context.fencing_epoch.get());
    let left = tenure.end_former_trees(tenure::SameEpoch::Leftover);
    if !matches!(left, Ok(0)) {
        let _ = binding.lease(ConnectorRequest::Release { holder: &lease.holder() });
        return Err(ConnectorError::Refused(match left {
            Err(superseded) => format!("cannot hold {lease_key}: {superseded}"),
            Ok(left) => {
                format!(
                    "{left} processes of a former holder's command would not end; not running beside them"
                )
            }
        }));
    }
    let dir = crate::user_file::private_dir("fleetctl-connector-").map_err(|e| {
        ConnectorError::Host(format!("cannot create a private directory for the context: {e}"))
    })?;
    let context_file = dir.path().join("context.json");
    publish(&context, &context_file)?;
    let mut kept = keeper::LeasedCommand::new(&run.program, &run.args, act_until, window.grace)
        .map_err(|e| ConnectorError::Host(format!("cannot start the command's keeper: {e}")))?;
    let command = kept.command();
    // The command acts only through its context: it is not handed the registry, whose
    // location may carry a database password.
    command
        .env_remove(crate::vars::REGISTRY)
        .env("FLEET_CONNECTOR_CONTEXT", &context_file)
        .env("FLEET_CONNECTOR_TENANT", &context.tenant_id)
        .env("FLEET_CONNECTOR_AGENT", &context.logical_agent_id)
        .env("FLEET_CONNECTOR_BINDING", &context.binding_id)
        .env("FLEET_CONNECTOR_ID", &context.connector)
        .env("FLEET_CONNECTOR_LEASE_ID", context.lease_id.as_str())
        .env("FLEET_CONNECTOR_FENCING_EPOCH", context.fencing_epoch.to_string())
        .env("FLEET_CONNECTOR_SCOPES", context.scopes.join(" "));
    tenure.mark(command);
    // A stop asked of this process (SIGTERM, SIGINT, SIGHUP) ends the command's tree
    // gracefully and releases the lease; watched from before the command starts.
    let asked = keeper::watch_stop_signals(None)
        .map_err(|e| ConnectorError::Host(format!("cannot watch stop signals: {e}")))?;
    let lapsed = || {
        ConnectorError::Refused(format!(
            "the lease of {lease_key} lapsed: no renewal committed in time; the command was stopped"
        ))
    };
    // Checked last before the command starts: a pause since the lease was taken may have
    // let it lapse.
    if process::boot_clock() >= act_until {
        return Err(lapsed());
    }
    let (mut child, mut line) = kept
        .spawn()
        .map_err(|e| ConnectorError::Command(format!("cannot run {}: {e}", run.program.to_string_lossy())))?;

    let period = fleet_lease::renew_period(binding.ttl.unsigned_abs());
    // The first renewal is due a period after the lease was secured, not after the
    // command started: the grant's round trips between them come out of the same window.
    let mut next = Instant::now() + period.saturating_sub(process::boot_clock().saturating_sub(sent));
    let outcome = loop {
        match child.try_wait() {
            // The keeper ended the command at the deadline: its authority lapsed.
            Ok(Some(status))
                if status.code() == Some(i32::from(keeper::LAPSED)) && process::boot_clock() >= act_until =>
            {
                break Err(lapsed());
            }
            Ok(Some(status)) => break Ok(status),
            Ok(None) => {}
            Err(e) => break Err(ConnectorError::Host(format!("cannot wait for the command: {e}"))),
        }
        if asked.load(Ordering::SeqCst) != 0 {
            match keeper::stop_kept(&mut child) {
                Some(status) => break Ok(status),
                None => break Err(ConnectorError::Host("cannot wait for the stopped command".into())),
            }
        }
        if process::boot_clock() >= act_until {
            keeper::stop_kept(&mut child);
            break Err(lapsed());
        }
        if Instant::now() < next {
            std::thread::sleep(StdDuration::from_millis(20));
            continue;
        }
        next = Instant::now() + period;
        // The policy is read again on every renewal: a grant withdrawn from the file stops
        // the work at the next renewal, and an unreadable policy denies.
        match connector_policy(Some(&run.policy)) {
            Ok(policy) => binding.policy = policy,
            Err(e) => {
                keeper::stop_kept(&mut child);
                break Err(e.into());
            }
        }
        let holder: Holder = lease.holder();
        let sent = process::boot_clock();
        // A renewal that cannot answer within the time the command has left is given up on.
        binding.registry.set_call_deadline(Some(act_until.saturating_sub(sent)));
        let renewed = match binding.lease(ConnectorRequest::Renew { holder: &holder, ttl: binding.ttl }) {
            // The store could not be reached this once: try again soon, on a new
            // connection. Until a renewal commits, the deadline already secured is what
            // the command acts by.
            Err(e) => {
                crate::warn(format_args!("fleet: cannot renew {lease_key}, retrying: {e}"));
                if let Ok(registry) = open_registry(location, OpenMode::MustExist) {
                    binding.registry = registry;
                }
                next = Instant::now() + period / 4;
                continue;
            }
            Ok(renewed) => renewed,
        };
        // A committed renewal extends the command's deadline at once, before the grant's
        // round trips: the lease is the authority, and a grant refused below stops the
        // command straight away.
        if let Ok(l) = &renewed {
            lease = l.clone();
            act_until = act_until.max(sent.saturating_add(window.act));
            line.extend(act_until);
        }
        let authorized = renewed.map_err(|d| refused(&binding.identity, d)).and_then(|_| binding.authorize());
        match authorized.and_then(|context| publish(&context, &context_file)) {
            Ok(()) => {}
            Err(e) => {
                // The authority is gone: the command must not act on it a moment longer.
                keeper::stop_kept(&mut child);
                break Err(e);
            }
        }
    };
    drop(dir);
    binding.registry.set_call_deadline(None);
    let status = outcome?;
    let _ = binding.lease(ConnectorRequest::Release { holder: &lease.holder() });
    match asked.load(Ordering::SeqCst) {
        0 => Ok(ConnectorEnd::Exited(status)),
        sig => Ok(ConnectorEnd::Stopped(sig)),
    }
}

/// Everything one binding needs from the store on every tick.
struct Binding<'a> {
    registry: Registry<AnyStore>,
    identity: ConnectorIdentity,
    connector: &'a str,
    scopes: Vec<String>,
    ttl: Duration,
    policy: Box<dyn ConnectorPolicy>,
    issuer: GrantIssuer,
    audit: AuditContext,
    /// This process, recorded as the tenure's holder.
    process: HolderProcess,
}

impl Binding<'_> {
    fn lease(
        &mut self,
        request: ConnectorRequest<'_>,
    ) -> Result<Result<LeaseRecord, LeaseDenial>, StoreError> {
        let limits = self.issuer.limits();
        self.registry.connector_lease(&self.identity, request, limits, self.policy.as_ref(), &self.audit)
    }

    /// Acquires the binding, taking over a lapsed or released lease at its epoch. A live
    /// lease this connector itself holds — left by a run of it on this host that ended
    /// without releasing (a SIGKILL, a crash; the host lock proves it gone) — is resumed:
    /// renewed at the same epoch, as seed 002's reconnect keeps the binding. The earlier
    /// run's command tree ended with it. One held by a run of it on another host is
    /// refused, naming that run, until it lapses: nothing here can prove that run gone.
    fn hold(&mut self) -> Result<LeaseRecord, ConnectorError> {
        let (connector, ttl, scopes) = (self.connector, self.ttl, self.scopes.clone());
        let process = self.process.clone();
        let acquire = ConnectorRequest::Acquire { connector, scopes: &scopes, ttl, process: Some(&process) };
        match self.lease(acquire)? {
            Ok(lease) => Ok(lease),
            Err(LeaseDenial::LeaseHeld) => {
                let (current, _) = self.registry.lease(&self.identity.lease_key())?;
                let Some(mine) = current.filter(|c| c.owner == connector) else {
                    return Err(refused(&self.identity, LeaseDenial::LeaseHeld));
                };
                // The run that holds this tenure may live here still, whatever lock this
                // run could take: it is never resumed beside it.
                if let Some(live) = mine.holder_process.as_ref().filter(|p| process::holder_alive_here(p)) {
                    return Err(ConnectorError::Refused(format!(
                        "cannot hold {}: {connector} already holds it in a live run on this host ({live})",
                        self.identity.lease_key()
                    )));
                }
                let resume = ConnectorRequest::Resume { holder: &mine.holder(), ttl, process: &process };
                match self.lease(resume)? {
                    Ok(lease) => Ok(lease),
                    Err(LeaseDenial::LeaseHeld) => Err(self.held_elsewhere()?),
                    Err(d) => Err(refused(&self.identity, d)),
                }
            }
            Err(LeaseDenial::TakeoverRequired) => {
                let (current, _) = self.registry.lease(&self.identity.lease_key())?;
                let expected_epoch = current.map_or(FencingEpoch::FIRST, |c| c.fencing_epoch);
                let request = ConnectorRequest::TakeOver {
                    expected_epoch,
                    connector,
                    scopes: &scopes,
                    ttl,
                    process: Some(&process),
                };
                self.lease(request)?.map_err(|d| refused(&self.identity, d))
            }
            Err(d) => Err(refused(&self.identity, d)),
        }
    }

    /// The refusal of a tenure that a run of this connector on another host holds.
    fn held_elsewhere(&mut self) -> Result<ConnectorError, StoreError> {
        let key = self.identity.lease_key();
        let (current, _) = self.registry.lease(&key)?;
        Ok(match current {
            Some(LeaseRecord { owner, expires_at, holder_process: Some(process), .. }) => {
                ConnectorError::Refused(format!(
                    "cannot hold {key}: {owner} already holds it in a live run on another host ({process}); it lapses \
                 at {expires_at} unless that run renews it"
                ))
            }
            _ => refused(&self.identity, LeaseDenial::LeaseHeld),
        })
    }

    /// Issues a grant on the stored lease and validates it against the store: the
    /// context the command may act under, or why it may not.
    fn authorize(&mut self) -> Result<ConnectorExecutionContext, ConnectorError> {
        let grant_ttl = self.ttl.min(self.issuer.limits().max_grant_ttl());
        let grant = self
            .registry
            .issue_grant(
                &self.issuer,
                &self.identity,
                self.connector,
                &self.scopes,
                grant_ttl,
                self.policy.as_ref(),
                &self.audit,
            )?
            .map_err(|d| {
                ConnectorError::Refused(format!("no grant for {}: {d}", self.identity.lease_key()))
            })?;
        self.registry
            .validate_grant(&self.issuer, &grant, &self.identity, &self.scopes, &self.audit)?
            .map_err(|d| {
                ConnectorError::Refused(format!(
                    "the grant for {} is no longer valid: {d}",
                    self.identity.lease_key()
                ))
            })
    }
}

fn refused(identity: &ConnectorIdentity, denial: LeaseDenial) -> ConnectorError {
    ConnectorError::Refused(format!("cannot hold {}: {denial}", identity.lease_key()))
}

/// Writes the context where the command reads it, replacing the file in one step.
fn publish(context: &ConnectorExecutionContext, path: &Path) -> Result<(), ConnectorError> {
    let text = serde_json::to_string_pretty(context).unwrap_or_default();
    crate::user_file::replace(path, text.as_bytes()).map_err(|e| {
        ConnectorError::Host(format!("cannot write the execution context {}: {e}", path.display()))
    })
}
