//! Opening a session: connecting within a deadline, the timeouts every session runs
//! under, and what the database holds (the schema version, the registry's id).

use fleet_registry::{StoreError, StoreErrorKind};

use crate::bounded::{self, Client};
use crate::map_error;

/// How long a statement waits for a lock another session holds, and how long any
/// statement may run, unless the connection string sets its own (`options=-c …`): a
/// stalled writer makes others fail busy, never hang.
///
/// A session idle inside a transaction is ended by the server after
/// `idle_in_transaction_session_timeout`: [`WRITE_IDLE_TIMEOUT`] inside a write, shorter
/// than the lock timeout, so a client lost mid-write (a partition, a paused process)
/// cannot hold the write lock longer than that and other writers wait, at most, for it
/// to lapse and then go on; as long as a statement may run inside a read, which holds no
/// lock a writer waits on, so a client that decodes a large read slowly (a starved
/// process on a busy host) is not cut off mid-read.
const DEFAULT_TIMEOUTS: [(&str, &str); 3] =
    [("lock_timeout", "10s"), ("statement_timeout", "60s"), ("idle_in_transaction_session_timeout", "60s")];

/// How long a write transaction may sit idle before the server ends it, set inside each
/// write unless the connection string sets its own idle timeout (then that one holds for
/// reads and writes alike).
pub(crate) const WRITE_IDLE_TIMEOUT: &str = "5s";

/// The session's timeouts as [`open_session`] left them.
pub(crate) struct Timeouts {
    /// `statement_timeout` in effect, as `SHOW` prints it.
    pub(crate) statement: String,
    /// Whether each of [`DEFAULT_TIMEOUTS`] is this crate's default (the session had none
    /// of its own), in that order.
    pub(crate) defaulted: [bool; 3],
}

impl Timeouts {
    /// The settings each write transaction sets for itself (`set_config(…, true)`): the
    /// defaults again, so a write keeps its bounds on whatever server session runs it
    /// (a pooler in transaction mode hands each transaction any of its sessions), and a
    /// shorter idle bound inside a write. Settings the connection string chose are left
    /// to the session.
    pub(crate) fn for_writes(&self) -> Vec<(&'static str, &'static str)> {
        DEFAULT_TIMEOUTS
            .iter()
            .zip(self.defaulted)
            .filter(|(_, defaulted)| *defaulted)
            .map(|((name, value), _)| match *name {
                "idle_in_transaction_session_timeout" => (*name, WRITE_IDLE_TIMEOUT),
                _ => (*name, *value),
            })
            .collect()
    }
}

/// What a new session found: its timeouts, and the schema version and registry id the
/// database holds (0 and none when there is no schema yet).
pub(crate) struct Opened {
    pub(crate) timeouts: Timeouts,
    pub(crate) version: i64,
    pub(crate) registry_id: Option<String>,
}

