//! The MCP tools. Failures inside a tool — bad arguments, a moved registry, a denied
//! permission — are tool results with `isError: true` and a reason code a model can act
//! on; only protocol faults are JSON-RPC errors.

use std::sync::{Arc, Mutex};

use fleet_identity::{Namespace, WorkerIdentity, assess_instance_id};
use fleet_lease::{DenyAll, FencingEpoch, Holder, LeaseId, LeaseKey};
use fleet_registry::{ApplyOutcome, ApplyRequest, RegistryMatch, StoreError, WorkerRow};
use fleet_retirement::{CandidateFingerprint, RegistryFingerprint};

use fleet_runtime::{
    Fleet, InstanceEnv, JsonSnapshot, LeaseChange, LeaseError, McpTool, RegistryLocation, Taken,
    WorkerApplyRefused, now, retirement_context,
};
use fleet_snapshot::{FleetSnapshot, LiveHeartbeats, Manifest, Policy, compare_heartbeats, mutation_gate};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, JsonObject,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

mod answers;
mod bodies;
mod params;
mod summaries;

pub use answers::DEFAULT_MAX_ANSWER_BYTES;
use answers::*;
use params::*;
use summaries::*;

use crate::codes::{Refusal, RefusalCode};
use crate::pages::{ApplyAnswer, Detail, PlanPage, PlanPaging, SnapshotPage};
use crate::profiles::{Profiles, READ, RETIRE, WORKFLOW_LEASE};
use crate::schemas;
use crate::stdio::Bodies;

/// Everything a tool needs to know about this process.
#[derive(Debug)]
#[allow(missing_docs)]
pub struct Context {
    pub location: RegistryLocation,
    pub namespace: Namespace,
    pub profile: String,
    pub profiles: Profiles,
    pub env: Result<InstanceEnv, String>,
    pub registration: crate::registration::Registration,
    /// The binary this server started from: it mutates only while that is what runs.
    pub runtime: fleet_runtime::StableRuntime,
}

/// What a tool acts on: the whole fleet (controller and reconciler roles only), or only
/// this worker's own state (any role, given the capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    Fleet,
    OwnWorker,
}

/// Checks a call's arguments against the tool's parameter type, naming the argument at
/// fault, so a malformed call gets the same JSON error body as any other refusal.
pub fn check_arguments(tool: &str, arguments: Option<&JsonObject>) -> Result<(), CallToolResult> {
    fn check<T: serde::de::DeserializeOwned>(arguments: &JsonObject) -> Result<(), CallToolResult> {
        let value = Value::Object(arguments.clone());
        serde_path_to_error::deserialize::<_, T>(value).map(drop).map_err(|e| {
            let field = e.path().to_string();
            let message = e.into_inner().to_string();
            // serde names a missing or unknown field in its message, not in the path.
            let field = if field == "." {
                message.split('`').nth(1).map_or_else(String::new, str::to_owned)
            } else {
                field
            };
            refusal(Refusal::InvalidArguments, json!({ "field": field, "message": message }))
        })
    }
    let empty = JsonObject::new();
    let arguments = arguments.unwrap_or(&empty);
    match tool.parse::<McpTool>() {
        Ok(McpTool::Snapshot) => check::<SnapshotParams>(arguments),
        Ok(McpTool::Plan) => check::<PlanParams>(arguments),
        Ok(McpTool::Apply) => check::<ApplyParams>(arguments),
        Ok(McpTool::AcquireLease) => check::<LeaseAcquireParams>(arguments),
        Ok(McpTool::RenewLease | McpTool::ReleaseLease) => check::<LeaseHolderParams>(arguments),
        // No arguments; an unknown tool is rmcp's to answer.
        Ok(McpTool::RuntimeContext) | Err(_) => Ok(()),
    }
}

