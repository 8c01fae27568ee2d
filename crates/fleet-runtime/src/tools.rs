//! The MCP tools a namespace worker serves, named once: which namespaces list each and
//! whether it only reads. The server lists and checks its tools by this table, and the
//! launcher approves the read-only ones in a client's config by it (the server's tests
//! hold its tool router to it).

use fleet_identity::Namespace;

fleet_identity::outward_codes! {
    /// One tool of a namespace worker's MCP server.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum McpTool ("tool") {
        /// The fleet's read-only snapshot.
        Snapshot = "gitea_snapshot_instance_fleet",
        /// The stale retirement plan (a dry run).
        Plan = "gitea_plan_stale_worker_retirement",
        /// The apply of a retirement plan.
        Apply = "gitea_apply_stale_worker_retirement",
        /// The calling worker's own runtime context.
        RuntimeContext = "gitea_get_runtime_context",
        /// Acquiring a workflow lease.
        AcquireLease = "gitea_acquire_workflow_lease",
        /// Renewing a workflow lease.
        RenewLease = "gitea_renew_workflow_lease",
        /// Releasing a workflow lease.
        ReleaseLease = "gitea_release_workflow_lease",
    }
}

impl McpTool {
    /// Whether the tool reads or acts on the whole fleet: listed by the controller and
    /// reconciler namespaces only.
    pub fn fleet_wide(self) -> bool {
        matches!(self, McpTool::Snapshot | McpTool::Plan | McpTool::Apply)
    }

    /// Whether the tool only reads (`readOnlyHint: true`).
    pub fn read_only(self) -> bool {
        matches!(self, McpTool::Snapshot | McpTool::Plan | McpTool::RuntimeContext)
    }

    /// Whether `namespace`'s server lists the tool.
    pub fn listed_by(self, namespace: Namespace) -> bool {
        !self.fleet_wide() || matches!(namespace, Namespace::Controller | Namespace::Reconciler)
    }

    /// The tools `namespace`'s server lists, in table order.
    pub fn listed(namespace: Namespace) -> impl Iterator<Item = McpTool> {
        McpTool::ALL.into_iter().filter(move |t| t.listed_by(namespace))
    }
}