/// Opens the session in two round trips of the simple protocol (no statement prepared):
/// the first sets each of [`DEFAULT_TIMEOUTS`] the session has not set (at 0) in the
/// statement that reads them, enters `schema` when given (created if missing), and asks
/// which of the registry's tables exist; the second reads the schema version and the
/// registry's id from those that do. Nothing is written when the settings are set and
/// the schema exists, so a read-only role opens a registry.
fn open_session(client: &mut Client, schema: Option<&str>) -> Result<Opened, StoreError> {
    let settings = DEFAULT_TIMEOUTS
        .iter()
        .map(|(name, value)| {
            format!("CASE WHEN {name} = '0' THEN set_config('{name}', '{value}', false) ELSE {name} END")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let read = DEFAULT_TIMEOUTS
        .iter()
        .map(|(name, _)| format!("current_setting('{name}') AS {name}"))
        .collect::<Vec<_>>()
        .join(", ");
    let defaulted =
        DEFAULT_TIMEOUTS.iter().map(|(name, _)| format!("{name} = '0'")).collect::<Vec<_>>().join(", ");
    // OFFSET 0 keeps the settings read before any is set.
    let mut sql = format!("SELECT {settings}, {defaulted} FROM (SELECT {read} OFFSET 0) AS session;");
    if let Some(schema) = schema {
        sql.push_str(&format!("CREATE SCHEMA IF NOT EXISTS {schema}; SET search_path TO {schema};"));
    }
    sql.push_str(
        "SELECT to_regclass('fleet_schema_version') IS NOT NULL, to_regclass('registry_identity') IS NOT NULL",
    );
    let answers = text_rows(client.simple_query(&sql).map_err(map_error)?);
    let [session, tables] = [answers.first(), answers.last()].map(|row| row.cloned().unwrap_or_default());
    let text = |row: &[Option<String>], i: usize| row.get(i).cloned().flatten().unwrap_or_default();
    let timeouts =
        Timeouts { statement: text(&session, 1), defaulted: [3, 4, 5].map(|i| text(&session, i) == "t") };
    let (has_version, has_identity) = (text(&tables, 0) == "t", text(&tables, 1) == "t");
    if !has_version {
        return Ok(Opened { timeouts, version: 0, registry_id: None });
    }
    let sql = if has_identity {
        "SELECT (SELECT version FROM fleet_schema_version LIMIT 1), \
         (SELECT registry_id FROM registry_identity WHERE id = 1)"
    } else {
        "SELECT (SELECT version FROM fleet_schema_version LIMIT 1), NULL"
    };
    let stored = text_rows(client.simple_query(sql).map_err(map_error)?).pop().unwrap_or_default();
    let version = match stored.first().cloned().flatten() {
        None => 0,
        Some(v) => v.parse().map_err(|_| {
            StoreError::corrupt(format!("the registry's schema version {v:?} is not a number"))
        })?,
    };
    Ok(Opened { timeouts, version, registry_id: stored.get(1).cloned().flatten() })
}

/// The rows of a simple query's answers, each value as text (none for NULL).
pub(crate) fn text_rows(messages: Vec<tokio_postgres::SimpleQueryMessage>) -> Vec<Vec<Option<String>>> {
    messages
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => {
                Some((0..row.len()).map(|i| row.get(i).map(str::to_owned)).collect())
            }
            _ => None,
        })
        .collect()
}

/// How long connecting may take, TLS and the server's startup answer included, unless
/// the connection string sets `connect_timeout`.
pub const CONNECT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// How much longer than the session's `statement_timeout` the client waits for any one
/// answer: the server cancels a slow statement itself and says so within that time,
/// so only a server that has stopped answering is given up on.
pub const ANSWER_MARGIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects and sets the default timeouts, giving up after the connection string's
/// `connect_timeout` (else [`CONNECT_DEADLINE`]): the driver bounds only the TCP connect
/// by `connect_timeout`, and a server that accepts and then never answers (a stalled
/// host, a port that swallows bytes, a TLS handshake that never completes) would hold
/// the caller forever. From then on each round trip waits at most the session's
/// `statement_timeout` plus [`ANSWER_MARGIN`].
pub(crate) fn connect_within(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    schema: Option<&str>,
) -> Result<(Client, Opened), StoreError> {
    let deadline = config.get_connect_timeout().copied().unwrap_or(CONNECT_DEADLINE);
    let mut client = Client::connect(config, tls, deadline).map_err(|e| match e {
        bounded::Error::NoAnswer(_) => StoreError::new(
            StoreErrorKind::Unavailable,
            format!(
                "cannot connect to the PostgreSQL registry: the server did not answer within {} s",
                deadline.as_secs_f64()
            ),
        ),
        e => {
            let e = map_error(e);
            StoreError::new(
                StoreErrorKind::Unavailable,
                format!("cannot connect to the PostgreSQL registry: {}", fleet_registry::with_causes(&e)),
            )
        }
    })?;
    let opened = open_session(&mut client, schema)?;
    client.set_deadline(answer_deadline(&opened.timeouts.statement));
    Ok((client, opened))
}

/// The longest the client waits for one answer, given `SHOW statement_timeout`'s text
/// (a number and a unit, `ms` when none): that plus [`ANSWER_MARGIN`]. A value this
/// cannot read is taken as the default's 60 s.
fn answer_deadline(statement_timeout: &str) -> std::time::Duration {
    let text = statement_timeout.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let millis_per = match unit.trim() {
        "" | "ms" => Some(1),
        "s" => Some(1_000),
        "min" => Some(60_000),
        "h" => Some(3_600_000),
        "d" => Some(86_400_000),
        _ => None,
    };
    let millis = number.parse::<u64>().ok().zip(millis_per).map(|(n, per)| n.saturating_mul(per));
    std::time::Duration::from_millis(millis.filter(|m| *m > 0).unwrap_or(60_000)) + ANSWER_MARGIN
}