/// The MCP server of one namespace worker: its tools, their checks, and its [`Fleet`] session.
///
/// Serve it on a multi-threaded tokio runtime: on a PostgreSQL registry its tools read
/// the registry inside `block_in_place`, which a current-thread runtime does not allow.
#[derive(Debug, Clone)]
pub struct FleetServer {
    ctx: Arc<Context>,
    /// The registry kept open between calls, with the rows last read.
    fleet: Arc<Mutex<Fleet>>,
    /// Where large bodies go when the server runs behind [`crate::stdio::guard`].
    bodies: Option<Arc<Bodies>>,
    /// The largest structured answer this server sends (see [`DEFAULT_MAX_ANSWER_BYTES`]).
    max_answer_bytes: usize,
    /// The live heartbeats of the last snapshots this server answered, by consistency
    /// token, newest last: what `compare_to` compares with.
    recent: Arc<Mutex<Recent>>,
    /// The last summary answered, kept while the fleet stays as it was (see
    /// [`fleet_runtime::Taken`]).
    summary: Arc<Mutex<Option<KeptSummary>>>,
    tool_router: ToolRouter<Self>,
}

/// What a namespace's server says it offers: only the tools it lists.
fn instructions(namespace: Namespace) -> String {
    match namespace {
        Namespace::Controller | Namespace::Reconciler => format!(
            "Fleetward {namespace} namespace worker: fleet snapshot, stale retirement, workflow leases and the \
             runtime context."
        ),
        _ => format!("Fleetward {namespace} namespace worker: workflow leases and the runtime context."),
    }
}

impl FleetServer {
    /// The server for `ctx`, listing only the tools its namespace may call.
    pub fn new(ctx: Context) -> Self {
        let mut tool_router = Self::tool_router();
        for route in tool_router.map.values_mut() {
            route.attr.input_schema = Arc::new(schemas::plain_input(&route.attr.input_schema));
        }
        // A namespace lists only the tools its role may call: the fleet-wide tools are
        // for the controller and the reconciler.
        for tool in McpTool::ALL.into_iter().filter(|t| !t.listed_by(ctx.namespace)) {
            tool_router.disable_route(tool.as_str());
        }
        let fleet_role = McpTool::Snapshot.listed_by(ctx.namespace);
        // The roles that take snapshot after snapshot keep a pidfd per live local worker;
        // the others (a runtime context now and then) probe afresh and hold none.
        let session = Fleet::new(ctx.location.clone());
        let session = if fleet_role { session.tracking_processes() } else { session };
        let fleet = Arc::new(Mutex::new(session));
        Self {
            ctx: Arc::new(ctx),
            fleet,
            bodies: None,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            recent: Arc::default(),
            summary: Arc::default(),
            tool_router,
        }
    }

    /// This server behind a [`crate::stdio::guard`] made with `bodies`: large answers
    /// are written to bytes once and parked there for the guard to write, instead of
    /// being built as a JSON value tree for the SDK to write.
    #[must_use]
    pub fn with_bodies(mut self, bodies: Arc<Bodies>) -> Self {
        self.bodies = Some(bodies);
        self
    }

    /// This server, refusing (`answer_too_large`) any answer whose structured content
    /// is longer than `bytes`.
    #[must_use]
    pub fn with_max_answer_bytes(mut self, bytes: usize) -> Self {
        self.max_answer_bytes = bytes;
        self
    }

    /// The answer whose structured content is `body`: its JSON is written once, used as
    /// the text block while it fits within [`FULL_TEXT_LIMIT`] (else `digest` is), and
    /// parked for the guard as bytes, or built as a value tree for any other transport.
    fn answer(
        &self,
        body: &impl serde::Serialize,
        digest: impl FnOnce() -> Result<String, serde_json::Error>,
    ) -> Result<CallToolResult, CallToolResult> {
        let full = serde_json::to_vec(body).map_err(internal)?;
        self.answer_json(full, || serde_json::to_value(body), digest)
    }

