//! The pools and the only two ways handlers reach the database: [`Db::read`] and
//! [`Db::write`], each on a blocking thread with a pooled connection.

use std::convert::Infallible;
use std::sync::Arc;

use diesel::prelude::*;

use super::announce;
use super::connection::{AnyConnection, ConnectionManager, DbSettings, Engine};
use super::error::DbError;
use super::storage::StorageAlarm;
use crate::notify::Notifier;
use crate::wake::Wakes;

pub type Pool = r2d2::Pool<ConnectionManager>;

/// The pools. On SQLite all writes go through one connection (a writer lane): several writer
/// connections starve each other into "database is locked", one is both faster and safe.
/// On PostgreSQL readers and writers share one pool.
#[derive(Clone)]
pub struct Db {
    engine: Engine,
    writer: Pool,
    reader: Pool,
    /// Who hears of committed writes in this process; None for tools that serve no polls.
    notifier: Option<Arc<Notifier>>,
    /// Says in the log when writes start and stop being refused for lack of space.
    storage: Arc<StorageAlarm>,
}

/// The instance name a write without a notifier announces under (tools, seeding): every
/// serving instance treats it as another instance's.
const TOOL_INSTANCE: &str = "tool";

impl Db {
    pub fn connect(settings: &DbSettings) -> Result<Db, DbError> {
        let engine = Engine::from_url(&settings.url);
        let build = |size: u32| {
            r2d2::Pool::builder()
                .max_size(size)
                .min_idle(Some(size.min(2)))
                .connection_timeout(settings.pool_timeout)
                .build(ConnectionManager::new(settings))
        };
        let db = match engine {
            Engine::Sqlite => Db {
                engine,
                writer: build(1)?,
                reader: build(settings.pool_size.max(1))?,
                notifier: None,
                storage: Arc::default(),
            },
            Engine::Postgres => {
                let pool = build(settings.pool_size.max(2))?;
                Db {
                    engine,
                    writer: pool.clone(),
                    reader: pool,
                    notifier: None,
                    storage: Arc::default(),
                }
            }
        };
        Ok(db)
    }

    /// The same database, with the waiters of this process woken after each write.
    pub fn waking(self, notifier: Arc<Notifier>) -> Db {
        Db {
            notifier: Some(notifier),
            ..self
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Runs `f` with a reader connection on a blocking thread.
    pub async fn read<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let result = run_blocking(self.reader.clone(), f).await;
        if let Err(e) = &result {
            self.storage.failed(e);
        }
        result
    }

    /// Runs `f` as one transaction on the writer connection (SQLite) or a pooled one
    /// (PostgreSQL). The wake-ups `f` records are announced to other instances inside that
    /// transaction and wake this process's waiters after it commits; a write that fails wakes
    /// no one. Writes that may be refused use [`Db::write_checked`].
    pub async fn write<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let outcome = self
            .write_checked(move |conn, wakes| f(conn, wakes).map(Ok::<T, Infallible>))
            .await?;
        match outcome {
            Ok(value) => Ok(value),
            Err(never) => match never {},
        }
    }

    /// [`Db::write`] for a write that may refuse (say, the caller is not a member): a refusal
    /// rolls back whatever the write did before it, and wakes no one.
    pub async fn write_checked<T, R, F>(&self, f: F) -> Result<Result<T, R>, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<Result<T, R>> + Send + 'static,
        T: Send + 'static,
        R: Send + 'static,
    {
        let instance = self
            .notifier
            .as_ref()
            .map_or(TOOL_INSTANCE.to_owned(), |n| n.instance_id().to_owned());
        let outcome = run_blocking(self.writer.clone(), move |conn| {
            let mut wakes = Wakes::default();
            let outcome = in_transaction(conn, |c| match f(c, &mut wakes)? {
                Ok(value) => {
                    announce::announce(c, &instance, &wakes)?;
                    Ok(Ok(value))
                }
                Err(refusal) => Ok(Err(refusal)),
            })?;
            Ok(outcome.map(|value| (value, wakes)))
        })
        .await
        .inspect_err(|e| self.storage.failed(e))?;
        if outcome.is_ok() {
            self.storage.wrote();
        }
        Ok(outcome.map(|(value, wakes)| {
            if let Some(notifier) = &self.notifier {
                for event in wakes.events() {
                    notifier.wake(event);
                }
            }
            value
        }))
    }

    /// Connections checked out and connections idle, summed over the pools.
    pub fn pool_state(&self) -> (u32, u32) {
        let w = self.writer.state();
        if self.engine == Engine::Postgres {
            return (w.connections - w.idle_connections, w.idle_connections);
        }
        let r = self.reader.state();
        (
            w.connections - w.idle_connections + r.connections - r.idle_connections,
            w.idle_connections + r.idle_connections,
        )
    }
}

async fn run_blocking<T, F>(pool: Pool, f: F) -> Result<T, DbError>
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut conn = pool.get()?;
        f(&mut conn).map_err(DbError::from)
    })
    .await
    .map_err(|_| DbError::Task)?
}

/// Runs `f` in one transaction, committed when it returns `Ok(Ok(_))` and rolled back
/// otherwise. SQLite begins with `BEGIN IMMEDIATE`, so the write lock is taken (waiting up to
/// the busy timeout) before the first read; a transaction inside `f` becomes a savepoint.
fn in_transaction<T, R, F>(conn: &mut AnyConnection, f: F) -> QueryResult<Result<T, R>>
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<Result<T, R>>,
{
    use diesel::connection::{AnsiTransactionManager, TransactionManager};
    type Manager = <AnyConnection as Connection>::TransactionManager;
    match conn {
        AnyConnection::Sqlite(c) => {
            AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")?
        }
        AnyConnection::Postgresql(_) => Manager::begin_transaction(conn)?,
    }
    match f(conn) {
        Ok(Ok(value)) => {
            Manager::commit_transaction(conn)?;
            Ok(Ok(value))
        }
        Ok(Err(refusal)) => {
            Manager::rollback_transaction(conn)?;
            Ok(Err(refusal))
        }
        Err(e) => {
            let _ = Manager::rollback_transaction(conn);
            Err(e)
        }
    }
}
