//! One connection type over both engines, the engine chosen from the URL, and how each
//! connection is set up (PostgreSQL's statement timeout, SQLite's WAL and durability).

use std::time::Duration;

use diesel::connection::SimpleConnection;
use diesel::prelude::*;

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SqliteSync {
    /// Every commit reaches the disk before the client hears 2xx (survives power loss).
    Full,
    /// Commits survive a process crash; the last ones may be lost on power loss. Faster.
    Normal,
}

impl SqliteSync {
    /// The value of SQLite's `PRAGMA synchronous` for this choice.
    pub fn pragma(self) -> &'static str {
        match self {
            SqliteSync::Full => "FULL",
            SqliteSync::Normal => "NORMAL",
        }
    }
}

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

/// A PostgreSQL URL with libpq's `connect_timeout` set to `timeout` (whole seconds, at least
/// libpq's least of 2), unless the URL or `PGCONNECT_TIMEOUT` already says. Without it an
/// attempt that never hears back (the server stopping or starting as it was made) waits
/// forever, and the pool stays a connection short for good: calls then queue for the ones
/// left.
fn with_connect_timeout(url: &str, timeout: Duration) -> String {
    if url.contains("connect_timeout=") || std::env::var_os("PGCONNECT_TIMEOUT").is_some() {
        return url.to_owned();
    }
    let secs = timeout.as_secs_f64().ceil().max(2.0) as u64;
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}connect_timeout={secs}")
}

pub struct ConnectionManager {
    url: String,
    engine: Engine,
    sqlite_sync: SqliteSync,
    sqlite_max_bytes: Option<u64>,
    sqlite_cache_kib: u64,
    statement_timeout_ms: u64,
}

impl ConnectionManager {
    pub(super) fn new(settings: &DbSettings) -> ConnectionManager {
        let engine = Engine::from_url(&settings.url);
        let url = match engine {
            Engine::Postgres => with_connect_timeout(&settings.url, settings.pool_timeout),
            Engine::Sqlite => settings.url.clone(),
        };
        ConnectionManager {
            url,
            engine,
            sqlite_sync: settings.sqlite_sync,
            sqlite_max_bytes: settings.sqlite_max_bytes,
            sqlite_cache_kib: settings.sqlite_cache_kib,
            statement_timeout_ms: settings.statement_timeout.as_millis() as u64,
        }
    }

    /// Opens and sets up one connection.
    pub(super) fn open(&self) -> Result<AnyConnection, diesel::ConnectionError> {
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
                // for outside tools, since Chorus itself never has two writers. secure_delete
                // zeroes the bytes a recall or delete frees, so recalled text leaves the file.
                // A negative cache_size is in KiB; the page cache is most of what a
                // connection's memory grows to as the database grows.
                let pragmas = format!(
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = {}; \
                     PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000; \
                     PRAGMA secure_delete = ON; PRAGMA cache_size = -{};",
                    self.sqlite_sync.pragma(),
                    self.sqlite_cache_kib
                );
                conn.batch_execute(&pragmas)
                    .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                warn_unless_plans_are_stable(&mut conn);
                if let Some(max_bytes) = self.sqlite_max_bytes {
                    cap_size(&mut conn, max_bytes)
                        .map_err(diesel::ConnectionError::CouldntSetupConfiguration)?;
                }
                Ok(AnyConnection::Sqlite(conn))
            }
        }
    }
}

/// Whether the linked SQLite keeps one plan per statement whatever values are bound (built
/// with `SQLITE_ENABLE_QPSG`, which `.cargo/config.toml` asks for). Without it a cached
/// statement with `LIMIT ?` is prepared again on every run.
pub fn sqlite_plans_are_stable(conn: &mut diesel::SqliteConnection) -> QueryResult<bool> {
    #[derive(diesel::QueryableByName)]
    struct Used {
        #[diesel(sql_type = diesel::sql_types::Bool)]
        used: bool,
    }
    diesel::sql_query("SELECT sqlite_compileoption_used('ENABLE_QPSG') AS used")
        .get_result::<Used>(conn)
        .map(|row| row.used)
}

