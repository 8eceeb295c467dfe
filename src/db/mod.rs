//! Database access: one connection type over SQLite and PostgreSQL, pools, and migrations.
//!
//! Everything below `db::` is plain diesel: no HTTP types. Handlers reach it only through
//! [`Db::read`] and [`Db::write`], which run the closure on a blocking thread with a pooled
//! connection, so an async worker never waits on the database. A write records the wake-ups
//! it causes; [`Db::write`] announces them and wakes the waiting long-polls after the commit,
//! so no caller decides wake-ups a second time.

pub mod access;
pub mod announce;
pub mod changes;
pub mod chat_list;
pub mod cursors;
pub mod devices;
pub mod groups;
pub mod member_events;
pub mod members;
pub mod messages;
pub mod models;
pub mod raw_sql;
pub mod receipts;

use std::time::Duration;

use std::sync::Arc;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::r2d2::R2D2Connection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};

use crate::notify::Notifier;
use crate::wake::Wakes;

/// A connection to either engine. Queries written against it run on both.
#[derive(diesel::MultiConnection)]
pub enum AnyConnection {
    Postgresql(diesel::PgConnection),
    Sqlite(diesel::SqliteConnection),
}

/// Runs one diesel expression on the concrete connection inside an [`AnyConnection`], for the
/// few query shapes MultiConnection cannot express (multi-row inserts, `ON CONFLICT`).
#[macro_export]
macro_rules! on_engine {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::db::AnyConnection::Postgresql($c) => $body,
            $crate::db::AnyConnection::Sqlite($c) => $body,
        }
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// The engine is chosen from the URL scheme, never by trial: trying PostgreSQL first would
    /// hide the real reason an unreachable server failed.
    pub fn from_url(url: &str) -> Engine {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Engine::Postgres
        } else {
            Engine::Sqlite
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// No connection could be had in time, or the server is unreachable: the caller may retry.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Query(#[from] diesel::result::Error),
    #[error("database task panicked or was cancelled")]
    Task,
}

impl From<r2d2::Error> for DbError {
    fn from(e: r2d2::Error) -> Self {
        DbError::Unavailable(e.to_string())
    }
}

impl DbError {
    /// True when the database (not the request) is at fault and a retry may succeed: it is
    /// unreachable, the connection died, or it is too busy (a statement timeout, SQLite's
    /// lock held by another process past the busy timeout).
    pub fn is_unavailable(&self) -> bool {
        use diesel::result::DatabaseErrorKind as Kind;
        match self {
            DbError::Unavailable(_) => true,
            DbError::Query(diesel::result::Error::DatabaseError(kind, info)) => {
                matches!(
                    kind,
                    Kind::ClosedConnection | Kind::UnableToSendCommand | Kind::SerializationFailure
                ) || BUSY_MESSAGES.iter().any(|m| info.message().contains(m))
            }
            DbError::Query(diesel::result::Error::BrokenTransactionManager) => true,
            _ => false,
        }
    }
}

/// Messages of errors that mean "busy, try again", which diesel reports without a kind.
const BUSY_MESSAGES: [&str; 3] = [
    "database is locked",
    "canceling statement due to statement timeout",
    "canceling statement due to lock timeout",
];

pub struct ConnectionManager {
    url: String,
    engine: Engine,
    sqlite_synchronous: String,
    statement_timeout_ms: u64,
}

impl ConnectionManager {
    fn new(settings: &DbSettings) -> ConnectionManager {
        ConnectionManager {
            url: settings.url.clone(),
            engine: Engine::from_url(&settings.url),
            sqlite_synchronous: settings.sqlite_synchronous.clone(),
            statement_timeout_ms: settings.statement_timeout.as_millis() as u64,
        }
    }
}

impl r2d2::ManageConnection for ConnectionManager {
    type Connection = AnyConnection;
    type Error = diesel::ConnectionError;

