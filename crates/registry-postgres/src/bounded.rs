//! A blocking PostgreSQL client in which every round trip has a deadline.
//!
//! `postgres`' blocking client waits for the server's answer for as long as it takes: a
//! server process that stops answering while its host's kernel still acknowledges the
//! bytes (stopped with SIGSTOP, wedged in I/O) holds the caller forever, and neither TCP
//! keepalives nor `tcp_user_timeout` notice, since the peer's kernel answers them. This
//! client drives `tokio-postgres` on a runtime of its own, as `postgres` does — the
//! connection polled in the same task as the request, so an answer wakes nothing else —
//! and bounds each wait with a timer. A connection whose server missed a deadline is
//! never used again: the answer may still arrive, and the next statement would read it.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::TryStreamExt;
use tokio::runtime::Runtime;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{IsolationLevel, Row, SimpleQueryMessage, ToStatement};

/// Why a round trip failed.
#[derive(Debug)]
pub(crate) enum Error {
    /// The server or the driver said so.
    Pg(tokio_postgres::Error),
    /// The server did not answer within the deadline; the connection is abandoned.
    NoAnswer(Duration),
    /// An earlier round trip on this connection missed its deadline.
    Abandoned,
    /// The runtime that drives the connection could not be made.
    Runtime(std::io::Error),
}

impl Error {
    /// The server's own error, when it sent one.
    pub(crate) fn as_db_error(&self) -> Option<&tokio_postgres::error::DbError> {
        match self {
            Self::Pg(e) => e.as_db_error(),
            _ => None,
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Pg(e)
    }
}

/// The connection's side of the wire: the future that moves its messages, until it ends.
type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// The runtime and the connection it drives.
struct Wire {
    runtime: Runtime,
    connection: Option<Driver>,
}

/// Runs `work` on the wire's runtime, polling the connection in the same task, and
/// gives up after `deadline`.
fn within<T>(
    wire: &mut Wire,
    deadline: Duration,
    abandoned: &mut bool,
    work: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, Error> {
    if *abandoned {
        return Err(Error::Abandoned);
    }
    let Wire { runtime, connection } = wire;
    let answer = runtime.block_on(async {
        let mut work = std::pin::pin!(tokio::time::timeout(deadline, work));
        std::future::poll_fn(|cx| {
            // The request is queued first, the connection then sends it and reads the
            // answer, and the request takes it. A connection that ended (the server
            // went) leaves the request to fail on its closed channel.
            if let Poll::Ready(answer) = work.as_mut().poll(cx) {
                return Poll::Ready(answer);
            }
            if let Some(driver) = connection.as_mut()
                && driver.as_mut().poll(cx).is_ready()
            {
                *connection = None;
            }
            work.as_mut().poll(cx)
        })
        .await
    });
    match answer {
        Ok(answer) => answer.map_err(Error::Pg),
        Err(_) => {
            *abandoned = true;
            Err(Error::NoAnswer(deadline))
        }
    }
}

/// A connection, its runtime and the deadline of each round trip.
pub(crate) struct Client {
    wire: Wire,
    client: tokio_postgres::Client,
    deadline: Duration,
    abandoned: bool,
}

impl Client {
    /// Connects with `config` and `tls`, the whole handshake bounded by `deadline`, and
    /// bounds each later round trip by `deadline` too.
    pub(crate) fn connect<T>(
        config: &tokio_postgres::Config,
        tls: T,
        deadline: Duration,
    ) -> Result<Self, Error>
    where
        T: tokio_postgres::tls::MakeTlsConnect<tokio_postgres::Socket> + 'static + Send,
        T::Stream: Send,
        T::TlsConnect: Send,
        <T::TlsConnect as tokio_postgres::tls::TlsConnect<tokio_postgres::Socket>>::Future: Send,
    {
        let runtime =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(Error::Runtime)?;
        let mut wire = Wire { runtime, connection: None };
        let mut abandoned = false;
        let (client, connection) = within(&mut wire, deadline, &mut abandoned, config.connect(tls))?;
        // The connection's messages move only while this thread waits in `block_on`,
        // which is whenever the client waits for an answer.
        wire.connection = Some(Box::pin(connection));
        Ok(Self { wire, client, deadline, abandoned })
    }

    /// The deadline of each round trip.
    pub(crate) fn set_deadline(&mut self, deadline: Duration) {
        self.deadline = deadline;
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    #[cfg(test)]
    pub(crate) fn query_one<S: ToStatement + ?Sized>(
        &mut self,
        sql: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        within(&mut self.wire, self.deadline, &mut self.abandoned, self.client.query_one(sql, params))
    }

    /// One statement outside any transaction, as an unnamed statement in one round trip
    /// (Parse, Bind, Execute, Sync): nothing of it outlives it on the server session, so
    /// it runs through a pooler in transaction mode, which may hand each statement
    /// another session.
    pub(crate) fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        within(&mut self.wire, self.deadline, &mut self.abandoned, self.client.query_typed(sql, params))
    }

    /// Runs `sql` (one or more statements, no parameters) in one round trip, the simple
    /// query protocol: each row's values come back as text.
    pub(crate) fn simple_query(&mut self, sql: &str) -> Result<Vec<SimpleQueryMessage>, Error> {
        within(&mut self.wire, self.deadline, &mut self.abandoned, self.client.simple_query(sql))
    }

    /// Begins a transaction at `isolation`, read-only when asked.
    pub(crate) fn transaction(
        &mut self,
        isolation: IsolationLevel,
        read_only: bool,
    ) -> Result<Transaction<'_>, Error> {
        let Self { wire, client, deadline, abandoned } = self;
        let start = client.build_transaction().isolation_level(isolation).read_only(read_only).start();
        let tx = within(wire, *deadline, abandoned, start)?;
        Ok(Transaction { wire, tx: Some(tx), deadline: *deadline, abandoned })
    }
}

/// An open transaction; dropped without [`Transaction::commit`], it is rolled back then
/// and there (the connection moves only while this thread waits on it, so a rollback
/// left queued would keep the transaction, and any lock it holds, open on the server).
pub(crate) struct Transaction<'a> {
    wire: &'a mut Wire,
    /// Taken by `commit`.
    tx: Option<tokio_postgres::Transaction<'a>>,
    deadline: Duration,
    abandoned: &'a mut bool,
}