    /// [`FleetServer::answer`] for a body already written as the JSON text `full`;
    /// `value` builds the same body as a value tree.
    fn answer_json(
        &self,
        full: Vec<u8>,
        value: impl FnOnce() -> Result<Value, serde_json::Error>,
        digest: impl FnOnce() -> Result<String, serde_json::Error>,
    ) -> Result<CallToolResult, CallToolResult> {
        if full.len() > self.max_answer_bytes {
            return Err(too_large(full.len(), self.max_answer_bytes));
        }
        let text = if full.len() <= FULL_TEXT_LIMIT {
            String::from_utf8(full.clone()).map_err(|e| refuse(Refusal::InternalError, e))?
        } else {
            digest().map_err(internal)?
        };
        let structured = match &self.bodies {
            Some(bodies) => bodies.park(full),
            None => value().map_err(internal)?,
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
        result.structured_content = Some(structured);
        Ok(result)
    }

    /// The answer for a snapshot written as the JSON text `full`; past the limit its
    /// text is [`digest`].
    fn snapshot_answer(
        &self,
        snap: &FleetSnapshot<'_>,
        full: Vec<u8>,
    ) -> Result<CallToolResult, CallToolResult> {
        self.answer_json(full, || serde_json::to_value(snap), || digest(snap))
    }

    /// The fleet now judged by `policy`, handed to `read` (see [`Fleet`]: rows re-read
    /// only when the store moved, worker JSON kept from the last snapshot written).
    fn with_snapshot_under<T>(
        &self,
        manifest: Option<&Manifest>,
        policy: &Policy,
        read: impl FnOnce(&mut JsonSnapshot<'_>) -> T,
    ) -> Result<T, StoreError> {
        Ok(read(&mut self.fleet().json_snapshot(manifest, policy, now())?))
    }

    /// Refuses an argument the tool's input schema does not name: passed, it would be
    /// ignored, and a caller would believe it had been applied.
    fn unknown_argument(&self, tool: &str, arguments: Option<&JsonObject>) -> Result<(), CallToolResult> {
        let known = self.tool_router.get(tool).and_then(|t| t.input_schema.get("properties")?.as_object());
        match arguments.into_iter().flat_map(|a| a.keys()).find(|k| known.is_none_or(|p| !p.contains_key(*k)))
        {
            Some(unknown) => Err(invalid(unknown, format!("{tool} takes no argument {unknown:?}"))),
            None => Ok(()),
        }
    }

    /// One event per refused call: the tool, this server's namespace and worker, the
    /// code, and the detail's fields (each a field of the event, so a JSON log line
    /// carries them as values, not as one string).
    fn log_refusal(&self, tool: &str, result: &CallToolResult) {
        let body = result.structured_content.as_ref();
        let code = body.and_then(|b| b["error"].as_str()).unwrap_or_default();
        let detail = body.map(|b| &b["detail"]);
        let field = |name: &str| detail.and_then(|d| d[name].as_str()).unwrap_or_default().to_owned();
        let worker = self.ctx.registration.row().ok().map(|r| r.worker_identity.to_string());
        tracing::info!(
            tool,
            namespace = %self.ctx.namespace,
            worker = worker.as_deref(),
            error = code,
            detail.field = field("field"),
            detail.message = field("message"),
            detail.outcome = field("outcome"),
            "tool call refused"
        );
    }

    /// Resolves this process's profile now and checks `operation` and the fleet role.
    fn authorize(&self, operation: &str, reach: Reach) -> Result<(), CallToolResult> {
        let profile = self
            .ctx
            .profiles
            .resolve(&self.ctx.profile)
            .map_err(|e| refuse(Refusal::ProfileUnresolvable, e))?;
        if !profile.fits(self.ctx.namespace) {
            return Err(refuse(
                Refusal::RoleMismatch,
                format!(
                    "profile {:?} is for the {} role, but this server is the {} namespace",
                    self.ctx.profile, profile.role, self.ctx.namespace
                ),
            ));
        }
        if !profile.allows(operation) {
            return Err(refuse(
                Refusal::PermissionDenied,
                format!("profile {:?} does not hold {operation}", self.ctx.profile),
            ));
        }
        if reach == Reach::Fleet && !profile.fleet_role() {
            return Err(refuse(
                Refusal::RoleDenied,
                format!("the {} role may not use fleet tools; controller and reconciler may", profile.role),
            ));
        }
        Ok(())
    }

    fn me(&self) -> Result<WorkerRow, CallToolResult> {
        let registration = &self.ctx.registration;
        registration.row().map_err(|e| {
            let code = if registration.is_pending() {
                Refusal::RegistrationPending
            } else {
                Refusal::WorkerNotRegistered
            };
            refuse(code, e)
        })
    }

    /// Runs a tool's body, which reads or writes the registry with blocking calls. The
    /// PostgreSQL client drives a runtime of its own, which cannot start on a thread that
    /// is driving this one (it panicked there, and the call was never answered): on
    /// PostgreSQL the body runs in `block_in_place`, with this worker's other tasks handed
    /// to another thread meanwhile. A SQLite call blocks on nothing of the kind and is
    /// short; handing the worker over on every call put 20-30 ms spikes into the p99 of
    /// a snapshot call, so it runs in place.
    fn blocking<T>(&self, work: impl FnOnce() -> T) -> T {
        match self.ctx.location {
            RegistryLocation::Postgres(_) => tokio::task::block_in_place(work),
            RegistryLocation::Sqlite(_) => work(),
        }
    }

    /// The fleet session this server keeps. A panic elsewhere while the lock was held
    /// leaves nothing half-written that a read could trust: the session re-checks the
    /// store's marker on every read.
    fn fleet(&self) -> std::sync::MutexGuard<'_, Fleet> {
        self.fleet.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[tool_router]
impl FleetServer {
    /// Read-only snapshot of the instance fleet: live instances, their five namespace
    /// workers, and every active blocker with its evidence. Controller and reconciler only.
    #[tool(output_schema = schemas::snapshot(), annotations(
        read_only_hint = true,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn gitea_snapshot_instance_fleet(
        &self,
        Parameters(p): Parameters<SnapshotParams>,
    ) -> CallToolResult {
        self.blocking(|| {
            self.authorize(READ, Reach::Fleet)?;
            let manifest =
                p.expected_manifest.map(|m| Manifest::from_json(&m.to_string())).transpose().map_err(
                    |e| {
                        refusal(
                            Refusal::InvalidManifest,
                            json!({ "field": "expected_manifest", "message": e.to_string() }),
                        )
                    },
                )?;
            let page = SnapshotPage::new(
                p.detail,
                p.instance,
                p.namespace.as_deref(),
                p.finding_code.as_deref(),
                p.limit,
                p.cursor.as_deref(),
            )
            .map_err(|(field, message)| invalid(field, message))?;
            let own = self.ctx.env.as_ref().ok().map(|e| e.instance.as_str());
            let policy = Policy {
                canonical_repository: p
                    .canonical_repository
                    .map(fleet_identity::Repository::new)
                    .transpose()
                    .map_err(|e| invalid("canonical_repository", e))?,
                expected_code_revision: None,
            };
            if page.is_none() && p.compare_to.is_some() {
                return Err(invalid(
                    "compare_to",
                    "compare_to is answered in a summary; leave out detail \"full\"",
                ));
            }
            match page {
                Some(page) => self.summary(page, own, manifest.as_ref(), &policy, p.compare_to.as_deref()),
                None => self
                    .with_snapshot_under(manifest.as_ref(), &policy, |taken| {
                        let mut full = Vec::new();
                        taken.write_json(&mut full).map_err(internal)?;
                        let token = taken.snapshot.consistency_token.clone();
                        self.remember(token, LiveHeartbeats::of(&taken.snapshot));
                        self.snapshot_answer(&taken.snapshot, full)
                    })
                    .map_err(|e| refuse(Refusal::RegistryUnavailable, e))?,
            }
        })
        .unwrap_or_else(|refusal| refusal)
    }

    /// Dry-run plan of stale worker retirement: candidates, preserved rows with reasons,
    /// and the fingerprints apply needs. Writes nothing. Controller and reconciler only.
    #[tool(output_schema = schemas::plan(), annotations(
        read_only_hint = true,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn gitea_plan_stale_worker_retirement(
        &self,
        Parameters(p): Parameters<PlanParams>,
    ) -> CallToolResult {
        self.blocking(|| {
            self.authorize(READ, Reach::Fleet)?;
            let ctx = context(p.canonical_repository.as_deref())?;
            let paging = PlanPaging {
                limit: p.limit,
                cursor: p.cursor.as_deref(),
                candidate_limit: p.candidate_limit,
                candidate_cursor: p.candidate_cursor.as_deref(),
            };
            let page = PlanPage::new(p.detail, paging).map_err(|(field, message)| invalid(field, message))?;
            let audit = p.audit.checked()?;
            let plan = self.fleet().plan(&ctx).map_err(|e| refuse(Refusal::RegistryUnavailable, e))?;
            match page {
                Some(page) => {
                    let body = page.body(&plan, &audit).map_err(internal)?;
                    self.answer(&body, || plan_digest(&plan))
                }
                None => {
                    self.answer(&PlanWithAudit { plan: &plan, audit_context: &audit }, || plan_digest(&plan))
                }
            }
        })
        .unwrap_or_else(|refusal| refusal)
    }

    /// Retire the planned stale workers, compare-and-swap protected: refused unless the
    /// registry and candidate set are exactly as planned. Requires
    /// gitea.worker_registry.retire, which no profile holds by default.
    #[tool(output_schema = schemas::apply(), annotations(
        read_only_hint = false,
        destructive_hint = true,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn gitea_apply_stale_worker_retirement(
        &self,
        Parameters(p): Parameters<ApplyParams>,
    ) -> CallToolResult {
        finish(self.blocking(|| self.apply_body(p)))
    }

    /// This process's identities, registration and mutation gate verdict (single-process
    /// view, not fleet-wide).
    #[tool(output_schema = schemas::runtime_context(), annotations(
        read_only_hint = true,
        destructive_hint = false,
        idempotent_hint = true,
        open_world_hint = false
    ))]
    async fn gitea_get_runtime_context(&self) -> CallToolResult {
        self.blocking(|| self.runtime_context())
    }

