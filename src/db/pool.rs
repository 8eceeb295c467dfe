//! The pools and the only two ways handlers reach the database: [`Db::read`] and
//! [`Db::write`], each on a blocking thread with a pooled connection.

use std::sync::Arc;

use diesel::prelude::*;

use super::announce;
use super::connection::{AnyConnection, ConnectionManager, DbSettings, Engine};
use super::error::DbError;
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
            },
            Engine::Postgres => {
                let pool = build(settings.pool_size.max(2))?;
                Db {
                    engine,
                    writer: pool.clone(),
                    reader: pool,
                    notifier: None,
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
        run_blocking(self.reader.clone(), f).await
    }

    /// Runs `f` in one transaction on the writer connection (SQLite) or a pooled one
    /// (PostgreSQL). The wake-ups `f` records are announced to other instances inside that
    /// transaction and wake this process's waiters after it commits; a write that fails wakes
    /// no one.
    pub async fn write<T, F>(&self, f: F) -> Result<T, DbError>
    where
        F: FnOnce(&mut AnyConnection, &mut Wakes) -> QueryResult<T> + Send + 'static,
        T: Send + 'static,
    {
        let instance = self
            .notifier
            .as_ref()
            .map_or(TOOL_INSTANCE.to_owned(), |n| n.instance_id().to_owned());
        let (value, wakes) = run_blocking(self.writer.clone(), move |conn| {
            let mut wakes = Wakes::default();
            let value = match conn {
                AnyConnection::Sqlite(_) => write_immediately(conn, |c| f(c, &mut wakes))?,
                AnyConnection::Postgresql(_) => {
                    conn.transaction::<_, diesel::result::Error, _>(|c| {
                        let value = f(c, &mut wakes)?;
                        announce::announce(c, &instance, &wakes)?;
                        Ok(value)
                    })?
                }
            };
            Ok((value, wakes))
        })
        .await?;
        if let Some(notifier) = &self.notifier {
            for event in wakes.events() {
                notifier.wake(event);
            }
        }
        Ok(value)
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

/// SQLite: runs `f` in a `BEGIN IMMEDIATE` transaction, so the write lock is taken (waiting up
/// to the busy timeout) before the first read; transactions inside `f` become savepoints.
fn write_immediately<T, F>(conn: &mut AnyConnection, f: F) -> QueryResult<T>
where
    F: FnOnce(&mut AnyConnection) -> QueryResult<T>,
{
    use diesel::connection::{AnsiTransactionManager, TransactionManager};
    if let AnyConnection::Sqlite(c) = conn {
        AnsiTransactionManager::begin_transaction_sql(c, "BEGIN IMMEDIATE")?;
    }
    match f(conn) {
        Ok(value) => {
            <AnyConnection as Connection>::TransactionManager::commit_transaction(conn)?;
            Ok(value)
        }
        Err(e) => {
            let _ = <AnyConnection as Connection>::TransactionManager::rollback_transaction(conn);
            Err(e)
        }
    }
}