    fn connect(&self) -> Result<AnyConnection, diesel::ConnectionError> {
        match self.engine {
            Engine::Postgres => {
                let mut conn = diesel::PgConnection::establish(&self.url)?;
                // Bounds every statement, so a stuck query cannot hold a request (and its
                // pooled connection) for long; it then answers 503.
                conn.batch_execute(&format!(
                    "SET statement_timeout = {}",
                    self.statement_timeout_ms
                ))
                .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(AnyConnection::Postgresql(conn))
            }
            Engine::Sqlite => {
                let mut conn = diesel::SqliteConnection::establish(&self.url)?;
                // WAL lets readers run beside the single writer; the busy timeout only matters
                // for outside tools, since Chorus itself never has two writers.
                let pragmas = format!(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; \
                     PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;",
                    self.sqlite_synchronous
                );
                conn.batch_execute(&pragmas)
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                Ok(AnyConnection::Sqlite(conn))
            }
        }
    }

    fn is_valid(&self, conn: &mut AnyConnection) -> Result<(), diesel::ConnectionError> {
        conn.batch_execute("SELECT 1")
            .map_err(diesel::ConnectionError::CouldntSetupConfiguration)
    }

    fn has_broken(&self, conn: &mut AnyConnection) -> bool {
        match conn {
            AnyConnection::Postgresql(c) => c.is_broken(),
            AnyConnection::Sqlite(c) => c.is_broken(),
        }
    }
}

pub type Pool = r2d2::Pool<ConnectionManager>;

#[derive(Clone, Debug)]
pub struct DbSettings {
    pub url: String,
    pub pool_size: u32,
    pub pool_timeout: Duration,
    pub sqlite_synchronous: String,
    pub statement_timeout: Duration,
}

impl DbSettings {
    /// Settings for one-off connections to `url` (tools, tests): the server's defaults.
    pub fn for_url(url: &str) -> DbSettings {
        DbSettings {
            url: url.to_owned(),
            pool_size: 1,
            pool_timeout: Duration::from_secs(3),
            sqlite_synchronous: "FULL".into(),
            statement_timeout: Duration::from_secs(10),
        }
    }
}

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

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// An arbitrary constant: instances starting together on one PostgreSQL take turns migrating.
const MIGRATION_LOCK_KEY: i64 = 0x4348_4f52_5553;

/// Applies pending migrations; returns how many ran.
pub fn run_migrations(conn: &mut AnyConnection) -> anyhow::Result<usize> {
    let applied = match conn {
        AnyConnection::Postgresql(c) => {
            // Migrations may wait for another instance's and may run long: the request
            // statement timeout does not apply to them.
            c.batch_execute("SET statement_timeout = 0")?;
            c.batch_execute(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK_KEY})"))?;
            let result = c
                .run_pending_migrations(POSTGRES_MIGRATIONS)
                .map(|v| v.len());
            c.batch_execute(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK_KEY})"))?;
            result
        }
        AnyConnection::Sqlite(c) => c.run_pending_migrations(SQLITE_MIGRATIONS).map(|v| v.len()),
    };
    applied.map_err(|e| anyhow::anyhow!("migration failed: {e}"))
}

/// Reverts every applied migration (used by tests that check each `down.sql`).
pub fn revert_all_migrations(conn: &mut AnyConnection) -> anyhow::Result<usize> {
    let reverted = match conn {
        AnyConnection::Postgresql(c) => c
            .revert_all_migrations(POSTGRES_MIGRATIONS)
            .map(|v| v.len()),
        AnyConnection::Sqlite(c) => c.revert_all_migrations(SQLITE_MIGRATIONS).map(|v| v.len()),
    };
    reverted.map_err(|e| anyhow::anyhow!("migration revert failed: {e}"))
}

/// True when the database answers and no migration is pending.
pub fn is_ready(conn: &mut AnyConnection) -> bool {
    let pending = match conn {
        AnyConnection::Postgresql(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
        AnyConnection::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
    };
    matches!(pending, Ok(false))
}

/// Opens a single connection outside any pool (start-up, `chorus migrate`).
pub fn connect_once(settings: &DbSettings) -> Result<AnyConnection, diesel::ConnectionError> {
    use r2d2::ManageConnection;
    ConnectionManager::new(settings).connect()
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