    /// Acquire the workflow lease workflow:NAME for this worker. While it is live, stale
    /// retirement never touches this worker.
    #[tool(output_schema = schemas::lease(), annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn gitea_acquire_workflow_lease(
        &self,
        Parameters(p): Parameters<LeaseAcquireParams>,
    ) -> CallToolResult {
        finish(self.blocking(|| {
            self.authorize(WORKFLOW_LEASE, Reach::OwnWorker)?;
            let owner = self.me()?.worker_identity.to_string();
            let (key, ttl) = (Self::lease_key(&p.workflow)?, ttl(p.ttl_s)?);
            let change = LeaseChange::Acquire { owner: &owner, ttl, scopes: &[] };
            Self::lease_result(self.fleet().change_lease(&key, change, &DenyAll, None))
        }))
    }

    /// Renew this worker's workflow lease; refused with stale_epoch once taken over.
    #[tool(output_schema = schemas::lease(), annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn gitea_renew_workflow_lease(
        &self,
        Parameters(p): Parameters<LeaseHolderParams>,
    ) -> CallToolResult {
        finish(self.blocking(|| {
            self.authorize(WORKFLOW_LEASE, Reach::OwnWorker)?;
            let (key, holder, ttl) = (Self::lease_key(&p.workflow)?, self.holder(&p)?, ttl(p.ttl_s)?);
            let change = LeaseChange::Renew { holder: &holder, ttl: Some(ttl) };
            Self::lease_result(self.fleet().change_lease(&key, change, &DenyAll, None))
        }))
    }

    /// Release this worker's workflow lease.
    #[tool(output_schema = schemas::lease(), annotations(
        read_only_hint = false,
        destructive_hint = false,
        idempotent_hint = false,
        open_world_hint = false
    ))]
    async fn gitea_release_workflow_lease(
        &self,
        Parameters(p): Parameters<LeaseHolderParams>,
    ) -> CallToolResult {
        finish(self.blocking(|| {
            self.authorize(WORKFLOW_LEASE, Reach::OwnWorker)?;
            let (key, holder) = (Self::lease_key(&p.workflow)?, self.holder(&p)?);
            let change = LeaseChange::Release { holder: &holder };
            Self::lease_result(self.fleet().change_lease(&key, change, &DenyAll, None))
        }))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for FleetServer {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if self.tool_router.has_route(&request.name)
            && !self.tool_router.is_disabled(&request.name)
            && let Err(refusal) = self
                .unknown_argument(&request.name, request.arguments.as_ref())
                .and_then(|()| check_arguments(&request.name, request.arguments.as_ref()))
        {
            self.log_refusal(&request.name, &refusal);
            return Ok(refusal.into());
        }
        let tool = request.name.clone();
        let call = ToolCallContext::new(self, request, context);
        let answered = self.tool_router.call(call).await;
        if let Ok(CallToolResponse::Complete(result)) = &answered
            && result.is_error == Some(true)
        {
            self.log_refusal(&tool, result);
        }
        answered
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("fleet-mcp", env!("CARGO_PKG_VERSION")))
            .with_instructions(instructions(self.ctx.namespace))
    }
}

#[cfg(test)]
mod tests;
