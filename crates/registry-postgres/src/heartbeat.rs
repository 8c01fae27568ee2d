//! The heartbeat statement, the registry's hot path on PostgreSQL.

/// The heartbeat. Its transaction (the statement's own) commits with
/// `synchronous_commit = off`, set for that transaction alone, as SQLite's heartbeats
/// commit under `synchronous = NORMAL`: the server answers once the commit is in its
/// log buffer and flushes it within a few `wal_writer_delay`s, so a server crash may
/// drop the last heartbeats (never an earlier write, never a later durable one, which
/// flushes the log up to itself). A heartbeat is evidence of life renewed every third of
/// the TTL, and one lost makes its row look older, never younger: a stale mark that a
/// live worker's next heartbeat undoes, never a retirement, which needs proof that the
/// process is gone. Registrations, retirements and leases commit durably as before.
/// A heartbeat from a host or boot an operator fenced matches no row
/// (`fleet_registry::columns::unfenced_sql`).
pub(crate) static HEARTBEAT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "UPDATE worker_registrations SET last_heartbeat_at = $1, ownership_state = $5 \
         FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed \
         WHERE worker_identity = $2 AND generation_id = $3 AND token_fingerprint = $4 AND status = 'active' \
         AND {} RETURNING 1",
        fleet_registry::columns::unfenced_sql("worker_registrations.host_id", "worker_registrations.boot_id")
    )
});

#[cfg(test)]
mod tests {
    use fleet_identity::{GenerationId, Namespace};
    use fleet_registry::conformance::{ScriptedProbe, at, process, registration};
    use fleet_registry::{Registry, WorkerCredential, WorkerToken};
    use tokio_postgres::IsolationLevel;

    use super::HEARTBEAT;
    use crate::PostgresStore;

    /// The heartbeat's own transaction commits unflushed, and the session's later
    /// writes (registrations, leases) stay durable: the setting is the transaction's.
    #[test]
    fn a_heartbeat_commits_unflushed_and_the_session_stays_durable() {
        let Some(url) = std::env::var("FLEET_TEST_POSTGRES_URL").ok().filter(|u| !u.is_empty()) else {
            eprintln!("skipped: FLEET_TEST_POSTGRES_URL is not set");
            return;
        };
        let schema = format!("fleet_test_{}", uuid::Uuid::now_v7().simple());
        let store = PostgresStore::connect_in_schema(&url, Some(&schema)).expect("connect");
        let mut registry = Registry::new(store);
        let reg = registration(Namespace::Author, process(100, 5000), "gen-a");
        let token = WorkerToken::from_bytes([7; 32]);
        let row = registry.register(&reg, &token, at(0), &ScriptedProbe::default()).expect("register").row;
        let who = WorkerCredential {
            worker_identity: row.worker_identity.clone(),
            generation_id: GenerationId::new("gen-a").expect("valid"),
            token,
        };
        registry.heartbeat(&who, at(1)).expect("heartbeat");
        let mut store = registry.into_store();
        let setting = |client: &mut crate::bounded::Client| -> String {
            client.query_one("SHOW synchronous_commit", &[]).expect("show").get(0)
        };
        assert_eq!(setting(&mut store.client), "on", "a heartbeat left the session unflushed");

        // Inside a transaction of its own the statement's setting can be seen before the
        // commit; rolled back, it leaves nothing behind.
        let beat = at(2).to_string();
        let mut tx = store.client.transaction(IsolationLevel::ReadCommitted, false).expect("begin");
        let matched = tx
            .execute(
                &*HEARTBEAT,
                &[
                    &beat,
                    &who.worker_identity.as_str(),
                    &who.generation_id.as_str(),
                    &who.token.fingerprint(),
                    &"owned",
                ],
            )
            .expect("heartbeat");
        assert_eq!(matched, 1);
        let inside: String = tx.query_one("SHOW synchronous_commit", &[]).expect("show").get(0);
        assert_eq!(inside, "off", "the heartbeat's transaction waits for the log flush");
        drop(tx);
        assert_eq!(setting(&mut store.client), "on");

        drop(store);
        let mut admin = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE")).expect("drop");
    }
}