impl<'a> Transaction<'a> {
    pub(crate) fn query<S: ToStatement + ?Sized>(
        &mut self,
        sql: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        self.run(|tx| tx.query(sql, params))
    }

    /// Runs `sql` (no parameters) in one round trip, with no statement prepared first,
    /// and maps each row with `f` as it arrives: the server sends the next rows while
    /// this thread maps the last, and no row is kept once mapped. After the first row
    /// `f` refuses, the rest are read and dropped, and that refusal is the answer.
    pub(crate) fn query_map<T, E>(
        &mut self,
        sql: &str,
        mut f: impl FnMut(&Row) -> Result<T, E>,
    ) -> Result<Result<Vec<T>, E>, Error> {
        self.run(|tx| async move {
            let rows = tx.query_typed_raw(sql, std::iter::empty::<(&(dyn ToSql + Sync), Type)>()).await?;
            let mut rows = std::pin::pin!(rows);
            let mut mapped = Ok(Vec::new());
            while let Some(row) = rows.try_next().await? {
                if let Ok(values) = &mut mapped {
                    match f(&row) {
                        Ok(value) => values.push(value),
                        Err(e) => mapped = Err(e),
                    }
                }
            }
            Ok(mapped)
        })
    }

    pub(crate) fn query_one<S: ToStatement + ?Sized>(
        &mut self,
        sql: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        self.run(|tx| tx.query_one(sql, params))
    }

    pub(crate) fn query_opt<S: ToStatement + ?Sized>(
        &mut self,
        sql: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, Error> {
        self.run(|tx| tx.query_opt(sql, params))
    }

    pub(crate) fn execute<S: ToStatement + ?Sized>(
        &mut self,
        sql: &S,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, Error> {
        self.run(|tx| tx.execute(sql, params))
    }

    pub(crate) fn batch_execute(&mut self, sql: &str) -> Result<(), Error> {
        self.run(|tx| tx.batch_execute(sql))
    }

    pub(crate) fn commit(mut self) -> Result<(), Error> {
        let tx = self.tx.take().ok_or(Error::Abandoned)?;
        within(self.wire, self.deadline, self.abandoned, tx.commit())
    }

    /// Runs one round trip of the open transaction within the deadline.
    fn run<'s, T, F>(
        &'s mut self,
        work: impl FnOnce(&'s tokio_postgres::Transaction<'a>) -> F,
    ) -> Result<T, Error>
    where
        F: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        let Self { wire, tx, deadline, abandoned } = self;
        let tx = tx.as_ref().ok_or(Error::Abandoned)?;
        within(wire, *deadline, abandoned, work(tx))
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            // A failed rollback leaves the connection abandoned or closed; the server
            // ends the transaction when the connection goes.
            let _ = within(self.wire, self.deadline, self.abandoned, tx.rollback());
        }
    }
}