/// Logs once per process when SQLite was built without stable plans: correct, but every
/// query with a `LIMIT` is planned anew on each call.
fn warn_unless_plans_are_stable(conn: &mut diesel::SqliteConnection) {
    static CHECKED: std::sync::Once = std::sync::Once::new();
    CHECKED.call_once(|| {
        if let Ok(false) = sqlite_plans_are_stable(conn) {
            tracing::warn!(
                "the linked SQLite was built without SQLITE_ENABLE_QPSG (build Chorus from its \
                 own directory, whose .cargo/config.toml sets LIBSQLITE3_FLAGS): queries with \
                 a LIMIT are prepared anew on every call"
            );
        }
    });
}

/// Caps the SQLite database at `max_bytes` (rounded down to whole pages, at least one). The
/// cap is per connection, so every connection sets it. SQLite keeps a database that is
/// already larger at its size: it cannot grow further, but nothing is lost.
fn cap_size(conn: &mut diesel::SqliteConnection, max_bytes: u64) -> QueryResult<()> {
    #[derive(diesel::QueryableByName)]
    struct PageSize {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        page_size: i64,
    }
    let page_size = diesel::sql_query("PRAGMA page_size")
        .get_result::<PageSize>(conn)?
        .page_size
        .max(1) as u64;
    let pages = (max_bytes / page_size).max(1);
    conn.batch_execute(&format!("PRAGMA max_page_count = {pages}"))
}

#[derive(Clone, Debug)]
pub struct DbSettings {
    pub url: String,
    pub pool_size: u32,
    pub pool_timeout: Duration,
    pub sqlite_sync: SqliteSync,
    /// SQLite: the largest the database may grow; None for no cap.
    pub sqlite_max_bytes: Option<u64>,
    /// SQLite: the most writes one commit takes (group commit; 1 commits each on its own).
    pub sqlite_write_batch: usize,
    /// SQLite: each connection's page cache in KiB.
    pub sqlite_cache_kib: u64,
    pub statement_timeout: Duration,
    /// PostgreSQL: whether clients' sends and acks that arrive together share transactions
    /// (see [`crate::db::Db::shares_commits`]; false: each takes its own, for benches that compare
    /// the two).
    pub shared_commits: bool,
}

/// Opens a single connection outside any pool (start-up, `chorus migrate`).
pub fn connect_once(settings: &DbSettings) -> Result<AnyConnection, diesel::ConnectionError> {
    ConnectionManager::new(settings).open()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(diesel::QueryableByName)]
    struct CacheSize {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        cache_size: i64,
    }

    #[test]
    fn every_sqlite_connection_takes_the_configured_page_cache() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = dir.path().join("cache.sqlite3").display().to_string();
        let settings = DbSettings {
            sqlite_cache_kib: 512,
            ..DbSettings::for_url(&url)
        };
        let manager = ConnectionManager::new(&settings);
        let Ok(AnyConnection::Sqlite(mut conn)) = manager.open() else {
            panic!("a SQLite connection to {url}");
        };
        let size = diesel::sql_query("PRAGMA cache_size")
            .get_result::<CacheSize>(&mut conn)
            .expect("PRAGMA cache_size");
        assert_eq!(size.cache_size, -512, "negative: KiB, not pages");
    }

    /// The build's SQLite keeps one plan per statement (see `.cargo/config.toml`): a build
    /// that lost the flag would still pass every other test, only slower.
    #[test]
    fn the_bundled_sqlite_keeps_one_plan_per_statement() {
        let mut conn = diesel::SqliteConnection::establish(":memory:").expect("in-memory SQLite");
        assert_eq!(sqlite_plans_are_stable(&mut conn), Ok(true));
    }

    #[test]
    fn opening_a_postgresql_connection_gives_up_after_the_pool_timeout() {
        let three = Duration::from_millis(2500);
        if std::env::var_os("PGCONNECT_TIMEOUT").is_some() {
            return;
        }
        assert_eq!(
            with_connect_timeout("postgres://u@h/db", three),
            "postgres://u@h/db?connect_timeout=3"
        );
        assert_eq!(
            with_connect_timeout("postgresql://u@h/db?sslmode=disable", three),
            "postgresql://u@h/db?sslmode=disable&connect_timeout=3"
        );
        assert_eq!(
            with_connect_timeout("postgres://u@h/db", Duration::from_millis(100)),
            "postgres://u@h/db?connect_timeout=2",
            "libpq's least is 2 s"
        );
        let chosen = "postgres://u@h/db?connect_timeout=30";
        assert_eq!(
            with_connect_timeout(chosen, three),
            chosen,
            "the user's own"
        );
    }
}
